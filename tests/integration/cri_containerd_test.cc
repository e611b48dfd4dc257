// The CRI client against a real containerd (root; containerd, runc and the
// CNI plugins installed): berth's containerd configuration boots with its
// CRI plugin, berth's images import, sandboxes get an IP on the node's
// bridge, containers run the toolbox image, exit codes, CRI log files and
// ExecSync come back, the host reaches a pod, StopContainer ends a process
// that ignores SIGTERM after its grace period, and removing everything
// leaves no shim, mount or bridge behind; and which upgrades containerd's
// streaming server (pods/exec's far end) accepts.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "common/testing/eventually.h"
#include "common/testing/temp_dir.h"
#include "cri/testing/containerd.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace berth::cri {
namespace {

using ::testing::HasSubstr;
using testing::TestContainerd;

class CriContainerdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string why = TestContainerd::Unavailable(); !why.empty()) GTEST_SKIP() << why;
    ctd_ = std::make_unique<TestContainerd>("10.213.0.0/24");
    absl::Status st = ctd_->Start();
    ASSERT_TRUE(st.ok()) << st << "\n" << ctd_->Log();
  }

  v1::PodSandboxConfig Sandbox(const std::string& name) {
    v1::PodSandboxConfig c;
    c.mutable_metadata()->set_name(name);
    c.mutable_metadata()->set_namespace_("default");
    c.mutable_metadata()->set_uid("uid-" + name);
    c.set_hostname(name);
    c.set_log_directory(logs_.Join(name));
    (*c.mutable_labels())["io.kubernetes.pod.uid"] = "uid-" + name;
    std::filesystem::create_directories(logs_.Join(name));
    return c;
  }
  v1::ContainerConfig Container(const std::string& name, std::vector<std::string> command) {
    v1::ContainerConfig c;
    c.mutable_metadata()->set_name(name);
    c.mutable_image()->set_image(kToolboxImage);
    for (auto& a : command) c.add_command(a);
    c.set_log_path(name + "/0.log");
    return c;
  }
  // Creates and starts a container; its ID.
  std::string Run(const std::string& sandbox, const v1::PodSandboxConfig& sc, const v1::ContainerConfig& cc) {
    auto id = ctd_->runtime().CreateContainer(sandbox, cc, sc);
    EXPECT_TRUE(id.ok()) << id.status();
    if (!id.ok()) return "";
    absl::Status st = ctd_->runtime().StartContainer(*id);
    EXPECT_TRUE(st.ok()) << st;
    return *id;
  }
  v1::ContainerStatus WaitExited(const std::string& id) {
    v1::ContainerStatus status;
    EXPECT_TRUE(berth::testing::Eventually(
        [&] {
          auto s = ctd_->runtime().ContainerStatus(id);
          if (s.ok()) status = *s;
          return s.ok() && s->state() == v1::CONTAINER_EXITED;
        },
        absl::Seconds(30)));
    return status;
  }

  berth::testing::TempDir logs_;
  std::unique_ptr<TestContainerd> ctd_;
};

TEST_F(CriContainerdTest, RunsPodsAndContainersAndCleansUpCompletely) {
  Runtime& rt = ctd_->runtime();
  auto version = rt.Version();
  ASSERT_TRUE(version.ok()) << version.status();
  EXPECT_EQ(version->runtime_name(), "containerd");
  EXPECT_EQ(version->runtime_api_version(), "v1");
  auto status = rt.Status();
  ASSERT_TRUE(status.ok()) << status.status();
  for (const auto& c : status->conditions()) EXPECT_TRUE(c.status()) << c.type() << ": " << c.message();

  // The images are there, the sandbox image included.
  auto pause = rt.ImageStatus(kPauseImage);
  ASSERT_TRUE(pause.ok()) << pause.status();
  EXPECT_FALSE(pause->id().empty());
  auto missing = rt.ImageStatus("berth.local/not-imported:1");
  ASSERT_TRUE(missing.ok()) << missing.status();
  EXPECT_TRUE(missing->id().empty());

  // A sandbox with an IP in the node's subnet.
  const v1::PodSandboxConfig sc = Sandbox("one");
  auto sandbox = rt.RunPodSandbox(sc, "");
  ASSERT_TRUE(sandbox.ok()) << sandbox.status() << "\n" << ctd_->Log();
  auto sbs = rt.PodSandboxStatus(*sandbox);
  ASSERT_TRUE(sbs.ok()) << sbs.status();
  EXPECT_EQ(sbs->state(), v1::SANDBOX_READY);
  const std::string ip = sbs->network().ip();
  EXPECT_TRUE(absl::StartsWith(ip, "10.213.0.")) << ip;

  // A container that writes to both streams and exits 3.
  const std::string failing =
      Run(*sandbox, sc, Container("fail", {"/bin/sh", "-c", "echo hello; echo oops >&2; exit 3"}));
  v1::ContainerStatus exited = WaitExited(failing);
  EXPECT_EQ(exited.exit_code(), 3);
  EXPECT_EQ(exited.reason(), "Error");
  EXPECT_GT(exited.finished_at(), 0);
  std::ifstream log(logs_.Join("one/fail/0.log"));
  std::stringstream text;
  text << log.rdbuf();
  EXPECT_THAT(text.str(), HasSubstr(" stdout F hello\n"));
  EXPECT_THAT(text.str(), HasSubstr(" stderr F oops\n"));

  // A server; the host reaches it by the pod IP; exec into it.
  const std::string server = Run(
      *sandbox, sc,
      Container("web",
                {"/bin/sh", "-c", "mkdir -p /www && echo served > /www/index.html && exec httpd -f -p 8080 -h /www"}));
  ASSERT_TRUE(berth::testing::Eventually(
      [&] {
        int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_port = htons(8080);
        ::inet_pton(AF_INET, ip.c_str(), &addr.sin_addr);
        const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
        ::close(fd);
        return ok;
      },
      absl::Seconds(20)))
      << "no connection to " << ip << ":8080";
  auto exec =
      rt.ExecSync(server, {"/bin/sh", "-c", "cat /www/index.html; echo to-stderr >&2; exit 7"}, absl::Seconds(10));
  ASSERT_TRUE(exec.ok()) << exec.status();
  EXPECT_EQ(exec->stdout(), "served\n");
  EXPECT_EQ(exec->stderr(), "to-stderr\n");
  EXPECT_EQ(exec->exit_code(), 7);

  // A process that ignores SIGTERM is killed once the grace period ends.
  const std::string stubborn =
      Run(*sandbox, sc, Container("stubborn", {"/bin/sh", "-c", "trap '' TERM; while true; do sleep 1; done"}));
  const absl::Time before = absl::Now();
  ASSERT_TRUE(rt.StopContainer(stubborn, absl::Seconds(1)).ok());
  EXPECT_GE(absl::Now() - before, absl::Seconds(1));
  EXPECT_EQ(WaitExited(stubborn).exit_code(), 137);

  // Listing by label finds the pod; removing it removes its containers.
  v1::PodSandboxFilter by_uid;
  (*by_uid.mutable_label_selector())["io.kubernetes.pod.uid"] = "uid-one";
  auto listed = rt.ListPodSandbox(by_uid);
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_FALSE(ctd_->Shims().empty());
  ASSERT_TRUE(RemoveAllSandboxes(rt, {}).ok());
  auto containers = rt.ListContainers({});
  ASSERT_TRUE(containers.ok());
  EXPECT_TRUE(containers->empty());
  EXPECT_EQ(rt.PodSandboxStatus(*sandbox).status().code(), absl::StatusCode::kNotFound);

  // Nothing of it outlives containerd.
  ctd_->Stop();
  EXPECT_TRUE(ctd_->Shims().empty());
  EXPECT_TRUE(ctd_->Mounts().empty());
  EXPECT_FALSE(ctd_->BridgeExists());
}

// What containerd's streaming server (pods/exec's far end) accepts, checked
// for real rather than assumed: CRI Exec gives a one-use URL on loopback
// (berth's config); an upgrade to SPDY/3.1 negotiates v4.channel.k8s.io
// even when v5 is offered first; WebSocket v4.channel.k8s.io is accepted,
// WebSocket v5.channel.k8s.io (what kubectl 1.30+ tries first) is refused
// with 403, which kubectl takes as its cue to fall back to SPDY.
TEST_F(CriContainerdTest, StreamingServerOnLoopbackSpeaksSpdyAndWebSocketUpToV4) {
  Runtime& rt = ctd_->runtime();
  const v1::PodSandboxConfig sc = Sandbox("streams");
  auto sandbox = rt.RunPodSandbox(sc, "");
  ASSERT_TRUE(sandbox.ok()) << sandbox.status();
  const std::string id = Run(*sandbox, sc, Container("sleeper", {"/bin/sleep", "3600"}));
  // The status line and headers the streaming server answers `upgrade` with.
  auto answer = [&](const std::string& method, const std::string& upgrade) -> std::string {
    v1::ExecRequest req;
    req.set_container_id(id);
    req.add_cmd("/bin/true");
    req.set_stdout(true);
    auto url = rt.Exec(req);
    EXPECT_TRUE(url.ok()) << url.status();
    if (!url.ok()) return "";
    EXPECT_TRUE(absl::StartsWith(*url, "http://127.0.0.1:")) << *url;
    const size_t port_at = std::string("http://127.0.0.1:").size();
    const int port = std::atoi(url->c_str() + port_at);
    const std::string path = url->substr(url->find('/', port_at));
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    const std::string request = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" + upgrade + "\r\n";
    ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
    std::string got;
    char buf[4096];
    ssize_t n;
    while (got.find("\r\n\r\n") == std::string::npos && (n = ::recv(fd, buf, sizeof(buf), 0)) > 0) {
      got.append(buf, static_cast<size_t>(n));
    }
    ::close(fd);
    return got.substr(0, got.find("\r\n\r\n") + 2);
  };
  const std::string spdy = answer("POST",
                                  "Connection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
                                  "X-Stream-Protocol-Version: v5.channel.k8s.io\r\n"
                                  "X-Stream-Protocol-Version: v4.channel.k8s.io\r\n"
                                  "X-Stream-Protocol-Version: channel.k8s.io\r\n");
  EXPECT_TRUE(absl::StartsWith(spdy, "HTTP/1.1 101 Switching Protocols\r\n")) << spdy;
  EXPECT_THAT(spdy, HasSubstr("X-Stream-Protocol-Version: v4.channel.k8s.io\r\n"));
  auto websocket = [&](const std::string& protocol) {
    return answer("GET",
                  "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
                  "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Protocol: " +
                      protocol + "\r\nOrigin: http://127.0.0.1\r\n");
  };
  const std::string v4 = websocket("v4.channel.k8s.io");
  EXPECT_TRUE(absl::StartsWith(v4, "HTTP/1.1 101 Switching Protocols\r\n")) << v4;
  EXPECT_THAT(v4, HasSubstr("Sec-WebSocket-Protocol: v4.channel.k8s.io\r\n"));
  const std::string v5 = websocket("v5.channel.k8s.io");
  EXPECT_TRUE(absl::StartsWith(v5, "HTTP/1.1 403 Forbidden\r\n")) << v5;
  ASSERT_TRUE(RemoveAllSandboxes(rt, {}).ok());
}

TEST_F(CriContainerdTest, ContainersSurviveARestartOfContainerd) {
  Runtime& rt = ctd_->runtime();
  const v1::PodSandboxConfig sc = Sandbox("survivor");
  auto sandbox = rt.RunPodSandbox(sc, "");
  ASSERT_TRUE(sandbox.ok()) << sandbox.status();
  const std::string id = Run(*sandbox, sc, Container("sleeper", {"/bin/sleep", "3600"}));
  ctd_->Kill();
  ASSERT_TRUE(ctd_->Restart().ok());
  auto s = rt.ContainerStatus(id);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->state(), v1::CONTAINER_RUNNING);
  auto sbs = rt.PodSandboxStatus(*sandbox);
  ASSERT_TRUE(sbs.ok());
  EXPECT_EQ(sbs->state(), v1::SANDBOX_READY);
}

}  // namespace
}  // namespace berth::cri
