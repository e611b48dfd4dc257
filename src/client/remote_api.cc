#include "client/remote_api.h"

#include <deque>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "common/strings.h"
#include "spdlog/spdlog.h"

namespace berth::client {
namespace {

using apiserver::DeleteOptions;
using apiserver::ListOptions;
using apiserver::ListPage;
using apiserver::PatchType;
using apiserver::Subresource;
using apiserver::WatchStream;

// Percent-encodes a query value (selectors, continue tokens).
std::string QueryEscape(std::string_view v) {
  std::string out;
  for (unsigned char c : v) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppend(&out, "%", absl::Hex(c, absl::kZeroPad2));
    }
  }
  return out;
}

const char* ContentType(PatchType type) {
  switch (type) {
    case PatchType::kMerge:
      return "application/merge-patch+json";
    case PatchType::kJson:
      return "application/json-patch+json";
    case PatchType::kStrategic:
      return "application/strategic-merge-patch+json";
    case PatchType::kApply:
      return "application/apply-patch+yaml";
  }
  return "application/merge-patch+json";
}

absl::StatusOr<std::string> SubPath(Subresource sub) {
  switch (sub) {
    case Subresource::kMain:
      return std::string();
    case Subresource::kStatus:
      return std::string("/status");
    case Subresource::kMainAndStatus:
      break;
  }
  return absl::InvalidArgumentError("a write of object and status at once is for in-process controllers only");
}

// Objects of a list carry their kind as single objects do.
void SetKind(const api::KindInfo& kind, json& object) {
  if (!object.is_object()) return;
  if (!object.contains("apiVersion")) object["apiVersion"] = kind.api_version();
  if (!object.contains("kind")) object["kind"] = std::string(kind.kind);
}

int64_t ResourceVersionOf(const json& object) {
  int64_t rv = 0;
  if (object.is_object() && object.contains("metadata") && object["metadata"].is_object()) {
    (void)absl::SimpleAtoi(object["metadata"].value("resourceVersion", ""), &rv);
  }
  return rv;
}

// A streaming watch read by its own thread.
class RemoteWatch final : public store::EventSource {
 public:
  RemoteWatch(std::unique_ptr<http::ApiClient> client, const api::KindInfo& kind, std::string target)
      : client_(std::move(client)), kind_(kind) {
    thread_ = std::thread([this, target = std::move(target)] { Run(target); });
  }
  ~RemoteWatch() override {
    client_->CancelStream();
    thread_.join();
  }

  std::optional<store::Event> Next(absl::Duration timeout) override ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return !queue_.empty() || ended_; };
    mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
    if (queue_.empty()) return std::nullopt;
    store::Event e = std::move(queue_.front());
    queue_.pop_front();
    if (queue_.empty()) taken_rv_ = std::max(taken_rv_, e.resource_version);
    return e;
  }
  bool WaitReady(absl::Duration timeout) override ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return !queue_.empty() || ended_ || interrupted_; };
    mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
    return !queue_.empty() || ended_;
  }
  void Interrupt() override ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    interrupted_ = true;
  }
  bool ended() const override ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return ended_;
  }
  int64_t BookmarkVersion() const override ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return queue_.empty() ? taken_rv_ : 0;
  }

 private:
  void Run(const std::string& target) {
    auto r = client_->Stream(target, "application/json", [this](const std::string& line) { return Offer(line); });
    if (r.ok() && r->code != 200) {
      spdlog::debug("watch {}: {}", target, RemoteApi::StatusOf(*r).ToString());
    }
    absl::MutexLock lock(&mu_);
    ended_ = true;
  }

  bool Offer(const std::string& line) ABSL_LOCKS_EXCLUDED(mu_) {
    json e = json::parse(line, nullptr, false);
    if (!e.is_object() || !e.contains("object")) return true;
    const std::string type = e.value("type", "");
    json& object = e["object"];
    absl::MutexLock lock(&mu_);
    if (type == "BOOKMARK") {
      if (queue_.empty()) taken_rv_ = std::max(taken_rv_, ResourceVersionOf(object));
      return true;
    }
    store::EventType t;
    if (type == "ADDED") {
      t = store::EventType::kAdded;
    } else if (type == "MODIFIED") {
      t = store::EventType::kModified;
    } else if (type == "DELETED") {
      t = store::EventType::kDeleted;
    } else {  // ERROR (410: fell behind) or unknown: the watch is over
      ended_ = true;
      return false;
    }
    SetKind(kind_, object);
    const int64_t rv = ResourceVersionOf(object);
    queue_.push_back({t, std::string(kind_.resource), std::make_shared<const json>(std::move(object)), rv, nullptr});
    return true;
  }

  const std::unique_ptr<http::ApiClient> client_;
  const api::KindInfo& kind_;
  mutable absl::Mutex mu_;
  std::deque<store::Event> queue_ ABSL_GUARDED_BY(mu_);
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  bool interrupted_ ABSL_GUARDED_BY(mu_) = false;
  int64_t taken_rv_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace

RemoteApi::RemoteApi(Connect connect) : connect_(std::move(connect)) {}

std::unique_ptr<RemoteApi> RemoteApi::ForDataDir(const std::string& data_dir) {
  const std::string socket = data_dir + "/api.sock";
  return std::make_unique<RemoteApi>([socket] { return http::ApiClient::ForUnixSocket(socket); });
}

std::string RemoteApi::Path(const api::KindInfo& kind, const std::string& ns, const std::string& name) {
  std::string out = kind.group.empty() ? std::string("/api/v1")
                                       : StrCat("/apis/", std::string(kind.group), "/", std::string(kind.version));
  if (kind.namespaced && !ns.empty()) absl::StrAppend(&out, "/namespaces/", ns);
  absl::StrAppend(&out, "/", std::string(kind.resource));
  if (!name.empty()) absl::StrAppend(&out, "/", name);
  return out;
}

absl::Status RemoteApi::StatusOf(const http::ApiResponse& response) {
  const std::string message = http::ErrorMessage(response);
  switch (response.code) {
    case 400:
    case 422:
      return absl::InvalidArgumentError(message);
    case 401:
      return absl::UnauthenticatedError(message);
    case 403:
      return absl::PermissionDeniedError(message);
    case 404:
      return absl::NotFoundError(message);
    case 405:
    case 415:
      return absl::UnimplementedError(message);
    case 409: {
      json body = json::parse(response.body, nullptr, false);
      if (body.is_object() && body.value("reason", "") == "AlreadyExists") return absl::AlreadyExistsError(message);
      return absl::AbortedError(message);
    }
    case 410:
      return absl::OutOfRangeError(message);
    case 429:
      return absl::ResourceExhaustedError(message);
    case 503:
      return absl::UnavailableError(message);
    case 504:
      return absl::DeadlineExceededError(message);
    default:
      return absl::InternalError(message);
  }
}

std::unique_ptr<http::ApiClient> RemoteApi::Take() {
  {
    absl::MutexLock lock(&mu_);
    if (!idle_.empty()) {
      auto c = std::move(idle_.back());
      idle_.pop_back();
      return c;
    }
  }
  return connect_();
}

void RemoteApi::Give(std::unique_ptr<http::ApiClient> c) {
  absl::MutexLock lock(&mu_);
  if (idle_.size() < 8) idle_.push_back(std::move(c));
}

absl::StatusOr<json> RemoteApi::Call(const std::string& method, const std::string& target, const std::string& body,
                                     const std::string& content_type) {
  auto c = Take();
  auto r = c->Call(method, target, body, content_type);
  if (!r.ok()) return r.status();  // the connection is dropped with the client
  Give(std::move(c));
  if (r->code < 200 || r->code >= 300) return StatusOf(*r);
  json out = json::parse(r->body, nullptr, false);
  if (out.is_discarded()) return absl::InternalError(StrCat(method, " ", target, ": the answer is not JSON"));
  return out;
}

absl::StatusOr<json> RemoteApi::Create(const api::KindInfo& kind, const std::string& ns, json object) {
  SetKind(kind, object);
  return Call("POST", Path(kind, ns), object.dump());
}

std::vector<absl::StatusOr<json>> RemoteApi::CreateAll(const api::KindInfo& kind,
                                                       std::vector<std::pair<std::string, json>> objects) {
  std::vector<absl::StatusOr<json>> out;
  out.reserve(objects.size());
  for (auto& [ns, object] : objects) out.push_back(Create(kind, ns, std::move(object)));
  return out;
}

absl::StatusOr<json> RemoteApi::Get(const api::KindInfo& kind, const std::string& ns, const std::string& name) {
  return Call("GET", Path(kind, ns, name));
}

absl::StatusOr<std::shared_ptr<const json>> RemoteApi::GetShared(const api::KindInfo& kind, const std::string& ns,
                                                                 const std::string& name) {
  BERTH_ASSIGN_OR_RETURN(json object, Get(kind, ns, name));
  return std::make_shared<const json>(std::move(object));
}

absl::StatusOr<ListPage> RemoteApi::List(const api::KindInfo& kind, const std::string& ns, const ListOptions& options) {
  if (!options.labels.empty() || !options.fields.empty()) {
    return absl::UnimplementedError("selectors are not sent by the remote client; filter the list");
  }
  ListPage out;
  std::string token = options.continue_token;
  do {
    std::vector<std::string> query;
    if (options.limit > 0) query.push_back(StrCat("limit=", options.limit));
    if (!token.empty()) query.push_back(StrCat("continue=", QueryEscape(token)));
    const std::string target = query.empty() ? Path(kind, ns) : StrCat(Path(kind, ns), "?", absl::StrJoin(query, "&"));
    BERTH_ASSIGN_OR_RETURN(json page, Call("GET", target));
    if (!page.contains("items") || !page["items"].is_array()) {
      return absl::InternalError(StrCat("GET ", target, ": the answer is not a list"));
    }
    for (auto& item : page["items"]) {
      SetKind(kind, item);
      out.items.push_back(std::move(item));
    }
    const json meta = page.value("metadata", json::object());
    (void)absl::SimpleAtoi(meta.value("resourceVersion", ""), &out.resource_version);
    token = meta.value("continue", "");
    // A caller with a limit gets one page and the token, as the Registry.
    if (options.limit > 0) {
      out.continue_token = token;
      break;
    }
  } while (!token.empty());
  return out;
}

absl::StatusOr<json> RemoteApi::Update(const api::KindInfo& kind, const std::string& ns, const std::string& name,
                                       json object, Subresource sub) {
  BERTH_ASSIGN_OR_RETURN(std::string suffix, SubPath(sub));
  SetKind(kind, object);
  return Call("PUT", Path(kind, ns, name) + suffix, object.dump());
}

absl::StatusOr<json> RemoteApi::Patch(const api::KindInfo& kind, const std::string& ns, const std::string& name,
                                      std::string_view patch, PatchType type, Subresource sub) {
  BERTH_ASSIGN_OR_RETURN(std::string suffix, SubPath(sub));
  return Call("PATCH", Path(kind, ns, name) + suffix, std::string(patch), ContentType(type));
}

absl::StatusOr<json> RemoteApi::Delete(const api::KindInfo& kind, const std::string& ns, const std::string& name,
                                       const DeleteOptions& options) {
  json body = {{"kind", "DeleteOptions"}, {"apiVersion", "v1"}};
  if (options.grace_period_seconds) body["gracePeriodSeconds"] = *options.grace_period_seconds;
  if (options.uid) body["preconditions"]["uid"] = *options.uid;
  if (options.resource_version) body["preconditions"]["resourceVersion"] = *options.resource_version;
  return Call("DELETE", Path(kind, ns, name), body.dump());
}

absl::StatusOr<WatchStream> RemoteApi::Watch(const api::KindInfo& kind, const std::string& ns,
                                             const std::string& resource_version, const api::LabelSelector& labels) {
  if (!labels.empty()) return absl::UnimplementedError("selectors are not sent by the remote client");
  std::string target = StrCat(Path(kind, ns), "?watch=1&allowWatchBookmarks=true");
  if (!resource_version.empty()) absl::StrAppend(&target, "&resourceVersion=", QueryEscape(resource_version));
  WatchStream out;
  out.watcher = std::make_unique<RemoteWatch>(connect_(), kind, std::move(target));
  return out;
}

}  // namespace berth::client
