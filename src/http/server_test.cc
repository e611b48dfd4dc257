// The HTTP server over real sockets: the unix socket, plain HTTP on TCP,
// address parsing and the loopback rule, malformed requests, chunked
// streams ended by shutdown. HTTPS with the bearer token is exercised
// through the API server (src/apiserver/control_plane_test.cc).
#include "http/server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace berth::http {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// Sends `bytes` on a connected socket and reads until the server closes.
std::string Exchange(int fd, const std::string& bytes) {
  EXPECT_EQ(::write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

int ConnectUnix(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un sun{};
  sun.sun_family = AF_UNIX;
  std::strncpy(sun.sun_path, path.c_str(), sizeof(sun.sun_path) - 1);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&sun), sizeof(sun)), 0) << std::strerror(errno);
  return fd;
}

int ConnectTcp(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_port = htons(static_cast<uint16_t>(port));
  sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&sin), sizeof(sin)), 0) << std::strerror(errno);
  return fd;
}

HttpServer::Options UnixOnly(const std::string& path) {
  HttpServer::Options o;
  o.unix_socket = path;
  o.tcp_address = "";
  return o;
}

HttpServer::Options PlainTcp(const std::string& address, bool loopback_only = true) {
  HttpServer::Options o;
  o.tcp_address = address;
  o.tcp_mode = HttpServer::TcpMode::kPlainHttp;
  o.loopback_only = loopback_only;
  return o;
}

// Answers "<method> <path> <query a>" so tests see what the handler got.
void Echo(const HttpRequest& r, ResponseWriter& w) {
  auto a = r.query.find("a");
  w.Send(200, "text/plain", r.method + " " + r.path + " " + (a == r.query.end() ? "-" : a->second) + "\n");
}

TEST(HttpServerTest, UnixSocketIsOwnerOnlyAndKeepsConnectionsAlive) {
  berth::testing::TempDir dir;
  auto server = HttpServer::Start(UnixOnly(dir.Join("s.sock")), Echo);
  ASSERT_TRUE(server.ok()) << server.status();
  struct stat st;
  ASSERT_EQ(::stat(dir.Join("s.sock").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ((*server)->tcp_port(), 0);

  // Two requests on one connection: the first keeps it open.
  std::string r = Exchange(ConnectUnix(dir.Join("s.sock")),
                           "GET /one?a=x%20y HTTP/1.1\r\nHost: x\r\n\r\n"
                           "GET /two HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_THAT(r, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(r, HasSubstr("GET /one x y\n"));
  EXPECT_THAT(r, HasSubstr("GET /two -\n"));
}

TEST(HttpServerTest, PlainHttpOnTcpNeedsNoTokenOrCertificate) {
  auto server = HttpServer::Start(PlainTcp("127.0.0.1:0"), Echo);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->tcp_port(), 0);
  std::string r = Exchange(ConnectTcp((*server)->tcp_port()),
                           "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_THAT(r, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(r, HasSubstr("Content-Type: text/plain\r\n"));
  EXPECT_THAT(r, HasSubstr("GET /metrics -\n"));
}

TEST(HttpServerTest, HttpsNeedsTokenAndCertificate) {
  HttpServer::Options https;
  https.tcp_address = "127.0.0.1:0";
  auto server = HttpServer::Start(https, Echo);
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(server.status().message(), HasSubstr("bearer token"));
}

TEST(HttpServerTest, RefusesNonLoopbackUnlessAllowed) {
  auto refused = HttpServer::Start(PlainTcp("0.0.0.0:0"), Echo);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("loopback only"));

  // An address the operator names is served as given (here loopback again:
  // tests never listen beyond it).
  auto allowed = HttpServer::Start(PlainTcp("127.0.0.2:0", /*loopback_only=*/false), Echo);
  ASSERT_TRUE(allowed.ok()) << allowed.status();
}

TEST(HttpServerTest, ServesIpv6Loopback) {
  int probe = ::socket(AF_INET6, SOCK_STREAM, 0);
  if (probe < 0) GTEST_SKIP() << "no IPv6 in this sandbox";
  ::close(probe);
  auto server = HttpServer::Start(PlainTcp("[::1]:0"), Echo);
  if (!server.ok() && server.status().code() != absl::StatusCode::kInvalidArgument) {
    GTEST_SKIP() << "cannot bind [::1]: " << server.status();
  }
  ASSERT_TRUE(server.ok()) << server.status();
  int fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in6 sin6{};
  sin6.sin6_family = AF_INET6;
  sin6.sin6_port = htons(static_cast<uint16_t>((*server)->tcp_port()));
  sin6.sin6_addr = in6addr_loopback;
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&sin6), sizeof(sin6)), 0);
  EXPECT_THAT(Exchange(fd, "GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n"),
              HasSubstr("GET /healthz -\n"));
}

TEST(ParseTcpAddressTest, AcceptsIpv4Ipv6AndPodIpSubstitution) {
  auto v4 = ParseTcpAddress("127.0.0.1:9809");
  ASSERT_TRUE(v4.ok()) << v4.status();
  EXPECT_EQ(v4->host, "127.0.0.1");
  EXPECT_EQ(v4->port, 9809);
  EXPECT_FALSE(v4->ipv6);
  EXPECT_TRUE(v4->loopback);

  auto v6 = ParseTcpAddress("[::1]:80");
  ASSERT_TRUE(v6.ok()) << v6.status();
  EXPECT_EQ(v6->host, "::1");
  EXPECT_TRUE(v6->ipv6);
  EXPECT_TRUE(v6->loopback);

  // "$(POD_IP):9809" with an IPv6 pod IP.
  auto pod = ParseTcpAddress("fd00:10:244::5:9809");
  ASSERT_TRUE(pod.ok()) << pod.status();
  EXPECT_EQ(pod->host, "fd00:10:244::5");
  EXPECT_EQ(pod->port, 9809);
  EXPECT_FALSE(pod->loopback);

  EXPECT_FALSE(ParseTcpAddress("10.1.2.3:9809")->loopback);
}

TEST(ParseTcpAddressTest, RefusesWhatIsNotAnAddressWithAPort) {
  for (const char* bad : {"", "9809", ":9809", "localhost:9809", "127.0.0.1:", "127.0.0.1:x",
                          "127.0.0.1:65536", "127.0.0.1:-1", "[::1]", "1.2.3:80"}) {
    auto a = ParseTcpAddress(bad);
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(a.status().message(), HasSubstr("host:port")) << bad;
  }
}

TEST(HttpServerTest, MalformedRequestsGet400AndServerCarriesOn) {
  berth::testing::TempDir dir;
  auto server = HttpServer::Start(UnixOnly(dir.Join("s.sock")), Echo);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_THAT(Exchange(ConnectUnix(dir.Join("s.sock")), "GARBAGE\r\n\r\n"), StartsWith("HTTP/1.1 400"));
  EXPECT_THAT(Exchange(ConnectUnix(dir.Join("s.sock")), "GET /api/%zz HTTP/1.1\r\nHost: x\r\n\r\n"),
              StartsWith("HTTP/1.1 400"));
  EXPECT_THAT(Exchange(ConnectUnix(dir.Join("s.sock")),
                       "GET /ok HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
              StartsWith("HTTP/1.1 200"));
}

TEST(HttpServerTest, StreamsChunksUntilShutdownEndsThem) {
  absl::Notification streaming;
  std::atomic<int> chunks{0};
  auto server = HttpServer::Start(PlainTcp("127.0.0.1:0"),
      [&](const HttpRequest&, ResponseWriter& w) {
        ASSERT_TRUE(w.StartStream(200, "application/json"));
        while (!w.Cancelled() && w.WriteChunk("{}\n")) {
          if (++chunks == 3) streaming.Notify();
          absl::SleepFor(absl::Milliseconds(5));
        }
      });
  ASSERT_TRUE(server.ok()) << server.status();
  std::string seen;
  std::thread client([&, port = (*server)->tcp_port()] {
    seen = Exchange(ConnectTcp(port), "GET /watch HTTP/1.1\r\nHost: x\r\n\r\n");
  });
  ASSERT_TRUE(streaming.WaitForNotificationWithTimeout(absl::Seconds(10)));
  const absl::Time start = absl::Now();
  (*server)->Shutdown();
  client.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_THAT(seen, HasSubstr("Transfer-Encoding: chunked\r\n"));
  EXPECT_THAT(seen, HasSubstr("3\r\n{}\n\r\n"));
}

TEST(ParseRequestTest, QueryAndPathDecoding) {
  auto r = ParseRequest(
      "GET /api/v1/namespaces/a%2Db/pods?labelSelector=app%3Dweb&watch HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->path, "/api/v1/namespaces/a-b/pods");
  EXPECT_EQ(r->query.at("labelSelector"), "app=web");
  EXPECT_EQ(r->query.at("watch"), "");
  EXPECT_EQ(r->Header("host"), "x");
  EXPECT_FALSE(ParseRequest("GET /x%0 HTTP/1.1\r\n\r\n").ok());
  EXPECT_FALSE(ParseRequest("GET /x HTTP/1.1\r\nContent-Length: 5\r\n\r\nab").ok());
}

}  // namespace
}  // namespace berth::http
