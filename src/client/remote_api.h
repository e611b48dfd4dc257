// apiserver::Api over berth's API socket: what a node agent running as its
// own process uses in place of the in-process Registry. Every verb is one
// HTTP request on a pooled connection; a watch is a streaming GET read by a
// thread of its own into a queue (store::EventSource).
//
//   auto api = RemoteApi::ForDataDir("/var/lib/berth");
//   client::Informer pods(*api, *api::FindResource("", "pods"));
//
// Errors come back as the codes the Registry returns (NotFound, Aborted for
// a conflict, OutOfRange for 410 Gone, InvalidArgument for 400/422, ...);
// a server that cannot be reached is UNAVAILABLE.
//
// Thread-safety: thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "apiserver/api.h"
#include "http/api_client.h"

namespace berth::client {

using nlohmann::json;

class RemoteApi final : public apiserver::Api {
 public:
  // Makes a new connection for a request (a watch holds its own).
  using Connect = std::function<std::unique_ptr<http::ApiClient>()>;

  explicit RemoteApi(Connect connect);
  // The root-only unix socket <data_dir>/api.sock.
  static std::unique_ptr<RemoteApi> ForDataDir(const std::string& data_dir);

  absl::StatusOr<json> Create(const api::KindInfo& kind, const std::string& ns, json object) override;
  std::vector<absl::StatusOr<json>> CreateAll(const api::KindInfo& kind,
                                              std::vector<std::pair<std::string, json>> objects) override;
  absl::StatusOr<json> Get(const api::KindInfo& kind, const std::string& ns, const std::string& name) override;
  absl::StatusOr<std::shared_ptr<const json>> GetShared(const api::KindInfo& kind, const std::string& ns,
                                                        const std::string& name) override;
  absl::StatusOr<apiserver::ListPage> List(const api::KindInfo& kind, const std::string& ns,
                                           const apiserver::ListOptions& options) override;
  absl::StatusOr<json> Update(const api::KindInfo& kind, const std::string& ns, const std::string& name, json object,
                              apiserver::Subresource sub) override;
  absl::StatusOr<json> Patch(const api::KindInfo& kind, const std::string& ns, const std::string& name,
                             std::string_view patch, apiserver::PatchType type, apiserver::Subresource sub) override;
  absl::StatusOr<json> Delete(const api::KindInfo& kind, const std::string& ns, const std::string& name,
                              const apiserver::DeleteOptions& options = {}) override;
  absl::StatusOr<apiserver::WatchStream> Watch(const api::KindInfo& kind, const std::string& ns,
                                               const std::string& resource_version,
                                               const api::LabelSelector& labels) override;

  // The REST path of a kind's collection (name empty) or object.
  static std::string Path(const api::KindInfo& kind, const std::string& ns, const std::string& name = "");
  // The absl::Status an error response stands for (see api::ToHttpError).
  static absl::Status StatusOf(const http::ApiResponse& response);

 private:
  absl::StatusOr<json> Call(const std::string& method, const std::string& target, const std::string& body = "",
                            const std::string& content_type = "application/json");
  std::unique_ptr<http::ApiClient> Take() ABSL_LOCKS_EXCLUDED(mu_);
  void Give(std::unique_ptr<http::ApiClient> c) ABSL_LOCKS_EXCLUDED(mu_);

  const Connect connect_;
  absl::Mutex mu_;
  std::vector<std::unique_ptr<http::ApiClient>> idle_ ABSL_GUARDED_BY(mu_);
};

}  // namespace berth::client
