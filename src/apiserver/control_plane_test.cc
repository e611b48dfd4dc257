// The control plane's API over real sockets: file modes, the unix socket,
// HTTPS with the bearer token, watches streamed and ended by shutdown.
// (The HTTP server itself is tested in src/http/server_test.cc.)
#include "apiserver/control_plane.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "apiserver/kubeconfig.h"
#include "apiserver/tls.h"
#include "common/backlog.h"
#include "common/clock.h"
#include "common/fs.h"
#include "common/strings.h"
#include "common/testing/eventually.h"
#include "common/testing/log_capture.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "http/api_client.h"
#include "metrics/prometheus.h"
#include "metrics/testing/exposition_check.h"

namespace berth::apiserver {
namespace {

using http::ApiClient;
using nlohmann::json;

class ControlPlaneHttpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ControlPlane::Options o;
    o.data_dir = dir_.path() + "/data";
    o.api_address = "127.0.0.1:0";
    auto cp = ControlPlane::Start(o);
    ASSERT_TRUE(cp.ok()) << cp.status();
    cp_ = std::move(*cp);
  }
  berth::testing::TempDir dir_;
  std::unique_ptr<ControlPlane> cp_;
};

TEST_F(ControlPlaneHttpTest, FilesAreRootOnly) {
  struct stat st;
  ASSERT_EQ(::stat(cp_->socket_path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat(cp_->kubeconfig_path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat((dir_.path() + "/data/tls/api.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST(ControlPlaneFilesTest, WiderDataDirFromAnOlderRunIsNarrowedWithAWarning) {
  berth::testing::TempDir dir;
  const std::string data = dir.path() + "/data";
  ASSERT_EQ(::mkdir(data.c_str(), 0755), 0);
  ASSERT_EQ(::chmod(data.c_str(), 0755), 0);
  // An empty file is an empty SQLite database.
  ASSERT_TRUE(WriteFileAtomic(data + "/state.db", "", 0644).ok());
  ASSERT_EQ(::chmod((data + "/state.db").c_str(), 0644), 0);
  ASSERT_TRUE(WriteFileAtomic(data + "/api-token", std::string(64, 'a') + "\n", 0644).ok());
  ASSERT_EQ(::chmod((data + "/api-token").c_str(), 0644), 0);
  berth::testing::LogCapture log;
  ControlPlane::Options o;
  o.data_dir = data;
  o.api_address = "127.0.0.1:0";
  auto cp = ControlPlane::Start(o);
  ASSERT_TRUE(cp.ok()) << cp.status();
  for (const auto& [path, mode] : std::vector<std::pair<std::string, mode_t>>{
           {data, 0700}, {data + "/state.db", 0600}, {data + "/api-token", 0600}}) {
    struct stat st {};
    ASSERT_EQ(::stat(path.c_str(), &st), 0) << path;
    EXPECT_EQ(st.st_mode & 07777, mode) << path;
  }
  EXPECT_THAT(log.text(), ::testing::HasSubstr(data + " was readable by others (mode 0755)"));
  EXPECT_THAT(log.text(), ::testing::HasSubstr(data + "/state.db was readable by others (mode 0644)"));
  // The kept token is still the one on disk.
  EXPECT_EQ((*cp)->token(), std::string(64, 'a'));
}

TEST_F(ControlPlaneHttpTest, UnixSocketNeedsNoToken) {
  auto client = ApiClient::ForUnixSocket(cp_->socket_path());
  auto r = client->Call("GET", "/api/v1/namespaces");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->code, 200);
  // Keep-alive: a second call on the same connection.
  EXPECT_EQ(client->Call("GET", "/version")->code, 200);
}

TEST_F(ControlPlaneHttpTest, TcpIsHttpsAndNeedsTheToken) {
  auto good = ApiClientForKubeconfig(cp_->kubeconfig_path());
  ASSERT_TRUE(good.ok()) << good.status();
  auto created = (*good)->Call("POST", "/api/v1/namespaces",
                               R"({"apiVersion":"v1","kind":"Namespace","metadata":{"name":"team"}})");
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ(created->code, 201);

  auto ca = EnsureServingCertificate(dir_.path() + "/data/tls");
  ASSERT_TRUE(ca.ok());
  for (const std::string& token : {std::string(""), std::string("wrong"), cp_->token() + "x"}) {
    auto bad = ApiClient::ForTcp("127.0.0.1", cp_->tcp_port(), ca->cert_pem, token);
    auto r = bad->Call("POST", "/api/v1/namespaces",
                       R"({"apiVersion":"v1","kind":"Namespace","metadata":{"name":"intruder"}})");
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->code, 401) << token;
    EXPECT_EQ(json::parse(r->body)["reason"], "Unauthorized");
  }
  // Nothing was created by the refused requests.
  auto list = (*good)->Call("GET", "/api/v1/namespaces/intruder");
  EXPECT_EQ(list->code, 404);

  // A client that does not trust the server's certificate fails the handshake.
  auto other = EnsureServingCertificate(dir_.path() + "/other-tls");
  auto untrusting = ApiClient::ForTcp("127.0.0.1", cp_->tcp_port(), other->cert_pem, cp_->token());
  EXPECT_EQ(untrusting->Call("GET", "/version").status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(ControlPlaneHttpTest, MetricsAreServedFromCollectorsBehindTheSameAuthentication) {
  cp_->handler().AddMetricsCollector([](std::string* out) {
    metrics::WriteFamily(out, "berth_test_volumes", metrics::MetricType::kGauge, "Volumes.");
    metrics::WriteSample(out, "berth_test_volumes", {{"node", "n1"}}, 3);
  });
  cp_->handler().AddMetricsCollector([](std::string* out) {
    metrics::WriteFamily(out, "berth_test_up", metrics::MetricType::kGauge, "Up.");
    metrics::WriteSample(out, "berth_test_up", {}, 1);
  });
  auto unix_client = ApiClient::ForUnixSocket(cp_->socket_path());
  rusage before{};
  ASSERT_EQ(::getrusage(RUSAGE_SELF, &before), 0);
  auto r = unix_client->Call("GET", "/metrics");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->code, 200);
  EXPECT_EQ(r->content_type, metrics::kTextContentType);
  ASSERT_TRUE(metrics::testing::CheckExposition(r->body).ok()) << r->body;
  // The server's own families first (this request is the one in flight),
  // then the collectors in the order added.
  EXPECT_THAT(r->body, ::testing::HasSubstr("apiserver_current_inflight_requests{request_kind=\"readOnly\"} 1\n"));
  EXPECT_THAT(r->body, ::testing::HasSubstr("berth_apiserver_open_connections 1\n"));
  // The store's object cache, as counted by the store.
  const store::Store::CacheStats cache = cp_->store().cache_stats();
  EXPECT_THAT(r->body, ::testing::HasSubstr(StrCat("berth_store_cache_hits_total ", cache.hits, "\n")));
  EXPECT_THAT(r->body, ::testing::HasSubstr(StrCat("berth_store_cache_misses_total ", cache.misses, "\n")));
  EXPECT_THAT(r->body, ::testing::HasSubstr(StrCat("berth_store_cache_objects ", cache.objects, "\n")));
  EXPECT_GT(cache.objects, 0u) << "the bootstrapped objects are cached";
  // Its group commits: the bootstrap wrote, so at least one commit.
  const store::Store::CommitStats commits = cp_->store().commit_stats();
  EXPECT_GT(commits.commits, 0);
  EXPECT_GE(commits.mutations, commits.commits);
  EXPECT_THAT(r->body, ::testing::HasSubstr(StrCat("berth_store_commits_total ", commits.commits, "\n")));
  EXPECT_THAT(r->body, ::testing::HasSubstr(StrCat("berth_store_committed_writes_total ", commits.mutations, "\n")));
  // The controllers' backlog and the creates held back for it (none here).
  EXPECT_THAT(r->body, ::testing::HasSubstr(StrCat("berth_controller_backlog ", Backlog::Pending(), "\n")));
  EXPECT_THAT(r->body, ::testing::HasSubstr("berth_apiserver_held_back_requests_total 0\n"));
  EXPECT_THAT(r->body, ::testing::HasSubstr("berth_apiserver_held_back_seconds_total 0\n"));
  EXPECT_THAT(r->body, ::testing::HasSubstr("berth_store_failed_commits_total 0\n"));
  EXPECT_THAT(r->body, ::testing::HasSubstr("# TYPE berth_store_commit_seconds_total counter\n"));
  // The process's own counters, read by the handler after `before`.
  const auto counter = [&](const std::string& sample) {
    const size_t at = r->body.find("\n" + sample + " ");
    return at == std::string::npos ? -1.0 : std::atof(r->body.c_str() + at + sample.size() + 2);
  };
  EXPECT_GE(counter("berth_process_context_switches_total{kind=\"voluntary\"}"), static_cast<double>(before.ru_nvcsw));
  EXPECT_GE(counter("berth_process_context_switches_total{kind=\"involuntary\"}"),
            static_cast<double>(before.ru_nivcsw));
  EXPECT_GE(counter("process_cpu_seconds_total"), static_cast<double>(before.ru_utime.tv_sec + before.ru_stime.tv_sec));
  EXPECT_GT(counter("berth_process_context_switches_total{kind=\"voluntary\"}"), 0)
      << "the server's threads waited for this request";
  EXPECT_THAT(
      r->body,
      ::testing::EndsWith(
          "# HELP berth_test_volumes Volumes.\n# TYPE berth_test_volumes gauge\nberth_test_volumes{node=\"n1\"} 3\n"
          "# HELP berth_test_up Up.\n# TYPE berth_test_up gauge\nberth_test_up 1\n"));
  auto good = ApiClientForKubeconfig(cp_->kubeconfig_path());
  ASSERT_TRUE(good.ok());
  EXPECT_THAT((*good)->Call("GET", "/metrics")->body, ::testing::HasSubstr("berth_test_up 1\n"));
  auto ca = EnsureServingCertificate(dir_.path() + "/data/tls");
  ASSERT_TRUE(ca.ok());
  auto bad = ApiClient::ForTcp("127.0.0.1", cp_->tcp_port(), ca->cert_pem, "wrong");
  auto refused = bad->Call("GET", "/metrics");
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_EQ(refused->code, 401);
  EXPECT_THAT(refused->body, ::testing::Not(::testing::HasSubstr("berth_test")));
}

TEST_F(ControlPlaneHttpTest, WatchStreamsOverChunkedEncodingAndShutdownEndsIt) {
  auto client = ApiClient::ForUnixSocket(cp_->socket_path());
  std::vector<std::string> seen;
  std::thread watcher([&] {
    auto w = ApiClient::ForUnixSocket(cp_->socket_path());
    auto r =
        w->Stream("/api/v1/namespaces?watch=1&resourceVersion=0", "application/json", [&](const std::string& line) {
          seen.push_back(json::parse(line)["object"]["metadata"]["name"]);
          return seen.size() < 5;
        });
    EXPECT_TRUE(r.ok()) << r.status();
  });
  for (const char* name : {"n1", "n2"}) {
    auto created =
        client->Call("POST", "/api/v1/namespaces",
                     json({{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", name}}}}).dump());
    ASSERT_EQ(created->code, 201);
  }
  watcher.join();
  // default, kube-public, kube-system (initial ADDED), then n1, n2 live.
  EXPECT_THAT(seen, ::testing::ElementsAre("default", "kube-public", "kube-system", "n1", "n2"));

  // A watch left open is ended by Shutdown, which returns promptly.
  std::atomic<bool> open{false};
  std::thread open_watch([&] {
    auto w = ApiClient::ForUnixSocket(cp_->socket_path());
    (void)w->Stream("/api/v1/namespaces?watch=1", "application/json", [&](const std::string&) {
      open = true;  // the first event came: the watch is being served
      return true;
    });
  });
  EXPECT_TRUE(berth::testing::Eventually([&] { return open.load(); }));  // not ASSERT: the thread must be joined
  absl::Time start = absl::Now();
  cp_->Shutdown();
  open_watch.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

// ---- Serving limits (the HTTP server's own are in src/http/server_test.cc) ----

class ControlPlaneClockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ControlPlane::Options o;
    o.data_dir = dir_.path() + "/data";
    o.api_address = "127.0.0.1:0";
    o.handler.clock = &clock_;
    o.handler.bookmark_interval = absl::Seconds(30);
    o.limits.tls_handshake_timeout = absl::Seconds(10);
    auto cp = ControlPlane::Start(o);
    ASSERT_TRUE(cp.ok()) << cp.status();
    cp_ = std::move(*cp);
  }
  FakeClock clock_;
  berth::testing::TempDir dir_;
  std::unique_ptr<ControlPlane> cp_;
};

int ConnectLoopback(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_port = htons(static_cast<uint16_t>(port));
  sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&sin), sizeof(sin)), 0);
  return fd;
}

TEST_F(ControlPlaneClockTest, TlsHandshakeMustFinishBeforeItsDeadline) {
  // A client that connects and never says hello.
  const int fd = ConnectLoopback(cp_->tcp_port());
  ASSERT_TRUE(clock_.BlockUntilTimers(1));
  clock_.Advance(absl::Seconds(9));
  pollfd p{fd, POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 200), 0);  // still open
  clock_.Advance(absl::Seconds(1));
  ASSERT_EQ(::poll(&p, 1, 10000), 1);
  char c;
  EXPECT_LE(::recv(fd, &c, 1, 0), 0);
  ::close(fd);
  EXPECT_EQ(cp_->serving_stats().timed_out, 1);
  // kubectl's way (the kubeconfig, HTTPS, the token) still works.
  auto good = ApiClientForKubeconfig(cp_->kubeconfig_path());
  ASSERT_TRUE(good.ok());
  EXPECT_EQ((*good)->Call("GET", "/api/v1/namespaces")->code, 200);
}

TEST_F(ControlPlaneClockTest, WatchesSendBookmarksAndEndAtTheirTimeoutWithoutAThreadEach) {
  const int threads_before = [] {
    int n = 0;
    for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
    return n;
  }();
  // Watchers (each client thread is ours: count the server's threads by
  // the difference the watches make, with the clients idle in read()).
  constexpr int kWatches = 40;
  // Each client thread appends to its own list while this thread reads them
  // all: a push_back that reallocates under a concurrent size() is a data
  // race, so every access holds mu.
  absl::Mutex mu;
  std::vector<std::vector<json>> seen(kWatches);  // guarded by mu
  auto every_watch_has = [&](size_t n) {
    absl::MutexLock lock(&mu);
    for (const auto& s : seen) {
      if (s.size() < n) return false;
    }
    return true;
  };
  std::vector<std::thread> clients;
  for (int i = 0; i < kWatches; ++i) {
    clients.emplace_back([&, i] {
      auto w = ApiClient::ForUnixSocket(cp_->socket_path());
      auto r = w->Stream("/api/v1/namespaces?watch=1&allowWatchBookmarks=true&timeoutSeconds=60", "application/json",
                         [&](const std::string& line) {
                           json event = json::parse(line);
                           absl::MutexLock lock(&mu);
                           seen[i].push_back(std::move(event));
                           return true;
                         });
      EXPECT_TRUE(r.ok()) << r.status();
    });
  }
  ASSERT_TRUE(berth::testing::Eventually([&] { return cp_->handler().watches() == kWatches; }));
  // The server counts a stream as long-running when its I/O thread flushes
  // the detached response, which comes after the handler has handed the
  // watch to the hub (what watches() counts): the two agree only eventually.
  EXPECT_TRUE(berth::testing::Eventually([&] { return cp_->serving_stats().long_running == kWatches; }))
      << cp_->serving_stats().long_running;
  int threads_now = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++threads_now;
  // The clients' threads, none of the server's per watch: a thread per
  // watch would add kWatches more. A few threads of the process's own may
  // start or end meanwhile (timers, idle workers), so the count is a band.
  EXPECT_GE(threads_now, threads_before + kWatches - 3);
  EXPECT_LE(threads_now, threads_before + kWatches + 3);

  auto client = ApiClient::ForUnixSocket(cp_->socket_path());
  ASSERT_EQ(client
                ->Call("POST", "/api/v1/namespaces",
                       json({{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", "n1"}}}}).dump())
                ->code,
            201);
  // Every watch gets the three namespaces there were, then n1.
  ASSERT_TRUE(berth::testing::Eventually([&] { return every_watch_has(4); }));
  {
    absl::MutexLock lock(&mu);
    for (const auto& s : seen) EXPECT_EQ(s[3]["object"]["metadata"]["name"], "n1");
  }
  // Bookmarks every 30 s of the clock; the watches end at 60 s.
  clock_.Advance(absl::Seconds(30));
  ASSERT_TRUE(berth::testing::Eventually([&] { return every_watch_has(5); }));
  {
    absl::MutexLock lock(&mu);
    for (const auto& s : seen) {
      EXPECT_EQ(s[4]["type"], "BOOKMARK");
      EXPECT_EQ(s[4]["object"]["kind"], "Namespace");
    }
  }
  clock_.Advance(absl::Seconds(30));
  for (auto& t : clients) t.join();  // each stream ended at its deadline
  EXPECT_TRUE(berth::testing::Eventually([&] { return cp_->handler().watches() == 0; }));
}

}  // namespace
}  // namespace berth::apiserver
