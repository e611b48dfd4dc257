#include "http/server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <fcntl.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <deque>
#include <list>
#include <thread>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/v6_only.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/status.h"
#include "common/strings.h"
#include "common/thread_name.h"
#include "http/request.h"
#include "http/response.h"
#include "openssl/crypto.h"
#include "spdlog/spdlog.h"

namespace berth::http {
namespace {

using internal::DetachedStream;
using internal::HandlerPool;
using internal::Output;
using internal::ResponseHead;
using internal::SessionBase;
using internal::Writer;

namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;
using UnixProtocol = net::local::stream_protocol;
using ErrorCode = boost::system::error_code;

bool TokenMatches(const std::string& header, const std::string& token) {
  constexpr std::string_view kBearer = "Bearer ";
  if (token.empty() || header.size() != kBearer.size() + token.size() || !header.starts_with(kBearer)) return false;
  return CRYPTO_memcmp(header.data() + kBearer.size(), token.data(), token.size()) == 0;
}

}  // namespace

class HttpServer::Impl {
 public:
  Impl(Options options, HttpHandler handler)
      : options_(std::move(options)),
        handler_(std::move(handler)),
        clock_(*options_.clock),
        work_(net::make_work_guard(ioc_)),
        ssl_ctx_(ssl::context::tls_server) {}

  absl::Status Init();
  void Shutdown();
  Stats stats() const;

  int tcp_port_ = 0;

  // Everything below is the sessions' business too.
  absl::Status InitTls();
  absl::Status Listen();
  template <class Acceptor>
  void Accept(Acceptor& acceptor);
  void OnAccepted(tcp::socket socket);
  void OnAccepted(UnixProtocol::socket socket);
  template <class S>
  void Launch(S stream, bool over_unix_socket);

  // Sessions, for Shutdown; each unregisters itself when destroyed.
  std::list<std::weak_ptr<SessionBase>>::iterator Register(std::weak_ptr<SessionBase> s) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return sessions_.insert(sessions_.end(), std::move(s));
  }
  void Unregister(std::list<std::weak_ptr<SessionBase>>::iterator it) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    sessions_.erase(it);
  }
  // Takes an in-flight slot; false when over the limit.
  bool Admit(bool mutating) {
    std::atomic<int64_t>& n = mutating ? inflight_mutating_ : inflight_reads_;
    const size_t limit =
        mutating ? options_.limits.max_mutating_requests_inflight : options_.limits.max_requests_inflight;
    if (n.fetch_add(1) >= static_cast<int64_t>(limit) && limit > 0) {
      --n;
      return false;
    }
    return true;
  }
  void Release(bool mutating) { --(mutating ? inflight_mutating_ : inflight_reads_); }

  const Options options_;
  const HttpHandler handler_;
  Clock& clock_;
  net::io_context ioc_;
  net::executor_work_guard<net::io_context::executor_type> work_;
  ssl::context ssl_ctx_;
  bool https_ = false;
  std::unique_ptr<tcp::acceptor> tcp_acceptor_;
  std::unique_ptr<UnixProtocol::acceptor> unix_acceptor_;
  std::vector<std::thread> io_threads_;
  std::unique_ptr<HandlerPool> pool_;
  std::atomic<bool> stopping_{false};

  absl::Mutex mu_;
  std::list<std::weak_ptr<SessionBase>> sessions_ ABSL_GUARDED_BY(mu_);
  ScopedTimer accept_retry_ ABSL_GUARDED_BY(mu_);

  std::atomic<int64_t> open_{0};
  std::atomic<int64_t> inflight_reads_{0};
  std::atomic<int64_t> inflight_mutating_{0};
  std::atomic<int64_t> long_running_{0};
  std::atomic<int64_t> accepted_{0};
  std::atomic<int64_t> refused_{0};
  std::atomic<int64_t> timed_out_{0};
  std::atomic<int64_t> throttled_{0};
};

namespace {

// One connection. Everything but PostFlush/PostClose/PostDeadline runs on
// the connection's strand (its socket's executor), so none of it locks.
// Kept alive by its pending operations and by the handler task running for
// it; Output and DetachedStream never own it.
template <class S>
class Session final : public SessionBase {
 public:
  static constexpr bool kTls = std::is_same_v<S, ssl::stream<tcp::socket>>;

  Session(HttpServer::Impl& server, S stream, bool over_unix_socket)
      : server_(server), stream_(std::move(stream)), executor_(stream_->get_executor()), unix_(over_unix_socket) {
    ++server_.open_;
  }
  ~Session() override {
    // The socket and the strand must go before the server may (Shutdown
    // waits for the last session to unregister).
    tunnel_.reset();
    stream_.reset();
    executor_.reset();
    --server_.open_;
    server_.Unregister(registration_);
  }

  void Begin() {
    registration_ = server_.Register(weak_from_this());
    net::dispatch(*executor_, [self = Self()] { self->Start(); });
  }

  // SessionBase
  void PostFlush() override {
    net::post(*executor_, [self = Self()] { self->Flush(); });
  }
  void PostClose() override {
    net::post(*executor_, [self = Self()] { self->Close(); });
  }

 private:
  struct Deadline {
    Clock::TimerId id = 0;
    uint64_t generation = 0;
    bool armed = false;
  };

  std::shared_ptr<Session> Self() { return std::static_pointer_cast<Session>(shared_from_this()); }
  const HttpServer::Options& options() const { return server_.options_; }

  void Start() {
    if (server_.stopping_) return Close();
    if constexpr (kTls) {
      Arm(read_deadline_, options().limits.tls_handshake_timeout);
      stream_->async_handshake(ssl::stream_base::server, [self = Self()](ErrorCode ec) {
        self->Disarm(self->read_deadline_);
        if (ec || self->closed_) return self->Close();
        self->ReadRequest();
      });
    } else {
      ReadRequest();
    }
  }

  // A kept-alive connection idles until the next request's first byte; its
  // headers then have header_timeout to arrive.
  void ReadRequest() {
    if (closed_) return;
    if (requests_ > 0 && buffer_.size() == 0) {
      Arm(read_deadline_, options().limits.idle_timeout);
      stream_->async_read_some(buffer_.prepare(4096), [self = Self()](ErrorCode ec, size_t n) {
        if (ec || self->closed_) return self->Close();
        self->buffer_.commit(n);
        self->ReadHeader();
      });
      return;
    }
    ReadHeader();
  }

  void ReadHeader() {
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(std::min<size_t>(options().limits.max_header_bytes, UINT32_MAX)));
    parser_->body_limit(options().max_body_bytes);
    Arm(read_deadline_, options().limits.header_timeout);
    bhttp::async_read_header(*stream_, buffer_, *parser_,
                             [self = Self()](ErrorCode ec, size_t) { self->OnHeader(ec); });
  }

  static bool IsParseError(const ErrorCode& ec) {
    return ec.category() == bhttp::make_error_code(bhttp::error::bad_target).category() &&
           ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message;
  }

  void OnHeader(ErrorCode ec) {
    if (closed_) return;
    if (ec == bhttp::error::header_limit) return Reject(431, "request header too large");
    if (IsParseError(ec)) return Reject(400, "malformed HTTP request");
    if (ec) return Close();
    // TCP clients prove themselves with the token before anything else runs
    // (their body is not even read).
    if (https() && !TokenMatches(std::string(parser_->get()[bhttp::field::authorization]), options().bearer_token)) {
      return Reject(401, "Unauthorized");
    }
    Arm(read_deadline_, options().limits.io_timeout);
    bhttp::async_read(*stream_, buffer_, *parser_, [self = Self()](ErrorCode ec2, size_t) { self->OnRequest(ec2); });
  }

  void OnRequest(ErrorCode ec) {
    Disarm(read_deadline_);
    if (closed_) return;
    if (ec == bhttp::error::body_limit) return Reject(413, "request body too large");
    if (IsParseError(ec)) return Reject(400, "malformed HTTP request");
    if (ec) return Close();
    keep_alive_ = parser_->get().keep_alive();
    auto req = std::make_shared<HttpRequest>(internal::FromBeast(parser_->release()));
    parser_.reset();
    req->over_unix_socket = unix_;
    if (!internal::SplitTarget(*req)) return Reject(400, "malformed request path");
    ++requests_;
    const bool long_running = options().long_running && options().long_running(*req);
    const bool mutating = req->method != "GET" && req->method != "HEAD" && req->method != "OPTIONS";
    if (!long_running && !server_.Admit(mutating)) {
      // kube-apiserver's answer over --max-requests-inflight; clients retry.
      ++server_.throttled_;
      return SendDirect(StrCat(ResponseHead(429, "text/plain; charset=utf-8", "Retry-After: 1\r\n"),
                               "Content-Length: 43\r\n\r\nToo many requests, please try again later.\n"));
    }
    out_ = std::make_shared<Output>(weak_from_this());
    server_.pool_->Post([self = Self(), out = out_, req, keep_alive = keep_alive_, long_running, mutating] {
      HttpServer::Impl& server = self->server_;
      Writer writer(out, keep_alive);
      const absl::Time start = absl::Now();
      server.handler_(*req, writer);
      if (!long_running) server.Release(mutating);
      // Method and path only: bodies (Secrets) and query strings never reach logs.
      spdlog::debug("{} {} {} {}ms{}", req->method, req->path, writer.code(),
                    absl::ToInt64Milliseconds(absl::Now() - start), req->over_unix_socket ? " (unix)" : "");
      writer.Done();
    });
  }

  // An answer of the server's own (errors, 429): whole, then the connection
  // goes on (keep-alive) or closes.
  void SendDirect(std::string bytes) {
    out_ = std::make_shared<Output>(weak_from_this());
    out_->Append(std::move(bytes), true);
    out_->HandlerReturned(false);
  }
  void Reject(int code, std::string_view message) {
    keep_alive_ = false;
    std::string body = internal::StatusBody(code, code == 401 ? "Unauthorized" : "BadRequest", message);
    SendDirect(StrCat(ResponseHead(code, "application/json", "Connection: close\r\n"), "Content-Length: ", body.size(),
                      "\r\n\r\n", body));
  }

  void Flush() {
    if (closed_ || writing_ || !out_) return;
    Output::Batch batch = out_->Take();
    if (!batch.bytes.empty()) {
      writing_ = true;
      write_buffer_ = std::move(batch.bytes);
      Arm(write_deadline_, options().limits.io_timeout);
      net::async_write(*stream_, net::buffer(write_buffer_), [self = Self()](ErrorCode ec, size_t n) {
        self->writing_ = false;
        self->Disarm(self->write_deadline_);
        if (self->closed_) return;
        if (ec) return self->Close();
        if (auto wakeup = self->out_->Written(n)) wakeup();
        self->Flush();
      });
      return;
    }
    if (batch.detached && !watching_eof_) {
      watching_eof_ = true;
      ++server_.long_running_;
      WatchForEof();
    }
    if (!batch.response_done) return;
    out_.reset();
    if (batch.tunnel >= 0) return StartTunnel(batch.tunnel);
    // A detached stream's end closes the connection (its EOF watch holds
    // the read side).
    if (batch.detached || !keep_alive_ || server_.stopping_) return Close();
    ReadRequest();
  }

  // ---- A tunnel (ResponseWriter::Tunnel): its head is written; from here
  // on two pumps copy bytes, each one read then one write at a time, so a
  // side that does not read stops the other side's reads (no buffering
  // beyond one buffer per direction).
  void StartTunnel(int fd) {
    tunnel_.emplace(*executor_);
    ErrorCode ec;
    tunnel_->assign(fd, ec);
    if (ec) {
      ::close(fd);
      return Close();
    }
    tunneling_ = true;
    ++server_.long_running_;
    up_buffer_.resize(kTunnelBuffer);
    down_buffer_.resize(kTunnelBuffer);
    PumpUp();
    PumpDown();
  }
  void PumpUp() {
    // Bytes the client sent after its request (none for SPDY and WebSocket
    // clients, which wait for the 101) go first.
    if (buffer_.size() > 0) {
      const size_t n = std::min(buffer_.size(), up_buffer_.size());
      net::buffer_copy(net::buffer(up_buffer_), buffer_.data(), n);
      buffer_.consume(n);
      return WriteUp(n);
    }
    stream_->async_read_some(net::buffer(up_buffer_), [self = Self()](ErrorCode ec, size_t n) {
      if (self->closed_) return;
      // Either side's end ends both, as kube-apiserver's proxy does.
      if (ec) return self->Close();
      self->WriteUp(n);
    });
  }
  void WriteUp(size_t n) {
    net::async_write(*tunnel_, net::buffer(up_buffer_.data(), n), [self = Self()](ErrorCode ec, size_t) {
      if (self->closed_) return;
      if (ec) return self->Close();
      self->PumpUp();
    });
  }
  void PumpDown() {
    tunnel_->async_read_some(net::buffer(down_buffer_), [self = Self()](ErrorCode ec, size_t n) {
      if (self->closed_) return;
      if (ec) return self->Close();  // the backend is done: so is the client
      self->Arm(self->write_deadline_, self->options().limits.io_timeout);
      net::async_write(*self->stream_, net::buffer(self->down_buffer_.data(), n), [self](ErrorCode ec2, size_t) {
        self->Disarm(self->write_deadline_);
        if (self->closed_) return;
        if (ec2) return self->Close();
        self->PumpDown();
      });
    });
  }

  // While a detached stream runs nobody reads the connection: notice the
  // client going away (whatever it sends meanwhile is dropped: the
  // connection closes after the stream).
  void WatchForEof() {
    stream_->async_read_some(net::buffer(eof_buffer_), [self = Self()](ErrorCode ec, size_t) {
      if (self->closed_) return;
      if (ec) return self->Close();
      self->WatchForEof();
    });
  }

  void Close() {
    if (closed_) return;
    closed_ = true;
    if (watching_eof_ || tunneling_) --server_.long_running_;
    Disarm(read_deadline_);
    Disarm(write_deadline_);
    if (out_) {
      if (auto wakeup = out_->Close()) wakeup();
    }
    ErrorCode ignored;
    stream_->lowest_layer().shutdown(net::socket_base::shutdown_both, ignored);
    stream_->lowest_layer().close(ignored);
    if (tunnel_) tunnel_->close(ignored);
  }

  // Deadlines run on the server's clock; a deadline that passes closes the
  // connection, which ends whatever operation was waiting.
  void Arm(Deadline& d, absl::Duration timeout) {
    Disarm(d);
    d.armed = true;
    d.generation = ++generations_;
    const bool is_read = &d == &read_deadline_;
    d.id = server_.clock_.AfterFunc(
        server_.clock_.Now() + timeout, [weak = weak_from_this(), is_read, generation = d.generation] {
          if (auto s = weak.lock()) {
            auto self = std::static_pointer_cast<Session>(s);
            net::post(*self->executor_, [self, is_read, generation] { self->OnDeadline(is_read, generation); });
          }
        });
  }
  void Disarm(Deadline& d) {
    if (!d.armed) return;
    d.armed = false;
    server_.clock_.Cancel(d.id);
  }
  void OnDeadline(bool is_read, uint64_t generation) {
    Deadline& d = is_read ? read_deadline_ : write_deadline_;
    if (closed_ || !d.armed || d.generation != generation) return;
    d.armed = false;
    ++server_.timed_out_;
    Close();
  }

  bool https() const { return kTls; }

  HttpServer::Impl& server_;
  std::optional<S> stream_;
  std::optional<net::any_io_executor> executor_;  // the connection's strand
  const bool unix_;
  std::list<std::weak_ptr<SessionBase>>::iterator registration_;

  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  std::shared_ptr<Output> out_;  // the response being written
  std::string write_buffer_;
  std::array<char, 512> eof_buffer_;
  std::optional<net::posix::stream_descriptor> tunnel_;  // a tunnel's backend
  static constexpr size_t kTunnelBuffer = 32 << 10;
  std::vector<char> up_buffer_, down_buffer_;  // a tunnel's: client → backend, backend → client
  bool tunneling_ = false;
  Deadline read_deadline_, write_deadline_;
  uint64_t generations_ = 0;
  int requests_ = 0;
  bool keep_alive_ = true;
  bool writing_ = false;
  bool watching_eof_ = false;
  bool closed_ = false;
};

}  // namespace

absl::Status HttpServer::Impl::Init() {
  // OpenSSL writes with write(2): a client that went away must make a write
  // fail with EPIPE, not kill the process.
  ::signal(SIGPIPE, SIG_IGN);
  https_ = !options_.tcp_address.empty() && options_.tcp_mode == TcpMode::kHttpsWithToken;
  if (https_) BERTH_RETURN_IF_ERROR(InitTls());
  BERTH_RETURN_IF_ERROR(Listen());
  pool_ = std::make_unique<HandlerPool>(options_.limits.handler_threads);
  for (int i = 0; i < std::max(1, options_.limits.io_threads); ++i)
    io_threads_.emplace_back(NamedThread("http io", [this] { ioc_.run(); }));
  if (tcp_acceptor_) net::post(tcp_acceptor_->get_executor(), [this] { Accept(*tcp_acceptor_); });
  if (unix_acceptor_) net::post(unix_acceptor_->get_executor(), [this] { Accept(*unix_acceptor_); });
  return absl::OkStatus();
}

absl::Status HttpServer::Impl::InitTls() {
  if (options_.bearer_token.empty() || options_.tls_cert_file.empty() || options_.tls_key_file.empty()) {
    return absl::InvalidArgumentError("an HTTPS listener needs a bearer token and a TLS certificate and key");
  }
  SSL_CTX* ctx = ssl_ctx_.native_handle();
  ErrorCode ec1, ec2;
  ssl_ctx_.use_certificate_chain_file(options_.tls_cert_file, ec1);
  ssl_ctx_.use_private_key_file(options_.tls_key_file, ssl::context::pem, ec2);
  if (ec1 || ec2 || SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1 || SSL_CTX_check_private_key(ctx) != 1) {
    return absl::FailedPreconditionError(
        StrCat("cannot load the TLS certificate ", options_.tls_cert_file, " and key"));
  }
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
  return absl::OkStatus();
}

absl::Status HttpServer::Impl::Listen() {
  if (!options_.tcp_address.empty()) {
    BERTH_ASSIGN_OR_RETURN(TcpAddress addr, ParseTcpAddress(options_.tcp_address));
    if (options_.loopback_only && !addr.loopback) {
      return absl::InvalidArgumentError(
          StrCat("this server listens on loopback only (127.0.0.0/8 or [::1]), not ", addr.host));
    }
    ErrorCode ec;
    const net::ip::address ip = net::ip::make_address(addr.host, ec);
    if (ec) return absl::InvalidArgumentError(StrCat("bad address ", addr.host));
    const tcp::endpoint endpoint(ip, static_cast<uint16_t>(addr.port));
    auto acceptor = std::make_unique<tcp::acceptor>(net::make_strand(ioc_));
    acceptor->open(endpoint.protocol(), ec);
    if (!ec) acceptor->set_option(net::socket_base::reuse_address(true), ec);
    if (!ec && addr.ipv6) acceptor->set_option(net::ip::v6_only(true), ec);
    if (!ec) acceptor->bind(endpoint, ec);
    if (ec) return ErrnoStatus(ec.value(), StrCat("bind ", options_.tcp_address));
    acceptor->listen(net::socket_base::max_listen_connections, ec);
    if (ec) return ErrnoStatus(ec.value(), "listen");
    ::fcntl(acceptor->native_handle(), F_SETFD, FD_CLOEXEC);
    tcp_port_ = acceptor->local_endpoint().port();
    tcp_acceptor_ = std::move(acceptor);
  }
  if (!options_.unix_socket.empty()) {
    const std::string& path = options_.unix_socket;
    if (path.size() >= sizeof(sockaddr_un::sun_path)) {
      return absl::InvalidArgumentError(StrCat("socket path too long: ", path));
    }
    struct stat st;
    if (::lstat(path.c_str(), &st) == 0) {
      if (!S_ISSOCK(st.st_mode)) {
        return absl::FailedPreconditionError(StrCat(path, " exists and is not a socket; refusing to replace it"));
      }
      ::unlink(path.c_str());  // stale socket of an earlier run
    }
    auto acceptor = std::make_unique<UnixProtocol::acceptor>(net::make_strand(ioc_));
    ErrorCode ec;
    acceptor->open(UnixProtocol(), ec);
    if (ec) return ErrnoStatus(ec.value(), "socket");
    ::fcntl(acceptor->native_handle(), F_SETFD, FD_CLOEXEC);
    mode_t old = ::umask(0177);  // the socket is born 0600
    acceptor->bind(UnixProtocol::endpoint(path), ec);
    ::umask(old);
    if (ec) return ErrnoStatus(ec.value(), StrCat("bind ", path));
    ::chmod(path.c_str(), 0600);
    acceptor->listen(net::socket_base::max_listen_connections, ec);
    if (ec) return ErrnoStatus(ec.value(), "listen");
    unix_acceptor_ = std::move(acceptor);
  }
  return absl::OkStatus();
}

template <class Acceptor>
void HttpServer::Impl::Accept(Acceptor& acceptor) {
  net::any_io_executor strand = net::make_strand(ioc_);
  acceptor.async_accept(strand, [this, &acceptor](ErrorCode ec, auto socket) {
    if (stopping_ || ec == net::error::operation_aborted) return;
    if (ec) {
      // Out of descriptors (EMFILE) or the like: try again shortly rather
      // than spin; the connections that exist go on being served.
      spdlog::warn("accepting a connection failed: {}", ec.message());
      absl::MutexLock lock(&mu_);
      accept_retry_.Set(clock_, clock_.Now() + absl::Milliseconds(100), [this, &acceptor] {
        net::post(acceptor.get_executor(), [this, &acceptor] {
          if (!stopping_) Accept(acceptor);
        });
      });
      return;
    }
    ++accepted_;
    if (open_ >= static_cast<int64_t>(options_.limits.max_connections)) {
      ++refused_;
      ErrorCode ignored;
      socket.close(ignored);
    } else {
      OnAccepted(std::move(socket));
    }
    Accept(acceptor);
  });
}

void HttpServer::Impl::OnAccepted(tcp::socket socket) {
  ErrorCode ignored;
  socket.set_option(tcp::no_delay(true), ignored);
  if (https_) {
    Launch(ssl::stream<tcp::socket>(std::move(socket), ssl_ctx_), false);
  } else {
    Launch(std::move(socket), false);
  }
}

void HttpServer::Impl::OnAccepted(UnixProtocol::socket socket) {
  // The socket file is 0600; check the peer as well.
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(socket.native_handle(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
      (cred.uid != 0 && cred.uid != ::geteuid())) {
    ErrorCode ignored;
    socket.close(ignored);
    return;
  }
  Launch(std::move(socket), true);
}

template <class S>
void HttpServer::Impl::Launch(S stream, bool over_unix_socket) {
  std::make_shared<Session<S>>(*this, std::move(stream), over_unix_socket)->Begin();
}

void HttpServer::Impl::Shutdown() {
  if (stopping_.exchange(true)) return;
  {
    absl::MutexLock lock(&mu_);
    accept_retry_.Reset();
  }
  // Close every connection: streams end, handlers writing see Cancelled().
  // A connection accepted meanwhile closes itself at Start (stopping_).
  std::vector<std::shared_ptr<SessionBase>> live;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& weak : sessions_) {
      if (auto s = weak.lock()) live.push_back(std::move(s));
    }
  }
  for (auto& s : live) s->PostClose();
  live.clear();
  if (pool_) pool_->Stop();
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](std::list<std::weak_ptr<SessionBase>>* s) { return s->empty(); }, &sessions_));
  }
  work_.reset();
  ioc_.stop();
  for (auto& t : io_threads_) t.join();
  io_threads_.clear();
  tcp_acceptor_.reset();
  if (unix_acceptor_) {
    unix_acceptor_.reset();
    ::unlink(options_.unix_socket.c_str());
  }
}

HttpServer::Stats HttpServer::Impl::stats() const {
  return Stats{.open_connections = open_,
               .inflight_reads = inflight_reads_,
               .inflight_mutating = inflight_mutating_,
               .long_running = long_running_,
               .accepted = accepted_,
               .refused_connections = refused_,
               .timed_out = timed_out_,
               .throttled = throttled_};
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() { Shutdown(); }

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(Options options, HttpHandler handler) {
  auto impl = std::make_unique<Impl>(std::move(options), std::move(handler));
  if (absl::Status st = impl->Init(); !st.ok()) {
    impl->Shutdown();
    return st;
  }
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

int HttpServer::tcp_port() const { return impl_->tcp_port_; }
HttpServer::Stats HttpServer::stats() const { return impl_->stats(); }
void HttpServer::Shutdown() {
  if (impl_) impl_->Shutdown();
}

}  // namespace berth::http
