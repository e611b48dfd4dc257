#include "http/server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/parser.hpp>

#include "absl/strings/numbers.h"
#include "common/logging.h"
#include "spdlog/spdlog.h"
#include "common/status.h"
#include "common/strings.h"
#include "openssl/crypto.h"
#include "openssl/err.h"
#include "openssl/ssl.h"

namespace berth::http {
namespace {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;

// Blocking stream over a socket (optionally TLS) with poll()-based
// timeouts that also wakes on the server's shutdown eventfd. The socket is
// non-blocking underneath: every operation is tried first and waited for
// only when it would block (OpenSSL may hold decrypted bytes already).
// Satisfies Beast's SyncReadStream.
class FdStream {
 public:
  FdStream(int fd, int wake_fd, absl::Duration timeout, SSL* ssl = nullptr)
      : fd_(fd), wake_fd_(wake_fd), timeout_(timeout), ssl_(ssl) {
    ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) | O_NONBLOCK);
  }

  void set_timeout(absl::Duration t) { timeout_ = t; }

  // TLS server handshake; false on failure or timeout.
  bool Handshake() {
    while (true) {
      int rc = SSL_accept(ssl_);
      if (rc == 1) return true;
      boost::system::error_code ec;
      if (!WaitFor(SSL_get_error(ssl_, rc), ec)) return false;
    }
  }

  template <class MutableBufferSequence>
  size_t read_some(const MutableBufferSequence& buffers, boost::system::error_code& ec) {
    ec = {};
    for (auto it = boost::asio::buffer_sequence_begin(buffers);
         it != boost::asio::buffer_sequence_end(buffers); ++it) {
      boost::asio::mutable_buffer b = *it;
      if (b.size() == 0) continue;
      while (true) {
        if (ssl_ != nullptr) {
          int n = SSL_read(ssl_, b.data(), static_cast<int>(std::min<size_t>(b.size(), 1 << 30)));
          if (n > 0) return static_cast<size_t>(n);
          int err = SSL_get_error(ssl_, n);
          if (err == SSL_ERROR_ZERO_RETURN) {
            ec = boost::asio::error::eof;
            return 0;
          }
          if (!WaitFor(err, ec)) return 0;
          continue;
        }
        ssize_t n = ::recv(fd_, b.data(), b.size(), 0);
        if (n > 0) return static_cast<size_t>(n);
        if (n == 0) {
          ec = boost::asio::error::eof;
          return 0;
        }
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
          ec.assign(errno, boost::system::system_category());
          return 0;
        }
        if (!Wait(POLLIN, ec)) return 0;
      }
    }
    return 0;
  }
  template <class MutableBufferSequence>
  size_t read_some(const MutableBufferSequence& buffers) {
    boost::system::error_code ec;
    size_t n = read_some(buffers, ec);
    if (ec) throw boost::system::system_error(ec);
    return n;
  }

  bool WriteAll(std::string_view data) {
    boost::system::error_code ec;
    while (!data.empty()) {
      if (ssl_ != nullptr) {
        int n = SSL_write(ssl_, data.data(), static_cast<int>(std::min<size_t>(data.size(), 1 << 30)));
        if (n > 0) {
          data.remove_prefix(static_cast<size_t>(n));
          continue;
        }
        if (!WaitFor(SSL_get_error(ssl_, n), ec)) return false;
        continue;
      }
      ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n >= 0) {
        data.remove_prefix(static_cast<size_t>(n));
        continue;
      }
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return false;
      if (!Wait(POLLOUT, ec)) return false;
    }
    return true;
  }

  // Whether the peer hung up or the server is stopping (without blocking).
  bool PeerGone() {
    pollfd p[2] = {{fd_, POLLRDHUP, 0}, {wake_fd_, POLLIN, 0}};
    if (::poll(p, 2, 0) <= 0) return false;
    return (p[0].revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0 || (p[1].revents & POLLIN) != 0;
  }

 private:
  // Waits as OpenSSL asks; false (with `ec`) for real errors.
  bool WaitFor(int ssl_error, boost::system::error_code& ec) {
    if (ssl_error == SSL_ERROR_WANT_READ) return Wait(POLLIN, ec);
    if (ssl_error == SSL_ERROR_WANT_WRITE) return Wait(POLLOUT, ec);
    ec = boost::asio::error::connection_reset;
    return false;
  }

  bool Wait(short events, boost::system::error_code& ec) {
    pollfd p[2] = {{fd_, events, 0}, {wake_fd_, POLLIN, 0}};
    const int ms = static_cast<int>(absl::ToInt64Milliseconds(timeout_));
    while (true) {
      int rc = ::poll(p, 2, ms);
      if (rc < 0 && errno == EINTR) continue;
      if (rc < 0) {
        ec.assign(errno, boost::system::system_category());
        return false;
      }
      if (rc == 0) {
        ec = boost::asio::error::timed_out;
        return false;
      }
      if (p[1].revents & POLLIN) {
        ec = boost::asio::error::operation_aborted;
        return false;
      }
      return true;
    }
  }

  int fd_;
  int wake_fd_;
  absl::Duration timeout_;
  SSL* ssl_;
};

const char* StatusText(int code) {
  switch (code) {
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 406: return "Not Acceptable";
    case 409: return "Conflict";
    case 410: return "Gone";
    case 413: return "Payload Too Large";
    case 415: return "Unsupported Media Type";
    case 422: return "Unprocessable Entity";
    case 429: return "Too Many Requests";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return "Unknown";
  }
}

class ConnectionWriter : public ResponseWriter {
 public:
  ConnectionWriter(FdStream& stream, bool keep_alive) : stream_(stream), keep_alive_(keep_alive) {}

  void Send(int code, const std::string& content_type, const std::string& body) override {
    if (sent_) return;
    sent_ = true;
    code_ = code;
    std::string head = StrCat("HTTP/1.1 ", code, " ", StatusText(code), "\r\nContent-Type: ", content_type,
                              "\r\nContent-Length: ", body.size(), "\r\nCache-Control: no-cache, private\r\n",
                              keep_alive_ ? "" : "Connection: close\r\n", "\r\n");
    ok_ = stream_.WriteAll(head) && stream_.WriteAll(body);
  }
  bool StartStream(int code, const std::string& content_type) override {
    if (sent_) return false;
    sent_ = true;
    code_ = code;
    streaming_ = true;
    std::string head = StrCat("HTTP/1.1 ", code, " ", StatusText(code), "\r\nContent-Type: ", content_type,
                              "\r\nTransfer-Encoding: chunked\r\nCache-Control: no-cache, private\r\n\r\n");
    ok_ = stream_.WriteAll(head);
    return ok_;
  }
  bool WriteChunk(const std::string& data) override {
    if (!streaming_ || !ok_) return false;
    if (data.empty()) return true;
    char size[32];
    std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
    ok_ = stream_.WriteAll(size) && stream_.WriteAll(data) && stream_.WriteAll("\r\n");
    return ok_;
  }
  bool Cancelled() override { return !ok_ || stream_.PeerGone(); }
  int code() const { return code_; }

  // Ends a stream; whether the connection can be reused.
  bool Finish() {
    if (!sent_) Send(500, "text/plain", "no response\n");
    if (streaming_ && ok_) ok_ = stream_.WriteAll("0\r\n\r\n");
    return ok_ && keep_alive_;
  }

 private:
  FdStream& stream_;
  bool keep_alive_;
  bool sent_ = false;
  bool streaming_ = false;
  bool ok_ = true;
  int code_ = 0;
};

HttpRequest FromBeast(bhttp::request<bhttp::string_body>&& req) {
  HttpRequest out;
  out.method = std::string(req.method_string());
  out.target = std::string(req.target());
  for (const auto& field : req) {
    std::string name(field.name_string());
    for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    out.headers[name] = std::string(field.value());
  }
  out.body = std::move(req.body());
  return out;
}

// Splits target into path and query; false if the path is malformed.
bool SplitTarget(HttpRequest& r) {
  std::string_view t = r.target;
  std::string_view q;
  if (size_t pos = t.find('?'); pos != std::string_view::npos) {
    q = t.substr(pos + 1);
    t = t.substr(0, pos);
  }
  auto path = PercentDecode(t, false);
  if (!path || path->empty() || path->front() != '/' || path->find('\0') != std::string::npos) return false;
  r.path = std::move(*path);
  r.query = ParseQuery(q);
  return true;
}

void SendPlain(FdStream& stream, int code, std::string_view message) {
  std::string body = StrCat("{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"",
                            message, "\",\"reason\":\"", code == 401 ? "Unauthorized" : "BadRequest", "\",\"code\":", code, "}");
  stream.WriteAll(StrCat("HTTP/1.1 ", code, " ", StatusText(code), "\r\nContent-Type: application/json\r\nContent-Length: ",
                         body.size(), "\r\nConnection: close\r\n\r\n", body));
}

bool TokenMatches(const std::string& header, const std::string& token) {
  constexpr std::string_view kBearer = "Bearer ";
  if (token.empty() || header.size() != kBearer.size() + token.size() || !header.starts_with(kBearer)) return false;
  return CRYPTO_memcmp(header.data() + kBearer.size(), token.data(), token.size()) == 0;
}

}  // namespace

std::optional<std::string> PercentDecode(std::string_view s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '%') {
      if (i + 2 >= s.size()) return std::nullopt;
      auto hex = [](char h) -> int {
        if (h >= '0' && h <= '9') return h - '0';
        if (h >= 'a' && h <= 'f') return h - 'a' + 10;
        if (h >= 'A' && h <= 'F') return h - 'A' + 10;
        return -1;
      };
      int hi = hex(s[i + 1]), lo = hex(s[i + 2]);
      if (hi < 0 || lo < 0) return std::nullopt;
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

std::map<std::string, std::string> ParseQuery(std::string_view query) {
  std::map<std::string, std::string> out;
  for (std::string_view part : Split(query, '&')) {
    if (part.empty()) continue;
    size_t eq = part.find('=');
    auto key = PercentDecode(part.substr(0, eq), true);
    auto value = PercentDecode(eq == std::string_view::npos ? "" : part.substr(eq + 1), true);
    if (key && value) out[*key] = *value;
  }
  return out;
}

absl::StatusOr<HttpRequest> ParseRequest(std::string_view bytes) {
  bhttp::request_parser<bhttp::string_body> parser;
  parser.header_limit(64 * 1024);
  parser.body_limit(8 << 20);
  boost::system::error_code ec;
  size_t used = parser.put(boost::asio::buffer(bytes.data(), bytes.size()), ec);
  if (!ec && parser.is_header_done() && !parser.is_done() && used < bytes.size()) {
    parser.put(boost::asio::buffer(bytes.data() + used, bytes.size() - used), ec);
  }
  if (!ec && !parser.is_done()) parser.put_eof(ec);
  if (ec || !parser.is_done()) {
    return absl::InvalidArgumentError(StrCat("malformed HTTP request: ", ec ? ec.message() : "incomplete"));
  }
  HttpRequest r = FromBeast(parser.release());
  if (!SplitTarget(r)) return absl::InvalidArgumentError("malformed request path");
  return r;
}

absl::StatusOr<TcpAddress> ParseTcpAddress(std::string_view address) {
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(
        StrCat("bad TCP address \"", address, "\": ", why, " (want host:port, e.g. 127.0.0.1:9809 or [::1]:9809)"));
  };
  const size_t colon = address.rfind(':');
  if (colon == std::string_view::npos) return bad("no port");
  std::string_view host = address.substr(0, colon);
  std::string_view port = address.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host.empty()) return bad("no host: name the address to listen on");
  TcpAddress out;
  out.host = std::string(host);
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string_view::npos ||
      !absl::SimpleAtoi(std::string(port), &out.port) || out.port > 65535) {
    return bad("the port must be a number from 0 to 65535");
  }
  in_addr v4{};
  in6_addr v6{};
  if (::inet_pton(AF_INET, out.host.c_str(), &v4) == 1) {
    out.loopback = (ntohl(v4.s_addr) >> 24) == 127;
  } else if (::inet_pton(AF_INET6, out.host.c_str(), &v6) == 1) {
    out.ipv6 = true;
    out.loopback = IN6_IS_ADDR_LOOPBACK(&v6);
  } else {
    return bad("the host must be an IPv4 or IPv6 address");
  }
  return out;
}

HttpServer::HttpServer(Options options, HttpHandler handler)
    : options_(std::move(options)), handler_(std::move(handler)) {}

HttpServer::~HttpServer() { Shutdown(); }

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(Options options, HttpHandler handler) {
  // OpenSSL writes with write(2): a client that went away must make a write
  // fail with EPIPE, not kill the process.
  ::signal(SIGPIPE, SIG_IGN);
  const bool https = !options.tcp_address.empty() && options.tcp_mode == TcpMode::kHttpsWithToken;
  if (https && (options.bearer_token.empty() || options.tls_cert_file.empty() || options.tls_key_file.empty())) {
    return absl::InvalidArgumentError("an HTTPS listener needs a bearer token and a TLS certificate and key");
  }
  std::unique_ptr<HttpServer> server(new HttpServer(std::move(options), std::move(handler)));
  if (https) {
    SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
    server->ssl_ctx_ = ctx;
    if (ctx == nullptr || SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1 ||
        SSL_CTX_use_certificate_chain_file(ctx, server->options_.tls_cert_file.c_str()) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx, server->options_.tls_key_file.c_str(), SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(ctx) != 1) {
      return absl::FailedPreconditionError(StrCat("cannot load the TLS certificate ",
                                                  server->options_.tls_cert_file, " and key"));
    }
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_CTX_set_alpn_select_cb(
        ctx,
        [](SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in, unsigned int inlen,
           void*) -> int {
          // HTTP/1.1 only: clients offering h2 fall back to it.
          static const unsigned char kHttp11[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
          unsigned char* selected = nullptr;
          if (SSL_select_next_proto(&selected, outlen, kHttp11, sizeof(kHttp11), in, inlen) != OPENSSL_NPN_NEGOTIATED) {
            return SSL_TLSEXT_ERR_NOACK;
          }
          *out = selected;
          return SSL_TLSEXT_ERR_OK;
        },
        nullptr);
  }
  server->wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (server->wake_fd_ < 0) return ErrnoStatus(errno, "eventfd");
  BERTH_RETURN_IF_ERROR(server->Listen());
  if (server->tcp_fd_ >= 0) {
    server->acceptors_.emplace_back([s = server.get()] { s->AcceptLoop(s->tcp_fd_, false); });
  }
  if (server->unix_fd_ >= 0) {
    server->acceptors_.emplace_back([s = server.get()] { s->AcceptLoop(s->unix_fd_, true); });
  }
  return server;
}

absl::Status HttpServer::Listen() {
  if (!options_.tcp_address.empty()) {
    BERTH_ASSIGN_OR_RETURN(TcpAddress addr, ParseTcpAddress(options_.tcp_address));
    if (options_.loopback_only && !addr.loopback) {
      return absl::InvalidArgumentError(
          StrCat("this server listens on loopback only (127.0.0.0/8 or [::1]), not ", addr.host));
    }
    sockaddr_storage ss{};
    socklen_t ss_len = 0;
    if (addr.ipv6) {
      auto* sin6 = reinterpret_cast<sockaddr_in6*>(&ss);
      sin6->sin6_family = AF_INET6;
      sin6->sin6_port = htons(static_cast<uint16_t>(addr.port));
      ::inet_pton(AF_INET6, addr.host.c_str(), &sin6->sin6_addr);
      ss_len = sizeof(sockaddr_in6);
    } else {
      auto* sin = reinterpret_cast<sockaddr_in*>(&ss);
      sin->sin_family = AF_INET;
      sin->sin_port = htons(static_cast<uint16_t>(addr.port));
      ::inet_pton(AF_INET, addr.host.c_str(), &sin->sin_addr);
      ss_len = sizeof(sockaddr_in);
    }
    tcp_fd_ = ::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (tcp_fd_ < 0) return ErrnoStatus(errno, "socket");
    int one = 1;
    ::setsockopt(tcp_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (addr.ipv6) ::setsockopt(tcp_fd_, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    if (::bind(tcp_fd_, reinterpret_cast<sockaddr*>(&ss), ss_len) != 0) {
      return ErrnoStatus(errno, StrCat("bind ", options_.tcp_address));
    }
    if (::listen(tcp_fd_, 128) != 0) return ErrnoStatus(errno, "listen");
    socklen_t len = sizeof(ss);
    ::getsockname(tcp_fd_, reinterpret_cast<sockaddr*>(&ss), &len);
    tcp_port_ = ntohs(addr.ipv6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  }
  if (!options_.unix_socket.empty()) {
    const std::string& path = options_.unix_socket;
    sockaddr_un sun{};
    if (path.size() >= sizeof(sun.sun_path)) return absl::InvalidArgumentError(StrCat("socket path too long: ", path));
    struct stat st;
    if (::lstat(path.c_str(), &st) == 0) {
      if (!S_ISSOCK(st.st_mode)) {
        return absl::FailedPreconditionError(StrCat(path, " exists and is not a socket; refusing to replace it"));
      }
      ::unlink(path.c_str());  // stale socket of an earlier run
    }
    unix_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (unix_fd_ < 0) return ErrnoStatus(errno, "socket");
    sun.sun_family = AF_UNIX;
    std::memcpy(sun.sun_path, path.c_str(), path.size());
    mode_t old = ::umask(0177);  // the socket is born 0600
    int rc = ::bind(unix_fd_, reinterpret_cast<sockaddr*>(&sun), sizeof(sun));
    ::umask(old);
    if (rc != 0) return ErrnoStatus(errno, StrCat("bind ", path));
    ::chmod(path.c_str(), 0600);
    if (::listen(unix_fd_, 128) != 0) return ErrnoStatus(errno, "listen");
  }
  return absl::OkStatus();
}

void HttpServer::AcceptLoop(int listen_fd, bool unix_socket) {
  while (!stopping_) {
    pollfd p[2] = {{listen_fd, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    int rc = ::poll(p, 2, -1);
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0 || (p[1].revents & POLLIN)) break;
    int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    if (unix_socket) {
      // The socket file is 0600; check the peer as well.
      ucred cred{};
      socklen_t len = sizeof(cred);
      if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
          (cred.uid != 0 && cred.uid != ::geteuid())) {
        ::close(fd);
        continue;
      }
    } else {
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    {
      absl::MutexLock lock(&connections_->mu);
      if (connections_->active >= options_.max_connections) {
        if (unix_socket) {
          FdStream s(fd, wake_fd_, absl::Seconds(1));
          SendPlain(s, 503, "too many connections");
        }
        ::close(fd);
        continue;
      }
      ++connections_->active;
    }
    // The count lives in shared state: Shutdown() may return (and this
    // server be destroyed) the moment the count drops to zero.
    std::thread([this, fd, unix_socket, connections = connections_] {
      Serve(fd, unix_socket);
      ::close(fd);
      absl::MutexLock lock(&connections->mu);
      --connections->active;
    }).detach();
  }
}

void HttpServer::Serve(int fd, bool unix_socket) {
  const bool https = !unix_socket && options_.tcp_mode == TcpMode::kHttpsWithToken;
  std::unique_ptr<SSL, decltype(&SSL_free)> ssl(nullptr, &SSL_free);
  if (https) {
    ssl.reset(SSL_new(static_cast<SSL_CTX*>(ssl_ctx_)));
    if (!ssl || SSL_set_fd(ssl.get(), fd) != 1) return;
  }
  FdStream stream(fd, wake_fd_, options_.io_timeout, ssl.get());
  if (ssl && !stream.Handshake()) return;
  beast::flat_buffer buffer;
  while (!stopping_) {
    bhttp::request_parser<bhttp::string_body> parser;
    parser.header_limit(64 * 1024);
    parser.body_limit(options_.max_body_bytes);
    boost::system::error_code ec;
    stream.set_timeout(options_.idle_timeout);
    bhttp::read_header(stream, buffer, parser, ec);
    if (!ec) {
      stream.set_timeout(options_.io_timeout);
      bhttp::read(stream, buffer, parser, ec);
    }
    if (ec == bhttp::error::end_of_stream || ec == boost::asio::error::eof ||
        ec == boost::asio::error::timed_out || ec == boost::asio::error::operation_aborted) {
      return;
    }
    if (ec == bhttp::error::body_limit) {
      SendPlain(stream, 413, "request body too large");
      return;
    }
    if (ec) {
      SendPlain(stream, 400, "malformed HTTP request");
      return;
    }
    const bool keep_alive = parser.get().keep_alive();
    HttpRequest req = FromBeast(parser.release());
    req.over_unix_socket = unix_socket;
    if (!SplitTarget(req)) {
      SendPlain(stream, 400, "malformed request path");
      return;
    }
    // TCP clients prove themselves with the token; nothing else runs first.
    if (https && !TokenMatches(req.Header("authorization"), options_.bearer_token)) {
      SendPlain(stream, 401, "Unauthorized");
      return;
    }
    stream.set_timeout(options_.io_timeout);
    ConnectionWriter writer(stream, keep_alive);
    const absl::Time start = absl::Now();
    handler_(req, writer);
    // Method and path only: bodies (Secrets) and query strings never reach logs.
    spdlog::debug("{} {} {} {}ms{}", req.method, req.path, writer.code(),
                  absl::ToInt64Milliseconds(absl::Now() - start), unix_socket ? " (unix)" : "");
    if (!writer.Finish()) return;
  }
}

void HttpServer::Shutdown() {
  if (stopping_.exchange(true)) return;
  uint64_t one = 1;
  if (wake_fd_ >= 0) (void)!::write(wake_fd_, &one, sizeof(one));
  for (auto& t : acceptors_) t.join();
  acceptors_.clear();
  // Connection threads see the eventfd and return; wait for them.
  {
    absl::MutexLock lock(&connections_->mu);
    connections_->mu.Await(absl::Condition(+[](size_t* n) { return *n == 0; }, &connections_->active));
  }
  if (tcp_fd_ >= 0) ::close(tcp_fd_);
  if (unix_fd_ >= 0) {
    ::close(unix_fd_);
    ::unlink(options_.unix_socket.c_str());
  }
  ::close(wake_fd_);
  if (ssl_ctx_ != nullptr) SSL_CTX_free(static_cast<SSL_CTX*>(ssl_ctx_));
  ssl_ctx_ = nullptr;
}

}  // namespace berth::http
