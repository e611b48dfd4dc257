// Small pieces of berth-csi: operation locks, freezing, mount parsing.
#include <sys/mount.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "common/testing/temp_dir.h"
#include "driver/context.h"
#include "driver/mount/mounter.h"
#include "driver/operation_locks.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace berth::driver {
namespace {

TEST(OperationLocksTest, SecondOperationOnSameObjectIsAborted) {
  OperationLocks locks;
  auto a = locks.TryAcquire({"vol-1", "snap-1"});
  ASSERT_TRUE(a.ok());
  auto b = locks.TryAcquire({"vol-1"});
  EXPECT_EQ(b.status().code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(locks.TryAcquire({"vol-2", ""}).ok()) << "other objects proceed";
  auto c = locks.TryAcquire({"vol-3", "snap-1"});
  EXPECT_EQ(c.status().code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(locks.TryAcquire({"vol-3"}).ok()) << "a refused acquire takes nothing";
  { auto released = std::move(*a); }
  EXPECT_TRUE(locks.TryAcquire({"vol-1", "snap-1"}).ok());
}

class RecordingFreezer final : public Freezer {
 public:
  std::vector<std::string> calls;
  std::string fail_freeze;

  // Freezer
  absl::Status Freeze(const std::string& p) override {
    calls.push_back("freeze " + p);
    if (p == fail_freeze) return absl::InternalError("cannot freeze");
    return absl::OkStatus();
  }
  absl::Status Thaw(const std::string& p) override {
    calls.push_back("thaw " + p);
    return absl::OkStatus();
  }
};

TEST(WithFrozenTest, ThawsInReverseOrderEvenWhenTheCloneFails) {
  RecordingFreezer f;
  absl::Status st = WithFrozen(f, {"/a", "/b"}, [&] {
    f.calls.push_back("clone");
    return absl::DataLossError("clone failed");
  });
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(f.calls, ::testing::ElementsAre("freeze /a", "freeze /b", "clone", "thaw /b", "thaw /a"));
}

TEST(WithFrozenTest, FailedFreezeThawsWhatWasFrozenAndSkipsTheClone) {
  RecordingFreezer f;
  f.fail_freeze = "/b";
  bool cloned = false;
  absl::Status st = WithFrozen(f, {"/a", "/b", "/c"}, [&] {
    cloned = true;
    return absl::OkStatus();
  });
  EXPECT_EQ(st.code(), absl::StatusCode::kInternal);
  EXPECT_FALSE(cloned);
  EXPECT_THAT(f.calls, ::testing::ElementsAre("freeze /a", "freeze /b", "thaw /a"));
}

TEST(MountFlagsTest, SplitsFlagsAndData) {
  unsigned long ms = 0;
  std::string data;
  ASSERT_TRUE(ParseMountFlags({"ro,noatime", "nosuid", "discard", "defaults"}, &ms, &data).ok());
  EXPECT_EQ(ms, static_cast<unsigned long>(MS_RDONLY | MS_NOATIME | MS_NOSUID));
  EXPECT_EQ(data, "discard");
  ASSERT_TRUE(ParseMountFlags({"ro", "rw"}, &ms, &data).ok());
  EXPECT_EQ(ms & MS_RDONLY, 0u) << "later flags win";
}

TEST(MountFlagsTest, RefusesFlagsThatChangeWhatAMountIs) {
  unsigned long ms = 0;
  std::string data;
  for (const char* bad : {"bind", "rbind", "remount", "shared", "move", "a b", "x\n"}) {
    EXPECT_EQ(ParseMountFlags({bad}, &ms, &data).code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(MountInfoTest, ParsesFieldsAndEscapes) {
  const std::string text =
      "36 35 98:0 / /mnt/with\\040space rw,noatime master:1 - ext4 /dev/loop3 rw,errors=continue\n"
      "37 36 98:1 /sub /k/target ro,relatime - xfs /dev/loop4 ro\n";
  auto m = ParseMountInfo(text);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->size(), 2u);
  EXPECT_EQ((*m)[0].target, "/mnt/with space");
  EXPECT_EQ((*m)[0].source, "/dev/loop3");
  EXPECT_EQ((*m)[0].fs_type, "ext4");
  EXPECT_EQ((*m)[0].major, 98u);
  EXPECT_FALSE((*m)[0].read_only());
  EXPECT_EQ((*m)[1].root, "/sub");
  EXPECT_TRUE((*m)[1].read_only());
  EXPECT_EQ(ParseMountInfo("garbage line\n").status().code(), absl::StatusCode::kDataLoss);
}

// IsMountPoint answers from statx what Find answers from the mount table.
TEST(LinuxMounterTest, IsMountPointAgreesWithTheMountTable) {
  if (::geteuid() != 0) GTEST_SKIP() << "mounts need root";
  berth::testing::TempDir dir;
  const std::string target = dir.Join("mnt");
  std::filesystem::create_directory(target);
  ASSERT_EQ(::mount("berth-test", target.c_str(), "tmpfs", 0, "size=1m"), 0) << std::strerror(errno);
  struct Unmount {
    std::string path;
    ~Unmount() { ::umount2(path.c_str(), MNT_DETACH); }
  } unmount{target};
  std::filesystem::create_directory(target + "/sub");
  LinuxMounter mounter;
  for (const std::string& path : {target, target + "/sub", dir.path(), dir.Join("missing"), target + "/sub/x/y"}) {
    auto fast = mounter.IsMountPoint(path);
    auto found = mounter.Find(path);
    ASSERT_TRUE(fast.ok()) << fast.status();
    ASSERT_TRUE(found.ok()) << found.status();
    EXPECT_EQ(*fast, found->has_value()) << path;
  }
  EXPECT_TRUE(*mounter.IsMountPoint(target));
  EXPECT_FALSE(*mounter.IsMountPoint(target + "/sub"));
  ASSERT_EQ(::umount2(target.c_str(), 0), 0);
  EXPECT_FALSE(*mounter.IsMountPoint(target));
}

}  // namespace
}  // namespace berth::driver
