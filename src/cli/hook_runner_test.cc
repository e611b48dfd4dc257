// CriHookRunner against a fake CRI runtime: which container and node, the
// timeout passed through, and each way a hook fails.
#include "cli/hook_runner.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace berth::cli {
namespace {

using api::types::Pod;
using controllers::Hook;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

// A runtime whose ExecSync records its arguments and answers `answer`.
class ExecSyncRuntime final : public cri::Runtime {
 public:
  struct Call {
    std::string id;
    std::vector<std::string> cmd;
    absl::Duration timeout;
  };
  absl::StatusOr<cri::v1::ExecSyncResponse> ExecSync(const std::string& id, const std::vector<std::string>& cmd,
                                                     absl::Duration timeout) override {
    calls.push_back({id, cmd, timeout});
    return answer;
  }
  absl::StatusOr<cri::v1::ExecSyncResponse> answer = cri::v1::ExecSyncResponse();
  std::vector<Call> calls;

  // Not used by hooks.
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
  absl::StatusOr<std::vector<cri::v1::Container>> ListContainers(const cri::v1::ContainerFilter&) override {
    return Unused();
  }
  absl::StatusOr<cri::v1::ContainerStatus> ContainerStatus(const std::string&) override { return Unused(); }
  absl::Status ReopenContainerLog(const std::string&) override { return Unused(); }
  absl::StatusOr<std::string> Exec(const cri::v1::ExecRequest&) override { return Unused(); }
  absl::StatusOr<std::string> Attach(const cri::v1::AttachRequest&) override { return Unused(); }
  absl::StatusOr<std::vector<cri::v1::Image>> ListImages() override { return Unused(); }
  absl::StatusOr<cri::v1::Image> ImageStatus(const std::string&) override { return Unused(); }
  absl::StatusOr<std::string> PullImage(const std::string&, const cri::v1::PodSandboxConfig&) override {
    return Unused();
  }
  absl::Status RemoveImage(const std::string&) override { return Unused(); }

 private:
  static absl::Status Unused() { return absl::UnimplementedError("not used by hooks"); }
};

// A Running pod on node n2 with containers app (running) and sidecar
// (waiting).
Pod RunningPod() {
  return *api::types::Decode<Pod>(nlohmann::json::parse(R"({
    "metadata": {"namespace": "shop", "name": "db"},
    "spec": {"nodeName": "n2", "containers": [{"name": "app"}, {"name": "sidecar"}]},
    "status": {"phase": "Running", "containerStatuses": [
      {"name": "app", "state": {"running": {"startedAt": "2026-11-27T08:00:00Z"}},
       "containerID": "containerd://c0ffee", "ready": true},
      {"name": "sidecar", "state": {"waiting": {"reason": "CrashLoopBackOff"}},
       "containerID": "containerd://dead"}]}})"));
}

class CriHookRunnerTest : public ::testing::Test {
 protected:
  CriHookRunner runner_{[this](const std::string& node) -> absl::StatusOr<cri::Runtime*> {
    nodes_.push_back(node);
    if (node == "n2") return &runtime_;
    return absl::FailedPreconditionError("node " + node + " has no container runtime");
  }};
  ExecSyncRuntime runtime_;
  std::vector<std::string> nodes_;
  Hook hook_{.container = "app", .command = {"/bin/sh", "-c", "sync"}, .timeout = absl::Seconds(7)};
};

TEST_F(CriHookRunnerTest, RunsTheCommandInThePodsContainerOnItsNodeWithTheHooksTimeout) {
  ASSERT_TRUE(runner_.Run(RunningPod(), hook_).ok());
  EXPECT_THAT(nodes_, ElementsAre("n2"));
  ASSERT_EQ(runtime_.calls.size(), 1u);
  EXPECT_EQ(runtime_.calls[0].id, "c0ffee");  // containerd:// stripped
  EXPECT_THAT(runtime_.calls[0].cmd, ElementsAre("/bin/sh", "-c", "sync"));
  EXPECT_EQ(runtime_.calls[0].timeout, absl::Seconds(7));
}

TEST_F(CriHookRunnerTest, NonZeroExitIsAbortedWithTheCodeAndTheOutput) {
  cri::v1::ExecSyncResponse r;
  r.set_exit_code(3);
  r.set_stdout("checkpointing\n");
  r.set_stderr("Error: database is locked\n");
  runtime_.answer = r;
  absl::Status st = runner_.Run(RunningPod(), hook_);
  EXPECT_EQ(st.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(st.message(),
            "hook [/bin/sh -c sync] in container app of pod shop/db failed with exit code 3: "
            "Error: database is locked\ncheckpointing");
}

TEST_F(CriHookRunnerTest, ALongOutputIsCutToItsLastKiB) {
  cri::v1::ExecSyncResponse r;
  r.set_exit_code(1);
  r.set_stdout(std::string(5000, 'o'));
  r.set_stderr(std::string(4000, 'e') + "the end");
  runtime_.answer = r;
  absl::Status st = runner_.Run(RunningPod(), hook_);
  EXPECT_EQ(st.code(), absl::StatusCode::kAborted);
  const std::string message(st.message());
  EXPECT_THAT(message, HasSubstr("exit code 1: eee"));
  EXPECT_EQ(message.substr(message.size() - 7), "the end");
  EXPECT_LE(message.size(), 1024 + 100);
  EXPECT_THAT(message, Not(HasSubstr("ooo")));  // stderr filled the KiB
}

TEST(OutputTailTest, TakesStderrThenStdoutAndNeverCutsACharacter) {
  EXPECT_EQ(OutputTail("", ""), "");
  EXPECT_EQ(OutputTail("out\n", ""), "out");
  EXPECT_EQ(OutputTail("out\n", "err\n"), "err\nout");
  EXPECT_EQ(OutputTail("0123456789", "abc", 8), "abc\n6789");
  // "é" is two bytes: a cut through it starts after it.
  EXPECT_EQ(OutputTail("", "éé", 3), "é");
  EXPECT_EQ(OutputTail("", "xéé", 4), "éé");
}

TEST_F(CriHookRunnerTest, ARuntimeTimeoutIsDeadlineExceededNamingHookPodAndTimeout) {
  runtime_.answer = absl::DeadlineExceededError("ExecSync: timeout 7s exceeded: context deadline exceeded");
  absl::Status st = runner_.Run(RunningPod(), hook_);
  EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(st.message(), HasSubstr("hook [/bin/sh -c sync] in container app of pod shop/db ran past its "
                                      "timeout of 7s"));
}

TEST_F(CriHookRunnerTest, AContainerTheRuntimeNoLongerKnowsIsNotRunning) {
  runtime_.answer = absl::NotFoundError("ExecSync: container \"c0ffee\" not found");
  absl::Status st = runner_.Run(RunningPod(), hook_);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("the container is not running (node n2's runtime: ExecSync: container"));
}

TEST_F(CriHookRunnerTest, OtherRuntimeErrorsKeepTheirCode) {
  runtime_.answer = absl::UnavailableError("ExecSync: connection refused");
  absl::Status st = runner_.Run(RunningPod(), hook_);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(st.message(), HasSubstr("of pod shop/db on node n2: ExecSync: connection refused"));
}

TEST_F(CriHookRunnerTest, NothingRunsInAPodThatIsNotRunning) {
  Pod pod = RunningPod();
  pod.status.phase = "Pending";
  absl::Status st = runner_.Run(pod, hook_);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("of pod shop/db: the pod is Pending, not Running"));
  pod.status.phase = "";
  EXPECT_THAT(runner_.Run(pod, hook_).message(), HasSubstr("the pod is Pending, not Running"));
  pod.status.phase = "Succeeded";
  EXPECT_THAT(runner_.Run(pod, hook_).message(), HasSubstr("the pod is Succeeded, not Running"));
  EXPECT_THAT(runtime_.calls, IsEmpty());
}

TEST_F(CriHookRunnerTest, NothingRunsInAContainerThatIsNotRunning) {
  hook_.container = "sidecar";
  absl::Status st = runner_.Run(RunningPod(), hook_);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("in container sidecar of pod shop/db: the container is not running (waiting: "
                                      "CrashLoopBackOff)"));
  // A container without a status (just added, or a name the pod lacks).
  hook_.container = "new";
  st = runner_.Run(RunningPod(), hook_);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("the container is not running (it has no status yet)"));
  // Running without an ID in its status.
  Pod pod = RunningPod();
  pod.status.container_statuses[0].unknown.erase("containerID");
  hook_.container = "app";
  st = runner_.Run(pod, hook_);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("no containerID"));
  EXPECT_THAT(runtime_.calls, IsEmpty());
}

TEST_F(CriHookRunnerTest, ANodeWithoutARuntimeSaysSo) {
  Pod pod = RunningPod();
  pod.spec.node_name = "n9";
  absl::Status st = runner_.Run(pod, hook_);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("of pod shop/db: node n9 has no container runtime"));
}

TEST(RuntimeContainerIdTest, StripsTheScheme) {
  EXPECT_EQ(RuntimeContainerId("containerd://abc"), "abc");
  EXPECT_EQ(RuntimeContainerId("cri-o://abc"), "abc");
  EXPECT_EQ(RuntimeContainerId("abc"), "abc");
  EXPECT_EQ(RuntimeContainerId(""), "");
}

TEST(CriHookRunnerForEndpointsTest, ANodeWithoutAnEndpointIsFailedPrecondition) {
  std::vector<std::string> asked;
  auto runner = CriHookRunner::ForEndpoints([&](const std::string& node) {
    asked.push_back(node);
    return std::string();
  });
  Hook hook{.container = "app", .command = {"sync"}};
  absl::Status st = runner->Run(RunningPod(), hook);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("node n2 has no container runtime"));
  EXPECT_THAT(asked, ElementsAre("n2"));
}

}  // namespace
}  // namespace berth::cli
