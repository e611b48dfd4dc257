// The provisioner's safety rules (issue 19), against a fake CSI driver over
// a real unix socket with the binder alongside: per-driver ownership,
// static volumes with reclaim policy Delete, data source validation and
// cloning protection, and waiting out a driver outage.
#include <set>

#include "controllers/testing/provisioner_fixture.h"
#include "controllers/volume/data_source.h"
#include "gmock/gmock.h"

namespace berth::controllers {

using namespace ::berth::client;  // the controllers' own client library
namespace {

using testing::Claim;
using ::testing::Contains;
using testing::Eventually;
using ::testing::HasSubstr;
using testing::K;
using testing::kDriver;
using ::testing::Not;

constexpr char kOther[] = "other.csi.berth.io";
constexpr char kSnapGroup[] = "snapshot.storage.k8s.io";

class ProvisionerRulesTest : public testing::ProvisionerTest {
 protected:
  // A volume in the fake driver, made outside Kubernetes; returns its handle.
  std::string DriverVolume(const std::string& name, int64_t bytes = 1LL << 30) {
    ::csi::v1::CreateVolumeRequest req;
    req.set_name(name);
    req.mutable_capacity_range()->set_required_bytes(bytes);
    ::csi::v1::CreateVolumeResponse resp;
    EXPECT_TRUE(driver_->CreateVolume(nullptr, &req, &resp).ok());
    return resp.volume().volume_id();
  }
  json StaticVolume(const std::string& name, const std::string& driver, const std::string& handle,
                    const std::string& policy = "Delete") {
    return {{"metadata", {{"name", name}}},
            {"spec",
             {{"capacity", {{"storage", "1Gi"}}},
              {"accessModes", {"ReadWriteOnce"}},
              {"persistentVolumeReclaimPolicy", policy},
              {"storageClassName", "fast"},
              {"csi", {{"driver", driver}, {"volumeHandle", handle}}}}}};
  }
  // Events about `name` with `reason`, newest last.
  std::vector<std::string> Events(const std::string& name, const std::string& reason) {
    std::vector<std::string> out;
    auto list = registry_->List(K("events"), "", {});
    if (!list.ok()) return out;
    for (const auto& e : list->items) {
      if (Str(e, {"involvedObject", "name"}) == name && Str(e, {"reason"}) == reason)
        out.push_back(Str(e, {"message"}));
    }
    return out;
  }
  void Patch(std::string_view resource, std::string_view group, const std::string& ns, const std::string& name,
             const json& patch, apiserver::Subresource sub = apiserver::Subresource::kMain) {
    auto st = registry_->Patch(K(resource, group), ns, name, patch.dump(), apiserver::PatchType::kMerge, sub);
    ASSERT_TRUE(st.ok()) << st.status();
  }
  json Finalizers(std::string_view resource, const std::string& ns, const std::string& name) {
    return Field(Field(Get(resource, ns, name), "metadata"), "finalizers");
  }
  std::string Key(const std::string& name) { return "default/" + name; }
};

// --- 1. Ownership is per driver ---------------------------------------------

TEST_F(ProvisionerRulesTest, AnotherDriversClaimIsNeverTouchedNotEvenItsFinalizer) {
  Create("storageclasses", "storage.k8s.io", "",
         {{"metadata", {{"name", "theirs"}}}, {"provisioner", kOther}, {"reclaimPolicy", "Delete"}});
  Start();
  // Another provisioner's claim, its CreateVolume in flight.
  json c = Claim("data", "theirs");
  c["metadata"]["annotations"] = {{kAnnStorageProvisioner, kOther}, {kAnnProvisioningNode, "node-x"}};
  c["metadata"]["finalizers"] = {kProvisioningFinalizer};
  Create("persistentvolumeclaims", "", "default", c);
  ASSERT_TRUE(Eventually([&] { return provisioner_->SyncClaim(Key("data")).ok(); }));
  EXPECT_THAT(Finalizers("persistentvolumeclaims", "default", "data"), Contains(kProvisioningFinalizer));
  // Deleted: still theirs to clean up.
  ASSERT_TRUE(registry_->Delete(K("persistentvolumeclaims"), "default", "data").ok());
  ASSERT_TRUE(Eventually([&] { return Deleting(Get("persistentvolumeclaims", "default", "data")); }));
  EXPECT_TRUE(provisioner_->SyncClaim(Key("data")).ok());
  json after = Get("persistentvolumeclaims", "default", "data");
  EXPECT_THAT(after["metadata"]["finalizers"], Contains(kProvisioningFinalizer));
  EXPECT_EQ(Annotation(after, kAnnProvisioningNode), "node-x");
  EXPECT_EQ(driver_->create_calls(), 0);
  EXPECT_TRUE(Events("data", "ProvisioningCleanupBlocked").empty());
}

TEST_F(ProvisionerRulesTest, AnotherDriversVolumesAreNeverReclaimed) {
  Class("fast");
  Start();
  const std::string handle = DriverVolume("shared-name");
  // Provisioned by another driver, and a static volume of another driver,
  // both Released with Delete: not ours.
  json provisioned = StaticVolume("theirs-provisioned", kOther, handle);
  provisioned["metadata"]["annotations"] = {{kAnnProvisionedBy, kOther}};
  provisioned["metadata"]["finalizers"] = {kProvisionerFinalizer};
  provisioned["spec"]["claimRef"] = {{"namespace", "default"}, {"name", "gone"}, {"uid", "u-gone"}};
  Create("persistentvolumes", "", "", provisioned);
  json fixed = StaticVolume("theirs-static", kOther, handle);
  fixed["spec"]["claimRef"] = {{"namespace", "default"}, {"name", "gone"}, {"uid", "u-gone"}};
  Create("persistentvolumes", "", "", fixed);
  ASSERT_TRUE(Eventually([&] {
    return Str(Get("persistentvolumes", "", "theirs-static"), {"status", "phase"}) == "Released" &&
           Str(Get("persistentvolumes", "", "theirs-provisioned"), {"status", "phase"}) == "Released";
  }));
  for (const char* pv : {"theirs-provisioned", "theirs-static"}) EXPECT_TRUE(provisioner_->SyncVolume(pv).ok());
  EXPECT_FALSE(Get("persistentvolumes", "", "theirs-provisioned").is_null());
  EXPECT_FALSE(Get("persistentvolumes", "", "theirs-static").is_null());
  EXPECT_THAT(Finalizers("persistentvolumes", "", "theirs-static"), Not(Contains(kProvisionerFinalizer)));
  EXPECT_EQ(driver_->volumes().size(), 1u);
}

TEST_F(ProvisionerRulesTest, AClaimHandedToADriverStaysItsWhileItsVolumeMayBeInFlight) {
  Class("fast");
  driver_->SetCreateDelay(absl::Seconds(2));
  Start();
  Create("persistentvolumeclaims", "", "default", Claim("data", "fast"));
  ASSERT_TRUE(Eventually([&] { return driver_->create_calls() >= 1; }));
  // The class is replaced by one of another driver while CreateVolume runs.
  ASSERT_TRUE(registry_->Delete(K("storageclasses", "storage.k8s.io"), "", "fast").ok());
  Create("storageclasses", "storage.k8s.io", "",
         {{"metadata", {{"name", "fast"}}}, {"provisioner", kOther}, {"reclaimPolicy", "Delete"}});
  ASSERT_TRUE(binder_->SyncClaim(Key("data")).ok());
  EXPECT_EQ(Annotation(Get("persistentvolumeclaims", "default", "data"), kAnnStorageProvisioner), kDriver);
}

TEST_F(ProvisionerRulesTest, AClaimTakenOverAndThenBoundOrHandedElsewhereBeforeItsFinalizerIsForgotten) {
  // Not provisionable yet (its provisioner secret is missing): taken over
  // in memory, nothing written.
  ClassNeedingSecret("fast", "missing");
  Start();
  Create("persistentvolumeclaims", "", "default", Claim("bound", "fast"));
  ASSERT_TRUE(Eventually([&] { return provisioner_->TakenOverCount() == 1; }));
  // A volume the binder finds: the claim binds to it, and the provisioner
  // lets go of what it held.
  Create("persistentvolumes", "", "", StaticVolume("found", kDriver, "h-found"));
  ASSERT_TRUE(Eventually([&] { return ClaimPhase("bound") == "Bound"; }));
  EXPECT_TRUE(Eventually([&] { return provisioner_->TakenOverCount() == 0; }));
  // Another claim, whose class then names another driver: handed to that
  // one by the annotations, and let go of here.
  Create("persistentvolumeclaims", "", "default", Claim("moved", "fast"));
  ASSERT_TRUE(Eventually([&] { return provisioner_->TakenOverCount() == 1; }));
  ASSERT_TRUE(registry_->Delete(K("storageclasses", "storage.k8s.io"), "", "fast").ok());
  Create("storageclasses", "storage.k8s.io", "",
         {{"metadata", {{"name", "fast"}}}, {"provisioner", kOther}, {"reclaimPolicy", "Delete"}});
  // The class's add queues the claim; the sync below makes that step
  // happen now. Between the delete and the add the informer holds no class.
  ASSERT_TRUE(Eventually([&] { return Str(classes_->GetByKey("fast").value_or(json()), {"provisioner"}) == kOther; }));
  ASSERT_TRUE(binder_->SyncClaim(Key("moved")).ok());
  EXPECT_EQ(Annotation(Get("persistentvolumeclaims", "default", "moved"), kAnnStorageProvisioner), kOther);
  EXPECT_TRUE(Eventually([&] { return provisioner_->TakenOverCount() == 0; }));
  EXPECT_EQ(driver_->create_calls(), 0);
}

// --- 2. Static volumes with reclaim policy Delete ----------------------------

TEST_F(ProvisionerRulesTest, StaticVolumeWithDeleteIsDeletedThroughTheDriverWhenItsClaimGoes) {
  Class("fast");
  Start();
  const std::string handle = DriverVolume("handmade");
  Create("persistentvolumes", "", "", StaticVolume("static-pv", kDriver, handle));
  json c = Claim("data", "fast");
  c["spec"]["volumeName"] = "static-pv";
  Create("persistentvolumeclaims", "", "default", c);
  ASSERT_TRUE(Eventually([&] { return ClaimPhase("data") == "Bound"; }));
  ASSERT_TRUE(
      Eventually([&] { return HasFinalizer(Get("persistentvolumes", "", "static-pv"), kProvisionerFinalizer); }));
  ASSERT_TRUE(registry_->Delete(K("persistentvolumeclaims"), "default", "data").ok());
  ASSERT_TRUE(Eventually([&] { return Get("persistentvolumes", "", "static-pv").is_null(); }));
  EXPECT_TRUE(driver_->volumes().empty());
}

TEST_F(ProvisionerRulesTest, StaticVolumeDeletedBeforeItWasEverBoundKeepsItsStorage) {
  Class("fast");
  Start();
  const std::string handle = DriverVolume("handmade");
  Create("persistentvolumes", "", "", StaticVolume("static-pv", kDriver, handle));
  ASSERT_TRUE(Eventually([&] {
    return Str(Get("persistentvolumes", "", "static-pv"), {"status", "phase"}) == "Available";
  }));
  EXPECT_THAT(Finalizers("persistentvolumes", "", "static-pv"), Not(Contains(kProvisionerFinalizer)));
  ASSERT_TRUE(registry_->Delete(K("persistentvolumes"), "", "static-pv").ok());
  ASSERT_TRUE(Eventually([&] { return Get("persistentvolumes", "", "static-pv").is_null(); }));
  EXPECT_EQ(driver_->volumes().size(), 1u);
}

TEST_F(ProvisionerRulesTest, StaticVolumeWithRetainKeepsItsStorage) {
  Class("fast");
  Start();
  const std::string handle = DriverVolume("handmade");
  Create("persistentvolumes", "", "", StaticVolume("static-pv", kDriver, handle, "Retain"));
  json c = Claim("data", "fast");
  c["spec"]["volumeName"] = "static-pv";
  Create("persistentvolumeclaims", "", "default", c);
  ASSERT_TRUE(Eventually([&] { return ClaimPhase("data") == "Bound"; }));
  ASSERT_TRUE(registry_->Delete(K("persistentvolumeclaims"), "default", "data").ok());
  ASSERT_TRUE(Eventually([&] {
    return Str(Get("persistentvolumes", "", "static-pv"), {"status", "phase"}) == "Released";
  }));
  EXPECT_TRUE(provisioner_->SyncVolume("static-pv").ok());
  EXPECT_FALSE(Get("persistentvolumes", "", "static-pv").is_null());
  EXPECT_EQ(driver_->volumes().size(), 1u);
}

TEST_F(ProvisionerRulesTest, AVolumeStillAttachedIsNotDeleted) {
  Class("fast");
  Start();
  Create("persistentvolumeclaims", "", "default", Claim("data", "fast"));
  ASSERT_TRUE(Eventually([&] { return ClaimPhase("data") == "Bound"; }));
  const std::string pv = Str(Get("persistentvolumeclaims", "default", "data"), {"spec", "volumeName"});
  Create("volumeattachments", "storage.k8s.io", "",
         {{"metadata", {{"name", "va"}}},
          {"spec", {{"attacher", kDriver}, {"nodeName", "node-a"}, {"source", {{"persistentVolumeName", pv}}}}}});
  ASSERT_TRUE(registry_->Delete(K("persistentvolumeclaims"), "default", "data").ok());
  ASSERT_TRUE(Eventually([&] { return !Events(pv, "VolumeFailedDelete").empty(); }));
  EXPECT_THAT(Events(pv, "VolumeFailedDelete").back(), HasSubstr("is still attached to node node-a"));
  EXPECT_EQ(driver_->volumes().size(), 1u);
  ASSERT_TRUE(registry_->Delete(K("volumeattachments", "storage.k8s.io"), "", "va").ok());
  ASSERT_TRUE(Eventually([&] { return Get("persistentvolumes", "", pv).is_null(); }, absl::Seconds(20)));
  EXPECT_TRUE(driver_->volumes().empty());
}

// --- 6. A driver outage --------------------------------------------------------

TEST_F(ProvisionerRulesTest, ADriverOutageParksClaimsWithoutRetryingThemAndResumesThemAllAtOnce) {
  Class("fast");
  Start();
  ASSERT_TRUE(Eventually([&] { return monitor_->Up(kDriver, ""); }));
  CrashDriver();
  constexpr int kClaims = 50;
  for (int i = 0; i < kClaims; ++i)
    Create("persistentvolumeclaims", "", "default", Claim("c" + std::to_string(i), "fast"));
  // Every claim was looked at once and is now waiting: few calls reached
  // the dead socket (the first of each worker), the rest were not made.
  ASSERT_TRUE(Eventually([&] {
    DriverMonitor::Stats s = monitor_->stats();
    return s.connection_failures + s.skipped >= kClaims;
  }));
  ASSERT_TRUE(Eventually([&] { return Events("c" + std::to_string(kClaims - 1), "ProvisioningFailed").size() == 1u; }));
  EXPECT_THAT(Events("c0", "ProvisioningFailed").front(), HasSubstr("to come back"));
  const DriverMonitor::Stats down = monitor_->stats();
  EXPECT_LE(down.connection_failures, 3) << "at most one failed call per worker";
  // Waiting is not failing: no claim is tried again while the driver is
  // down (it is not in any backoff, it is parked).
  const int64_t attempts = down.connection_failures + down.skipped;
  ASSERT_TRUE(Eventually([&] { return monitor_->stats().failed_probes >= down.failed_probes + 3; }));
  EXPECT_EQ(monitor_->stats().connection_failures + monitor_->stats().skipped, attempts);
  EXPECT_EQ(driver_->create_calls(), 0);
  // Back, and registered again: all of them at once.
  RestartDriver();
  const absl::Time back = absl::Now();
  RegisterDriver();
  ASSERT_TRUE(Eventually([&] {
    for (int i = 0; i < kClaims; ++i) {
      if (ClaimPhase("c" + std::to_string(i)) != "Bound") return false;
    }
    return true;
  }));
  EXPECT_LT(absl::Now() - back, absl::Seconds(5));
  EXPECT_EQ(driver_->create_calls(), kClaims) << "each claim's CreateVolume once, after the outage";
  EXPECT_GE(monitor_->stats().resumed, kClaims - 3);
}

TEST_F(ProvisionerRulesTest, ADeletionWaitsOutADriverOutageToo) {
  Class("fast");
  Start();
  Create("persistentvolumeclaims", "", "default", Claim("data", "fast"));
  ASSERT_TRUE(Eventually([&] { return ClaimPhase("data") == "Bound"; }));
  const std::string pv = Str(Get("persistentvolumeclaims", "default", "data"), {"spec", "volumeName"});
  CrashDriver();
  ASSERT_TRUE(registry_->Delete(K("persistentvolumeclaims"), "default", "data").ok());
  ASSERT_TRUE(Eventually([&] { return !Events(pv, "VolumeFailedDelete").empty(); }));
  EXPECT_THAT(Events(pv, "VolumeFailedDelete").back(), HasSubstr("unreachable"));
  EXPECT_FALSE(Get("persistentvolumes", "", pv).is_null());
  RestartDriver();
  // No registration this time (a driver restarted under the same socket):
  // a probe notices it.
  ASSERT_TRUE(Eventually([&] { return Get("persistentvolumes", "", pv).is_null(); }));
  EXPECT_TRUE(driver_->volumes().empty());
}

// --- 5. Data sources ---------------------------------------------------------

class DataSourceTest : public ProvisionerRulesTest {
 protected:
  // A ready snapshot "snap" bound to content "content" of `driver`.
  void Snapshot(const std::string& driver = kDriver, const std::string& restore_size = "1Gi") {
    Create("volumesnapshots", kSnapGroup, "default",
           {{"metadata", {{"name", "snap"}, {"finalizers", {"test/keep"}}}},
            {"spec", {{"source", {{"volumeSnapshotContentName", "content"}}}}}});
    const std::string uid = Uid(GetSnapshot());
    Create("volumesnapshotcontents", kSnapGroup, "",
           {{"metadata", {{"name", "content"}}},
            {"spec",
             {{"driver", driver},
              {"deletionPolicy", "Delete"},
              {"sourceVolumeMode", "Filesystem"},
              {"source", {{"snapshotHandle", "snap-handle"}}},
              {"volumeSnapshotRef", {{"name", "snap"}, {"namespace", "default"}, {"uid", uid}}}}}});
    SnapshotStatus(
        {{"boundVolumeSnapshotContentName", "content"}, {"readyToUse", true}, {"restoreSize", restore_size}});
  }
  json GetSnapshot() {
    auto got = registry_->Get(K("volumesnapshots", kSnapGroup), "default", "snap");
    return got.ok() ? *got : json();
  }
  void SnapshotStatus(const json& status) {
    Patch("volumesnapshots", kSnapGroup, "default", "snap", {{"status", status}}, apiserver::Subresource::kStatus);
  }
  json Restore(const std::string& name = "restored", const std::string& size = "1Gi") {
    json c = Claim(name, "fast", size);
    c["metadata"]["namespace"] = "default";
    c["metadata"]["uid"] = "u-" + name;
    c["spec"]["dataSource"] = {{"apiGroup", kSnapGroup}, {"kind", "VolumeSnapshot"}, {"name", "snap"}};
    return c;
  }
  json Clone(const std::string& source, const std::string& size = "1Gi") {
    json c = Claim("clone", "fast", size);
    c["metadata"]["namespace"] = "default";
    c["metadata"]["uid"] = "u-clone";
    c["spec"]["dataSource"] = {{"kind", "PersistentVolumeClaim"}, {"name", source}};
    return c;
  }
  json Fast() { return {{"metadata", {{"name", "fast"}}}, {"provisioner", kDriver}}; }
  // The error BuildRequest gives for `claim`, "" when it succeeds.
  std::string Refusal(const json& claim, const json& sc) {
    auto req = provisioner_->BuildRequest(claim, sc, "");
    return req.ok() ? "" : std::string(req.status().message());
  }
};

TEST_F(DataSourceTest, ASnapshotIsCheckedBeforeItIsRestored) {
  Class("fast");
  Start();
  EXPECT_THAT(Refusal(Restore(), Fast()), HasSubstr("error getting snapshot snap from api server"));
  Snapshot();
  auto req = provisioner_->BuildRequest(Restore(), Fast(), "");
  ASSERT_TRUE(req.ok()) << req.status();
  EXPECT_EQ(req->volume_content_source().snapshot().snapshot_id(), "snap-handle");
  // Smaller than the snapshot.
  EXPECT_THAT(Refusal(Restore("restored", "512Mi"), Fast()), HasSubstr("is less than the size 1073741824"));
  // Another driver's class.
  json other = Fast();
  other["provisioner"] = kOther;
  EXPECT_THAT(Refusal(Restore(), other),
              HasSubstr("is handled by a different CSI driver than requested by StorageClass fast"));
  // Another volume mode, unless the content allows it.
  json block = Restore();
  block["spec"]["volumeMode"] = "Block";
  EXPECT_THAT(Refusal(block, Fast()), HasSubstr("modifies the mode of the source volume"));
  Patch("volumesnapshotcontents", kSnapGroup, "", "content",
        {{"metadata", {{"annotations", {{"snapshot.storage.kubernetes.io/allow-volume-mode-change", "true"}}}}}});
  EXPECT_EQ(Refusal(block, Fast()), "");
  // In another namespace.
  json remote = Restore();
  remote["spec"]["dataSourceRef"] = remote["spec"]["dataSource"];
  remote["spec"]["dataSourceRef"]["namespace"] = "elsewhere";
  EXPECT_THAT(Refusal(remote, Fast()), HasSubstr("cross-namespace data sources need a ReferenceGrant"));
  // Not ready yet.
  SnapshotStatus({{"readyToUse", false}});
  EXPECT_THAT(Refusal(Restore(), Fast()), HasSubstr("snapshot snap is not Ready"));
  SnapshotStatus({{"readyToUse", true}});
  // A content naming another snapshot.
  Patch("volumesnapshotcontents", kSnapGroup, "", "content", {{"spec", {{"volumeSnapshotRef", {{"uid", "other"}}}}}});
  EXPECT_THAT(Refusal(Restore(), Fast()), HasSubstr("is bound to a different snapshot"));
  Patch("volumesnapshotcontents", kSnapGroup, "", "content",
        {{"spec", {{"volumeSnapshotRef", {{"uid", Uid(GetSnapshot())}}}}}});
  // Being deleted: refused, unless this claim's provisioning had started.
  ASSERT_TRUE(registry_->Delete(K("volumesnapshots", kSnapGroup), "default", "snap").ok());
  EXPECT_THAT(Refusal(Restore(), Fast()), HasSubstr("snapshot snap is being deleted"));
  json started = Restore();
  started["metadata"]["finalizers"] = {kProvisioningFinalizer};
  EXPECT_EQ(Refusal(started, Fast()), "");
}

TEST_F(DataSourceTest, AClaimIsCheckedBeforeItIsCloned) {
  Class("fast");
  Class("later", "WaitForFirstConsumer");
  Start();
  EXPECT_THAT(Refusal(Clone("src"), Fast()), HasSubstr("error getting PVC src"));
  Create("persistentvolumeclaims", "", "default", Claim("src", "fast", "1Gi"));
  Create("persistentvolumeclaims", "", "default", Claim("unbound", "later", "1Gi"));
  ASSERT_TRUE(Eventually([&] { return ClaimPhase("src") == "Bound" && ClaimPhase("unbound") == "Pending"; }));
  auto req = provisioner_->BuildRequest(Clone("src"), Fast(), "");
  ASSERT_TRUE(req.ok()) << req.status();
  const std::string pv = Str(Get("persistentvolumeclaims", "default", "src"), {"spec", "volumeName"});
  EXPECT_EQ(req->volume_content_source().volume().volume_id(), "fake-" + pv);
  EXPECT_THAT(Refusal(Clone("unbound"), Fast()), HasSubstr("must have a status of Bound"));
  EXPECT_THAT(Refusal(Clone("src", "512Mi"), Fast()), HasSubstr("must be greater than or equal in size"));
  json other = Fast();
  other["provisioner"] = kOther;
  EXPECT_THAT(Refusal(Clone("src"), other), HasSubstr("claim in dataSource not bound or invalid"));
  json block = Clone("src");
  block["spec"]["volumeMode"] = "Block";
  EXPECT_THAT(Refusal(block, Fast()), HasSubstr("must have the same volume mode for cloning"));
  Patch("persistentvolumeclaims", "", "default", "src",
        {{"metadata", {{"finalizers", {kPvcProtection, "test/keep"}}}}});
  ASSERT_TRUE(registry_->Delete(K("persistentvolumeclaims"), "default", "src").ok());
  EXPECT_THAT(Refusal(Clone("src"), Fast()), HasSubstr("the PVC DataSource src is currently being deleted"));
}

TEST_F(DataSourceTest, AClaimWithAnUnusableSourceStaysPendingWithAnEventAndIsRetried) {
  Class("fast");
  Start();
  Snapshot();
  SnapshotStatus({{"readyToUse", false}});
  json c = Claim("restored", "fast");
  c["spec"]["dataSource"] = {{"apiGroup", kSnapGroup}, {"kind", "VolumeSnapshot"}, {"name", "snap"}};
  Create("persistentvolumeclaims", "", "default", c);
  ASSERT_TRUE(Eventually([&] { return !Events("restored", "ProvisioningFailed").empty(); }));
  EXPECT_THAT(Events("restored", "ProvisioningFailed").back(),
              HasSubstr("failed to provision volume with StorageClass \"fast\": error getting handle for DataSource "
                        "Type VolumeSnapshot by Name snap: snapshot snap is not Ready"));
  EXPECT_EQ(ClaimPhase("restored"), "Pending");
  EXPECT_EQ(driver_->create_calls(), 0);
  // Ready: the next retry restores it.
  SnapshotStatus({{"readyToUse", true}});
  ASSERT_TRUE(Eventually([&] { return ClaimPhase("restored") == "Bound"; }, absl::Seconds(20)));
  EXPECT_EQ(driver_->last_request()->volume_content_source().snapshot().snapshot_id(), "snap-handle");
}

TEST_F(DataSourceTest, AClaimBeingClonedCannotGoUntilTheCloneIsBound) {
  Class("fast");
  Start();
  Create("persistentvolumeclaims", "", "default", Claim("src", "fast"));
  ASSERT_TRUE(Eventually([&] { return ClaimPhase("src") == "Bound"; }));
  driver_->SetCreateDelay(absl::Milliseconds(1500));
  json clone = Claim("clone", "fast");
  clone["spec"]["dataSource"] = {{"kind", "PersistentVolumeClaim"}, {"name", "src"}};
  Create("persistentvolumeclaims", "", "default", clone);
  ASSERT_TRUE(Eventually(
      [&] { return HasFinalizer(Get("persistentvolumeclaims", "default", "src"), kCloningProtectionFinalizer); }));
  ASSERT_TRUE(registry_->Delete(K("persistentvolumeclaims"), "default", "src").ok());
  EXPECT_NE(ClaimPhase("src"), "<gone>");
  ASSERT_TRUE(Eventually([&] { return ClaimPhase("clone") == "Bound"; }));
  // Bound: the source is released and goes, with its volume.
  ASSERT_TRUE(Eventually([&] { return ClaimPhase("src") == "<gone>" && driver_->volumes().size() == 1u; }));
}

TEST_F(DataSourceTest, CloningProtectionComesOffOnceNoPendingClaimClones) {
  Class("fast");
  Start();
  Create("persistentvolumeclaims", "", "default", Claim("src", "fast"));
  ASSERT_TRUE(Eventually([&] { return ClaimPhase("src") == "Bound"; }));
  json clone = Claim("clone", "fast");
  clone["spec"]["dataSource"] = {{"kind", "PersistentVolumeClaim"}, {"name", "src"}};
  Create("persistentvolumeclaims", "", "default", clone);
  ASSERT_TRUE(Eventually([&] { return ClaimPhase("clone") == "Bound"; }));
  ASSERT_TRUE(Eventually(
      [&] { return !HasFinalizer(Get("persistentvolumeclaims", "default", "src"), kCloningProtectionFinalizer); }));
}

}  // namespace
}  // namespace berth::controllers
