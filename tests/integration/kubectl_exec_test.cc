// Stock kubectl exec (and attach) against `berth up` with its own
// containerd (root; containerd, runc, CNI plugins, berth's images): both
// kubectls of this machine — /usr/bin/kubectl (1.30+: WebSocket
// v5.channel.k8s.io first, SPDY when that is refused) and Debian's 1.20
// (SPDY only) — get stdout, stderr, the exit code, stdin, `-c`, a terminal,
// and the API server's and node's errors; and the facts of containerd's
// streaming server the design rests on (which upgrades it accepts),
// checked for real. Each kubectl missing is skipped with its reason.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "absl/strings/match.h"
#include "commands.h"
#include "cri/containerd.h"
#include "cri/testing/containerd.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "up_fixture.h"

namespace berth::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
namespace fs = std::filesystem;

constexpr char kNewKubectl[] = "/usr/bin/kubectl";
constexpr char kDebianKubectl[] = "/usr/local/lib/berth/kubernetes-client/usr/bin/kubectl";

class KubectlExecTest : public BerthUpFixture, public ::testing::WithParamInterface<const char*> {
 protected:
  void SetUp() override {
    BerthUpFixture::SetUp();
    if (IsSkipped()) return;
    if (std::string why = cri::testing::TestContainerd::Unavailable(); !why.empty()) GTEST_SKIP() << why;
    if (::access(GetParam(), X_OK) != 0) GTEST_SKIP() << GetParam() << " is not installed";
    api_address_ = "127.0.0.1:0";
  }
  void Start(std::vector<std::string> extra = {}) {
    extra.insert(extra.end(), {"--pod-cidr", "10.213.7.0/24"});
    started_ = true;
    StartUp(extra);
  }
  void TearDown() override {
    if (started_) {
      StopUp(SIGTERM);
      // The documented way to stop every container berth started.
      Subprocess down({BERTH_BINARY, "--data-dir", data_, "down"}, sandbox_.Join("down.log"));
      EXPECT_EQ(down.Wait(absl::Seconds(120)).value_or(-1), 0) << down.Output();
      EXPECT_TRUE(Shims().empty()) << "containerd shims of the test left";
    }
    BerthUpFixture::TearDown();
  }
  // containerd shims serving a containerd of this test's data directory.
  std::vector<pid_t> Shims() {
    std::vector<pid_t> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("/proc", ec)) {
      const pid_t pid = static_cast<pid_t>(std::atoi(e.path().filename().c_str()));
      if (pid <= 0) continue;
      std::string cmd = ReadWholeFile(e.path() / "cmdline");
      std::replace(cmd.begin(), cmd.end(), '\0', ' ');
      if (absl::StrContains(cmd, "containerd-shim") && absl::StrContains(cmd, data_ + "/containerd/")) {
        out.push_back(pid);
      }
    }
    return out;
  }

  CommandResult Kubectl(const std::vector<std::string>& args, const std::string& input = "") {
    std::vector<std::string> argv = {GetParam(), "--kubeconfig", data_ + "/kubeconfig"};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(sandbox_.Join(""), argv, {"HOME=" + sandbox_.Join("")}, input, absl::Seconds(60));
  }
  // `kubectl exec POD [-c C] -- sh -c SCRIPT`.
  CommandResult Exec(const std::string& pod, const std::string& container, const std::string& script,
                     const std::vector<std::string>& flags = {}, const std::string& input = "") {
    std::vector<std::string> args = {"exec", pod};
    args.insert(args.end(), flags.begin(), flags.end());
    if (!container.empty()) args.insert(args.end(), {"-c", container});
    args.insert(args.end(), {"--", "/bin/sh", "-c", script});
    return Kubectl(args, input);
  }
  void Apply(const std::string& yaml) {
    Berth({"apply", "-f", WriteFile("manifest-" + std::to_string(++manifests_) + ".yaml", yaml)});
  }
  // Two containers, main and side, each saying who it is through $WHO.
  static std::string TwoContainers(const std::string& name) {
    std::string y = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name +
                    "\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n";
    for (const char* c : {"main", "side"}) {
      y += std::string("    - name: ") + c + "\n      image: " + cri::kToolboxImage +
           "\n      command: [\"/bin/sh\", \"-c\", \"trap 'exit 0' TERM; while true; do sleep 1; done\"]\n"
           "      env:\n        - name: WHO\n          value: " +
           c + "\n";
    }
    return y;
  }

  bool started_ = false;
  int manifests_ = 0;
};

TEST_P(KubectlExecTest, StdoutStderrExitCodeStdinContainerAndTerminal) {
  Start();
  Apply(TwoContainers("two"));
  ASSERT_TRUE(Eventually([&] { return Running("two"); }, absl::Seconds(120))) << Pod("two").dump();

  // stdout and stderr apart, and the command's exit code is kubectl's.
  CommandResult r = Exec("two", "main", "echo out; echo err >&2; exit 3");
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_EQ(r.out, "out\n");
  EXPECT_THAT(r.err, HasSubstr("err\n"));
  EXPECT_THAT(r.err, HasSubstr("command terminated with exit code 3"));

  r = Exec("two", "main", "echo fine");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "fine\n");

  // stdin, to its end.
  const std::string input = "hi\nthere\n" + std::string(100000, 'x') + "\n";
  r = Kubectl({"exec", "-i", "two", "-c", "main", "--", "cat"}, input);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, input);
  r = Kubectl({"exec", "-i", "two", "-c", "main", "--", "wc", "-l"}, "a\nb\nc\n");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("3"));

  // -c picks the container.
  r = Exec("two", "side", "echo $WHO");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "side\n");
  r = Exec("two", "main", "echo $WHO");
  EXPECT_EQ(r.out, "main\n");

  // A terminal (script(1) gives kubectl one, 40 rows by 100 columns):
  // the command runs on a pty of the container's, at the client's size
  // (which the runtime applies as the resize stream delivers it, maybe
  // just after the command started: it polls for up to 15 s). busybox's
  // `stty size` on a pty with no size yet says so on stderr but exits 0,
  // so the poll waits for digits, not for success.
  const std::string line = std::string(GetParam()) + " --kubeconfig " + data_ +
                           "/kubeconfig exec -it two -c main -- /bin/sh -c 'tty; for i in $(seq 150); do "
                           "s=$(stty size 2>/dev/null); case \"$s\" in [1-9]*) break;; esac; sleep 0.1; done; "
                           "echo size $s'";
  r = RunCommand(sandbox_.Join(""),
                 {"/usr/bin/script", "-q", "-e", "-c", "stty rows 40 cols 100; " + line, "/dev/null"},
                 {"HOME=" + sandbox_.Join("")}, "", absl::Seconds(60));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("/dev/pts/"));
  EXPECT_THAT(r.out, HasSubstr("size 40 100"));
}

TEST_P(KubectlExecTest, ErrorsAsKubernetesGivesThem) {
  Start();
  Apply(TwoContainers("two"));
  // A container that never starts (its image is not there and is never pulled).
  Apply(
      "apiVersion: v1\nkind: Pod\nmetadata:\n  name: waiting\nspec:\n  containers:\n    - name: main\n"
      "      image: berth.test/absent:1\n      imagePullPolicy: Never\n");
  ASSERT_TRUE(Eventually([&] { return Running("two"); }, absl::Seconds(120))) << Pod("two").dump();

  CommandResult r = Exec("nope", "main", "true");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("pods \"nope\" not found"));

  r = Exec("two", "nope", "true");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("container nope is not valid for pod two"));

  ASSERT_TRUE(Eventually(
      [&] {
        const json statuses = Pod("waiting").value("status", json::object()).value("containerStatuses", json::array());
        return !statuses.empty() && statuses[0].value("state", json::object()).contains("waiting");
      },
      absl::Seconds(60)));
  r = Exec("waiting", "main", "true");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("unable to upgrade connection: container not found (\"main\")"));

  // The API server checks the request as kube-apiserver does (kubectl
  // itself always sends a command).
  auto raw = client_->Call("POST", "/api/v1/namespaces/default/pods/two/exec?container=main&stdout=true");
  ASSERT_TRUE(raw.ok()) << raw.status();
  EXPECT_EQ(raw->code, 400);
  EXPECT_THAT(raw->body, HasSubstr("you must specify at least one command for the container"));
  raw = client_->Call("POST", "/api/v1/namespaces/default/pods/two/exec?container=main&stdout=true&command=ls");
  ASSERT_TRUE(raw.ok());
  EXPECT_EQ(raw->code, 400);
  EXPECT_THAT(raw->body, HasSubstr("Upgrade request required"));
}

// Each node of `berth up --nodes 2` has its own containerd: exec reaches
// the pod's; attach follows a container's output.
TEST_P(KubectlExecTest, ExecReachesThePodsNodeAndAttachFollowsOutput) {
  Start({"--nodes", "2"});
  for (const char* node : {"testnode-1", "testnode-2"}) {
    Apply(std::string("apiVersion: v1\nkind: Pod\nmetadata:\n  name: on-") + node + "\nspec:\n  nodeName: " + node +
          "\n  terminationGracePeriodSeconds: 1\n  containers:\n    - name: main\n      image: " + cri::kToolboxImage +
          "\n      command: [\"/bin/sh\", \"-c\", \"trap 'exit 0' TERM; while true; do echo tick; sleep 0.2; done\"]\n"
          "      env:\n        - name: NODE\n          value: " +
          node + "\n");
  }
  for (const std::string node : {"testnode-1", "testnode-2"}) {
    ASSERT_TRUE(Eventually([&] { return Running("on-" + node); }, absl::Seconds(120))) << Pod("on-" + node).dump();
    CommandResult r = Exec("on-" + node, "", "echo $NODE");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, node + "\n");
  }
  // kubectl attach streams the container's output until stopped.
  CommandResult r =
      RunCommand(sandbox_.Join(""), {GetParam(), "--kubeconfig", data_ + "/kubeconfig", "attach", "on-testnode-2"},
                 {"HOME=" + sandbox_.Join("")}, "", absl::Seconds(4));
  EXPECT_THAT(r.out, HasSubstr("tick\ntick\n")) << r.err;
}

INSTANTIATE_TEST_SUITE_P(Kubectls, KubectlExecTest, ::testing::Values(kNewKubectl, kDebianKubectl),
                         [](const ::testing::TestParamInfo<const char*>& p) {
                           return std::string(p.param) == kNewKubectl ? "NewKubectl" : "DebianKubectl";
                         });

}  // namespace
}  // namespace berth::testing
