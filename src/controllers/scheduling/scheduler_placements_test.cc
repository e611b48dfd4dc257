// The scheduler's placements (its assume cache): bursts spread, capacity
// counts what the informers do not show yet, and nothing counts twice once
// the volume is provisioned; a placement goes when its claim is sent back.
#include "controllers/scheduling/scheduler_fixture.h"

namespace berth::controllers {
namespace {

using namespace scheduler_testing;  // NOLINT: this test's objects and fixture

TEST_F(SchedulerTest, BurstSpreadsOverEqualNodesWithSpaceWeighted) {
  ThreeNodes();
  Create(Class("local"));
  for (const char* n : {"node-a", "node-b", "node-c"}) Create(Capacity("local", n, "10Gi"));
  Pairs("burst", 30, "local", "100Mi");  // all pending when the scheduler starts
  Start();
  ASSERT_TRUE(Eventually([&] { return !SelectedCounts("burst", 30).contains(""); }));
  // Was: 30 on node-a, whose object still showed 10Gi free.
  EXPECT_EQ(SelectedCounts("burst", 30), (std::map<std::string, int>{{"node-a", 10}, {"node-b", 10}, {"node-c", 10}}));
}

TEST_F(SchedulerTest, BurstSpreadsWithVolumeAndCapacityWeighted) {
  ThreeNodes();
  Create(Class("volumes", "WaitForFirstConsumer", {{kNodeWeightingParameter, "VolumeWeighted"}}));
  Create(Class("bytes", "WaitForFirstConsumer", {{kNodeWeightingParameter, "CapacityWeighted"}}));
  Pairs("v", 9, "volumes", "1Gi");
  Pairs("b", 9, "bytes", "1Gi");
  Start();
  ASSERT_TRUE(Eventually([&] { return !SelectedCounts("v", 9).contains("") && !SelectedCounts("b", 9).contains(""); }));
  EXPECT_EQ(SelectedCounts("v", 9), (std::map<std::string, int>{{"node-a", 3}, {"node-b", 3}, {"node-c", 3}}));
  EXPECT_EQ(SelectedCounts("b", 9), (std::map<std::string, int>{{"node-a", 3}, {"node-b", 3}, {"node-c", 3}}));
}

TEST_F(SchedulerTest, CapacityFilterCountsPlacementsTheObjectsDoNotShowYet) {
  ThreeNodes();
  StorageCapacityTracked();
  Create(Class("local"));
  for (const char* n : {"node-a", "node-b", "node-c"}) Create(Capacity("local", n, "2Gi"));
  Pairs("c", 7, "local", "1Gi");
  Start();
  // Room for two on each node; the seventh does not over-commit one.
  ASSERT_TRUE(Eventually([&] { return SelectedCounts("c", 7)[""] == 1; }));
  ASSERT_TRUE(Settle(*store_));
  std::map<std::string, int> counts = SelectedCounts("c", 7);
  EXPECT_EQ(counts, (std::map<std::string, int>{{"", 1}, {"node-a", 2}, {"node-b", 2}, {"node-c", 2}}));
  std::string waiting;
  for (int i = 0; i < 7; ++i) {
    if (SelectedNode("c" + std::to_string(i)).empty()) waiting = "c" + std::to_string(i) + "-pod";
  }
  ASSERT_TRUE(Eventually([&] { return Condition(waiting).value("reason", "") == "Unschedulable"; }));
  EXPECT_EQ(Condition(waiting)["message"], "0/3 nodes are available: 3 node(s) did not have enough free storage.");
}

TEST_F(SchedulerTest, CapacityFilterCountsThePodsOwnEarlierClaims) {
  ThreeNodes();
  StorageCapacityTracked();
  Create(Class("local", "WaitForFirstConsumer", {{kNodeWeightingParameter, "VolumeWeighted"}}));
  Create(Class("other"));
  Create(Volume("vc1", "other", "1Gi", "node-c"));  // VolumeWeighted would rather use node-a or node-b
  Create(Capacity("local", "node-a", "1536Mi"));
  Create(Capacity("local", "node-b", "1536Mi"));
  Create(Capacity("local", "node-c", "3Gi"));
  Create(Claim("one", "local"));
  Create(Claim("two", "local"));
  Start();
  Create(Pod("db", {"one", "two"}));
  // Each claim fits node-a and node-b alone; both together only node-c.
  ASSERT_TRUE(Eventually([&] { return SelectedNode("one") == "node-c" && SelectedNode("two") == "node-c"; }));
}

TEST_F(SchedulerTest, ProvisionedVolumeIsNotCountedTwice) {
  ThreeNodes();
  Create(Class("local"));
  for (const char* n : {"node-a", "node-b", "node-c"}) Create(Capacity("local", n, "10Gi"));
  for (int i = 0; i < 4; ++i) Create(Claim("d" + std::to_string(i), "local"));
  Start();
  Create(Pod("d0-pod", {"d0"}));
  ASSERT_TRUE(Eventually([&] { return SelectedNode("d0") == "node-a"; }));  // a tie: the first name
  // Its volume exists; node-a's object does not show it yet: still counted.
  ProvisionFor("d0", "node-a");
  ASSERT_TRUE(Eventually([&] { return Get("persistentvolumeclaims", "d0")["status"]["phase"] == "Bound"; }));
  Create(Pod("d1-pod", {"d1"}));
  ASSERT_TRUE(Eventually([&] { return SelectedNode("d1") == "node-b"; }));
  Create(Pod("d2-pod", {"d2"}));
  ASSERT_TRUE(Eventually([&] { return SelectedNode("d2") == "node-c"; }));
  // The tracker writes node-a's object after the volume: 9Gi, the volume
  // counted once (node-b and node-c: 10Gi less 1Gi in flight). Counted twice,
  // node-a would have 8Gi and lose the tie.
  Patch("csistoragecapacities", "csisc-local-node-a", {{"capacity", "9Gi"}});
  ASSERT_TRUE(Settle(*store_));
  Create(Pod("d3-pod", {"d3"}));
  ASSERT_TRUE(Eventually([&] { return !SelectedNode("d3").empty(); }));
  EXPECT_EQ(SelectedNode("d3"), "node-a");
}

TEST_F(SchedulerTest, ProvisionedVolumeCountsOnceForVolumeWeighted) {
  ThreeNodes();
  Create(Class("local", "WaitForFirstConsumer", {{kNodeWeightingParameter, "VolumeWeighted"}}));
  for (int i = 0; i < 4; ++i) Create(Claim("d" + std::to_string(i), "local"));
  Start();
  Create(Pod("d0-pod", {"d0"}));
  ASSERT_TRUE(Eventually([&] { return SelectedNode("d0") == "node-a"; }));
  Create(Pod("d1-pod", {"d1"}));
  ASSERT_TRUE(Eventually([&] { return SelectedNode("d1") == "node-b"; }));
  // d0's volume is in the cache (its claim bound): the PV counts, not the
  // placement as well.
  ProvisionFor("d0", "node-a");
  ASSERT_TRUE(Eventually([&] { return Get("persistentvolumeclaims", "d0")["status"]["phase"] == "Bound"; }));
  Create(Pod("d2-pod", {"d2"}));
  ASSERT_TRUE(Eventually([&] { return SelectedNode("d2") == "node-c"; }));
  Create(Pod("d3-pod", {"d3"}));  // one each: the first name, had node-a counted two
  ASSERT_TRUE(Eventually([&] { return !SelectedNode("d3").empty(); }));
  EXPECT_EQ(SelectedNode("d3"), "node-a");
}

TEST_F(SchedulerTest, ProvisionedPlacementStopsCountingAfterTheCatchUpTime) {
  ThreeNodes();
  Create(Class("local"));
  for (const char* n : {"node-a", "node-b", "node-c"}) Create(Capacity("local", n, "10Gi"));
  for (int i = 0; i < 3; ++i) Create(Claim("d" + std::to_string(i), "local"));
  clock_ = &fake_clock_;
  Start();
  Create(Pod("d0-pod", {"d0"}));
  ASSERT_TRUE(Eventually([&] { return SelectedNode("d0") == "node-a"; }));
  ProvisionFor("d0", "node-a");
  ASSERT_TRUE(Eventually([&] { return Get("persistentvolumeclaims", "d0")["status"]["phase"] == "Bound"; }));
  Create(Pod("d1-pod", {"d1"}));  // sees the volume: the catch-up time starts
  ASSERT_TRUE(Eventually([&] { return SelectedNode("d1") == "node-b"; }));
  // No tracker ever rewrites node-a's object: after the catch-up time the
  // volume is taken as reflected (node-a 10Gi again, node-b 9Gi in flight).
  fake_clock_.Advance(Scheduler::Options{}.capacity_catch_up);
  Create(Pod("d2-pod", {"d2"}));
  ASSERT_TRUE(Eventually([&] { return !SelectedNode("d2").empty(); }));
  EXPECT_EQ(SelectedNode("d2"), "node-a");
}

TEST_F(SchedulerTest, PlacementCountsUntilTheProvisionerSendsTheClaimBack) {
  ThreeNodes();
  Create(Class("local"));
  for (const char* n : {"node-a", "node-b", "node-c"}) Create(Capacity("local", n, "10Gi"));
  for (int i = 0; i < 3; ++i) Create(Claim("d" + std::to_string(i), "local"));
  Start();
  Create(Pod("d0-pod", {"d0"}));
  ASSERT_TRUE(Eventually([&] { return SelectedNode("d0") == "node-a"; }));
  // The pod goes; its claim still names node-a, where the volume is being
  // made: it still counts there.
  ASSERT_TRUE(registry_->Delete(K("pods"), "default", "d0-pod", {}).ok());
  Create(Pod("d1-pod", {"d1"}));
  ASSERT_TRUE(Eventually([&] { return !SelectedNode("d1").empty(); }));
  EXPECT_EQ(SelectedNode("d1"), "node-b");
  // The provisioner gives up on node-a (as it does when CreateVolume fails):
  // forgotten, node-a is as empty as node-c again and wins the tie.
  Patch("persistentvolumeclaims", "d0", {{"metadata", {{"annotations", {{kAnnSelectedNode, nullptr}}}}}});
  ASSERT_TRUE(Settle(*store_));
  Create(Pod("d2-pod", {"d2"}));
  ASSERT_TRUE(Eventually([&] { return !SelectedNode("d2").empty(); }));
  EXPECT_EQ(SelectedNode("d2"), "node-a");
}

TEST_F(SchedulerTest, ClaimsSentBeforeARestartCountForSpaceWeighted) {
  ThreeNodes();
  Create(Class("local"));
  for (const char* n : {"node-a", "node-b", "node-c"}) Create(Capacity("local", n, "10Gi"));
  // A previous scheduler sent these to node-a and node-b; no volumes yet.
  for (const char* n : {"node-a", "node-b"}) {
    json early = Claim(std::string("early-") + n, "local");
    early["metadata"]["annotations"][kAnnSelectedNode] = n;
    Create(early);
  }
  Create(Claim("data", "local"));
  Start();
  Create(Pod("db", {"data"}));
  ASSERT_TRUE(Eventually([&] { return !SelectedNode("data").empty(); }));
  EXPECT_EQ(SelectedNode("data"), "node-c");
}

}  // namespace
}  // namespace berth::controllers
