// The orchestrator's controllers driving the real berth-csi (a process on a
// sandboxed XFS pool, as root): schedule a pod with a WaitForFirstConsumer
// claim, provision, attach, snapshot, restore, expand and delete, and
// restart the controllers in the middle.
#include <memory>
#include <set>

#include "api/types/core.h"
#include "client/object.h"
#include "client/volume_names.h"
#include "common/testing/eventually.h"
#include "common/testing/temp_dir.h"
#include "controllers/manager.h"
#include "controllers/node_affinity.h"
#include "driver_process.h"
#include "gmock/gmock.h"
#include "store/store.h"

namespace berth::testing {
namespace {

using client::Field;
using client::Str;
using nlohmann::json;

// A pod deleted as its node agent finally deletes it (grace period 0): no
// node agent runs here.
apiserver::DeleteOptions PodGone() {
  apiserver::DeleteOptions o;
  o.grace_period_seconds = 0;
  return o;
}

constexpr char kDriver[] = "local.csi.berth.io";
constexpr char kNode[] = "node-a";

const api::KindInfo& K(std::string_view resource, std::string_view group = "") {
  return *api::FindResource(group, resource);
}

class ControllersBerthCsiTest : public DriverProcessTest {
 protected:
  void SetUp() override {
    DriverProcessTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    store_ = std::move(*store::Store::Open({.path = dir_.path() + "/state.db"}));
    registry_ = std::make_unique<apiserver::Registry>(*store_);
    ASSERT_TRUE(registry_->Bootstrap().ok());
    directory_.Add(kDriver, kNode, "unix://" + driver_->socket());
    // What the node agent does at plugin registration: NodeGetInfo → Node
    // labels + CSINode.
    ::csi::v1::NodeGetInfoResponse info;
    ASSERT_TRUE(driver_->node().NodeGetInfo(Ctx().get(), {}, &info).ok());
    json labels = {{"kubernetes.io/hostname", kNode}};
    json keys = json::array();
    for (const auto& [k, v] : info.accessible_topology().segments()) {
      labels[k] = v;
      keys.push_back(k);
    }
    Create("nodes", "", "", {{"metadata", {{"name", kNode}, {"labels", labels}}}});
    Create("csinodes", "storage.k8s.io", "",
           {{"metadata", {{"name", kNode}}},
            {"spec", {{"drivers", {{{"name", kDriver}, {"nodeID", info.node_id()}, {"topologyKeys", keys}}}}}}});
    Create(
        "storageclasses", "storage.k8s.io", "",
        {{"metadata", {{"name", "local"}, {"annotations", {{"storageclass.kubernetes.io/is-default-class", "true"}}}}},
         {"provisioner", kDriver},
         {"volumeBindingMode", "WaitForFirstConsumer"},
         {"reclaimPolicy", "Delete"},
         {"allowVolumeExpansion", true},
         {"parameters", {{"csi.storage.k8s.io/fstype", "xfs"}}}});
    Create("volumesnapshotclasses", "snapshot.storage.k8s.io", "",
           {{"metadata",
             {{"name", "snaps"}, {"annotations", {{"snapshot.storage.kubernetes.io/is-default-class", "true"}}}}},
            {"driver", kDriver},
            {"deletionPolicy", "Delete"}});
    StartManager();
  }
  void TearDown() override {
    if (manager_) manager_->Stop();
    DriverProcessTest::TearDown();
  }

  void StartManager() {
    manager_ = std::make_unique<controllers::ControllerManager>(
        *registry_, directory_,
        controllers::ControllerManager::Options{.drivers = {kDriver}, .rpc_timeout = absl::Seconds(60)});
    ASSERT_TRUE(manager_->Start().ok());
  }
  void StopManager() {
    manager_->Stop();
    manager_.reset();
  }

  void Create(std::string_view resource, std::string_view group, const std::string& ns, const json& obj) {
    auto got = registry_->Create(K(resource, group), ns, obj);
    ASSERT_TRUE(got.ok()) << resource << ": " << got.status();
  }
  json Get(std::string_view resource, std::string_view group, const std::string& ns, const std::string& name) {
    auto got = registry_->Get(K(resource, group), ns, name);
    return got.ok() ? *got : json();
  }
  json Claim(const std::string& name) { return Get("persistentvolumeclaims", "", "default", name); }
  void NewClaim(const std::string& name, const std::string& size, json data_source = nullptr) {
    json c = {{"metadata", {{"name", name}}},
              {"spec", {{"accessModes", {"ReadWriteOnce"}}, {"resources", {{"requests", {{"storage", size}}}}}}}};
    if (!data_source.is_null()) c["spec"]["dataSource"] = data_source;
    Create("persistentvolumeclaims", "", "default", c);
  }
  void NewPod(const std::string& name, const std::string& claim) {
    Create("pods", "", "default",
           {{"metadata", {{"name", name}}},
            {"spec",
             {{"containers", {{{"name", "c"}, {"image", "busybox"}}}},
              {"volumes", {{{"name", "d"}, {"persistentVolumeClaim", {{"claimName", claim}}}}}}}}});
  }
  bool Scheduled(const std::string& pod) { return Str(Get("pods", "", "default", pod), {"spec", "nodeName"}) == kNode; }
  bool AttachedFor(const std::string& claim) {
    const std::string pv = Str(Claim(claim), {"spec", "volumeName"});
    if (pv.empty()) return false;
    json va = Get("volumeattachments", "storage.k8s.io", "",
                  client::AttachmentName(Str(Get("persistentvolumes", "", "", pv), {"spec", "csi", "volumeHandle"}),
                                         kDriver, kNode));
    return Field(Field(va, "status"), "attached") == true;
  }
  std::set<std::string> DriverVolumes() {
    ::csi::v1::ListVolumesResponse resp;
    EXPECT_TRUE(driver_->controller().ListVolumes(Ctx().get(), {}, &resp).ok());
    std::set<std::string> out;
    for (const auto& e : resp.entries()) out.insert(e.volume().volume_id());
    return out;
  }
  int DriverSnapshots() {
    ::csi::v1::ListSnapshotsResponse resp;
    EXPECT_TRUE(driver_->controller().ListSnapshots(Ctx().get(), {}, &resp).ok());
    return resp.entries_size();
  }
  template <class Pred>
  bool Eventually(Pred pred) {
    return berth::testing::Eventually(pred, absl::Seconds(90));
  }

  TempDir dir_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<apiserver::Registry> registry_;
  client::DriverDirectory directory_;
  std::unique_ptr<controllers::ControllerManager> manager_;
};

TEST_F(ControllersBerthCsiTest, ClaimPodSnapshotRestoreExpandAndDeleteOnTheRealDriver) {
  NewClaim("data", "1Gi");
  NewPod("app", "data");
  ASSERT_TRUE(Eventually([&] { return Scheduled("app"); })) << driver_->Log();
  // The pod may be bound a moment before the claim's status says Bound
  // (binding = volumeName + bind-completed, as in Kubernetes).
  ASSERT_TRUE(Eventually([&] { return Str(Claim("data"), {"status", "phase"}) == "Bound"; }));
  EXPECT_EQ(client::Annotation(Claim("data"), "volume.kubernetes.io/selected-node"), kNode);
  ASSERT_TRUE(Eventually([&] { return AttachedFor("data"); }));
  json pv = Get("persistentvolumes", "", "", Str(Claim("data"), {"spec", "volumeName"}));
  EXPECT_EQ(Str(pv, {"spec", "csi", "fsType"}), "xfs");
  // Pinned by berth-csi's own topology key; the controllers still find its node.
  auto typed_pv = api::types::Decode<api::types::PersistentVolume>(pv);
  ASSERT_TRUE(typed_pv.ok()) << typed_pv.status();
  EXPECT_EQ(controllers::VolumeNode(*registry_, *typed_pv), kNode);
  EXPECT_EQ(DriverVolumes().size(), 1u);
  // Capacity is published for the node's segment.
  ASSERT_TRUE(Eventually([&] {
    auto caps = registry_->List(K("csistoragecapacities", "storage.k8s.io"), "", {});
    return caps.ok() && caps->items.size() == 1u;
  }));

  // Snapshot, then restore into a new claim + pod.
  Create("volumesnapshots", "snapshot.storage.k8s.io", "default",
         {{"metadata", {{"name", "snap"}}}, {"spec", {{"source", {{"persistentVolumeClaimName", "data"}}}}}});
  ASSERT_TRUE(Eventually([&] {
    return Field(Field(Get("volumesnapshots", "snapshot.storage.k8s.io", "default", "snap"), "status"), "readyToUse") ==
           true;
  }));
  EXPECT_EQ(DriverSnapshots(), 1);
  NewClaim("restored", "1Gi", {{"apiGroup", "snapshot.storage.k8s.io"}, {"kind", "VolumeSnapshot"}, {"name", "snap"}});
  NewPod("app2", "restored");
  ASSERT_TRUE(Eventually([&] { return Scheduled("app2") && AttachedFor("restored"); }));
  EXPECT_EQ(DriverVolumes().size(), 2u);

  // Expand: the controller part runs; the filesystem is the node's turn.
  ASSERT_TRUE(registry_
                  ->Patch(K("persistentvolumeclaims"), "default", "restored",
                          R"({"spec":{"resources":{"requests":{"storage":"2Gi"}}}})", apiserver::PatchType::kMerge,
                          apiserver::Subresource::kMain)
                  .ok());
  ASSERT_TRUE(Eventually([&] {
    json c = Claim("restored");
    return Str(Get("persistentvolumes", "", "", Str(c, {"spec", "volumeName"})), {"spec", "capacity", "storage"}) ==
               "2Gi" &&
           Str(c, {"status", "allocatedResourceStatuses", "storage"}) == "NodeResizePending";
  }));

  // Tear everything down: nothing may stay behind in the driver.
  for (const char* pod : {"app", "app2"}) ASSERT_TRUE(registry_->Delete(K("pods"), "default", pod, PodGone()).ok());
  ASSERT_TRUE(Eventually([&] {
    auto vas = registry_->List(K("volumeattachments", "storage.k8s.io"), "", {});
    return vas.ok() && vas->items.empty();
  }));
  ASSERT_TRUE(registry_->Delete(K("volumesnapshots", "snapshot.storage.k8s.io"), "default", "snap").ok());
  for (const char* claim : {"data", "restored"}) {
    ASSERT_TRUE(registry_->Delete(K("persistentvolumeclaims"), "default", claim).ok());
  }
  ASSERT_TRUE(Eventually([&] {
    auto pvs = registry_->List(K("persistentvolumes"), "", {});
    return pvs.ok() && pvs->items.empty() && DriverVolumes().empty() && DriverSnapshots() == 0;
  })) << driver_->Log();
}

TEST_F(ControllersBerthCsiTest, RestartsBetweenStepsConvergeWithoutDuplicates) {
  NewClaim("data", "1Gi");
  NewPod("app", "data");
  // Stop the controllers as soon as the scheduler has chosen the node (the
  // provisioner may be mid-CreateVolume), start new ones.
  ASSERT_TRUE(
      Eventually([&] { return !client::Annotation(Claim("data"), "volume.kubernetes.io/selected-node").empty(); }));
  StopManager();
  StartManager();
  ASSERT_TRUE(Eventually([&] { return Scheduled("app"); }));
  // Again while attaching.
  StopManager();
  StartManager();
  ASSERT_TRUE(Eventually([&] { return AttachedFor("data"); }));
  EXPECT_EQ(DriverVolumes().size(), 1u) << "a restart must not create a second volume";

  // Restart while the snapshot is being cut and while deleting.
  Create("volumesnapshots", "snapshot.storage.k8s.io", "default",
         {{"metadata", {{"name", "snap"}}}, {"spec", {{"source", {{"persistentVolumeClaimName", "data"}}}}}});
  StopManager();
  StartManager();
  ASSERT_TRUE(Eventually([&] {
    return Field(Field(Get("volumesnapshots", "snapshot.storage.k8s.io", "default", "snap"), "status"), "readyToUse") ==
           true;
  }));
  EXPECT_EQ(DriverSnapshots(), 1);
  ASSERT_TRUE(registry_->Delete(K("pods"), "default", "app", PodGone()).ok());
  ASSERT_TRUE(registry_->Delete(K("volumesnapshots", "snapshot.storage.k8s.io"), "default", "snap").ok());
  ASSERT_TRUE(registry_->Delete(K("persistentvolumeclaims"), "default", "data").ok());
  StopManager();
  StartManager();
  ASSERT_TRUE(Eventually([&] {
    auto pvs = registry_->List(K("persistentvolumes"), "", {});
    return pvs.ok() && pvs->items.empty() && DriverVolumes().empty() && DriverSnapshots() == 0;
  })) << driver_->Log();
}

}  // namespace
}  // namespace berth::testing
