// Backups through berth up (issue 30), as a user takes them: a
// BackupStorageLocation on a directory, a Backup of a namespace's pods and
// claims, the data read from a volume cloned from each claim's snapshot,
// incremental through changed-block tracking the second time; a deleted
// backup leaves the repository with only what newer ones need; a berth up
// killed in the middle of a backup leaves no snapshot and no mover volume and
// every earlier backup verifies clean. Root only (loop devices, mounts).
#include <fcntl.h>
#include <unistd.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include "backup/repository.h"
#include "common/exec.h"
#include "common/fd.h"
#include "common/fs.h"
#include "common/testing/eventually.h"
#include "common/testing/subprocess.h"
#include "driver/testing/sandbox.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "up_fixture.h"

namespace berth::testing {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

constexpr int64_t kMiB = 1 << 20;

class BackupUpTest : public BerthUpFixture {
 protected:
  void SetUp() override {
    BerthUpFixture::SetUp();
    repo_ = sandbox_.Join("repo");
    // A volume, its kept snapshot, the next backup's snapshot and the
    // mover's clone are each accounted at the volume's size.
    pool_size_ = "3Gi";
  }

  void TearDown() override {
    if (HasFailure() && up_) {
      std::string log = up_->Output();
      if (log.size() > 8000) log = log.substr(log.size() - 8000);
      std::cout << "---- berth up (tail)\n" << log << "----\n";
    }
    BerthUpFixture::TearDown();
  }
  void StartWithLocation() {
    StartUp({"--runtime", "none"});
    ASSERT_FALSE(HasFatalFailure());
    Apply(
        "apiVersion: backup.berth.io/v1\nkind: BackupStorageLocation\nmetadata:\n  name: local\nspec:\n"
        "  provider: filesystem\n  default: true\n  config:\n    path: " +
        repo_ + "\n");
  }
  void Apply(const std::string& yaml) {
    static int n = 0;
    Berth({"apply", "-f", WriteFile("apply-" + std::to_string(++n) + ".yaml", yaml)});
  }
  // A claim and a pod mounting it at /data, Running (no runtime: the
  // volume is published).
  void ClaimAndPod(const std::string& claim, const std::string& pod, const std::string& size) {
    Apply("apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: " + claim +
          "\n  labels:\n    app: db\nspec:\n  accessModes: [ReadWriteOnce]\n  resources:\n    requests:\n      "
          "storage: " +
          size + "\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: " + pod +
          "\n  labels:\n    app: db\nspec:\n  containers:\n    - name: main\n      image: berth.local/toolbox:1\n"
          "      volumeMounts:\n        - name: data\n          mountPath: /data\n  volumes:\n    - name: data\n"
          "      persistentVolumeClaim:\n        claimName: " +
          claim + "\n");
    ASSERT_TRUE(Eventually([&] { return Running(pod); }, absl::Seconds(90))) << Pod(pod).dump();
  }
  // Writes `n` pseudo-random bytes (seeded) at `offset` of FILE in the pod's
  // volume, synced.
  void WriteData(const std::string& path, int64_t offset, int64_t n, uint32_t seed) {
    Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
    ASSERT_GE(fd.get(), 0) << path;
    std::mt19937 rng(seed);
    std::string buf(static_cast<size_t>(kMiB), '\0');
    for (int64_t done = 0; done < n; done += kMiB) {
      for (size_t i = 0; i < buf.size(); i += 4) {
        const uint32_t v = rng();
        std::memcpy(&buf[i], &v, 4);
      }
      const size_t len = static_cast<size_t>(std::min<int64_t>(kMiB, n - done));
      ASSERT_EQ(::pwrite(fd.get(), buf.data(), len, offset + done), static_cast<ssize_t>(len));
    }
    ASSERT_EQ(::fsync(fd.get()), 0);
  }
  // berth-csi makes ext4 with lazy_itable_init: the kernel zeroes the
  // inode tables (16 MiB on 256 MiB) in the background after the first
  // mount, paced by how long each group took. Under load that runs into a
  // later backup, whose changed blocks then hold those zeros (read, stored
  // as nothing). Waits until every group of the filesystem mounted at
  // `target` says ITABLE_ZEROED, so the figures measure only the test's
  // writes.
  void WaitForInodeTablesZeroed(const std::string& target) {
    std::string device;
    {
      std::ifstream in("/proc/self/mountinfo");
      for (std::string line; std::getline(in, line);) {
        std::istringstream f(line);
        std::string id, parent, devno, root, point, rest;
        f >> id >> parent >> devno >> root >> point;
        if (point != target) continue;
        while (f >> rest && rest != "-") {
        }
        std::string fstype;
        f >> fstype >> device;
      }
    }
    ASSERT_EQ(device.rfind("/dev/", 0), 0u) << "no block device mounted at " << target;
    LinuxCommandRunner runner;
    std::string last;
    EXPECT_TRUE(Eventually(
        [&] {
          auto r = runner.Run({"dumpe2fs", device}, absl::Seconds(30));
          if (!r.ok() || r->exit_code != 0) return false;
          last = r->output;
          int groups = 0, zeroed = 0;
          std::istringstream in(r->output);
          for (std::string line; std::getline(in, line);) {
            if (line.rfind("Group ", 0) != 0 || line.size() < 7 || !std::isdigit(static_cast<unsigned char>(line[6])))
              continue;  // "Group 3: (Blocks..."
            ++groups;
            zeroed += line.find("ITABLE_ZEROED") != std::string::npos;
          }
          return groups > 0 && zeroed == groups;
        },
        absl::Seconds(120)))
        << last.substr(0, 4000);
  }
  json Backup(const std::string& name) { return Get("/apis/backup.berth.io/v1/backups/" + name); }
  std::string Phase(const std::string& name) {
    const json b = Backup(name);
    return b.is_object() ? b.value("status", json::object()).value("phase", "") : "";
  }
  // Creates Backup `name` of namespace default and waits for it to finish.
  json TakeBackup(const std::string& name) {
    Apply("apiVersion: backup.berth.io/v1\nkind: Backup\nmetadata:\n  name: " + name +
          "\nspec:\n  includedNamespaces: [default]\n  labelSelector:\n    matchLabels:\n      app: db\n");
    EXPECT_TRUE(Eventually(
        [&] {
          const std::string p = Phase(name);
          return p == "Completed" || p == "PartiallyFailed" || p == "Failed" || p == "FailedValidation";
        },
        absl::Seconds(180)))
        << Backup(name).dump();
    return Backup(name);
  }
  std::vector<json> BackupSnapshots() {
    std::vector<json> out;
    json list = Get("/apis/snapshot.storage.k8s.io/v1/volumesnapshots");
    if (!list.is_object()) return out;
    for (const auto& s : list["items"]) {
      if (s["metadata"].value("labels", json::object()).contains("backup.berth.io/backup")) out.push_back(s);
    }
    return out;
  }
  std::vector<std::string> MoverMounts() {
    std::vector<std::string> out;
    for (const auto& m : sandbox_.Mounts()) {
      if (m.find("berth-data-mover") != std::string::npos) out.push_back(m);
    }
    return out;
  }

  std::string repo_;
};

TEST_F(BackupUpTest, AFirstBackupTakesTheAllocatedDataAndTheNextOnlyWhatChanged) {
  StartWithLocation();
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_TRUE(Eventually(
      [&] {
        json l = Get("/apis/backup.berth.io/v1/backupstoragelocations/local");
        return l.is_object() && l.value("status", json::object()).value("phase", "") == "Available";
      },
      absl::Seconds(30)))
      << Get("/apis/backup.berth.io/v1/backupstoragelocations/local").dump();
  ClaimAndPod("data", "db", "256Mi");
  ASSERT_FALSE(HasFatalFailure());
  const std::string file = TargetOf("db", "data") + "/blob";
  WriteData(file, 0, 64 * kMiB, 1);
  ASSERT_FALSE(HasFatalFailure());
  WaitForInodeTablesZeroed(TargetOf("db", "data"));
  ASSERT_FALSE(HasFatalFailure());

  json b1 = TakeBackup("b1");
  ASSERT_EQ(b1["status"]["phase"], "Completed") << b1.dump(2);
  ASSERT_EQ(b1["status"]["volumes"].size(), 1u) << b1.dump(2);
  const json v1 = b1["status"]["volumes"][0];
  EXPECT_EQ(v1["persistentVolumeClaim"], "data");
  EXPECT_EQ(v1["phase"], "Completed");
  EXPECT_FALSE(v1.contains("baseBackup")) << v1.dump();
  // The allocated ranges: the 64 MiB written and the filesystem's metadata,
  // far less than the 256 MiB volume.
  EXPECT_GE(v1["bytesRead"].get<int64_t>(), 64 * kMiB);
  EXPECT_LT(v1["bytesRead"].get<int64_t>(), 160 * kMiB) << v1.dump();
  EXPECT_GE(v1["bytesAdded"].get<int64_t>(), 60 * kMiB) << "random data does not compress";
  EXPECT_EQ(b1["status"]["progress"]["bytesDone"], b1["status"]["progress"]["totalBytes"]);
  EXPECT_FALSE(b1["status"]["expiration"].get<std::string>().empty());
  // Its snapshot is kept as the next backup's base; nothing of the mover is.
  ASSERT_EQ(BackupSnapshots().size(), 1u);
  EXPECT_THAT(MoverMounts(), ::testing::IsEmpty());

  // 2 MiB rewritten: the second backup reads about that (plus what ext4
  // wrote around it: its journal, bitmaps, the inode), not the 64 MiB.
  WriteData(file, 10 * kMiB, 2 * kMiB, 2);
  ASSERT_FALSE(HasFatalFailure());
  json b2 = TakeBackup("b2");
  ASSERT_EQ(b2["status"]["phase"], "Completed") << b2.dump(2);
  const json v2 = b2["status"]["volumes"][0];
  EXPECT_EQ(v2["baseBackup"], "b1") << v2.dump();
  EXPECT_LT(v2["bytesRead"].get<int64_t>(), 24 * kMiB) << v2.dump();
  EXPECT_LT(v2["bytesAdded"].get<int64_t>(), 8 * kMiB) << v2.dump();
  EXPECT_GE(v2["bytesRead"].get<int64_t>(), 2 * kMiB) << v2.dump();
  // b2's snapshot superseded b1's.
  ASSERT_TRUE(Eventually([&] { return BackupSnapshots().size() == 1; }, absl::Seconds(30)));
  EXPECT_EQ(BackupSnapshots()[0]["metadata"]["labels"]["backup.berth.io/backup"], "b2");

  // 1 % of the file's 4 KiB blocks rewritten at random places: the third
  // backup reads and stores about those blocks (packed), not the 1 MiB
  // chunks around them (which would be most of the 64 MiB).
  {
    Fd fd(::open(file.c_str(), O_WRONLY | O_CLOEXEC));
    ASSERT_GE(fd.get(), 0) << file;
    std::mt19937 rng(3);
    std::string block(4096, '\0');
    for (int i = 0; i < 164; ++i) {
      for (char& c : block) c = static_cast<char>(rng());
      const off_t at = static_cast<off_t>(rng() % (64 * kMiB / 4096)) * 4096;
      ASSERT_EQ(::pwrite(fd.get(), block.data(), block.size(), at), 4096);
    }
    ASSERT_EQ(::fsync(fd.get()), 0);
  }
  json b3 = TakeBackup("b3");
  ASSERT_EQ(b3["status"]["phase"], "Completed") << b3.dump(2);
  const json v3 = b3["status"]["volumes"][0];
  EXPECT_EQ(v3["baseBackup"], "b2") << v3.dump();
  EXPECT_GE(v3["bytesRead"].get<int64_t>(), 164 * 4096 / 2) << v3.dump();  // some blocks may be hit twice
  EXPECT_LT(v3["bytesRead"].get<int64_t>(), 8 * kMiB) << v3.dump();
  EXPECT_LT(v3["bytesAdded"].get<int64_t>(), 4 * kMiB) << v3.dump();
  // b3 (slices of b1's and b2's chunks, and its packs) holds the file as it
  // is now: its volume restored into an image, the file read out of that
  // image's ext4 by debugfs, without mounting it.
  {
    auto repo = backup::Repository::Open(repo_);
    ASSERT_TRUE(repo.ok()) << repo.status();
    auto manifest = (*repo)->ReadManifest("b3");
    ASSERT_TRUE(manifest.ok()) << manifest.status();
    ASSERT_EQ(manifest->volumes.size(), 1u);
    const std::string image = sandbox_.Join("b3.img"), out = sandbox_.Join("b3-blob");
    auto restored = (*repo)->RestoreVolume("b3", manifest->volumes[0].name, image);
    ASSERT_TRUE(restored.ok()) << restored.status();
    LinuxCommandRunner runner;
    auto dumped = runner.Run({"debugfs", "-R", "dump /blob " + out, image}, absl::Seconds(60));
    ASSERT_TRUE(dumped.ok()) << dumped.status();
    ASSERT_EQ(dumped->exit_code, 0) << dumped->output;
    auto want = ReadFile(file), got = ReadFile(out);
    ASSERT_TRUE(want.ok() && got.ok()) << dumped->output;
    EXPECT_EQ(got->size(), want->size());
    EXPECT_TRUE(*got == *want) << "the file restored from b3 differs from the live one";
    std::filesystem::remove(image);
    std::filesystem::remove(out);
  }

  // Every backup restores the file as it was.
  {
    auto repo = backup::Repository::Open(repo_);
    ASSERT_TRUE(repo.ok()) << repo.status();
    auto report = (*repo)->Verify();
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_TRUE(report->ok()) << report->Describe();
    EXPECT_EQ(report->backups_checked, 3);
    auto listed = (*repo)->ListBackups();
    ASSERT_TRUE(listed.ok());
    EXPECT_THAT(*listed, ::testing::ElementsAre("b1", "b2", "b3"));
  }

  // Deleting b1 removes its manifest; b2 and b3 still verify (they share
  // b1's chunks, b3 slices of them).
  auto [rc, out] = RunBerth({"delete", "backups.backup.berth.io", "b1"});
  ASSERT_EQ(rc, 0) << out;
  ASSERT_TRUE(Eventually([&] { return Backup("b1").is_null(); }, absl::Seconds(60))) << Backup("b1").dump();
  auto repo = backup::Repository::Open(repo_);
  ASSERT_TRUE(repo.ok()) << repo.status();
  auto listed = (*repo)->ListBackups();
  ASSERT_TRUE(listed.ok());
  EXPECT_THAT(*listed, ::testing::ElementsAre("b2", "b3"));
  auto report = (*repo)->Verify();
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->ok()) << report->Describe();
}

TEST_F(BackupUpTest, AKilledBerthUpFailsTheBackupAndLeavesNothingBehind) {
  StartWithLocation();
  ASSERT_FALSE(HasFatalFailure());
  ClaimAndPod("data", "db", "600Mi");
  ASSERT_FALSE(HasFatalFailure());
  const std::string file = TargetOf("db", "data") + "/blob";
  WriteData(file, 0, 8 * kMiB, 1);
  ASSERT_FALSE(HasFatalFailure());
  json b0 = TakeBackup("before");
  ASSERT_EQ(b0["status"]["phase"], "Completed") << b0.dump(2);
  WriteData(file, 0, 500 * kMiB, 3);
  ASSERT_FALSE(HasFatalFailure());

  Apply(
      "apiVersion: backup.berth.io/v1\nkind: Backup\nmetadata:\n  name: cut\nspec:\n  includedNamespaces: [default]\n");
  // Killed while it moves data (its progress says some bytes are done).
  ASSERT_TRUE(Eventually(
      [&] {
        json b = Backup("cut");
        return b.is_object() && b.value("status", json::object()).value("phase", "") == "InProgress" &&
               b["status"].value("progress", json::object()).value("bytesDone", int64_t{0}) > 0;
      },
      absl::Seconds(120)))
      << Backup("cut").dump(2);
  StopUp(SIGKILL);
  // The agents and drivers go with berth up (PR_SET_PDEATHSIG).
  StartUp({"--runtime", "none"});
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_TRUE(Eventually([&] { return Phase("cut") == "Failed"; }, absl::Seconds(60))) << Backup("cut").dump(2);
  EXPECT_THAT(Backup("cut")["status"].value("failureReason", ""), HasSubstr("berth up stopped"));
  // Only the completed backup's kept snapshot remains; no mover volume is
  // staged or published.
  ASSERT_TRUE(Eventually([&] { return BackupSnapshots().size() == 1; }, absl::Seconds(60)));
  EXPECT_EQ(BackupSnapshots()[0]["metadata"]["labels"]["backup.berth.io/backup"], "before");
  EXPECT_THAT(MoverMounts(), ::testing::IsEmpty());
  auto repo = backup::Repository::Open(repo_);
  ASSERT_TRUE(repo.ok()) << repo.status();
  auto listed = (*repo)->ListBackups();
  ASSERT_TRUE(listed.ok());
  EXPECT_THAT(*listed, ::testing::ElementsAre("before"));
  auto report = (*repo)->Verify();
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->ok()) << report->Describe();
}

// A schedule with a short time to live: old backups expire and go with the
// chunks only they held, newer ones keep theirs and verify clean. (The
// timing rules are tested on a fake clock in the controllers' own tests;
// here the whole chain runs for real for about a minute.)
TEST_F(BackupUpTest, AScheduleWithAShortTtlKeepsOnlyNewBackupsAndTheirChunks) {
  StartWithLocation();
  ASSERT_FALSE(HasFatalFailure());
  ClaimAndPod("data", "db", "256Mi");
  ASSERT_FALSE(HasFatalFailure());
  const std::string file = TargetOf("db", "data") + "/blob";
  WriteData(file, 0, 8 * kMiB, 1);
  ASSERT_FALSE(HasFatalFailure());
  Apply(
      "apiVersion: backup.berth.io/v1\nkind: Schedule\nmetadata:\n  name: often\nspec:\n  schedule: \"@every 5s\"\n"
      "  template:\n    includedNamespaces: [default]\n    ttl: 20s\n");
  // New data before each backup, so each adds chunks of its own.
  std::set<std::string> seen, deleted;
  uint32_t seed = 2;
  ASSERT_TRUE(Eventually(
      [&] {
        json list = Get("/apis/backup.berth.io/v1/backups");
        std::set<std::string> now;
        for (const auto& b : list.value("items", json::array())) {
          const std::string name = b["metadata"]["name"];
          now.insert(name);
          if (seen.insert(name).second) WriteData(file, 0, 8 * kMiB, seed++);
          const std::string phase = b.value("status", json::object()).value("phase", "");
          EXPECT_NE(phase, "Failed") << b.dump(2);
        }
        for (const auto& name : seen) {
          if (!now.count(name)) deleted.insert(name);
        }
        return deleted.size() >= 2;
      },
      absl::Seconds(150)))
      << seen.size() << " backups seen, " << deleted.size() << " deleted";
  Berth({"patch", "schedules.backup.berth.io", "often", "--type", "merge", "-p", R"({"spec":{"paused":true}})"});

  // Once quiet: the repository holds exactly the backups that still exist,
  // they verify, and no chunk is left that none of them references.
  auto repo = backup::Repository::Open(repo_);
  ASSERT_TRUE(repo.ok()) << repo.status();
  std::string why;
  ASSERT_TRUE(Eventually(
      [&] {
        json list = Get("/apis/backup.berth.io/v1/backups");
        std::vector<std::string> live;
        for (const auto& b : list.value("items", json::array())) {
          if (b["metadata"].contains("deletionTimestamp") ||
              b.value("status", json::object()).value("phase", "") != "Completed") {
            why = "a backup is being deleted or taken";
            return false;
          }
          live.push_back(b["metadata"]["name"]);
        }
        std::sort(live.begin(), live.end());
        auto listed = (*repo)->ListBackups();
        if (!listed.ok() || *listed != live) {
          why = "the repository's backups differ from the API's";
          return false;
        }
        std::set<std::string> referenced;
        for (const auto& name : live) {
          auto m = (*repo)->ReadManifest(name);
          if (!m.ok()) return false;
          for (const auto& v : m->volumes) {
            for (const auto& e : v.extents) referenced.insert(e.hash);
          }
        }
        size_t files = 0;
        for (const auto& f : fs::recursive_directory_iterator(repo_ + "/chunks")) files += f.is_regular_file();
        why = std::to_string(files) + " chunk files, " + std::to_string(referenced.size()) + " referenced";
        return files == referenced.size();
      },
      absl::Seconds(60)))
      << why;
  auto report = (*repo)->Verify();
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->ok()) << report->Describe();
  for (const auto& name : deleted) {
    EXPECT_FALSE((*repo)->ReadManifest(name).ok()) << name;
  }
}

// A pod's claims on one node are cut in one group snapshot (berth-csi
// freezes every mounted member, clones them all, thaws), and the group is
// the next backup's base until a newer backup supersedes it whole.
TEST_F(BackupUpTest, APodsClaimsAreCutTogetherInOneGroupSnapshot) {
  StartWithLocation();
  ASSERT_FALSE(HasFatalFailure());
  std::string yaml;
  for (const char* c : {"one", "two"}) {
    yaml += std::string("apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: ") + c +
            "\n  labels:\n    app: db\nspec:\n  accessModes: [ReadWriteOnce]\n  resources:\n    requests:\n"
            "      storage: 128Mi\n---\n";
  }
  yaml +=
      "apiVersion: v1\nkind: Pod\nmetadata:\n  name: db\n  labels:\n    app: db\nspec:\n  containers:\n"
      "    - name: main\n      image: berth.local/toolbox:1\n  volumes:\n    - name: one\n      "
      "persistentVolumeClaim:\n"
      "        claimName: one\n    - name: two\n      persistentVolumeClaim:\n        claimName: two\n";
  Apply(yaml);
  ASSERT_TRUE(Eventually([&] { return Running("db"); }, absl::Seconds(90))) << Pod("db").dump();
  WriteData(TargetOf("db", "one") + "/a", 0, 8 * kMiB, 1);
  WriteData(TargetOf("db", "two") + "/b", 0, 8 * kMiB, 2);
  ASSERT_FALSE(HasFatalFailure());

  json g1 = TakeBackup("g1");
  ASSERT_EQ(g1["status"]["phase"], "Completed") << g1.dump(2);
  ASSERT_EQ(g1["status"]["groupSnapshots"].size(), 1u) << g1.dump(2);
  const json group = g1["status"]["groupSnapshots"][0];
  EXPECT_EQ(group["members"].size(), 2u);
  EXPECT_FALSE(group.value("groupSnapshotId", "").empty());
  ASSERT_EQ(g1["status"]["volumes"].size(), 2u);
  for (const auto& v : g1["status"]["volumes"]) {
    EXPECT_EQ(v["groupSnapshot"], group["name"]) << v.dump();
    EXPECT_EQ(v["phase"], "Completed") << v.dump();
    EXPECT_GE(v["bytesAdded"].get<int64_t>(), 7 * kMiB) << v.dump();
  }
  EXPECT_THAT(BackupSnapshots(), ::testing::IsEmpty()) << "no VolumeSnapshot for grouped claims";

  WriteData(TargetOf("db", "one") + "/a", 0, kMiB, 3);
  ASSERT_FALSE(HasFatalFailure());
  json g2 = TakeBackup("g2");
  ASSERT_EQ(g2["status"]["phase"], "Completed") << g2.dump(2);
  for (const auto& v : g2["status"]["volumes"]) {
    EXPECT_EQ(v.value("baseBackup", ""), "g1") << v.dump();
    EXPECT_LT(v["bytesRead"].get<int64_t>(), 24 * kMiB) << v.dump();
  }
  // g2's group supersedes g1's, which is deleted whole.
  ASSERT_TRUE(Eventually([&] { return Backup("g1")["status"]["groupSnapshots"][0].value("deleted", false); },
                         absl::Seconds(30)))
      << Backup("g1").dump(2);
  EXPECT_THAT(MoverMounts(), ::testing::IsEmpty());
}

}  // namespace
}  // namespace berth::testing
