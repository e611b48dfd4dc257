// The node lifecycle controller on a fake clock, objects in a real store:
// silence past the grace period makes a node Unknown and tainted and its
// pods not ready; recovery removes the taints; a node reporting NotReady
// gets the not-ready taints; master disruption evicts nothing; the monitor
// loop runs on the clock.
#include "controllers/nodelifecycle/node_lifecycle.h"

#include "client/object.h"
#include "client/writes.h"
#include "common/testing/eventually.h"
#include "controllers/taints.h"
#include "controllers/testing/controller_fixture.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "store/store.h"

namespace berth::controllers {
namespace {

using berth::testing::Eventually;
using client::Field;
using client::Informer;
using client::K;
using client::Str;
using nlohmann::json;

class NodeLifecycleTest : public controllers::testing::ControllerTest {
 protected:
  void SetUp() override {
    ControllerTest::SetUp();
    if (HasFatalFailure()) return;
    ASSERT_TRUE(registry_->Create(K("namespaces"), "", {{"metadata", {{"name", kNodeLeaseNamespace}}}}).ok());
    nodes_ = std::make_unique<Informer>(*registry_, K("nodes"));
    leases_ = std::make_unique<Informer>(*registry_, K("leases", "coordination.k8s.io"));
    pods_ = std::make_unique<Informer>(*registry_, K("pods"));
    controller_ = std::make_unique<NodeLifecycleController>(
        *registry_, NodeLifecycleInformers{*nodes_, *leases_, *pods_},
        NodeLifecycleController::Options{.grace_period = absl::Seconds(40), .clock = &clock_});
    controller_->RegisterHandlers();
    for (Informer* i : {nodes_.get(), leases_.get(), pods_.get()}) {
      i->Start();
      ASSERT_TRUE(i->WaitForSync(absl::Seconds(10)));
    }
  }
  void TearDown() override {
    controller_->Stop();
    for (Informer* i : {nodes_.get(), leases_.get(), pods_.get()}) i->Stop();
  }

  // A node as its agent posts it (Ready `ready`, heartbeat now) with its lease.
  void CreateNode(const std::string& name, const std::string& ready = "True", json labels = json::object()) {
    const std::string now = client::Rfc3339(clock_.Now());
    auto created = registry_->Create(K("nodes"), "", {{"metadata", {{"name", name}, {"labels", labels}}}});
    ASSERT_TRUE(created.ok()) << created.status();
    json node = *created;
    node["status"]["conditions"] = {{{"type", "Ready"},
                                     {"status", ready},
                                     {"reason", "KubeletReady"},
                                     {"message", "kubelet is posting ready status"},
                                     {"lastHeartbeatTime", now},
                                     {"lastTransitionTime", now}}};
    ASSERT_TRUE(registry_->Update(K("nodes"), "", name, node, apiserver::Subresource::kStatus).ok());
    RenewLease(name);
    AwaitNode(name);
  }
  // The agent posts Ready = `ready` now.
  void PostStatus(const std::string& name, const std::string& ready) {
    const std::string now = client::Rfc3339(clock_.Now());
    ASSERT_TRUE(client::EditStatus(*registry_, K("nodes"), Node(name), [&](json& status) {
                  for (auto& c : status["conditions"]) {
                    if (c["type"] != "Ready") continue;
                    if (c["status"] != ready) c["lastTransitionTime"] = now;
                    c["status"] = ready;
                    c["reason"] = ready == "True" ? "KubeletReady" : "KubeletNotReady";
                    c["lastHeartbeatTime"] = now;
                  }
                }).ok());
    AwaitNode(name);
  }
  void RenewLease(const std::string& name) {
    const std::string renew = absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", clock_.Now(), absl::UTCTimeZone());
    json lease = {{"metadata", {{"name", name}}},
                  {"spec", {{"holderIdentity", name}, {"leaseDurationSeconds", 40}, {"renewTime", renew}}}};
    const auto& kind = K("leases", "coordination.k8s.io");
    if (!registry_->Create(kind, kNodeLeaseNamespace, lease).ok()) {
      ASSERT_TRUE(registry_->Update(kind, kNodeLeaseNamespace, name, lease, apiserver::Subresource::kMain).ok());
    }
    ASSERT_TRUE(Eventually([&] {
      auto cached = leases_->Get(kNodeLeaseNamespace, name);
      return cached && Str(*cached, {"spec", "renewTime"}) == renew;
    }));
  }
  // Waits until the informer holds the stored node.
  void AwaitNode(const std::string& name) {
    const std::string rv = Str(Node(name), {"metadata", "resourceVersion"});
    ASSERT_TRUE(Eventually([&] {
      auto cached = nodes_->Get("", name);
      return cached && Str(*cached, {"metadata", "resourceVersion"}) == rv;
    }));
  }
  void CreatePod(const std::string& name, const std::string& node) {
    auto created =
        registry_->Create(K("pods"), "default",
                          {{"metadata", {{"name", name}}},
                           {"spec", {{"nodeName", node}, {"containers", {{{"name", "c"}, {"image", "busybox"}}}}}}});
    ASSERT_TRUE(created.ok()) << created.status();
    json pod = *created;
    pod["status"] = {
        {"phase", "Running"},
        {"conditions", {{{"type", "Ready"}, {"status", "True"}, {"lastTransitionTime", "2026-01-01T00:00:00Z"}}}}};
    auto updated = registry_->Update(K("pods"), "default", name, pod, apiserver::Subresource::kStatus);
    ASSERT_TRUE(updated.ok()) << updated.status();
    const std::string rv = Str(*updated, {"metadata", "resourceVersion"});
    ASSERT_TRUE(Eventually([&] {
      auto cached = pods_->Get("default", name);
      return cached && Str(*cached, {"metadata", "resourceVersion"}) == rv;
    }));
  }
  // One monitor pass, then the informer catches up with what it wrote.
  void Pass() {
    ASSERT_TRUE(controller_->MonitorNodeHealth().ok());
    for (const auto& n : nodes_->List()) AwaitNode(client::Name(n));
  }
  // Time passes in monitor periods; `alive` nodes renew their leases.
  void Run(absl::Duration d, const std::vector<std::string>& alive) {
    for (absl::Duration t = absl::ZeroDuration(); t < d; t += absl::Seconds(5)) {
      clock_.Advance(absl::Seconds(5));
      for (const auto& n : alive) RenewLease(n);
      Pass();
    }
  }
  json Node(const std::string& name) {
    auto n = registry_->Get(K("nodes"), "", name);
    return n.ok() ? *n : json();
  }
  json Ready(const std::string& node) { return NodeReadyCondition(Node(node)); }
  std::string PodReady(const std::string& pod) {
    auto p = registry_->Get(K("pods"), "default", pod);
    if (!p.ok()) return "";
    for (const auto& c : Field(Field(*p, "status"), "conditions")) {
      if (Str(c, {"type"}) == "Ready") return Str(c, {"status"});
    }
    return "";
  }
  bool Tainted(const std::string& node, const std::string& key, const std::string& effect) {
    return HasTaint(Node(node), key, effect);
  }
  bool HasEvent(const std::string& name, const std::string& reason) {
    auto events = registry_->List(K("events"), "default", {});
    if (!events.ok()) return false;
    for (const auto& e : events->items) {
      if (Str(e, {"reason"}) == reason && Str(e, {"involvedObject", "name"}) == name) return true;
    }
    return false;
  }

  // Starts at the real time: nodes' creationTimestamps come from the store.
  FakeClock clock_{absl::FromUnixSeconds(absl::ToUnixSeconds(absl::Now()))};
  std::unique_ptr<Informer> nodes_, leases_, pods_;
  std::unique_ptr<NodeLifecycleController> controller_;
};

TEST_F(NodeLifecycleTest, ASilentNodeBecomesUnknownAfterTheGracePeriodThenRecovers) {
  CreateNode("n1");
  CreateNode("n2");
  CreatePod("p1", "n1");
  CreatePod("p2", "n2");
  Pass();
  EXPECT_TRUE(Eventually([&] { return HasEvent("n1", "RegisteredNode"); }));
  // n1's lease stops; n2 keeps renewing. Within the grace period nothing
  // happens.
  Run(absl::Seconds(40), {"n2"});
  EXPECT_EQ(Str(Ready("n1"), {"status"}), "True");
  EXPECT_FALSE(Tainted("n1", kTaintNodeUnreachable, kNoExecute));
  // Past it: Unknown, as upstream says it, tainted NoExecute, pods not ready.
  Run(absl::Seconds(5), {"n2"});
  const json ready = Ready("n1");
  EXPECT_EQ(Str(ready, {"status"}), "Unknown");
  EXPECT_EQ(Str(ready, {"reason"}), "NodeStatusUnknown");
  EXPECT_EQ(Str(ready, {"message"}), "Kubelet stopped posting node status.");
  EXPECT_EQ(Str(ready, {"lastTransitionTime"}), client::Rfc3339(clock_.Now()));
  const std::vector<Taint> no_execute = NodeTaints(Node("n1"), kNoExecute);
  ASSERT_EQ(no_execute.size(), 1u);
  EXPECT_EQ(no_execute[0].key, kTaintNodeUnreachable);
  EXPECT_EQ(no_execute[0].time_added, client::Rfc3339(clock_.Now()));
  EXPECT_EQ(PodReady("p1"), "False");
  EXPECT_EQ(PodReady("p2"), "True");
  EXPECT_EQ(Str(Ready("n2"), {"status"}), "True");
  EXPECT_FALSE(Tainted("n2", kTaintNodeUnreachable, kNoExecute));
  EXPECT_TRUE(Eventually([&] { return HasEvent("n1", "NodeNotReady") && HasEvent("p1", "NodeNotReady"); }));
  // The NoSchedule taint follows the condition (on the node's update).
  ASSERT_TRUE(controller_->SyncNoScheduleTaints("n1").ok());
  EXPECT_TRUE(Tainted("n1", kTaintNodeUnreachable, kNoSchedule));
  ASSERT_TRUE(controller_->SyncNoScheduleTaints("n2").ok());
  EXPECT_TRUE(NodeTaints(Node("n2")).empty());

  // The agent is back: lease renewed, status posted. One pass later the
  // taints are gone.
  RenewLease("n1");
  PostStatus("n1", "True");
  Run(absl::Seconds(5), {"n1", "n2"});
  EXPECT_FALSE(Tainted("n1", kTaintNodeUnreachable, kNoExecute));
  ASSERT_TRUE(controller_->SyncNoScheduleTaints("n1").ok());
  EXPECT_TRUE(NodeTaints(Node("n1")).empty()) << Node("n1").dump();
}

TEST_F(NodeLifecycleTest, ANodeThatRenewsItsLeaseButPostsNoStatusStaysReady) {
  CreateNode("n1");
  CreateNode("n2");
  Pass();
  // Status is posted once a minute at most; the lease carries the heartbeat.
  Run(absl::Minutes(3), {"n1", "n2"});
  EXPECT_EQ(Str(Ready("n1"), {"status"}), "True");
  EXPECT_TRUE(NodeTaints(Node("n1")).empty());
}

TEST_F(NodeLifecycleTest, ANotReadyNodeGetsNotReadyTaintsSwappedForUnreachableWhenItFallsSilent) {
  CreateNode("n1");
  CreateNode("n2");
  CreatePod("p1", "n1");
  Pass();
  PostStatus("n1", "False");
  Run(absl::Seconds(5), {"n1", "n2"});
  EXPECT_TRUE(Tainted("n1", kTaintNodeNotReady, kNoExecute));
  EXPECT_EQ(PodReady("p1"), "False");  // the agent's own NotReady counts too
  ASSERT_TRUE(controller_->SyncNoScheduleTaints("n1").ok());
  EXPECT_TRUE(Tainted("n1", kTaintNodeNotReady, kNoSchedule));
  // Silent as well: unreachable replaces not-ready, in one pass.
  Run(absl::Seconds(45), {"n2"});
  EXPECT_EQ(Str(Ready("n1"), {"status"}), "Unknown");
  EXPECT_TRUE(Tainted("n1", kTaintNodeUnreachable, kNoExecute));
  EXPECT_FALSE(Tainted("n1", kTaintNodeNotReady, kNoExecute));
  ASSERT_TRUE(controller_->SyncNoScheduleTaints("n1").ok());
  EXPECT_TRUE(Tainted("n1", kTaintNodeUnreachable, kNoSchedule));
  EXPECT_FALSE(Tainted("n1", kTaintNodeNotReady, kNoSchedule));
}

TEST_F(NodeLifecycleTest, WhenNoNodeIsReadyNothingIsTaintedForEviction) {
  CreateNode("n1");
  CreateNode("n2");
  Pass();
  Run(absl::Seconds(45), {});
  // Both Unknown (they are), but the fault is assumed to be the control
  // plane's: no NoExecute taints, nothing evicted.
  EXPECT_EQ(Str(Ready("n1"), {"status"}), "Unknown");
  EXPECT_EQ(Str(Ready("n2"), {"status"}), "Unknown");
  EXPECT_FALSE(Tainted("n1", kTaintNodeUnreachable, kNoExecute));
  EXPECT_FALSE(Tainted("n2", kTaintNodeUnreachable, kNoExecute));
  // n2 comes back: n1, still silent, gets its taint.
  RenewLease("n2");
  PostStatus("n2", "True");
  Run(absl::Seconds(5), {"n2"});
  EXPECT_TRUE(Tainted("n1", kTaintNodeUnreachable, kNoExecute));
  EXPECT_FALSE(Tainted("n2", kTaintNodeUnreachable, kNoExecute));
}

TEST_F(NodeLifecycleTest, ANodeThatNeverPostedStatusGetsTheStartupGracePeriod) {
  auto created = registry_->Create(K("nodes"), "", {{"metadata", {{"name", "quiet"}}}});
  ASSERT_TRUE(created.ok());
  AwaitNode("quiet");
  CreateNode("n2");
  Pass();
  Run(absl::Seconds(50), {"n2"});
  EXPECT_TRUE(Ready("quiet").is_null());
  Run(absl::Seconds(15), {"n2"});
  const json ready = Ready("quiet");
  EXPECT_EQ(Str(ready, {"status"}), "Unknown");
  EXPECT_EQ(Str(ready, {"reason"}), "NodeStatusNeverUpdated");
  EXPECT_EQ(Str(ready, {"message"}), "Kubelet never posted node status.");
  EXPECT_EQ(Str(ready, {"lastHeartbeatTime"}), Str(*created, {"metadata", "creationTimestamp"}));
  EXPECT_EQ(Field(Field(Node("quiet"), "status"), "conditions").size(), 1u);  // only Ready is added
}

TEST_F(NodeLifecycleTest, APodBoundToAnUnhealthyNodeLaterIsMarkedNotReady) {
  CreateNode("n1");
  CreateNode("n2");
  Pass();
  Run(absl::Seconds(45), {"n2"});
  ASSERT_EQ(Str(Ready("n1"), {"status"}), "Unknown");
  CreatePod("late", "n1");
  ASSERT_TRUE(controller_->SyncPod("default/late").ok());
  EXPECT_EQ(PodReady("late"), "False");
  CreatePod("fine", "n2");
  ASSERT_TRUE(controller_->SyncPod("default/fine").ok());
  EXPECT_EQ(PodReady("fine"), "True");
}

TEST_F(NodeLifecycleTest, TheMonitorLoopAndTaintWorkerRunOnTheirOwn) {
  CreateNode("n1");
  CreateNode("n2");
  controller_->Start();
  ASSERT_TRUE(clock_.BlockUntilTimers(1));  // the first pass is done, the loop waits
  for (int i = 0; i < 9; ++i) {
    clock_.Advance(absl::Seconds(5));
    RenewLease("n2");
    ASSERT_TRUE(clock_.BlockUntilTimers(1));
  }
  EXPECT_TRUE(Eventually([&] {
    return Str(Ready("n1"), {"status"}) == "Unknown" && Tainted("n1", kTaintNodeUnreachable, kNoSchedule) &&
           Tainted("n1", kTaintNodeUnreachable, kNoExecute);
  })) << Node("n1").dump();
  EXPECT_EQ(Str(Ready("n2"), {"status"}), "True");
  // Cordoning a node taints it unschedulable; uncordoning removes it.
  ASSERT_TRUE(client::MutateObject(*registry_, K("nodes"), Node("n2"), apiserver::Subresource::kMain, [](json& n) {
                n["spec"]["unschedulable"] = true;
                return true;
              }).ok());
  EXPECT_TRUE(Eventually([&] { return Tainted("n2", kTaintNodeUnschedulable, kNoSchedule); }));
  ASSERT_TRUE(client::MutateObject(*registry_, K("nodes"), Node("n2"), apiserver::Subresource::kMain, [](json& n) {
                n["spec"].erase("unschedulable");
                return true;
              }).ok());
  EXPECT_TRUE(Eventually([&] { return NodeTaints(Node("n2")).empty(); }));
}

}  // namespace
}  // namespace berth::controllers
