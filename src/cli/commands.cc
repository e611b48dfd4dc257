#include "cli/commands.h"

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <optional>
#include <thread>

#include "absl/strings/ascii.h"
#include "api/codec.h"
#include "api/kinds.h"
#include "api/table.h"
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

std::string UrlEscape(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof(buf), "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

std::string CollectionPath(const api::KindInfo& k, const std::string& ns) {
  std::string base = k.group.empty() ? std::string("/api/v1") : StrCat("/apis/", k.group, "/", k.version);
  if (k.namespaced && !ns.empty()) return StrCat(base, "/namespaces/", UrlEscape(ns), "/", k.resource);
  return StrCat(base, "/", k.resource);
}

std::string ObjectPath(const api::KindInfo& k, const std::string& ns, const std::string& name) {
  return StrCat(CollectionPath(k, ns), "/", UrlEscape(name));
}

// "persistentvolumeclaim/data", "storageclass.storage.k8s.io/fast".
std::string TypedName(const api::KindInfo& k, const std::string& name) {
  return k.group.empty() ? StrCat(k.singular, "/", name) : StrCat(k.singular, ".", k.group, "/", name);
}

std::string Quoted(const api::KindInfo& k, const std::string& name) {
  return k.group.empty() ? StrCat(k.singular, " \"", name, "\"")
                         : StrCat(k.singular, ".", k.group, " \"", name, "\"");
}

absl::StatusOr<const api::KindInfo*> ResolveKind(std::string_view name) {
  const api::KindInfo* k = api::FindByUserName(name);
  if (k == nullptr) {
    return absl::NotFoundError(StrCat("the server doesn't have a resource type \"", name, "\""));
  }
  return k;
}

absl::Status ServerError(const ApiResponse& r) {
  std::string reason;
  json body = json::parse(r.body, nullptr, false);
  if (body.is_object()) reason = body.value("reason", "");
  std::string msg = http::ErrorMessage(r);
  std::string text = reason.empty() ? msg : StrCat("Error from server (", reason, "): ", msg);
  switch (r.code) {
    case 404: return absl::NotFoundError(text);
    case 409: return absl::AbortedError(text);
    case 400:
    case 422: return absl::InvalidArgumentError(text);
    case 401:
    case 403: return absl::PermissionDeniedError(text);
    default: return absl::InternalError(text);
  }
}

absl::StatusOr<json> ParseBody(const ApiResponse& r) {
  json body = json::parse(r.body, nullptr, false);
  if (body.is_discarded()) return absl::InternalError("the server's answer is not JSON");
  return body;
}

std::string NamespaceFor(const ApiClient& client, const Target& t) {
  return t.namespace_.empty() ? client.default_namespace() : t.namespace_;
}

// Lists all pages of a collection; `resource_version`, if given, gets the
// version of the first page (where a watch should start).
absl::StatusOr<std::vector<json>> ListAll(ApiClient& client, const std::string& path, const std::string& query,
                                          std::string* resource_version = nullptr) {
  std::vector<json> items;
  std::string cont;
  while (true) {
    std::string target = StrCat(path, "?limit=500", query.empty() ? "" : "&", query);
    if (!cont.empty()) target += StrCat("&continue=", UrlEscape(cont));
    BERTH_ASSIGN_OR_RETURN(ApiResponse r, client.Call("GET", target));
    if (r.code != 200) return ServerError(r);
    BERTH_ASSIGN_OR_RETURN(json list, ParseBody(r));
    if (resource_version != nullptr && resource_version->empty()) {
      *resource_version = list["metadata"].value("resourceVersion", "");
    }
    for (auto& item : list["items"]) items.push_back(std::move(item));
    cont = list["metadata"].value("continue", "");
    if (cont.empty()) return items;
  }
}

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
  if (s.size() < 15) s.resize(15, ' ');
  else s += " ";
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
// reported at the end, one "error: " line each (main adds the first prefix).
class ErrorList {
 public:
  void Add(const absl::Status& st) {
    if (first_.ok()) first_ = st;
    if (!text_.empty()) text_ += "\nerror: ";
    text_ += std::string(st.message());
  }
  absl::Status status() const {
    return first_.ok() ? absl::OkStatus() : absl::Status(first_.code(), text_);
  }

 private:
  absl::Status first_;
  std::string text_;
};

std::string Capitalised(std::string_view s) {
  std::string out(s);
  if (!out.empty()) out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
  return out;
}

}  // namespace

std::optional<json> JsonPath(const json& object, std::string_view path) {
  std::string_view p = path;
  if (p.size() >= 2 && p.front() == '{' && p.back() == '}') p = p.substr(1, p.size() - 2);
  if (!p.empty() && p.front() == '.') p.remove_prefix(1);
  const json* cur = &object;
  while (!p.empty()) {
    size_t end = p.find_first_of(".[");
    std::string_view key = p.substr(0, end);
    if (!key.empty()) {
      if (!cur->is_object() || !cur->contains(key)) return std::nullopt;
      cur = &(*cur)[std::string(key)];
    }
    if (end == std::string_view::npos) break;
    p = p.substr(end);
    if (p.front() == '.') {
      p.remove_prefix(1);
      continue;
    }
    size_t close = p.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    std::string_view index = p.substr(1, close - 1);
    p = p.substr(close + 1);
    if (!p.empty() && p.front() == '.') p.remove_prefix(1);
    if (!cur->is_array()) return std::nullopt;
    if (index.starts_with("?(@.")) {
      // ?(@.type=="Ready")
      std::string_view expr = index.substr(4, index.size() - 5);
      size_t eq = expr.find("==");
      if (eq == std::string_view::npos) return std::nullopt;
      std::string field(expr.substr(0, eq));
      std::string value(expr.substr(eq + 2));
      if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'')) value = value.substr(1, value.size() - 2);
      const json* found = nullptr;
      for (const auto& e : *cur) {
        if (e.is_object() && e.contains(field) && e[field].is_string() && e[field] == value) {
          found = &e;
          break;
        }
      }
      if (found == nullptr) return std::nullopt;
      cur = found;
    } else {
      size_t i = 0;
      if (!absl::SimpleAtoi(std::string(index), &i) || i >= cur->size()) return std::nullopt;
      cur = &(*cur)[i];
    }
  }
  return *cur;
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

absl::Status Apply(ApiClient& client, const std::vector<std::string>& files, const Target& target,
                   std::ostream& out) {
  if (files.empty()) return absl::InvalidArgumentError("must specify -f FILE|DIR|-");
  BERTH_ASSIGN_OR_RETURN(std::vector<json> manifests, ReadManifests(files));
  ErrorList errors;
  for (json& m : manifests) {
    const std::string api_version = m.value("apiVersion", ""), kind_name = m.value("kind", "");
    const api::KindInfo* kind = api::FindKind(api_version, kind_name);
    if (kind == nullptr) {
      return absl::NotFoundError(StrCat("no matches for kind \"", kind_name, "\" in version \"", api_version, "\""));
    }
    if (!m.contains("metadata") || !m["metadata"].is_object()) m["metadata"] = json::object();
    json& md = m["metadata"];
    std::string ns;
    if (kind->namespaced) {
      ns = md.value("namespace", "");
      if (!target.namespace_.empty() && !ns.empty() && ns != target.namespace_) {
        return absl::InvalidArgumentError(StrCat("the namespace from the provided object \"", ns,
                                                 "\" does not match the namespace \"", target.namespace_,
                                                 "\". You must pass '--namespace=", ns, "' to perform this operation."));
      }
      if (ns.empty()) ns = NamespaceFor(client, target);
    }
    const std::string name = md.value("name", "");
    if (name.empty()) return absl::InvalidArgumentError("apply needs metadata.name in every object");
    json applied = m;
    if (applied["metadata"].contains("annotations") && applied["metadata"]["annotations"].is_object()) {
      applied["metadata"]["annotations"].erase(kLastApplied);
      if (applied["metadata"]["annotations"].empty()) applied["metadata"].erase("annotations");
    }
    const std::string applied_text = applied.dump();
    m["metadata"]["annotations"][kLastApplied] = applied_text;
    BERTH_ASSIGN_OR_RETURN(ApiResponse got, client.Call("GET", ObjectPath(*kind, ns, name)));
    absl::Status st;
    if (got.code == 404) {
      BERTH_ASSIGN_OR_RETURN(ApiResponse r, client.Call("POST", CollectionPath(*kind, ns), m.dump()));
      if (r.code == 201 || r.code == 200) {
        out << TypedName(*kind, name) << " created\n";
      } else {
        st = ServerError(r);
      }
    } else if (got.code == 200) {
      BERTH_ASSIGN_OR_RETURN(json current, ParseBody(got));
      json original = json::object();
      std::string previous = current["metadata"].value("annotations", json::object()).value(kLastApplied, "");
      if (!previous.empty()) {
        original = json::parse(previous, nullptr, false);
        if (original.is_discarded()) original = json::object();
      }
      json patch = ThreeWayMergePatch(original, m, current);
      if (patch.empty()) {
        out << TypedName(*kind, name) << " unchanged\n";
        continue;
      }
      BERTH_ASSIGN_OR_RETURN(ApiResponse r, client.Call("PATCH", ObjectPath(*kind, ns, name), patch.dump(), kMergePatch));
      if (r.code == 200) {
        out << TypedName(*kind, name) << " configured\n";
      } else {
        st = ServerError(r);
      }
    } else {
      st = ServerError(got);
    }
    if (!st.ok()) errors.Add(st);
  }
  return errors.status();
}

absl::Status Get(ApiClient& client, const std::string& kind_name, const std::vector<std::string>& names,
                 const Target& target, const std::string& output, const std::string& selector, bool watch,
                 std::ostream& out) {
  BERTH_ASSIGN_OR_RETURN(const api::KindInfo* kind, ResolveKind(kind_name));
  const std::string ns = kind->namespaced && !target.all_namespaces ? NamespaceFor(client, target) : "";
  const bool with_ns = kind->namespaced && target.all_namespaces;
  if (output != "" && output != "wide" && output != "yaml" && output != "json" && output != "name") {
    return absl::InvalidArgumentError(StrCat("unable to match a printer suitable for the output format \"", output,
                                             "\", allowed formats are: json,name,wide,yaml"));
  }
  std::vector<json> items;
  std::string list_rv;
  if (names.empty()) {
    std::string query = selector.empty() ? "" : StrCat("labelSelector=", UrlEscape(selector));
    BERTH_ASSIGN_OR_RETURN(items, ListAll(client, CollectionPath(*kind, ns), query, &list_rv));
  } else {
    if (watch) {
      // The version to watch from, read before the objects: a change in
      // between is seen twice rather than never.
      BERTH_ASSIGN_OR_RETURN(ApiResponse lr, client.Call("GET", StrCat(CollectionPath(*kind, ns), "?limit=1")));
      if (lr.code != 200) return ServerError(lr);
      BERTH_ASSIGN_OR_RETURN(json list, ParseBody(lr));
      list_rv = list["metadata"].value("resourceVersion", "");
    }
    for (const auto& n : names) {
      BERTH_ASSIGN_OR_RETURN(ApiResponse r, client.Call("GET", ObjectPath(*kind, ns, n)));
      if (r.code != 200) return ServerError(r);
      BERTH_ASSIGN_OR_RETURN(json o, ParseBody(r));
      items.push_back(std::move(o));
    }
  }
  auto print = [&](const std::vector<json>& objs, bool headers) {
    if (output == "yaml" || output == "json") {
      json doc;
      if (names.size() == 1 && !watch) {
        doc = objs.at(0);
      } else if (watch) {
        for (const auto& o : objs) out << (output == "json" ? o.dump(4) + "\n" : "---\n" + api::EncodeYaml(o));
        return;
      } else {
        doc = {{"apiVersion", "v1"}, {"kind", "List"}, {"items", objs}, {"metadata", {{"resourceVersion", ""}}}};
      }
      out << (output == "json" ? doc.dump(4) + "\n" : api::EncodeYaml(doc));
      return;
    }
    if (output == "name") {
      for (const auto& o : objs) out << TypedName(*kind, o["metadata"].value("name", "")) << "\n";
      return;
    }
    json table = api::BuildTable(*kind, objs, absl::Now(), "");
    out << api::RenderTable(table, output == "wide", with_ns, headers);
  };
  if (items.empty() && !watch && names.empty()) {
    if (kind->namespaced && !target.all_namespaces) {
      std::cerr << "No resources found in " << ns << " namespace.\n";
    } else {
      std::cerr << "No resources found\n";
    }
  } else if (!items.empty() || output == "yaml" || output == "json") {
    if (!(items.empty() && watch)) print(items, true);
  }
  out.flush();
  if (!watch) return absl::OkStatus();
  // Watch from the version the list was read at, so no change between the
  // list and the watch is lost.
  std::string rv = list_rv.empty() ? "0" : list_rv;
  std::string query = StrCat("?watch=1&resourceVersion=", rv);
  if (!selector.empty()) query += StrCat("&labelSelector=", UrlEscape(selector));
  if (names.size() == 1) query += StrCat("&fieldSelector=metadata.name%3D", UrlEscape(names[0]));
  bool headers = items.empty();
  absl::Status stream_error;
  auto r = client.Stream(CollectionPath(*kind, ns) + query, "application/json", [&](const std::string& line) {
    json e = json::parse(line, nullptr, false);
    if (!e.is_object()) return true;
    std::string type = e.value("type", "");
    if (type == "ERROR") {
      stream_error = absl::UnavailableError(e["object"].value("message", "watch ended"));
      return false;
    }
    if (type == "BOOKMARK") return true;
    print({e["object"]}, headers);
    headers = false;
    out.flush();
    return true;
  });
  if (!r.ok()) return r.status();
  if (r->code != 200) return ServerError(*r);
  return stream_error;
}

absl::Status Describe(ApiClient& client, const std::string& kind_name, const std::vector<std::string>& names,
                      const Target& target, std::ostream& out) {
  BERTH_ASSIGN_OR_RETURN(const api::KindInfo* kind, ResolveKind(kind_name));
  const std::string ns = kind->namespaced ? NamespaceFor(client, target) : "";
  std::vector<json> objects;
  if (names.empty()) {
    BERTH_ASSIGN_OR_RETURN(objects, ListAll(client, CollectionPath(*kind, ns), ""));
  }
  for (const auto& n : names) {
    BERTH_ASSIGN_OR_RETURN(ApiResponse r, client.Call("GET", ObjectPath(*kind, ns, n)));
    if (r.code != 200) return ServerError(r);
    BERTH_ASSIGN_OR_RETURN(json o, ParseBody(r));
    objects.push_back(std::move(o));
  }
  bool first = true;
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
          len -= static_cast<size_t>(std::count(s.end() - std::min<std::ptrdiff_t>(2, static_cast<std::ptrdiff_t>(s.size())), s.end(), '='));
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
    std::string query = StrCat("fieldSelector=", UrlEscape(StrCat("involvedObject.name=", md.value("name", ""),
                                                                  ",involvedObject.uid=", md.value("uid", ""))));
    auto events = ListAll(client, CollectionPath(*api::FindResource("", "events"), kind->namespaced ? ns : "default"), query);
    if (!kind->namespaced && events.ok()) {
      // Events about cluster-scoped objects may live in any namespace.
      auto all = ListAll(client, CollectionPath(*api::FindResource("", "events"), ""), query);
      if (all.ok()) events = std::move(all);
    }
    if (!events.ok() || events->empty()) {
      out << Pad("Events") << "<none>\n";
    } else {
      out << "Events:\n";
      json table = api::BuildTable(*api::FindResource("", "events"), *events, absl::Now(), "");
      out << Indent(api::RenderTable(table, false, false), 2);
    }
  }
  return absl::OkStatus();
}

absl::Status Delete(ApiClient& client, const std::string& kind_name, const std::vector<std::string>& names,
                    const std::vector<std::string>& files, const Target& target, bool wait,
                    absl::Duration timeout, std::ostream& out, std::optional<int64_t> grace_period_seconds) {
  std::vector<std::tuple<const api::KindInfo*, std::string, std::string>> todo;
  if (!files.empty()) {
    BERTH_ASSIGN_OR_RETURN(std::vector<json> manifests, ReadManifests(files));
    for (const auto& m : manifests) {
      const api::KindInfo* k = api::FindKind(m.value("apiVersion", ""), m.value("kind", ""));
      if (k == nullptr) return absl::NotFoundError(StrCat("no matches for kind \"", m.value("kind", ""), "\""));
      json md = m.value("metadata", json::object());
      std::string ns = k->namespaced ? md.value("namespace", NamespaceFor(client, target)) : "";
      todo.emplace_back(k, ns, md.value("name", ""));
    }
  } else {
    if (kind_name.empty() || names.empty()) return absl::InvalidArgumentError("must specify KIND NAME... or -f FILE");
    BERTH_ASSIGN_OR_RETURN(const api::KindInfo* k, ResolveKind(kind_name));
    for (const auto& n : names) todo.emplace_back(k, k->namespaced ? NamespaceFor(client, target) : "", n);
  }
  ErrorList errors;
  std::vector<std::tuple<const api::KindInfo*, std::string, std::string>> deleted;
  for (const auto& [k, ns, name] : todo) {
    json options = {{"kind", "DeleteOptions"}, {"apiVersion", "v1"}, {"propagationPolicy", "Background"}};
    if (grace_period_seconds) options["gracePeriodSeconds"] = *grace_period_seconds;
    BERTH_ASSIGN_OR_RETURN(ApiResponse r, client.Call("DELETE", ObjectPath(*k, ns, name), options.dump()));
    if (r.code == 200 || r.code == 202) {
      out << Quoted(*k, name) << " deleted\n";
      deleted.emplace_back(k, ns, name);
    } else {
      errors.Add(ServerError(r));
    }
  }
  if (wait) {
    const absl::Time deadline = absl::Now() + timeout;
    for (const auto& [k, ns, name] : deleted) {
      while (true) {
        BERTH_ASSIGN_OR_RETURN(ApiResponse r, client.Call("GET", ObjectPath(*k, ns, name)));
        if (r.code == 404) break;
        if (absl::Now() >= deadline) {
          return absl::DeadlineExceededError(StrCat("timed out waiting for ", TypedName(*k, name), " to be deleted (finalizers: ",
                                                    ParseBody(r).value_or(json::object())["metadata"].value("finalizers", json::array()).dump(), ")"));
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
  }
  return errors.status();
}

absl::Status Wait(ApiClient& client, const std::string& kind_slash_name, const std::string& for_condition,
                  const Target& target, absl::Duration timeout, std::ostream& out) {
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
      auto v = JsonPath(json::parse(r.body, nullptr, false), StrCat("{.status.conditions[?(@.type==\"", cond, "\")].status}"));
      return v && v->is_string() && absl::AsciiStrToLower(v->get<std::string>()) == absl::AsciiStrToLower(absl::string_view(want.data(), want.size()));
    };
  } else {
    return absl::InvalidArgumentError("--for must be delete, condition=NAME[=VALUE] or jsonpath='{...}'=VALUE");
  }
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    BERTH_ASSIGN_OR_RETURN(ApiResponse r, client.Call("GET", ObjectPath(*kind, ns, name)));
    if (met(r)) {
      out << TypedName(*kind, name) << (for_condition == "delete" ? " deleted" : " condition met") << "\n";
      return absl::OkStatus();
    }
    if (r.code != 200 && r.code != 404) return ServerError(r);
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(StrCat("timed out waiting for the condition on ", kind->resource, "/", name));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
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
    query = StrCat("fieldSelector=", UrlEscape(StrCat("involvedObject.kind=", k->kind, ",involvedObject.name=",
                                                      for_object.substr(slash + 1))));
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
    std::cerr << (ns.empty() ? std::string("No events found.") : StrCat("No events found in ", ns, " namespace.")) << "\n";
    return absl::OkStatus();
  }
  out << api::RenderTable(api::BuildTable(events_kind, events, absl::Now(), ""), false, target.all_namespaces);
  return absl::OkStatus();
}

absl::Status ErrorFromResponse(const ApiResponse& r) { return ServerError(r); }

}  // namespace berth::cli
