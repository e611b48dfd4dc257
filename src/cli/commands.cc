#include "cli/commands.h"

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"
#include "api/codec.h"
#include "api/kinds.h"
#include "api/table.h"
#include "cli/get.h"
#include "common/fs.h"
#include "common/status.h"
#include "common/strings.h"

namespace berth::cli {
namespace {

using http::ApiClient;
using http::ApiResponse;
using nlohmann::json;

constexpr char kLastApplied[] = "kubectl.kubernetes.io/last-applied-configuration";
constexpr char kMergePatch[] = "application/merge-patch+json";
// How often delete --wait and wait look at the object again.
constexpr absl::Duration kPollInterval = absl::Milliseconds(100);

std::string Labels(const json& m) {
  if (!m.is_object() || m.empty()) return "<none>";
  std::string out;
  for (const auto& [k, v] : m.items()) {
    if (!out.empty()) out += "\n               ";
    out += StrCat(k, "=", v.is_string() ? v.get<std::string>() : v.dump());
  }
  return out;
}

std::string Pad(std::string_view label) {
  std::string s = StrCat(label, ":");
  if (s.size() < 15)
    s.resize(15, ' ');
  else
    s += " ";
  return s;
}

std::string Indent(const std::string& text, int spaces) {
  std::string out, pad(static_cast<size_t>(spaces), ' ');
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    if (nl == std::string::npos) nl = text.size();
    out += pad + text.substr(start, nl - start) + "\n";
    start = nl + 1;
  }
  return out;
}

// Errors of a command that carries on past failures (apply, delete): all
// reported at the end, one line each (FormatError adds the prefixes).
class ErrorList {
 public:
  void Add(const absl::Status& st) {
    if (first_.ok()) first_ = st;
    if (!text_.empty()) text_ += "\n";
    text_ += std::string(st.message());
  }
  absl::Status status() const { return first_.ok() ? absl::OkStatus() : absl::Status(first_.code(), text_); }

 private:
  absl::Status first_;
  std::string text_;
};

// An RFC 3339 time of an event, if it has one.
std::optional<absl::Time> EventTime(const json& e, std::initializer_list<const char*> fields) {
  for (const char* f : fields) {
    absl::Time t;
    std::string err;
    if (e.contains(f) && e[f].is_string() && absl::ParseTime(absl::RFC3339_full, e[f].get<std::string>(), &t, &err)) {
      return t;
    }
  }
  return std::nullopt;
}

// describe's Events section as kubectl prints it: Type, Reason, Age ("5m",
// "2m (x4 over 10m)"), From, Message; oldest first.
std::string DescribeEvents(std::vector<json> events, absl::Time now) {
  auto last = [](const json& e) {
    return EventTime(e, {"lastTimestamp", "eventTime", "firstTimestamp"}).value_or(absl::InfinitePast());
  };
  std::stable_sort(events.begin(), events.end(), [&](const json& a, const json& b) { return last(a) < last(b); });
  std::vector<std::vector<std::string>> lines = {{"Type", "Reason", "Age", "From", "Message"},
                                                 {"----", "------", "----", "----", "-------"}};
  for (const json& e : events) {
    std::string age = "<unknown>";
    if (auto t = EventTime(e, {"lastTimestamp", "eventTime", "firstTimestamp"})) age = api::HumanDuration(now - *t);
    const int64_t count = e.contains("count") && e["count"].is_number_integer() ? e["count"].get<int64_t>() : 1;
    if (auto first = EventTime(e, {"firstTimestamp", "eventTime"}); count > 1 && first) {
      age += StrCat(" (x", count, " over ", api::HumanDuration(now - *first), ")");
    }
    const json source = e.value("source", json::object());
    std::string from = source.is_object() ? source.value("component", "") : "";
    if (from.empty()) from = e.value("reportingComponent", "");
    if (source.is_object() && !source.value("host", "").empty()) from += ", " + source.value("host", "");
    lines.push_back({e.value("type", ""), e.value("reason", ""), age, from, e.value("message", "")});
  }
  return api::Tabulate(lines);
}

std::string Capitalised(std::string_view s) {
  std::string out(s);
  if (!out.empty()) out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
  return out;
}

}  // namespace

// The merge patch that takes `current` to `modified`, deleting what the
// previous apply (`original`) set and `modified` no longer has.
json ThreeWayMergePatch(const json& original, const json& modified, const json& current) {
  json patch = json::object();
  for (const auto& [k, v] : modified.items()) {
    const json cur = current.is_object() && current.contains(k) ? current[k] : json();
    if (v.is_object() && cur.is_object()) {
      const json orig = original.is_object() && original.contains(k) ? original[k] : json::object();
      json sub = ThreeWayMergePatch(orig, v, cur);
      if (!sub.empty()) patch[k] = std::move(sub);
    } else if (cur != v) {
      patch[k] = v;
    }
  }
  if (original.is_object()) {
    for (const auto& [k, v] : original.items()) {
      if (!modified.contains(k) && current.is_object() && current.contains(k)) patch[k] = nullptr;
    }
  }
  return patch;
}

absl::StatusOr<std::vector<json>> ReadManifests(const std::vector<std::string>& files) {
  std::vector<json> out;
  for (const auto& f : files) {
    std::vector<std::string> paths;
    std::error_code ec;
    if (f == "-") {
      std::string text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
      auto docs = api::DecodeManifests(text);
      if (!docs.ok()) return absl::InvalidArgumentError(StrCat("error parsing stdin: ", docs.status().message()));
      for (auto& d : *docs) out.push_back(std::move(d));
      continue;
    }
    if (std::filesystem::is_directory(f, ec)) {
      for (const auto& e : std::filesystem::directory_iterator(f, ec)) {
        std::string ext = e.path().extension();
        if (e.is_regular_file() && (ext == ".yaml" || ext == ".yml" || ext == ".json")) paths.push_back(e.path());
      }
      std::sort(paths.begin(), paths.end());
    } else {
      paths.push_back(f);
    }
    for (const auto& p : paths) {
      auto text = ReadFile(p);
      if (!text.ok()) {
        return absl::NotFoundError(StrCat("the path \"", p, "\" does not exist"));
      }
      auto docs = api::DecodeManifests(*text);
      if (!docs.ok()) return absl::InvalidArgumentError(StrCat("error parsing ", p, ": ", docs.status().message()));
      for (auto& d : *docs) out.push_back(std::move(d));
    }
  }
  return out;
}

namespace {

absl::Status DescribeKind(ApiClient& client, const api::KindInfo& kind_info, const std::vector<std::string>& names,
                          const Target& target, const std::string& label_selector, bool& first, std::ostream& out) {
  const api::KindInfo* kind = &kind_info;
  const std::string ns = kind->namespaced && !target.all_namespaces ? NamespaceFor(client, target) : "";
  std::vector<json> objects;
  if (names.empty()) {
    std::string query = label_selector.empty() ? "" : StrCat("labelSelector=", UrlEscape(label_selector));
    BERTH_ASSIGN_OR_RETURN(objects, ListAll(client, CollectionPath(*kind, ns), query));
  }
  for (const auto& n : names) {
    BERTH_ASSIGN_OR_RETURN(json o, GetObject(client, *kind, ns, n));
    objects.push_back(std::move(o));
  }
  for (json& o : objects) {
    if (!first) out << "\n\n";
    first = false;
    const json md = o["metadata"];
    out << Pad("Name") << md.value("name", "") << "\n";
    if (kind->namespaced) out << Pad("Namespace") << md.value("namespace", "") << "\n";
    out << Pad("Labels") << Labels(md.value("labels", json::object())) << "\n";
    json ann = md.value("annotations", json::object());
    if (ann.is_object()) ann.erase(kLastApplied);
    out << Pad("Annotations") << Labels(ann) << "\n";
    if (md.contains("finalizers")) out << Pad("Finalizers") << md["finalizers"].dump() << "\n";
    out << Pad("Created") << md.value("creationTimestamp", "") << "\n";
    if (md.contains("deletionTimestamp")) out << Pad("Terminating") << md.value("deletionTimestamp", "") << "\n";
    if (kind->kind == "Secret") {
      // Never the values: their sizes only, as kubectl does.
      out << Pad("Type") << o.value("type", "") << "\n\nData\n====\n";
      json data = o.value("data", json::object());
      for (const auto& [k, v] : data.items()) {
        size_t len = v.is_string() ? v.get<std::string>().size() * 3 / 4 : 0;
        if (v.is_string()) {
          const std::string& s = v.get_ref<const std::string&>();
          len -= static_cast<size_t>(
              std::count(s.end() - std::min<std::ptrdiff_t>(2, static_cast<std::ptrdiff_t>(s.size())), s.end(), '='));
        }
        out << k << ":  " << len << " bytes\n";
      }
    } else {
      for (const auto& [k, v] : o.items()) {
        if (k == "metadata" || k == "apiVersion" || k == "kind") continue;
        if (v.is_object() || v.is_array()) {
          out << Capitalised(k) << ":\n" << Indent(api::EncodeYaml(v), 2);
        } else {
          out << Pad(Capitalised(k)) << (v.is_string() ? v.get<std::string>() : v.dump()) << "\n";
        }
      }
    }
    out << EventsSection(client, *kind, o);
  }
  return absl::OkStatus();
}

}  // namespace

std::string EventsSection(ApiClient& client, const api::KindInfo& kind, const json& object) {
  // kubectl's selection: the events whose involvedObject is this object.
  const json md = object.value("metadata", json::object());
  std::string query = StrCat("fieldSelector=", UrlEscape(StrCat("involvedObject.name=", md.value("name", ""),
                                                                ",involvedObject.kind=", kind.kind,
                                                                ",involvedObject.uid=", md.value("uid", ""))));
  const std::string object_ns = md.value("namespace", "");
  auto events =
      ListAll(client, CollectionPath(*api::FindResource("", "events"), kind.namespaced ? object_ns : "default"), query);
  if (!kind.namespaced && events.ok()) {
    // Events about cluster-scoped objects may live in any namespace.
    auto all = ListAll(client, CollectionPath(*api::FindResource("", "events"), ""), query);
    if (all.ok()) events = std::move(all);
  }
  if (!events.ok() || events->empty()) return StrCat(Pad("Events"), "<none>\n");
  return StrCat("Events:\n", Indent(DescribeEvents(*events, absl::Now()), 2));
}

absl::Status Describe(ApiClient& client, const std::vector<std::string>& args, const Target& target,
                      const std::string& label_selector, std::ostream& out) {
  BERTH_ASSIGN_OR_RETURN(std::vector<KindRequest> requests, ParseResourceArgs(args));
  bool first = true;
  for (const auto& req : requests) {
    BERTH_RETURN_IF_ERROR(DescribeKind(client, *req.kind, req.names, target, label_selector, first, out));
  }
  return absl::OkStatus();
}

absl::Status Delete(ApiClient& client, const DeleteOptions& o, std::ostream& out, Clock& clock) {
  const Target& target = o.target;
  const bool wait = o.wait;
  std::vector<std::tuple<const api::KindInfo*, std::string, std::string>> todo;
  if (!o.files.empty()) {
    BERTH_ASSIGN_OR_RETURN(std::vector<json> manifests, ReadManifests(o.files));
    for (const auto& m : manifests) {
      const api::KindInfo* k = api::FindKind(m.value("apiVersion", ""), m.value("kind", ""));
      if (k == nullptr) return absl::NotFoundError(StrCat("no matches for kind \"", m.value("kind", ""), "\""));
      json md = m.value("metadata", json::object());
      std::string ns = k->namespaced ? md.value("namespace", NamespaceFor(client, target)) : "";
      todo.emplace_back(k, ns, md.value("name", ""));
    }
  } else {
    if (o.args.empty()) {
      return absl::InvalidArgumentError("You must provide one or more resources by argument or filename.");
    }
    BERTH_ASSIGN_OR_RETURN(std::vector<KindRequest> requests, ParseResourceArgs(o.args));
    const bool select = o.all || !o.label_selector.empty();
    for (const auto& req : requests) {
      const api::KindInfo* k = req.kind;
      const std::string ns = k->namespaced && !target.all_namespaces ? NamespaceFor(client, target) : "";
      if (req.names.empty() && !select) {
        return absl::InvalidArgumentError(
            "resource(s) were provided, but no name was specified (--all to delete every one)");
      }
      if (!req.names.empty() && select) {
        return absl::InvalidArgumentError("names cannot be provided when a selector or --all is specified");
      }
      for (const auto& n : req.names) todo.emplace_back(k, ns, n);
      if (select) {
        std::string query = o.label_selector.empty() ? "" : StrCat("labelSelector=", UrlEscape(o.label_selector));
        BERTH_ASSIGN_OR_RETURN(std::vector<json> items, ListAll(client, CollectionPath(*k, ns), query));
        for (const auto& item : items) {
          const json& md = item["metadata"];
          todo.emplace_back(k, md.value("namespace", ""), md.value("name", ""));
        }
      }
    }
    if (todo.empty() && select) {
      out << "No resources found\n";
      return absl::OkStatus();
    }
  }
  const std::optional<int64_t> grace_period_seconds = o.grace_period_seconds;
  const absl::Duration timeout = o.timeout;
  ErrorList errors;
  std::vector<std::tuple<const api::KindInfo*, std::string, std::string>> deleted;
  for (const auto& [k, ns, name] : todo) {
    json options = {{"kind", "DeleteOptions"}, {"apiVersion", "v1"}, {"propagationPolicy", "Background"}};
    if (grace_period_seconds) options["gracePeriodSeconds"] = *grace_period_seconds;
    BERTH_ASSIGN_OR_RETURN(ApiResponse r, client.Call("DELETE", ObjectPath(*k, ns, name), options.dump()));
    if (r.code == 200 || r.code == 202) {
      out << Quoted(*k, name) << " deleted\n";
      deleted.emplace_back(k, ns, name);
    } else if (r.code == 404 && o.ignore_not_found) {
      continue;
    } else {
      errors.Add(ServerError(r));
    }
  }
  if (wait) {
    const absl::Time deadline = clock.Now() + timeout;
    for (const auto& [k, ns, name] : deleted) {
      while (true) {
        BERTH_ASSIGN_OR_RETURN(ApiResponse r, client.Call("GET", ObjectPath(*k, ns, name)));
        if (r.code == 404) break;
        if (clock.Now() >= deadline) {
          return absl::DeadlineExceededError(
              StrCat("timed out waiting for ", TypedName(*k, name), " to be deleted (finalizers: ",
                     ParseBody(r).value_or(json::object())["metadata"].value("finalizers", json::array()).dump(), ")"));
        }
        clock.SleepUntil(std::min(clock.Now() + kPollInterval, deadline));
      }
    }
  }
  return errors.status();
}

absl::Status Wait(ApiClient& client, const std::string& kind_slash_name, const std::string& for_condition,
                  const Target& target, absl::Duration timeout, std::ostream& out, Clock& clock) {
  size_t slash = kind_slash_name.find('/');
  if (slash == std::string::npos) return absl::InvalidArgumentError("wait needs KIND/NAME");
  BERTH_ASSIGN_OR_RETURN(const api::KindInfo* kind, ResolveKind(kind_slash_name.substr(0, slash)));
  const std::string name = kind_slash_name.substr(slash + 1);
  const std::string ns = kind->namespaced ? NamespaceFor(client, target) : "";
  std::function<bool(const ApiResponse&)> met;
  if (for_condition == "delete") {
    met = [](const ApiResponse& r) { return r.code == 404; };
  } else if (for_condition.starts_with("jsonpath=")) {
    std::string expr = for_condition.substr(9);
    size_t close = expr.rfind('}');
    if (close == std::string::npos || close + 1 >= expr.size() || expr[close + 1] != '=') {
      return absl::InvalidArgumentError("--for=jsonpath='{.path}'=VALUE");
    }
    std::string path = expr.substr(0, close + 1), want = expr.substr(close + 2);
    met = [path, want](const ApiResponse& r) {
      if (r.code != 200) return false;
      auto v = JsonPath(json::parse(r.body, nullptr, false), path);
      if (!v) return false;
      return (v->is_string() ? v->get<std::string>() : v->dump()) == want;
    };
  } else if (for_condition.starts_with("condition=")) {
    std::string cond = for_condition.substr(10), want = "True";
    if (size_t eq = cond.find('='); eq != std::string::npos) {
      want = cond.substr(eq + 1);
      cond.resize(eq);
    }
    met = [cond, want](const ApiResponse& r) {
      if (r.code != 200) return false;
      auto v = JsonPath(json::parse(r.body, nullptr, false),
                        StrCat("{.status.conditions[?(@.type==\"", cond, "\")].status}"));
      return v && v->is_string() &&
             absl::AsciiStrToLower(v->get<std::string>()) ==
                 absl::AsciiStrToLower(absl::string_view(want.data(), want.size()));
    };
  } else {
    return absl::InvalidArgumentError("--for must be delete, condition=NAME[=VALUE] or jsonpath='{...}'=VALUE");
  }
  const absl::Time deadline = clock.Now() + timeout;
  while (true) {
    BERTH_ASSIGN_OR_RETURN(ApiResponse r, client.Call("GET", ObjectPath(*kind, ns, name)));
    if (met(r)) {
      out << TypedName(*kind, name) << (for_condition == "delete" ? " deleted" : " condition met") << "\n";
      return absl::OkStatus();
    }
    if (r.code != 200 && r.code != 404) return ServerError(r);
    if (clock.Now() >= deadline) {
      return absl::DeadlineExceededError(StrCat("timed out waiting for the condition on ", kind->resource, "/", name));
    }
    clock.SleepUntil(std::min(clock.Now() + kPollInterval, deadline));
  }
}

absl::Status Events(ApiClient& client, const Target& target, const std::string& for_object, std::ostream& out) {
  const api::KindInfo& events_kind = *api::FindResource("", "events");
  const std::string ns = target.all_namespaces ? "" : NamespaceFor(client, target);
  std::string query;
  if (!for_object.empty()) {
    size_t slash = for_object.find('/');
    if (slash == std::string::npos) return absl::InvalidArgumentError("--for needs KIND/NAME");
    BERTH_ASSIGN_OR_RETURN(const api::KindInfo* k, ResolveKind(for_object.substr(0, slash)));
    query = StrCat("fieldSelector=", UrlEscape(StrCat("involvedObject.kind=", k->kind,
                                                      ",involvedObject.name=", for_object.substr(slash + 1))));
  }
  BERTH_ASSIGN_OR_RETURN(std::vector<json> events, ListAll(client, CollectionPath(events_kind, ns), query));
  auto when = [](const json& e) {
    for (const char* f : {"lastTimestamp", "eventTime", "firstTimestamp"}) {
      if (e.contains(f) && e[f].is_string()) return e[f].get<std::string>();
    }
    return e["metadata"].value("creationTimestamp", "");
  };
  std::stable_sort(events.begin(), events.end(), [&](const json& a, const json& b) { return when(a) < when(b); });
  if (events.empty()) {
    std::cerr << (ns.empty() ? std::string("No events found.") : StrCat("No events found in ", ns, " namespace."))
              << "\n";
    return absl::OkStatus();
  }
  out << api::RenderTable(api::BuildTable(events_kind, events, absl::Now(), ""), false, target.all_namespaces);
  return absl::OkStatus();
}

absl::Status ErrorFromResponse(const ApiResponse& r) { return ServerError(r); }

std::string FormatError(const absl::Status& st) {
  std::string out;
  const std::string message(st.message());
  for (std::string_view line : Split(message, '\n')) {
    if (line.empty()) continue;
    if (!line.starts_with("Error from server") && !line.starts_with("error: ")) out += "error: ";
    out += StrCat(line, "\n");
  }
  if (out.empty()) out = StrCat("error: ", absl::StatusCodeToString(st.code()), "\n");
  return out;
}

}  // namespace berth::cli
