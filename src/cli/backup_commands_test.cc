// berth backup / restore against an in-process API server over HTTPS (as
// the CLI reaches berth up). No controller runs: the tests write the status
// a controller would, to check what --wait, get and describe make of it;
// verify runs on a real repository in a temp dir.
#include "cli/backup_commands.h"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "apiserver/control_plane.h"
#include "apiserver/kubeconfig.h"
#include "backup/repository.h"
#include "cli/backup_location.h"
#include "client/object.h"
#include "common/fd.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace berth::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using json = nlohmann::json;

constexpr char kGroup[] = "backup.berth.io";
constexpr int64_t kGiB = int64_t{1} << 30;

class BackupCommandsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    apiserver::ControlPlane::Options o;
    o.data_dir = dir_.Join("data");
    o.api_address = "127.0.0.1:0";
    auto cp = apiserver::ControlPlane::Start(o);
    ASSERT_TRUE(cp.ok()) << cp.status();
    cp_ = std::move(*cp);
    auto client = apiserver::ApiClientForKubeconfig(cp_->kubeconfig_path());
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
  }
  void TearDown() override {
    if (cp_) cp_->Shutdown();
  }

  const api::KindInfo& Kind(const char* resource) { return client::K(resource, kGroup); }
  json Stored(const char* resource, const std::string& name) {
    auto got = cp_->registry().Get(Kind(resource), "", name);
    EXPECT_TRUE(got.ok()) << got.status();
    return got.ok() ? *got : json();
  }
  // What a controller writes: a merge patch of the status.
  void SetStatus(const char* resource, const std::string& name, const json& status) {
    auto st = cp_->registry().Patch(Kind(resource), "", name, json({{"status", status}}).dump(),
                                    apiserver::PatchType::kMerge, apiserver::Subresource::kStatus);
    ASSERT_TRUE(st.ok()) << st.status();
  }

  berth::testing::TempDir dir_;
  std::unique_ptr<apiserver::ControlPlane> cp_;
  std::unique_ptr<http::ApiClient> client_;
};

TEST_F(BackupCommandsTest, CreateWritesTheSpecVeleroStyle) {
  std::ostringstream out;
  ASSERT_TRUE(BackupCreate(*client_,
                           {.name = "nightly",
                            .include_namespaces = {"shop, db", "web"},
                            .selector = "app=db,tier in (primary,replica)",
                            .ttl = "24h",
                            .storage_location = "offsite"},
                           out, false)
                  .ok());
  EXPECT_EQ(out.str(), "backup.backup.berth.io/nightly created\n");
  EXPECT_EQ(Stored("backups", "nightly")["spec"], json::parse(R"({
      "includedNamespaces": ["shop", "db", "web"],
      "labelSelector": {"matchLabels": {"app": "db"},
                        "matchExpressions": [{"key": "tier", "operator": "In", "values": ["primary", "replica"]}]},
      "ttl": "24h0m0s", "storageLocation": "offsite"})"));

  // Defaults are the API's; mistakes are refused before anything is sent.
  ASSERT_TRUE(BackupCreate(*client_, {.name = "plain"}, out, false).ok());
  EXPECT_EQ(Stored("backups", "plain")["spec"], json({{"ttl", "720h0m0s"}}));
  absl::Status st = BackupCreate(*client_, {.name = "x", .ttl = "1d"}, out, false);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("--ttl: time: unknown unit \"d\""));
  st = BackupCreate(*client_, {.name = "x", .selector = "=db"}, out, false);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  st = BackupCreate(*client_, {.name = "plain"}, out, false);
  EXPECT_EQ(st.code(), absl::StatusCode::kAlreadyExists) << st;

  std::ostringstream restore_out;
  ASSERT_TRUE(RestoreCreate(*client_,
                            {.name = "r1",
                             .from_backup = "nightly",
                             .namespace_mappings = {"shop:shop-copy,db:db-copy"},
                             .target_node = "node-2"},
                            restore_out, false)
                  .ok());
  EXPECT_EQ(restore_out.str(), "restore.backup.berth.io/r1 created\n");
  EXPECT_EQ(Stored("restores", "r1")["spec"], json::parse(R"({"backupName": "nightly",
      "namespaceMapping": {"shop": "shop-copy", "db": "db-copy"}, "targetNode": "node-2"})"));
  st = RestoreCreate(*client_, {.name = "r2", .from_backup = "nightly", .namespace_mappings = {"shop"}}, out, false);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("\"shop\" is not OLD:NEW"));
  st = RestoreCreate(*client_, {.name = "r2", .from_backup = "nightly", .namespace_mappings = {"shop:Shop"}}, out,
                     false);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << "the API's validation";
}

TEST_F(BackupCommandsTest, WaitFollowsProgressToTheEnd) {
  std::ostringstream created;
  ASSERT_TRUE(BackupCreate(*client_, {.name = "b"}, created, false).ok());
  SetStatus("backups", "b", {{"phase", "InProgress"}, {"progress", {{"totalBytes", 4 * kGiB}, {"bytesDone", kGiB}}}});

  std::ostringstream out;
  absl::Status result;
  std::thread waiter([&, client = client_->Clone()] {
    result = WaitForBackupKind(*client, Kind("backups"), "b", out, /*terminal=*/false);
  });
  SetStatus("backups", "b", {{"progress", {{"bytesDone", 3 * kGiB}}}});
  SetStatus("backups", "b", {{"phase", "Completed"}, {"progress", {{"bytesDone", 4 * kGiB}}}});
  waiter.join();
  ASSERT_TRUE(result.ok()) << result;
  // Each state once, in order (the first ones the waiter may have read
  // already moved on).
  const std::string text = out.str();
  EXPECT_THAT(text, ::testing::EndsWith("Completed 4Gi/4Gi\n"));
  const std::vector<std::string> all = {"InProgress 1Gi/4Gi\n", "InProgress 3Gi/4Gi\n", "Completed 4Gi/4Gi\n"};
  size_t from = 0;
  while (from < all.size() && !text.starts_with(all[from])) ++from;
  std::string want;
  for (size_t i = from; i < all.size(); ++i) want += all[i];
  EXPECT_EQ(text, want);

  // On a terminal: one line, rewritten.
  std::ostringstream tty;
  ASSERT_TRUE(WaitForBackupKind(*client_, Kind("backups"), "b", tty, /*terminal=*/true).ok());
  EXPECT_EQ(tty.str(), "\r\033[KCompleted 4Gi/4Gi\n");
}

TEST_F(BackupCommandsTest, WaitFailsUnlessCompleted) {
  std::ostringstream out;
  ASSERT_TRUE(BackupCreate(*client_, {.name = "b"}, out, false).ok());
  SetStatus("backups", "b",
            {{"phase", "PartiallyFailed"}, {"errors", 1}, {"failureReason", "volume shop/data: snapshot timed out"}});
  absl::Status st = WaitForBackupKind(*client_, Kind("backups"), "b", out, false);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(st.message(), "backup b ended PartiallyFailed: volume shop/data: snapshot timed out (1 errors)");

  std::ostringstream restore_out;
  ASSERT_TRUE(RestoreCreate(*client_, {.name = "r", .from_backup = "b"}, restore_out, false).ok());
  SetStatus("restores", "r", {{"phase", "FailedValidation"}, {"validationErrors", {"backup b is not Completed"}}});
  st = WaitForBackupKind(*client_, Kind("restores"), "r", restore_out, false);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(st.message(), "restore r ended FailedValidation\nbackup b is not Completed");

  st = WaitForBackupKind(*client_, Kind("backups"), "nope", out, false);
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound);
}

TEST_F(BackupCommandsTest, GetAndDescribe) {
  std::ostringstream out;
  ASSERT_TRUE(BackupKindGet(*client_, Kind("backups"), "", out).ok());
  EXPECT_EQ(out.str(), "No resources found\n");
  ASSERT_TRUE(
      BackupCreate(*client_, {.name = "nightly", .include_namespaces = {"shop"}, .selector = "app=db"}, out, false)
          .ok());
  SetStatus("backups", "nightly", json::parse(R"({"phase": "InProgress", "warnings": 1,
                "progress": {"totalItems": 3, "itemsBackedUp": 1, "totalBytes": 4294967296, "bytesDone": 1288490189},
                "volumes": [{"namespace": "shop", "persistentVolumeClaim": "data", "persistentVolume": "pvc-1",
                             "node": "node-1", "phase": "Completed", "sizeBytes": 4294967296,
                             "bytesRead": 44040192, "bytesAdded": 1048576, "snapshotName": "nightly-data",
                             "baseBackup": "nightly-0"},
                            {"namespace": "shop", "persistentVolumeClaim": "logs", "phase": "InProgress"}]})"));
  std::ostringstream table;
  ASSERT_TRUE(BackupKindGet(*client_, Kind("backups"), "nightly", table).ok());
  EXPECT_THAT(table.str(), StartsWith("NAME      PHASE        ERRORS   WARNINGS   PROGRESS    STORAGE LOCATION   "
                                      "EXPIRES   AGE\n"
                                      "nightly   InProgress   0        1          1.2Gi/4Gi   <none>             "
                                      "<none>    "));

  std::ostringstream described;
  ASSERT_TRUE(BackupKindDescribe(*client_, Kind("backups"), "nightly", described).ok());
  const std::string d = described.str();
  EXPECT_THAT(d, HasSubstr("Name:                   nightly\n"));
  EXPECT_THAT(d, HasSubstr("Phase:                  InProgress\n"));
  EXPECT_THAT(d, HasSubstr("  Included namespaces:  shop\n"));
  EXPECT_THAT(d, HasSubstr("  Label selector:       app=db\n"));
  EXPECT_THAT(d, HasSubstr("  TTL:                  720h0m0s\n"));
  EXPECT_THAT(d, HasSubstr("Progress:               1.2Gi/4Gi, 1 of 3 items\n"));
  EXPECT_THAT(d, HasSubstr("Warnings:               1\n"));
  EXPECT_THAT(d,
              HasSubstr("Volumes:\n"
                        "  CLAIM       VOLUME   NODE     PHASE        SIZE   READ   ADDED   SNAPSHOT       BASE"
                        "        MESSAGE\n"
                        "  shop/data   pvc-1    node-1   Completed    4Gi    42Mi   1Mi     nightly-data   nightly-0\n"
                        "  shop/logs   -        -        InProgress   -      -      -       -              -\n"));
  EXPECT_THAT(d, HasSubstr("Events:        <none>\n"));

  std::ostringstream restore_out;
  ASSERT_TRUE(RestoreCreate(*client_, {.name = "r", .from_backup = "nightly", .namespace_mappings = {"shop:shop-copy"}},
                            restore_out, false)
                  .ok());
  std::ostringstream restore_d;
  ASSERT_TRUE(BackupKindDescribe(*client_, Kind("restores"), "r", restore_d).ok());
  EXPECT_THAT(restore_d.str(), HasSubstr("  Backup:               nightly\n"));
  EXPECT_THAT(restore_d.str(), HasSubstr("  Namespace mapping:    shop -> shop-copy\n"));
  EXPECT_THAT(restore_d.str(), HasSubstr("Phase:                  New\n"));

  EXPECT_EQ(BackupKindDescribe(*client_, Kind("backups"), "nope", out).code(), absl::StatusCode::kNotFound);
}

TEST_F(BackupCommandsTest, DeleteLeavesTheDataToTheController) {
  std::ostringstream out;
  ASSERT_TRUE(BackupCreate(*client_, {.name = "b"}, out, false).ok());
  // The controller's finalizer keeps the object until the data is gone.
  json b = Stored("backups", "b");
  b["metadata"]["finalizers"] = {"backup.berth.io/repository"};
  ASSERT_TRUE(cp_->registry().Update(Kind("backups"), "", "b", b, apiserver::Subresource::kMain).ok());
  std::ostringstream deleted;
  ASSERT_TRUE(BackupDelete(*client_, "b", deleted).ok());
  EXPECT_THAT(deleted.str(), StartsWith("Request to delete backup.backup.berth.io \"b\" submitted"));
  EXPECT_TRUE(client::Deleting(Stored("backups", "b")));
  EXPECT_EQ(BackupDelete(*client_, "nope", deleted).code(), absl::StatusCode::kNotFound);
}

TEST_F(BackupCommandsTest, VerifyReadsTheLocationsRepository) {
  const std::string root = dir_.Join("repo");
  {
    auto repo = backup::Repository::Create(root);
    ASSERT_TRUE(repo.ok()) << repo.status();
    const std::string volume = dir_.Join("volume");
    {
      std::ofstream f(volume);
      for (int i = 0; i < 3 * 1024; ++i) f << std::string(1024, static_cast<char>('a' + i % 7));
    }
    Fd fd(::open(volume.c_str(), O_RDONLY | O_CLOEXEC));
    auto writer = (*repo)->StartBackup("nightly");
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE(
        (*writer)->AddVolume({.name = "pvc-1", .fd = fd.get(), .size_bytes = 3 << 20, .ranges = {{0, 3 << 20}}}).ok());
    ASSERT_TRUE((*writer)->Commit().ok());
  }
  std::ostringstream out;
  absl::Status st = BackupVerify(*client_, "", "", out);
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(st.message(), HasSubstr("--backup-location"));

  ASSERT_TRUE(cp_->registry()
                  .Create(Kind("backupstoragelocations"), "",
                          {{"metadata", {{"name", "default"}}},
                           {"spec", {{"provider", "filesystem"}, {"config", {{"path", root}}}, {"default", true}}}})
                  .ok());
  ASSERT_TRUE(BackupVerify(*client_, "", "", out).ok()) << out.str();
  EXPECT_EQ(out.str(), "Verified 1 backup in default (" + root + "): 3 chunks, 3Mi\nOK\n");

  // One flipped byte in one chunk: named, with the backup, and exit 1.
  std::string chunk;
  for (const auto& e : std::filesystem::recursive_directory_iterator(root + "/chunks")) {
    if (e.is_regular_file()) chunk = e.path();
  }
  ASSERT_FALSE(chunk.empty());
  {
    std::fstream f(chunk, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(20);
    char c;
    f.read(&c, 1);
    f.seekp(20);
    c = static_cast<char>(c ^ 0x5a);
    f.write(&c, 1);
  }
  std::ostringstream bad;
  st = BackupVerify(*client_, "nightly", "default", bad);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_EQ(st.message(), "1 problem found in the repository at " + root);
  const std::string hash = std::filesystem::path(chunk).stem();
  EXPECT_THAT(bad.str(), HasSubstr(hash));
  EXPECT_THAT(bad.str(), HasSubstr("(referenced by backups: nightly)"));

  EXPECT_EQ(BackupVerify(*client_, "", "elsewhere", bad).code(), absl::StatusCode::kNotFound);
}

TEST_F(BackupCommandsTest, UpsBackupLocationMakesTheRepositoryAndTheDefaultLocationOnce) {
  const std::string root = dir_.Join("backups");
  auto note = EnsureBackupLocation(cp_->registry(), root + "/./");
  ASSERT_TRUE(note.ok()) << note.status();
  EXPECT_EQ(*note, "created a backup repository in " + root + " (BackupStorageLocation default, the default location)");
  EXPECT_TRUE(backup::Repository::Open(root).ok());
  const json bsl = Stored("backupstoragelocations", "default");
  EXPECT_EQ(
      bsl["spec"],
      json({{"provider", "filesystem"}, {"config", {{"path", root}}}, {"default", true}, {"accessMode", "ReadWrite"}}));

  // Again (the next berth up): the repository is opened, nothing changes.
  note = EnsureBackupLocation(cp_->registry(), root);
  ASSERT_TRUE(note.ok()) << note.status();
  EXPECT_EQ(*note, "backup repository in " + root + " (BackupStorageLocation default)");
  EXPECT_EQ(Stored("backupstoragelocations", "default")["metadata"]["resourceVersion"],
            bsl["metadata"]["resourceVersion"]);

  // The user's "default" elsewhere is theirs.
  const std::string other = dir_.Join("other");
  note = EnsureBackupLocation(cp_->registry(), other);
  ASSERT_TRUE(note.ok()) << note.status();
  EXPECT_THAT(*note, HasSubstr("BackupStorageLocation default is left as it is, at " + root));
  EXPECT_EQ(Stored("backupstoragelocations", "default")["spec"]["config"]["path"], root);
  EXPECT_TRUE(backup::Repository::Open(other).ok());

  // A directory holding something else is not made a repository.
  const std::string full = dir_.Join("full");
  std::filesystem::create_directories(full);
  std::ofstream(full + "/notes.txt") << "mine\n";
  note = EnsureBackupLocation(cp_->registry(), full);
  EXPECT_EQ(note.status().code(), absl::StatusCode::kFailedPrecondition) << note.status();
  EXPECT_THAT(note.status().message(), HasSubstr("--backup-location " + full));
}

}  // namespace
}  // namespace berth::cli
