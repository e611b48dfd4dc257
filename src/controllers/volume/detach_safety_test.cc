// Detach safety of the attach-detach controller on a fake clock (kcm 1.26+):
// a volume the node reports in use is never detached from a Ready node;
// from a node whose Ready is not True only after maxWaitForUnmountDuration
// (6 min) since it stopped being wanted; at once with the out-of-service
// taint. A volume not in use is detached at once.
#include "client/object.h"
#include "client/volume_names.h"
#include "client/writes.h"
#include "common/testing/eventually.h"
#include "controllers/taints.h"
#include "controllers/testing/controller_fixture.h"
#include "controllers/volume/attacher.h"
#include "gtest/gtest.h"
#include "store/store.h"

namespace berth::controllers {
namespace {

using berth::testing::Eventually;
using client::Informer;
using client::K;
using client::Str;
using nlohmann::json;

constexpr char kDriver[] = "fake.csi.berth.io";
constexpr char kNode[] = "node-1";
constexpr char kHandle[] = "vol-1";

class DetachSafetyTest : public controllers::testing::ControllerTest {
 protected:
  void SetUp() override {
    ControllerTest::SetUp();
    if (HasFatalFailure()) return;
    for (auto [resource, group] :
         std::vector<std::pair<const char*, const char*>>{{"pods", ""},
                                                          {"nodes", ""},
                                                          {"persistentvolumes", ""},
                                                          {"persistentvolumeclaims", ""},
                                                          {"csidrivers", "storage.k8s.io"},
                                                          {"volumeattachments", "storage.k8s.io"}}) {
      informers_[resource] = std::make_unique<Informer>(*registry_, K(resource, group));
    }
    auto i = [this](const char* r) -> Informer& { return *informers_[r]; };
    controller_ = std::make_unique<AttachDetachController>(
        *registry_,
        AttachDetachInformers{i("pods"), i("nodes"), i("persistentvolumes"), i("persistentvolumeclaims"),
                              i("csidrivers"), i("volumeattachments")},
        AttachDetachController::Options{.clock = &clock_});
    controller_->RegisterHandlers();  // handlers queue; no workers run: the test syncs
    for (auto& [r, inf] : informers_) {
      inf->Start();
      ASSERT_TRUE(inf->WaitForSync(absl::Seconds(10)));
    }
    // A bound CSI volume, attached to the node, that no pod wants any more,
    // still mounted there.
    ASSERT_TRUE(registry_
                    ->Create(K("persistentvolumes"), "",
                             {{"metadata", {{"name", "pv-1"}}},
                              {"spec",
                               {{"capacity", {{"storage", "1Gi"}}},
                                {"accessModes", {"ReadWriteOnce"}},
                                {"csi", {{"driver", kDriver}, {"volumeHandle", kHandle}}},
                                {"claimRef", {{"namespace", "default"}, {"name", "data"}}}}}})
                    .ok());
    ASSERT_TRUE(
        registry_
            ->Create(K("volumeattachments", "storage.k8s.io"), "",
                     {{"metadata", {{"name", Attachment()}}},
                      {"spec",
                       {{"attacher", kDriver}, {"nodeName", kNode}, {"source", {{"persistentVolumeName", "pv-1"}}}}}})
            .ok());
    auto node = registry_->Create(K("nodes"), "", {{"metadata", {{"name", kNode}}}});
    ASSERT_TRUE(node.ok());
    SetNode("True", /*in_use=*/true);
    ASSERT_TRUE(Eventually([&] { return informers_["persistentvolumes"]->Get("", "pv-1").has_value(); }));
    ASSERT_TRUE(Eventually([&] { return informers_["volumeattachments"]->Get("", Attachment()).has_value(); }));
  }
  void TearDown() override {
    if (controller_) controller_->Stop();
    for (auto& [r, inf] : informers_) inf->Stop();
  }

  static std::string Attachment() { return client::AttachmentName(kHandle, kDriver, kNode); }
  // The node's Ready status, volumesInUse and out-of-service taint; waits
  // until the controller's cache has it.
  void SetNode(const std::string& ready, bool in_use, bool out_of_service = false) {
    auto node = registry_->Get(K("nodes"), "", kNode);
    ASSERT_TRUE(node.ok());
    ASSERT_TRUE(client::EditStatus(*registry_, K("nodes"), *node, [&](json& status) {
                  status["conditions"] = {{{"type", "Ready"}, {"status", ready}}};
                  if (in_use) {
                    status["volumesInUse"] = {client::UniqueVolumeName(kDriver, kHandle)};
                  } else {
                    status.erase("volumesInUse");
                  }
                }).ok());
    node = registry_->Get(K("nodes"), "", kNode);
    ASSERT_TRUE(client::MutateObject(*registry_, K("nodes"), *node, apiserver::Subresource::kMain, [&](json& n) {
                  if (out_of_service) {
                    n["spec"]["taints"] = {
                        {{"key", kTaintNodeOutOfService}, {"value", "nodeshutdown"}, {"effect", kNoExecute}}};
                  } else if (n["spec"].is_object()) {
                    n["spec"].erase("taints");
                  }
                  return true;
                }).ok());
    const std::string rv = Str(*registry_->Get(K("nodes"), "", kNode), {"metadata", "resourceVersion"});
    ASSERT_TRUE(Eventually([&] {
      auto cached = informers_["nodes"]->Get("", kNode);
      return cached && Str(*cached, {"metadata", "resourceVersion"}) == rv;
    }));
  }
  bool Detached() {
    auto va = registry_->Get(K("volumeattachments", "storage.k8s.io"), "", Attachment());
    return !va.ok() || client::Deleting(*va);
  }

  FakeClock clock_;
  std::map<std::string, std::unique_ptr<Informer>> informers_;
  std::unique_ptr<AttachDetachController> controller_;
};

TEST_F(DetachSafetyTest, NeverFromAReadyNodeThatHasItInUse) {
  ASSERT_TRUE(controller_->SyncNode(kNode).ok());
  EXPECT_FALSE(Detached());
  clock_.Advance(absl::Hours(2));
  ASSERT_TRUE(controller_->SyncNode(kNode).ok());
  EXPECT_FALSE(Detached()) << "detached from a healthy node that still has it mounted";
  // Unmounted: detached at once.
  SetNode("True", /*in_use=*/false);
  ASSERT_TRUE(controller_->SyncNode(kNode).ok());
  EXPECT_TRUE(Detached());
}

TEST_F(DetachSafetyTest, FromAnUnhealthyNodeAfterSixMinutes) {
  SetNode("Unknown", /*in_use=*/true);
  ASSERT_TRUE(controller_->SyncNode(kNode).ok());
  clock_.Advance(absl::Minutes(6) - absl::Seconds(1));
  ASSERT_TRUE(controller_->SyncNode(kNode).ok());
  EXPECT_FALSE(Detached());
  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(controller_->SyncNode(kNode).ok());
  EXPECT_FALSE(Detached());  // not more than the maximum yet
  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(controller_->SyncNode(kNode).ok());
  EXPECT_TRUE(Detached());
}

TEST_F(DetachSafetyTest, TheWaitCountsFromWhenTheVolumeStoppedBeingWanted) {
  // Unwanted while the node was Ready; ten minutes later the node fails:
  // the maximum wait is over already (kcm's detachRequestedTime).
  ASSERT_TRUE(controller_->SyncNode(kNode).ok());
  clock_.Advance(absl::Minutes(10));
  ASSERT_TRUE(controller_->SyncNode(kNode).ok());
  EXPECT_FALSE(Detached());
  SetNode("False", /*in_use=*/true);
  ASSERT_TRUE(controller_->SyncNode(kNode).ok());
  EXPECT_TRUE(Detached());
}

TEST_F(DetachSafetyTest, AtOnceFromAnOutOfServiceNode) {
  SetNode("Unknown", /*in_use=*/true, /*out_of_service=*/true);
  ASSERT_TRUE(controller_->SyncNode(kNode).ok());
  EXPECT_TRUE(Detached());
}

TEST_F(DetachSafetyTest, ATerminatingPodsVolumeIsReleasedByTheSameRules) {
  // A pod on the node uses the volume: wanted, even on an out-of-service
  // node.
  auto claim = registry_->Create(K("persistentvolumeclaims"), "default",
                                 {{"metadata", {{"name", "data"}}},
                                  {"spec",
                                   {{"accessModes", {"ReadWriteOnce"}},
                                    {"storageClassName", ""},
                                    {"volumeName", "pv-1"},
                                    {"resources", {{"requests", {{"storage", "1Gi"}}}}}}}});
  ASSERT_TRUE(claim.ok()) << claim.status();
  ASSERT_TRUE(
      client::EditStatus(*registry_, K("persistentvolumeclaims"), *claim, [](json& s) { s["phase"] = "Bound"; }).ok());
  auto pod =
      registry_->Create(K("pods"), "default",
                        {{"metadata", {{"name", "app"}}},
                         {"spec",
                          {{"nodeName", kNode},
                           {"containers", {{{"name", "c"}, {"image", "busybox"}}}},
                           {"volumes", {{{"name", "d"}, {"persistentVolumeClaim", {{"claimName", "data"}}}}}}}}});
  ASSERT_TRUE(pod.ok()) << pod.status();
  ASSERT_TRUE(client::EditStatus(*registry_, K("pods"), *pod, [](json& s) { s["phase"] = "Running"; }).ok());
  ASSERT_TRUE(Eventually([&] {
    auto c = informers_["persistentvolumeclaims"]->Get("default", "data");
    auto p = informers_["pods"]->Get("default", "app");
    return c && Str(*c, {"status", "phase"}) == "Bound" && p && Str(*p, {"status", "phase"}) == "Running";
  }));
  SetNode("Unknown", /*in_use=*/true, /*out_of_service=*/true);
  ASSERT_TRUE(controller_->SyncNode(kNode).ok());
  EXPECT_FALSE(Detached()) << "detached a volume a live pod wants";
  // Deleted gracefully (taint-based eviction, or the user): Terminating,
  // no container running — its volumes are released as a finished pod's.
  auto deleted = registry_->Delete(K("pods"), "default", "app");
  ASSERT_TRUE(deleted.ok() && client::Deleting(*deleted));
  ASSERT_TRUE(Eventually([&] {
    auto p = informers_["pods"]->Get("default", "app");
    return p && client::Deleting(*p);
  }));
  ASSERT_TRUE(controller_->SyncNode(kNode).ok());
  EXPECT_TRUE(Detached());
}

}  // namespace
}  // namespace berth::controllers
