// Scheduling flows against a real registry and informers, with the PV
// binder completing bindings (and, for the provisioning-failure flow, the
// provisioner against a fake CSI driver over a real unix socket).
#include "controllers/scheduling/scheduler.h"

#include "client/object.h"
#include "common/testing/eventually.h"
#include "controllers/node_affinity.h"
#include "controllers/testing/controller_fixture.h"
#include "controllers/testing/fake_csi.h"
#include "controllers/testing/helpers.h"
#include "controllers/volume/provisioner.h"
#include "controllers/volume/pv_binder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace berth::controllers {

using namespace ::berth::client;  // the controllers' own client library
namespace {

using testing::Eventually;
using testing::K;
using testing::Settle;

using ::testing::HasSubstr;

constexpr char kDriver[] = "local.csi.berth.io";
constexpr char kZone[] = "topology.kubernetes.io/zone";

std::string_view GroupOf(std::string_view resource) {
  for (auto r : {"storageclasses", "csinodes", "csidrivers", "csistoragecapacities"}) {
    if (resource == r) return "storage.k8s.io";
  }
  return "";
}

// ---- Objects ----

json Node(const std::string& name, json labels = json::object(), const std::string& ready = "True") {
  labels["kubernetes.io/hostname"] = name;
  json node = {{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", name}, {"labels", labels}}}};
  if (!ready.empty()) node["status"] = {{"conditions", {{{"type", "Ready"}, {"status", ready}}}}};
  return node;
}

json CsiNode(const std::string& name, std::optional<int> limit = std::nullopt) {
  json driver = {{"name", kDriver}, {"nodeID", name}, {"topologyKeys", {"kubernetes.io/hostname"}}};
  if (limit) driver["allocatable"] = {{"count", *limit}};
  return {{"apiVersion", "storage.k8s.io/v1"},
          {"kind", "CSINode"},
          {"metadata", {{"name", name}}},
          {"spec", {{"drivers", {driver}}}}};
}

json Class(const std::string& name, const std::string& binding = "WaitForFirstConsumer", json params = json::object(),
           const std::string& provisioner = kDriver) {
  return {{"apiVersion", "storage.k8s.io/v1"},
          {"kind", "StorageClass"},
          {"metadata", {{"name", name}}},
          {"provisioner", provisioner},
          {"volumeBindingMode", binding},
          {"reclaimPolicy", "Delete"},
          {"parameters", params}};
}

json Capacity(const std::string& cls, const std::string& node, const std::string& bytes) {
  return {{"apiVersion", "storage.k8s.io/v1"},
          {"kind", "CSIStorageCapacity"},
          {"metadata", {{"name", "csisc-" + cls + "-" + node}}},
          {"storageClassName", cls},
          {"nodeTopology", {{"matchLabels", {{"kubernetes.io/hostname", node}}}}},
          {"capacity", bytes}};
}

json Claim(const std::string& name, const std::string& cls, const std::string& size = "1Gi") {
  return {{"apiVersion", "v1"},
          {"kind", "PersistentVolumeClaim"},
          {"metadata", {{"name", name}}},
          {"spec",
           {{"accessModes", {"ReadWriteOnce"}},
            {"storageClassName", cls},
            {"resources", {{"requests", {{"storage", size}}}}}}}};
}

json OnNode(const std::string& node) {
  return json::parse(R"({"required":{"nodeSelectorTerms":[{"matchExpressions":[
      {"key":"kubernetes.io/hostname","operator":"In","values":[")" +
                     node + R"("]}]}]}})");
}

json Volume(const std::string& name, const std::string& cls, const std::string& size, const std::string& node = "") {
  json pv = {{"apiVersion", "v1"},
             {"kind", "PersistentVolume"},
             {"metadata", {{"name", name}}},
             {"spec",
              {{"capacity", {{"storage", size}}},
               {"accessModes", {"ReadWriteOnce"}},
               {"storageClassName", cls},
               {"persistentVolumeReclaimPolicy", "Retain"},
               {"csi", {{"driver", kDriver}, {"volumeHandle", name}}}}}};
  if (!node.empty()) pv["spec"]["nodeAffinity"] = OnNode(node);
  return pv;
}

json Pod(const std::string& name, std::vector<std::string> claims = {}, json node_selector = nullptr) {
  json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", {{"name", name}}},
              {"spec", {{"containers", {{{"name", "app"}, {"image", "busybox:1.36"}}}}}}};
  json volumes = json::array();
  for (const auto& c : claims) volumes.push_back({{"name", c}, {"persistentVolumeClaim", {{"claimName", c}}}});
  if (!volumes.empty()) pod["spec"]["volumes"] = volumes;
  if (!node_selector.is_null()) pod["spec"]["nodeSelector"] = node_selector;
  return pod;
}

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

class SchedulerTest : public controllers::testing::ControllerTest {
 protected:
  void TearDown() override { StopAll(); }

  // Starts informers, the scheduler and the PV binder (and the provisioner
  // with a fake driver when asked).
  void Start(bool with_provisioner = false) {
    pods_ = std::make_unique<Informer>(*registry_, K("pods"));
    nodes_ = std::make_unique<Informer>(*registry_, K("nodes"));
    claims_ = std::make_unique<Informer>(*registry_, K("persistentvolumeclaims"));
    volumes_ = std::make_unique<Informer>(*registry_, K("persistentvolumes"));
    classes_ = std::make_unique<Informer>(*registry_, K("storageclasses", "storage.k8s.io"));
    csinodes_ = std::make_unique<Informer>(*registry_, K("csinodes", "storage.k8s.io"));
    csidrivers_ = std::make_unique<Informer>(*registry_, K("csidrivers", "storage.k8s.io"));
    capacities_ = std::make_unique<Informer>(*registry_, K("csistoragecapacities", "storage.k8s.io"));
    Scheduler::Options options;
    options.initial_backoff = absl::Milliseconds(20);
    options.max_backoff = absl::Milliseconds(200);
    options.clock = clock_;
    scheduler_ = std::make_unique<Scheduler>(
        *registry_,
        SchedulerInformers{*pods_, *nodes_, *claims_, *volumes_, *classes_, *csinodes_, *csidrivers_, *capacities_},
        options);
    scheduler_->RegisterHandlers();
    binder_ = std::make_unique<PvBinder>(*registry_, BinderInformers{*claims_, *volumes_, *classes_, *pods_, *nodes_},
                                         PvBinder::Options{});
    binder_->RegisterHandlers();
    if (with_provisioner) {
      driver_ = std::make_unique<testing::FakeCsiDriver>(kDriver);
      const std::string socket = dir_.path() + "/csi.sock";
      ASSERT_TRUE(driver_->Serve(socket).ok());
      directory_.Add(kDriver, "", "unix://" + socket);
      provisioner_ = std::make_unique<Provisioner>(
          *registry_, directory_, ProvisionerInformers{*claims_, *volumes_, *classes_, *nodes_, *csinodes_, nullptr},
          Provisioner::Options{.driver = kDriver, .workers = 2, .rpc_timeout = absl::Seconds(10)});
      provisioner_->RegisterHandlers();
    }
    for (Informer* i : {classes_.get(), nodes_.get(), csinodes_.get(), csidrivers_.get(), capacities_.get(),
                        pods_.get(), volumes_.get(), claims_.get()}) {
      i->Start();
      ASSERT_TRUE(i->WaitForSync(absl::Seconds(10)));
    }
    binder_->Start();
    if (provisioner_) provisioner_->Start();
    scheduler_->Start();
  }
  // Stops and drops every controller and informer (a control-plane restart).
  void StopAll() {
    if (scheduler_) scheduler_->Stop();
    if (provisioner_) provisioner_->Stop();
    if (binder_) binder_->Stop();
    for (auto* i : {&pods_, &nodes_, &claims_, &volumes_, &classes_, &csinodes_, &csidrivers_, &capacities_}) {
      if (*i) (*i)->Stop();
    }
    scheduler_.reset();
    provisioner_.reset();
    binder_.reset();
    for (auto* i : {&pods_, &nodes_, &claims_, &volumes_, &classes_, &csinodes_, &csidrivers_, &capacities_}) {
      i->reset();
    }
  }

  json Create(const json& obj, const std::string& ns = "") {
    const std::string resource = std::string(obj["kind"] == "StorageClass"         ? "storageclasses"
                                             : obj["kind"] == "CSINode"            ? "csinodes"
                                             : obj["kind"] == "CSIDriver"          ? "csidrivers"
                                             : obj["kind"] == "CSIStorageCapacity" ? "csistoragecapacities"
                                             : obj["kind"] == "Node"               ? "nodes"
                                             : obj["kind"] == "Pod"                ? "pods"
                                             : obj["kind"] == "PersistentVolume"   ? "persistentvolumes"
                                                                                   : "persistentvolumeclaims");
    const api::KindInfo& kind = K(resource, GroupOf(resource));
    auto got = registry_->Create(kind, kind.namespaced ? (ns.empty() ? "default" : ns) : "", obj);
    EXPECT_TRUE(got.ok()) << got.status();
    return got.ok() ? *got : json();
  }
  json Get(std::string_view resource, const std::string& name, const std::string& ns = "default") {
    const api::KindInfo& kind = K(resource, GroupOf(resource));
    auto got = registry_->Get(kind, kind.namespaced ? ns : "", name);
    return got.ok() ? *got : json();
  }
  void Patch(std::string_view resource, const std::string& name, const json& patch,
             apiserver::Subresource sub = apiserver::Subresource::kMain) {
    const api::KindInfo& kind = K(resource, GroupOf(resource));
    auto got =
        registry_->Patch(kind, kind.namespaced ? "default" : "", name, patch.dump(), apiserver::PatchType::kMerge, sub);
    ASSERT_TRUE(got.ok()) << got.status();
  }
  std::string NodeOf(const std::string& pod) { return Str(Get("pods", pod), {"spec", "nodeName"}); }
  std::string SelectedNode(const std::string& claim) {
    return Annotation(Get("persistentvolumeclaims", claim), kAnnSelectedNode);
  }
  json Condition(const std::string& pod) {
    for (const auto& c : Get("pods", pod).value("status", json::object()).value("conditions", json::array())) {
      if (c.value("type", "") == "PodScheduled") return c;
    }
    return json::object();
  }
  std::vector<json> Events(const std::string& reason) {
    std::vector<json> out;
    auto page = registry_->List(K("events"), "default", {});
    if (!page.ok()) return out;
    for (const auto& e : page->items) {
      if (e.value("reason", "") == reason) out.push_back(e);
    }
    return out;
  }
  // The external provisioner's part, by hand: a PV for the claim on `node`,
  // pointing at it (the binder completes the binding).
  void ProvisionFor(const std::string& claim, const std::string& node, const std::string& size = "1Gi") {
    json c = Get("persistentvolumeclaims", claim);
    json pv = Volume("pvc-" + Uid(c), ClaimClass(c), size, node);
    pv["spec"]["claimRef"] = {{"kind", "PersistentVolumeClaim"},
                              {"namespace", "default"},
                              {"name", claim},
                              {"uid", Uid(c)},
                              {"apiVersion", "v1"}};
    pv["spec"]["persistentVolumeReclaimPolicy"] = "Delete";
    pv["metadata"]["annotations"][kAnnProvisionedBy] = kDriver;
    Create(pv);
  }
  // How many of the claims "<prefix>0".."<prefix>N-1" name each node ("" for
  // none yet).
  std::map<std::string, int> SelectedCounts(const std::string& prefix, int n) {
    std::map<std::string, int> out;
    for (int i = 0; i < n; ++i) ++out[SelectedNode(prefix + std::to_string(i))];
    return out;
  }
  // `n` claims of `size` and a pod for each ("<prefix>N" and "<prefix>N-pod").
  void Pairs(const std::string& prefix, int n, const std::string& cls, const std::string& size) {
    for (int i = 0; i < n; ++i) {
      const std::string name = prefix + std::to_string(i);
      Create(Claim(name, cls, size));
      Create(Pod(name + "-pod", {name}));
    }
  }
  void StorageCapacityTracked() {
    Create({{"apiVersion", "storage.k8s.io/v1"},
            {"kind", "CSIDriver"},
            {"metadata", {{"name", kDriver}}},
            {"spec", {{"storageCapacity", true}}}});
  }
  void ThreeNodes(bool with_csinodes = true) {
    for (const char* n : {"node-a", "node-b", "node-c"}) {
      Create(Node(n));
      if (with_csinodes) Create(CsiNode(n));
    }
  }

  // The scheduler's clock when set before Start (null: the real one). Declared
  // first so it outlives the scheduler.
  FakeClock fake_clock_;
  Clock* clock_ = nullptr;
  std::unique_ptr<Informer> pods_, nodes_, claims_, volumes_, classes_, csinodes_, csidrivers_, capacities_;
  std::unique_ptr<PvBinder> binder_;
  std::unique_ptr<testing::FakeCsiDriver> driver_;
  DriverDirectory directory_;
  std::unique_ptr<Provisioner> provisioner_;
  std::unique_ptr<Scheduler> scheduler_;
};

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
