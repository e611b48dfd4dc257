// Extent maps on real files: in the test's temp directory (whatever the host
// filesystem is), and, as root, on a loop-mounted XFS that reflinks, where
// the map comparison must be exact.
#include "driver/pool/extents.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <string>

#include "common/exec.h"
#include "common/fd.h"
#include "common/testing/temp_dir.h"
#include "driver/mount/filesystem.h"
#include "driver/mount/loop.h"
#include "driver/mount/mounter.h"
#include "driver/pool/pool_image.h"
#include "driver/testing/sandbox.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace berth::driver {

// For gtest's messages (found by argument-dependent lookup).
void PrintTo(const ByteRange& r, std::ostream* os) { *os << "[" << r.offset << ", +" << r.length << ")"; }

namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr int64_t kKiB = 1024;
constexpr int64_t kMiB = 1024 * 1024;

ByteRange R(int64_t offset, int64_t length) { return {offset, length}; }

// Writes `n` bytes of `fill` at `offset` and fsyncs.
void WriteAt(int fd, int64_t offset, int64_t n, char fill) {
  std::string data(static_cast<size_t>(n), fill);
  ASSERT_EQ(::pwrite(fd, data.data(), data.size(), offset), static_cast<ssize_t>(n)) << std::strerror(errno);
  ASSERT_EQ(::fsync(fd), 0);
}

Fd CreateSized(const std::string& path, int64_t size) {
  Fd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  EXPECT_TRUE(fd.ok()) << path << ": " << std::strerror(errno);
  EXPECT_EQ(::ftruncate(fd.get(), size), 0);
  return fd;
}

std::vector<ByteRange> Allocated(int fd, int64_t size) {
  auto map = ReadExtentMap(fd, "test file");
  EXPECT_TRUE(map.ok()) << map.status();
  return map.ok() ? AllocatedRanges(*map, size) : std::vector<ByteRange>{};
}

std::vector<ByteRange> Diff(int base, int target, int64_t size) {
  auto b = ReadExtentMap(base, "base");
  auto t = ReadExtentMap(target, "target");
  EXPECT_TRUE(b.ok() && t.ok());
  if (!b.ok() || !t.ok()) return {};
  return DiffExtentMaps(*b, *t, size);
}

// ---- The comparison itself, on hand-made maps ----

Extent E(int64_t logical, int64_t physical, int64_t length, bool known = true) {
  return {.logical = logical, .physical = physical, .length = length, .physical_known = known};
}

TEST(DiffExtentMapsTest, SamePhysicalBlocksAreUnchangedHowEverTheMapsAreCut) {
  // The base as one extent, the target as the same blocks in three pieces.
  std::vector<Extent> base = {E(0, 1000 * kMiB, 8 * kMiB)};
  std::vector<Extent> target = {E(0, 1000 * kMiB, 2 * kMiB), E(2 * kMiB, 1002 * kMiB, 1 * kMiB),
                                E(3 * kMiB, 1003 * kMiB, 5 * kMiB)};
  EXPECT_THAT(DiffExtentMaps(base, target, 16 * kMiB), IsEmpty());
}

TEST(DiffExtentMapsTest, RewrittenBlocksAreChanged) {
  std::vector<Extent> base = {E(0, 1000 * kMiB, 8 * kMiB)};
  std::vector<Extent> target = {E(0, 1000 * kMiB, 2 * kMiB), E(2 * kMiB, 5000 * kMiB, 1 * kMiB),
                                E(3 * kMiB, 1003 * kMiB, 5 * kMiB)};
  EXPECT_THAT(DiffExtentMaps(base, target, 16 * kMiB), ElementsAre(R(2 * kMiB, kMiB)));
}

TEST(DiffExtentMapsTest, DataOnOneSideOnlyIsChangedBothWays) {
  // Written over a hole at 4 MiB; discarded (now a hole, reads as zeros) at 8 MiB.
  std::vector<Extent> base = {E(0, 100 * kMiB, kMiB), E(8 * kMiB, 200 * kMiB, kMiB)};
  std::vector<Extent> target = {E(0, 100 * kMiB, kMiB), E(4 * kMiB, 300 * kMiB, 64 * kKiB)};
  EXPECT_THAT(DiffExtentMaps(base, target, 16 * kMiB), ElementsAre(R(4 * kMiB, 64 * kKiB), R(8 * kMiB, kMiB)));
}

TEST(DiffExtentMapsTest, UnknownPlacesNeverCompareEqual) {
  std::vector<Extent> base = {E(0, 0, kMiB, /*known=*/false)};
  std::vector<Extent> target = {E(0, 0, kMiB, /*known=*/false)};
  EXPECT_THAT(DiffExtentMaps(base, target, kMiB), ElementsAre(R(0, kMiB)));
}

TEST(DiffExtentMapsTest, AdjacentChangesMergeAndEverythingStopsAtTheSize) {
  std::vector<Extent> base = {E(0, 100 * kMiB, kMiB)};
  std::vector<Extent> target = {E(0, 200 * kMiB, 512 * kKiB), E(512 * kKiB, 300 * kMiB, kMiB)};
  EXPECT_THAT(DiffExtentMaps(base, target, kMiB), ElementsAre(R(0, kMiB)));
  EXPECT_THAT(DiffExtentMaps({}, {}, kMiB), IsEmpty());
}

TEST(AllocatedRangesTest, MergesAdjacentExtentsAndClips) {
  std::vector<Extent> map = {E(0, 100 * kMiB, kMiB), E(kMiB, 900 * kMiB, kMiB), E(4 * kMiB, 0, 2 * kMiB, false)};
  EXPECT_THAT(AllocatedRanges(map, 5 * kMiB), ElementsAre(R(0, 2 * kMiB), R(4 * kMiB, kMiB)));
}

// ---- Real files in the temp directory ----

TEST(ReadExtentMapTest, HolesAreLeftOut) {
  berth::testing::TempDir dir;
  Fd fd = CreateSized(dir.Join("img"), 16 * kMiB);
  WriteAt(fd.get(), 0, 64 * kKiB, 'a');
  WriteAt(fd.get(), 4 * kMiB, 128 * kKiB, 'b');
  EXPECT_THAT(Allocated(fd.get(), 16 * kMiB), ElementsAre(R(0, 64 * kKiB), R(4 * kMiB, 128 * kKiB)));
}

TEST(ReadExtentMapTest, UnwrittenExtentsAreLeftOutUntilWritten) {
  berth::testing::TempDir dir;
  Fd fd = CreateSized(dir.Join("img"), 16 * kMiB);
  if (::fallocate(fd.get(), 0, 2 * kMiB, 2 * kMiB) != 0) GTEST_SKIP() << "no fallocate here";
  // Space beyond the end, kept by KEEP_SIZE, is not the file's either.
  ASSERT_EQ(::fallocate(fd.get(), FALLOC_FL_KEEP_SIZE, 16 * kMiB, 4 * kMiB), 0);
  EXPECT_THAT(Allocated(fd.get(), 16 * kMiB), IsEmpty());
  WriteAt(fd.get(), 3 * kMiB, 4 * kKiB, 'x');
  EXPECT_THAT(Allocated(fd.get(), 16 * kMiB), ElementsAre(R(3 * kMiB, 4 * kKiB)));
}

TEST(ReadExtentMapTest, DirtyPagesAreMappedAsWritten) {
  berth::testing::TempDir dir;
  Fd fd = CreateSized(dir.Join("img"), 8 * kMiB);
  std::string data(256 * kKiB, 'd');
  ASSERT_EQ(::pwrite(fd.get(), data.data(), data.size(), kMiB), static_cast<ssize_t>(data.size()));  // no fsync
  EXPECT_THAT(Allocated(fd.get(), 8 * kMiB), ElementsAre(R(kMiB, 256 * kKiB)));
}

TEST(ReadExtentMapTest, NotARegularFileIsInvalidArgument) {
  berth::testing::TempDir dir;
  Fd fd(::open(dir.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  EXPECT_EQ(ReadExtentMap(fd.get(), "dir").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ConfirmByContentTest, FindsTheBlocksWhoseBytesDiffer) {
  berth::testing::TempDir dir;
  Fd base = CreateSized(dir.Join("base"), 8 * kMiB);
  Fd target = CreateSized(dir.Join("target"), 8 * kMiB);
  WriteAt(base.get(), 0, 2 * kMiB, 'a');
  WriteAt(target.get(), 0, 2 * kMiB, 'a');         // same bytes, other blocks
  WriteAt(target.get(), kMiB + 4 * kKiB, 1, 'z');  // one byte in one block
  WriteAt(base.get(), 4 * kMiB, 64 * kKiB, '\0');  // zeros written over a hole: same bytes as the hole
  WriteAt(base.get(), 6 * kMiB, 8 * kKiB, 'q');    // data where the target has a hole
  const std::vector<ByteRange> candidates = Diff(base.get(), target.get(), 8 * kMiB);
  EXPECT_THAT(candidates, ::testing::Contains(R(4 * kMiB, 64 * kKiB)));
  auto confirmed = ConfirmByContent(base.get(), target.get(), candidates, "pair");
  ASSERT_TRUE(confirmed.ok()) << confirmed.status();
  EXPECT_THAT(*confirmed, ElementsAre(R(kMiB + 4 * kKiB, 4 * kKiB), R(6 * kMiB, 8 * kKiB)));
}

TEST(ConfirmByContentTest, AFileReadsAsZerosPastItsEnd) {
  berth::testing::TempDir dir;
  Fd base = CreateSized(dir.Join("base"), 1 * kMiB);
  Fd target = CreateSized(dir.Join("target"), 2 * kMiB);  // grown
  WriteAt(target.get(), kMiB, 4 * kKiB, '\0');
  WriteAt(target.get(), kMiB + 8 * kKiB, 4 * kKiB, 'g');
  auto confirmed = ConfirmByContent(base.get(), target.get(), {R(kMiB, kMiB)}, "pair");
  ASSERT_TRUE(confirmed.ok()) << confirmed.status();
  EXPECT_THAT(*confirmed, ElementsAre(R(kMiB + 8 * kKiB, 4 * kKiB)));
}

// ---- As root: a reflink-capable XFS, as the pool image makes it ----

class ReflinkExtentsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    BERTH_REQUIRE_ROOT();
    LinuxFormatter formatter(runner_);
    absl::Status st =
        EnsurePoolImage(sandbox_.Join("xfs.img"), 512 * kMiB, sandbox_.Join("mnt"), loops_, mounter_, formatter);
    ASSERT_TRUE(st.ok()) << st;
    dir_ = sandbox_.Join("mnt");
  }

  // A clone of `src` at `dst`, as Pool::CreateSnapshot makes it.
  Fd Clone(int src, const std::string& dst) {
    Fd fd(::open(dst.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    EXPECT_TRUE(fd.ok());
    EXPECT_EQ(::ioctl(fd.get(), FICLONE, src), 0) << std::strerror(errno);
    return fd;
  }

  berth::testing::MountSandbox sandbox_;
  LinuxCommandRunner runner_;
  LinuxLoopDevices loops_;
  LinuxMounter mounter_;
  std::string dir_;
};

TEST_F(ReflinkExtentsTest, CloneComparesEqualAndRewritesAreExactlyTheDelta) {
  constexpr int64_t kSize = 256 * kMiB;
  Fd vol = CreateSized(dir_ + "/vol", kSize);
  // 8 MiB at three offsets.
  WriteAt(vol.get(), 0, 2 * kMiB, 'a');
  WriteAt(vol.get(), 64 * kMiB, 4 * kMiB, 'b');
  WriteAt(vol.get(), 200 * kMiB, 2 * kMiB, 'c');
  Fd s1 = Clone(vol.get(), dir_ + "/s1");
  EXPECT_THAT(Allocated(s1.get(), kSize), ElementsAre(R(0, 2 * kMiB), R(64 * kMiB, 4 * kMiB), R(200 * kMiB, 2 * kMiB)));
  EXPECT_THAT(Diff(vol.get(), s1.get(), kSize), IsEmpty()) << "a clone shares every block";

  // 1 MiB rewritten with the same bytes (still a new block: CoW), 1 MiB new.
  WriteAt(vol.get(), 65 * kMiB, kMiB, 'b');
  WriteAt(vol.get(), 128 * kMiB, kMiB, 'n');
  Fd s2 = Clone(vol.get(), dir_ + "/s2");
  EXPECT_THAT(Diff(s1.get(), s2.get(), kSize), ElementsAre(R(65 * kMiB, kMiB), R(128 * kMiB, kMiB)));
  EXPECT_THAT(Diff(s2.get(), s1.get(), kSize), ElementsAre(R(65 * kMiB, kMiB), R(128 * kMiB, kMiB))) << "symmetric";
}

TEST_F(ReflinkExtentsTest, DiscardedAndZeroedDataIsAChangeButFallocatedSpaceIsNot) {
  constexpr int64_t kSize = 64 * kMiB;
  Fd vol = CreateSized(dir_ + "/vol", kSize);
  WriteAt(vol.get(), 0, 8 * kMiB, 'a');
  Fd s1 = Clone(vol.get(), dir_ + "/s1");
  // A discard (punched hole) and a zeroed range (unwritten extent) over
  // data; fallocated space over a hole.
  ASSERT_EQ(::fallocate(vol.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, kMiB, kMiB), 0);
  ASSERT_EQ(::fallocate(vol.get(), FALLOC_FL_ZERO_RANGE, 4 * kMiB, kMiB), 0);
  ASSERT_EQ(::fallocate(vol.get(), 0, 16 * kMiB, 4 * kMiB), 0);
  ASSERT_EQ(::fsync(vol.get()), 0);
  Fd s2 = Clone(vol.get(), dir_ + "/s2");
  EXPECT_THAT(Allocated(s2.get(), kSize), ElementsAre(R(0, kMiB), R(2 * kMiB, 2 * kMiB), R(5 * kMiB, 3 * kMiB)));
  EXPECT_THAT(Diff(s1.get(), s2.get(), kSize), ElementsAre(R(kMiB, kMiB), R(4 * kMiB, kMiB)));
}

TEST_F(ReflinkExtentsTest, ContentComparisonGivesTheSameAnswerAsTheMaps) {
  constexpr int64_t kSize = 64 * kMiB;
  Fd vol = CreateSized(dir_ + "/vol", kSize);
  WriteAt(vol.get(), 0, 8 * kMiB, 'a');
  Fd s1 = Clone(vol.get(), dir_ + "/s1");
  WriteAt(vol.get(), 3 * kMiB, 12 * kKiB, 'z');
  WriteAt(vol.get(), 32 * kMiB, kMiB, 'n');
  Fd s2 = Clone(vol.get(), dir_ + "/s2");
  const std::vector<ByteRange> by_maps = Diff(s1.get(), s2.get(), kSize);
  EXPECT_THAT(by_maps, ElementsAre(R(3 * kMiB, 12 * kKiB), R(32 * kMiB, kMiB)));
  // What a pool without reflink computes: every data range a candidate.
  auto a = ReadExtentMap(s1.get(), "s1");
  auto b = ReadExtentMap(s2.get(), "s2");
  ASSERT_TRUE(a.ok() && b.ok());
  auto by_content = ConfirmByContent(s1.get(), s2.get(), AllocatedRanges(*b, kSize), "pair");  // s1's data ⊂ s2's here
  ASSERT_TRUE(by_content.ok()) << by_content.status();
  EXPECT_EQ(*by_content, by_maps);
}

}  // namespace
}  // namespace berth::driver
