#include "driver/pool/pool.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/fs.h"
#include "common/testing/temp_dir.h"
#include "driver/pool/image.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace berth::driver {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

void WriteAt(const std::string& path, off_t off, const std::string& data) {
  int fd = ::open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, data.data(), data.size(), off), static_cast<ssize_t>(data.size()));
  ::close(fd);
}

std::string ReadAt(const std::string& path, off_t off, size_t n) {
  int fd = ::open(path.c_str(), O_RDONLY);
  std::string s(n, '\0');
  EXPECT_EQ(::pread(fd, s.data(), n, off), static_cast<ssize_t>(n));
  ::close(fd);
  return s;
}

class PoolTest : public ::testing::Test {
 protected:
  std::unique_ptr<Pool> Open(double ratio = 1.0) {
    auto p = Pool::Open({.dir = dir_.path(), .overprovision_ratio = ratio});
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? std::move(*p) : nullptr;
  }
  Pool::NewVolume Spec(const std::string& id, int64_t size) {
    Pool::NewVolume s;
    s.id = id;
    s.name = "name-" + id;
    s.capacity_bytes = size;
    s.fs_type = "ext4";
    return s;
  }
  testing::TempDir dir_;
};

TEST_F(PoolTest, CreatesSparseImageAndRecordAndDeletesBoth) {
  auto pool = Open();
  auto v = pool->CreateVolume(Spec("vol-a", 256 << 20));
  ASSERT_TRUE(v.ok()) << v.status();
  struct stat st {};
  ASSERT_EQ(::stat(pool->VolumeImagePath("vol-a").c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 256 << 20);
  EXPECT_LT(st.st_blocks * 512, 1 << 20) << "image must be sparse";
  EXPECT_TRUE(fs::exists(dir_.Join("volumes/vol-a.json")));
  EXPECT_EQ(pool->CreateVolume(Spec("vol-a", 1 << 20)).status().code(), absl::StatusCode::kAlreadyExists);

  ASSERT_TRUE(pool->DeleteVolume("vol-a").ok());
  EXPECT_FALSE(fs::exists(pool->VolumeImagePath("vol-a")));
  EXPECT_FALSE(fs::exists(dir_.Join("volumes/vol-a.json")));
  EXPECT_TRUE(pool->DeleteVolume("vol-a").ok()) << "idempotent";
}

TEST_F(PoolTest, RecordsSurviveReopen) {
  {
    auto pool = Open();
    ASSERT_TRUE(pool->CreateVolume(Spec("vol-a", 1 << 20)).ok());
    ASSERT_TRUE(pool->CreateSnapshot("snap-a", "s", "vol-a", {}, "").ok());
  }
  auto pool = Open();
  ASSERT_TRUE(pool->GetVolume("vol-a").has_value());
  EXPECT_EQ(pool->GetVolume("vol-a")->capacity_bytes, 1 << 20);
  ASSERT_TRUE(pool->GetSnapshot("snap-a").has_value());
  EXPECT_EQ(pool->GetSnapshot("snap-a")->source_volume_id, "vol-a");
}

TEST_F(PoolTest, ProvisioningLimitNamesTheNumbers) {
  auto pool = Open(/*ratio=*/1e-9);  // a limit of a few hundred bytes
  auto v = pool->CreateVolume(Spec("vol-big", 1 << 20));
  EXPECT_EQ(v.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(v.status().message(), HasSubstr("cannot provision 1Mi"));
  EXPECT_THAT(v.status().message(), HasSubstr("overprovision ratio"));
  EXPECT_FALSE(fs::exists(pool->VolumeImagePath("vol-big")));
  auto cap = pool->GetCapacity();
  ASSERT_TRUE(cap.ok());
  EXPECT_EQ(cap->provisioned_bytes, 0) << "a failed create reserves nothing";
}

TEST_F(PoolTest, CapacityCountsVolumesAndSnapshots) {
  auto pool = Open();
  auto before = pool->GetCapacity();
  ASSERT_TRUE(pool->CreateVolume(Spec("vol-a", 8 << 20)).ok());
  ASSERT_TRUE(pool->CreateSnapshot("snap-a", "s", "vol-a", {}, "").ok());
  auto after = pool->GetCapacity();
  EXPECT_EQ(after->provisioned_bytes - before->provisioned_bytes, 16 << 20);
  EXPECT_EQ(before->available_bytes - after->available_bytes, 16 << 20);
}

TEST_F(PoolTest, CopiesKeepDataAndHoles) {
  auto pool = Open();
  ASSERT_TRUE(pool->CreateVolume(Spec("vol-a", 64 << 20)).ok());
  WriteAt(pool->VolumeImagePath("vol-a"), 0, std::string(4096, 'A'));
  WriteAt(pool->VolumeImagePath("vol-a"), 32 << 20, std::string(4096, 'B'));
  ASSERT_TRUE(pool->CreateSnapshot("snap-a", "s", "vol-a", {}, "").ok());
  // Writes to the volume after the snapshot do not reach it.
  WriteAt(pool->VolumeImagePath("vol-a"), 0, std::string(4096, 'C'));
  const std::string snap = pool->SnapshotImagePath("snap-a");
  EXPECT_EQ(ReadAt(snap, 0, 4096), std::string(4096, 'A'));
  EXPECT_EQ(ReadAt(snap, 32 << 20, 4096), std::string(4096, 'B'));
  EXPECT_EQ(ReadAt(snap, 16 << 20, 4096), std::string(4096, '\0'));
  struct stat st {};
  ASSERT_EQ(::stat(snap.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 64 << 20);
  EXPECT_LT(st.st_blocks * 512, 4 << 20) << "holes stay holes (reflink=" << pool->reflink() << ")";

  // Restore into a larger volume: data, then zeroes up to the new size.
  Pool::NewVolume restore = Spec("vol-b", 128 << 20);
  restore.source_snapshot_id = "snap-a";
  auto v = pool->CreateVolume(restore);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(ReadAt(pool->VolumeImagePath("vol-b"), 32 << 20, 4096), std::string(4096, 'B'));
  EXPECT_EQ(*ImageSize(pool->VolumeImagePath("vol-b")), 128 << 20);
  Pool::NewVolume missing = Spec("vol-c", 1 << 20);
  missing.source_snapshot_id = "snap-nope";
  EXPECT_EQ(pool->CreateVolume(missing).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(PoolTest, QuiesceWrapsTheCloneAndItsErrorAborts) {
  auto pool = Open();
  ASSERT_TRUE(pool->CreateVolume(Spec("vol-a", 1 << 20)).ok());
  int calls = 0;
  auto failing = [&](const std::function<absl::Status()>&) {
    ++calls;
    return absl::UnavailableError("freeze failed");
  };
  EXPECT_EQ(pool->CreateSnapshot("snap-a", "s", "vol-a", {}, "", failing).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(pool->GetSnapshot("snap-a").has_value());
  EXPECT_TRUE(fs::is_empty(dir_.Join("tmp")));
  EXPECT_EQ(pool->GetCapacity()->provisioned_bytes, 1 << 20);
}

TEST_F(PoolTest, ExpandGrowsImageAndRecordNeverShrinks) {
  auto pool = Open();
  ASSERT_TRUE(pool->CreateVolume(Spec("vol-a", 8 << 20)).ok());
  auto v = pool->ExpandVolume("vol-a", 16 << 20);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->capacity_bytes, 16 << 20);
  EXPECT_EQ(*ImageSize(pool->VolumeImagePath("vol-a")), 16 << 20);
  EXPECT_EQ(pool->ExpandVolume("vol-a", 4 << 20)->capacity_bytes, 16 << 20);
  EXPECT_EQ(pool->ExpandVolume("vol-x", 4 << 20).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(PoolTest, StartRepairsWhatACrashLeft) {
  {
    auto pool = Open();
    ASSERT_TRUE(pool->CreateVolume(Spec("vol-keep", 1 << 20)).ok());
    ASSERT_TRUE(pool->CreateVolume(Spec("vol-del", 1 << 20)).ok());
  }
  // A crash in the middle of a create (image in tmp), after the rename
  // (image without record), during a record write (temp file), and during a
  // delete (record marked deleting, image still there).
  std::ofstream(dir_.Join("tmp/vol-x.img")) << "partial";
  std::ofstream(dir_.Join("volumes/vol-orphan.img")) << "unrecorded";
  std::ofstream(dir_.Join("volumes/.vol-keep.json.tmp-1234")) << "{half";
  {
    auto r = VolumeFromJson(*ReadFile(dir_.Join("volumes/vol-del.json")));
    r->deleting = true;
    ASSERT_TRUE(WriteFileAtomic(dir_.Join("volumes/vol-del.json"), ToJson(*r)).ok());
  }
  auto pool = Open();
  EXPECT_TRUE(pool->GetVolume("vol-keep").has_value());
  EXPECT_FALSE(pool->GetVolume("vol-del").has_value());
  EXPECT_FALSE(fs::exists(pool->VolumeImagePath("vol-del")));
  EXPECT_FALSE(fs::exists(dir_.Join("volumes/vol-del.json")));
  EXPECT_FALSE(fs::exists(dir_.Join("volumes/vol-orphan.img")));
  EXPECT_FALSE(fs::exists(dir_.Join("volumes/.vol-keep.json.tmp-1234")));
  EXPECT_TRUE(fs::is_empty(dir_.Join("tmp")));
  EXPECT_TRUE(fs::exists(pool->VolumeImagePath("vol-keep")));
}

TEST_F(PoolTest, RefusesToOpenRecordsFromANewerVersion) {
  { Open(); }
  std::ofstream(dir_.Join("volumes/vol-new.json")) << R"({"format": 7, "kind": "volume"})";
  auto pool = Pool::Open({.dir = dir_.path()});
  EXPECT_EQ(pool.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(pool.status().message(), HasSubstr("newer version"));
  EXPECT_TRUE(fs::exists(dir_.Join("volumes/vol-new.json"))) << "nothing is removed";
}

}  // namespace
}  // namespace berth::driver
