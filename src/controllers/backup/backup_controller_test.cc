// The backup controller's life cycle without volumes (the data path is
// tests/integration/backup_up_test): validation, a backup of objects only,
// expiry on the fake clock and the repository's garbage collection at
// deletion, an interrupted backup found at start, and backups found in a
// location's repository becoming Backup objects.
#include "controllers/backup/backup_controller.h"

#include <fcntl.h>
#include <sys/file.h>

#include <filesystem>

#include "backup/repository.h"
#include "client/informer.h"
#include "common/clock.h"
#include "common/fd.h"
#include "controllers/testing/controller_fixture.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace berth::controllers {
namespace {

using json = nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kGroup[] = "backup.berth.io";

class BackupControllerTest : public testing::ControllerTest {
 protected:
  void SetUp() override {
    ControllerTest::SetUp();
    if (HasFatalFailure()) return;
    repo_dir_ = dir_.path() + "/repo";
    Create("namespaces", "", "", {{"metadata", {{"name", "shop"}}}});
    Create("pods", "", "shop",
           {{"metadata", {{"name", "web"}, {"labels", {{"app", "web"}}}}},
            {"spec", {{"containers", {{{"name", "main"}, {"image", "berth.local/toolbox:1"}}}}}}});
    Create("pods", "", "shop",
           {{"metadata", {{"name", "other"}, {"labels", {{"app", "other"}}}}},
            {"spec", {{"containers", {{{"name", "main"}, {"image", "berth.local/toolbox:1"}}}}}}});
  }
  void TearDown() override { StopController(); }

  void StartController() {
    backups_ = std::make_unique<client::Informer>(*registry_, K("backups", kGroup));
    locations_ = std::make_unique<client::Informer>(*registry_, K("backupstoragelocations", kGroup));
    snapshots_ = std::make_unique<client::Informer>(*registry_, K("volumesnapshots", "snapshot.storage.k8s.io"));
    mover_ = std::make_unique<DataMover>(directory_, DataMover::Options{});
    controller_ = std::make_unique<BackupController>(*registry_, *backups_, *locations_, *snapshots_, *mover_, nullptr,
                                                     BackupController::Options{.clock = &clock_});
    controller_->RegisterHandlers();
    for (auto* i : {backups_.get(), locations_.get(), snapshots_.get()}) {
      i->Start();
      ASSERT_TRUE(i->WaitForSync(absl::Seconds(10)));
    }
    controller_->Start();
  }
  void StopController() {
    if (controller_) controller_->Stop();
    for (auto* i : {backups_.get(), locations_.get(), snapshots_.get()}) {
      if (i != nullptr) i->Stop();
    }
    controller_.reset();
  }
  void Location(const std::string& name, const std::string& path, bool is_default = true) {
    Create("backupstoragelocations", kGroup, "",
           {{"metadata", {{"name", name}}},
            {"spec", {{"provider", "filesystem"}, {"default", is_default}, {"config", {{"path", path}}}}}});
  }
  std::string LocationPhase(const std::string& name) {
    return Get("backupstoragelocations", kGroup, "", name).value("status", json::object()).value("phase", "");
  }
  json Backup(const std::string& name) { return Get("backups", kGroup, "", name); }
  std::string Phase(const std::string& name) {
    const json b = Backup(name);
    return b.is_object() ? b.value("status", json::object()).value("phase", "") : "";
  }

  std::string repo_dir_;
  FakeClock clock_{absl::FromUnixSeconds(1'800'000'000)};
  client::DriverDirectory directory_;
  std::unique_ptr<client::Informer> backups_, locations_, snapshots_;
  std::unique_ptr<DataMover> mover_;
  std::unique_ptr<BackupController> controller_;
};

TEST_F(BackupControllerTest, ABackupOfObjectsCompletesAndExpiresWithItsData) {
  Location("default", repo_dir_);
  StartController();
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_TRUE(testing::Eventually([&] { return LocationPhase("default") == "Available"; }));
  EXPECT_TRUE(std::filesystem::exists(repo_dir_ + "/berth-backup.json")) << "a ReadWrite location makes its repository";

  Create("backups", kGroup, "",
         {{"metadata", {{"name", "b1"}}},
          {"spec",
           {{"includedNamespaces", {"shop"}}, {"labelSelector", {{"matchLabels", {{"app", "web"}}}}}, {"ttl", "1h"}}}});
  ASSERT_TRUE(testing::Eventually([&] { return Phase("b1") == "Completed"; })) << Backup("b1").dump(2);
  const json b1 = Backup("b1");
  EXPECT_THAT(b1["metadata"]["finalizers"], ElementsAre("backup.berth.io/repository"));
  EXPECT_EQ(b1["status"]["expiration"], "2027-01-15T09:00:00Z");  // start + 1h
  EXPECT_EQ(b1["status"]["progress"]["totalItems"], 1);
  EXPECT_EQ(b1["status"]["errors"], 0);

  auto repo = backup::Repository::Open(repo_dir_);
  ASSERT_TRUE(repo.ok()) << repo.status();
  auto manifest = (*repo)->ReadManifest("b1");
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  std::vector<std::string> names;
  for (const auto& o : manifest->objects)
    names.push_back(o["kind"].get<std::string>() + "/" + o["metadata"]["name"].get<std::string>());
  EXPECT_THAT(names, ElementsAre("Backup/b1", "Pod/web")) << "the selector leaves pod other out";

  // An hour later it is deleted, and its manifest with it.
  clock_.Advance(absl::Minutes(59));
  ASSERT_TRUE(testing::Settle(*store_));
  EXPECT_FALSE(Backup("b1").is_null());
  clock_.Advance(absl::Minutes(2));
  ASSERT_TRUE(testing::Eventually([&] { return Backup("b1").is_null(); })) << Backup("b1").dump(2);
  auto listed = (*repo)->ListBackups();
  ASSERT_TRUE(listed.ok());
  EXPECT_THAT(*listed, IsEmpty());
}

TEST_F(BackupControllerTest, ABackupWaitsForTheRepositorysGarbageCollection) {
  Location("default", repo_dir_);
  StartController();
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_TRUE(testing::Eventually([&] { return LocationPhase("default") == "Available"; }));
  // A collection (another berth up's, or this one's after a delete) holds
  // the repository's exclusive lock.
  Fd gc(::open((repo_dir_ + "/lock").c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(gc.ok());
  ASSERT_EQ(::flock(gc.get(), LOCK_EX | LOCK_NB), 0);

  Create("backups", kGroup, "", {{"metadata", {{"name", "queued"}}}, {"spec", {{"includedNamespaces", {"shop"}}}}});
  auto waiting = [&] {
    auto events = registry_->List(K("events"), "", {});
    if (!events.ok()) return std::string();
    for (const auto& e : events->items) {
      if (e.value("reason", "") == "WaitingForRepository") return e.value("message", "");
    }
    return std::string();
  };
  ASSERT_TRUE(testing::Eventually([&] { return !waiting().empty(); })) << Backup("queued").dump(2);
  EXPECT_THAT(waiting(), HasSubstr("garbage collection is running: the backup starts when it is done"));
  // Looked at again, a second later and later still: it waits, not fails.
  for (int i = 0; i < 3; ++i) {
    clock_.Advance(absl::Seconds(1));
    ASSERT_TRUE(testing::Settle(*store_));
    EXPECT_EQ(Phase("queued"), "") << "a backup waiting for the repository has not started";
  }
  gc = Fd();  // the collection ends
  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(testing::Eventually([&] { return Phase("queued") == "Completed"; })) << Backup("queued").dump(2);
  EXPECT_EQ(Backup("queued")["status"]["errors"], 0);
  auto repo = backup::Repository::Open(repo_dir_);
  ASSERT_TRUE(repo.ok());
  EXPECT_TRUE((*repo)->ReadManifest("queued").ok());
}

TEST_F(BackupControllerTest, ABadSpecFailsValidationWithEveryReason) {
  StartController();
  ASSERT_FALSE(HasFatalFailure());
  Create("backups", kGroup, "", {{"metadata", {{"name", "bad"}}}, {"spec", {{"storageLocation", "nowhere"}}}});
  ASSERT_TRUE(testing::Eventually([&] { return Phase("bad") == "FailedValidation"; })) << Backup("bad").dump(2);
  EXPECT_THAT(Backup("bad")["status"]["validationErrors"][0].get<std::string>(),
              HasSubstr("backup storage location \"nowhere\" not found"));
}

TEST_F(BackupControllerTest, ABackupFoundInProgressAtStartWasInterruptedAndFails) {
  Location("default", repo_dir_);
  Create("backups", kGroup, "",
         {{"metadata", {{"name", "cut"}, {"finalizers", {"backup.berth.io/repository"}}}}, {"spec", json::object()}});
  PatchStatus("backups", kGroup, "", "cut", {{"phase", "InProgress"}, {"startTimestamp", "2027-01-15T08:00:00Z"}});
  StartController();
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_TRUE(testing::Eventually([&] { return Phase("cut") == "Failed"; })) << Backup("cut").dump(2);
  EXPECT_THAT(Backup("cut")["status"]["failureReason"].get<std::string>(), HasSubstr("berth up stopped"));
}

TEST_F(BackupControllerTest, BackupsInARepositoryWithoutObjectsAreAddedCompleted) {
  {
    // Taken "now" on the controller's clock: a backup from the real clock's
    // past would have expired on the fake one and be deleted at once.
    auto repo = backup::Repository::Create(repo_dir_, {}, clock_);
    ASSERT_TRUE(repo.ok()) << repo.status();
    auto w = (*repo)->StartBackup("elsewhere");
    ASSERT_TRUE(w.ok());
    (*w)->AddObject({{"apiVersion", "backup.berth.io/v1"},
                     {"kind", "Backup"},
                     {"metadata", {{"name", "elsewhere"}}},
                     {"spec", {{"includedNamespaces", {"shop"}}, {"ttl", "2h"}}}});
    ASSERT_TRUE((*w)->Commit().ok());
  }
  Create("backupstoragelocations", kGroup, "",
         {{"metadata", {{"name", "theirs"}}},
          {"spec", {{"provider", "filesystem"}, {"accessMode", "ReadOnly"}, {"config", {{"path", repo_dir_}}}}}});
  StartController();
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_TRUE(testing::Eventually([&] { return Phase("elsewhere") == "Completed"; })) << Backup("elsewhere").dump(2);
  const json b = Backup("elsewhere");
  EXPECT_EQ(b["spec"]["storageLocation"], "theirs");
  EXPECT_THAT(b["spec"]["includedNamespaces"], ElementsAre("shop"));

  // Deleting it from a ReadOnly location leaves the repository alone.
  ASSERT_TRUE(registry_->Delete(K("backups", kGroup), "", "elsewhere").ok());
  ASSERT_TRUE(testing::Eventually([&] { return Backup("elsewhere").is_null(); }));
  auto repo = backup::Repository::Open(repo_dir_);
  ASSERT_TRUE(repo.ok());
  auto listed = (*repo)->ListBackups();
  ASSERT_TRUE(listed.ok());
  EXPECT_THAT(*listed, ElementsAre("elsewhere"));
}

}  // namespace
}  // namespace berth::controllers
