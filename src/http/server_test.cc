// The HTTP server over real sockets: the unix socket, plain HTTP on TCP,
// address parsing and the loopback rule, malformed requests, chunked
// streams ended by shutdown; its limits (deadlines on a FakeClock, the
// connection cap, in-flight limits and 429, fixed threads) and detached
// streams; HTTPS with the bearer token and the TLS handshake deadline (the
// certificate made as the API server makes its own).
#include "http/server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <poll.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "apiserver/tls.h"
#include "common/clock.h"
#include "common/testing/eventually.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "openssl/ssl.h"

namespace berth::http {
namespace {

using ::berth::testing::Eventually;
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
  std::string r =
      Exchange(ConnectTcp((*server)->tcp_port()), "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
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
  EXPECT_THAT(Exchange(fd, "GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n"), HasSubstr("GET /healthz -\n"));
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
  for (const char* bad : {"", "9809", ":9809", "localhost:9809", "127.0.0.1:", "127.0.0.1:x", "127.0.0.1:65536",
                          "127.0.0.1:-1", "[::1]", "1.2.3:80"}) {
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
  EXPECT_THAT(Exchange(ConnectUnix(dir.Join("s.sock")), "GET /ok HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
              StartsWith("HTTP/1.1 200"));
}

TEST(HttpServerTest, StreamsChunksUntilShutdownEndsThem) {
  absl::Notification streaming;
  std::atomic<int> chunks{0};
  auto server = HttpServer::Start(PlainTcp("127.0.0.1:0"), [&](const HttpRequest&, ResponseWriter& w) {
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

// ---- Limits ----

// Whether the server closed `fd` (EOF or reset) within `timeout` (real
// time: how long the server's threads may take to act, not a deadline
// under test).
bool ClosedByServer(int fd, absl::Duration timeout = absl::Seconds(10)) {
  const absl::Time end = absl::Now() + timeout;
  char buf[4096];
  while (absl::Now() < end) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) == 1) {
      ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) return true;
    }
  }
  return false;
}

// Reads one whole response (up to `marker` in it) without closing.
std::string ReadUntil(int fd, const std::string& marker, absl::Duration timeout = absl::Seconds(10)) {
  std::string out;
  const absl::Time end = absl::Now() + timeout;
  char buf[4096];
  while (out.find(marker) == std::string::npos && absl::Now() < end) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) != 1) continue;
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

void SendAll(int fd, const std::string& bytes) {
  ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), static_cast<ssize_t>(bytes.size()));
}

int Threads() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

class HttpLimitsTest : public ::testing::Test {
 protected:
  std::unique_ptr<HttpServer> Start(HttpServer::Options o, HttpHandler handler = Echo) {
    o.clock = &clock_;
    auto server = HttpServer::Start(std::move(o), std::move(handler));
    EXPECT_TRUE(server.ok()) << server.status();
    return server.ok() ? std::move(*server) : nullptr;
  }
  FakeClock clock_;
};

TEST_F(HttpLimitsTest, RequestHeadersMustArriveBeforeTheHeaderDeadline) {
  HttpServer::Options o = PlainTcp("127.0.0.1:0");
  o.limits.header_timeout = absl::Seconds(32);
  auto server = Start(o);
  ASSERT_NE(server, nullptr);
  // A slowloris client: part of a header, then a byte now and then.
  const int slow = ConnectTcp(server->tcp_port());
  SendAll(slow, "GET /slow HTTP/1.1\r\nHost: x\r\n");
  ASSERT_TRUE(clock_.BlockUntilTimers(1));  // its header deadline
  clock_.Advance(absl::Seconds(31));
  SendAll(slow, "X");  // trickling does not extend the deadline
  EXPECT_FALSE(ClosedByServer(slow, absl::Milliseconds(200)));
  clock_.Advance(absl::Seconds(1));
  EXPECT_TRUE(ClosedByServer(slow));
  ::close(slow);
  EXPECT_EQ(server->stats().timed_out, 1);
  // A client that sends its request in time is served.
  EXPECT_THAT(Exchange(ConnectTcp(server->tcp_port()), "GET /ok HTTP/1.1\r\nConnection: close\r\n\r\n"),
              HasSubstr("GET /ok -\n"));
}

TEST_F(HttpLimitsTest, KeptAliveConnectionIsClosedAfterTheIdleTimeout) {
  HttpServer::Options o = PlainTcp("127.0.0.1:0");
  o.limits.idle_timeout = absl::Seconds(90);
  o.limits.header_timeout = absl::Seconds(5);
  auto server = Start(o);
  ASSERT_NE(server, nullptr);
  const int fd = ConnectTcp(server->tcp_port());
  SendAll(fd, "GET /one HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_THAT(ReadUntil(fd, "GET /one -\n"), HasSubstr("GET /one -\n"));
  // Waiting for the next request: only the idle deadline is set.
  auto idle_only = [&] {
    return clock_.PendingTimers() == 1 && clock_.NextTimer() == clock_.Now() + absl::Seconds(90);
  };
  ASSERT_TRUE(Eventually(idle_only));
  clock_.Advance(absl::Seconds(89));
  // Still open: a second request on it is served, and restarts the idle time.
  SendAll(fd, "GET /two HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_THAT(ReadUntil(fd, "GET /two -\n"), HasSubstr("GET /two -\n"));
  ASSERT_TRUE(Eventually(idle_only));
  clock_.Advance(absl::Seconds(89));
  EXPECT_FALSE(ClosedByServer(fd, absl::Milliseconds(200)));
  clock_.Advance(absl::Seconds(1));
  EXPECT_TRUE(ClosedByServer(fd));
  ::close(fd);
}

TEST_F(HttpLimitsTest, ConnectionsOverTheCapAreClosedAtOnce) {
  HttpServer::Options o = PlainTcp("127.0.0.1:0");
  o.limits.max_connections = 2;
  auto server = Start(o);
  ASSERT_NE(server, nullptr);
  const int a = ConnectTcp(server->tcp_port()), b = ConnectTcp(server->tcp_port());
  ASSERT_TRUE(Eventually([&] { return server->stats().open_connections == 2; }));
  const int c = ConnectTcp(server->tcp_port());
  EXPECT_TRUE(ClosedByServer(c));
  ::close(c);
  EXPECT_EQ(server->stats().refused_connections, 1);
  // The open ones are served; once one goes, a new one is accepted.
  SendAll(a, "GET /a HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_THAT(ReadUntil(a, "GET /a -\n"), HasSubstr("GET /a -\n"));
  ::close(b);
  ASSERT_TRUE(Eventually([&] { return server->stats().open_connections == 1; }));
  EXPECT_THAT(Exchange(ConnectTcp(server->tcp_port()), "GET /d HTTP/1.1\r\nConnection: close\r\n\r\n"),
              HasSubstr("GET /d -\n"));
  ::close(a);
}

TEST_F(HttpLimitsTest, ReadsAndWritesOverTheirInflightLimitsGet429WithRetryAfter) {
  absl::Notification release;
  std::atomic<int> blocked{0};
  HttpServer::Options o = PlainTcp("127.0.0.1:0");
  o.limits.handler_threads = 4;
  o.limits.max_requests_inflight = 2;
  o.limits.max_mutating_requests_inflight = 1;
  auto server = Start(o, [&](const HttpRequest& r, ResponseWriter& w) {
    if (r.path == "/block") {
      ++blocked;
      release.WaitForNotification();
    }
    Echo(r, w);
  });
  ASSERT_NE(server, nullptr);
  std::vector<std::thread> holders;
  std::vector<std::string> held(2);
  for (int i = 0; i < 2; ++i) {
    holders.emplace_back([&, i, port = server->tcp_port()] {
      held[i] = Exchange(ConnectTcp(port), "GET /block HTTP/1.1\r\nConnection: close\r\n\r\n");
    });
  }
  ASSERT_TRUE(Eventually([&] { return blocked == 2; }));
  const std::string throttled =
      Exchange(ConnectTcp(server->tcp_port()), "GET /more HTTP/1.1\r\nConnection: close\r\n\r\n");
  EXPECT_THAT(throttled, StartsWith("HTTP/1.1 429 Too Many Requests\r\n"));
  EXPECT_THAT(throttled, HasSubstr("Retry-After: 1\r\n"));
  EXPECT_THAT(throttled, HasSubstr("Too many requests, please try again later.\n"));
  // Writes have their own limit: one goes through while reads are full...
  EXPECT_THAT(
      Exchange(ConnectTcp(server->tcp_port()), "POST /w HTTP/1.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"),
      HasSubstr("POST /w -\n"));
  // ...and a 429 keeps the connection: the next request on it is answered.
  const int fd = ConnectTcp(server->tcp_port());
  SendAll(fd, "GET /again HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_THAT(ReadUntil(fd, "later.\n"), StartsWith("HTTP/1.1 429"));
  EXPECT_EQ(server->stats().inflight_reads, 2);
  EXPECT_EQ(server->stats().throttled, 2);
  release.Notify();
  for (auto& t : holders) t.join();
  EXPECT_THAT(held[0], HasSubstr("GET /block -\n"));
  ASSERT_TRUE(Eventually([&] { return server->stats().inflight_reads == 0; }));
  SendAll(fd, "GET /now HTTP/1.1\r\nConnection: close\r\n\r\n");
  EXPECT_THAT(ReadUntil(fd, "GET /now -\n"), HasSubstr("GET /now -\n"));
  ::close(fd);
}

TEST_F(HttpLimitsTest, IdleConnectionsHoldNoThreads) {
  HttpServer::Options o = PlainTcp("127.0.0.1:0");
  o.limits.max_connections = 1000;
  auto server = Start(o);
  ASSERT_NE(server, nullptr);
  const int before = Threads();
  std::vector<int> fds;
  for (int i = 0; i < 300; ++i) fds.push_back(ConnectTcp(server->tcp_port()));
  for (int i = 0; i < 100; ++i) SendAll(fds[i], "GET /partial HTTP/1.1\r\n");
  ASSERT_TRUE(Eventually([&] { return server->stats().open_connections == 300; }));
  EXPECT_EQ(Threads(), before);
  EXPECT_THAT(Exchange(ConnectTcp(server->tcp_port()), "GET /ok HTTP/1.1\r\nConnection: close\r\n\r\n"),
              HasSubstr("GET /ok -\n"));
  for (int fd : fds) ::close(fd);
}

TEST_F(HttpLimitsTest, DetachedStreamGoesOnWithoutItsHandlerThread) {
  absl::Mutex mu;
  std::shared_ptr<Stream> stream;
  HttpServer::Options o = PlainTcp("127.0.0.1:0");
  o.limits.handler_threads = 1;
  o.long_running = [](const HttpRequest& r) { return r.path == "/watch"; };
  o.limits.max_requests_inflight = 1;
  auto server = Start(o, [&](const HttpRequest& r, ResponseWriter& w) {
    if (r.path != "/watch") return Echo(r, w);
    ASSERT_TRUE(w.StartStream(200, "application/json"));
    auto s = w.Detach();
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(w.Detach(), nullptr);
    absl::MutexLock lock(&mu);
    stream = std::move(s);
  });
  ASSERT_NE(server, nullptr);
  std::vector<int> watchers;
  for (int i = 0; i < 3; ++i) {
    watchers.push_back(ConnectTcp(server->tcp_port()));
    SendAll(watchers.back(), "GET /watch HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT_THAT(ReadUntil(watchers.back(), "chunked\r\n\r\n"), HasSubstr("Transfer-Encoding: chunked"));
  }
  // Three streams on one handler thread, exempt from the in-flight limit of
  // one, and the thread still serves.
  EXPECT_TRUE(Eventually([&] { return server->stats().long_running == 3; }));
  EXPECT_THAT(Exchange(ConnectTcp(server->tcp_port()), "GET /ok HTTP/1.1\r\nConnection: close\r\n\r\n"),
              HasSubstr("GET /ok -\n"));
  std::shared_ptr<Stream> last;
  {
    absl::MutexLock lock(&mu);
    last = stream;
  }
  EXPECT_TRUE(last->Write("{\"a\":1}\n"));
  EXPECT_THAT(ReadUntil(watchers[2], "{\"a\":1}\n\r\n"), HasSubstr("8\r\n{\"a\":1}\n\r\n"));
  last->Finish();
  EXPECT_TRUE(last->Ended());
  EXPECT_FALSE(last->Write("late"));
  const std::string rest = ReadUntil(watchers[2], "0\r\n\r\n");
  EXPECT_THAT(rest, HasSubstr("0\r\n\r\n"));
  EXPECT_TRUE(ClosedByServer(watchers[2]));  // a detached stream's connection closes at its end
  ::close(watchers[2]);
  EXPECT_TRUE(Eventually([&] { return server->stats().long_running == 2; }));
  for (int fd : {watchers[0], watchers[1]}) ::close(fd);
  EXPECT_TRUE(Eventually([&] { return server->stats().long_running == 0 && server->stats().open_connections == 0; }));
}

TEST_F(HttpLimitsTest, ClientGoneEndsADetachedStream) {
  std::shared_ptr<Stream> stream;
  absl::Notification detached, woken;
  HttpServer::Options o = PlainTcp("127.0.0.1:0");
  o.long_running = [](const HttpRequest&) { return true; };
  auto server = Start(o, [&](const HttpRequest&, ResponseWriter& w) {
    w.StartStream(200, "application/json");
    stream = w.Detach();
    stream->SetWakeup([&] {
      if (!woken.HasBeenNotified()) woken.Notify();
    });
    detached.Notify();
  });
  ASSERT_NE(server, nullptr);
  const int fd = ConnectTcp(server->tcp_port());
  SendAll(fd, "GET /watch HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_TRUE(detached.WaitForNotificationWithTimeout(absl::Seconds(10)));
  ::close(fd);
  ASSERT_TRUE(woken.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_TRUE(stream->Ended());
  EXPECT_FALSE(stream->Write("x"));
}

TEST_F(HttpLimitsTest, AClientThatStopsReadingIsClosedByTheWriteDeadline) {
  std::shared_ptr<Stream> stream;
  absl::Notification detached;
  HttpServer::Options o = PlainTcp("127.0.0.1:0");
  o.long_running = [](const HttpRequest&) { return true; };
  o.limits.io_timeout = absl::Seconds(30);
  auto server = Start(o, [&](const HttpRequest&, ResponseWriter& w) {
    w.StartStream(200, "application/json");
    stream = w.Detach();
    detached.Notify();
  });
  ASSERT_NE(server, nullptr);
  const int fd = ConnectTcp(server->tcp_port());
  int small = 4096;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
  SendAll(fd, "GET /watch HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_TRUE(detached.WaitForNotificationWithTimeout(absl::Seconds(10)));
  // Far more than the socket buffers hold (32 MiB); the client reads none.
  const std::string chunk(64 << 10, 'x');
  for (int i = 0; i < 512; ++i) ASSERT_TRUE(stream->Write(chunk));
  // A write is stuck, waiting on its deadline.
  ASSERT_TRUE(Eventually([&] { return clock_.PendingTimers() >= 1 && stream->Backlogged(); }));
  clock_.Advance(absl::Seconds(30));
  ASSERT_TRUE(Eventually([&] { return stream->Ended(); }));
  EXPECT_EQ(server->stats().timed_out, 1);
  ::close(fd);
}

TEST_F(HttpLimitsTest, TlsHandshakeMustFinishBeforeItsDeadlineAndTheTokenIsChecked) {
  berth::testing::TempDir dir;
  auto tls = apiserver::EnsureServingCertificate(dir.Join("tls"));
  ASSERT_TRUE(tls.ok()) << tls.status();
  HttpServer::Options o;
  o.tcp_address = "127.0.0.1:0";
  o.bearer_token = "secret-token";
  o.tls_cert_file = tls->cert_file;
  o.tls_key_file = tls->key_file;
  o.limits.tls_handshake_timeout = absl::Seconds(10);
  o.limits.header_timeout = absl::Seconds(30);
  auto server = Start(o);
  ASSERT_NE(server, nullptr);
  // One client never says hello; another sends the start of a ClientHello
  // record and stops.
  const int silent = ConnectTcp(server->tcp_port());
  const int partial = ConnectTcp(server->tcp_port());
  SendAll(partial, std::string("\x16\x03\x01\x01\x00\x01", 6));
  ASSERT_TRUE(clock_.BlockUntilTimers(2));
  clock_.Advance(absl::Seconds(9));
  EXPECT_FALSE(ClosedByServer(silent, absl::Milliseconds(200)));
  EXPECT_FALSE(ClosedByServer(partial, absl::Milliseconds(10)));
  clock_.Advance(absl::Seconds(1));
  EXPECT_TRUE(ClosedByServer(silent));
  EXPECT_TRUE(ClosedByServer(partial));
  ::close(silent);
  ::close(partial);
  EXPECT_EQ(server->stats().timed_out, 2);

  // A TLS client that completes its handshake is served, with the token
  // only; the handshake's deadline no longer applies to it.
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  ASSERT_NE(ctx, nullptr);
  auto request = [&](const std::string& auth) {
    const int fd = ConnectTcp(server->tcp_port());
    SSL* ssl = SSL_new(ctx);
    SSL_set_fd(ssl, fd);
    std::string out;
    if (SSL_connect(ssl) == 1) {
      const std::string req = "GET /tls HTTP/1.1\r\nHost: x\r\n" + auth + "Connection: close\r\n\r\n";
      SSL_write(ssl, req.data(), static_cast<int>(req.size()));
      char buf[4096];
      int n;
      while ((n = SSL_read(ssl, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
    }
    SSL_free(ssl);
    ::close(fd);
    return out;
  };
  EXPECT_THAT(request("Authorization: Bearer secret-token\r\n"), HasSubstr("GET /tls -\n"));
  EXPECT_THAT(request("Authorization: Bearer wrong\r\n"), StartsWith("HTTP/1.1 401"));
  EXPECT_THAT(request(""), StartsWith("HTTP/1.1 401"));
  SSL_CTX_free(ctx);
  EXPECT_EQ(server->stats().timed_out, 2);
}

// ---- Tunnels (upgraded requests proxied elsewhere: pods/exec) ----

// A handler that tunnels /exec to one end of a socket pair; the test plays
// the backend on the other end.
class TunnelTest : public HttpLimitsTest {
 protected:
  std::unique_ptr<HttpServer> StartTunnels() {
    HttpServer::Options o = PlainTcp("127.0.0.1:0");
    o.limits.handler_threads = 1;
    o.limits.max_requests_inflight = 1;
    o.long_running = [](const HttpRequest& r) { return r.path == "/exec"; };
    return Start(o, [this](const HttpRequest& r, ResponseWriter& w) {
      if (r.path != "/exec") return Echo(r, w);
      int pair[2];
      ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
      {
        absl::MutexLock lock(&mu_);
        backends_.push_back(pair[0]);
      }
      EXPECT_TRUE(
          w.Tunnel("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n", pair[1]));
      EXPECT_FALSE(w.StartStream(200, "text/plain"));  // the response is the tunnel's
    });
  }
  int Backend(size_t i) {
    absl::MutexLock lock(&mu_);
    return i < backends_.size() ? backends_[i] : -1;
  }
  void TearDown() override {
    absl::MutexLock lock(&mu_);
    for (int fd : backends_) ::close(fd);
  }

  absl::Mutex mu_;
  std::vector<int> backends_ ABSL_GUARDED_BY(mu_);
};

TEST_F(TunnelTest, CopiesBytesBothWaysWithoutAHandlerThread) {
  auto server = StartTunnels();
  ASSERT_NE(server, nullptr);
  std::vector<int> clients;
  for (int i = 0; i < 2; ++i) {
    clients.push_back(ConnectTcp(server->tcp_port()));
    // Bytes sent right after the request reach the backend first.
    SendAll(clients.back(), "GET /exec HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\nearly");
    EXPECT_THAT(ReadUntil(clients.back(), "\r\n\r\n"), StartsWith("HTTP/1.1 101 Switching Protocols\r\n"));
    ASSERT_TRUE(Eventually([&] { return Backend(clients.size() - 1) >= 0; }));
    EXPECT_EQ(ReadUntil(Backend(clients.size() - 1), "early"), "early");
  }
  // Two tunnels, exempt from the in-flight limit of one, and the one
  // handler thread still serves.
  EXPECT_EQ(server->stats().long_running, 2);
  EXPECT_THAT(Exchange(ConnectTcp(server->tcp_port()), "GET /ok HTTP/1.1\r\nConnection: close\r\n\r\n"),
              HasSubstr("GET /ok -\n"));

  const int client = clients[1], backend = Backend(1);
  SendAll(client, "ping");
  EXPECT_EQ(ReadUntil(backend, "ping"), "ping");
  // More than one buffer's worth, back to the client, unchanged.
  std::string big(200 << 10, 'x');
  for (size_t i = 0; i < big.size(); i += 997) big[i] = static_cast<char>('a' + i % 26);
  big += "<end>";
  std::thread writer([&] { SendAll(backend, big); });
  const std::string got = ReadUntil(client, "<end>");
  writer.join();
  EXPECT_TRUE(got == big) << got.size() << " bytes of " << big.size();
  // The backend's end ends the tunnel.
  ASSERT_EQ(::shutdown(backend, SHUT_WR), 0);
  EXPECT_TRUE(ClosedByServer(client));
  EXPECT_TRUE(Eventually([&] { return server->stats().long_running == 1; }));
  ::close(client);

  // The client's end (here a half-close) ends the other: the backend sees
  // EOF, as with kube-apiserver's proxy, which ends both sides when
  // either does.
  ::shutdown(clients[0], SHUT_WR);
  EXPECT_TRUE(ClosedByServer(Backend(0)));
  EXPECT_TRUE(ClosedByServer(clients[0]));
  ::close(clients[0]);
  EXPECT_TRUE(Eventually([&] { return server->stats().long_running == 0 && server->stats().open_connections == 0; }));
}

TEST_F(TunnelTest, ShutdownClosesTunnels) {
  auto server = StartTunnels();
  ASSERT_NE(server, nullptr);
  const int client = ConnectTcp(server->tcp_port());
  SendAll(client,
          "POST /exec HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: test\r\nContent-Length: 0\r\n\r\n");
  EXPECT_THAT(ReadUntil(client, "\r\n\r\n"), StartsWith("HTTP/1.1 101"));
  ASSERT_TRUE(Eventually([&] { return server->stats().long_running == 1; }));
  server->Shutdown();
  EXPECT_TRUE(ClosedByServer(client));
  EXPECT_TRUE(ClosedByServer(Backend(0)));
  ::close(client);
}

TEST(ParseRequestTest, QueryAndPathDecoding) {
  auto r = ParseRequest("GET /api/v1/namespaces/a%2Db/pods?labelSelector=app%3Dweb&watch HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->path, "/api/v1/namespaces/a-b/pods");
  EXPECT_EQ(r->query.at("labelSelector"), "app=web");
  EXPECT_EQ(r->query.at("watch"), "");
  EXPECT_EQ(r->Header("host"), "x");
  EXPECT_FALSE(ParseRequest("GET /x%0 HTTP/1.1\r\n\r\n").ok());
  EXPECT_FALSE(ParseRequest("GET /x HTTP/1.1\r\nContent-Length: 5\r\n\r\nab").ok());
}

TEST(ParseRequestTest, RepeatedQueryKeysAndHeaderFieldsKeepEveryValue) {
  auto r = ParseRequest(
      "POST /exec?command=sh&command=-c&command=echo%20a%26b&stdout=true HTTP/1.1\r\nHost: x\r\n"
      "X-Stream-Protocol-Version: v4.channel.k8s.io\r\nX-Stream-Protocol-Version: channel.k8s.io\r\n\r\n");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->Header("x-stream-protocol-version"), "v4.channel.k8s.io, channel.k8s.io");
  using Pairs = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(ParseQueryList("command=sh&command=-c&command=echo%20a%26b&stdout=true"),
            (Pairs{{"command", "sh"}, {"command", "-c"}, {"command", "echo a&b"}, {"stdout", "true"}}));
  EXPECT_EQ(r->query.at("command"), "echo a&b");  // the map keeps the last
}

}  // namespace
}  // namespace berth::http
