// A small HTTP client for berth's API: over the root-only unix socket of a
// data dir, or over TCP with a kubeconfig's server and bearer token.
//
//   auto client = ApiClient::ForDataDir("/var/lib/berth");
//   auto resp = (*client)->Call("GET", "/api/v1/namespaces/default/pods");
//
// Thread-safety: not thread-safe; one client per thread (Clone() gives
// another with the same server and credentials). Successive Call()s share
// one kept-alive connection; a stream has its own.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace berth::http {

struct ApiResponse {
  int code = 0;
  std::string content_type;
  std::string body;
};

class ApiClient {
 public:
  // The unix socket <data_dir>/api.sock.
  static absl::StatusOr<std::unique_ptr<ApiClient>> ForDataDir(const std::string& data_dir);
  // Explicit transports (tests, benchmarks).
  static std::unique_ptr<ApiClient> ForUnixSocket(const std::string& socket_path);
  // HTTPS to host:port trusting `ca_pem`.
  static std::unique_ptr<ApiClient> ForTcp(const std::string& host, int port, const std::string& ca_pem,
                                           const std::string& token);

  ~ApiClient();

  // A client for the same server, credentials and default namespace, with
  // a connection of its own (for another thread).
  std::unique_ptr<ApiClient> Clone() const;

  // One request. UNAVAILABLE when the server cannot be reached; any HTTP
  // answer (also 4xx/5xx) is returned as a response.
  absl::StatusOr<ApiResponse> Call(const std::string& method, const std::string& target, const std::string& body = "",
                                   const std::string& content_type = "application/json",
                                   const std::string& accept = "application/json");

  // A streaming GET (watch): `on_line` gets each newline-terminated line and
  // returns false to stop. Returns the HTTP response (body empty on 200)
  // when the stream ends.
  absl::StatusOr<ApiResponse> Stream(const std::string& target, const std::string& accept,
                                     const std::function<bool(const std::string&)>& on_line);

  // Ends a Stream() in progress, from another thread, and refuses later
  // ones: Stream returns as if the server had closed the stream.
  void CancelStream() ABSL_LOCKS_EXCLUDED(cancel_mu_);

  // The default namespace of the kubeconfig context ("default").
  const std::string& default_namespace() const { return namespace_; }
  void set_default_namespace(std::string ns) { namespace_ = std::move(ns); }

 private:
  ApiClient() = default;
  struct Conn;
  absl::StatusOr<std::unique_ptr<Conn>> Connect();
  std::string socket_path_;
  std::string host_;
  int port_ = 0;
  std::string token_;
  std::string ca_pem_;
  std::string namespace_ = "default";
  absl::Mutex cancel_mu_;
  int stream_fd_ ABSL_GUARDED_BY(cancel_mu_) = -1;
  bool cancelled_ ABSL_GUARDED_BY(cancel_mu_) = false;
  // One kept-alive connection for successive Call()s.
  std::unique_ptr<Conn> conn_;
};

// Error text of a failed response: the Status message, else the body.
std::string ErrorMessage(const ApiResponse& response);

}  // namespace berth::http
