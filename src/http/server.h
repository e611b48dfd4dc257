// berth's HTTP/1.1 server, on Boost.Beast's parser: the API server's
// transport (unix socket; HTTPS with a bearer token on TCP) and berth-csi's
// health and metrics endpoint (plain HTTP on an address the operator names).
//
//   auto server = HttpServer::Start(
//       {.tcp_address = "127.0.0.1:9809", .tcp_mode = HttpServer::TcpMode::kPlainHttp},
//       [](const HttpRequest& r, ResponseWriter& w) { w.Send(200, "text/plain", "ok\n"); });
//
// Requests are parsed by Beast (boost::beast::http::request_parser) over a
// small blocking stream on a file descriptor whose reads and writes poll
// with timeouts and wake up when the server shuts down. One thread per
// connection: the servers have a handful of local clients (the CLI, kubectl,
// a Prometheus scraper, a kubelet probe), and long-lived watches are simply
// blocked threads.
//
// Thread-safety: HttpServer is thread-safe; a ResponseWriter belongs to the
// connection thread that calls the handler.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace berth::http {

struct HttpRequest {
  std::string method;                         // "GET"
  std::string target;                         // "/api/v1/pods?watch=1"
  std::string path;                           // "/api/v1/pods" (percent-decoded)
  std::map<std::string, std::string> query;   // decoded; the last value wins
  std::map<std::string, std::string> headers; // lower-case names
  std::string body;
  bool over_unix_socket = false;

  std::string Header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? "" : it->second;
  }
};

// How a handler answers: one whole response, or a chunked stream.
class ResponseWriter {
 public:
  virtual ~ResponseWriter() = default;
  virtual void Send(int code, const std::string& content_type, const std::string& body) = 0;
  // Starts a chunked response; then WriteChunk until done or it returns
  // false (the client went away or the server is stopping).
  virtual bool StartStream(int code, const std::string& content_type) = 0;
  virtual bool WriteChunk(const std::string& data) = 0;
  // True once the peer has closed its side or the server is stopping; for
  // handlers that wait (watches).
  virtual bool Cancelled() = 0;
};

using HttpHandler = std::function<void(const HttpRequest&, ResponseWriter&)>;

// Parses "a=b&c=%20d" into a map (percent and '+' decoding).
std::map<std::string, std::string> ParseQuery(std::string_view query);
// Percent-decoding; nullopt on a malformed escape.
std::optional<std::string> PercentDecode(std::string_view s, bool plus_is_space);

// Parses one request from `bytes` (used by the fuzz target and tests).
// INVALID_ARGUMENT for what the server would answer 400.
absl::StatusOr<HttpRequest> ParseRequest(std::string_view bytes);

// A TCP listening address: "127.0.0.1:9809", "[::1]:9809", or an IPv6
// address without brackets ("fd00::5:9809": the port follows the last ':'),
// as a pod IP substituted into "$(POD_IP):9809" gives.
struct TcpAddress {
  std::string host;  // the address without brackets
  int port = 0;      // 0: any free port
  bool ipv6 = false;
  bool loopback = false;  // 127.0.0.0/8 or ::1
};
// INVALID_ARGUMENT naming what is wrong; host names are not resolved.
absl::StatusOr<TcpAddress> ParseTcpAddress(std::string_view address);

class HttpServer {
 public:
  // How the TCP listener serves: HTTPS where every request must carry the
  // bearer token (the API), or plain HTTP without authentication, for
  // read-only endpoints that carry no secrets (health and metrics).
  enum class TcpMode { kHttpsWithToken, kPlainHttp };

  struct Options {
    std::string unix_socket;                  // "" = none; created mode 0600
    std::string tcp_address = "127.0.0.1:0";  // "" = none; see ParseTcpAddress
    TcpMode tcp_mode = TcpMode::kHttpsWithToken;
    // Refuse TCP addresses outside loopback. Off only where the operator
    // names the address to serve on (berth-csi's --http-endpoint).
    bool loopback_only = true;
    std::string bearer_token;                 // required for kHttpsWithToken
    std::string tls_cert_file;                // required for kHttpsWithToken
    std::string tls_key_file;
    size_t max_connections = 512;
    size_t max_body_bytes = 8 << 20;
    absl::Duration idle_timeout = absl::Minutes(5);
    absl::Duration io_timeout = absl::Seconds(30);
  };

  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(Options options, HttpHandler handler);
  ~HttpServer();  // Shutdown()

  // The bound TCP port (0 without TCP).
  int tcp_port() const { return tcp_port_; }
  // Stops accepting, ends streams and waits for connection threads.
  void Shutdown();

 private:
  HttpServer(Options options, HttpHandler handler);
  absl::Status Listen();
  void AcceptLoop(int listen_fd, bool unix_socket);
  void Serve(int fd, bool unix_socket);

  const Options options_;
  const HttpHandler handler_;
  int tcp_fd_ = -1;
  int unix_fd_ = -1;
  int tcp_port_ = 0;
  int wake_fd_ = -1;  // eventfd: readable once shutting down
  void* ssl_ctx_ = nullptr;  // SSL_CTX for the TCP listener (kHttpsWithToken)
  std::atomic<bool> stopping_{false};
  std::vector<std::thread> acceptors_;

  struct Connections {
    absl::Mutex mu;
    size_t active ABSL_GUARDED_BY(mu) = 0;
  };
  std::shared_ptr<Connections> connections_ = std::make_shared<Connections>();
};

}  // namespace berth::http
