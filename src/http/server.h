// berth's HTTP/1.1 server, on Boost.Asio and Beast: the API server's
// transport (unix socket; HTTPS with a bearer token on TCP) and berth-csi's
// health and metrics endpoint (plain HTTP on an address the operator names).
//
//   auto server = HttpServer::Start(
//       {.tcp_address = "127.0.0.1:9809", .tcp_mode = HttpServer::TcpMode::kPlainHttp},
//       [](const HttpRequest& r, ResponseWriter& w) { w.Send(200, "text/plain", "ok\n"); });
//
// Threads are fixed whatever the load: `io_threads` run every connection's
// asynchronous I/O (accept, TLS handshake, reading requests, writing
// responses), `handler_threads` run handlers. A connection that waits for a
// client holds no thread, only its socket and a timer.
//
// Limits, as kube-apiserver has them:
//   - open connections are capped (`max_connections`; more are closed at
//     accept);
//   - a TLS handshake must finish within `tls_handshake_timeout`, a
//     request's headers must arrive within `header_timeout` of the first
//     request (or of the first byte of a later one), a kept-alive connection
//     may idle `idle_timeout` between requests, a body must arrive and each
//     write of a response complete within `io_timeout` — else the server
//     closes the connection;
//   - handlers in flight are bounded, reads (GET, HEAD, OPTIONS) and writes
//     (everything else) separately; a request over its limit is answered
//     429 with `Retry-After: 1` at once. Long-running requests (watches:
//     `long_running`) are exempt and must not hold a handler thread: the
//     handler starts the stream, Detach()es it and returns; whoever holds
//     the Stream writes to it from any thread, without blocking.
//
// Thread-safety: HttpServer is thread-safe. A ResponseWriter belongs to the
// handler call it is passed to; a Stream is thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace berth::http {

struct HttpRequest {
  std::string method;                          // "GET"
  std::string target;                          // "/api/v1/pods?watch=1"
  std::string path;                            // "/api/v1/pods" (percent-decoded)
  std::map<std::string, std::string> query;    // decoded; the last value wins
  std::map<std::string, std::string> headers;  // lower-case names; repeated fields joined by ", "
  std::string body;
  bool over_unix_socket = false;

  std::string Header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? "" : it->second;
  }
};

// A chunked response that goes on after its handler returned (a watch).
// Writes never block: data is queued and written by the server's I/O
// threads. A producer that outruns its client sees Pending() grow and
// should stop producing until woken (the wakeup runs when the queue has
// drained, and when the stream ends).
class Stream {
 public:
  virtual ~Stream() = default;
  // Queues one chunk. False once the stream has ended (the client went
  // away, a write timed out, the server is stopping, or Finish was called).
  virtual bool Write(std::string data) = 0;
  // Ends the response (the last chunk). Idempotent.
  virtual void Finish() = 0;
  virtual bool Ended() const = 0;
  // Bytes queued and not yet written.
  virtual size_t Pending() const = 0;
  // True while more than 256 KiB is unwritten: stop writing until woken.
  virtual bool Backlogged() const = 0;
  // `wakeup` runs (on an I/O thread, with no lock of the server held; it
  // must not block) when a backlog (see Backlogged) has all been written,
  // and once when the stream ends. Replaces an earlier
  // wakeup.
  virtual void SetWakeup(std::function<void()> wakeup) = 0;
};

// How a handler answers: one whole response, or a chunked stream.
class ResponseWriter {
 public:
  virtual ~ResponseWriter() = default;
  virtual void Send(int code, const std::string& content_type, const std::string& body) = 0;
  // Starts a chunked response; then WriteChunk until done or it returns
  // false (the client went away or the server is stopping). WriteChunk
  // blocks while the client is slow to read.
  virtual bool StartStream(int code, const std::string& content_type) = 0;
  virtual bool WriteChunk(const std::string& data) = 0;
  // True once the peer has closed its side or the server is stopping.
  virtual bool Cancelled() = 0;
  // After StartStream: hands the stream over, so it goes on after the
  // handler returns without holding a thread. The connection closes once
  // the stream ends. nullptr if no stream was started.
  virtual std::shared_ptr<Stream> Detach() = 0;
  // Answers an upgrade request (pods/exec) with `head` — a whole response
  // head, normally "HTTP/1.1 101 ...\r\n...\r\n\r\n", and any bytes that
  // followed it — and then hands the connection over to a tunnel: bytes go
  // both ways between the client and `backend` (a connected stream socket,
  // owned by the server from this call, closed whatever happens) unchanged,
  // asynchronously on the I/O threads, holding no handler thread. Either
  // side's EOF or error, or Shutdown, closes both (as kube-apiserver's
  // upgrade proxy does: no half-close is passed on). Each write to the
  // client must complete within `io_timeout`; no idle limit (an exec shell
  // may wait for hours). False (and `backend` closed) if a response was
  // already started.
  virtual bool Tunnel(std::string head, int backend) = 0;
};

using HttpHandler = std::function<void(const HttpRequest&, ResponseWriter&)>;

// Parses "a=b&c=%20d" into a map (percent and '+' decoding).
std::map<std::string, std::string> ParseQuery(std::string_view query);
// The same, every pair in order, repeated keys too (pods/exec's `command`).
std::vector<std::pair<std::string, std::string>> ParseQueryList(std::string_view query);
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

  // Threads, limits and deadlines (flags of `berth up` and `berth serve`
  // for the API server).
  struct Limits {
    int io_threads = 2;
    int handler_threads = 8;
    size_t max_connections = 4096;
    // Handlers in flight (running or queued for a handler thread); 0: no
    // limit. kube-apiserver's --max-requests-inflight and
    // --max-mutating-requests-inflight.
    size_t max_requests_inflight = 400;
    size_t max_mutating_requests_inflight = 200;
    absl::Duration tls_handshake_timeout = absl::Seconds(10);
    absl::Duration header_timeout = absl::Seconds(32);  // kube-apiserver's ReadHeaderTimeout
    absl::Duration idle_timeout = absl::Seconds(90);    // kube-apiserver's IdleTimeout
    absl::Duration io_timeout = absl::Seconds(30);
    size_t max_header_bytes = 1 << 20;  // kube-apiserver's MaxHeaderBytes
  };

  struct Options {
    std::string unix_socket;                  // "" = none; created mode 0600
    std::string tcp_address = "127.0.0.1:0";  // "" = none; see ParseTcpAddress
    TcpMode tcp_mode = TcpMode::kHttpsWithToken;
    // Refuse TCP addresses outside loopback. Off only where the operator
    // names the address to serve on (berth-csi's --http-endpoint).
    bool loopback_only = true;
    std::string bearer_token;   // required for kHttpsWithToken
    std::string tls_cert_file;  // required for kHttpsWithToken
    std::string tls_key_file;
    Limits limits;
    size_t max_body_bytes = 8 << 20;
    // Requests that stream for long (watches): exempt from the in-flight
    // limits; their handlers are expected to Detach().
    std::function<bool(const HttpRequest&)> long_running;
    // Deadlines run on this clock (tests pass a FakeClock).
    Clock* clock = &RealClock();
  };

  // What the server has done, for /metrics and tests.
  struct Stats {
    int64_t open_connections = 0;
    int64_t inflight_reads = 0;
    int64_t inflight_mutating = 0;
    int64_t long_running = 0;         // detached streams and tunnels open
    int64_t accepted = 0;             // connections, ever
    int64_t refused_connections = 0;  // closed at accept: over max_connections
    int64_t timed_out = 0;            // connections closed by a deadline
    int64_t throttled = 0;            // requests answered 429
  };

  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(Options options, HttpHandler handler);
  ~HttpServer();  // Shutdown()

  // The bound TCP port (0 without TCP).
  int tcp_port() const;
  Stats stats() const;
  // Stops accepting, closes every connection (ending streams), waits for
  // the handlers running to return and for the threads to stop.
  void Shutdown();

  class Impl;

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace berth::http
