#include "apiserver/handler.h"

#include <algorithm>
#include <map>
#include <string_view>
#include <utility>

#include "apiserver/events_v1.h"

#include "absl/strings/numbers.h"
#include "api/codec.h"
#include "api/errors.h"
#include "api/json_text.h"
#include "api/table.h"
#include "berth/version.h"
#include "common/logging.h"
#include "common/status.h"
#include "common/strings.h"
#include "metrics/prometheus.h"
#include "spdlog/spdlog.h"

namespace berth::apiserver {
namespace {

using nlohmann::json;

constexpr char kJson[] = "application/json";

struct Route {
  const api::KindInfo* kind = nullptr;
  std::string ns;
  std::string name;
  std::string sub;
};

void SendJson(ResponseWriter& out, int code, const json& body) {
  out.Send(code, kJson, api::DumpJson(body, json::error_handler_t::replace));
}

void SendError(ResponseWriter& out, const absl::Status& st) {
  SendJson(out, api::ToHttpError(st).code, StatusObject(st));
}

std::vector<std::string> Segments(const std::string& path) {
  std::vector<std::string> out;
  for (auto s : Split(path, '/')) {
    if (!s.empty()) out.emplace_back(s);
  }
  return out;
}

json ResourceList(std::string_view group, std::string_view version) {
  json resources = json::array();
  if (group == eventsv1::kGroup && version == eventsv1::kVersion) {
    // No short name: "ev" is core/v1's, as in kube-apiserver.
    resources.push_back(
        {{"name", "events"},
         {"singularName", "event"},
         {"namespaced", true},
         {"kind", "Event"},
         {"verbs", {"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}}});
  }
  for (const auto& k : api::AllKinds()) {
    if (k.group != group || k.version != version) continue;
    json r = {{"name", k.resource},
              {"singularName", k.singular},
              {"namespaced", k.namespaced},
              {"kind", k.kind},
              {"verbs", {"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}}};
    if (!k.short_names.empty()) {
      r["shortNames"] = json::array();
      for (auto s : k.short_names) r["shortNames"].push_back(s);
    }
    resources.push_back(r);
    if (HasStatusSubresource(k)) {
      resources.push_back({{"name", StrCat(k.resource, "/status")},
                           {"singularName", ""},
                           {"namespaced", k.namespaced},
                           {"kind", k.kind},
                           {"verbs", {"get", "patch", "update"}}});
    }
    if (k.kind == "Pod") {
      resources.push_back({{"name", "pods/binding"},
                           {"singularName", ""},
                           {"namespaced", true},
                           {"kind", "Binding"},
                           {"verbs", {"create"}}});
      resources.push_back(
          {{"name", "pods/log"}, {"singularName", ""}, {"namespaced", true}, {"kind", "Pod"}, {"verbs", {"get"}}});
      for (const auto& [sub, options] :
           {std::pair{"pods/attach", "PodAttachOptions"}, {"pods/exec", "PodExecOptions"}}) {
        resources.push_back({{"name", sub},
                             {"singularName", ""},
                             {"namespaced", true},
                             {"kind", options},
                             {"verbs", {"create", "get"}}});
      }
    }
  }
  std::string gv = group.empty() ? std::string(version) : StrCat(group, "/", version);
  return {{"kind", "APIResourceList"}, {"apiVersion", "v1"}, {"groupVersion", gv}, {"resources", resources}};
}

json GroupList() {
  json groups = json::array();
  std::vector<std::string_view> seen;
  for (const auto& k : api::AllKinds()) {
    if (k.group.empty() || std::find(seen.begin(), seen.end(), k.group) != seen.end()) continue;
    seen.push_back(k.group);
    json v = {{"groupVersion", StrCat(k.group, "/", k.version)}, {"version", k.version}};
    groups.push_back({{"name", k.group}, {"versions", json::array({v})}, {"preferredVersion", v}});
  }
  // Served from core/v1 Events (apiserver/events_v1.h).
  json v = {{"groupVersion", eventsv1::kApiVersion}, {"version", eventsv1::kVersion}};
  groups.push_back({{"name", eventsv1::kGroup}, {"versions", json::array({v})}, {"preferredVersion", v}});
  return {{"kind", "APIGroupList"}, {"apiVersion", "v1"}, {"groups", groups}};
}

json VersionInfo() {
  return {{"major", "1"},    {"minor", "30"},           {"gitVersion", StrCat("v1.30.0+berth-", berth::kVersion)},
          {"gitCommit", ""}, {"gitTreeState", "clean"}, {"buildDate", ""},
          {"goVersion", ""}, {"compiler", "gcc"},       {"platform", "linux/amd64"}};
}

bool WantsTable(const HttpRequest& req) { return req.Header("accept").find("as=Table") != std::string::npos; }

absl::StatusOr<json> DecodeBody(const HttpRequest& req) {
  const std::string ct = req.Header("content-type");
  if (ct.find("protobuf") != std::string::npos) {
    return api::UnsupportedMediaType("berth speaks JSON (and YAML), not protobuf");
  }
  if (ct.find("yaml") != std::string::npos) {
    auto docs = api::DecodeManifests(req.body);
    if (!docs.ok()) return api::BadRequest(std::string(docs.status().message()));
    if (docs->size() != 1) return api::BadRequest("the request body must hold exactly one object");
    return std::move((*docs)[0]);
  }
  json body = json::parse(req.body, nullptr, false);
  if (body.is_discarded()) {
    return api::BadRequest("couldn't decode the request body as JSON");
  }
  return body;
}

absl::StatusOr<Route> ParseRoute(const std::vector<std::string>& segs, size_t start, std::string_view group,
                                 std::string_view version) {
  Route r;
  std::vector<std::string> rest(segs.begin() + static_cast<long>(start), segs.end());
  auto find = [&](const std::string& resource) -> const api::KindInfo* {
    const api::KindInfo* k = api::FindResource(group, resource);
    return k != nullptr && k->version == version ? k : nullptr;
  };
  if (rest.size() >= 3 && rest[0] == "namespaces") {
    const api::KindInfo* k = find(rest[2]);
    if (k != nullptr && k->namespaced) {
      r.kind = k;
      r.ns = rest[1];
      if (rest.size() >= 4) r.name = rest[3];
      if (rest.size() >= 5) r.sub = rest[4];
      if (rest.size() > 5) return absl::NotFoundError("the server could not find the requested resource");
      return r;
    }
  }
  if (rest.empty()) return absl::NotFoundError("the server could not find the requested resource");
  r.kind = find(rest[0]);
  if (r.kind == nullptr) return absl::NotFoundError("the server could not find the requested resource");
  if (rest.size() >= 2) r.name = rest[1];
  if (rest.size() >= 3) r.sub = rest[2];
  if (rest.size() > 3) return absl::NotFoundError("the server could not find the requested resource");
  return r;
}

json ListObject(const api::KindInfo& kind, const ListPage& page) {
  json meta = {{"resourceVersion", std::to_string(page.resource_version)}};
  if (!page.continue_token.empty()) meta["continue"] = page.continue_token;
  return {{"kind", StrCat(kind.kind, "List")},
          {"apiVersion", kind.api_version()},
          {"metadata", meta},
          {"items", page.items}};
}

absl::StatusOr<ListOptions> ListOptionsFrom(const HttpRequest& req) {
  ListOptions o;
  if (auto it = req.query.find("labelSelector"); it != req.query.end()) {
    auto sel = api::LabelSelector::Parse(it->second);
    if (!sel.ok()) return api::BadRequest(StrCat("unable to parse requirement: ", sel.status().message()));
    o.labels = std::move(*sel);
  }
  if (auto it = req.query.find("fieldSelector"); it != req.query.end()) {
    BERTH_ASSIGN_OR_RETURN(o.fields, FieldSelector::Parse(it->second));
  }
  if (auto it = req.query.find("limit"); it != req.query.end()) {
    int64_t limit = 0;
    if (!absl::SimpleAtoi(it->second, &limit) || limit < 0)
      return api::BadRequest("limit must be a non-negative integer");
    o.limit = static_cast<size_t>(limit);
  }
  if (auto it = req.query.find("continue"); it != req.query.end()) o.continue_token = it->second;
  return o;
}

// A whole list (no limit: kubectl --chunk-size=0, berth get, a client's
// informer) of plain JSON, written as the store reads it: each object's
// stored JSON as it is (parsed only for a selector), in chunks of about
// kListChunk bytes, from one snapshot of the store. Never the whole list in
// memory: 100,000 claims are ~100 MiB of JSON and several times that
// parsed, and the first byte goes out after the first chunk, not the last
// object. An error after the first chunk cuts the body short (the client
// sees a truncated list, as with kube-apiserver).
constexpr size_t kListChunk = 64 << 10;

void StreamList(store::Store& store, const api::KindInfo& kind, const std::string& ns, const ListOptions& opts,
                ResponseWriter& out) {
  std::string buf;
  bool started = false, first = true, gone = false;
  auto flush = [&] {
    if (!started) {
      if (!out.StartStream(200, kJson)) return false;
      started = true;
    }
    if (!out.WriteChunk(buf)) return false;
    buf.clear();
    return true;
  };
  const bool filter = !opts.labels.empty() || !opts.fields.empty();
  absl::Status st = store.ListStream(
      std::string(kind.resource), kind.namespaced ? ns : "",
      [&](int64_t rv) {
        buf = StrCat(R"({"kind":")", kind.kind, R"(List","apiVersion":")", kind.api_version(),
                     R"(","metadata":{"resourceVersion":")", rv, R"("},"items":[)");
      },
      [&](std::string_view data) {
        if (filter) {
          const json o = json::parse(data, nullptr, false);
          if (o.is_discarded()) return true;
          if (!opts.labels.empty()) {
            std::map<std::string, std::string> labels;
            const json* md = o.is_object() && o.contains("metadata") ? &o["metadata"] : nullptr;
            if (md != nullptr && md->is_object() && md->contains("labels") && (*md)["labels"].is_object()) {
              for (const auto& [k, v] : (*md)["labels"].items()) {
                if (v.is_string()) labels[k] = v.get<std::string>();
              }
            }
            if (!opts.labels.Matches(labels)) return true;
          }
          if (!opts.fields.empty() && !opts.fields.Matches(o)) return true;
        }
        if (!first) buf += ',';
        first = false;
        buf.append(data);
        if (buf.size() >= kListChunk && !flush()) {
          gone = true;
          return false;
        }
        return true;
      });
  if (!st.ok()) {
    if (!started) return SendError(out, st);
    spdlog::warn("list of {} cut short: {}", kind.resource, st.ToString());
    return;
  }
  if (gone) return;
  buf += "]}";
  if (!started) return out.Send(200, kJson, buf);
  (void)flush();
}

bool QueryTrue(const HttpRequest& req, const std::string& key) {
  auto it = req.query.find(key);
  return it != req.query.end() && (it->second == "true" || it->second == "1" || it->second.empty());
}

json EventJson(const api::KindInfo& kind, const std::string& type, const json& object, bool table) {
  if (!table || type == "BOOKMARK" || type == "ERROR") return {{"type", type}, {"object", object}};
  std::string rv = object.value("metadata", json::object()).value("resourceVersion", "");
  return {{"type", type}, {"object", api::BuildTable(kind, {object}, absl::Now(), rv)}};
}

}  // namespace

bool ApiHandler::IsLongRunning(const HttpRequest& request) {
  // kube-apiserver's long-running requests that berth serves: watches,
  // followed logs (GET .../pods/NAME/log?follow=true), exec and attach.
  if (request.path.starts_with("/api/v1/namespaces/") && request.path.find("/pods/") != std::string::npos &&
      (request.path.ends_with("/exec") || request.path.ends_with("/attach"))) {
    return true;
  }
  if (request.method != "GET") return false;
  if (QueryTrue(request, "watch")) return true;
  return request.path.starts_with("/api/v1/namespaces/") && request.path.ends_with("/log") &&
         request.path.find("/pods/") != std::string::npos && QueryTrue(request, "follow");
}

json StatusObject(const absl::Status& st) {
  if (st.ok()) {
    return {{"kind", "Status"}, {"apiVersion", "v1"}, {"metadata", json::object()}, {"status", "Success"}};
  }
  api::HttpError e = api::ToHttpError(st);
  json out = {{"kind", "Status"},
              {"apiVersion", "v1"},
              {"metadata", json::object()},
              {"status", "Failure"},
              {"message", std::string(st.message())},
              {"reason", e.reason},
              {"code", e.code}};
  if (std::string details = api::StatusDetails(st); !details.empty()) {
    json d = json::parse(details, nullptr, false);
    if (d.is_object()) out["details"] = std::move(d);
  }
  return out;
}

void ApiHandler::AddSubresource(const std::string& resource, const std::string& sub, SubresourceHandler handler,
                                std::vector<std::string> methods) {
  absl::MutexLock lock(&metrics_mu_);
  subresources_[{resource, sub}] = Served{std::move(handler), std::move(methods)};
}

ApiHandler::HoldBackStats ApiHandler::held_back() const {
  absl::MutexLock lock(&held_back_mu_);
  return held_back_;
}

void ApiHandler::AddMetricsCollector(MetricsCollector collector) {
  absl::MutexLock lock(&metrics_mu_);
  metrics_.push_back(std::move(collector));
}

void ApiHandler::Handle(const HttpRequest& req, ResponseWriter& out) {
  const std::vector<std::string> segs = Segments(req.path);
  if (req.method == "GET") {
    if (req.path == "/version" || req.path == "/version/") return SendJson(out, 200, VersionInfo());
    if (req.path == "/metrics") {
      std::string text;
      absl::MutexLock lock(&metrics_mu_);
      for (const auto& collect : metrics_) collect(&text);
      return out.Send(200, metrics::kTextContentType, text);
    }
    if (req.path == "/healthz" || req.path == "/readyz" || req.path == "/livez") {
      return out.Send(200, "text/plain; charset=utf-8", "ok");
    }
    if (req.path == "/api" || req.path == "/api/") {
      return SendJson(out, 200,
                      {{"kind", "APIVersions"}, {"versions", {"v1"}}, {"serverAddressByClientCIDRs", json::array()}});
    }
    if (req.path == "/apis" || req.path == "/apis/") return SendJson(out, 200, GroupList());
    if (req.path == "/openapi/v2") {
      // No published schema: an empty OpenAPI document (valid protobuf and
      // JSON) makes kubectl skip client-side validation; the server
      // validates strictly instead.
      if (req.Header("accept").find("protobuf") != std::string::npos) {
        return out.Send(200, "application/octet-stream", "");
      }
      return SendJson(out, 200,
                      {{"swagger", "2.0"},
                       {"info", {{"title", "berth"}, {"version", berth::kVersion}}},
                       {"paths", json::object()},
                       {"definitions", json::object()}});
    }
  }
  std::string_view group, version;
  size_t start = 0;
  if (segs.size() >= 2 && segs[0] == "api") {
    version = segs[1];
    start = 2;
  } else if (segs.size() >= 3 && segs[0] == "apis") {
    group = segs[1];
    version = segs[2];
    start = 3;
  } else if (segs.size() == 2 && segs[0] == "apis" && req.method == "GET") {
    const json all = GroupList();
    for (json g : all["groups"]) {
      if (g["name"] == segs[1]) {
        g["kind"] = "APIGroup";
        g["apiVersion"] = "v1";
        return SendJson(out, 200, g);
      }
    }
    return SendError(out, absl::NotFoundError("the server could not find the requested resource"));
  } else {
    return SendError(out, absl::NotFoundError("the server could not find the requested resource"));
  }
  if (segs.size() == start) {
    bool known = false;
    for (const auto& k : api::AllKinds()) known = known || (k.group == group && k.version == version);
    known = known || (group == eventsv1::kGroup && version == eventsv1::kVersion);
    if (!known || req.method != "GET") {
      return SendError(out, absl::NotFoundError("the server could not find the requested resource"));
    }
    return SendJson(out, 200, ResourceList(group, version));
  }
  // events.k8s.io/v1 is core/v1 Events, converted on the way in and out.
  const bool events_v1 = group == eventsv1::kGroup && version == eventsv1::kVersion;
  auto route = ParseRoute(segs, start, events_v1 ? "" : group, events_v1 ? "v1" : version);
  if (!route.ok()) return SendError(out, route.status());
  if (events_v1 && (route->kind->kind != "Event" || !route->sub.empty())) {
    return SendError(out, absl::NotFoundError("the server could not find the requested resource"));
  }
  // The object as the request's API version shows it, sent without a copy
  // when that is the stored form.
  auto send = [&out, events_v1](int code, const json& o) {
    if (events_v1) return SendJson(out, code, eventsv1::FromCore(o));
    return SendJson(out, code, o);
  };
  auto present_list = [&](const api::KindInfo& k, const ListPage& page) {
    json list = ListObject(k, page);
    if (events_v1) {
      list["apiVersion"] = eventsv1::kApiVersion;
      for (auto& item : list["items"]) item = eventsv1::FromCore(item);
    }
    return list;
  };
  const api::KindInfo& kind = *route->kind;
  const std::string& ns = route->ns;
  const std::string& name = route->name;
  if (!route->sub.empty() && route->sub != "status" && route->sub != "binding" && !ns.empty() && !name.empty()) {
    Served served;
    {
      absl::MutexLock lock(&metrics_mu_);
      auto it = subresources_.find(std::pair<std::string, std::string>(std::string(kind.resource), route->sub));
      if (it != subresources_.end()) served = it->second;
    }
    if (served.handler) {
      if (std::find(served.methods.begin(), served.methods.end(), req.method) == served.methods.end())
        return SendError(out, api::MethodNotAllowed(StrCat("method ", req.method, " is not supported")));
      absl::Status st = served.handler(req, out, ns, name);
      if (!st.ok()) SendError(out, st);
      return;
    }
  }
  if (!route->sub.empty() && route->sub != "status" && !(route->sub == "binding" && kind.kind == "Pod")) {
    return SendError(out, absl::NotFoundError("the server could not find the requested resource"));
  }
  if (route->sub == "status" && !HasStatusSubresource(kind)) {
    return SendError(out, absl::NotFoundError("the server could not find the requested resource"));
  }
  // dryRun=All (kubectl --dry-run=server): every check, nothing stored.
  bool dry_run = false;
  if (auto it = req.query.find("dryRun"); it != req.query.end() && req.method != "GET") {
    if (it->second != "All") {
      const char* options = req.method == "POST"     ? "CreateOptions"
                            : req.method == "DELETE" ? "DeleteOptions"
                            : req.method == "PATCH"  ? "PatchOptions"
                                                     : "UpdateOptions";
      return SendError(
          out,
          api::Invalid(StrCat(options, ".meta.k8s.io"), "",
                       {{"dryRun", StrCat("Unsupported value: \"", it->second, "\": supported values: \"All\"")}}));
    }
    dry_run = true;
  }
  if (kind.namespaced && ns.empty() && (req.method != "GET" || !name.empty())) {
    return SendError(out, api::BadRequest(StrCat(kind.kind, " is namespaced: use /namespaces/<ns>/", kind.resource)));
  }
  const Subresource sub = route->sub == "status" ? Subresource::kStatus : Subresource::kMain;
  const bool table = WantsTable(req);

  if (req.method == "GET" && !name.empty()) {
    auto got = registry_.GetShared(kind, ns, name);
    if (!got.ok()) return SendError(out, got.status());
    const json& object = **got;
    if (table) {
      const auto md = object.find("metadata");
      const std::string rv = md != object.end() && md->is_object() ? md->value("resourceVersion", "") : "";
      return SendJson(out, 200, api::BuildTable(kind, {object}, absl::Now(), rv));
    }
    return send(200, object);
  }
  if (req.method == "GET" && QueryTrue(req, "watch")) {
    auto opts = ListOptionsFrom(req);
    if (!opts.ok()) return SendError(out, opts.status());
    std::string rv;
    if (auto it = req.query.find("resourceVersion"); it != req.query.end()) rv = it->second;
    auto stream = registry_.Watch(kind, ns, rv, opts->labels);
    if (!stream.ok()) return SendError(out, stream.status());
    // The registry's watches are the store's own watchers, which can wake
    // the hub when they queue an event.
    std::unique_ptr<store::Watcher> watcher(dynamic_cast<store::Watcher*>(stream->watcher.get()));
    if (watcher == nullptr)
      return SendError(out, absl::InternalError("the registry's watch cannot notify the watch hub"));
    (void)stream->watcher.release();
    absl::Duration limit = options_.max_watch;
    if (auto it = req.query.find("timeoutSeconds"); it != req.query.end()) {
      int64_t secs = 0;
      if (absl::SimpleAtoi(it->second, &secs) && secs > 0) limit = std::min(limit, absl::Seconds(secs));
    }
    if (!out.StartStream(200, kJson)) return;
    // The stream goes on without this thread: the hub writes the initial
    // events, then the watcher's, bookmarks, and ends it at the deadline.
    std::shared_ptr<http::Stream> detached = out.Detach();
    if (detached == nullptr) return;
    WatchHub::Watch w;
    w.initial = std::move(stream->initial);
    w.watcher = std::move(watcher);
    if (!opts->fields.empty()) {
      w.filter = [fields = std::move(opts->fields)](const json& o) { return fields.Matches(o); };
    }
    w.encode = [k = &kind, table, events_v1](const std::string& type, const json& object, const std::string* text) {
      const bool convert = events_v1 && !table && type != "BOOKMARK" && type != "ERROR";
      if (!table && !convert) {
        // The common case, written around the object rather than a copy of
        // it in a {type, object} tree: the same bytes (keys sorted). The
        // store's own text of it, when there is one, is those bytes too
        // (it refuses what is not valid UTF-8), serialized once for every
        // watcher.
        const std::string type_json = json(type).dump();
        if (text != nullptr) return StrCat("{\"object\":", *text, ",\"type\":", type_json, "}\n");
        return StrCat("{\"object\":", api::DumpJson(object, json::error_handler_t::replace), ",\"type\":", type_json,
                      "}\n");
      }
      return api::DumpJson(EventJson(*k, type, convert ? eventsv1::FromCore(object) : object, table),
                           json::error_handler_t::replace) +
             "\n";
    };
    if (QueryTrue(req, "allowWatchBookmarks")) {
      w.bookmark = [k = &kind, events_v1](int64_t bookmark_rv) {
        return json{{"kind", k->kind},
                    {"apiVersion", events_v1 ? eventsv1::kApiVersion : k->api_version()},
                    {"metadata", {{"resourceVersion", std::to_string(bookmark_rv)}}}};
      };
    }
    w.ended_status = StatusObject(absl::OutOfRangeError("the watch fell behind; relist and watch again"));
    w.deadline = options_.clock->Now() + limit;
    watches_.Add(std::move(w), std::move(detached));
    return;
  }
  if (req.method == "GET") {
    auto opts = ListOptionsFrom(req);
    if (!opts.ok()) return SendError(out, opts.status());
    if (!table && !events_v1 && opts->limit == 0 && opts->continue_token.empty()) {
      return StreamList(registry_.store(), kind, ns, *opts, out);
    }
    auto page = registry_.List(kind, ns, *opts);
    if (!page.ok()) return SendError(out, page.status());
    if (table) {
      json t = api::BuildTable(kind, page->items, absl::Now(), std::to_string(page->resource_version));
      if (!page->continue_token.empty()) t["metadata"]["continue"] = page->continue_token;
      return SendJson(out, 200, t);
    }
    return SendJson(out, 200, present_list(kind, *page));
  }
  if (req.method == "POST") {
    auto body = DecodeBody(req);
    if (!body.ok()) return SendError(out, body.status());
    if (events_v1) {
      if (absl::Status st = eventsv1::ValidateCreate(*body); !st.ok()) return SendError(out, st);
      body = eventsv1::ToCore(*body);
      if (!body.ok()) return SendError(out, body.status());
    }
    if (route->sub == "binding") {
      if (dry_run) return SendError(out, api::BadRequest("dryRun is not supported for pods/binding"));
      std::string node = body->value("target", json::object()).value("name", "");
      auto bound = registry_.BindPod(ns, name, node);
      if (!bound.ok()) return SendError(out, bound.status());
      return SendJson(out, 201, StatusObject(absl::OkStatus()));
    }
    if (!name.empty()) return SendError(out, api::MethodNotAllowed("POST is for collections"));
    if (dry_run) {
      auto created = registry_.DryRunCreate(kind, ns, std::move(*body));
      if (!created.ok()) return SendError(out, created.status());
      return send(201, *created);
    }
    // Events are the controllers' own output, and cheap: never held back.
    if (kind.resource != "events") {
      const absl::Duration waited = HoldBack(options_.hold_back, *options_.clock, options_.backlog);
      if (waited > absl::ZeroDuration()) {
        absl::MutexLock lock(&held_back_mu_);
        ++held_back_.requests;
        held_back_.waited += waited;
      }
    }
    // The store's text of the new object is the response's bytes (the same
    // serializer); events.k8s.io/v1 converts.
    std::shared_ptr<const std::string> text;
    auto created = registry_.CreateShared(kind, ns, std::move(*body), events_v1 ? nullptr : &text);
    if (!created.ok()) return SendError(out, created.status());
    if (text != nullptr) return out.Send(201, kJson, *text);
    return send(201, **created);
  }
  if (req.method == "PUT") {
    if (name.empty()) return SendError(out, api::MethodNotAllowed("PUT needs an object name"));
    auto body = DecodeBody(req);
    if (!body.ok()) return SendError(out, body.status());
    if (events_v1) body = eventsv1::ToCore(*body);
    if (!body.ok()) return SendError(out, body.status());
    if (dry_run) {
      auto updated = registry_.DryRunUpdate(kind, ns, name, std::move(*body), sub);
      if (!updated.ok()) return SendError(out, updated.status());
      return send(200, *updated);
    }
    auto updated = registry_.UpdateShared(kind, ns, name, std::move(*body), sub);
    if (!updated.ok()) return SendError(out, updated.status());
    return send(200, **updated);
  }
  if (req.method == "PATCH") {
    if (name.empty()) return SendError(out, api::MethodNotAllowed("PATCH needs an object name"));
    auto type = ParsePatchType(req.Header("content-type"));
    if (!type.ok()) return SendError(out, type.status());
    if (*type == PatchType::kApply) {
      return SendError(
          out, api::UnsupportedMediaType("server-side apply is not supported; use client-side apply (kubectl apply)"));
    }
    if (events_v1) {
      if (dry_run) return SendError(out, api::BadRequest("dryRun is not supported for events.k8s.io/v1 patches"));
      auto patched = eventsv1::Patch(registry_, ns, name, req.body, *type);
      if (!patched.ok()) return SendError(out, patched.status());
      return SendJson(out, 200, *patched);
    }
    auto patched = dry_run ? registry_.DryRunPatch(kind, ns, name, req.body, *type, sub)
                           : registry_.Patch(kind, ns, name, req.body, *type, sub);
    if (!patched.ok()) return SendError(out, patched.status());
    return SendJson(out, 200, *patched);
  }
  if (req.method == "DELETE") {
    DeleteOptions opts;
    if (auto g = req.query.find("gracePeriodSeconds"); g != req.query.end()) {
      int64_t v = 0;
      if (!absl::SimpleAtoi(g->second, &v))
        return SendError(out, api::BadRequest("gracePeriodSeconds must be an integer"));
      opts.grace_period_seconds = v;
    }
    if (!req.body.empty()) {
      json body = json::parse(req.body, nullptr, false);
      if (body.is_discarded() || !body.is_object())
        return SendError(out, api::BadRequest("DeleteOptions must be a JSON object"));
      if (const json& g = body.value("gracePeriodSeconds", json()); g.is_number_integer()) {
        opts.grace_period_seconds = g.get<int64_t>();
      } else if (!g.is_null()) {
        return SendError(out, api::BadRequest("DeleteOptions.gracePeriodSeconds must be an integer"));
      }
      // client-go sends DeleteOptions.dryRun in the body, not the query.
      if (const json& d = body.value("dryRun", json()); !d.is_null()) {
        for (const auto& v : d.is_array() ? d : json::array({d})) {
          if (v != "All") {
            return SendError(
                out,
                api::Invalid("DeleteOptions.meta.k8s.io", "",
                             {{"dryRun", StrCat("Unsupported value: ", v.dump(), ": supported values: \"All\"")}}));
          }
          dry_run = true;
        }
      }
      json pre = body.value("preconditions", json::object());
      if (pre.is_object()) {
        if (pre.contains("uid") && pre["uid"].is_string()) opts.uid = pre["uid"].get<std::string>();
        if (pre.contains("resourceVersion") && pre["resourceVersion"].is_string()) {
          opts.resource_version = pre["resourceVersion"].get<std::string>();
        }
      }
    }
    if (dry_run && name.empty()) {
      return SendError(out, api::MethodNotAllowed("deletecollection with dryRun is not supported"));
    }
    if (dry_run) {
      auto current = registry_.DryRunDelete(kind, ns, name, opts);
      if (!current.ok()) return SendError(out, current.status());
      return send(200, *current);
    }
    if (name.empty()) {
      // deletecollection
      auto lopts = ListOptionsFrom(req);
      if (!lopts.ok()) return SendError(out, lopts.status());
      auto page = registry_.List(kind, ns, *lopts);
      if (!page.ok()) return SendError(out, page.status());
      json deleted = json::array();
      for (const auto& item : page->items) {
        const json& md = item["metadata"];
        auto d = registry_.Delete(kind, md.value("namespace", ""), md.value("name", ""));
        if (!d.ok() && d.status().code() != absl::StatusCode::kNotFound) return SendError(out, d.status());
        if (d.ok()) deleted.push_back(*d);
      }
      ListPage result{deleted.get<std::vector<json>>(), registry_.store().ResourceVersion(), ""};
      return SendJson(out, 200, present_list(kind, result));
    }
    auto deleted = registry_.Delete(kind, ns, name, opts);
    if (!deleted.ok()) return SendError(out, deleted.status());
    const bool pending = (*deleted)["metadata"].contains("deletionTimestamp") &&
                         (*deleted)["metadata"].contains("finalizers") && !(*deleted)["metadata"]["finalizers"].empty();
    return send(pending ? 202 : 200, *deleted);
  }
  SendError(out, api::MethodNotAllowed(StrCat("method ", req.method, " is not supported")));
}

}  // namespace berth::apiserver
