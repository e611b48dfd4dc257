// The scheduler tests' objects and fixture: a registry, informers, the
// scheduler and the PV binder (and, for provisioning flows, the provisioner
// against a fake CSI driver), shared by scheduler_test.cc and
// scheduler_placements_test.cc.
#pragma once

#include "client/object.h"
#include "common/testing/eventually.h"
#include "controllers/node_affinity.h"
#include "controllers/scheduling/scheduler.h"
#include "controllers/testing/controller_fixture.h"
#include "controllers/testing/fake_csi.h"
#include "controllers/testing/helpers.h"
#include "controllers/volume/provisioner.h"
#include "controllers/volume/pv_binder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace berth::controllers {

using namespace ::berth::client;  // the controllers' own client library
namespace scheduler_testing {

using testing::Eventually;
using testing::K;
using testing::Settle;

using ::testing::HasSubstr;

constexpr char kDriver[] = "local.csi.berth.io";
constexpr char kZone[] = "topology.kubernetes.io/zone";

inline std::string_view GroupOf(std::string_view resource) {
  for (auto r : {"storageclasses", "csinodes", "csidrivers", "csistoragecapacities"}) {
    if (resource == r) return "storage.k8s.io";
  }
  return "";
}

// ---- Objects ----

inline json Node(const std::string& name, json labels = json::object(), const std::string& ready = "True") {
  labels["kubernetes.io/hostname"] = name;
  json node = {{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", name}, {"labels", labels}}}};
  if (!ready.empty()) node["status"] = {{"conditions", {{{"type", "Ready"}, {"status", ready}}}}};
  return node;
}

inline json CsiNode(const std::string& name, std::optional<int> limit = std::nullopt) {
  json driver = {{"name", kDriver}, {"nodeID", name}, {"topologyKeys", {"kubernetes.io/hostname"}}};
  if (limit) driver["allocatable"] = {{"count", *limit}};
  return {{"apiVersion", "storage.k8s.io/v1"},
          {"kind", "CSINode"},
          {"metadata", {{"name", name}}},
          {"spec", {{"drivers", {driver}}}}};
}

inline json Class(const std::string& name, const std::string& binding = "WaitForFirstConsumer",
                  json params = json::object(), const std::string& provisioner = kDriver) {
  return {{"apiVersion", "storage.k8s.io/v1"},
          {"kind", "StorageClass"},
          {"metadata", {{"name", name}}},
          {"provisioner", provisioner},
          {"volumeBindingMode", binding},
          {"reclaimPolicy", "Delete"},
          {"parameters", params}};
}

inline json Capacity(const std::string& cls, const std::string& node, const std::string& bytes) {
  return {{"apiVersion", "storage.k8s.io/v1"},
          {"kind", "CSIStorageCapacity"},
          {"metadata", {{"name", "csisc-" + cls + "-" + node}}},
          {"storageClassName", cls},
          {"nodeTopology", {{"matchLabels", {{"kubernetes.io/hostname", node}}}}},
          {"capacity", bytes}};
}

inline json Claim(const std::string& name, const std::string& cls, const std::string& size = "1Gi") {
  return {{"apiVersion", "v1"},
          {"kind", "PersistentVolumeClaim"},
          {"metadata", {{"name", name}}},
          {"spec",
           {{"accessModes", {"ReadWriteOnce"}},
            {"storageClassName", cls},
            {"resources", {{"requests", {{"storage", size}}}}}}}};
}

inline json OnNode(const std::string& node) {
  return json::parse(R"({"required":{"nodeSelectorTerms":[{"matchExpressions":[
      {"key":"kubernetes.io/hostname","operator":"In","values":[")" +
                     node + R"("]}]}]}})");
}

inline json Volume(const std::string& name, const std::string& cls, const std::string& size,
                   const std::string& node = "") {
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

inline json Pod(const std::string& name, std::vector<std::string> claims = {}, json node_selector = nullptr) {
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

}  // namespace scheduler_testing
}  // namespace berth::controllers
