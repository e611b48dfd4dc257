// Provisioning flows against a fake CSI driver over a real unix socket, with
// the PV binder running alongside as in berth up.
#include "controllers/volume/provisioner.h"

#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/strings.h"
#include "common/testing/eventually.h"
#include "common/testing/temp_dir.h"
#include "controllers/testing/fake_csi.h"
#include "controllers/testing/helpers.h"
#include "controllers/testing/provisioner_fixture.h"
#include "controllers/volume/pv_binder.h"
#include "controllers/volume/resizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace berth::controllers {

using namespace ::berth::client;  // the controllers' own client library
namespace {

using testing::Claim;
using testing::Eventually;
using testing::K;
using testing::kDriver;
using testing::ProvisionerTest;
using testing::Settle;

TEST_F(ProvisionerTest, ProvisionsBindsAndDeletesWithTheReclaimPolicy) {
  Create("secrets", "", "default", {{"metadata", {{"name", "creds"}}}, {"stringData", {{"token", "s3cr3t"}}}});
  Class("fast", "Immediate",
        {{"csi.storage.k8s.io/fstype", "xfs"},
         {"tier", "gold"},
         {"csi.storage.k8s.io/provisioner-secret-name", "creds"},
         {"csi.storage.k8s.io/provisioner-secret-namespace", "${pvc.namespace}"},
         {"csi.storage.k8s.io/node-stage-secret-name", "creds"},
         {"csi.storage.k8s.io/node-stage-secret-namespace", "default"}});
  Start();
  Create("persistentvolumeclaims", "", "default", Claim("data", "fast", "1500Mi"));
  ASSERT_TRUE(Eventually([&] { return ClaimPhase("data") == "Bound"; }));
  // The created volume took space: the capacity of the driver's node (none
  // here: a controller without topology) is asked again.
  EXPECT_FALSE(CapacityChanges().empty());
  EXPECT_THAT(CapacityChanges(), ::testing::Each(""));
  const size_t after_create = CapacityChanges().size();
  json claim = Get("persistentvolumeclaims", "default", "data");
  const std::string pv_name = "pvc-" + claim["metadata"]["uid"].get<std::string>();
  EXPECT_EQ(claim["spec"]["volumeName"], pv_name);
  EXPECT_THAT(claim["metadata"]["finalizers"], ::testing::Not(::testing::Contains(kProvisioningFinalizer)));
  json pv = Get("persistentvolumes", "", pv_name);
  EXPECT_EQ(pv["metadata"]["annotations"][kAnnProvisionedBy], kDriver);
  EXPECT_EQ(pv["spec"]["csi"]["volumeHandle"], "fake-" + pv_name);
  EXPECT_EQ(pv["spec"]["csi"]["fsType"], "xfs");
  EXPECT_EQ(pv["spec"]["csi"]["volumeAttributes"]["fake"], "yes");
  EXPECT_EQ(pv["spec"]["csi"]["nodeStageSecretRef"]["name"], "creds");
  EXPECT_EQ(pv["spec"]["persistentVolumeReclaimPolicy"], "Delete");
  EXPECT_EQ(pv["spec"]["capacity"]["storage"], "1500Mi");

  auto req = driver_->last_request();
  ASSERT_TRUE(req.has_value());
  EXPECT_EQ(req->name(), pv_name);
  EXPECT_EQ(req->capacity_range().required_bytes(), 1500LL << 20);
  EXPECT_EQ(req->parameters().at("tier"), "gold");
  EXPECT_EQ(req->parameters().count("csi.storage.k8s.io/fstype"), 0u);  // reserved keys stay out
  EXPECT_EQ(req->secrets().at("token"), "s3cr3t");
  ASSERT_EQ(req->volume_capabilities_size(), 1);
  EXPECT_EQ(req->volume_capabilities(0).mount().fs_type(), "xfs");
  EXPECT_EQ(req->volume_capabilities(0).access_mode().mode(),
            ::csi::v1::VolumeCapability::AccessMode::SINGLE_NODE_WRITER);

  ASSERT_TRUE(registry_->Delete(K("persistentvolumeclaims"), "default", "data").ok());
  ASSERT_TRUE(Eventually([&] { return Get("persistentvolumes", "", pv_name).is_null(); }));
  EXPECT_TRUE(driver_->volumes().empty());
  // And again after the delete (a DeleteVolume repeated by a second sync
  // of the released PV counts again).
  EXPECT_GT(CapacityChanges().size(), after_create);
  EXPECT_THAT(CapacityChanges(), ::testing::Each(""));
}

TEST_F(ProvisionerTest, TheVolumeIsCreatedBoundToItsClaim) {
  Class("fast");
  Start();
  auto listed = registry_->List(K("persistentvolumes"), "", {});
  ASSERT_TRUE(listed.ok()) << listed.status();
  auto watch = registry_->Watch(K("persistentvolumes"), "", std::to_string(listed->resource_version), {});
  ASSERT_TRUE(watch.ok()) << watch.status();
  Create("persistentvolumeclaims", "", "default", Claim("data", "fast"));
  ASSERT_TRUE(Eventually([&] { return ClaimPhase("data") == "Bound"; }));
  const json claim = Get("persistentvolumeclaims", "default", "data");
  // Its first state already names the claim by uid and is Bound: the binder
  // has no volume status to write (one write fewer per claim).
  std::optional<store::Event> added = watch->watcher->Next(absl::Seconds(10));
  ASSERT_TRUE(added.has_value());
  EXPECT_EQ(added->type, store::EventType::kAdded);
  const json& pv = *added->object;
  EXPECT_EQ(pv["metadata"]["name"], "pvc-" + claim["metadata"]["uid"].get<std::string>());
  EXPECT_EQ(pv["spec"]["claimRef"]["uid"], claim["metadata"]["uid"]);
  EXPECT_EQ(pv["status"]["phase"], "Bound");
  EXPECT_FALSE(pv["status"].value("lastPhaseTransitionTime", "").empty());
}

// The versions of claim `name` a watch from now sees until one is Bound.
class ClaimVersionsTest : public ProvisionerTest {
 protected:
  std::vector<json> VersionsUntilBound(const std::string& name) {
    std::vector<json> versions;
    auto listed = registry_->List(K("persistentvolumeclaims"), "", {});
    EXPECT_TRUE(listed.ok()) << listed.status();
    if (!listed.ok()) return versions;
    auto watch = registry_->Watch(K("persistentvolumeclaims"), "", std::to_string(listed->resource_version), {});
    EXPECT_TRUE(watch.ok()) << watch.status();
    if (!watch.ok()) return versions;
    Create("persistentvolumeclaims", "", "default", Claim(name, "fast"));
    while (true) {
      std::optional<store::Event> e = watch->watcher->Next(absl::Seconds(30));
      EXPECT_TRUE(e.has_value()) << "no Bound version of " << name << " after " << versions.size();
      if (!e.has_value()) return versions;
      versions.push_back(*e->object);
      if (versions.back().value("status", json::object()).value("phase", "") == "Bound") return versions;
    }
  }
};

TEST_F(ClaimVersionsTest, AClaimTakenOverInMemoryIsWrittenOnceWithItsAnnotationsAndFinalizer) {
  Class("fast");
  Start();
  const std::vector<json> versions = VersionsUntilBound("data");
  // Created; the provisioner's finalizer with the hand-over annotations (the
  // binder wrote nothing); bound. No version names our driver without our
  // finalizer before the volume exists.
  ASSERT_EQ(versions.size(), 3u) << json(versions).dump();
  EXPECT_EQ(Annotation(versions[0], kAnnStorageProvisioner), "");
  EXPECT_EQ(Annotation(versions[1], kAnnStorageProvisioner), kDriver);
  EXPECT_EQ(Annotation(versions[1], kAnnBetaStorageProvisioner), kDriver);
  EXPECT_TRUE(HasFinalizer(versions[1], kProvisioningFinalizer));
  EXPECT_EQ(Str(versions[1], {"spec", "volumeName"}), "");
  EXPECT_EQ(Annotation(versions[2], kAnnStorageProvisioner), kDriver);
  EXPECT_FALSE(HasFinalizer(versions[2], kProvisioningFinalizer));
  EXPECT_EQ(driver_->create_calls(), 1);
  // Annotated, so nothing is held in memory for it any more.
  EXPECT_TRUE(Eventually([&] { return provisioner_->TakenOverCount() == 0; }));
}

TEST_F(ClaimVersionsTest, AClaimHandedOverByTheAnnotationsIsProvisionedAsBefore) {
  // An external provisioner's way (the binder writes the hand-over).
  hand_over_in_memory_ = false;
  Class("fast");
  Start();
  const std::vector<json> versions = VersionsUntilBound("data");
  ASSERT_EQ(versions.size(), 4u) << json(versions).dump();
  EXPECT_EQ(Annotation(versions[1], kAnnStorageProvisioner), kDriver);
  EXPECT_FALSE(HasFinalizer(versions[1], kProvisioningFinalizer));
  EXPECT_TRUE(HasFinalizer(versions[2], kProvisioningFinalizer));
  EXPECT_FALSE(HasFinalizer(versions[3], kProvisioningFinalizer));
  EXPECT_EQ(driver_->create_calls(), 1);
  EXPECT_EQ(provisioner_->TakenOverCount(), 0u);
}

TEST_F(ProvisionerTest, AClaimTakenOverAndDeletedBeforeItsFinalizerIsForgotten) {
  // Not provisionable (its provisioner secret is missing): taken over,
  // retried, nothing written, nothing sent.
  ClassNeedingSecret("fast", "missing");
  Start();
  Create("persistentvolumeclaims", "", "default", Claim("data", "fast"));
  ASSERT_TRUE(Eventually([&] { return provisioner_->TakenOverCount() == 1; }));
  ASSERT_TRUE(Eventually([&] {
    auto events = registry_->List(K("events"), "default", {});
    return events.ok() && std::any_of(events->items.begin(), events->items.end(),
                                      [](const json& e) { return e.value("reason", "") == "ProvisioningFailed"; });
  }));
  const json claim = Get("persistentvolumeclaims", "default", "data");
  EXPECT_EQ(Annotation(claim, kAnnStorageProvisioner), "");
  EXPECT_FALSE(HasFinalizer(claim, kProvisioningFinalizer));
  ASSERT_TRUE(registry_->Delete(K("persistentvolumeclaims"), "default", "data").ok());
  EXPECT_TRUE(Eventually([&] { return provisioner_->TakenOverCount() == 0; }));
  EXPECT_EQ(ClaimPhase("data"), "<gone>");
  EXPECT_EQ(driver_->create_calls(), 0);
}

TEST_F(ProvisionerTest, WaitForFirstConsumerUsesTheSelectedNodesTopology) {
  Class("local", "WaitForFirstConsumer");
  for (const char* node : {"node-a", "node-b"}) {
    Create("nodes", "", "", {{"metadata", {{"name", node}, {"labels", {{"kubernetes.io/hostname", node}}}}}});
    Create("csinodes", "storage.k8s.io", "",
           {{"metadata", {{"name", node}}},
            {"spec",
             {{"drivers", {{{"name", kDriver}, {"nodeID", node}, {"topologyKeys", {"kubernetes.io/hostname"}}}}}}}});
  }
  Start();
  Create("persistentvolumeclaims", "", "default", Claim("data", "local"));
  ASSERT_TRUE(Settle(*store_));
  EXPECT_EQ(driver_->create_calls(), 0);  // no consumer yet
  ASSERT_TRUE(registry_
                  ->Patch(K("persistentvolumeclaims"), "default", "data",
                          json({{"metadata", {{"annotations", {{kAnnSelectedNode, "node-b"}}}}}}).dump(),
                          apiserver::PatchType::kMerge, apiserver::Subresource::kMain)
                  .ok());
  ASSERT_TRUE(Eventually([&] { return ClaimPhase("data") == "Bound"; }));
  auto req = driver_->last_request();
  ASSERT_EQ(req->accessibility_requirements().requisite_size(), 2);
  EXPECT_EQ(req->accessibility_requirements().preferred(0).segments().at("kubernetes.io/hostname"), "node-b");
  json pv = Get("persistentvolumes", "", Get("persistentvolumeclaims", "default", "data")["spec"]["volumeName"]);
  EXPECT_EQ(pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"][0],
            "node-b");
  EXPECT_FALSE(CapacityChanges().empty());
  EXPECT_THAT(CapacityChanges(), ::testing::Each("node-b")) << "the selected node's capacity changed";
}

TEST_F(ProvisionerTest, ALostAnswerIsRetriedWithoutASecondVolume) {
  Class("fast");
  driver_->FailCreates(grpc::StatusCode::DEADLINE_EXCEEDED, 1, /*after_create=*/true);
  Start();
  Create("persistentvolumeclaims", "", "default", Claim("data", "fast"));
  ASSERT_TRUE(Eventually([&] { return ClaimPhase("data") == "Bound"; }));
  EXPECT_GE(driver_->create_calls(), 2);
  EXPECT_EQ(driver_->volumes().size(), 1u);
}

TEST_F(ProvisionerTest, ClaimDeletedDuringCreateVolumeLeaksNothing) {
  Class("fast");
  driver_->SetCreateDelay(absl::Milliseconds(800));
  Start();
  Create("persistentvolumeclaims", "", "default", Claim("data", "fast"));
  ASSERT_TRUE(Eventually([&] { return driver_->create_calls() >= 1; }));
  ASSERT_TRUE(registry_->Delete(K("persistentvolumeclaims"), "default", "data").ok());
  // The finalizer holds the claim until the outcome is known...
  EXPECT_NE(ClaimPhase("data"), "<gone>");
  // ...then everything is gone: the claim, any PV, the driver's volume.
  ASSERT_TRUE(Eventually([&] {
    return ClaimPhase("data") == "<gone>" && driver_->volumes().empty() &&
           registry_->List(K("persistentvolumes"), "", {})->items.empty();
  }));
}

TEST_F(ProvisionerTest, ResourceExhaustedUnderWaitForFirstConsumerClearsTheSelectedNode) {
  Class("local", "WaitForFirstConsumer");
  // A topology-aware driver: the request names the node's segment, so
  // another node may have room.
  Create("nodes", "", "", {{"metadata", {{"name", "node-a"}, {"labels", {{"kubernetes.io/hostname", "node-a"}}}}}});
  Create("csinodes", "storage.k8s.io", "",
         {{"metadata", {{"name", "node-a"}}},
          {"spec",
           {{"drivers", {{{"name", kDriver}, {"nodeID", "node-a"}, {"topologyKeys", {"kubernetes.io/hostname"}}}}}}}});
  driver_->FailCreates(grpc::StatusCode::RESOURCE_EXHAUSTED, 1000);
  Start();
  json c = Claim("data", "local");
  c["metadata"]["annotations"] = {{kAnnSelectedNode, "node-a"}};
  Create("persistentvolumeclaims", "", "default", c);
  ASSERT_TRUE(Eventually([&] {
    json md = Get("persistentvolumeclaims", "default", "data")["metadata"];
    return !md.value("annotations", json::object()).contains(kAnnSelectedNode);
  }));
  EXPECT_EQ(ClaimPhase("data"), "Pending");
  EXPECT_TRUE(driver_->volumes().empty());
}

TEST_F(ProvisionerTest, DriverCrashAndRestartStillProvisions) {
  Class("fast");
  CrashDriver();
  Start();
  Create("persistentvolumeclaims", "", "default", Claim("data", "fast"));
  ASSERT_TRUE(Settle(*store_));  // tried, found the driver down, parked
  EXPECT_EQ(ClaimPhase("data"), "Pending");
  RestartDriver();
  ASSERT_TRUE(Eventually([&] { return ClaimPhase("data") == "Bound"; }, absl::Seconds(30)));
}

TEST_F(ProvisionerTest, ExpansionGrowsTheVolumeThenWaitsForTheNode) {
  Class("fast");
  Start();
  Create("persistentvolumeclaims", "", "default", Claim("data", "fast", "1Gi"));
  ASSERT_TRUE(Eventually([&] { return ClaimPhase("data") == "Bound"; }));
  Grow("data", "3Gi");
  ASSERT_TRUE(Eventually([&] {
    return !Condition(Get("persistentvolumeclaims", "default", "data"), "FileSystemResizePending").is_null();
  }));
  json claim = Get("persistentvolumeclaims", "default", "data");
  EXPECT_EQ(claim["status"]["capacity"]["storage"], "1Gi");  // the filesystem is not grown yet
  EXPECT_EQ(claim["status"]["allocatedResources"]["storage"], "3Gi");
  EXPECT_EQ(claim["status"]["allocatedResourceStatuses"]["storage"], "NodeResizePending");
  EXPECT_EQ(Get("persistentvolumes", "", claim["spec"]["volumeName"])["spec"]["capacity"]["storage"], "3Gi");
  EXPECT_EQ(driver_->volumes().begin()->second.bytes, 3LL << 30);
  EXPECT_EQ(driver_->expand_calls(), 1);
}

TEST_F(ProvisionerTest, ExpansionWithoutNodeStepCompletesTheClaim) {
  Class("fast");
  driver_->SetExpand(/*node_expansion_required=*/false);
  Start();
  Create("persistentvolumeclaims", "", "default", Claim("data", "fast", "1Gi"));
  ASSERT_TRUE(Eventually([&] { return ClaimPhase("data") == "Bound"; }));
  Grow("data", "2Gi");
  ASSERT_TRUE(Eventually(
      [&] { return Get("persistentvolumeclaims", "default", "data")["status"]["capacity"]["storage"] == "2Gi"; }));
  json claim = Get("persistentvolumeclaims", "default", "data");
  EXPECT_TRUE(Condition(claim, "Resizing").is_null());
  EXPECT_TRUE(Condition(claim, "FileSystemResizePending").is_null());
}

TEST_F(ProvisionerTest, InfeasibleExpansionIsReportedOnTheClaim) {
  Class("fast");
  driver_->SetExpand(true, grpc::StatusCode::OUT_OF_RANGE);
  Start();
  Create("persistentvolumeclaims", "", "default", Claim("data", "fast", "1Gi"));
  ASSERT_TRUE(Eventually([&] { return ClaimPhase("data") == "Bound"; }));
  Grow("data", "100Ti");
  ASSERT_TRUE(Eventually([&] {
    json s = Get("persistentvolumeclaims", "default", "data")["status"];
    return s.value("allocatedResourceStatuses", json::object()).value("storage", "") == "ControllerResizeInfeasible";
  }));
  json claim = Get("persistentvolumeclaims", "default", "data");
  EXPECT_EQ(claim["status"]["capacity"]["storage"], "1Gi");
  EXPECT_EQ(Get("persistentvolumes", "", claim["spec"]["volumeName"])["spec"]["capacity"]["storage"], "1Gi");
}

TEST_F(ProvisionerTest, DeletedBoundVolumeKeepsItsStorageUntilTheClaimGoes) {
  Class("fast");
  Start();
  Create("persistentvolumeclaims", "", "default", Claim("data", "fast"));
  ASSERT_TRUE(Eventually([&] { return ClaimPhase("data") == "Bound"; }));
  const std::string pv_name = Get("persistentvolumeclaims", "default", "data")["spec"]["volumeName"];
  EXPECT_THAT(Get("persistentvolumes", "", pv_name)["metadata"]["finalizers"],
              ::testing::Contains(kProvisionerFinalizer));
  // Deleting the PV object while its claim uses it deletes nothing.
  ASSERT_TRUE(registry_->Delete(K("persistentvolumes"), "", pv_name).ok());
  ASSERT_TRUE(Settle(*store_));
  EXPECT_FALSE(Get("persistentvolumes", "", pv_name).is_null());
  EXPECT_EQ(driver_->volumes().size(), 1u);
  EXPECT_EQ(ClaimPhase("data"), "Bound");
  // The claim goes: the volume is released, its storage deleted, the PV gone.
  ASSERT_TRUE(registry_->Delete(K("persistentvolumeclaims"), "default", "data").ok());
  ASSERT_TRUE(Eventually([&] { return Get("persistentvolumes", "", pv_name).is_null(); }));
  EXPECT_TRUE(driver_->volumes().empty());
}

// external-provisioner's canDeleteVolume: DeleteVolume of a volume a
// VolumeAttachment still refers to would come before ControllerUnpublish
// (and maybe during NodeUnstage), which the CSI lifecycle forbids.
TEST_F(ProvisionerTest, ReleasedVolumeStillAttachedIsNotDeletedUntilDetached) {
  Class("fast");
  Start();
  Create("persistentvolumeclaims", "", "default", Claim("data", "fast"));
  ASSERT_TRUE(Eventually([&] { return ClaimPhase("data") == "Bound"; }));
  const std::string pv_name = Get("persistentvolumeclaims", "default", "data")["spec"]["volumeName"];
  Create("volumeattachments", "storage.k8s.io", "",
         {{"metadata", {{"name", "csi-attached"}}},
          {"spec", {{"attacher", kDriver}, {"nodeName", "node-1"}, {"source", {{"persistentVolumeName", pv_name}}}}}});
  ASSERT_TRUE(registry_->Delete(K("persistentvolumeclaims"), "default", "data").ok());
  auto refused = [&] {
    auto events = registry_->List(K("events"), "", {});
    return events.ok() &&
           json(events->items).dump().find("persistentvolume " + pv_name + " is still attached to node node-1") !=
               std::string::npos;
  };
  ASSERT_TRUE(Eventually(refused, absl::Seconds(30)));
  EXPECT_EQ(driver_->volumes().size(), 1u);  // refused, not deleted
  EXPECT_FALSE(Get("persistentvolumes", "", pv_name).is_null());
  ASSERT_TRUE(registry_->Delete(K("volumeattachments", "storage.k8s.io"), "", "csi-attached").ok());
  ASSERT_TRUE(Eventually([&] { return Get("persistentvolumes", "", pv_name).is_null(); }, absl::Seconds(30)));
  EXPECT_TRUE(driver_->volumes().empty());
}

TEST_F(ProvisionerTest, RetainedVolumeKeepsItsStorage) {
  Create("storageclasses", "storage.k8s.io", "",
         {{"metadata", {{"name", "keep"}}}, {"provisioner", kDriver}, {"reclaimPolicy", "Retain"}});
  Start();
  Create("persistentvolumeclaims", "", "default", Claim("data", "keep"));
  ASSERT_TRUE(Eventually([&] { return ClaimPhase("data") == "Bound"; }));
  const std::string pv_name = Get("persistentvolumeclaims", "default", "data")["spec"]["volumeName"];
  EXPECT_THAT(Get("persistentvolumes", "", pv_name)["metadata"]["finalizers"],
              ::testing::Not(::testing::Contains(kProvisionerFinalizer)));
  ASSERT_TRUE(registry_->Delete(K("persistentvolumeclaims"), "default", "data").ok());
  ASSERT_TRUE(Eventually([&] { return Get("persistentvolumes", "", pv_name)["status"]["phase"] == "Released"; }));
  ASSERT_TRUE(Settle(*store_));
  EXPECT_EQ(driver_->volumes().size(), 1u);
}

TEST_F(ProvisionerTest, ClaimDeletedMidFlightWithItsClassGoneKeepsItsFinalizer) {
  Class("fast");
  driver_->SetCreateDelay(absl::Milliseconds(600));
  driver_->FailCreates(grpc::StatusCode::DEADLINE_EXCEEDED, 1, /*after_create=*/true);
  Start();
  Create("persistentvolumeclaims", "", "default", Claim("data", "fast"));
  ASSERT_TRUE(Eventually([&] { return driver_->create_calls() >= 1; }));
  ASSERT_TRUE(registry_->Delete(K("storageclasses", "storage.k8s.io"), "", "fast").ok());
  ASSERT_TRUE(registry_->Delete(K("persistentvolumeclaims"), "default", "data").ok());
  // The volume was created but its answer lost; the request cannot be
  // rebuilt without the class: the claim must stay (the in-flight call has
  // ended and the claim's sync has run on what it left).
  ASSERT_TRUE(Eventually([&] { return driver_->create_calls() >= 1 && driver_->volumes().size() == 1; }));
  ASSERT_TRUE(Settle(*store_));
  EXPECT_NE(ClaimPhase("data"), "<gone>");
  EXPECT_EQ(driver_->volumes().size(), 1u);
  EXPECT_EQ(
      Get("persistentvolumeclaims", "default", "data")["metadata"]["annotations"].value(kAnnProvisioningNode, "x"),
      "x");
  // The class comes back: the volume is cleaned up and the claim goes.
  driver_->SetCreateDelay(absl::ZeroDuration());
  Class("fast");
  ASSERT_TRUE(
      Eventually([&] { return ClaimPhase("data") == "<gone>" && driver_->volumes().empty(); }, absl::Seconds(30)));
}

// Claims handed to another driver never reach this provisioner's workers
// (berth up runs one provisioner per driver), nor do claims of ours with
// nothing left to do: only claims it may act on are queued.
TEST_F(ProvisionerTest, ClaimsOfAnotherDriverOrSettledAreNotQueued) {
  Class("fast");
  Create("storageclasses", "storage.k8s.io", "",
         {{"metadata", {{"name", "theirs"}}},
          {"provisioner", "other.csi.example.com"},
          {"volumeBindingMode", "Immediate"},
          {"reclaimPolicy", "Delete"}});
  Start();
  Create("persistentvolumeclaims", "", "default", Claim("other", "theirs"));
  ASSERT_TRUE(Eventually([&] {
    const json meta = Get("persistentvolumeclaims", "default", "other")["metadata"];
    return meta.value("annotations", json::object()).value(kAnnStorageProvisioner, "") == "other.csi.example.com";
  }));
  Label("persistentvolumeclaims", "default", "other");
  ASSERT_TRUE(Settle(*store_));
  EXPECT_EQ(provisioner_->claim_queue_adds(), 0u);
  EXPECT_EQ(driver_->create_calls(), 0);

  Create("persistentvolumeclaims", "", "default", Claim("data", "fast"));
  ASSERT_TRUE(Eventually([&] { return ClaimPhase("data") == "Bound"; }));
  EXPECT_EQ(driver_->create_calls(), 1);
  ASSERT_TRUE(Settle(*store_));
  const uint64_t provisioned = provisioner_->claim_queue_adds();
  EXPECT_GT(provisioned, 0u);
  // Bound, no finalizer of ours, nothing cloned: nothing left to do.
  Label("persistentvolumeclaims", "default", "data");
  ASSERT_TRUE(Settle(*store_));
  EXPECT_EQ(provisioner_->claim_queue_adds(), provisioned);
  // Nor its volume: provisioned, reclaimed by Delete, holding our finalizer.
  const std::string pv = Get("persistentvolumeclaims", "default", "data")["spec"]["volumeName"];
  const uint64_t volumes = provisioner_->volume_queue_adds();
  Label("persistentvolumes", "", pv);
  ASSERT_TRUE(Settle(*store_));
  EXPECT_EQ(provisioner_->volume_queue_adds(), volumes);
  // Once it has something to decide (deleted, Released), it is queued and
  // its storage goes with it.
  ASSERT_TRUE(registry_->Delete(K("persistentvolumeclaims"), "default", "data").ok());
  ASSERT_TRUE(Eventually([&] { return driver_->volumes().empty(); }, absl::Seconds(30)));
  EXPECT_GT(provisioner_->volume_queue_adds(), volumes);
}

class BuildRequestTest : public ProvisionerTest {
 protected:
  void Nodes(std::vector<std::string> names, bool with_zone = false) {
    for (const auto& n : names) {
      json labels = {{"kubernetes.io/hostname", n}};
      json keys = {"kubernetes.io/hostname"};
      if (with_zone) {
        labels["topology.kubernetes.io/zone"] = "z1";
        keys.push_back("topology.kubernetes.io/zone");
      }
      Create("nodes", "", "", {{"metadata", {{"name", n}, {"labels", labels}}}});
      Create("csinodes", "storage.k8s.io", "",
             {{"metadata", {{"name", n}}},
              {"spec", {{"drivers", {{{"name", kDriver}, {"nodeID", n}, {"topologyKeys", keys}}}}}}});
    }
  }
  std::string FirstPreferred(const ::csi::v1::CreateVolumeRequest& req) {
    return req.accessibility_requirements().preferred(0).segments().at("kubernetes.io/hostname");
  }
};

TEST_F(BuildRequestTest, StatefulSetReplicasSpreadOverConsecutiveSegments) {
  Nodes({"n1", "n2", "n3"});
  Start();
  json sc = {{"metadata", {{"name", "fast"}}}, {"provisioner", kDriver}};
  std::set<std::string> first;
  std::vector<std::string> order;
  for (int i = 0; i < 3; ++i) {
    json claim = Claim("data-web-" + std::to_string(i), "fast");
    claim["metadata"]["uid"] = "u" + std::to_string(i);
    claim["metadata"]["namespace"] = "default";
    auto req = provisioner_->BuildRequest(claim, sc, "");
    ASSERT_TRUE(req.ok()) << req.status();
    EXPECT_EQ(req->accessibility_requirements().requisite_size(), 3);
    first.insert(FirstPreferred(*req));
    order.push_back(FirstPreferred(*req));
  }
  EXPECT_EQ(first.size(), 3u) << "replicas 0..2 must start on three different segments";
  // Stable: the same claim always starts at the same place.
  json claim = Claim("data-web-1", "fast");
  claim["metadata"]["uid"] = "other";
  EXPECT_EQ(FirstPreferred(*provisioner_->BuildRequest(claim, sc, "")), order[1]);
}

// A node's segment is decoded once per version of its Node and CSINode: a
// relabelled node, a driver re-registered with other keys and a node gone
// each show in the next request.
TEST_F(BuildRequestTest, ANodesSegmentFollowsItsLabelsAndItsDriversKeys) {
  Nodes({"n1", "n2"}, /*with_zone=*/true);
  Start();
  json sc = {{"metadata", {{"name", "fast"}}}, {"provisioner", kDriver}};
  json claim = Claim("data", "fast");
  claim["metadata"]["uid"] = "u";
  auto zone_of_n1 = [&]() -> std::string {
    auto req = provisioner_->BuildRequest(claim, sc, "n1");
    if (!req.ok()) return req.status().ToString();
    return req->accessibility_requirements().preferred(0).segments().at("topology.kubernetes.io/zone");
  };
  EXPECT_EQ(zone_of_n1(), "z1");
  EXPECT_EQ(zone_of_n1(), "z1");  // the second from what the first decoded
  auto moved = registry_->Patch(K("nodes"), "", "n1", R"({"metadata":{"labels":{"topology.kubernetes.io/zone":"z2"}}})",
                                apiserver::PatchType::kMerge, apiserver::Subresource::kMain);
  ASSERT_TRUE(moved.ok()) << moved.status();
  ASSERT_TRUE(Settle(*store_));
  EXPECT_EQ(zone_of_n1(), "z2");
  auto requisite_zones = [&] {
    std::set<std::string> zones;
    auto req = provisioner_->BuildRequest(claim, sc, "");
    EXPECT_TRUE(req.ok()) << req.status();
    if (!req.ok()) return zones;
    for (const auto& t : req->accessibility_requirements().requisite()) {
      zones.insert(t.segments().count("topology.kubernetes.io/zone") ? t.segments().at("topology.kubernetes.io/zone")
                                                                     : "<no zone>");
    }
    return zones;
  };
  EXPECT_EQ(requisite_zones(), (std::set<std::string>{"z1", "z2"}));
  // n2's driver registers again with the hostname key only (as the node
  // agent does: the entry goes, then comes back with its new keys).
  for (const char* drivers : {R"([])", R"([{"name":"fake.csi.berth.io","nodeID":"n2",
                                         "topologyKeys":["kubernetes.io/hostname"]}])"}) {
    auto rekeyed =
        registry_->Patch(K("csinodes", "storage.k8s.io"), "", "n2", StrCat(R"({"spec":{"drivers":)", drivers, "}}"),
                         apiserver::PatchType::kMerge, apiserver::Subresource::kMain);
    ASSERT_TRUE(rekeyed.ok()) << rekeyed.status();
  }
  ASSERT_TRUE(Settle(*store_));
  EXPECT_EQ(requisite_zones(), (std::set<std::string>{"z2", "<no zone>"}));
  // n2 gone: only n1's segment is left.
  ASSERT_TRUE(registry_->Delete(K("nodes"), "", "n2").ok());
  ASSERT_TRUE(Settle(*store_));
  EXPECT_EQ(requisite_zones(), (std::set<std::string>{"z2"}));
}

TEST_F(BuildRequestTest, SelectedNodeMustHaveTheDriversTopology) {
  Nodes({"n1"});
  Create("nodes", "", "", {{"metadata", {{"name", "bare"}, {"labels", {{"kubernetes.io/hostname", "bare"}}}}}});
  Start();
  json sc = {{"metadata", {{"name", "fast"}}}, {"provisioner", kDriver}};
  json claim = Claim("data", "fast");
  claim["metadata"]["uid"] = "u";
  auto req = provisioner_->BuildRequest(claim, sc, "bare");
  ASSERT_FALSE(req.ok());
  EXPECT_EQ(req.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(req.status().message()), ::testing::HasSubstr("no topology for driver"));
}

TEST_F(BuildRequestTest, AllowedTopologiesMayNameFewerKeysThanTheDriver) {
  Nodes({"n1", "n2"}, /*with_zone=*/true);
  Start();
  json sc = {{"metadata", {{"name", "zonal"}}},
             {"provisioner", kDriver},
             {"allowedTopologies",
              {{{"matchLabelExpressions", {{{"key", "topology.kubernetes.io/zone"}, {"values", {"z1"}}}}}}}}};
  json claim = Claim("data", "zonal");
  claim["metadata"]["uid"] = "u";
  auto req = provisioner_->BuildRequest(claim, sc, "n2");
  ASSERT_TRUE(req.ok()) << req.status();
  EXPECT_EQ(req->accessibility_requirements().requisite(0).segments().at("topology.kubernetes.io/zone"), "z1");
  sc["allowedTopologies"][0]["matchLabelExpressions"][0]["values"] = {"z9"};
  auto refused = provisioner_->BuildRequest(claim, sc, "n2");
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()), ::testing::HasSubstr("allowedTopologies"));
}

TEST_F(ProvisionerTest, SelectedNodeThatDoesNotExistIsClearedForTheScheduler) {
  Class("local", "WaitForFirstConsumer");
  Start();
  json c = Claim("data", "local");
  c["metadata"]["annotations"] = {{kAnnSelectedNode, "gone-node"}};
  Create("persistentvolumeclaims", "", "default", c);
  ASSERT_TRUE(Eventually([&] {
    return !Get("persistentvolumeclaims", "default", "data")["metadata"]["annotations"].contains(kAnnSelectedNode);
  }));
  EXPECT_EQ(driver_->create_calls(), 0);
}

// Issue 18: WaitForFirstConsumer claims leave nodes that died.
TEST_F(ProvisionerTest, SelectedNodeThatIsNotReadyIsClearedForTheScheduler) {
  Class("local", "WaitForFirstConsumer");
  Create("nodes", "", "", {{"metadata", {{"name", "dead"}}}});
  json node = Get("nodes", "", "dead");
  node["status"] = {{"conditions", {{{"type", "Ready"}, {"status", "Unknown"}, {"reason", "NodeStatusUnknown"}}}}};
  ASSERT_TRUE(registry_->Update(K("nodes"), "", "dead", node, apiserver::Subresource::kStatus).ok());
  Start();
  json c = Claim("data", "local");
  c["metadata"]["annotations"] = {{kAnnSelectedNode, "dead"}};
  Create("persistentvolumeclaims", "", "default", c);
  ASSERT_TRUE(Eventually([&] {
    return !Get("persistentvolumeclaims", "default", "data")["metadata"]["annotations"].contains(kAnnSelectedNode);
  }));
  EXPECT_EQ(driver_->create_calls(), 0);
}

TEST_F(ProvisionerTest, AFinalErrorOnTheNodesTopologyHandsTheClaimBack) {
  Class("local", "WaitForFirstConsumer");
  Create("nodes", "", "", {{"metadata", {{"name", "node-a"}, {"labels", {{"kubernetes.io/hostname", "node-a"}}}}}});
  Create("csinodes", "storage.k8s.io", "",
         {{"metadata", {{"name", "node-a"}}},
          {"spec",
           {{"drivers", {{{"name", kDriver}, {"nodeID", "node-a"}, {"topologyKeys", {"kubernetes.io/hostname"}}}}}}}});
  driver_->FailCreates(grpc::StatusCode::INTERNAL, 1000);
  Start();
  json c = Claim("data", "local");
  c["metadata"]["annotations"] = {{kAnnSelectedNode, "node-a"}};
  Create("persistentvolumeclaims", "", "default", c);
  ASSERT_TRUE(Eventually([&] {
    return !Get("persistentvolumeclaims", "default", "data")["metadata"]["annotations"].contains(kAnnSelectedNode);
  }));
  EXPECT_GE(driver_->create_calls(), 1);
  EXPECT_TRUE(driver_->volumes().empty());
  EXPECT_TRUE(Eventually(
      [&] { return !HasFinalizer(Get("persistentvolumeclaims", "default", "data"), kProvisioningFinalizer); }));
}

TEST_F(ProvisionerTest, ANodeThatFailsLaterHandsItsWaitingClaimsBack) {
  // The claim cannot be provisioned yet (its provisioner secret is
  // missing: retried, nothing sent); its node then stops being Ready.
  Class("local", "WaitForFirstConsumer",
        {{"csi.storage.k8s.io/provisioner-secret-name", "later"},
         {"csi.storage.k8s.io/provisioner-secret-namespace", "default"}});
  Create("nodes", "", "", {{"metadata", {{"name", "node-a"}}}});
  auto set_ready = [&](const std::string& ready) {
    json node = Get("nodes", "", "node-a");
    node["status"] = {{"conditions", {{{"type", "Ready"}, {"status", ready}}}}};
    ASSERT_TRUE(registry_->Update(K("nodes"), "", "node-a", node, apiserver::Subresource::kStatus).ok());
  };
  set_ready("True");
  Start();
  json c = Claim("data", "local");
  c["metadata"]["annotations"] = {{kAnnSelectedNode, "node-a"}};
  Create("persistentvolumeclaims", "", "default", c);
  ASSERT_TRUE(Eventually([&] {
    auto events = registry_->List(K("events"), "default", {});
    return events.ok() && !events->items.empty();
  }));
  EXPECT_EQ(Annotation(Get("persistentvolumeclaims", "default", "data"), kAnnSelectedNode), "node-a");
  set_ready("False");
  ASSERT_TRUE(Eventually([&] {
    return !Get("persistentvolumeclaims", "default", "data")["metadata"]["annotations"].contains(kAnnSelectedNode);
  }));
  EXPECT_EQ(driver_->create_calls(), 0);
}

TEST_F(ProvisionerTest, AnInFlightRequestKeepsItsNodeEvenIfTheNodeIsNotReady) {
  Class("local", "WaitForFirstConsumer");
  Create("nodes", "", "", {{"metadata", {{"name", "slow"}}}});
  json node = Get("nodes", "", "slow");
  node["status"] = {{"conditions", {{{"type", "Ready"}, {"status", "Unknown"}}}}};
  ASSERT_TRUE(registry_->Update(K("nodes"), "", "slow", node, apiserver::Subresource::kStatus).ok());
  // The claim as a crash left it: CreateVolume sent to "slow", outcome
  // unknown. Whatever happened there must be found out there.
  json c = Claim("data", "local");
  c["metadata"]["annotations"] = {{kAnnSelectedNode, "slow"}, {kAnnProvisioningNode, "slow"}};
  c["metadata"]["finalizers"] = {kProvisioningFinalizer};
  Create("persistentvolumeclaims", "", "default", c);
  Start();
  ASSERT_TRUE(Eventually([&] {
    return !Get("persistentvolumes", "", "pvc-" + Uid(Get("persistentvolumeclaims", "default", "data"))).is_null();
  }));
  EXPECT_EQ(Annotation(Get("persistentvolumeclaims", "default", "data"), kAnnSelectedNode), "slow");
}

// The provisioner writes its finalizer from the informer's copy of the
// claim. A copy behind the store (the claim was deleted meanwhile, held by
// another finalizer) must not be provisioned: the conditional write fails,
// the stored claim is read, and nothing is asked of the driver.
TEST_F(ProvisionerTest, AClaimDeletedBehindItsInformersCopyIsNotProvisioned) {
  // Not provisionable at first (its provisioner secret is missing): handed
  // over, retried, nothing sent.
  ClassNeedingSecret("fast", "later");
  json c = Claim("data", "fast");
  c["metadata"]["finalizers"] = {"test.berth.dev/hold"};
  Create("persistentvolumeclaims", "", "default", c);
  Start();
  // Handed over in memory: nothing is written before the provisioner's
  // finalizer, which waits for the request to build.
  ASSERT_TRUE(Eventually([&] { return provisioner_->TakenOverCount() == 1; }));
  ASSERT_TRUE(Eventually([&] {
    auto events = registry_->List(K("events"), "default", {});
    if (!events.ok()) return false;
    return std::any_of(events->items.begin(), events->items.end(),
                       [](const json& e) { return e.value("reason", "") == "ProvisioningFailed"; });
  }));
  EXPECT_EQ(Annotation(Get("persistentvolumeclaims", "default", "data"), kAnnStorageProvisioner), "");
  // The informer stops following: its copy stays as it is now.
  claims_->Stop();
  ASSERT_TRUE(registry_->Delete(K("persistentvolumeclaims"), "default", "data").ok());
  ASSERT_TRUE(Get("persistentvolumeclaims", "default", "data")["metadata"].contains("deletionTimestamp"));
  Create("secrets", "", "default", {{"metadata", {{"name", "later"}}}, {"stringData", {{"token", "t"}}}});
  absl::Status st = provisioner_->SyncClaim("default/data");
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_EQ(driver_->create_calls(), 0);
  EXPECT_FALSE(HasFinalizer(Get("persistentvolumeclaims", "default", "data"), kProvisioningFinalizer));
}

TEST_F(ProvisionerTest, AClaimHandedToAnotherDriverBehindItsInformersCopyIsNotProvisioned) {
  // Not provisionable at first (its provisioner secret is missing): taken
  // over in memory, retried, nothing written or sent.
  ClassNeedingSecret("fast", "later");
  Create("persistentvolumeclaims", "", "default", Claim("data", "fast"));
  Start();
  ASSERT_TRUE(Eventually([&] { return provisioner_->TakenOverCount() == 1; }));
  // The informer stops following; the stored claim is handed to another
  // driver (as the binder does when the class names another).
  claims_->Stop();
  ASSERT_TRUE(
      registry_
          ->Patch(K("persistentvolumeclaims"), "default", "data",
                  json({{"metadata", {{"annotations", {{kAnnStorageProvisioner, "other.csi.berth.io"}}}}}}).dump(),
                  apiserver::PatchType::kMerge, apiserver::Subresource::kMain)
          .ok());
  Create("secrets", "", "default", {{"metadata", {{"name", "later"}}}, {"stringData", {{"token", "t"}}}});
  absl::Status st = provisioner_->SyncClaim("default/data");
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_EQ(driver_->create_calls(), 0);
  const json claim = Get("persistentvolumeclaims", "default", "data");
  EXPECT_FALSE(HasFinalizer(claim, kProvisioningFinalizer));
  EXPECT_EQ(Annotation(claim, kAnnStorageProvisioner), "other.csi.berth.io");
}

}  // namespace
}  // namespace berth::controllers
