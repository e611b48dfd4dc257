#include "node/pods/pod_status.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace berth::node::pods {
namespace {

using nlohmann::json;

json Pod(const std::string& policy = "Always") {
  return {{"metadata", {{"name", "p"}, {"namespace", "default"}, {"uid", "u1"}}},
          {"spec",
           {{"restartPolicy", policy},
            {"containers", json::array({{{"name", "c0"}, {"image", "berth.local/toolbox:1"}}})}}}};
}

const absl::Time kNow = absl::FromUnixSeconds(1767225600);  // 2026-01-01

json Status(const json& pod, const RuntimePod& rp, std::map<std::string, Waiting> waiting = {}, bool terminal = false) {
  StatusInputs in{.pod = &pod,
                  .runtime = &rp,
                  .waiting = std::move(waiting),
                  .terminal = terminal,
                  .host_ip = "192.168.1.5",
                  .now = kNow};
  return GeneratePodStatus(in);
}

json Condition(const json& status, const std::string& type) {
  for (const auto& c : status["conditions"]) {
    if (c["type"] == type) return c;
  }
  return json();
}

SandboxState Ready() { return {.id = "sb", .attempt = 0, .ready = true, .ips = {"10.88.0.7"}}; }

ContainerState Running() {
  return {.id = "abc",
          .name = "c0",
          .state = cri::v1::CONTAINER_RUNNING,
          .started_at = kNow - absl::Seconds(5),
          .image = "berth.local/toolbox:1",
          .image_ref = "sha256:1234"};
}
ContainerState Exited(int code, int restarts = 0, const std::string& id = "abc") {
  return {.id = id,
          .name = "c0",
          .state = cri::v1::CONTAINER_EXITED,
          .started_at = kNow - absl::Seconds(5),
          .finished_at = kNow - absl::Seconds(1),
          .exit_code = code,
          .reason = code == 0 ? "Completed" : "Error",
          .image = "berth.local/toolbox:1",
          .image_ref = "sha256:1234",
          .restart_count = restarts};
}

TEST(PodStatusTest, BeforeAnythingRunsThePodIsPendingAndItsContainerIsBeingCreated) {
  const json s = Status(Pod(), {});
  EXPECT_EQ(s["phase"], "Pending");
  EXPECT_EQ(s["containerStatuses"][0]["state"]["waiting"]["reason"], "ContainerCreating");
  EXPECT_EQ(Condition(s, "ContainersReady")["status"], "False");
  EXPECT_EQ(Condition(s, "ContainersReady")["reason"], "ContainersNotReady");
  EXPECT_EQ(Condition(s, "ContainersReady")["message"], "containers with unready status: [c0]");
  EXPECT_EQ(Condition(s, "PodReadyToStartContainers")["status"], "False");
  EXPECT_EQ(Condition(s, "PodScheduled")["status"], "True");
  EXPECT_EQ(s["qosClass"], "BestEffort");
  EXPECT_EQ(s["hostIP"], "192.168.1.5");
  EXPECT_EQ(s["startTime"], "2026-01-01T00:00:00Z");
  EXPECT_FALSE(s.contains("podIP"));
}

TEST(PodStatusTest, ARunningContainerMakesThePodRunningAndReady) {
  const json s = Status(Pod(), {.sandboxes = {Ready()}, .containers = {Running()}});
  EXPECT_EQ(s["phase"], "Running");
  EXPECT_EQ(s["podIP"], "10.88.0.7");
  EXPECT_EQ(s["podIPs"], json::array({{{"ip", "10.88.0.7"}}}));
  const json& c = s["containerStatuses"][0];
  EXPECT_EQ(c["containerID"], "containerd://abc");
  EXPECT_EQ(c["imageID"], "sha256:1234");
  EXPECT_EQ(c["ready"], true);
  EXPECT_EQ(c["started"], true);
  EXPECT_EQ(c["state"]["running"]["startedAt"], "2025-12-31T23:59:55Z");
  for (const char* t : {"PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready"}) {
    EXPECT_EQ(Condition(s, t)["status"], "True") << t;
  }
}

TEST(PodStatusTest, ExitThreeWithRestartPolicyNeverFailsThePod) {
  const json s = Status(Pod("Never"), {.sandboxes = {Ready()}, .containers = {Exited(3)}});
  EXPECT_EQ(s["phase"], "Failed");
  const json& t = s["containerStatuses"][0]["state"]["terminated"];
  EXPECT_EQ(t["exitCode"], 3);
  EXPECT_EQ(t["reason"], "Error");
  EXPECT_EQ(t["containerID"], "containerd://abc");
  EXPECT_EQ(t["finishedAt"], "2025-12-31T23:59:59Z");
  EXPECT_EQ(Condition(s, "Ready")["reason"], "PodFailed");
  // Exit 0 with OnFailure: Succeeded.
  EXPECT_EQ(Status(Pod("OnFailure"), {.sandboxes = {Ready()}, .containers = {Exited(0)}})["phase"], "Succeeded");
}

TEST(PodStatusTest, ACrashLoopingContainerWaitsWithItsLastTermination) {
  RuntimePod rp{.sandboxes = {Ready()}, .containers = {Exited(1, 2, "third"), Exited(1, 1, "second")}};
  const json s =
      Status(Pod("OnFailure"), rp,
             {{"c0", {"CrashLoopBackOff", "back-off 20s restarting failed container=c0 pod=p_default(u1)"}}});
  EXPECT_EQ(s["phase"], "Running");
  const json& c = s["containerStatuses"][0];
  EXPECT_EQ(c["restartCount"], 2);
  EXPECT_EQ(c["state"]["waiting"]["reason"], "CrashLoopBackOff");
  EXPECT_EQ(c["lastState"]["terminated"]["exitCode"], 1);
  EXPECT_EQ(c["lastState"]["terminated"]["containerID"], "containerd://third");
  EXPECT_EQ(c["ready"], false);
}

TEST(PodStatusTest, InitContainersKeepThePodInitializing) {
  json pod = Pod();
  pod["spec"]["initContainers"] = json::array({{{"name", "i0"}, {"image", "berth.local/toolbox:1"}}});
  ContainerState init{.id = "i", .name = "i0", .state = cri::v1::CONTAINER_RUNNING};
  json s = Status(pod, {.sandboxes = {Ready()}, .containers = {init}});
  EXPECT_EQ(s["phase"], "Pending");
  EXPECT_EQ(s["containerStatuses"][0]["state"]["waiting"]["reason"], "PodInitializing");
  EXPECT_EQ(Condition(s, "Initialized")["status"], "False");
  EXPECT_EQ(Condition(s, "Initialized")["message"], "containers with incomplete status: [i0]");
  init.state = cri::v1::CONTAINER_EXITED;
  init.exit_code = 0;
  s = Status(pod, {.sandboxes = {Ready()}, .containers = {Running(), init}});
  EXPECT_EQ(s["phase"], "Running");
  EXPECT_EQ(s["initContainerStatuses"][0]["ready"], true);
  EXPECT_EQ(Condition(s, "Initialized")["status"], "True");
}

TEST(PodStatusTest, ADeletedPodEndsInATerminalPhase) {
  json pod = Pod("Always");
  pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z";
  RuntimePod killed{.sandboxes = {{.id = "sb", .ready = false}}, .containers = {Exited(143)}};
  json s = Status(pod, killed, {}, /*terminal=*/true);
  EXPECT_EQ(s["phase"], "Failed");
  killed.containers = {Exited(0)};
  EXPECT_EQ(Status(pod, killed, {}, true)["phase"], "Succeeded");
  // Without terminal, an Always pod whose containers stopped is restarting.
  EXPECT_EQ(Status(pod, killed, {}, false)["phase"], "Running");
}

TEST(PodStatusTest, TerminalPhasesAreFinalAndTransitionTimesStay) {
  json pod = Pod("Always");
  pod["status"] = Status(pod, {.sandboxes = {Ready()}, .containers = {Running()}});
  const std::string ready_since = Condition(pod["status"], "Ready")["lastTransitionTime"];
  StatusInputs later{.pod = &pod, .now = kNow + absl::Hours(1)};
  RuntimePod same{.sandboxes = {Ready()}, .containers = {Running()}};
  later.runtime = &same;
  EXPECT_EQ(Condition(GeneratePodStatus(later), "Ready")["lastTransitionTime"], ready_since);
  pod["status"]["phase"] = "Failed";
  EXPECT_EQ(GeneratePodStatus(later)["phase"], "Failed");
}

TEST(PodStatusTest, QosClasses) {
  json pod = Pod();
  EXPECT_EQ(QosClass(pod), "BestEffort");
  pod["spec"]["containers"][0]["resources"] = {{"limits", {{"cpu", "500m"}, {"memory", "64Mi"}}}};
  EXPECT_EQ(QosClass(pod), "Guaranteed");
  pod["spec"]["containers"][0]["resources"]["requests"] = {{"cpu", "100m"}};
  EXPECT_EQ(QosClass(pod), "Burstable");
}

}  // namespace
}  // namespace berth::node::pods
