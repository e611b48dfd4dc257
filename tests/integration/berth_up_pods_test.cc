// `berth up` running pods for real (root; containerd, runc, CNI plugins and
// berth's images): berth's containerd per node, pods through the CLI with
// claims, logs and exec, pod-to-pod traffic by pod IP, exit codes, graceful
// deletion with a SIGTERM trap writing to the volume, kill -9 and restart,
// and `berth down` leaving no container, shim, network namespace, bridge or
// mount behind.
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_replace.h"
#include "http/api_client.h"
#include "common/testing/eventually.h"
#include "common/testing/subprocess.h"
#include "cri/containerd.h"
#include "cri/runtime.h"
#include "cri/testing/containerd.h"
#include "driver/testing/sandbox.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace berth::testing {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

constexpr char kNode[] = "podnode";

class BerthUpPodsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string why = cri::testing::TestContainerd::Unavailable(); !why.empty()) GTEST_SKIP() << why;
    data_ = sandbox_.Join("data");
  }
  void TearDown() override {
    if (data_.empty()) return;
    StopUp(SIGTERM);
    // The documented way to stop everything berth started.
    auto [rc, out] = Berth({"down"});
    EXPECT_EQ(rc, 0) << out;
    cri::ContainerdSetup setup{.dir = data_ + "/containerd/" + kNode, .pod_cidr = ""};
    EXPECT_TRUE(Shims().empty()) << "shims left";
    EXPECT_FALSE(fs::exists("/sys/class/net/" + setup.Bridge())) << "bridge left";
    EXPECT_TRUE(sandbox_.Mounts().empty()) << "mounts left: " << sandbox_.Mounts().front();
    for (pid_t pid : Shims()) ::kill(pid, SIGKILL);
  }

  void StartUp() {
    std::vector<std::string> argv = {BERTH_BINARY, "--data-dir", data_, "up", "--pool-size", "1Gi", "--api-address", "",
                                     "--csi-binary", BERTH_CSI_BINARY, "--node-name", kNode, "--pod-cidr",
                                     "10.213.2.0/24"};
    up_ = std::make_unique<Subprocess>(argv, sandbox_.Join("up-" + std::to_string(++starts_) + ".log"));
    ASSERT_TRUE(Eventually([&] { return absl::StrContains(up_->Output(), "berth is up") || up_->Wait(absl::ZeroDuration()); },
                           absl::Seconds(120)))
        << up_->Output();
    ASSERT_FALSE(up_->Wait(absl::ZeroDuration()).has_value()) << up_->Output();
    client_ = http::ApiClient::ForUnixSocket(data_ + "/api.sock");
  }
  void StopUp(int sig) {
    if (!up_) return;
    up_->Signal(sig);
    up_->Wait(absl::Seconds(60));
    up_.reset();
  }
  std::pair<int, std::string> Berth(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {BERTH_BINARY, "--data-dir", data_};
    argv.insert(argv.end(), args.begin(), args.end());
    Subprocess cli(argv, sandbox_.Join("cli.log"));
    auto rc = cli.Wait(absl::Seconds(180));
    return {rc.value_or(-1), cli.Output()};
  }
  void Apply(const std::string& yaml) {
    const std::string file = sandbox_.Join("manifest-" + std::to_string(++manifests_) + ".yaml");
    std::ofstream(file) << yaml;
    auto [rc, out] = Berth({"apply", "-f", file});
    ASSERT_EQ(rc, 0) << out;
  }
  json Pod(const std::string& name) {
    auto r = client_->Call("GET", "/api/v1/namespaces/default/pods/" + name);
    return r.ok() && r->code == 200 ? json::parse(r->body, nullptr, false) : json();
  }
  std::string Phase(const std::string& name) {
    return Pod(name).value("status", json::object()).value("phase", "");
  }
  bool WaitPhase(const std::string& name, const std::string& phase, absl::Duration timeout = absl::Seconds(120)) {
    return Eventually([&] { return Phase(name) == phase; }, timeout);
  }
  std::string Logs(const std::string& pod) {
    auto [rc, out] = Berth({"logs", pod});
    EXPECT_EQ(rc, 0) << out;
    return out;
  }
  std::vector<pid_t> Shims() {
    cri::ContainerdSetup setup{.dir = data_ + "/containerd/" + kNode, .pod_cidr = ""};
    std::vector<pid_t> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("/proc", ec)) {
      const pid_t pid = static_cast<pid_t>(std::atoi(e.path().filename().c_str()));
      if (pid <= 0) continue;
      std::ifstream f(e.path() / "cmdline");
      std::string cmd((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      std::replace(cmd.begin(), cmd.end(), '\0', ' ');
      if (absl::StrContains(cmd, "containerd-shim") && absl::StrContains(cmd, setup.Socket())) out.push_back(pid);
    }
    return out;
  }
  // The node's sandboxes straight from its containerd: pod uid → ids.
  std::map<std::string, std::vector<std::string>> Sandboxes() {
    std::map<std::string, std::vector<std::string>> out;
    auto rt = cri::GrpcRuntime::Connect("unix://" + data_ + "/containerd/" + kNode + "/containerd.sock", {});
    if (!rt.ok()) return out;
    auto list = (*rt)->ListPodSandbox({});
    if (!list.ok()) return out;
    for (const auto& sb : *list) {
      if (sb.state() == cri::v1::SANDBOX_READY) out[sb.labels().at("io.kubernetes.pod.uid")].push_back(sb.id());
    }
    return out;
  }

  static std::string PodYaml(const std::string& name, const std::string& policy, const std::string& script,
                             const std::string& claim = "") {
    std::string y = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name + "\nspec:\n  restartPolicy: " + policy +
                    "\n  terminationGracePeriodSeconds: 10\n  containers:\n    - name: main\n      image: " +
                    std::string(cri::kToolboxImage) + "\n      command: [\"/bin/sh\", \"-c\", " + json(script).dump() + "]\n";
    if (!claim.empty()) {
      y += "      volumeMounts:\n        - name: data\n          mountPath: /data\n  volumes:\n    - name: data\n"
           "      persistentVolumeClaim:\n        claimName: " + claim + "\n";
    }
    return y;
  }
  static std::string ClaimYaml(const std::string& name) {
    return "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: " + name +
           "\nspec:\n  accessModes: [ReadWriteOnce]\n  resources:\n    requests:\n      storage: 64Mi\n";
  }

  MountSandbox sandbox_;
  std::string data_;
  std::unique_ptr<Subprocess> up_;
  std::unique_ptr<http::ApiClient> client_;
  int starts_ = 0;
  int manifests_ = 0;
};

TEST_F(BerthUpPodsTest, PodsRunWithTheirClaimsTalkToEachOtherAndAnswerLogsAndExec) {
  StartUp();
  // A pod writes through its claim; a later pod reads it.
  Apply(ClaimYaml("data") + "---\n" + PodYaml("writer", "Never", "echo persisted > /data/file; echo wrote", "data"));
  ASSERT_TRUE(WaitPhase("writer", "Succeeded")) << Pod("writer").dump();
  EXPECT_EQ(Logs("writer"), "wrote\n");
  Apply(PodYaml("reader", "Never", "cat /data/file", "data"));
  ASSERT_TRUE(WaitPhase("reader", "Succeeded")) << Pod("reader").dump();
  EXPECT_EQ(Logs("reader"), "persisted\n");

  // exit 3 with restartPolicy Never: Failed, exit code 3.
  Apply(PodYaml("three", "Never", "exit 3"));
  ASSERT_TRUE(WaitPhase("three", "Failed")) << Pod("three").dump();
  EXPECT_EQ(Pod("three")["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"], 3);

  // A server, reached from another pod by its pod IP.
  Apply(PodYaml("web", "Always",
                "trap 'exit 0' TERM; mkdir -p /www; echo hello from $(hostname) > /www/index.html; echo serving; "
                "httpd -f -p 8080 -h /www & wait"));
  ASSERT_TRUE(WaitPhase("web", "Running")) << Pod("web").dump();
  const std::string ip = Pod("web")["status"].value("podIP", "");
  ASSERT_TRUE(absl::StartsWith(ip, "10.213.2.")) << Pod("web").dump();
  EXPECT_EQ(Pod("web")["status"]["podIPs"][0]["ip"], ip);
  Apply(PodYaml("client", "OnFailure", "wget -qO- http://" + ip + ":8080/"));
  ASSERT_TRUE(WaitPhase("client", "Succeeded")) << Pod("client").dump();
  EXPECT_EQ(Logs("client"), "hello from web\n");
  EXPECT_EQ(Logs("web"), "serving\n");

  // exec: output and exit code come back.
  auto [rc, out] = Berth({"exec", "web", "--", "cat", "/www/index.html"});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "hello from web\n");
  EXPECT_EQ(Berth({"exec", "web", "--", "/bin/sh", "-c", "exit 4"}).first, 4);
  // logs of an unknown pod: the API's NotFound.
  auto [logs_rc, logs_out] = Berth({"logs", "nope"});
  EXPECT_NE(logs_rc, 0);
  EXPECT_THAT(logs_out, HasSubstr("NotFound"));

  // Images: berth's are there; an unknown image cannot be pulled offline.
  auto [ls_rc, ls_out] = Berth({"image", "ls"});
  EXPECT_EQ(ls_rc, 0) << ls_out;
  EXPECT_THAT(ls_out, HasSubstr(cri::kToolboxImage));
  EXPECT_THAT(ls_out, HasSubstr(cri::kPauseImage));
  Apply("apiVersion: v1\nkind: Pod\nmetadata:\n  name: nothere\nspec:\n  containers:\n    - name: main\n"
        "      image: registry.invalid/none:1\n");
  ASSERT_TRUE(Eventually([&] {
    const json c = Pod("nothere").value("status", json::object()).value("containerStatuses", json::array());
    if (c.empty() || !c[0]["state"].contains("waiting")) return false;
    const std::string reason = c[0]["state"]["waiting"].value("reason", "");
    return reason == "ErrImagePull" || reason == "ImagePullBackOff";
  }, absl::Seconds(120))) << Pod("nothere").dump();
}

TEST_F(BerthUpPodsTest, ASigtermTrapWritesItsLastLineToTheVolumeBeforeItGoes) {
  StartUp();
  Apply(ClaimYaml("journal") + "---\n" +
        PodYaml("graceful", "Always",
                "trap 'echo last line >> /data/log; exit 0' TERM; echo first line >> /data/log; "
                "while true; do sleep 1; done",
                "journal"));
  ASSERT_TRUE(WaitPhase("graceful", "Running")) << Pod("graceful").dump();
  // berth delete waits until the pod is gone: containers stopped, volume
  // unpublished, then the object removed.
  auto [rc, out] = Berth({"delete", "pod", "graceful"});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_TRUE(Pod("graceful").is_null());
  Apply(PodYaml("check", "Never", "cat /data/log", "journal"));
  ASSERT_TRUE(WaitPhase("check", "Succeeded")) << Pod("check").dump();
  EXPECT_EQ(Logs("check"), "first line\nlast line\n");
}

TEST_F(BerthUpPodsTest, KillNineAndRestartKeepOneSandboxPerPod) {
  StartUp();
  Apply(ClaimYaml("data") + "---\n" +
        PodYaml("one", "Always", "trap 'exit 0' TERM; while true; do sleep 1; done", "data") + "---\n" +
        PodYaml("two", "Always", "trap 'exit 0' TERM; while true; do sleep 1; done"));
  ASSERT_TRUE(WaitPhase("one", "Running") && WaitPhase("two", "Running")) << Pod("one").dump() << Pod("two").dump();
  const auto before = Sandboxes();
  ASSERT_EQ(before.size(), 2u);
  StopUp(SIGKILL);
  // The containers outlive berth up (in their shims).
  EXPECT_EQ(Shims().size(), 2u);
  StartUp();
  ASSERT_TRUE(WaitPhase("one", "Running") && WaitPhase("two", "Running"));
  // Force-delete one (kubectl delete --grace-period=0 --force).
  auto r = client_->Call("DELETE", "/api/v1/namespaces/default/pods/two", R"({"gracePeriodSeconds":0})");
  ASSERT_TRUE(r.ok() && r->code == 200) << (r.ok() ? r->body : r.status().ToString());
  const std::string one = Pod("one")["metadata"]["uid"];
  ASSERT_TRUE(Eventually([&] { return Sandboxes().size() == 1; }, absl::Seconds(60)));
  const auto after = Sandboxes();
  ASSERT_EQ(after.count(one), 1u);
  EXPECT_EQ(after.at(one), before.at(one));  // adopted, not made again
  EXPECT_EQ(Pod("one")["status"]["containerStatuses"][0]["restartCount"], 0);
}

}  // namespace
}  // namespace berth::testing
