#include "node/pods/pod_actions.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace berth::node::pods {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

json Pod(const std::string& policy, int containers = 1, int inits = 0) {
  json pod = {{"metadata", {{"name", "p"}, {"namespace", "default"}, {"uid", "u1"}}},
              {"spec", {{"restartPolicy", policy}, {"containers", json::array()}}}};
  for (int i = 0; i < containers; ++i)
    pod["spec"]["containers"].push_back({{"name", "c" + std::to_string(i)}, {"image", "x:1"}});
  for (int i = 0; i < inits; ++i)
    pod["spec"]["initContainers"].push_back({{"name", "i" + std::to_string(i)}, {"image", "x:1"}});
  return pod;
}

SandboxState Ready(uint32_t attempt = 0) {
  return {.id = "sb" + std::to_string(attempt), .attempt = attempt, .ready = true, .ips = {"10.0.0.2"}};
}

ContainerState Exited(const std::string& name, int code, int restarts = 0) {
  return {.id = name + "-" + std::to_string(restarts),
          .name = name,
          .state = cri::v1::CONTAINER_EXITED,
          .exit_code = code,
          .restart_count = restarts};
}
ContainerState Running(const std::string& name, const json& pod) {
  ContainerState c{.id = name + "-run", .name = name, .state = cri::v1::CONTAINER_RUNNING};
  for (const auto& spec : pod["spec"]["containers"]) {
    if (spec["name"] == name) c.hash = ContainerHash(spec);
  }
  return c;
}

TEST(PodActionsTest, NewPodGetsASandboxAndAllContainers) {
  const json pod = Pod("Always", 2);
  PodActions a = ComputePodActions(pod, {});
  EXPECT_TRUE(a.create_sandbox);
  EXPECT_EQ(a.attempt, 0u);
  EXPECT_THAT(a.start, ElementsAre(0, 1));
  EXPECT_EQ(a.next_init, -1);
}

TEST(PodActionsTest, InitContainersRunFirstOneAtATime) {
  const json pod = Pod("Always", 1, 2);
  EXPECT_EQ(ComputePodActions(pod, {}).next_init, 0);
  RuntimePod rp{.sandboxes = {Ready()}};
  rp.containers = {Exited("i0", 0)};
  PodActions a = ComputePodActions(pod, rp);
  EXPECT_EQ(a.next_init, 1);
  EXPECT_THAT(a.start, IsEmpty());
  rp.containers = {Exited("i1", 0), Exited("i0", 0)};
  a = ComputePodActions(pod, rp);
  EXPECT_EQ(a.next_init, -1);
  EXPECT_THAT(a.start, ElementsAre(0));
}

TEST(PodActionsTest, FailedInitContainerKillsANeverPodAndRetriesOthers) {
  RuntimePod rp{.sandboxes = {Ready()}, .containers = {Exited("i0", 1)}};
  EXPECT_TRUE(ComputePodActions(Pod("Never", 1, 1), rp).kill_pod);
  PodActions a = ComputePodActions(Pod("OnFailure", 1, 1), rp);
  EXPECT_FALSE(a.kill_pod);
  EXPECT_EQ(a.next_init, 0);
}

TEST(PodActionsTest, RestartPolicies) {
  RuntimePod failed{.sandboxes = {Ready()}, .containers = {Exited("c0", 3)}};
  RuntimePod succeeded{.sandboxes = {Ready()}, .containers = {Exited("c0", 0)}};
  EXPECT_THAT(ComputePodActions(Pod("Always"), failed).start, ElementsAre(0));
  EXPECT_THAT(ComputePodActions(Pod("Always"), succeeded).start, ElementsAre(0));
  EXPECT_THAT(ComputePodActions(Pod("OnFailure"), failed).start, ElementsAre(0));
  // Nothing to run any more: the sandbox is stopped.
  PodActions done = ComputePodActions(Pod("OnFailure"), succeeded);
  EXPECT_THAT(done.start, IsEmpty());
  EXPECT_TRUE(done.kill_pod);
  EXPECT_FALSE(done.create_sandbox);
  EXPECT_THAT(ComputePodActions(Pod("Never"), failed).start, IsEmpty());
  EXPECT_TRUE(ComputePodActions(Pod("Never"), failed).kill_pod);
}

TEST(PodActionsTest, RunningContainersAreKeptUnlessTheirSpecChanged) {
  json pod = Pod("Always");
  RuntimePod rp{.sandboxes = {Ready()}, .containers = {Running("c0", pod)}};
  PodActions a = ComputePodActions(pod, rp);
  EXPECT_FALSE(a.kill_pod);
  EXPECT_THAT(a.start, IsEmpty());
  EXPECT_THAT(a.kill, IsEmpty());
  pod["spec"]["containers"][0]["image"] = "x:2";
  a = ComputePodActions(pod, rp);
  EXPECT_THAT(a.start, ElementsAre(0));
  ASSERT_EQ(a.kill.size(), 1u);
  EXPECT_EQ(a.kill[0].first, "c0-run");
}

TEST(PodActionsTest, ADeadSandboxIsReplacedWithTheNextAttempt) {
  const json pod = Pod("Always");
  RuntimePod rp{.sandboxes = {{.id = "sb0", .attempt = 0, .ready = false}}, .containers = {Exited("c0", 137)}};
  PodActions a = ComputePodActions(pod, rp);
  EXPECT_TRUE(a.create_sandbox);
  EXPECT_TRUE(a.kill_pod);
  EXPECT_EQ(a.attempt, 1u);
  EXPECT_EQ(a.sandbox_id, "sb0");
  // A Never pod that ran gets no new sandbox.
  EXPECT_FALSE(ComputePodActions(Pod("Never"), rp).create_sandbox);
  // Two ready sandboxes (a lost answer): start over with one.
  RuntimePod two{.sandboxes = {Ready(1), Ready(0)}};
  EXPECT_TRUE(ComputePodActions(pod, two).create_sandbox);
  EXPECT_EQ(ComputePodActions(pod, two).attempt, 2u);
}

TEST(PodActionsTest, DeletedPodsNeverRestart) {
  json pod = Pod("Always");
  pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z";
  RuntimePod rp{.sandboxes = {Ready()}, .containers = {Exited("c0", 1)}};
  EXPECT_FALSE(ShouldContainerBeRestarted(pod["spec"]["containers"][0], pod, rp));
}

}  // namespace
}  // namespace berth::node::pods
