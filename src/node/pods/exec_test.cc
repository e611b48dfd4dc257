// pods/exec and pods/attach without a container runtime: the options as
// kube-apiserver validates them, the streaming URL, the request sent to the
// runtime's streaming server (no bearer token), its answer's head, and the
// handshake end to end against a runtime double whose streaming server is a
// socket of the test (101 → a tunnel; a refusal relayed as it is; the API
// server's and the node's errors as Kubernetes words them).
#include "node/pods/exec.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "absl/synchronization/mutex.h"
#include "api/errors.h"
#include "apiserver/registry.h"
#include "client/object.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "http/testing/recording_writer.h"
#include "store/store.h"

namespace berth::node::pods {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

TEST(StreamRequestTest, ParsesExecAndAttachOptionsAsTheApiServerValidatesThem) {
  auto exec = ParseStreamRequest("exec", "command=sh&command=-c&command=echo%20a%3Bb&container=c&stdin=true&stdout=1");
  ASSERT_TRUE(exec.ok()) << exec.status();
  EXPECT_FALSE(exec->attach);
  EXPECT_THAT(exec->command, ElementsAre("sh", "-c", "echo a;b"));
  EXPECT_EQ(exec->container, "c");
  EXPECT_TRUE(exec->stdin);
  EXPECT_TRUE(exec->stdout);
  EXPECT_FALSE(exec->stderr);
  // A terminal has one output stream.
  auto tty = ParseStreamRequest("exec", "command=sh&stdout=true&stderr=true&tty=true");
  ASSERT_TRUE(tty.ok());
  EXPECT_TRUE(tty->tty);
  EXPECT_FALSE(tty->stderr);

  EXPECT_EQ(ParseStreamRequest("exec", "stdout=true").status().message(),
            "you must specify at least one command for the container");
  EXPECT_EQ(ParseStreamRequest("exec", "command=ls").status().message(),
            "you must specify at least 1 of stdin, stdout, stderr");
  auto attach = ParseStreamRequest("attach", "stdout=true&stdin=true");
  ASSERT_TRUE(attach.ok());
  EXPECT_TRUE(attach->attach);
  EXPECT_EQ(ParseStreamRequest("attach", "command=ls&stdout=true").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(StreamUrlTest, TakesHttpUrlsWithAnAddressAndPort) {
  auto u = ParseStreamUrl("http://127.0.0.1:41231/exec/AbC-d_e");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->host, "127.0.0.1");
  EXPECT_EQ(u->port, 41231);
  EXPECT_FALSE(u->ipv6);
  EXPECT_EQ(u->target, "/exec/AbC-d_e");
  auto v6 = ParseStreamUrl("http://[::1]:8080/attach/x?y=z");
  ASSERT_TRUE(v6.ok()) << v6.status();
  EXPECT_TRUE(v6->ipv6);
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->target, "/attach/x?y=z");
  EXPECT_FALSE(ParseStreamUrl("https://127.0.0.1:1/exec/x").ok());
  EXPECT_FALSE(ParseStreamUrl("http://localhost/exec/x").ok());
  EXPECT_FALSE(ParseStreamUrl("http://127.0.0.1/exec/x").ok());
}

TEST(UpstreamRequestTest, CarriesTheUpgradeButNeverTheToken) {
  auto client = http::ParseRequest(
      "POST /api/v1/namespaces/default/pods/p/exec?command=ls&stdout=true HTTP/1.1\r\nHost: api\r\n"
      "Authorization: Bearer secret-token\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
      "X-Stream-Protocol-Version: v4.channel.k8s.io\r\nX-Stream-Protocol-Version: v3.channel.k8s.io\r\n"
      "X-Stream-Protocol-Version: channel.k8s.io\r\nCookie: c=1\r\nContent-Length: 0\r\n\r\n");
  ASSERT_TRUE(client.ok()) << client.status();
  const std::string req = UpstreamRequest(*client, *ParseStreamUrl("http://127.0.0.1:5/exec/tok"));
  EXPECT_THAT(req, StartsWith("POST /exec/tok HTTP/1.1\r\nHost: 127.0.0.1:5\r\n"));
  EXPECT_THAT(req, HasSubstr("connection: Upgrade\r\nupgrade: SPDY/3.1\r\n"));
  EXPECT_THAT(req, HasSubstr("X-Stream-Protocol-Version: v4.channel.k8s.io\r\n"
                             "X-Stream-Protocol-Version: v3.channel.k8s.io\r\n"
                             "X-Stream-Protocol-Version: channel.k8s.io\r\n"));
  EXPECT_THAT(req, Not(HasSubstr("secret-token")));
  EXPECT_THAT(req, Not(HasSubstr("Cookie")));
  EXPECT_THAT(req, ::testing::EndsWith("\r\n\r\n"));

  auto ws = http::ParseRequest(
      "GET /x HTTP/1.1\r\nHost: api\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
      "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
      "Sec-WebSocket-Protocol: v5.channel.k8s.io\r\n\r\n");
  ASSERT_TRUE(ws.ok());
  const std::string wreq = UpstreamRequest(*ws, *ParseStreamUrl("http://127.0.0.1:5/exec/tok"));
  EXPECT_THAT(wreq, StartsWith("GET /exec/tok HTTP/1.1\r\n"));
  EXPECT_THAT(wreq, HasSubstr("sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\n"
                              "sec-websocket-protocol: v5.channel.k8s.io\r\n"));
}

TEST(UpstreamHeadTest, ParsesWholeHeadsOnly) {
  EXPECT_EQ(ParseUpstreamHead("HTTP/1.1 101 Switching Protocols\r\nUpgrade: SPDY/3.1").status().code(),
            absl::StatusCode::kNotFound);
  const std::string bytes =
      "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
      "X-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n\x80\x03";
  auto h = ParseUpstreamHead(bytes);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->code, 101);
  EXPECT_EQ(h->size, bytes.size() - 2);
  EXPECT_EQ(h->headers.at("x-stream-protocol-version"), "v4.channel.k8s.io");
  auto refused = ParseUpstreamHead("HTTP/1.1 403 Forbidden\r\n\r\n");
  ASSERT_TRUE(refused.ok());
  EXPECT_EQ(refused->code, 403);
  EXPECT_EQ(ParseUpstreamHead("SSH-2.0-x\r\n\r\n").status().code(), absl::StatusCode::kInvalidArgument);
}

// ---- The handshake, against a runtime double ----

// A streaming server of the test: one connection, its request recorded,
// `answer` sent back, then (after a 101) an echo of what arrives.
class FakeStreamingServer {
 public:
  explicit FakeStreamingServer(std::string answer) : answer_(std::move(answer)) {
    listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in sin{};
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(listener_, reinterpret_cast<sockaddr*>(&sin), sizeof(sin)), 0);
    EXPECT_EQ(::listen(listener_, 4), 0);
    socklen_t len = sizeof(sin);
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&sin), &len);
    port_ = ntohs(sin.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~FakeStreamingServer() {
    ::shutdown(listener_, SHUT_RDWR);
    thread_.join();
    ::close(listener_);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/exec/token1"; }
  std::string request() {
    absl::MutexLock lock(&mu_);
    return request_;
  }

 private:
  void Serve() {
    pollfd p{listener_, POLLIN, 0};
    if (::poll(&p, 1, 10000) != 1) return;
    const int fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) return;
    std::string got;
    char buf[4096];
    while (got.find("\r\n\r\n") == std::string::npos) {
      const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
    }
    {
      absl::MutexLock lock(&mu_);
      request_ = got;
    }
    ::send(fd, answer_.data(), answer_.size(), MSG_NOSIGNAL);
    if (answer_.starts_with("HTTP/1.1 101")) {
      ssize_t n;
      while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) ::send(fd, buf, static_cast<size_t>(n), MSG_NOSIGNAL);
    }
    ::close(fd);
  }

  const std::string answer_;
  int listener_ = -1;
  int port_ = 0;
  std::thread thread_;
  absl::Mutex mu_;
  std::string request_ ABSL_GUARDED_BY(mu_);
};

// A CRI runtime that knows one running container and hands out one URL.
class StreamingRuntime final : public cri::Runtime {
 public:
  StreamingRuntime(std::string uid, std::string url) : uid_(std::move(uid)), url_(std::move(url)) {}

  absl::StatusOr<std::vector<cri::v1::Container>> ListContainers(const cri::v1::ContainerFilter& f) override {
    std::vector<cri::v1::Container> out;
    if (f.label_selector().at("io.kubernetes.pod.uid") == uid_ &&
        f.label_selector().at("io.kubernetes.container.name") == "app") {
      out.emplace_back().set_id("cid-app");
    }
    return out;
  }
  absl::StatusOr<std::string> Exec(const cri::v1::ExecRequest& r) override {
    last_exec = r;
    return url_;
  }
  absl::StatusOr<std::string> Attach(const cri::v1::AttachRequest& r) override {
    last_attach = r;
    return url_;
  }
  cri::v1::ExecRequest last_exec;
  cri::v1::AttachRequest last_attach;

  // Not used here.
  absl::StatusOr<cri::v1::VersionResponse> Version() override { return Unused(); }
  absl::StatusOr<cri::v1::RuntimeStatus> Status() override { return Unused(); }
  absl::StatusOr<std::string> RunPodSandbox(const cri::v1::PodSandboxConfig&, const std::string&) override {
    return Unused();
  }
  absl::Status StopPodSandbox(const std::string&) override { return Unused(); }
  absl::Status RemovePodSandbox(const std::string&) override { return Unused(); }
  absl::StatusOr<cri::v1::PodSandboxStatus> PodSandboxStatus(const std::string&) override { return Unused(); }
  absl::StatusOr<std::vector<cri::v1::PodSandbox>> ListPodSandbox(const cri::v1::PodSandboxFilter&) override {
    return Unused();
  }
  absl::StatusOr<std::string> CreateContainer(const std::string&, const cri::v1::ContainerConfig&,
                                              const cri::v1::PodSandboxConfig&) override {
    return Unused();
  }
  absl::Status StartContainer(const std::string&) override { return Unused(); }
  absl::Status StopContainer(const std::string&, absl::Duration) override { return Unused(); }
  absl::Status RemoveContainer(const std::string&) override { return Unused(); }
  absl::StatusOr<cri::v1::ContainerStatus> ContainerStatus(const std::string&) override { return Unused(); }
  absl::Status ReopenContainerLog(const std::string&) override { return Unused(); }
  absl::StatusOr<cri::v1::ExecSyncResponse> ExecSync(const std::string&, const std::vector<std::string>&,
                                                     absl::Duration) override {
    return Unused();
  }
  absl::StatusOr<std::vector<cri::v1::Image>> ListImages() override { return Unused(); }
  absl::StatusOr<cri::v1::Image> ImageStatus(const std::string&) override { return Unused(); }
  absl::StatusOr<std::string> PullImage(const std::string&, const cri::v1::PodSandboxConfig&) override {
    return Unused();
  }
  absl::Status RemoveImage(const std::string&) override { return Unused(); }

 private:
  static absl::Status Unused() { return absl::UnimplementedError("not used by pods/exec"); }
  const std::string uid_, url_;
};

class PodStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = store::Store::Open({.path = dir_.Join("state.db")});
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    registry_ = std::make_unique<apiserver::Registry>(*store_);
    ASSERT_TRUE(registry_->Bootstrap().ok());
  }
  // A pod with containers app and side (and init container setup) on `node`.
  std::string AddPod(const std::string& name, const std::string& node) {
    nlohmann::json spec = {{"containers", {{{"name", "app"}, {"image", "i"}}, {{"name", "side"}, {"image", "i"}}}},
                           {"initContainers", {{{"name", "setup"}, {"image", "i"}}}}};
    if (!node.empty()) spec["nodeName"] = node;
    auto pod =
        registry_->Create(client::K("pods"), "default",
                          {{"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", {{"name", name}}}, {"spec", spec}});
    EXPECT_TRUE(pod.ok()) << pod.status();
    return pod.ok() ? (*pod)["metadata"].value("uid", "") : "";
  }
  absl::Status Serve(const std::string& sub, const std::string& pod, const std::string& query,
                     http::testing::RecordingWriter& w, const RuntimeForNode& runtimes,
                     const std::string& upgrade = "Connection: Upgrade\r\nUpgrade: SPDY/3.1\r\n") {
    auto req = http::ParseRequest("POST /api/v1/namespaces/default/pods/" + pod + "/" + sub + "?" + query +
                                  " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok\r\n" + upgrade +
                                  "X-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n");
    EXPECT_TRUE(req.ok()) << req.status();
    return ServePodStream(*registry_, runtimes, sub, "default", pod, *req, w, {.handshake_timeout = absl::Seconds(10)});
  }

  berth::testing::TempDir dir_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<apiserver::Registry> registry_;
};

TEST_F(PodStreamTest, UpgradesThroughTheRuntimesStreamingServerIntoATunnel) {
  const std::string uid = AddPod("web", "n1");
  FakeStreamingServer server(
      "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
      "X-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n");
  StreamingRuntime runtime(uid, server.url());
  RuntimeForNode runtimes = [&](const std::string& node) -> absl::StatusOr<cri::Runtime*> {
    if (node != "n1") return absl::NotFoundError("no such node");
    return &runtime;
  };
  http::testing::RecordingWriter w;
  ASSERT_TRUE(
      Serve("exec", "web", "command=sh&command=-c&command=exit%203&container=app&stdin=true&stdout=true", w, runtimes)
          .ok());
  ASSERT_EQ(w.code, 101) << w.body;
  EXPECT_THAT(w.body, StartsWith("HTTP/1.1 101 Switching Protocols\r\n"));
  EXPECT_THAT(w.body, HasSubstr("X-Stream-Protocol-Version: v4.channel.k8s.io\r\n"));
  ASSERT_GE(w.tunnel, 0);
  // What the runtime was asked, and what its streaming server got.
  EXPECT_EQ(runtime.last_exec.container_id(), "cid-app");
  EXPECT_THAT(runtime.last_exec.cmd(), ElementsAre("sh", "-c", "exit 3"));
  EXPECT_TRUE(runtime.last_exec.stdin());
  EXPECT_TRUE(runtime.last_exec.stdout());
  EXPECT_FALSE(runtime.last_exec.stderr());
  EXPECT_THAT(server.request(), StartsWith("POST /exec/token1 HTTP/1.1\r\n"));
  EXPECT_THAT(server.request(), Not(HasSubstr("tok\r\n")));
  // The tunnel's backend is the streaming server's connection.
  ASSERT_EQ(::send(w.tunnel, "frame", 5, MSG_NOSIGNAL), 5);
  char buf[16] = {};
  pollfd p{w.tunnel, POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 10000), 1);
  EXPECT_EQ(std::string(buf, static_cast<size_t>(::recv(w.tunnel, buf, sizeof(buf), 0))), "frame");
  ::shutdown(w.tunnel, SHUT_RDWR);
}

TEST_F(PodStreamTest, AttachAsksTheRuntimeForAnAttachUrl) {
  const std::string uid = AddPod("web", "n1");
  FakeStreamingServer server("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n");
  StreamingRuntime runtime(uid, server.url());
  http::testing::RecordingWriter w;
  ASSERT_TRUE(Serve("attach", "web", "container=app&stdout=true&stderr=true", w, [&](const std::string&) {
                return &runtime;
              }).ok());
  EXPECT_EQ(w.code, 101);
  EXPECT_EQ(runtime.last_attach.container_id(), "cid-app");
  EXPECT_TRUE(runtime.last_attach.stderr());
  if (w.tunnel >= 0) ::shutdown(w.tunnel, SHUT_RDWR);
}

TEST_F(PodStreamTest, RelaysTheStreamingServersRefusal) {
  const std::string uid = AddPod("web", "n1");
  // containerd 1.6's answer to a WebSocket protocol it does not speak.
  FakeStreamingServer server("HTTP/1.1 403 Forbidden\r\n\r\n");
  StreamingRuntime runtime(uid, server.url());
  http::testing::RecordingWriter w;
  ASSERT_TRUE(Serve(
                  "exec", "web", "command=ls&container=app&stdout=true", w,
                  [&](const std::string&) { return &runtime; },
                  "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
                  "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Protocol: v5.channel.k8s.io\r\n")
                  .ok());
  EXPECT_EQ(w.code, 403);
  EXPECT_EQ(w.body, "");
  EXPECT_EQ(w.tunnel, -1);
  EXPECT_THAT(server.request(), StartsWith("POST /exec/token1 HTTP/1.1\r\n"));
  EXPECT_THAT(server.request(), HasSubstr("sec-websocket-protocol: v5.channel.k8s.io\r\n"));
}

TEST_F(PodStreamTest, ErrorsAreTheApiServersAndTheNodes) {
  const std::string uid = AddPod("web", "n1");
  AddPod("pending", "");
  AddPod("elsewhere", "n2");
  StreamingRuntime runtime(uid, "http://127.0.0.1:1/exec/x");
  RuntimeForNode runtimes = [&](const std::string& node) -> absl::StatusOr<cri::Runtime*> {
    if (node != "n1") return absl::FailedPreconditionError("volume-only node");
    return &runtime;
  };
  auto status = [&](const std::string& pod, const std::string& query,
                    const std::string& upgrade = "Connection: Upgrade\r\nUpgrade: SPDY/3.1\r\n") {
    http::testing::RecordingWriter w;
    return Serve("exec", pod, query, w, runtimes, upgrade);
  };
  EXPECT_EQ(status("gone", "command=ls&stdout=true").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(status("web", "command=ls&stdout=true").message(),
            "a container name must be specified for pod web, choose one of: [app side] or one of the init "
            "containers: [setup]");
  EXPECT_EQ(status("web", "command=ls&stdout=true&container=nope").message(),
            "container nope is not valid for pod web");
  EXPECT_EQ(status("pending", "command=ls&stdout=true&container=app").message(),
            "pod pending does not have a host assigned");
  EXPECT_EQ(status("web", "command=ls&stdout=true&container=app", "").message(), "Upgrade request required");
  EXPECT_EQ(api::ToHttpError(status("web", "stdout=true&container=app")).code, 400);

  // The node's errors: plain text, as kubelet answers.
  http::testing::RecordingWriter not_running;
  ASSERT_TRUE(Serve("exec", "web", "command=ls&stdout=true&container=side", not_running, runtimes).ok());
  EXPECT_EQ(not_running.code, 404);
  EXPECT_EQ(not_running.body, "container not found (\"side\")\n");
  http::testing::RecordingWriter no_runtime;
  ASSERT_TRUE(Serve("exec", "elsewhere", "command=ls&stdout=true&container=app", no_runtime, runtimes).ok());
  EXPECT_EQ(no_runtime.code, 503);
  EXPECT_EQ(no_runtime.body, "node n2 runs no container runtime: volume-only node\n");
}

}  // namespace
}  // namespace berth::node::pods
