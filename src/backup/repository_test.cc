#include "backup/repository.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "common/exec.h"
#include "common/fd.h"
#include "common/fs.h"
#include "common/status.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace berth::backup {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr int64_t kChunk = kMinChunkSize;  // 64 KiB: small volumes, many chunks

std::string Random(int64_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::string s(static_cast<size_t>(n), '\0');
  for (auto& c : s) c = static_cast<char>(gen());
  return s;
}

// Writes `data` at `offset` of `path` (created sparse if missing).
void WriteAt(const std::string& path, int64_t offset, const std::string& data) {
  Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
  ASSERT_TRUE(fd.ok());
  ASSERT_EQ(::pwrite(fd.get(), data.data(), data.size(), offset), static_cast<ssize_t>(data.size()));
}

void Resize(const std::string& path, int64_t size) {
  Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
  ASSERT_TRUE(fd.ok());
  ASSERT_EQ(::ftruncate(fd.get(), size), 0);
}

std::string Contents(const std::string& path) {
  absl::StatusOr<std::string> s = ReadFile(path);
  return s.ok() ? *s : "<" + s.status().ToString() + ">";
}

int CountTempFiles(const std::string& root) {
  int n = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(root)) {
    if (e.path().filename().string().find(".tmp-") != std::string::npos) ++n;
  }
  return n;
}

int CountChunks(const std::string& root) {
  int n = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(root + "/chunks")) {
    if (e.is_regular_file() && e.path().extension() == ".zst" && e.path().filename().string()[0] != '.') ++n;
  }
  return n;
}

VolumeSource Source(const std::string& name, int fd, int64_t size, std::vector<ByteRange> ranges,
                    const Manifest* base = nullptr) {
  VolumeSource s;
  s.name = name;
  s.fd = fd;
  s.size_bytes = size;
  s.ranges = std::move(ranges);
  s.base = base;
  return s;
}

class RepositoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RepositoryOptions options;
    options.chunk_size = kChunk;
    auto repo = Repository::Create(root_, options);
    ASSERT_TRUE(repo.ok()) << repo.status();
    repo_ = std::move(*repo);
  }

  // Backs up `path` (all of it, or `ranges`) as volume `volume` of a new
  // backup `name`, optionally incremental over backup `base`.
  absl::StatusOr<VolumeStats> Backup(const std::string& name, const std::string& path,
                                     std::vector<ByteRange> ranges = {}, const std::string& base = "",
                                     const std::string& volume = "vol") {
    Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.ok()) return absl::InternalError("open source");
    const int64_t size = std::filesystem::file_size(path);
    if (ranges.empty() && base.empty()) ranges = {{0, size}};
    std::optional<Manifest> base_manifest;
    if (!base.empty()) {
      absl::StatusOr<Manifest> m = repo_->ReadManifest(base);
      if (!m.ok()) return m.status();
      base_manifest = std::move(*m);
    }
    BERTH_ASSIGN_OR_RETURN(auto writer, repo_->StartBackup(name));
    writer->AddObject({{"kind", "PersistentVolumeClaim"}, {"metadata", {{"name", volume}}}});
    BERTH_ASSIGN_OR_RETURN(VolumeStats stats, writer->AddVolume(Source(volume, fd.get(), size, std::move(ranges),
                                                                       base_manifest ? &*base_manifest : nullptr)));
    BERTH_RETURN_IF_ERROR(writer->Commit().status());
    return stats;
  }

  // Restores volume "vol" of `name` into a fresh file; returns its content.
  std::string Restored(const std::string& name) {
    const std::string target = dir_.Join("restore-" + name);
    std::filesystem::remove(target);
    absl::StatusOr<RestoreStats> st = repo_->RestoreVolume(name, "vol", target);
    if (!st.ok()) return "<" + st.status().ToString() + ">";
    return Contents(target);
  }

  berth::testing::TempDir dir_;
  const std::string root_ = dir_.Join("repo");
  const std::string vol_ = dir_.Join("vol.img");
  std::unique_ptr<Repository> repo_;
};

TEST_F(RepositoryTest, CreateRefusesExistingOrForeignDirectories) {
  EXPECT_EQ(Repository::Create(root_).status().code(), absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(MakeDirs(dir_.Join("other")).ok());
  ASSERT_TRUE(WriteFileAtomic(dir_.Join("other/photo.jpg"), "x").ok());
  EXPECT_EQ(Repository::Create(dir_.Join("other")).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Repository::Open(dir_.Join("other")).status().code(), absl::StatusCode::kNotFound);
  RepositoryOptions bad;
  bad.chunk_size = 3 << 20;
  EXPECT_EQ(Repository::Create(dir_.Join("r2"), bad).status().code(), absl::StatusCode::kInvalidArgument);
  auto reopened = Repository::Open(root_);
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  EXPECT_EQ((*reopened)->chunk_size(), kChunk);
}

TEST_F(RepositoryTest, UnknownRepositoryFormatIsRefused) {
  std::string text = Contents(root_ + "/berth-backup.json");
  text.replace(text.find("\"format\": 1"), 11, "\"format\": 7");
  ASSERT_TRUE(WriteFileAtomic(root_ + "/berth-backup.json", text).ok());
  absl::StatusOr<std::unique_ptr<Repository>> r = Repository::Open(root_);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr("format 7"));
  ASSERT_TRUE(WriteFileAtomic(root_ + "/berth-backup.json", "{\"format\": 1, \"ki").ok());
  EXPECT_EQ(Repository::Open(root_).status().code(), absl::StatusCode::kDataLoss);
}

TEST_F(RepositoryTest, RestoresDataAndHolesOfAnUnalignedVolume) {
  const int64_t size = 5 * kChunk + 1000;  // last chunk partial
  const std::string head = Random(kChunk + 10, 1), tail = Random(2000, 2);
  WriteAt(vol_, 0, head);
  WriteAt(vol_, size - 2000, tail);
  Resize(vol_, size);
  // The allocated ranges, roughly, as a caller would pass them.
  absl::StatusOr<VolumeStats> stats = Backup("b1", vol_, {{0, kChunk + 10}, {size - 2000, 2000}});
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->chunks_read, 4);  // chunks 0, 1, 4, 5
  EXPECT_EQ(stats->chunks_added, 4);
  absl::StatusOr<Manifest> m = repo_->ReadManifest("b1");
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->volumes.size(), 1u);
  EXPECT_EQ(m->volumes[0].size_bytes, size);
  ASSERT_EQ(m->objects.size(), 1u);
  EXPECT_EQ(m->objects[0]["kind"], "PersistentVolumeClaim");

  const std::string target = dir_.Join("restored.img");
  absl::StatusOr<RestoreStats> r = repo_->RestoreVolume("b1", "vol", target);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Contents(target), Contents(vol_));
  struct stat st {};
  ASSERT_EQ(::stat(target.c_str(), &st), 0);
  EXPECT_LT(st.st_blocks * 512, size / 2);  // the holes stayed holes
}

TEST_F(RepositoryTest, AllZeroChunksAreStoredAsHoles) {
  Resize(vol_, 8 * kChunk);
  WriteAt(vol_, 3 * kChunk, Random(100, 3));
  absl::StatusOr<VolumeStats> stats = Backup("b1", vol_);  // every range, as without block tracking
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->zero_chunks, 7);
  EXPECT_EQ(stats->chunks_added, 1);
  EXPECT_EQ(repo_->ReadManifest("b1")->volumes[0].extents.size(), 1u);
  EXPECT_EQ(Restored("b1"), Contents(vol_));
}

TEST_F(RepositoryTest, RestoreOverwritesWhatTheTargetHeld) {
  WriteAt(vol_, 0, Random(kChunk, 4));
  Resize(vol_, 4 * kChunk);
  ASSERT_TRUE(Backup("b1", vol_).ok());
  const std::string target = dir_.Join("old.img");
  WriteAt(target, 0, Random(6 * kChunk, 5));  // larger, and data where the volume has holes
  ASSERT_TRUE(repo_->RestoreVolume("b1", "vol", target).ok());
  EXPECT_EQ(Contents(target), Contents(vol_));
}

// A block device holds whatever it held: a new volume of another driver
// (a thick LVM volume, a reused disk) may be stale data, not zeros. Restored
// without `target_is_zeroed`, its holes and zero blocks read as zeros.
TEST_F(RepositoryTest, RestoreOntoABlockDeviceClearsWhatItHeldWhereTheVolumeHasHoles) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root for a loop device";
  WriteAt(vol_, kChunk, Random(kChunk, 70));
  WriteAt(vol_, 3 * kChunk + 4096, std::string(4096, '\0'));  // a zero block inside data
  WriteAt(vol_, 3 * kChunk, Random(4096, 71));
  Resize(vol_, 6 * kChunk);
  ASSERT_TRUE(Backup("b1", vol_).ok());
  const std::string disk = dir_.Join("disk.img");
  WriteAt(disk, 0, std::string(8 * kChunk, '\xab'));
  LinuxCommandRunner runner;
  auto attached = runner.Run({"losetup", "--find", "--show", disk}, absl::Seconds(30));
  ASSERT_TRUE(attached.ok() && attached->exit_code == 0) << (attached.ok() ? attached->output : "");
  const std::string device(absl::StripTrailingAsciiWhitespace(attached->output));
  struct Detach {
    LinuxCommandRunner& runner;
    std::string device;
    ~Detach() { (void)runner.Run({"losetup", "--detach", device}, absl::Seconds(30)); }
  } detach{runner, device};
  absl::StatusOr<RestoreStats> r = repo_->RestoreVolume("b1", "vol", device);
  ASSERT_TRUE(r.ok()) << r.status();
  const std::string want = Contents(vol_);
  Fd fd(::open(device.c_str(), O_RDONLY | O_CLOEXEC));
  std::string got(want.size(), '\0');
  ASSERT_EQ(::pread(fd.get(), got.data(), got.size(), 0), static_cast<ssize_t>(got.size()));
  EXPECT_TRUE(got == want) << "stale bytes left in the restored volume's holes";
}

TEST_F(RepositoryTest, DeduplicatesAcrossVolumesAndBackups) {
  const std::string other = dir_.Join("other.img");
  const std::string data = Random(6 * kChunk, 6);
  WriteAt(vol_, 0, data);
  WriteAt(other, 0, data);
  auto writer = repo_->StartBackup("b1");
  ASSERT_TRUE(writer.ok());
  Fd a(::open(vol_.c_str(), O_RDONLY)), b(::open(other.c_str(), O_RDONLY));
  auto first = (*writer)->AddVolume(Source("a", a.get(), 6 * kChunk, {{0, 6 * kChunk}}));
  auto second = (*writer)->AddVolume(Source("b", b.get(), 6 * kChunk, {{0, 6 * kChunk}}));
  ASSERT_TRUE(first.ok() && second.ok());
  ASSERT_TRUE((*writer)->Commit().ok());
  EXPECT_EQ(first->chunks_added, 6);
  EXPECT_EQ(second->chunks_added, 0);
  EXPECT_EQ(second->chunks_deduped, 6);
  absl::StatusOr<VolumeStats> again = Backup("b2", other);  // another backup, no base
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->chunks_added, 0);
  EXPECT_EQ(again->bytes_added, 0);
  EXPECT_EQ(CountChunks(root_), 6);
}

TEST_F(RepositoryTest, IncrementalAddsOnlyTheChangedBlocksPackedTogether) {
  WriteAt(vol_, 0, Random(16 * kChunk, 7));
  ASSERT_TRUE(Backup("full", vol_).ok());
  const std::string before = Contents(vol_);
  // One write inside chunk 2's second block, one straddling chunks 9 and
  // 10: three 4 KiB blocks, far less than a quarter of any chunk.
  WriteAt(vol_, 2 * kChunk + 5000, Random(50, 8));
  WriteAt(vol_, 10 * kChunk - 10, Random(20, 9));
  absl::StatusOr<VolumeStats> inc = Backup("inc", vol_, {{2 * kChunk + 5000, 50}, {10 * kChunk - 10, 20}}, "full");
  ASSERT_TRUE(inc.ok()) << inc.status();
  EXPECT_EQ(inc->chunks_read, 0);
  EXPECT_EQ(inc->pieces_read, 3);  // the straddling write is cut at the chunk boundary
  EXPECT_EQ(inc->bytes_read, 3 * 4096);
  EXPECT_EQ(inc->chunks_added, 1);  // one pack
  EXPECT_LT(inc->bytes_added, 4 * 4096);
  // 13 base chunks whole, chunk 2 in two slices around its block, chunks 9
  // and 10 each without their changed block.
  EXPECT_EQ(inc->chunks_inherited, 13 + 2 + 1 + 1);
  EXPECT_EQ(CountChunks(root_), 16 + 1);
  const std::string text = Contents(root_ + "/backups/inc.json");
  EXPECT_THAT(text, HasSubstr("\"format\":2"));
  EXPECT_THAT(Contents(root_ + "/backups/full.json"), HasSubstr("\"format\":1"));
  absl::StatusOr<Manifest> m = repo_->ReadManifest("inc");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->volumes[0].base_backup, "full");
  EXPECT_EQ(m->volumes[0].StoredBytes(), 16 * kChunk);
  EXPECT_EQ(Restored("inc"), Contents(vol_));
  EXPECT_EQ(Restored("full"), before);
  absl::StatusOr<VerifyReport> report = repo_->Verify();
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->ok()) << report->Describe();
  EXPECT_EQ(report->chunks_checked, 17);
}

TEST_F(RepositoryTest, AChunkAQuarterChangedIsReadWholeAndDeduplicated) {
  WriteAt(vol_, 0, Random(4 * kChunk, 20));
  ASSERT_TRUE(Backup("full", vol_).ok());
  WriteAt(vol_, kChunk + 8192, Random(kChunk / 4, 21));  // 4 of chunk 1's 16 blocks
  absl::StatusOr<VolumeStats> inc = Backup("inc", vol_, {{kChunk + 8192, kChunk / 4}}, "full");
  ASSERT_TRUE(inc.ok()) << inc.status();
  EXPECT_EQ(inc->chunks_read, 1);
  EXPECT_EQ(inc->pieces_read, 0);
  EXPECT_EQ(inc->bytes_read, kChunk);
  EXPECT_EQ(inc->chunks_inherited, 3);
  EXPECT_THAT(Contents(root_ + "/backups/inc.json"), HasSubstr("\"format\":1"));  // whole chunks only
  EXPECT_EQ(Restored("inc"), Contents(vol_));
}

// Generations of scattered writes, each backed up over the last: blocks
// rewritten again, blocks zeroed (holes now), one chunk written in so many
// places that it is read whole again. Every generation restores as it was,
// also after its bases are deleted and collected.
TEST_F(RepositoryTest, ChainedIncrementalsOfScatteredBlocksRestoreEveryGeneration) {
  const int64_t size = 12 * kChunk + 4096 * 3;  // a partial last chunk
  WriteAt(vol_, 0, Random(size, 30));
  ASSERT_TRUE(Backup("g0", vol_).ok());
  std::vector<std::string> states = {Contents(vol_)};
  std::mt19937_64 gen(31);
  for (int g = 1; g <= 4; ++g) {
    std::vector<ByteRange> changed;
    for (int i = 0; i < 6; ++i) {
      const int64_t block = static_cast<int64_t>(gen() % (size / 4096));
      WriteAt(vol_, block * 4096, i == 0 ? std::string(4096, '\0') : Random(4096, gen()));
      changed.push_back({block * 4096, 4096});
    }
    if (g == 3) {
      // 8 separate blocks of chunk 5: half of it, re-read whole.
      for (int b = 0; b < 16; b += 2) {
        WriteAt(vol_, 5 * kChunk + b * 4096, Random(100, gen()));
        changed.push_back({5 * kChunk + b * 4096, 100});
      }
    }
    WriteAt(vol_, size - 4096, Random(4096, gen()));  // the last block, in the partial chunk
    changed.push_back({size - 4096, 4096});
    absl::StatusOr<VolumeStats> inc = Backup("g" + std::to_string(g), vol_, changed, "g" + std::to_string(g - 1));
    ASSERT_TRUE(inc.ok()) << inc.status();
    EXPECT_GT(inc->pieces_read, 0);
    // The partial last chunk (3 blocks, one changed) is read whole each time.
    EXPECT_EQ(inc->chunks_read, g == 3 ? 2 : 1) << g;
    states.push_back(Contents(vol_));
  }
  for (int g = 0; g <= 4; ++g) EXPECT_EQ(Restored("g" + std::to_string(g)), states[g]) << g;
  // Only the newest kept: its slices of older chunks and packs survive GC.
  for (int g = 0; g < 4; ++g) ASSERT_TRUE(repo_->DeleteBackup("g" + std::to_string(g)).ok());
  absl::StatusOr<GcReport> gc = repo_->Gc();
  ASSERT_TRUE(gc.ok()) << gc.status();
  EXPECT_EQ(Restored("g4"), states[4]);
  absl::StatusOr<VerifyReport> report = repo_->Verify();
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->ok()) << report->Describe();
}

TEST_F(RepositoryTest, AChunkCutInTooManySlicesIsReadWhole) {
  // 1 MiB chunks: 256 blocks, so 20 changed blocks are well under a
  // quarter, but would cut the chunk into 41 slices.
  RepositoryOptions options;
  options.chunk_size = int64_t{1} << 20;
  auto repo = Repository::Create(dir_.Join("large"), options);
  ASSERT_TRUE(repo.ok()) << repo.status();
  repo_ = std::move(*repo);
  WriteAt(vol_, 0, Random(int64_t{2} << 20, 60));
  ASSERT_TRUE(Backup("full", vol_).ok());
  std::vector<ByteRange> changed;
  for (int b = 0; b < 40; b += 2) {
    WriteAt(vol_, b * 4096, Random(4096, 61 + b));
    changed.push_back({b * 4096, 4096});
  }
  WriteAt(vol_, (int64_t{1} << 20) + 4096, Random(4096, 200));  // and one block of chunk 1
  changed.push_back({(int64_t{1} << 20) + 4096, 4096});
  absl::StatusOr<VolumeStats> inc = Backup("inc", vol_, changed, "full");
  ASSERT_TRUE(inc.ok()) << inc.status();
  EXPECT_EQ(inc->chunks_read, 1);
  EXPECT_EQ(inc->pieces_read, 1);
  EXPECT_EQ(inc->bytes_read, (int64_t{1} << 20) + 4096);
  EXPECT_EQ(Restored("inc"), Contents(vol_));
}

TEST_F(RepositoryTest, IncrementalOfAShrunkVolumeDropsWhatIsPastTheEnd) {
  WriteAt(vol_, 0, Random(10 * kChunk, 40));
  ASSERT_TRUE(Backup("full", vol_).ok());
  Resize(vol_, 6 * kChunk + 8192);
  WriteAt(vol_, 2 * kChunk, Random(4096, 41));
  absl::StatusOr<VolumeStats> inc = Backup("inc", vol_, {{2 * kChunk, 4096}}, "full");
  ASSERT_TRUE(inc.ok()) << inc.status();
  EXPECT_EQ(inc->chunks_read, 1);  // chunk 6, now the partial last one
  EXPECT_EQ(inc->pieces_read, 1);
  absl::StatusOr<Manifest> m = repo_->ReadManifest("inc");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->volumes[0].StoredBytes(), 6 * kChunk + 8192);
  EXPECT_EQ(Restored("inc"), Contents(vol_));
}

TEST_F(RepositoryTest, ACorruptPackIsNamedByRestoreAndVerify) {
  WriteAt(vol_, 0, Random(4 * kChunk, 50));
  ASSERT_TRUE(Backup("full", vol_).ok());
  WriteAt(vol_, kChunk, Random(4096, 51));
  ASSERT_TRUE(Backup("inc", vol_, {{kChunk, 4096}}, "full").ok());
  absl::StatusOr<Manifest> m = repo_->ReadManifest("inc");
  ASSERT_TRUE(m.ok());
  std::string pack;
  for (const Extent& e : m->volumes[0].extents) {
    if (e.offset == kChunk) pack = e.hash;
  }
  ASSERT_FALSE(pack.empty());
  const std::string path = root_ + "/chunks/" + pack.substr(0, 2) + "/" + pack + ".zst";
  std::string bytes = Contents(path);
  bytes[bytes.size() / 2] ^= 0x40;
  {
    std::filesystem::permissions(path, std::filesystem::perms::owner_write, std::filesystem::perm_options::add);
    WriteAt(path, 0, bytes);
  }
  absl::StatusOr<RestoreStats> r = repo_->RestoreVolume("inc", "vol", dir_.Join("restored.img"));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(r.status().message(), HasSubstr(pack));
  EXPECT_THAT(r.status().message(), HasSubstr("backup \"inc\""));
  absl::StatusOr<VerifyReport> report = repo_->Verify();
  ASSERT_TRUE(report.ok());
  ASSERT_EQ(report->problems.size(), 1u);
  EXPECT_EQ(report->problems[0].hash, pack);
  EXPECT_THAT(report->problems[0].backups, ElementsAre("inc"));
  EXPECT_EQ(Restored("full").size(), static_cast<size_t>(4 * kChunk));  // the base is untouched
}

TEST_F(RepositoryTest, IncrementalOfAGrownVolumeRereadsTheOldLastChunk) {
  WriteAt(vol_, 0, Random(3 * kChunk + 500, 10));
  ASSERT_TRUE(Backup("full", vol_).ok());
  WriteAt(vol_, 5 * kChunk, Random(kChunk, 11));  // grown to 6 chunks
  absl::StatusOr<VolumeStats> inc = Backup("inc", vol_, {{5 * kChunk, kChunk}}, "full");
  ASSERT_TRUE(inc.ok()) << inc.status();
  EXPECT_EQ(inc->chunks_read, 2);  // chunk 5, and chunk 3 (no longer the partial last one)
  EXPECT_EQ(Restored("inc"), Contents(vol_));
}

TEST_F(RepositoryTest, IncrementalOverAVolumeTheBaseLacksIsInvalid) {
  WriteAt(vol_, 0, Random(kChunk, 12));
  ASSERT_TRUE(Backup("full", vol_).ok());
  EXPECT_EQ(Backup("inc", vol_, {{0, 1}}, "full", "another").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(RepositoryTest, IncrementalOverACollectedBaseChunkFailsPrecondition) {
  WriteAt(vol_, 0, Random(2 * kChunk, 13));
  ASSERT_TRUE(Backup("full", vol_).ok());
  const Manifest base = *repo_->ReadManifest("full");
  ASSERT_TRUE(std::filesystem::remove(root_ + "/chunks/" + base.volumes[0].extents[1].hash.substr(0, 2) + "/" +
                                      base.volumes[0].extents[1].hash + ".zst"));
  absl::StatusOr<VolumeStats> inc = Backup("inc", vol_, {{0, 1}}, "full");
  EXPECT_EQ(inc.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(inc.status().message(), HasSubstr(base.volumes[0].extents[1].hash));
}

TEST_F(RepositoryTest, BadRangesAndShortSourcesAreRefused) {
  WriteAt(vol_, 0, Random(kChunk, 14));
  auto writer = repo_->StartBackup("b1");
  ASSERT_TRUE(writer.ok());
  Fd fd(::open(vol_.c_str(), O_RDONLY));
  EXPECT_EQ((*writer)->AddVolume(Source("v", fd.get(), kChunk, {{kChunk - 1, 2}})).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*writer)->AddVolume(Source("v", fd.get(), 2 * kChunk, {{0, 2 * kChunk}})).status().code(),
            absl::StatusCode::kOutOfRange);
  // The writer is still usable, and the failed volume is not in the manifest.
  ASSERT_TRUE((*writer)->AddVolume(Source("v", fd.get(), kChunk, {{0, kChunk}})).ok());
  EXPECT_EQ((*writer)->AddVolume(Source("v", fd.get(), kChunk, {})).status().code(),
            absl::StatusCode::kInvalidArgument);  // twice
  absl::StatusOr<Manifest> m = (*writer)->Commit();
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->volumes.size(), 1u);
  EXPECT_EQ((*writer)->Commit().status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(RepositoryTest, ReportsProgressUpToTheTotal) {
  WriteAt(vol_, 0, Random(4 * kChunk, 15));
  auto writer = repo_->StartBackup("b1");
  ASSERT_TRUE(writer.ok());
  Fd fd(::open(vol_.c_str(), O_RDONLY));
  std::vector<std::pair<int64_t, int64_t>> seen;
  ASSERT_TRUE((*writer)
                  ->AddVolume(Source("v", fd.get(), 4 * kChunk, {{0, 10}, {3 * kChunk, 1}}),
                              [&](int64_t done, int64_t total) { seen.emplace_back(done, total); })
                  .ok());
  EXPECT_THAT(seen, ElementsAre(std::pair(kChunk, 2 * kChunk), std::pair(2 * kChunk, 2 * kChunk)));
}

TEST_F(RepositoryTest, BackupNamesNeverBecomeUncheckedPaths) {
  for (const char* bad : {"../escape", "a/b", "..", ".hidden"}) {
    EXPECT_EQ(repo_->StartBackup(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(repo_->ReadManifest(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(repo_->DeleteBackup(bad).code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(repo_->RestoreVolume(bad, "vol", dir_.Join("t")).status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(repo_->Verify(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_FALSE(std::filesystem::exists(dir_.Join("escape.json")));
}

TEST_F(RepositoryTest, ExistingBackupNameIsRefused) {
  WriteAt(vol_, 0, Random(kChunk, 16));
  ASSERT_TRUE(Backup("b1", vol_).ok());
  EXPECT_EQ(repo_->StartBackup("b1").status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(repo_->DeleteBackup("nope").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(repo_->ReadManifest("nope").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(RepositoryTest, TruncatedManifestIsNamedByReadAndVerify) {
  WriteAt(vol_, 0, Random(kChunk, 17));
  ASSERT_TRUE(Backup("b1", vol_).ok());
  const std::string path = root_ + "/backups/b1.json";
  const std::string text = Contents(path);
  ASSERT_TRUE(WriteFileAtomic(path, text.substr(0, text.size() - 20)).ok());
  absl::StatusOr<Manifest> m = repo_->ReadManifest("b1");
  EXPECT_EQ(m.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(m.status().message(), HasSubstr("\"b1\""));
  absl::StatusOr<VerifyReport> report = repo_->Verify();
  ASSERT_TRUE(report.ok());
  EXPECT_FALSE(report->ok());
  ASSERT_EQ(report->manifests.size(), 1u);
  EXPECT_EQ(report->manifests[0].first, "b1");
}

// A writer killed (SIGKILL-like: _exit, no destructors) after writing some
// chunks, plus the temporary files a kill mid-write leaves: the earlier
// backup verifies clean and restores, and the next GC removes the orphans.
TEST_F(RepositoryTest, WriterKilledBetweenChunkWritesLeavesEarlierBackupsIntact) {
  WriteAt(vol_, 0, Random(8 * kChunk, 18));
  ASSERT_TRUE(Backup("good", vol_).ok());
  const std::string good = Contents(vol_);
  const std::string next = dir_.Join("next.img");
  WriteAt(next, 0, Random(8 * kChunk, 19));

  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto repo = Repository::Open(root_);
    if (!repo.ok()) ::_exit(2);
    auto writer = (*repo)->StartBackup("killed");
    if (!writer.ok()) ::_exit(3);
    Fd fd(::open(next.c_str(), O_RDONLY));
    (void)(*writer)->AddVolume(Source("vol", fd.get(), 8 * kChunk, {{0, 8 * kChunk}}), [](int64_t done, int64_t) {
      if (done == 3 * kChunk) ::_exit(9);
    });
    ::_exit(4);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 9);
  // What a kill inside Put or inside the manifest's WriteFileAtomic leaves.
  const std::string hash(64, 'c');
  WriteAt(root_ + "/chunks/cc/." + hash + ".zst.tmp-0123456789abcdef", 0, "partial");
  WriteAt(root_ + "/backups/.killed2.json.tmp-0123456789abcdef", 0, "{\"format\": 1, \"na");

  // At least the three chunks reported; a worker may have stored one more.
  const int orphans = CountChunks(root_) - 8;
  EXPECT_GE(orphans, 3);
  // The two planted, and one more if the kill fell inside a worker's Put.
  const int temps = CountTempFiles(root_);
  EXPECT_GE(temps, 2);
  EXPECT_THAT(*repo_->ListBackups(), ElementsAre("good"));
  absl::StatusOr<VerifyReport> report = repo_->Verify();
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->ok()) << report->Describe();
  EXPECT_EQ(report->chunks_checked, 8);

  absl::StatusOr<GcReport> gc = repo_->Gc();
  ASSERT_TRUE(gc.ok()) << gc.status();
  EXPECT_EQ(gc->chunks_removed, orphans);
  EXPECT_EQ(gc->chunks_kept, 8);
  EXPECT_EQ(gc->temp_files_removed, temps);
  EXPECT_EQ(CountTempFiles(root_), 0);
  EXPECT_EQ(CountChunks(root_), 8);
  EXPECT_TRUE(repo_->Verify()->ok());
  EXPECT_EQ(Restored("good"), good);
}

TEST_F(RepositoryTest, FlippedByteIsNamedByVerifyAndRestoreWritesNothingWrong) {
  WriteAt(vol_, 0, Random(4 * kChunk, 20));
  ASSERT_TRUE(Backup("b1", vol_).ok());
  ASSERT_TRUE(Backup("b2", vol_).ok());  // same chunks
  const std::string expected = Contents(vol_);
  const std::string bad = repo_->ReadManifest("b1")->volumes[0].extents[2].hash;
  const std::string path = root_ + "/chunks/" + bad.substr(0, 2) + "/" + bad + ".zst";
  std::string raw = Contents(path);
  raw[raw.size() / 2] ^= 0x10;
  ASSERT_TRUE(WriteFileAtomic(path, raw).ok());

  absl::StatusOr<VerifyReport> report = repo_->Verify();
  ASSERT_TRUE(report.ok());
  ASSERT_EQ(report->problems.size(), 1u);
  EXPECT_EQ(report->problems[0].hash, bad);
  EXPECT_EQ(report->problems[0].status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(report->problems[0].backups, ElementsAre("b1", "b2"));
  EXPECT_THAT(report->Describe(), HasSubstr(bad));
  EXPECT_EQ(repo_->Verify("b2")->problems.size(), 1u);

  const std::string target = dir_.Join("restored.img");
  absl::StatusOr<RestoreStats> r = repo_->RestoreVolume("b1", "vol", target);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(r.status().message(), HasSubstr(bad));
  EXPECT_THAT(r.status().message(), HasSubstr("\"b1\""));
  // Verified chunks before the bad one, zeros from it on: nothing wrong.
  const std::string got = Contents(target);
  ASSERT_EQ(got.size(), expected.size());
  EXPECT_EQ(got.substr(0, 2 * kChunk), expected.substr(0, 2 * kChunk));
  EXPECT_EQ(got.substr(2 * kChunk), std::string(2 * kChunk, '\0'));
}

TEST_F(RepositoryTest, MissingChunkIsNamedByVerifyAndRestore) {
  WriteAt(vol_, 0, Random(2 * kChunk, 21));
  ASSERT_TRUE(Backup("b1", vol_).ok());
  const std::string gone = repo_->ReadManifest("b1")->volumes[0].extents[0].hash;
  ASSERT_TRUE(std::filesystem::remove(root_ + "/chunks/" + gone.substr(0, 2) + "/" + gone + ".zst"));
  absl::StatusOr<VerifyReport> report = repo_->Verify("b1");
  ASSERT_TRUE(report.ok());
  ASSERT_EQ(report->problems.size(), 1u);
  EXPECT_EQ(report->problems[0].status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(report->problems[0].hash, gone);
  absl::StatusOr<RestoreStats> r = repo_->RestoreVolume("b1", "vol", dir_.Join("t.img"));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(r.status().message(), HasSubstr(gone));
}

TEST_F(RepositoryTest, GcKeepsWhatNewerBackupsReference) {
  WriteAt(vol_, 0, Random(10 * kChunk, 22));
  ASSERT_TRUE(Backup("old", vol_).ok());
  WriteAt(vol_, 4 * kChunk, Random(2 * kChunk, 23));
  ASSERT_TRUE(Backup("new", vol_, {{4 * kChunk, 2 * kChunk}}, "old").ok());
  EXPECT_EQ(CountChunks(root_), 12);
  ASSERT_TRUE(repo_->DeleteBackup("old").ok());
  absl::StatusOr<GcReport> gc = repo_->Gc();
  ASSERT_TRUE(gc.ok()) << gc.status();
  EXPECT_EQ(gc->backups, 1);
  EXPECT_EQ(gc->chunks_removed, 2);  // only what "old" alone referenced
  EXPECT_EQ(gc->chunks_kept, 10);
  EXPECT_GT(gc->bytes_removed, 2 * kChunk);  // random data does not compress
  EXPECT_TRUE(repo_->Verify()->ok());
  EXPECT_EQ(Restored("new"), Contents(vol_));
  // Nothing left to collect.
  EXPECT_EQ(repo_->Gc()->chunks_removed, 0);
}

TEST_F(RepositoryTest, GcWaitsForNoBackupInProgress) {
  WriteAt(vol_, 0, Random(2 * kChunk, 24));
  auto writer = repo_->StartBackup("b1");
  ASSERT_TRUE(writer.ok());
  Fd fd(::open(vol_.c_str(), O_RDONLY));
  ASSERT_TRUE((*writer)->AddVolume(Source("vol", fd.get(), 2 * kChunk, {{0, 2 * kChunk}})).ok());
  // The chunks are written but no manifest names them yet.
  EXPECT_EQ(repo_->Gc().status().code(), absl::StatusCode::kUnavailable);
  ASSERT_TRUE((*writer)->Commit().ok());
  absl::StatusOr<GcReport> gc = repo_->Gc();
  ASSERT_TRUE(gc.ok()) << gc.status();
  EXPECT_EQ(gc->chunks_removed, 0);
  EXPECT_EQ(Restored("b1"), Contents(vol_));
}

TEST_F(RepositoryTest, AHoldWaitsOutGcAndBecomesTheWritersLock) {
  {
    // Another process's collection holds the exclusive lock.
    Fd gc(::open((root_ + "/lock").c_str(), O_RDONLY | O_CLOEXEC));
    ASSERT_TRUE(gc.ok());
    ASSERT_EQ(::flock(gc.get(), LOCK_EX | LOCK_NB), 0);
    absl::StatusOr<RepositoryHold> busy = repo_->HoldShared("start backup b1");
    EXPECT_EQ(busy.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(busy.status().message(), HasSubstr("cannot start backup b1: garbage collection is running"));
  }
  absl::StatusOr<RepositoryHold> hold = repo_->HoldShared("start backup b1");
  ASSERT_TRUE(hold.ok()) << hold.status();
  EXPECT_TRUE(hold->held());
  EXPECT_EQ(repo_->Gc().status().code(), absl::StatusCode::kUnavailable) << "the hold keeps collection out";

  auto writer = repo_->StartBackup("b1", std::move(*hold));
  ASSERT_TRUE(writer.ok()) << writer.status();
  EXPECT_EQ(repo_->Gc().status().code(), absl::StatusCode::kUnavailable) << "the writer keeps the hold";
  ASSERT_TRUE((*writer)->Commit().ok());
  EXPECT_TRUE(repo_->Gc().ok()) << "released at Commit";

  // A hold is of one repository only.
  auto other = Repository::Create(dir_.Join("other"));
  ASSERT_TRUE(other.ok()) << other.status();
  absl::StatusOr<RepositoryHold> theirs = (*other)->HoldShared("start backup b2");
  ASSERT_TRUE(theirs.ok());
  EXPECT_EQ(repo_->StartBackup("b2", std::move(*theirs)).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(repo_->ReadManifest("b2").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(RepositoryTest, GcRemovesNothingWhenAManifestCannotBeRead) {
  WriteAt(vol_, 0, Random(kChunk, 25));
  ASSERT_TRUE(Backup("b1", vol_).ok());
  WriteAt(vol_, 0, Random(kChunk, 26));
  ASSERT_TRUE(Backup("b2", vol_).ok());
  const std::string text = Contents(root_ + "/backups/b2.json");
  ASSERT_TRUE(WriteFileAtomic(root_ + "/backups/b2.json", text.substr(0, 40)).ok());
  ASSERT_TRUE(repo_->DeleteBackup("b1").ok());
  absl::StatusOr<GcReport> gc = repo_->Gc();
  EXPECT_EQ(gc.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(gc.status().message(), HasSubstr("nothing was removed"));
  EXPECT_EQ(CountChunks(root_), 2);

  ASSERT_TRUE(WriteFileAtomic(root_ + "/backups/b2.json", text).ok());
  WriteAt(root_ + "/backups/notes.txt", 0, "who knows");
  EXPECT_EQ(repo_->Gc().status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(CountChunks(root_), 2);
  ASSERT_TRUE(std::filesystem::remove(root_ + "/backups/notes.txt"));
  EXPECT_EQ(repo_->Gc()->chunks_removed, 1);
}

TEST_F(RepositoryTest, ManifestsAreWrittenWithCreationTime) {
  FakeClock clock(absl::FromUnixSeconds(1700000000));
  auto repo = Repository::Open(root_, clock);
  ASSERT_TRUE(repo.ok());
  auto writer = (*repo)->StartBackup("t1");
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE((*writer)->Commit().ok());
  EXPECT_EQ(repo_->ReadManifest("t1")->created_unix_nanos, int64_t{1700000000} * 1000000000);
}

}  // namespace
}  // namespace berth::backup
