// Attach/detach flows: the attach-detach controller and the attacher against
// a fake CSI driver over a real unix socket, objects in a real store.
#include "controllers/volume/attacher.h"

#include "client/object.h"
#include "client/volume_names.h"
#include "common/testing/eventually.h"
#include "controllers/testing/fake_csi_fixture.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace berth::controllers {

using namespace ::berth::client;  // the controllers' own client library
namespace {

using testing::Eventually;
using testing::K;
using testing::Settle;

using testing::kDriver;
constexpr char kNode[] = "node-1";
constexpr char kHandle[] = "fake-vol-1";

class AttacherTest : public testing::FakeCsiTest {
 protected:
  void SetUp() override {
    FakeCsiTest::SetUp();
    RegisterDriver();
  }
  void TearDown() override { StopControllers(); }

  void StartControllers(absl::Duration max_wait_for_unmount = absl::Minutes(6)) {
    pods_ = std::make_unique<Informer>(*registry_, K("pods"));
    nodes_ = std::make_unique<Informer>(*registry_, K("nodes"));
    volumes_ = std::make_unique<Informer>(*registry_, K("persistentvolumes"));
    claims_ = std::make_unique<Informer>(*registry_, K("persistentvolumeclaims"));
    csidrivers_ = std::make_unique<Informer>(*registry_, K("csidrivers", "storage.k8s.io"));
    attachments_ = std::make_unique<Informer>(*registry_, K("volumeattachments", "storage.k8s.io"));
    csinodes_ = std::make_unique<Informer>(*registry_, K("csinodes", "storage.k8s.io"));
    ad_ = std::make_unique<AttachDetachController>(
        *registry_, AttachDetachInformers{*pods_, *nodes_, *volumes_, *claims_, *csidrivers_, *attachments_},
        AttachDetachController::Options{.workers = 2, .max_wait_for_unmount = max_wait_for_unmount});
    attacher_ = std::make_unique<Attacher>(
        *registry_, directory_, AttacherInformers{*attachments_, *volumes_, *csinodes_},
        Attacher::Options{.driver = kDriver, .workers = 2, .rpc_timeout = absl::Seconds(5), .clock = &retry_clock_});
    ad_->RegisterHandlers();
    attacher_->RegisterHandlers();
    for (Informer* i : {csidrivers_.get(), csinodes_.get(), nodes_.get(), volumes_.get(), claims_.get(), pods_.get(),
                        attachments_.get()}) {
      i->Start();
      ASSERT_TRUE(i->WaitForSync(absl::Seconds(10)));
    }
    ad_->Start();
    attacher_->Start();
  }
  void StopControllers() {
    if (attacher_) attacher_->Stop();
    if (ad_) ad_->Stop();
    for (auto* i : {&pods_, &nodes_, &volumes_, &claims_, &csidrivers_, &attachments_, &csinodes_}) {
      if (*i) (*i)->Stop();
    }
    attacher_.reset();
    ad_.reset();
  }

  json Attachment() { return Get("volumeattachments", "storage.k8s.io", "", AttachmentName(kHandle, kDriver, kNode)); }
  bool Attached() {
    json va = Attachment();
    return !va.is_null() && va.value("status", json::object()).value("attached", false);
  }
  void Node(json annotations = json::object()) {
    Create("nodes", "", "", {{"metadata", {{"name", kNode}, {"annotations", annotations}}}});
  }
  void CsiNode() {
    Create("csinodes", "storage.k8s.io", "",
           {{"metadata", {{"name", kNode}}},
            {"spec",
             {{"drivers", {{{"name", kDriver}, {"nodeID", "fake-node-id-1"}, {"topologyKeys", json::array()}}}}}}});
  }
  // A PV and a claim bound to each other.
  void BoundClaim() {
    Create("persistentvolumes", "", "",
           {{"metadata", {{"name", "pv-1"}}},
            {"spec",
             {{"capacity", {{"storage", "1Gi"}}},
              {"accessModes", {"ReadWriteOnce"}},
              {"persistentVolumeReclaimPolicy", "Retain"},
              {"mountOptions", {"noatime"}},
              {"csi",
               {{"driver", kDriver},
                {"volumeHandle", kHandle},
                {"fsType", "xfs"},
                {"volumeAttributes", {{"k", "v"}}},
                {"controllerPublishSecretRef", {{"name", "publish"}, {"namespace", "default"}}}}},
              {"claimRef", {{"namespace", "default"}, {"name", "data"}}}}}});
    Create("secrets", "", "default", {{"metadata", {{"name", "publish"}}}, {"stringData", {{"password", "hunter2"}}}});
    Create("persistentvolumeclaims", "", "default",
           {{"metadata", {{"name", "data"}}},
            {"spec",
             {{"accessModes", {"ReadWriteOnce"}},
              {"storageClassName", ""},
              {"volumeName", "pv-1"},
              {"resources", {{"requests", {{"storage", "1Gi"}}}}}}}});
    json claim = Get("persistentvolumeclaims", "", "default", "data");
    claim["status"] = {{"phase", "Bound"}};
    ASSERT_TRUE(
        registry_->Update(K("persistentvolumeclaims"), "default", "data", claim, apiserver::Subresource::kStatus).ok());
  }
  void Pod(const std::string& name = "app") {
    Create("pods", "", "default",
           {{"metadata", {{"name", name}}},
            {"spec",
             {{"nodeName", kNode},
              {"containers", {{{"name", "c"}, {"image", "busybox"}}}},
              {"volumes", {{{"name", "d"}, {"persistentVolumeClaim", {{"claimName", "data"}}}}}}}}});
  }
  void SetPodPhase(const std::string& name, const std::string& phase) {
    json pod = Get("pods", "", "default", name);
    pod["status"]["phase"] = phase;
    ASSERT_TRUE(registry_->Update(K("pods"), "default", name, pod, apiserver::Subresource::kStatus).ok());
  }
  void SetVolumesInUse(json in_use) {
    // A patch: the controller writes volumesAttached concurrently.
    auto st = registry_->Patch(K("nodes"), "", kNode, json({{"status", {{"volumesInUse", std::move(in_use)}}}}).dump(),
                               apiserver::PatchType::kMerge, apiserver::Subresource::kStatus);
    ASSERT_TRUE(st.ok()) << st.status();
  }
  bool PodEvent(const std::string& reason) {
    auto events = registry_->List(K("events"), "default", {});
    if (!events.ok()) return false;
    std::vector<json> items = events->items;
    return std::any_of(items.begin(), items.end(), [&](const json& e) {
      return e.value("reason", "") == reason && e["involvedObject"].value("kind", "") == "Pod";
    });
  }
  // Eventually `pred`, moving the attacher's retry clock on meanwhile (a
  // failed attachment is tried again only when its backoff has passed).
  template <class Pred>
  bool Retried(Pred pred) {
    return Eventually([&] {
      if (pred()) return true;
      retry_clock_.Advance(absl::Seconds(10));
      return false;
    });
  }
  void Standard() {
    Node();
    CsiNode();
    BoundClaim();
  }

  FakeClock retry_clock_;  // the attacher's retries (1 s doubling, as external-attacher's)
  std::unique_ptr<Informer> pods_, nodes_, volumes_, claims_, csidrivers_, attachments_, csinodes_;
  std::unique_ptr<AttachDetachController> ad_;
  std::unique_ptr<Attacher> attacher_;
};

TEST(AttachmentNameTest, IsKubernetesName) {
  // sha256(handle + driver + node), as kubelet and the attach-detach controller compute it.
  EXPECT_EQ(AttachmentName("h", "d", "n"), "csi-9072ed11cc1acb5fa433a877ff339b6311d013f33bddd1d0092711a8ace5b16d");
  EXPECT_THAT(AttachmentName("h", "d", "n"), ::testing::MatchesRegex("csi-[0-9a-f]{64}"));
  EXPECT_NE(AttachmentName("h", "d", "n"), AttachmentName("h", "d", "m"));
  EXPECT_EQ(UniqueVolumeName("d.io", "h"), "kubernetes.io/csi/d.io^h");
  EXPECT_EQ(AttacherFinalizer("csi.example/com x"), "external-attacher/csi.example-com-x");
}

TEST_F(AttacherTest, AttachesForAPodAndDetachesWhenItIsGone) {
  Standard();
  Pod();
  StartControllers();
  ASSERT_TRUE(Eventually([&] { return Attached(); }));
  json va = Attachment();
  EXPECT_EQ(va["spec"]["attacher"], kDriver);
  EXPECT_EQ(va["spec"]["nodeName"], kNode);
  EXPECT_EQ(va["spec"]["source"]["persistentVolumeName"], "pv-1");
  EXPECT_EQ(va["status"]["attachmentMetadata"]["devicePath"], std::string("/dev/fake/") + kHandle);
  EXPECT_THAT(va["metadata"]["finalizers"], ::testing::Contains(AttacherFinalizer(kDriver)));
  EXPECT_EQ(va["metadata"]["annotations"][kAnnAttachNodeId], "fake-node-id-1");
  EXPECT_THAT(Get("persistentvolumes", "", "", "pv-1")["metadata"]["finalizers"],
              ::testing::Contains(AttacherFinalizer(kDriver)));
  EXPECT_EQ(driver_->published(), (std::set<std::pair<std::string, std::string>>{{kHandle, "fake-node-id-1"}}));
  auto req = driver_->last_publish();
  ASSERT_TRUE(req.has_value());
  EXPECT_EQ(req->volume_capability().mount().fs_type(), "xfs");
  EXPECT_THAT(req->volume_capability().mount().mount_flags(), ::testing::ElementsAre("noatime"));
  EXPECT_EQ(req->volume_capability().access_mode().mode(), ::csi::v1::VolumeCapability::AccessMode::SINGLE_NODE_WRITER);
  EXPECT_EQ(req->secrets().at("password"), "hunter2");
  EXPECT_EQ(req->volume_context().at("k"), "v");
  EXPECT_FALSE(req->readonly());
  ASSERT_TRUE(Eventually([&] {
    return Field(Field(Get("nodes", "", "", kNode), "status"), "volumesAttached") ==
           json::array({{{"name", UniqueVolumeName(kDriver, kHandle)}, {"devicePath", ""}}});
  }));
  ASSERT_TRUE(Eventually([&] { return PodEvent("SuccessfulAttachVolume"); }));
  EXPECT_EQ(driver_->publish_calls(), 1);

  ASSERT_TRUE(registry_->Delete(K("pods"), "default", "app", testing::PodGone()).ok());
  ASSERT_TRUE(Eventually([&] { return Attachment().is_null(); }));
  EXPECT_TRUE(driver_->published().empty());
  EXPECT_EQ(driver_->unpublish_calls(), 1);
  // The PV keeps the attacher's finalizer until the PV itself is deleted
  // (as external-attacher): then, with no attachment left, it goes.
  EXPECT_THAT(Get("persistentvolumes", "", "", "pv-1")["metadata"]["finalizers"],
              ::testing::Contains(AttacherFinalizer(kDriver)));
  ASSERT_TRUE(registry_->Delete(K("persistentvolumes"), "", "pv-1").ok());
  ASSERT_TRUE(Eventually([&] { return Get("persistentvolumes", "", "", "pv-1").is_null(); }));
  ASSERT_TRUE(
      Eventually([&] { return Field(Field(Get("nodes", "", "", kNode), "status"), "volumesAttached").is_null(); }));
}

TEST_F(AttacherTest, VolumeInUseOnTheNodeIsNotDetachedUntilUnmounted) {
  Standard();
  Pod();
  StartControllers();
  ASSERT_TRUE(Eventually([&] { return Attached(); }));
  SetVolumesInUse({UniqueVolumeName(kDriver, kHandle)});
  ASSERT_TRUE(registry_->Delete(K("pods"), "default", "app", testing::PodGone()).ok());
  ASSERT_TRUE(Settle(*store_));
  EXPECT_TRUE(Attached()) << "detached while the node still had it mounted";
  EXPECT_EQ(driver_->unpublish_calls(), 0);
  SetVolumesInUse(json::array());
  ASSERT_TRUE(Eventually([&] { return Attachment().is_null(); }));
  EXPECT_EQ(driver_->unpublish_calls(), 1);
}

TEST_F(AttacherTest, VolumeStillInUseIsDetachedAfterTheMaximumWait) {
  Standard();
  Pod();
  StartControllers(/*max_wait_for_unmount=*/absl::Milliseconds(600));
  ASSERT_TRUE(Eventually([&] { return Attached(); }));
  SetVolumesInUse({UniqueVolumeName(kDriver, kHandle)});
  ASSERT_TRUE(registry_->Delete(K("pods"), "default", "app", testing::PodGone()).ok());
  ASSERT_TRUE(Eventually([&] { return Attachment().is_null(); }));
}

TEST_F(AttacherTest, NoAttachmentWhenTheCsiDriverDoesNotRequireIt) {
  Standard();
  Create("csidrivers", "storage.k8s.io", "",
         {{"metadata", {{"name", kDriver}}}, {"spec", {{"attachRequired", false}}}});
  Pod();
  StartControllers();
  ASSERT_TRUE(Settle(*store_));
  EXPECT_TRUE(Attachment().is_null());
  EXPECT_EQ(driver_->publish_calls(), 0);
}

TEST_F(AttacherTest, DriverWithoutPublishIsMarkedAttachedWithoutACall) {
  driver_->SetPublishCapability(false);
  Standard();
  Pod();
  StartControllers();
  ASSERT_TRUE(Eventually([&] { return Attached(); }));
  EXPECT_EQ(driver_->publish_calls(), 0);
  EXPECT_FALSE(Attachment()["metadata"].value("finalizers", json::array()).contains(AttacherFinalizer(kDriver)));
  ASSERT_TRUE(registry_->Delete(K("pods"), "default", "app", testing::PodGone()).ok());
  ASSERT_TRUE(Eventually([&] { return Attachment().is_null(); }));
  EXPECT_EQ(driver_->unpublish_calls(), 0);
}

TEST_F(AttacherTest, PublishFailureIsReportedThenRetried) {
  driver_->FailPublishes(grpc::StatusCode::RESOURCE_EXHAUSTED, 1000, 0);
  Standard();
  Pod();
  StartControllers();
  ASSERT_TRUE(Eventually([&] {
    json va = Attachment();
    return !va.is_null() && va["status"].contains("attachError");
  }));
  EXPECT_THAT(Attachment()["status"]["attachError"]["message"].get<std::string>(),
              ::testing::HasSubstr("injected publish failure"));
  EXPECT_FALSE(Attachment()["status"]["attachError"].value("time", "").empty());
  ASSERT_TRUE(Eventually([&] { return PodEvent("FailedAttachVolume"); }));
  driver_->FailPublishes(grpc::StatusCode::OK, 0, 0);  // the driver recovers
  ASSERT_TRUE(Retried([&] { return Attached(); }));
  EXPECT_FALSE(Attachment()["status"].contains("attachError"));
  EXPECT_GE(driver_->publish_calls(), 2);
}

TEST_F(AttacherTest, WaitsForTheNodeToRegisterTheDriver) {
  Node();
  BoundClaim();
  Pod();
  StartControllers();
  ASSERT_TRUE(Eventually([&] {
    json va = Attachment();
    return Str(va, {"status", "attachError", "message"}).find("does not contain driver") != std::string::npos;
  }));
  EXPECT_EQ(driver_->publish_calls(), 0);
  CsiNode();
  ASSERT_TRUE(Retried([&] { return Attached(); }));
}

TEST_F(AttacherTest, DetachFailureKeepsTheAttachmentUntilItSucceeds) {
  Standard();
  Pod();
  StartControllers();
  ASSERT_TRUE(Eventually([&] { return Attached(); }));
  driver_->FailPublishes(grpc::StatusCode::INTERNAL, 0, 1000);
  ASSERT_TRUE(registry_->Delete(K("pods"), "default", "app", testing::PodGone()).ok());
  ASSERT_TRUE(Eventually([&] {
    json va = Attachment();
    return !va.is_null() && va["status"].contains("detachError");
  }));
  EXPECT_FALSE(Attachment()["metadata"].value("deletionTimestamp", "").empty());
  EXPECT_FALSE(driver_->published().empty());
  EXPECT_THAT(Str(Attachment(), {"status", "detachError", "message"}),
              ::testing::HasSubstr("injected unpublish failure"));
  driver_->FailPublishes(grpc::StatusCode::OK, 0, 0);  // the driver recovers
  ASSERT_TRUE(Retried([&] { return Attachment().is_null(); }));
  EXPECT_TRUE(driver_->published().empty());
  EXPECT_GE(driver_->unpublish_calls(), 2);
}

TEST_F(AttacherTest, FinishedPodsReleaseTheirVolumesUnlessTheNodeKeepsThem) {
  Standard();
  Pod();
  StartControllers();
  ASSERT_TRUE(Eventually([&] { return Attached(); }));
  SetPodPhase("app", "Succeeded");
  ASSERT_TRUE(Eventually([&] { return Attachment().is_null(); }));

  // Same again on a node that keeps terminated pods' volumes.
  ASSERT_TRUE(registry_
                  ->Patch(K("nodes"), "", kNode,
                          json({{"metadata", {{"annotations", {{kAnnKeepTerminatedPodVolumes, "true"}}}}}}).dump(),
                          apiserver::PatchType::kMerge, apiserver::Subresource::kMain)
                  .ok());
  Pod("app2");
  ASSERT_TRUE(Eventually([&] { return Attached(); }));
  SetPodPhase("app2", "Failed");
  ASSERT_TRUE(Settle(*store_));
  EXPECT_TRUE(Attached());
}

TEST_F(AttacherTest, DriverCrashDuringAttachConvergesAfterRestartWithoutDuplicates) {
  Standard();
  CrashDriver();
  Pod();
  StartControllers();
  ASSERT_TRUE(Eventually([&] {
    json va = Attachment();
    return !va.is_null() && va["status"].contains("attachError");
  }));
  // The orchestrator restarts while the driver is down, then the driver comes back.
  StopControllers();
  RestartDriver();
  StartControllers();
  ASSERT_TRUE(Retried([&] { return Attached(); }));
  EXPECT_EQ(driver_->published().size(), 1u);
  // Detach across another restart.
  StopControllers();
  ASSERT_TRUE(registry_->Delete(K("pods"), "default", "app", testing::PodGone()).ok());
  StartControllers();
  ASSERT_TRUE(Eventually([&] { return Attachment().is_null(); }));
  EXPECT_TRUE(driver_->published().empty());
}

TEST_F(AttacherTest, AttachmentForADeletedNodeIsDetached) {
  Standard();
  Pod();
  StartControllers();
  ASSERT_TRUE(Eventually([&] { return Attached(); }));
  ASSERT_TRUE(registry_->Delete(K("nodes"), "", kNode).ok());
  ASSERT_TRUE(registry_->Delete(K("csinodes", "storage.k8s.io"), "", kNode).ok());
  // The node ID recorded at attach time lets the detach go through.
  ASSERT_TRUE(Eventually([&] { return Attachment().is_null(); }));
  EXPECT_TRUE(driver_->published().empty());
}

TEST_F(AttacherTest, RepeatedFailureWritesNothingNewAndBacksOff) {
  driver_->FailPublishes(grpc::StatusCode::INTERNAL, 1000, 0);
  Standard();
  Pod();
  StartControllers();
  ASSERT_TRUE(Eventually([&] { return Attachment()["status"].contains("attachError"); }));
  ASSERT_TRUE(Settle(*store_));
  const std::string first = Attachment()["status"]["attachError"]["time"];
  const std::string rv = Attachment()["metadata"]["resourceVersion"];
  // Before the backoff holds, the first sync's own writes (the finalizers
  // and the node-ID annotation: changes other than the error, synced as
  // external-attacher syncs them) may wake it again; measured: 1 to 3 calls
  // in all. Its error write wakes nothing (shouldEnqueueVAChange's rule).
  const int after_first = driver_->publish_calls();
  EXPECT_LE(after_first, 3);
  // Nothing more until the clock moves: a retry waits for its backoff.
  ASSERT_TRUE(Settle(*store_));
  EXPECT_EQ(driver_->publish_calls(), after_first);
  // 15 s in 100 ms steps: with external-attacher's backoff (1 s doubling,
  // --retry-interval-start, ±25 % jitter) a handful of retries, not one per
  // step (5 ms doubling once made that 7-8).
  for (int i = 0; i < 150; ++i) {
    retry_clock_.Advance(absl::Milliseconds(100));
    ASSERT_TRUE(Settle(*store_));
  }
  EXPECT_GE(driver_->publish_calls(), after_first + 2);
  EXPECT_LE(driver_->publish_calls(), after_first + 4);
  EXPECT_EQ(Attachment()["status"]["attachError"]["time"], first);
  EXPECT_EQ(Attachment()["metadata"]["resourceVersion"], rv) << "an unchanged error must not be rewritten";
}

TEST_F(AttacherTest, VolumeMarkedForDeletionIsNotAttached) {
  Standard();
  json pv = Get("persistentvolumes", "", "", "pv-1");
  pv["metadata"]["finalizers"] = {"example.com/hold"};
  ASSERT_TRUE(registry_->Update(K("persistentvolumes"), "", "pv-1", pv, apiserver::Subresource::kMain).ok());
  ASSERT_TRUE(registry_->Delete(K("persistentvolumes"), "", "pv-1").ok());
  Pod();
  StartControllers();
  ASSERT_TRUE(Eventually([&] {
    return Str(Attachment(), {"status", "attachError", "message"}).find("marked for deletion") != std::string::npos;
  }));
  EXPECT_EQ(driver_->publish_calls(), 0);
}

}  // namespace
}  // namespace berth::controllers
