// The API server of `berth up` under a connection flood (as root: berth up
// runs its node agent and berth-csi): 2,000 idle TLS connections and 200
// that send their request headers a byte at a time, held open together.
// Meanwhile stock kubectl still answers `get pv` within a few seconds (a
// starved one would wait for the flood's deadlines), the process stays
// under 256 threads, and the server's own deadlines (short
// ones, set by flags here) close every one of those connections.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <iostream>
#include <thread>
#include <vector>

#include "commands.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "openssl/err.h"
#include "openssl/ssl.h"
#include "up_fixture.h"

namespace berth::testing {
namespace {

constexpr int kIdle = 2000;
constexpr int kSlowHeader = 200;
// The deadlines berth up runs with here; the flood must outlive setting up
// and measuring, and then be closed by them.
constexpr int kHeaderTimeoutSeconds = 40;
// How soon kubectl must be served while the flood is held: far below the
// deadlines that would free a starved server, with room for a sanitized
// build on a loaded 2-core machine (1.13 s seen there; ~0.2 s idle).
constexpr absl::Duration kServedWithin = absl::Seconds(5);

int ConnectTcp(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_port = htons(static_cast<uint16_t>(port));
  sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&sin), sizeof(sin)) != 0) {
    if (fd >= 0) ::close(fd);
    return -1;
  }
  return fd;
}

// A TLS connection that completed its handshake (the certificate is not
// checked: this client only holds the line).
struct TlsConnection {
  int fd = -1;
  SSL* ssl = nullptr;
};

TlsConnection ConnectTls(SSL_CTX* ctx, int port) {
  TlsConnection c;
  c.fd = ConnectTcp(port);
  if (c.fd < 0) return c;
  c.ssl = SSL_new(ctx);
  SSL_set_fd(c.ssl, c.fd);
  if (SSL_connect(c.ssl) != 1) {
    SSL_free(c.ssl);
    ::close(c.fd);
    return {};
  }
  return c;
}

// Whether the server closed `fd`: whatever it sent (TLS 1.3 session
// tickets) is read and dropped; EOF or a reset means closed.
bool ClosedByServer(int fd) {
  char buf[4096];
  while (true) {
    const ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0) continue;
    return n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
  }
}

int Threads(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  return -1;
}

class ApiLoadTest : public BerthUpFixture {
 protected:
  void SetUp() override {
    BerthUpFixture::SetUp();
    if (IsSkipped()) return;
    kubectl_ = FindKubectl();
    if (kubectl_.empty()) GTEST_SKIP() << "no kubectl ($BERTH_KUBECTL, Debian's kubernetes-client, /usr/bin/kubectl)";
    // 2,200 connections of ours, as many of the server's.
    rlimit rl{};
    ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &rl), 0);
    if (rl.rlim_cur < 8192) {
      rl.rlim_cur = std::min<rlim_t>(rl.rlim_max, 8192);
      ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &rl), 0);
    }
    ASSERT_GE(rl.rlim_cur, 4096u) << "the hard limit on open files is too low for this test";
    ::signal(SIGPIPE, SIG_IGN);  // writing to connections the server closed
    ctx_ = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_verify(ctx_, SSL_VERIFY_NONE, nullptr);
  }
  void TearDown() override {
    for (auto& c : tls_) {
      if (c.ssl != nullptr) SSL_free(c.ssl);
      if (c.fd >= 0) ::close(c.fd);
    }
    if (ctx_ != nullptr) SSL_CTX_free(ctx_);
    BerthUpFixture::TearDown();
  }

  // kubectl get pv; how long it took.
  absl::Duration KubectlGetPv(CommandResult* result) {
    const absl::Time start = absl::Now();
    *result = RunCommand(sandbox_.path(), {kubectl_, "--kubeconfig", data_ + "/kubeconfig", "get", "pv"},
                         {"HOME=" + sandbox_.path()});
    return absl::Now() - start;
  }

  std::string kubectl_;
  SSL_CTX* ctx_ = nullptr;
  std::vector<TlsConnection> tls_;
};

TEST_F(ApiLoadTest, FloodOfIdleAndSlowHeaderTlsConnectionsLeavesKubectlServedAndIsClosedByDeadlines) {
  const std::string timeout = std::to_string(kHeaderTimeoutSeconds) + "s";
  api_address_ = "127.0.0.1:0";
  // The storage side alone (no container runtime): the API server is what is under test.
  StartUp({"--runtime", "none", "--api-max-connections", "4000", "--api-request-header-timeout", timeout,
           "--api-tls-handshake-timeout", timeout, "--api-idle-timeout", timeout});
  const int port = ApiPort();
  ASSERT_GT(port, 0);
  // kubectl's discovery cache, so the timings below are of `get pv` alone.
  CommandResult warm;
  KubectlGetPv(&warm);
  ASSERT_EQ(warm.exit_code, 0) << warm;

  // The flood, from four threads.
  std::vector<std::vector<TlsConnection>> opened(4);
  std::vector<std::thread> openers;
  for (int t = 0; t < 4; ++t) {
    openers.emplace_back([&, t] {
      for (int i = t; i < kIdle + kSlowHeader; i += 4) opened[t].push_back(ConnectTls(ctx_, port));
    });
  }
  for (auto& t : openers) t.join();
  for (auto& v : opened) tls_.insert(tls_.end(), v.begin(), v.end());
  int handshaken = 0;
  for (const auto& c : tls_) handshaken += c.ssl != nullptr;
  ASSERT_EQ(handshaken, kIdle + kSlowHeader);
  const absl::Time flood_ready = absl::Now();

  // The slow ones send a request line and then a header byte every 500 ms.
  std::atomic<bool> stop{false};
  std::thread dribbler;
  struct Joiner {
    std::atomic<bool>& stop;
    std::thread& t;
    ~Joiner() {
      stop = true;
      if (t.joinable()) t.join();
    }
  } joiner{stop, dribbler};
  dribbler = std::thread([&] {
    for (int i = kIdle; i < kIdle + kSlowHeader; ++i) {
      constexpr std::string_view kStart = "GET /api/v1/persistentvolumes HTTP/1.1\r\nX-Slow: ";
      SSL_write(tls_[i].ssl, kStart.data(), static_cast<int>(kStart.size()));
    }
    while (!stop) {
      for (int i = kIdle; i < kIdle + kSlowHeader && !stop; ++i) {
        if (tls_[i].ssl != nullptr) SSL_write(tls_[i].ssl, "a", 1);
      }
      absl::SleepFor(absl::Milliseconds(500));
    }
  });

  // All of them held; kubectl served at once, three times over.
  for (int i = 0; i < 3; ++i) {
    CommandResult r;
    const absl::Duration took = KubectlGetPv(&r);
    EXPECT_EQ(r.exit_code, 0) << r;
    EXPECT_LT(took, kServedWithin) << "kubectl get pv took " << took;
    EXPECT_LT(Threads(up_->pid()), 256);
    std::cerr << "[ kubectl  ] get pv with the flood held: " << absl::FormatDuration(took) << "\n";
  }
  std::cerr << "[ threads  ] berth up with " << tls_.size() << " connections held: " << Threads(up_->pid()) << "\n";
  // Still within the deadline: nothing of ours was closed yet.
  ASSERT_LT(absl::Now() - flood_ready, absl::Seconds(kHeaderTimeoutSeconds - 5))
      << "setting up took too long to check the connections were held";
  for (size_t i = 0; i < tls_.size(); ++i) {
    ASSERT_FALSE(ClosedByServer(tls_[i].fd))
        << "connection " << i << (i >= kIdle ? " (slow header)" : " (idle)") << " was closed before its deadline";
  }

  // The server's deadlines close every one (we never do).
  std::vector<pollfd> fds;
  for (const auto& c : tls_) fds.push_back({c.fd, POLLIN, 0});
  size_t closed = 0;
  std::vector<bool> seen(fds.size(), false);
  const absl::Time give_up = flood_ready + absl::Seconds(kHeaderTimeoutSeconds + 60);
  while (closed < fds.size() && absl::Now() < give_up) {
    for (auto& p : fds) p.revents = 0;
    if (::poll(fds.data(), fds.size(), 1000) <= 0) continue;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (seen[i] || fds[i].revents == 0) continue;
      if (ClosedByServer(fds[i].fd)) {
        seen[i] = true;
        fds[i].fd = -1;  // poll skips it from now on
        ++closed;
      }
    }
  }
  stop = true;
  dribbler.join();
  EXPECT_EQ(closed, fds.size()) << "connections the server left open";
  std::cerr << "[ closed   ] " << closed << " of " << fds.size() << " connections by the server, the last "
            << absl::FormatDuration(absl::Now() - flood_ready) << " after the flood was open (deadlines "
            << kHeaderTimeoutSeconds << " s)\n";
  // And it still serves.
  CommandResult r;
  EXPECT_LT(KubectlGetPv(&r), kServedWithin);
  EXPECT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(StopUp(SIGTERM), 0);
}

}  // namespace
}  // namespace berth::testing
