// Scheduling flows against a real registry and informers, with the PV
// binder completing bindings (and, for the provisioning-failure flow, the
// provisioner against a fake CSI driver over a real unix socket).
#include "controllers/scheduling/scheduler_fixture.h"

namespace berth::controllers {
namespace {

using namespace scheduler_testing;  // NOLINT: this test's objects and fixture

// ---- Pure parts ----

TEST(ChooseNodeTest, SpaceWeightedPrefersMostFreeSpaceAndUnknownLast) {
  std::vector<NodeCandidate> c = {
      {.name = "a", .free_bytes = 5}, {.name = "b", .free_bytes = 20}, {.name = "c", .free_bytes = 10}, {.name = "d"}};
  EXPECT_EQ(ChooseNode(c, NodeWeighting::kSpaceWeighted), "b");
  EXPECT_EQ(ChooseNode({{.name = "x"}, {.name = "y", .free_bytes = 0}}, NodeWeighting::kSpaceWeighted), "y");
}

TEST(ChooseNodeTest, CapacityWeightedPrefersLeastAllocatedAndVolumeWeightedFewestVolumes) {
  std::vector<NodeCandidate> c = {{.name = "a", .allocated_bytes = 10, .volumes = 1},
                                  {.name = "b", .allocated_bytes = 3, .volumes = 3},
                                  {.name = "c", .allocated_bytes = 10, .volumes = 2}};
  EXPECT_EQ(ChooseNode(c, NodeWeighting::kCapacityWeighted), "b");
  EXPECT_EQ(ChooseNode(c, NodeWeighting::kVolumeWeighted), "a");
}

TEST(ChooseNodeTest, TiesGoToTheSmallestNameOrToTheSeededRandomChoice) {
  std::vector<NodeCandidate> c = {
      {.name = "c", .volumes = 1}, {.name = "b", .volumes = 1}, {.name = "a", .volumes = 2}};
  EXPECT_EQ(ChooseNode(c, NodeWeighting::kVolumeWeighted), "b");
  EXPECT_EQ(ChooseNode({}, NodeWeighting::kVolumeWeighted), "");
  std::set<std::string> picked;
  for (uint64_t seed = 0; seed < 64; ++seed) {
    std::mt19937_64 rng(seed), again(seed);
    const std::string first = ChooseNode(c, NodeWeighting::kVolumeWeighted, &rng);
    EXPECT_EQ(first, ChooseNode(c, NodeWeighting::kVolumeWeighted, &again));  // same seed, same pick
    picked.insert(first);
  }
  EXPECT_EQ(picked, (std::set<std::string>{"b", "c"}));  // only the tied ones, both of them
}

TEST(ChooseNodeTest, ParsesTheWeightingParameter) {
  EXPECT_EQ(*ParseNodeWeighting(""), NodeWeighting::kSpaceWeighted);
  EXPECT_EQ(*ParseNodeWeighting("SpaceWeighted"), NodeWeighting::kSpaceWeighted);
  EXPECT_EQ(*ParseNodeWeighting("CapacityWeighted"), NodeWeighting::kCapacityWeighted);
  EXPECT_EQ(*ParseNodeWeighting("VolumeWeighted"), NodeWeighting::kVolumeWeighted);
  EXPECT_EQ(ParseNodeWeighting("Heaviest").status().code(), absl::StatusCode::kInvalidArgument);
}

json Term(json exprs, json fields = nullptr) {
  json term = json::object();
  if (!exprs.is_null()) term["matchExpressions"] = exprs;
  if (!fields.is_null()) term["matchFields"] = fields;
  return term;
}
json Req(const std::string& key, const std::string& op, std::vector<std::string> values = {}) {
  json r = {{"key", key}, {"operator", op}};
  if (!values.empty()) r["values"] = values;
  return r;
}
json Selector(std::vector<json> terms) { return {{"nodeSelectorTerms", terms}}; }
bool MatchesNodeSelector(const json& node_selector, const json& node) {
  return NodeSelectorMatchesLabels(node_selector, NodeLabels(node), Name(node));
}

TEST(NodeAffinityTest, OperatorsFieldsAndTerms) {
  const json node = Node("n1", {{"zone", "z1"}, {"cores", "8"}});
  EXPECT_TRUE(MatchesNodeSelector(Selector({Term({Req("zone", "In", {"z1", "z2"})})}), node));
  EXPECT_FALSE(MatchesNodeSelector(Selector({Term({Req("zone", "NotIn", {"z1"})})}), node));
  EXPECT_TRUE(MatchesNodeSelector(Selector({Term({Req("rack", "NotIn", {"r1"})})}), node));  // absent label
  EXPECT_TRUE(MatchesNodeSelector(Selector({Term({Req("zone", "Exists")})}), node));
  EXPECT_FALSE(MatchesNodeSelector(Selector({Term({Req("zone", "DoesNotExist")})}), node));
  EXPECT_TRUE(MatchesNodeSelector(Selector({Term({Req("cores", "Gt", {"4"})})}), node));
  EXPECT_FALSE(MatchesNodeSelector(Selector({Term({Req("cores", "Lt", {"4"})})}), node));
  EXPECT_FALSE(MatchesNodeSelector(Selector({Term({Req("cores", "Gt", {"four"})})}), node));  // invalid
  EXPECT_FALSE(MatchesNodeSelector(Selector({Term({Req("zone", "Gt", {"1"})})}), node));      // not a number
  EXPECT_FALSE(MatchesNodeSelector(Selector({Term({Req("zone", "In")})}), node));             // In needs values
  // Expressions in a term are ANDed, terms ORed.
  EXPECT_FALSE(MatchesNodeSelector(Selector({Term({Req("zone", "In", {"z1"}), Req("cores", "In", {"4"})})}), node));
  EXPECT_TRUE(
      MatchesNodeSelector(Selector({Term({Req("zone", "In", {"z9"})}), Term({Req("cores", "In", {"8"})})}), node));
  // matchFields on metadata.name.
  EXPECT_TRUE(MatchesNodeSelector(Selector({Term(nullptr, {Req("metadata.name", "In", {"n1"})})}), node));
  EXPECT_FALSE(MatchesNodeSelector(Selector({Term(nullptr, {Req("metadata.name", "NotIn", {"n1"})})}), node));
  EXPECT_FALSE(MatchesNodeSelector(Selector({Term(nullptr, {Req("metadata.labels", "In", {"n1"})})}), node));
  // Empty terms select nothing.
  EXPECT_FALSE(MatchesNodeSelector(Selector({}), node));
  EXPECT_FALSE(MatchesNodeSelector(Selector({json::object()}), node));
  // kubernetes.io/hostname defaults to the node's name.
  json bare = {{"metadata", {{"name", "n2"}}}};
  EXPECT_TRUE(MatchesNodeSelector(OnNode("n2")["required"], bare));
}

TEST(NodeAffinityTest, PodNodeSelectorAndRequiredAffinityBothApply) {
  const json node = Node("n1", {{"disk", "ssd"}, {"zone", "z1"}});
  EXPECT_TRUE(PodFitsNodeAffinity(Pod("p"), node));
  EXPECT_TRUE(PodFitsNodeAffinity(Pod("p", {}, {{"disk", "ssd"}}), node));
  EXPECT_FALSE(PodFitsNodeAffinity(Pod("p", {}, {{"disk", "hdd"}}), node));
  json pod = Pod("p", {}, {{"disk", "ssd"}});
  pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] =
      Selector({Term({Req("zone", "In", {"z2"})})});
  EXPECT_FALSE(PodFitsNodeAffinity(pod, node));
  pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] =
      Selector({Term({Req("zone", "In", {"z1"})})});
  EXPECT_TRUE(PodFitsNodeAffinity(pod, node));
}

// ---- Flows ----

TEST_F(SchedulerTest, NodeSelectorPlacesThePodAndReportsScheduled) {
  Create(Node("node-a", {{"disk", "hdd"}}));
  Create(Node("node-b", {{"disk", "ssd"}}));
  Create(Node("node-c", {{"disk", "hdd"}}));
  Start();
  Create(Pod("web", {}, {{"disk", "ssd"}}));
  ASSERT_TRUE(Eventually([&] { return NodeOf("web") == "node-b"; }));
  ASSERT_TRUE(Eventually([&] { return Condition("web").value("status", "") == "True"; }));
  ASSERT_TRUE(Eventually([&] { return !Events("Scheduled").empty(); }));
  EXPECT_EQ(Events("Scheduled")[0]["message"], "Successfully assigned default/web to node-b");
  EXPECT_EQ(Events("Scheduled")[0]["type"], "Normal");
}

TEST_F(SchedulerTest, PodsWithoutVolumesSpreadAcrossNodes) {
  ThreeNodes(/*with_csinodes=*/false);
  Start();
  for (const char* p : {"p1", "p2", "p3", "p4", "p5", "p6"}) Create(Pod(p));
  ASSERT_TRUE(Eventually([&] {
    for (const char* p : {"p1", "p2", "p3", "p4", "p5", "p6"}) {
      if (NodeOf(p).empty()) return false;
    }
    return true;
  }));
  std::map<std::string, int> per_node;
  for (const char* p : {"p1", "p2", "p3", "p4", "p5", "p6"}) ++per_node[NodeOf(p)];
  EXPECT_EQ(per_node, (std::map<std::string, int>{{"node-a", 2}, {"node-b", 2}, {"node-c", 2}}));
}

TEST_F(SchedulerTest, PodsOfOtherSchedulersAndTerminalPodsAreLeftAlone) {
  Create(Node("node-a"));
  Start();
  json other = Pod("other");
  other["spec"]["schedulerName"] = "someone-else";
  Create(other);
  Create(Pod("mine"));
  ASSERT_TRUE(Eventually([&] { return NodeOf("mine") == "node-a"; }));
  ASSERT_TRUE(Settle(*store_));
  EXPECT_EQ(NodeOf("other"), "");
}

TEST_F(SchedulerTest, NotReadyAndCordonedNodesAreFilteredWithTheirReasons) {
  Create(Node("node-a", json::object(), "False"));
  json cordoned = Node("node-b");
  cordoned["spec"]["unschedulable"] = true;
  Create(cordoned);
  json tainted = Node("node-c");
  tainted["spec"]["taints"] = {{{"key", "dedicated"}, {"value", "db"}, {"effect", "NoSchedule"}}};
  Create(tainted);
  Start();
  Create(Pod("web"));
  ASSERT_TRUE(Eventually([&] { return Condition("web").value("reason", "") == "Unschedulable"; }));
  EXPECT_EQ(Condition("web")["status"], "False");
  EXPECT_EQ(Condition("web")["message"],
            "0/3 nodes are available: 1 node(s) had untolerated taint {dedicated: db}, 1 node(s) had untolerated "
            "taint {node.kubernetes.io/not-ready: }, 1 node(s) were unschedulable.");
  // A node without a Ready condition counts as ready (documented).
  Create(Node("node-d", json::object(), ""));
  ASSERT_TRUE(Eventually([&] { return NodeOf("web") == "node-d"; }));
  // Tolerating the taint lets a pod onto node-c.
  json tolerant = Pod("db");
  tolerant["spec"]["nodeSelector"] = {{"kubernetes.io/hostname", "node-c"}};
  tolerant["spec"]["tolerations"] = {
      {{"key", "dedicated"}, {"operator", "Equal"}, {"value", "db"}, {"effect", "NoSchedule"}}};
  Create(tolerant);
  ASSERT_TRUE(Eventually([&] { return NodeOf("db") == "node-c"; }));
}

TEST_F(SchedulerTest, BoundVolumeNodeAffinityPinsThePod) {
  ThreeNodes();
  Create(Class("manual", "Immediate", json::object(), "kubernetes.io/no-provisioner"));
  Create(Volume("local-c", "manual", "5Gi", "node-c"));
  Create(Claim("data", "manual", "1Gi"));
  Start();
  ASSERT_TRUE(Eventually([&] { return Get("persistentvolumeclaims", "data")["status"]["phase"] == "Bound"; }));
  Create(Pod("db", {"data"}));
  ASSERT_TRUE(Eventually([&] { return NodeOf("db") == "node-c"; }));
  // A pod that must be elsewhere cannot have it.
  Create(Volume("local-a", "manual", "5Gi", "node-a"));
  Create(Claim("data2", "manual", "1Gi"));
  ASSERT_TRUE(Eventually([&] { return Get("persistentvolumeclaims", "data2")["status"]["phase"] == "Bound"; }));
  Create(Pod("stuck", {"data2"}, {{"kubernetes.io/hostname", "node-b"}}));
  ASSERT_TRUE(Eventually([&] { return Condition("stuck").value("reason", "") == "Unschedulable"; }));
  EXPECT_EQ(Condition("stuck")["message"],
            "0/3 nodes are available: 1 node(s) had volume node affinity conflict, 2 node(s) didn't match Pod's "
            "node affinity/selector.");
}

TEST_F(SchedulerTest, WaitForFirstConsumerClaimGoesToTheNodeWithMostFreeSpaceAndPodBindsAfterTheClaim) {
  ThreeNodes();
  Create(Class("local"));
  Create(Capacity("local", "node-a", "5Gi"));
  Create(Capacity("local", "node-b", "20Gi"));
  Create(Capacity("local", "node-c", "10Gi"));
  Start();
  Create(Claim("data", "local"));
  Create(Pod("db", {"data"}));
  ASSERT_TRUE(Eventually([&] { return SelectedNode("data") == "node-b"; }));
  // The pod waits for its claim.
  ASSERT_TRUE(Settle(*store_));
  EXPECT_EQ(NodeOf("db"), "");
  ProvisionFor("data", "node-b");
  ASSERT_TRUE(Eventually([&] { return NodeOf("db") == "node-b"; }));
  // Bound in the upstream sense (volumeName + bind-completed) is enough for
  // the pod; the claim's phase follows.
  EXPECT_TRUE(Eventually([&] { return Get("persistentvolumeclaims", "data")["status"]["phase"] == "Bound"; }));
  EXPECT_TRUE(Eventually([&] { return Condition("db").value("status", "") == "True"; }));
}

TEST_F(SchedulerTest, VolumeWeightedPicksTheNodeWithFewestVolumes) {
  ThreeNodes();
  Create(Class("local", "WaitForFirstConsumer", {{kNodeWeightingParameter, "VolumeWeighted"}}));
  Create(Class("other"));
  // node-a has the most space but two volumes; node-b none; node-c one.
  Create(Capacity("local", "node-a", "100Gi"));
  Create(Capacity("local", "node-b", "10Gi"));
  Create(Capacity("local", "node-c", "50Gi"));
  Create(Volume("va1", "other", "1Gi", "node-a"));
  Create(Volume("va2", "other", "1Gi", "node-a"));
  Create(Volume("vc1", "other", "1Gi", "node-c"));
  Start();
  Create(Claim("data", "local"));
  Create(Pod("db", {"data"}));
  ASSERT_TRUE(Eventually([&] { return SelectedNode("data") == "node-b"; }));
}

TEST_F(SchedulerTest, VolumeWeightedCountsClaimsAlreadySentToANode) {
  ThreeNodes();
  Create(Class("local", "WaitForFirstConsumer", {{kNodeWeightingParameter, "VolumeWeighted"}}));
  Create(Class("other"));
  Create(Volume("va1", "other", "1Gi", "node-a"));
  Create(Volume("vc1", "other", "1Gi", "node-c"));
  Start();
  Create(Claim("data", "local"));
  Create(Pod("db", {"data"}));
  ASSERT_TRUE(Eventually([&] { return SelectedNode("data") == "node-b"; }));
  // Now every node holds one: the tie goes to the first name.
  Create(Claim("data2", "local"));
  Create(Pod("db2", {"data2"}));
  ASSERT_TRUE(Eventually([&] { return SelectedNode("data2") == "node-a"; }));
}

TEST_F(SchedulerTest, VolumeWeightedCountsAClaimInFlightByItsBetaAnnotationClass) {
  ThreeNodes();
  Create(Class("local", "WaitForFirstConsumer", {{kNodeWeightingParameter, "VolumeWeighted"}}));
  Create(Class("other"));
  Create(Volume("va1", "other", "1Gi", "node-a"));
  Create(Volume("vc1", "other", "1Gi", "node-c"));
  // Sent to node-b, no volume yet; its class only in the beta annotation
  // (upstream's GetPersistentVolumeClaimClass reads it first).
  json early = Claim("early", "");
  early["spec"].erase("storageClassName");
  early["metadata"]["annotations"] = {{"volume.beta.kubernetes.io/storage-class", "local"},
                                      {kAnnSelectedNode, "node-b"}};
  Create(early);
  Start();
  Create(Claim("data", "local"));
  Create(Pod("db", {"data"}));
  // One volume on every node: the tie goes to the first name, not to node-b.
  ASSERT_TRUE(Eventually([&] { return SelectedNode("data") == "node-a"; }));
}

TEST_F(SchedulerTest, ScoringSkipsAVolumeThatDoesNotDecode) {
  ThreeNodes();
  Create(Class("local", "WaitForFirstConsumer", {{kNodeWeightingParameter, "VolumeWeighted"}}));
  Create(Class("other"));
  Create(Volume("va1", "other", "1Gi", "node-a"));
  Create(Volume("vb1", "other", "1Gi", "node-b"));
  // On node-c, of the same driver, with a field of the wrong type (the API
  // server's validation would refuse it: written to the store directly).
  json bad = Volume("vc-bad", "other", "1Gi", "node-c");
  bad["spec"]["csi"]["readOnly"] = "yes";
  ASSERT_TRUE(store_->Create("persistentvolumes", bad).ok());
  Start();
  Create(Claim("data", "local"));
  Create(Pod("db", {"data"}));
  // Left out of node-c's count (node-c holds none), not failing the pod.
  ASSERT_TRUE(Eventually([&] { return SelectedNode("data") == "node-c"; }));
}

TEST_F(SchedulerTest, CapacityWeightedPicksTheLeastAllocatedNode) {
  ThreeNodes();
  Create(Class("local", "WaitForFirstConsumer", {{kNodeWeightingParameter, "CapacityWeighted"}}));
  Create(Class("other"));
  Create(Volume("va1", "other", "10Gi", "node-a"));                                         // 1 volume, 10Gi
  for (const char* v : {"vb1", "vb2", "vb3"}) Create(Volume(v, "other", "1Gi", "node-b"));  // 3 volumes, 3Gi
  Create(Volume("vc1", "other", "5Gi", "node-c"));
  Create(Volume("vc2", "other", "5Gi", "node-c"));  // 2 volumes, 10Gi
  Start();
  Create(Claim("data", "local"));
  Create(Pod("db", {"data"}));
  ASSERT_TRUE(Eventually([&] { return SelectedNode("data") == "node-b"; }));
}

TEST_F(SchedulerTest, InsufficientCapacityIsUnschedulableUntilCapacityIsAdded) {
  ThreeNodes();
  Create({{"apiVersion", "storage.k8s.io/v1"},
          {"kind", "CSIDriver"},
          {"metadata", {{"name", kDriver}}},
          {"spec", {{"storageCapacity", true}}}});
  Create(Class("local"));
  Create(Capacity("local", "node-a", "1Gi"));
  Create(Capacity("local", "node-b", "2Gi"));
  // node-c reports nothing: with storageCapacity it does not fit either.
  Create(Claim("data", "local", "5Gi"));
  Create(Pod("db", {"data"}));
  clock_ = &fake_clock_;  // the retries run when the test moves time
  Start();
  ASSERT_TRUE(Eventually([&] { return Condition("db").value("reason", "") == "Unschedulable"; }));
  EXPECT_EQ(Condition("db")["message"], "0/3 nodes are available: 3 node(s) did not have enough free storage.");
  ASSERT_TRUE(Eventually([&] { return Events("FailedScheduling").size() == 1; }));
  EXPECT_EQ(Events("FailedScheduling")[0]["type"], "Warning");
  EXPECT_EQ(Events("FailedScheduling")[0]["message"], Condition("db")["message"]);
  // Retries with the same outcome add no new event: three backoffs run out
  // on the fake clock, each retry fails again and arms the next.
  for (int retry = 0; retry < 3; ++retry) {
    ASSERT_TRUE(fake_clock_.BlockUntilTimers(1));  // the pod waits for its backoff
    ASSERT_TRUE(fake_clock_.AdvanceToNextTimer());
    ASSERT_TRUE(Settle(*store_));  // the retry ran and its outcome is written
  }
  ASSERT_TRUE(fake_clock_.BlockUntilTimers(1));  // and failed: the next backoff
  EXPECT_EQ(Events("FailedScheduling").size(), 1u);
  EXPECT_EQ(Events("FailedScheduling")[0].value("count", 1), 1);
  EXPECT_EQ(SelectedNode("data"), "");
  // More room on node-b: the pod goes there.
  Patch("csistoragecapacities", "csisc-local-node-b", {{"capacity", "8Gi"}});
  ASSERT_TRUE(Eventually([&] { return SelectedNode("data") == "node-b"; }));
  ProvisionFor("data", "node-b", "5Gi");
  ASSERT_TRUE(Eventually([&] { return NodeOf("db") == "node-b"; }));
  ASSERT_TRUE(Eventually([&] { return Condition("db").value("status", "") == "True"; }));
  EXPECT_FALSE(Condition("db").contains("message"));
  EXPECT_FALSE(Condition("db").contains("reason"));
}

TEST_F(SchedulerTest, MessageCountsEachReasonLikeKubernetes) {
  ThreeNodes();
  Create(Class("local"));
  for (const char* n : {"node-a", "node-b", "node-c"}) Create(Capacity("local", n, "1Gi"));
  Start();
  Create(Claim("data", "local", "5Gi"));
  Create(Pod("db", {"data"}, {{"tier", "fast"}}));  // no node has the label...
  Patch("nodes", "node-b", {{"metadata", {{"labels", {{"tier", "fast"}}}}}});
  Patch("nodes", "node-c", {{"metadata", {{"labels", {{"tier", "fast"}}}}}});
  ASSERT_TRUE(Eventually([&] {
    return Condition("db").value("message", "") ==
           "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 2 node(s) did not have "
           "enough free storage.";
  })) << Condition("db");
}

TEST_F(SchedulerTest, CsiNodeAllocatableCountLimitsVolumesPerNode) {
  Create(Node("node-a"));
  Create(Node("node-b"));
  Create(CsiNode("node-a", 1));
  Create(CsiNode("node-b", 1));
  Create(Class("local"));
  Create(Capacity("local", "node-a", "100Gi"));  // the roomiest, but full by count
  Create(Capacity("local", "node-b", "10Gi"));
  Create(Class("manual", "Immediate", json::object(), "kubernetes.io/no-provisioner"));
  Create(Volume("used-a", "manual", "1Gi", "node-a"));
  Create(Claim("used", "manual"));
  json on_a = Pod("running", {"used"});
  on_a["spec"]["nodeName"] = "node-a";
  Create(on_a);
  Start();
  ASSERT_TRUE(Eventually([&] { return Get("persistentvolumeclaims", "used")["status"]["phase"] == "Bound"; }));
  Create(Claim("data", "local"));
  Create(Pod("db", {"data"}));
  ASSERT_TRUE(Eventually([&] { return SelectedNode("data") == "node-b"; }));
  // node-b's only slot is taken by db (sent there, not bound yet): a third
  // pod fits nowhere.
  Create(Claim("data2", "local"));
  Create(Pod("db2", {"data2"}));
  ASSERT_TRUE(Eventually([&] { return Condition("db2").value("reason", "") == "Unschedulable"; }));
  EXPECT_EQ(Condition("db2")["message"], "0/2 nodes are available: 2 node(s) exceed max volume count.");
  // The running pod finishes: its slot frees up.
  Patch("pods", "running", {{"status", {{"phase", "Succeeded"}}}}, apiserver::Subresource::kStatus);
  ASSERT_TRUE(Eventually([&] { return SelectedNode("data2") == "node-a"; }));
}

TEST_F(SchedulerTest, AllowedTopologiesRestrictWhereVolumesAreProvisioned) {
  Create(Node("node-a", {{kZone, "z1"}}));
  Create(Node("node-b", {{kZone, "z2"}}));
  Create(CsiNode("node-a"));
  Create(CsiNode("node-b"));
  json cls = Class("zonal");
  cls["allowedTopologies"] = {{{"matchLabelExpressions", {{{"key", kZone}, {"values", {"z2"}}}}}}};
  Create(cls);
  Create(Capacity("zonal", "node-a", "100Gi"));
  Create(Capacity("zonal", "node-b", "1Gi"));
  Start();
  Create(Claim("data", "zonal"));
  Create(Pod("db", {"data"}));
  ASSERT_TRUE(Eventually([&] { return SelectedNode("data") == "node-b"; }));
  // A pod that must be in z1 cannot get such a volume.
  Create(Claim("data2", "zonal"));
  Create(Pod("db2", {"data2"}, {{kZone, "z1"}}));
  ASSERT_TRUE(Eventually([&] { return Condition("db2").value("reason", "") == "Unschedulable"; }));
  EXPECT_EQ(Condition("db2")["message"],
            "0/2 nodes are available: 1 node(s) didn't find available persistent volumes to bind, 1 node(s) didn't "
            "match Pod's node affinity/selector.");
}

TEST_F(SchedulerTest, NodesWithoutTheDriverCannotProvision) {
  Create(Node("node-a"));
  Create(Node("node-b"));
  Create(CsiNode("node-b"));  // node-a runs no driver
  Create(Class("local"));
  Create(Capacity("local", "node-a", "100Gi"));
  Create(Capacity("local", "node-b", "1Gi"));
  Start();
  Create(Claim("data", "local"));
  Create(Pod("db", {"data"}));
  ASSERT_TRUE(Eventually([&] { return SelectedNode("data") == "node-b"; }));
}

TEST_F(SchedulerTest, ImmediateUnboundClaimMakesThePodWait) {
  ThreeNodes();
  Create(Class("manual", "Immediate", json::object(), "kubernetes.io/no-provisioner"));
  Create(Claim("data", "manual"));
  Start();
  Create(Pod("db", {"data"}));
  ASSERT_TRUE(Eventually([&] { return Condition("db").value("reason", "") == "Unschedulable"; }));
  EXPECT_EQ(Condition("db")["message"], "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims.");
  // An administrator provides a volume for it; the binder binds it.
  json pv = Volume("pv-c", "manual", "1Gi", "node-c");
  pv["spec"]["claimRef"] = {{"namespace", "default"}, {"name", "data"}};
  Create(pv);
  ASSERT_TRUE(Eventually([&] { return NodeOf("db") == "node-c"; }));
}

// What may make room for a waiting pod queues only pods that wait: nothing
// while none does, and for a claim's change only the pods using that claim
// (claims change several times each on their way to Bound).
TEST_F(SchedulerTest, ChangesRequeueOnlyThePodsThatWaitForThem) {
  clock_ = &fake_clock_;  // no backoff retries meanwhile: only events queue
  ThreeNodes();
  Create(Class("manual", "Immediate", json::object(), "kubernetes.io/no-provisioner"));
  Create(Claim("data", "manual"));
  Create(Claim("other", "manual"));
  Start();
  const auto label = [&](const std::string& claim, const std::string& value) {
    auto st = registry_->Patch(K("persistentvolumeclaims"), "default", claim,
                               json({{"metadata", {{"labels", {{"touched", value}}}}}}).dump(),
                               apiserver::PatchType::kMerge, apiserver::Subresource::kMain);
    ASSERT_TRUE(st.ok()) << st.status();
  };
  Create(Volume("pv-spare", "spare", "1Gi", "node-a"));  // a class no claim asks for: stays Available
  label("other", "1");
  ASSERT_TRUE(Settle(*store_));
  EXPECT_EQ(scheduler_->queue_adds(), 0u) << "no pod waits";

  Create(Pod("db", {"data"}));
  ASSERT_TRUE(Eventually([&] { return Condition("db").value("reason", "") == "Unschedulable"; }));
  ASSERT_TRUE(Settle(*store_));
  const uint64_t waiting = scheduler_->queue_adds();
  label("other", "2");
  ASSERT_TRUE(Settle(*store_));
  EXPECT_EQ(scheduler_->queue_adds(), waiting) << "db does not use claim other";
  label("data", "1");
  ASSERT_TRUE(Settle(*store_));
  EXPECT_GT(scheduler_->queue_adds(), waiting) << "db uses claim data";

  // A volume for it: the binder binds the claim and the pod is placed.
  json pv = Volume("pv-c", "manual", "1Gi", "node-c");
  pv["spec"]["claimRef"] = {{"namespace", "default"}, {"name", "data"}};
  Create(pv);
  ASSERT_TRUE(Eventually([&] { return NodeOf("db") == "node-c"; }));
  ASSERT_TRUE(Settle(*store_));
  const uint64_t placed = scheduler_->queue_adds();
  Create(Volume("pv-late", "spare", "1Gi", "node-b"));
  label("data", "2");
  ASSERT_TRUE(Settle(*store_));
  EXPECT_EQ(scheduler_->queue_adds(), placed) << "no pod waits any more";
}

TEST_F(SchedulerTest, MissingOrDeletingClaimsAreReported) {
  ThreeNodes();
  Start();
  Create(Pod("db", {"nope"}));
  ASSERT_TRUE(Eventually([&] {
    return Condition("db").value("message", "") == "0/3 nodes are available: persistentvolumeclaim \"nope\" not found.";
  })) << Condition("db");
}

TEST_F(SchedulerTest, StaticVolumeOnTheNodeIsPreBoundForWaitForFirstConsumer) {
  ThreeNodes();
  Create(Class("local-static", "WaitForFirstConsumer", json::object(), "kubernetes.io/no-provisioner"));
  Create(Volume("disk-c", "local-static", "10Gi", "node-c"));
  Create(Volume("disk-a-small", "local-static", "1Gi", "node-a"));
  Start();
  Create(Claim("data", "local-static", "5Gi"));
  Create(Pod("db", {"data"}));
  ASSERT_TRUE(Eventually([&] { return NodeOf("db") == "node-c"; }));
  json pv = Get("persistentvolumes", "disk-c");
  EXPECT_EQ(pv["spec"]["claimRef"]["name"], "data");
  EXPECT_EQ(Get("persistentvolumeclaims", "data")["spec"]["volumeName"], "disk-c");
  EXPECT_EQ(SelectedNode("data"), "node-c");
}

TEST_F(SchedulerTest, RestartBetweenSelectedNodeAndBindingConverges) {
  ThreeNodes();
  Create(Class("local"));
  Create(Capacity("local", "node-a", "5Gi"));
  Create(Capacity("local", "node-b", "20Gi"));
  Start();
  Create(Claim("data", "local"));
  Create(Pod("db", {"data"}));
  ASSERT_TRUE(Eventually([&] { return SelectedNode("data") == "node-b"; }));
  // The control plane goes away before the volume exists; meanwhile node-a
  // became the roomier node and the volume was made on node-b.
  StopAll();
  Patch("csistoragecapacities", "csisc-local-node-a", {{"capacity", "50Gi"}});
  ProvisionFor("data", "node-b");
  Start();
  ASSERT_TRUE(Eventually([&] { return NodeOf("db") == "node-b"; }));
  // Bound in the upstream sense (volumeName + bind-completed) is enough for
  // the pod; the claim's phase follows.
  EXPECT_TRUE(Eventually([&] { return Get("persistentvolumeclaims", "data")["status"]["phase"] == "Bound"; }));
  EXPECT_TRUE(Eventually([&] { return Condition("db").value("status", "") == "True"; }));
}

TEST_F(SchedulerTest, RestartReusesTheSelectedNodeOfAClaimNotYetProvisioned) {
  ThreeNodes();
  Create(Class("local"));
  Create(Capacity("local", "node-a", "50Gi"));
  Create(Capacity("local", "node-c", "5Gi"));
  // A previous scheduler sent the claim to node-c and stopped.
  json claim = Claim("data", "local");
  claim["metadata"]["annotations"][kAnnSelectedNode] = "node-c";
  Create(claim);
  Create(Pod("db", {"data"}));
  Start();
  ASSERT_TRUE(Settle(*store_));
  EXPECT_EQ(SelectedNode("data"), "node-c");  // not moved to the roomier node-a
  ProvisionFor("data", "node-c");
  ASSERT_TRUE(Eventually([&] { return NodeOf("db") == "node-c"; }));
}

// ---- Bursts: placements count before the informers show them ----
//
// The test plays the provisioner and the capacity tracker: CSIStorageCapacity
// objects change only when it patches them, so they lag behind every
// placement as a polling tracker's do.

TEST_F(SchedulerTest, SyncPodReportsUnschedulableAsFailedPrecondition) {
  Start();
  Create(Pod("db"));
  ASSERT_TRUE(
      Eventually([&] { return Condition("db").value("message", "") == "no nodes available to schedule pods"; }));
  EXPECT_EQ(scheduler_->SyncPod("default/db").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(scheduler_->SyncPod("default/gone").ok());
}

TEST_F(SchedulerTest, ProvisioningFailureOnTheNodeReschedulesThePod) {
  ThreeNodes();
  Create(Class("local"));
  Create(Capacity("local", "node-a", "5Gi"));
  Create(Capacity("local", "node-b", "20Gi"));
  Create(Capacity("local", "node-c", "10Gi"));
  Start(/*with_provisioner=*/true);
  driver_->FailCreates(grpc::StatusCode::RESOURCE_EXHAUSTED, 1);
  Create(Claim("data", "local"));
  Create(Pod("db", {"data"}));
  ASSERT_TRUE(Eventually([&] { return NodeOf("db") == "node-b"; }));
  EXPECT_EQ(driver_->create_calls(), 2);
  ASSERT_TRUE(Eventually([&] { return !Events("FailedScheduling").empty(); }));
  EXPECT_THAT(Events("FailedScheduling")[0]["message"].get<std::string>(),
              HasSubstr("binding volumes: provisioning failed for PVC \"data\""));
  // The provisioned volume lives where the pod runs.
  json claim = Get("persistentvolumeclaims", "data");
  json pv = Get("persistentvolumes", claim["spec"]["volumeName"].get<std::string>());
  absl::StatusOr<api::types::PersistentVolume> typed = api::types::Decode<api::types::PersistentVolume>(pv);
  ASSERT_TRUE(typed.ok()) << typed.status();
  EXPECT_EQ(HostnameOfVolume(*typed), "node-b");
  EXPECT_TRUE(Eventually([&] { return Condition("db").value("status", "") == "True"; }));
}

}  // namespace
}  // namespace berth::controllers
