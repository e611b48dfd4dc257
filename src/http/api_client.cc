#include "http/api_client.h"

#include <sys/socket.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include "absl/strings/escaping.h"
#include "common/fs.h"
#include "common/status.h"
#include "common/strings.h"

namespace berth::http {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;

}  // namespace

struct ApiClient::Conn {
  asio::io_context io;
  asio::ssl::context tls{asio::ssl::context::tls_client};
  std::unique_ptr<asio::local::stream_protocol::socket> unix_sock;
  std::unique_ptr<asio::ssl::stream<asio::ip::tcp::socket>> tls_sock;
  beast::flat_buffer buffer;

  template <class Fn>
  auto With(Fn&& fn) {
    if (unix_sock) return fn(*unix_sock);
    return fn(*tls_sock);
  }
};

ApiClient::~ApiClient() = default;

std::unique_ptr<ApiClient> ApiClient::ForUnixSocket(const std::string& socket_path) {
  std::unique_ptr<ApiClient> c(new ApiClient());
  c->socket_path_ = socket_path;
  return c;
}

std::unique_ptr<ApiClient> ApiClient::ForTcp(const std::string& host, int port, const std::string& ca_pem,
                                             const std::string& token) {
  std::unique_ptr<ApiClient> c(new ApiClient());
  c->host_ = host;
  c->port_ = port;
  c->ca_pem_ = ca_pem;
  c->token_ = token;
  return c;
}

std::unique_ptr<ApiClient> ApiClient::Clone() const {
  std::unique_ptr<ApiClient> c(new ApiClient());
  c->socket_path_ = socket_path_;
  c->host_ = host_;
  c->port_ = port_;
  c->ca_pem_ = ca_pem_;
  c->token_ = token_;
  c->namespace_ = namespace_;
  return c;
}

absl::StatusOr<std::unique_ptr<ApiClient>> ApiClient::ForDataDir(const std::string& data_dir) {
  return ForUnixSocket(StrCat(data_dir, "/api.sock"));
}

absl::StatusOr<std::unique_ptr<ApiClient::Conn>> ApiClient::Connect() {
  auto conn = std::make_unique<Conn>();
  boost::system::error_code ec;
  if (!socket_path_.empty()) {
    conn->unix_sock = std::make_unique<asio::local::stream_protocol::socket>(conn->io);
    conn->unix_sock->connect(asio::local::stream_protocol::endpoint(socket_path_), ec);
    if (ec) {
      return absl::UnavailableError(StrCat("cannot reach the berth API at ", socket_path_, ": ", ec.message(),
                                           " (is `berth up` running? root is needed for the socket)"));
    }
  } else {
    conn->tls.add_certificate_authority(asio::buffer(ca_pem_), ec);
    if (ec) return absl::InvalidArgumentError(StrCat("bad certificate authority: ", ec.message()));
    conn->tls.set_verify_mode(asio::ssl::verify_peer);
    conn->tls_sock = std::make_unique<asio::ssl::stream<asio::ip::tcp::socket>>(conn->io, conn->tls);
    conn->tls_sock->set_verify_callback(asio::ssl::host_name_verification(host_));
    auto addr = asio::ip::make_address(host_, ec);
    if (!ec) conn->tls_sock->next_layer().connect(asio::ip::tcp::endpoint(addr, static_cast<uint16_t>(port_)), ec);
    if (ec) {
      return absl::UnavailableError(StrCat("cannot reach the berth API at ", host_, ":", port_, ": ", ec.message()));
    }
    conn->tls_sock->next_layer().set_option(asio::ip::tcp::no_delay(true));
    conn->tls_sock->handshake(asio::ssl::stream_base::client, ec);
    if (ec) return absl::UnavailableError(StrCat("TLS handshake with ", host_, ":", port_, " failed: ", ec.message()));
  }
  return conn;
}

absl::StatusOr<ApiResponse> ApiClient::Call(const std::string& method, const std::string& target,
                                            const std::string& body, const std::string& content_type,
                                            const std::string& accept) {
  bhttp::request<bhttp::string_body> req{bhttp::string_to_verb(method), target, 11};
  req.set(bhttp::field::host, "berth");
  req.set(bhttp::field::accept, accept);
  req.set(bhttp::field::user_agent, "berth-cli");
  if (!token_.empty()) req.set(bhttp::field::authorization, StrCat("Bearer ", token_));
  if (!body.empty()) req.set(bhttp::field::content_type, content_type);
  req.body() = body;
  req.prepare_payload();
  req.keep_alive(true);
  // A kept-alive connection may have been closed by the server meanwhile:
  // one retry on a fresh connection.
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (!conn_) {
      BERTH_ASSIGN_OR_RETURN(conn_, Connect());
    }
    boost::system::error_code ec;
    conn_->With([&](auto& sock) { bhttp::write(sock, req, ec); });
    bhttp::response_parser<bhttp::string_body> parser;
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    if (!ec) conn_->With([&](auto& sock) { bhttp::read(sock, conn_->buffer, parser, ec); });
    if (ec) {
      conn_.reset();
      if (attempt == 0) continue;
      return absl::UnavailableError(StrCat("berth API connection failed: ", ec.message()));
    }
    auto res = parser.release();
    ApiResponse out{static_cast<int>(res.result_int()), std::string(res[bhttp::field::content_type]),
                    std::move(res.body())};
    if (!res.keep_alive()) conn_.reset();
    return out;
  }
  return absl::UnavailableError("berth API connection failed");
}

absl::StatusOr<ApiResponse> ApiClient::Stream(const std::string& target, const std::string& accept,
                                              const std::function<bool(const std::string&)>& on_line) {
  BERTH_ASSIGN_OR_RETURN(std::unique_ptr<Conn> conn, Connect());
  {
    absl::MutexLock lock(&cancel_mu_);
    if (cancelled_) return absl::CancelledError("the stream was cancelled");
    stream_fd_ = conn->With([](auto& sock) { return static_cast<int>(beast::get_lowest_layer(sock).native_handle()); });
  }
  struct Unset {
    ApiClient* c;
    ~Unset() {
      absl::MutexLock lock(&c->cancel_mu_);
      c->stream_fd_ = -1;
    }
  } unset{this};
  bhttp::request<bhttp::empty_body> req{bhttp::verb::get, target, 11};
  req.set(bhttp::field::host, "berth");
  req.set(bhttp::field::accept, accept);
  if (!token_.empty()) req.set(bhttp::field::authorization, StrCat("Bearer ", token_));
  boost::system::error_code ec;
  conn->With([&](auto& sock) { bhttp::write(sock, req, ec); });
  if (ec) return absl::UnavailableError(StrCat("berth API connection failed: ", ec.message()));
  bhttp::response_parser<bhttp::string_body> parser;
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());
  conn->With([&](auto& sock) { bhttp::read_header(sock, conn->buffer, parser, ec); });
  if (ec) return absl::UnavailableError(StrCat("berth API connection failed: ", ec.message()));
  ApiResponse out{static_cast<int>(parser.get().result_int()), std::string(parser.get()[bhttp::field::content_type]),
                  ""};
  if (out.code != 200) {
    conn->With([&](auto& sock) { bhttp::read(sock, conn->buffer, parser, ec); });
    out.body = parser.get().body();
    return out;
  }
  while (!parser.is_done()) {
    conn->With([&](auto& sock) { bhttp::read_some(sock, conn->buffer, parser, ec); });
    if (ec) break;
    std::string& body = parser.get().body();
    size_t start = 0, nl;
    while ((nl = body.find('\n', start)) != std::string::npos) {
      if (!on_line(body.substr(start, nl - start))) return out;
      start = nl + 1;
    }
    body.erase(0, start);
  }
  return out;
}

void ApiClient::CancelStream() {
  absl::MutexLock lock(&cancel_mu_);
  cancelled_ = true;
  // shutdown(2) wakes a blocked read; the socket itself is closed by Stream.
  if (stream_fd_ >= 0) ::shutdown(stream_fd_, SHUT_RDWR);
}

std::string ErrorMessage(const ApiResponse& response) {
  nlohmann::json body = nlohmann::json::parse(response.body, nullptr, false);
  if (body.is_object() && body.value("kind", "") == "Status" && body.contains("message")) {
    return body["message"].get<std::string>();
  }
  return StrCat("HTTP ", response.code, ": ", response.body);
}

}  // namespace berth::http
