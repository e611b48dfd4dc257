// Snapshot flows (controller + snapshotter) against a fake CSI driver over a
// real unix socket. Claims are bound to their volumes by the test itself
// (PV with claimRef, claim with volumeName, both statuses Bound), so only
// the snapshot machinery runs.
#include "controllers/snapshot/snapshotter.h"

#include <atomic>

#include "api/quantity.h"
#include "client/object.h"
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

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;

using testing::kDriver;
constexpr char kGroup[] = "snapshot.storage.k8s.io";

bool IsReady(const json& o) { return o.is_object() && o.value("status", json::object()).value("readyToUse", false); }
std::string ErrorMessage(const json& o) {
  if (!o.is_object()) return "";
  return o.value("status", json::object()).value("error", json::object()).value("message", "");
}
json Finalizers(const json& o) { return o.value("metadata", json::object()).value("finalizers", json::array()); }
std::string BoundContentName(const json& o) {
  if (!o.is_object()) return "";
  return o.value("status", json::object()).value("boundVolumeSnapshotContentName", "");
}

class SnapshotterTest : public testing::FakeCsiTest {
 protected:
  void SetUp() override {
    FakeCsiTest::SetUp();
    RegisterDriver();
  }
  void TearDown() override { StopControllers(); }

  // A fresh controller and snapshotter (a restarted orchestrator: nothing
  // but the stored objects carries over).
  void StartControllers(bool with_snapshotter = true, absl::Duration rpc_timeout = absl::Seconds(10)) {
    snapshots_ = std::make_unique<Informer>(*registry_, K("volumesnapshots", kGroup));
    contents_ = std::make_unique<Informer>(*registry_, K("volumesnapshotcontents", kGroup));
    classes_ = std::make_unique<Informer>(*registry_, K("volumesnapshotclasses", kGroup));
    claims_ = std::make_unique<Informer>(*registry_, K("persistentvolumeclaims"));
    controller_ = std::make_unique<SnapshotController>(
        *registry_, SnapshotInformers{*snapshots_, *contents_, *classes_, *claims_},
        SnapshotController::Options{.workers = 2, .restore_wait = absl::Milliseconds(200)});
    controller_->RegisterHandlers();
    if (with_snapshotter) {
      snapshotter_ = std::make_unique<Snapshotter>(*registry_, directory_, *contents_, *classes_,
                                                   Snapshotter::Options{.driver = kDriver,
                                                                        .workers = 2,
                                                                        .rpc_timeout = rpc_timeout,
                                                                        .poll_initial = absl::Milliseconds(20),
                                                                        .poll_max = absl::Milliseconds(200),
                                                                        .clock = &clock_});
      snapshotter_->RegisterHandlers();
    }
    for (Informer* i : {classes_.get(), claims_.get(), contents_.get(), snapshots_.get()}) {
      i->Start();
      ASSERT_TRUE(i->WaitForSync(absl::Seconds(10)));
    }
    controller_->Start();
    if (snapshotter_) snapshotter_->Start();
  }
  void StopControllers() {
    if (snapshotter_) snapshotter_->Stop();
    if (controller_) controller_->Stop();
    for (auto* i : {&snapshots_, &contents_, &classes_, &claims_}) {
      if (*i) (*i)->Stop();
    }
    snapshotter_.reset();
    controller_.reset();
    for (auto* i : {&snapshots_, &contents_, &classes_, &claims_}) i->reset();
  }

  void SetStatus(std::string_view resource, const std::string& ns, const std::string& name, const json& status) {
    PatchStatus(resource, "", ns, name, status);
  }
  json Snap(const std::string& name) { return Get("volumesnapshots", kGroup, "default", name); }
  json Content(const std::string& name) { return Get("volumesnapshotcontents", kGroup, "", name); }
  json Claim(const std::string& name) { return Get("persistentvolumeclaims", "", "default", name); }
  std::string ContentOf(const std::string& snapshot) {
    return "snapcontent-" + Snap(snapshot)["metadata"]["uid"].get<std::string>();
  }

  // A claim bound to a volume the fake driver made (so restoreSize is the
  // volume's size).
  void BoundClaim(const std::string& name, const std::string& size = "1Gi") {
    ::csi::v1::CreateVolumeRequest req;
    req.set_name("pv-" + name);
    req.mutable_capacity_range()->set_required_bytes(api::Quantity::Parse(size)->Value());
    ::csi::v1::CreateVolumeResponse resp;
    ASSERT_TRUE(driver_->CreateVolume(nullptr, &req, &resp).ok());
    json claim = Create("persistentvolumeclaims", "", "default",
                        {{"metadata", {{"name", name}}},
                         {"spec",
                          {{"accessModes", {"ReadWriteOnce"}},
                           {"storageClassName", "fast"},
                           {"volumeName", "pv-" + name},
                           {"resources", {{"requests", {{"storage", size}}}}}}}});
    Create("persistentvolumes", "", "",
           {{"metadata", {{"name", "pv-" + name}}},
            {"spec",
             {{"capacity", {{"storage", size}}},
              {"accessModes", {"ReadWriteOnce"}},
              {"persistentVolumeReclaimPolicy", "Delete"},
              {"storageClassName", "fast"},
              {"claimRef",
               {{"kind", "PersistentVolumeClaim"},
                {"apiVersion", "v1"},
                {"namespace", "default"},
                {"name", name},
                {"uid", claim["metadata"]["uid"]}}},
              {"csi", {{"driver", kDriver}, {"volumeHandle", resp.volume().volume_id()}}}}}});
    SetStatus("persistentvolumes", "", "pv-" + name, {{"phase", "Bound"}});
    SetStatus("persistentvolumeclaims", "default", name,
              {{"phase", "Bound"}, {"accessModes", {"ReadWriteOnce"}}, {"capacity", {{"storage", size}}}});
  }
  void SnapshotClass(const std::string& name, const std::string& policy = "Delete", json params = json::object(),
                     bool is_default = false, const std::string& driver = kDriver) {
    json cls = {{"metadata", {{"name", name}}}, {"driver", driver}, {"deletionPolicy", policy}, {"parameters", params}};
    if (is_default) cls["metadata"]["annotations"] = {{kAnnDefaultSnapshotClass, "true"}};
    Create("volumesnapshotclasses", kGroup, "", cls);
  }
  void Snapshot(const std::string& name, const std::string& claim, const std::string& cls = "") {
    json s = {{"metadata", {{"name", name}}}, {"spec", {{"source", {{"persistentVolumeClaimName", claim}}}}}};
    if (!cls.empty()) s["spec"]["volumeSnapshotClassName"] = cls;
    Create("volumesnapshots", kGroup, "default", s);
  }
  void PreProvisionedSnapshot(const std::string& name, const std::string& content) {
    Create("volumesnapshots", kGroup, "default",
           {{"metadata", {{"name", name}}}, {"spec", {{"source", {{"volumeSnapshotContentName", content}}}}}});
  }
  // A content for an existing storage snapshot, naming `snapshot` back.
  void PreProvisionedContent(const std::string& name, const std::string& handle, const std::string& snapshot,
                             const std::string& policy = "Retain") {
    Create("volumesnapshotcontents", kGroup, "",
           {{"metadata", {{"name", name}}},
            {"spec",
             {{"deletionPolicy", policy},
              {"driver", kDriver},
              {"source", {{"snapshotHandle", handle}}},
              {"volumeSnapshotRef", {{"name", snapshot}, {"namespace", "default"}}}}}});
  }
  // A snapshot the driver already has (id "snap-" + name).
  void StorageSnapshot(const std::string& name) {
    ::csi::v1::CreateSnapshotRequest req;
    req.set_name(name);
    req.set_source_volume_id("fake-elsewhere");
    ::csi::v1::CreateSnapshotResponse resp;
    ASSERT_TRUE(driver_->CreateSnapshot(nullptr, &req, &resp).ok());
  }
  std::vector<json> AllEvents() {
    auto list = registry_->List(K("events"), "", {});
    return list.ok() ? list->items : std::vector<json>();
  }
  // Eventually `pred`, moving the snapshotter's clock on meanwhile: a
  // not-ready snapshot is polled, a failed content retried, only as its
  // clock passes.
  template <class Pred>
  bool Retried(Pred pred, absl::Duration timeout = absl::Seconds(15)) {
    return Eventually(
        [&] {
          if (pred()) return true;
          clock_.Advance(absl::Seconds(1));
          return false;
        },
        timeout);
  }
  bool HasEvent(const std::string& object, const std::string& reason) {
    for (const auto& e : AllEvents()) {
      if (e["involvedObject"].value("name", "") == object && e.value("reason", "") == reason) return true;
    }
    return false;
  }

  FakeClock clock_;  // the snapshotter's polls and retries (1 s doubling, as csi-snapshotter's)
  std::unique_ptr<Informer> snapshots_, contents_, classes_, claims_;
  std::unique_ptr<SnapshotController> controller_;
  std::unique_ptr<Snapshotter> snapshotter_;
};

TEST_F(SnapshotterTest, DynamicSnapshotIsCutWithClassParametersAndSecrets) {
  Create("secrets", "", "default", {{"metadata", {{"name", "snap-creds"}}}, {"stringData", {{"token", "s3cr3t"}}}});
  SnapshotClass("gold", "Delete",
                {{"tier", "gold"},
                 {"csi.storage.k8s.io/snapshotter-secret-name", "snap-creds"},
                 {"csi.storage.k8s.io/snapshotter-secret-namespace", "${volumesnapshot.namespace}"}});
  BoundClaim("data", "2Gi");
  StartControllers();
  Snapshot("snap", "data", "gold");
  ASSERT_TRUE(Retried([&] { return IsReady(Snap("snap")); }));

  json snap = Snap("snap");
  const std::string uid = snap["metadata"]["uid"];
  const std::string content_name = "snapcontent-" + uid;
  EXPECT_EQ(snap["status"]["boundVolumeSnapshotContentName"], content_name);
  EXPECT_EQ(snap["status"]["restoreSize"], "2Gi");
  EXPECT_THAT(snap["status"]["creationTime"].get<std::string>(), ::testing::EndsWith("Z"));
  EXPECT_FALSE(snap["status"].contains("error"));
  EXPECT_THAT(Finalizers(snap), Contains(kSnapshotAsSourceFinalizer));
  EXPECT_THAT(Finalizers(snap), Contains(kSnapshotBoundFinalizer));

  json content = Content(content_name);
  EXPECT_EQ(content["spec"]["source"]["volumeHandle"], "fake-pv-data");
  EXPECT_EQ(content["spec"]["driver"], kDriver);
  EXPECT_EQ(content["spec"]["deletionPolicy"], "Delete");
  EXPECT_EQ(content["spec"]["volumeSnapshotClassName"], "gold");
  EXPECT_EQ(content["spec"]["volumeSnapshotRef"]["kind"], "VolumeSnapshot");
  EXPECT_EQ(content["spec"]["volumeSnapshotRef"]["apiVersion"], "snapshot.storage.k8s.io/v1");
  EXPECT_EQ(content["spec"]["volumeSnapshotRef"]["name"], "snap");
  EXPECT_EQ(content["spec"]["volumeSnapshotRef"]["namespace"], "default");
  EXPECT_EQ(content["spec"]["volumeSnapshotRef"]["uid"], uid);
  EXPECT_THAT(Finalizers(content), Contains(kContentBoundFinalizer));
  EXPECT_EQ(content["metadata"]["annotations"][kAnnDeletionSecretName], "snap-creds");
  EXPECT_EQ(content["metadata"]["annotations"][kAnnDeletionSecretNamespace], "default");
  EXPECT_EQ(content["status"]["snapshotHandle"], "snap-snapshot-" + uid);
  EXPECT_EQ(content["status"]["readyToUse"], true);
  EXPECT_EQ(content["status"]["restoreSize"], 2LL << 30);
  EXPECT_GT(content["status"]["creationTime"].get<int64_t>(), 0);

  // The marker of an outstanding call goes right after the status is written.
  EXPECT_TRUE(Retried([&] {
    return !Content(content_name)["metadata"].value("annotations", json::object()).contains(kAnnSnapshotBeingCreated);
  }));

  auto snapshots = driver_->snapshots();
  ASSERT_EQ(snapshots.size(), 1u);
  ASSERT_TRUE(snapshots.contains("snapshot-" + uid));
  const auto& req = snapshots.at("snapshot-" + uid).request;
  EXPECT_EQ(req.source_volume_id(), "fake-pv-data");
  ASSERT_EQ(req.parameters_size(), 1);  // the reserved csi.storage.k8s.io/* keys stay out
  EXPECT_EQ(req.parameters().at("tier"), "gold");
  EXPECT_EQ(req.secrets().at("token"), "s3cr3t");

  // The claim is released once the snapshot is cut.
  EXPECT_TRUE(Retried([&] { return !HasFinalizer(Claim("data"), kPvcAsSourceFinalizer); }));
  EXPECT_TRUE(Retried([&] { return HasEvent("snap", "CreatingSnapshot"); }));
  EXPECT_TRUE(Retried([&] { return HasEvent("snap", "SnapshotReady"); }));
  // The secret's value is sent to the driver only.
  for (const auto& e : AllEvents()) EXPECT_THAT(e.dump(), Not(HasSubstr("s3cr3t")));
  EXPECT_THAT(Snap("snap").dump(), Not(HasSubstr("s3cr3t")));
  EXPECT_THAT(Content(content_name).dump(), Not(HasSubstr("s3cr3t")));
}

TEST_F(SnapshotterTest, EverySnapshotIsCutWhileItsClaimIsProtected) {
  // Snapshots of one claim keep coming while earlier ones become ready (so
  // the claim's finalizer keeps being found unneeded): at every
  // CreateSnapshot the claim must hold pvc-as-source-protection.
  SnapshotClass("gold");
  BoundClaim("data");
  std::atomic<int> cut{0}, unprotected{0};
  driver_->OnCreateSnapshot([&](const ::csi::v1::CreateSnapshotRequest&) {
    ++cut;
    if (!HasFinalizer(Claim("data"), kPvcAsSourceFinalizer)) ++unprotected;
  });
  StartControllers();
  constexpr int kSnapshots = 30;
  for (int i = 0; i < kSnapshots; ++i) {
    Snapshot("s" + std::to_string(i), "data", "gold");
    // Real time on purpose: staggered creates interleave differently with
    // the controllers' work (this is not waiting for an outcome).
    absl::SleepFor(absl::Milliseconds(i % 3 == 0 ? 15 : 2));
  }
  EXPECT_TRUE(Retried([&] {
    for (int i = 0; i < kSnapshots; ++i) {
      if (!IsReady(Snap("s" + std::to_string(i)))) return false;
    }
    return true;
  }));
  EXPECT_GE(cut.load(), kSnapshots);
  EXPECT_EQ(unprotected.load(), 0);
  EXPECT_TRUE(Retried([&] { return !HasFinalizer(Claim("data"), kPvcAsSourceFinalizer); }));
}

TEST_F(SnapshotterTest, DefaultClassOfTheClaimsDriverIsChosenAndRecorded) {
  SnapshotClass("other-default", "Delete", json::object(), /*is_default=*/true, "other.csi.example.com");
  SnapshotClass("plain", "Delete");
  BoundClaim("data");
  StartControllers();
  Snapshot("snap", "data");  // no class named, and none is default for our driver yet
  ASSERT_TRUE(Retried([&] { return !ErrorMessage(Snap("snap")).empty(); }));
  EXPECT_THAT(ErrorMessage(Snap("snap")), HasSubstr("cannot find default snapshot class"));
  EXPECT_TRUE(Retried([&] { return HasEvent("snap", "SnapshotContentCreationFailed"); }));
  EXPECT_TRUE(driver_->snapshots().empty());

  SnapshotClass("ours", "Retain", json::object(), /*is_default=*/true);
  ASSERT_TRUE(Retried([&] { return IsReady(Snap("snap")); }));
  json snap = Snap("snap");
  EXPECT_EQ(snap["spec"]["volumeSnapshotClassName"], "ours");
  EXPECT_EQ(ErrorMessage(snap), "");
  json content = Content(ContentOf("snap"));
  EXPECT_EQ(content["spec"]["volumeSnapshotClassName"], "ours");
  EXPECT_EQ(content["spec"]["deletionPolicy"], "Retain");
  // Retain: nothing to protect on the snapshot's side.
  EXPECT_THAT(Finalizers(snap), Not(Contains(kSnapshotBoundFinalizer)));
}

TEST_F(SnapshotterTest, NotReadySnapshotIsPolledUntilReady) {
  driver_->SetSnapshotsReady(false);
  SnapshotClass("gold");
  BoundClaim("data");
  StartControllers();
  Snapshot("snap", "data", "gold");
  ASSERT_TRUE(Retried([&] {
    json s = Snap("snap");
    return !BoundContentName(s).empty() && s["status"].contains("creationTime");
  }));
  // The driver is asked again (CreateSnapshot is idempotent) while it is not ready.
  ASSERT_TRUE(Retried([&] { return driver_->snapshot_calls() >= 3; }));
  json snap = Snap("snap");
  EXPECT_EQ(snap["status"]["readyToUse"], false);
  EXPECT_EQ(Content(ContentOf("snap"))["status"]["readyToUse"], false);
  EXPECT_THAT(Finalizers(Claim("data")), Contains(kPvcAsSourceFinalizer));  // still being cut

  driver_->SetSnapshotsReady(true);
  ASSERT_TRUE(Retried([&] { return IsReady(Snap("snap")); }));
  EXPECT_TRUE(Retried([&] { return !HasFinalizer(Claim("data"), kPvcAsSourceFinalizer); }));
  EXPECT_EQ(driver_->snapshots().size(), 1u);
  EXPECT_TRUE(Retried([&] { return HasEvent("snap", "SnapshotReady"); }));
}

// Regression: each poll of a not-ready snapshot marked its content
// being-created and unmarked it, two writes that woke the content again at
// once — a write storm until the snapshot was ready.
TEST_F(SnapshotterTest, PollingANotReadySnapshotWritesNothing) {
  driver_->SetSnapshotsReady(false);
  SnapshotClass("gold");
  BoundClaim("data");
  StartControllers();
  Snapshot("snap", "data", "gold");
  ASSERT_TRUE(Retried([&] {
    const std::string name = ContentOf("snap");
    return !name.empty() && !Str(Content(name), {"status", "snapshotHandle"}).empty();
  }));
  ASSERT_TRUE(Settle(*store_)) << "a not-ready snapshot keeps its content busy";
  const std::string rv = Content(ContentOf("snap"))["metadata"]["resourceVersion"];
  const int calls = driver_->snapshot_calls();
  // The next poll is due within poll_max (200 ms here). The clock runs one
  // timer at a time, each settled before the next: a poll schedules the
  // next one from the time its own timer ran, so a single Advance(200 ms)
  // also ran that next poll (160 ms later, still inside the 200 ms) when the
  // worker got there before the Advance had finished, as it may under load.
  const absl::Time start = clock_.Now();
  while (driver_->snapshot_calls() == calls) {
    ASSERT_TRUE(clock_.AdvanceToNextTimer()) << "no poll is pending";
    ASSERT_LE(clock_.Now() - start, absl::Milliseconds(200)) << "the poll is late";
    ASSERT_TRUE(Settle(*store_));
  }
  EXPECT_EQ(driver_->snapshot_calls(), calls + 1);
  EXPECT_EQ(Content(ContentOf("snap"))["metadata"]["resourceVersion"], rv);
}

TEST_F(SnapshotterTest, DriverFailureIsReportedOnBothObjectsThenRecovers) {
  driver_->FailSnapshots(grpc::StatusCode::INTERNAL, 1000);
  SnapshotClass("gold");
  BoundClaim("data");
  StartControllers();
  Snapshot("snap", "data", "gold");
  ASSERT_TRUE(Retried([&] { return ErrorMessage(Snap("snap")).find("injected") != std::string::npos; }));
  const std::string content_name = ContentOf("snap");
  json content = Content(content_name);
  EXPECT_THAT(ErrorMessage(content), HasSubstr("Failed to create snapshot"));
  EXPECT_THAT(ErrorMessage(content), HasSubstr("injected snapshot failure"));
  EXPECT_EQ(content["status"]["readyToUse"], false);
  EXPECT_EQ(Snap("snap")["status"]["readyToUse"], false);
  EXPECT_TRUE(Retried([&] { return HasEvent(content_name, "SnapshotCreationFailed"); }));
  EXPECT_TRUE(Retried([&] { return HasEvent("snap", "SnapshotCreationFailed"); }));

  driver_->FailSnapshots(grpc::StatusCode::OK, 0);
  ASSERT_TRUE(Retried([&] { return IsReady(Snap("snap")); }, absl::Seconds(30)));
  EXPECT_EQ(ErrorMessage(Snap("snap")), "");
  EXPECT_EQ(ErrorMessage(Content(content_name)), "");
  EXPECT_EQ(driver_->snapshots().size(), 1u);
}

TEST_F(SnapshotterTest, PreProvisionedPairBindsBothWays) {
  StorageSnapshot("imported");
  PreProvisionedContent("imported-content", "snap-imported", "restored");
  StartControllers();
  PreProvisionedSnapshot("restored", "imported-content");
  ASSERT_TRUE(Retried([&] { return IsReady(Snap("restored")); }));
  json snap = Snap("restored");
  json content = Content("imported-content");
  EXPECT_EQ(snap["status"]["boundVolumeSnapshotContentName"], "imported-content");
  EXPECT_EQ(snap["status"]["restoreSize"], "1Mi");
  EXPECT_EQ(content["spec"]["volumeSnapshotRef"]["uid"], snap["metadata"]["uid"]);
  EXPECT_EQ(content["status"]["snapshotHandle"], "snap-imported");
  EXPECT_EQ(content["status"]["restoreSize"], 1 << 20);
  EXPECT_THAT(Finalizers(content), Contains(kContentBoundFinalizer));
  EXPECT_THAT(Finalizers(snap), Contains(kSnapshotAsSourceFinalizer));
  EXPECT_THAT(Finalizers(snap), Not(Contains(kSnapshotBoundFinalizer)));  // Retain
  EXPECT_EQ(driver_->snapshot_calls(), 1);                                // only the test's own: nothing new is cut
}

TEST_F(SnapshotterTest, MismatchedOrDanglingPairIsAnErrorUntilFixed) {
  StorageSnapshot("x");
  PreProvisionedContent("taken", "snap-x", "someone-else");
  StartControllers();
  PreProvisionedSnapshot("wrong", "taken");
  PreProvisionedSnapshot("dangling", "nowhere");
  ASSERT_TRUE(Retried([&] { return !ErrorMessage(Snap("wrong")).empty() && !ErrorMessage(Snap("dangling")).empty(); }));
  json wrong = Snap("wrong");
  EXPECT_THAT(ErrorMessage(wrong), HasSubstr("bound to a different snapshot"));
  EXPECT_EQ(BoundContentName(wrong), "");
  EXPECT_EQ(Content("taken")["spec"]["volumeSnapshotRef"].value("uid", ""), "");
  EXPECT_TRUE(Retried([&] { return HasEvent("wrong", "SnapshotContentMisbound"); }));
  EXPECT_THAT(ErrorMessage(Snap("dangling")), HasSubstr("VolumeSnapshotContent nowhere is missing"));
  EXPECT_TRUE(Retried([&] { return HasEvent("dangling", "SnapshotContentMissing"); }));

  // The missing half appears: the pair binds and the error goes.
  StorageSnapshot("late");
  PreProvisionedContent("nowhere", "snap-late", "dangling");
  ASSERT_TRUE(Retried([&] { return IsReady(Snap("dangling")); }));
  EXPECT_EQ(ErrorMessage(Snap("dangling")), "");
  EXPECT_FALSE(IsReady(Snap("wrong")));
}

TEST_F(SnapshotterTest, DeletePolicyDeletesTheContentAndTheStorageSnapshot) {
  Create("secrets", "", "default", {{"metadata", {{"name", "snap-creds"}}}, {"stringData", {{"token", "s3cr3t"}}}});
  SnapshotClass("gold", "Delete",
                {{"csi.storage.k8s.io/snapshotter-secret-name", "snap-creds"},
                 {"csi.storage.k8s.io/snapshotter-secret-namespace", "default"}});
  BoundClaim("data");
  StartControllers();
  Snapshot("snap", "data", "gold");
  ASSERT_TRUE(Retried([&] { return IsReady(Snap("snap")); }));
  const std::string content_name = ContentOf("snap");
  ASSERT_EQ(driver_->snapshots().size(), 1u);

  ASSERT_TRUE(registry_->Delete(K("volumesnapshots", kGroup), "default", "snap").ok());
  ASSERT_TRUE(Retried([&] { return Snap("snap").is_null() && Content(content_name).is_null(); }));
  EXPECT_TRUE(driver_->snapshots().empty());
  EXPECT_GE(driver_->delete_snapshot_calls(), 1);
}

TEST_F(SnapshotterTest, RetainPolicyKeepsTheContentAndTheStorageSnapshot) {
  SnapshotClass("keep", "Retain");
  BoundClaim("data");
  StartControllers();
  Snapshot("snap", "data", "keep");
  ASSERT_TRUE(Retried([&] { return IsReady(Snap("snap")); }));
  const std::string uid = Snap("snap")["metadata"]["uid"];
  const std::string content_name = "snapcontent-" + uid;

  ASSERT_TRUE(registry_->Delete(K("volumesnapshots", kGroup), "default", "snap").ok());
  ASSERT_TRUE(Retried([&] { return Snap("snap").is_null(); }));
  ASSERT_TRUE(Settle(*store_));
  json content = Content(content_name);
  ASSERT_FALSE(content.is_null());
  EXPECT_EQ(content["spec"]["volumeSnapshotRef"]["uid"], uid);  // the reference stays
  EXPECT_EQ(content["metadata"]["annotations"][kAnnSnapshotBeingDeleted], "yes");
  EXPECT_EQ(content["status"]["snapshotHandle"], "snap-snapshot-" + uid);
  EXPECT_EQ(driver_->snapshots().size(), 1u);
  EXPECT_EQ(driver_->delete_snapshot_calls(), 0);

  // Deleting the retained content itself still leaves the storage snapshot.
  ASSERT_TRUE(registry_->Delete(K("volumesnapshotcontents", kGroup), "", content_name).ok());
  ASSERT_TRUE(Retried([&] { return Content(content_name).is_null(); }));
  EXPECT_EQ(driver_->snapshots().size(), 1u);
  EXPECT_EQ(driver_->delete_snapshot_calls(), 0);
}

TEST_F(SnapshotterTest, SourceClaimIsProtectedWhileTheSnapshotIsCut) {
  driver_->SetSnapshotsReady(false);
  SnapshotClass("gold");
  BoundClaim("data");
  StartControllers();
  Snapshot("snap", "data", "gold");
  ASSERT_TRUE(Retried([&] { return HasFinalizer(Claim("data"), kPvcAsSourceFinalizer); }));
  ASSERT_TRUE(Retried([&] { return !Content(ContentOf("snap")).is_null(); }));
  ASSERT_TRUE(registry_->Delete(K("persistentvolumeclaims"), "default", "data").ok());
  ASSERT_TRUE(Settle(*store_));
  json claim = Claim("data");
  ASSERT_FALSE(claim.is_null());  // held by the finalizer
  EXPECT_TRUE(claim["metadata"].contains("deletionTimestamp"));

  driver_->SetSnapshotsReady(true);
  // Released (gone here, where nothing else holds it).
  ASSERT_TRUE(Retried([&] { return Claim("data").is_null() || !HasFinalizer(Claim("data"), kPvcAsSourceFinalizer); }))
      << Claim("data").dump();
  EXPECT_TRUE(IsReady(Snap("snap")));
}

TEST_F(SnapshotterTest, SnapshotUsedAsRestoreSourceStaysUntilTheRestoreFinishes) {
  SnapshotClass("gold");
  BoundClaim("data");
  StartControllers();
  Snapshot("snap", "data", "gold");
  ASSERT_TRUE(Retried([&] { return IsReady(Snap("snap")); }));
  const std::string content_name = ContentOf("snap");
  Create("persistentvolumeclaims", "", "default",
         {{"metadata", {{"name", "restored"}}},
          {"spec",
           {{"accessModes", {"ReadWriteOnce"}},
            {"storageClassName", "fast"},
            {"dataSource", {{"apiGroup", kGroup}, {"kind", "VolumeSnapshot"}, {"name", "snap"}}},
            {"resources", {{"requests", {{"storage", "1Gi"}}}}}}}});
  ASSERT_TRUE(registry_->Delete(K("volumesnapshots", kGroup), "default", "snap").ok());
  ASSERT_TRUE(Retried([&] { return HasEvent("snap", "SnapshotDeletePending"); }));
  ASSERT_TRUE(Settle(*store_));
  EXPECT_FALSE(Snap("snap").is_null());
  EXPECT_FALSE(Content(content_name).is_null());
  EXPECT_EQ(driver_->snapshots().size(), 1u);

  SetStatus("persistentvolumeclaims", "default", "restored", {{"phase", "Bound"}});
  ASSERT_TRUE(Retried([&] { return Snap("snap").is_null() && Content(content_name).is_null(); }));
  EXPECT_TRUE(driver_->snapshots().empty());
}

TEST_F(SnapshotterTest, SnapshotDeletedWhileBeingCutLeaksNothing) {
  driver_->SetCreateDelay(absl::Milliseconds(600));
  SnapshotClass("gold");
  BoundClaim("data");
  StartControllers();
  Snapshot("snap", "data", "gold");
  ASSERT_TRUE(Retried([&] { return driver_->snapshot_calls() >= 1; }));
  const std::string content_name = ContentOf("snap");
  ASSERT_TRUE(registry_->Delete(K("volumesnapshots", kGroup), "default", "snap").ok());
  // The outstanding CreateSnapshot is finished, then what it made is deleted.
  ASSERT_TRUE(Retried([&] { return Snap("snap").is_null() && Content(content_name).is_null(); }));
  EXPECT_TRUE(driver_->snapshots().empty());
  EXPECT_GE(driver_->delete_snapshot_calls(), 1);
  EXPECT_TRUE(Retried([&] { return !HasFinalizer(Claim("data"), kPvcAsSourceFinalizer); }));
}

TEST_F(SnapshotterTest, RestartAfterALostCreateSnapshotAnswerMakesNoSecondSnapshot) {
  driver_->SetCreateDelay(absl::Milliseconds(800));
  SnapshotClass("gold");
  BoundClaim("data");
  StartControllers(true, /*rpc_timeout=*/absl::Milliseconds(200));
  Snapshot("snap", "data", "gold");
  // The call times out: its outcome is unknown, so the content stays marked.
  ASSERT_TRUE(Retried([&] { return ErrorMessage(Snap("snap")).find("failed to take snapshot") != std::string::npos; }));
  const std::string uid = Snap("snap")["metadata"]["uid"];
  const std::string content_name = "snapcontent-" + uid;
  EXPECT_EQ(Content(content_name)["metadata"]["annotations"][kAnnSnapshotBeingCreated], "yes");
  StopControllers();
  // Meanwhile the driver finished cutting it.
  ASSERT_TRUE(Retried([&] { return driver_->snapshots().size() == 1; }));
  driver_->SetCreateDelay(absl::ZeroDuration());

  StartControllers();
  ASSERT_TRUE(Retried([&] { return IsReady(Snap("snap")); }));
  auto snapshots = driver_->snapshots();
  ASSERT_EQ(snapshots.size(), 1u);
  EXPECT_TRUE(snapshots.contains("snapshot-" + uid));
  json content = Content(content_name);
  EXPECT_EQ(content["status"]["snapshotHandle"], "snap-snapshot-" + uid);
  EXPECT_TRUE(Retried([&] {
    return !Content(content_name)["metadata"].value("annotations", json::object()).contains(kAnnSnapshotBeingCreated);
  }));
  EXPECT_EQ(ErrorMessage(Snap("snap")), "");
}

TEST_F(SnapshotterTest, RestartAfterContentCreationConverges) {
  SnapshotClass("gold");
  BoundClaim("data");
  StartControllers(/*with_snapshotter=*/false);
  Snapshot("snap", "data", "gold");
  ASSERT_TRUE(Retried([&] {
    const std::string name = BoundContentName(Snap("snap"));
    return !name.empty() && !Content(name).is_null();
  }));
  EXPECT_FALSE(IsReady(Snap("snap")));
  EXPECT_EQ(driver_->snapshot_calls(), 0);
  StopControllers();

  StartControllers();
  ASSERT_TRUE(Retried([&] { return IsReady(Snap("snap")); }));
  EXPECT_EQ(driver_->snapshots().size(), 1u);
  // Contents are not duplicated either.
  EXPECT_EQ(registry_->List(K("volumesnapshotcontents", kGroup), "", {})->items.size(), 1u);
}

}  // namespace
}  // namespace berth::controllers
