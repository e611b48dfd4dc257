// The Restore controller against an in-process registry and a real backup
// repository in a temp dir (no driver: claims are bound by hand, as the
// provisioner binds them once their volume is filled).
#include "controllers/backup/restore_controller.h"

#include <fcntl.h>
#include <unistd.h>

#include <memory>

#include "backup/repository.h"
#include "client/object.h"
#include "common/fd.h"
#include "controllers/testing/controller_fixture.h"
#include "controllers/volume/pv_binder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace berth::controllers {
namespace {

using ::testing::ElementsAre;
using testing::Eventually;
using ::testing::HasSubstr;
using testing::K;

constexpr char kGroup[] = "backup.berth.io";
constexpr int64_t kVolumeBytes = 4 << 20;

// A claim and its pod as the API server stored them when they were backed up.
json StoredClaim() {
  return json::parse(R"({
    "apiVersion": "v1", "kind": "PersistentVolumeClaim",
    "metadata": {"name": "data", "namespace": "shop", "uid": "0b5c", "resourceVersion": "42",
                 "creationTimestamp": "2026-11-26T10:00:00Z", "finalizers": ["kubernetes.io/pvc-protection"],
                 "labels": {"app": "db"},
                 "annotations": {"team": "payments", "pv.kubernetes.io/bind-completed": "yes",
                                 "volume.kubernetes.io/selected-node": "node-old",
                                 "volume.kubernetes.io/storage-provisioner": "local.csi.berth.io"}},
    "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "local", "volumeMode": "Filesystem",
             "resources": {"requests": {"storage": "4Mi"}}, "volumeName": "pvc-0b5c",
             "dataSource": {"kind": "PersistentVolumeClaim", "name": "seed"}},
    "status": {"phase": "Bound", "capacity": {"storage": "4Mi"}}})");
}
json StoredPod() {
  return json::parse(R"({
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "db", "namespace": "shop", "uid": "77aa", "resourceVersion": "43",
                 "creationTimestamp": "2026-11-26T10:00:01Z", "labels": {"app": "db"},
                 "annotations": {"pre.hook.backup.berth.io/command": "[\"sync\"]"},
                 "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "db-1", "uid": "9f"}],
                 "managedFields": [{"manager": "kubectl"}]},
    "spec": {"nodeName": "node-old",
             "containers": [{"name": "db", "image": "sqlite", "volumeMounts": [{"name": "d", "mountPath": "/data"}]}],
             "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]},
    "status": {"phase": "Running", "hostIP": "10.0.0.9"}})");
}

class RestoreControllerTest : public testing::ControllerTest {
 protected:
  void SetUp() override {
    ControllerTest::SetUp();
    if (HasFatalFailure()) return;
    repo_path_ = dir_.Join("repo");
    auto repo = backup::Repository::Create(repo_path_);
    ASSERT_TRUE(repo.ok()) << repo.status();
    repo_ = std::move(*repo);
    Create("backupstoragelocations", kGroup, "",
           {{"metadata", {{"name", "default"}}},
            {"spec", {{"provider", "filesystem"}, {"config", {{"path", repo_path_}}}, {"default", true}}}});
    restores_ = std::make_unique<client::Informer>(*registry_, K("restores", kGroup));
    backups_ = std::make_unique<client::Informer>(*registry_, K("backups", kGroup));
    claims_ = std::make_unique<client::Informer>(*registry_, K("persistentvolumeclaims"));
    controller_ = std::make_unique<RestoreController>(*registry_, RestoreInformers{*restores_, *backups_, *claims_},
                                                      RestoreController::Options{.tracker = &tracker_});
    controller_->RegisterHandlers();  // queues, but no workers: the tests call Sync
    for (auto* i : {restores_.get(), backups_.get(), claims_.get()}) {
      i->Start();
      ASSERT_TRUE(i->WaitForSync(absl::Seconds(10)));
    }
  }
  void TearDown() override {
    // The informers' threads call the controller's handlers: stop them first.
    for (auto* i : {restores_.get(), backups_.get(), claims_.get()}) {
      if (i) i->Stop();
    }
    controller_.reset();
  }

  // Backup `name` in the repository (the objects, and one volume per claim
  // named <namespace>/<claim>) and as a Backup object in `phase`.
  void Backup(const std::string& name, const std::vector<json>& objects, const std::string& phase = "Completed",
              json labels = json::object()) {
    auto w = repo_->StartBackup(name);
    ASSERT_TRUE(w.ok()) << w.status();
    const std::string file = dir_.Join("volume-" + name);
    Fd fd(::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
    ASSERT_EQ(::ftruncate(fd.get(), kVolumeBytes), 0);
    ASSERT_EQ(::pwrite(fd.get(), "hello", 5, 0), 5);
    for (const auto& o : objects) {
      (*w)->AddObject(o);
      if (o["kind"] == "PersistentVolumeClaim") {
        const std::string volume =
            o["metadata"]["namespace"].get<std::string>() + "/" + o["metadata"]["name"].get<std::string>();
        auto added = (*w)->AddVolume(
            {.name = volume, .fd = fd.get(), .size_bytes = kVolumeBytes, .ranges = {{0, kVolumeBytes}}});
        ASSERT_TRUE(added.ok()) << added.status();
      }
    }
    ASSERT_TRUE((*w)->Commit().ok());
    Create("backups", kGroup, "", {{"metadata", {{"name", name}, {"labels", labels}}}, {"spec", json::object()}});
    PatchStatus("backups", kGroup, "", name,
                {{"phase", phase}, {"startTimestamp", "2026-11-26T10:00:0" + std::to_string(++started_) + "Z"}});
    ASSERT_TRUE(Eventually([&] {
      auto b = backups_->GetSharedByKey(name);
      return b && client::Str(*b, {"status", "phase"}) == phase;  // no status until the patch lands
    }));
  }
  json Restore(const std::string& name, json spec) {
    Create("restores", kGroup, "", {{"metadata", {{"name", name}}}, {"spec", spec}});
    EXPECT_TRUE(controller_->Sync(name).ok());
    return Get("restores", kGroup, "", name);
  }
  void Bind(const std::string& ns, const std::string& claim) {
    PatchStatus("persistentvolumeclaims", "", ns, claim, {{"phase", "Bound"}});
    ASSERT_TRUE(Eventually([&] {
      auto c = claims_->GetSharedByKey(ns + "/" + claim);
      return c && client::Str(*c, {"status", "phase"}) == "Bound";
    }));
  }
  // Waits until the claims cache has the claim (the restore reads it there).
  void Cached(const std::string& ns, const std::string& claim) {
    ASSERT_TRUE(Eventually([&] { return claims_->GetSharedByKey(ns + "/" + claim) != nullptr; }));
  }

  std::string repo_path_;
  std::unique_ptr<backup::Repository> repo_;
  RestoreTracker tracker_;
  int started_ = 0;
  std::unique_ptr<client::Informer> restores_, backups_, claims_;
  std::unique_ptr<RestoreController> controller_;
};

TEST_F(RestoreControllerTest, MapsTheNamespaceStripsTheOldLifeAndCompletesOnceClaimsAreBound) {
  Backup("nightly", {StoredClaim(), StoredPod()});
  json r = Restore("r1", {{"backupName", "nightly"}, {"namespaceMapping", {{"shop", "staging"}}}});
  EXPECT_EQ(r["status"]["phase"], "InProgress");
  EXPECT_FALSE(r["status"].value("startTimestamp", "").empty());
  EXPECT_EQ(r["status"]["progress"],
            json({{"totalItems", 2}, {"itemsRestored", 2}, {"totalBytes", kVolumeBytes}, {"bytesDone", 0}}));

  EXPECT_FALSE(Get("namespaces", "", "", "staging").is_null());
  EXPECT_TRUE(Get("persistentvolumeclaims", "", "shop", "data").is_null());
  json claim = Get("persistentvolumeclaims", "", "staging", "data");
  ASSERT_FALSE(claim.is_null());
  EXPECT_EQ(claim["spec"]["dataSourceRef"], json({{"apiGroup", kGroup}, {"kind", "Backup"}, {"name", "nightly"}}));
  EXPECT_FALSE(claim["spec"].contains("volumeName"));
  EXPECT_EQ(claim["spec"]["storageClassName"], "local");
  EXPECT_EQ(claim["spec"]["accessModes"], json({"ReadWriteOnce"}));
  EXPECT_EQ(claim["spec"]["resources"]["requests"]["storage"], "4Mi");
  EXPECT_EQ(claim["spec"]["volumeMode"], "Filesystem");
  EXPECT_NE(claim["metadata"]["uid"], "0b5c");
  EXPECT_EQ(claim["metadata"]["labels"],
            json({{"app", "db"}, {kLabelRestoreName, "r1"}, {kLabelRestoredBackup, "nightly"}}));
  const json& ann = claim["metadata"]["annotations"];
  EXPECT_EQ(ann["team"], "payments");
  EXPECT_EQ(ann[kAnnSourceVolume], "shop/data");
  for (const char* gone : {"pv.kubernetes.io/bind-completed", "volume.kubernetes.io/selected-node",
                           "volume.kubernetes.io/storage-provisioner"}) {
    EXPECT_FALSE(ann.contains(gone)) << gone;
  }
  EXPECT_NE(claim["status"].value("phase", ""), "Bound");

  json pod = Get("pods", "", "staging", "db");
  ASSERT_FALSE(pod.is_null());
  EXPECT_FALSE(pod["spec"].contains("nodeName"));
  EXPECT_FALSE(pod["spec"].contains("nodeSelector"));  // the scheduler chooses
  EXPECT_EQ(pod["spec"]["volumes"], StoredPod()["spec"]["volumes"]);
  EXPECT_EQ(pod["spec"]["containers"][0]["image"], "sqlite");
  EXPECT_NE(pod["metadata"]["uid"], "77aa");
  EXPECT_FALSE(pod["metadata"].contains("ownerReferences"));
  EXPECT_FALSE(pod["metadata"].contains("managedFields"));
  EXPECT_EQ(pod["metadata"]["annotations"], StoredPod()["metadata"]["annotations"]);
  EXPECT_EQ(pod["metadata"]["labels"]["app"], "db");
  EXPECT_NE(pod["status"].value("phase", ""), "Running");

  // Filling: the population's progress shows; then bound → Completed.
  Cached("staging", "data");
  tracker_.Progress(claim["metadata"]["uid"], kVolumeBytes / 4, kVolumeBytes);
  ASSERT_TRUE(controller_->Sync("r1").ok());
  EXPECT_EQ(Get("restores", kGroup, "", "r1")["status"]["progress"]["bytesDone"], kVolumeBytes / 4);
  Bind("staging", "data");
  ASSERT_TRUE(controller_->Sync("r1").ok());
  r = Get("restores", kGroup, "", "r1");
  EXPECT_EQ(r["status"]["phase"], "Completed");
  EXPECT_EQ(r["status"]["progress"]["bytesDone"], kVolumeBytes);
  EXPECT_EQ(r["status"].value("errors", 0), 0);
  EXPECT_EQ(r["status"].value("warnings", 0), 0);
  EXPECT_FALSE(r["status"].value("completionTimestamp", "").empty());
}

TEST_F(RestoreControllerTest, ATargetNodePinsEveryClaimAndPod) {
  Create("nodes", "", "", {{"metadata", {{"name", "node-b"}, {"labels", {{"kubernetes.io/hostname", "node-b"}}}}}});
  json pod = StoredPod();
  pod["spec"]["nodeSelector"] = {{"kubernetes.io/hostname", "node-old"}, {"disk", "ssd"}};
  Backup("nightly", {StoredClaim(), pod});
  json r = Restore("r1", {{"backupName", "nightly"}, {"targetNode", "node-b"}});
  EXPECT_EQ(r["status"]["phase"], "InProgress");
  EXPECT_EQ(Get("persistentvolumeclaims", "", "shop", "data")["metadata"]["annotations"][kAnnSelectedNode], "node-b");
  EXPECT_EQ(Get("pods", "", "shop", "db")["spec"]["nodeSelector"],
            json({{"kubernetes.io/hostname", "node-b"}, {"disk", "ssd"}}));
}

TEST_F(RestoreControllerTest, ExistingObjectsAreWarningsAndNeverOverwritten) {
  Create("namespaces", "", "", {{"metadata", {{"name", "shop"}}}});
  json theirs = {{"metadata", {{"name", "db"}, {"labels", {{"owner", "someone"}}}}},
                 {"spec", {{"containers", {{{"name", "c"}, {"image", "nginx"}}}}}}};
  Create("pods", "", "shop", theirs);
  Backup("nightly", {StoredClaim(), StoredPod()});
  json r = Restore("r1", {{"backupName", "nightly"}});
  EXPECT_EQ(r["status"]["warnings"], 1);
  EXPECT_EQ(r["status"]["progress"]["itemsRestored"], 1);
  EXPECT_EQ(Get("pods", "", "shop", "db")["spec"]["containers"][0]["image"], "nginx");
  // A restart (another sync) finds its own claim again: no new warning.
  ASSERT_TRUE(controller_->Sync("r1").ok());
  EXPECT_EQ(Get("restores", kGroup, "", "r1")["status"]["warnings"], 1);
  Cached("shop", "data");
  Bind("shop", "data");
  ASSERT_TRUE(controller_->Sync("r1").ok());
  r = Get("restores", kGroup, "", "r1");
  EXPECT_EQ(r["status"]["phase"], "Completed");  // warnings alone do not fail a restore (Velero's rule)
  EXPECT_EQ(r["status"]["warnings"], 1);
}

TEST_F(RestoreControllerTest, ValidationNamesEveryProblem) {
  Backup("running", {StoredClaim()}, "InProgress");
  json r = Restore("r1", {{"backupName", "running"}, {"targetNode", "node-x"}});
  EXPECT_EQ(r["status"]["phase"], "FailedValidation");
  EXPECT_THAT(r["status"]["validationErrors"].get<std::vector<std::string>>(),
              ElementsAre(HasSubstr("backup \"running\" is InProgress"), HasSubstr("node \"node-x\" not found")));
  r = Restore("r2", {{"backupName", "nope"}});
  EXPECT_THAT(r["status"]["validationErrors"].get<std::vector<std::string>>(),
              ElementsAre(HasSubstr("backup \"nope\" not found")));
  r = Restore("r3", {{"scheduleName", "hourly"}});
  EXPECT_THAT(r["status"]["validationErrors"].get<std::vector<std::string>>(),
              ElementsAre(HasSubstr("no Completed or PartiallyFailed backup of schedule \"hourly\"")));
  // Nothing was created by any of them.
  EXPECT_TRUE(Get("namespaces", "", "", "shop").is_null());
}

TEST_F(RestoreControllerTest, AScheduleRestoresItsNewestRestorableBackupAndKeepsToIt) {
  const json labels = {{"backup.berth.io/schedule-name", "nightly"}};
  Backup("nightly-1", {StoredClaim()}, "Completed", labels);
  Backup("nightly-2", {StoredClaim()}, "PartiallyFailed", labels);
  Backup("nightly-3", {StoredClaim()}, "Failed", labels);
  Backup("other", {StoredClaim()}, "Completed");
  Create("restores", kGroup, "", {{"metadata", {{"name", "r1"}}}, {"spec", {{"scheduleName", "nightly"}}}});
  ASSERT_TRUE(controller_->Sync("r1").ok());  // chooses and records
  EXPECT_EQ(Get("restores", kGroup, "", "r1")["metadata"]["annotations"][kAnnRestoreBackup], "nightly-2");
  Backup("nightly-4", {StoredClaim()}, "Completed", labels);  // newer, but the choice is made
  ASSERT_TRUE(controller_->Sync("r1").ok());
  EXPECT_EQ(Get("restores", kGroup, "", "r1")["status"]["phase"], "InProgress");
  EXPECT_EQ(Get("persistentvolumeclaims", "", "shop", "data")["spec"]["dataSourceRef"]["name"], "nightly-2");
}

TEST_F(RestoreControllerTest, AVolumeThatCannotBeFilledEndsTheRestorePartiallyFailed) {
  json other = StoredClaim();
  other["metadata"]["name"] = "logs";
  Backup("nightly", {StoredClaim(), other});
  ASSERT_EQ(Restore("r1", {{"backupName", "nightly"}})["status"]["phase"], "InProgress");
  Cached("shop", "data");
  Cached("shop", "logs");
  Bind("shop", "logs");
  tracker_.Failed(Get("persistentvolumeclaims", "", "shop", "data")["metadata"]["uid"],
                  absl::DataLossError("chunk 3fa0 of backup nightly is corrupt"));
  ASSERT_TRUE(controller_->Sync("r1").ok());
  json r = Get("restores", kGroup, "", "r1");
  EXPECT_EQ(r["status"]["phase"], "PartiallyFailed");
  EXPECT_EQ(r["status"]["errors"], 1);
  EXPECT_EQ(r["status"]["progress"]["bytesDone"], kVolumeBytes);
}

TEST_F(RestoreControllerTest, AnUnreadableManifestFailsTheRestore) {
  Backup("nightly", {StoredClaim()});
  ASSERT_TRUE(repo_->DeleteBackup("nightly").ok());
  json r = Restore("r1", {{"backupName", "nightly"}});
  EXPECT_EQ(r["status"]["phase"], "Failed");
  EXPECT_THAT(r["status"]["failureReason"].get<std::string>(), HasSubstr("reading backup nightly"));
  EXPECT_TRUE(Get("namespaces", "", "", "shop").is_null());
}

}  // namespace
}  // namespace berth::controllers
