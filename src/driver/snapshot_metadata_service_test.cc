// SnapshotMetadata: the spec's paging and error codes over fake kernel
// interfaces (a pool in the temp directory, compared by content when the
// host filesystem cannot reflink), one stream over a real socket, and, as
// root, the changed-block acceptance scenario on a real XFS pool image with
// a block volume written through its loop device and a filesystem volume
// written through its mount.
#include "driver/snapshot_metadata_service.h"

#include <fcntl.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <filesystem>
#include <map>

#include "common/exec.h"
#include "common/fd.h"
#include "common/testing/temp_dir.h"
#include "csi/client.h"
#include "csi/server.h"
#include "driver/driver.h"
#include "driver/pool/ids.h"
#include "driver/testing/fakes.h"
#include "driver/testing/sandbox.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"

namespace berth::driver {
namespace {

namespace fs = std::filesystem;
using ::csi::v1::BlockMetadataType;
using ::csi::v1::GetMetadataAllocatedRequest;
using ::csi::v1::GetMetadataAllocatedResponse;
using ::csi::v1::GetMetadataDeltaRequest;
using ::csi::v1::GetMetadataDeltaResponse;
using ::csi::v1::VolumeCapability;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr int64_t kKiB = 1024;
constexpr int64_t kMiB = 1024 * 1024;

// A set of byte ranges, merged: what a stream says, however it is cut into
// tuples and messages.
using RangeSet = std::map<int64_t, int64_t>;  // offset -> end

void Add(RangeSet& set, int64_t offset, int64_t end) {
  auto it = set.upper_bound(offset);
  if (it != set.begin() && std::prev(it)->second >= offset) {
    --it;
    offset = it->first;
    end = std::max(end, it->second);
    it = set.erase(it);
  }
  while (it != set.end() && it->first <= end) {
    end = std::max(end, it->second);
    it = set.erase(it);
  }
  set[offset] = end;
}

int64_t Total(const RangeSet& set) {
  int64_t n = 0;
  for (const auto& [o, e] : set) n += e - o;
  return n;
}

// Whether every byte of [offset, end) is in `set`.
bool Covers(const RangeSet& set, int64_t offset, int64_t end) {
  auto it = set.upper_bound(offset);
  return it != set.begin() && std::prev(it)->first <= offset && std::prev(it)->second >= end;
}

// A whole stream, checked against the spec as it is read: one type and one
// capacity throughout, at most max_results tuples per message, tuples
// strictly increasing and not overlapping, none ending at or before the
// starting offset.
struct Streamed {
  absl::Status status;
  std::vector<std::vector<std::pair<int64_t, int64_t>>> messages;  // (offset, size) per tuple
  BlockMetadataType type = BlockMetadataType::UNKNOWN;
  int64_t capacity = -1;
  RangeSet ranges;
};

template <typename Response>
class Collector {
 public:
  Collector(int64_t starting_offset, int32_t max_results) : start_(starting_offset), max_(max_results) {}

  bool operator()(const Response& msg) {
    if (out.messages.empty()) {
      out.type = msg.block_metadata_type();
      out.capacity = msg.volume_capacity_bytes();
    }
    EXPECT_EQ(msg.block_metadata_type(), out.type);
    EXPECT_EQ(msg.volume_capacity_bytes(), out.capacity);
    if (max_ > 0) {
      EXPECT_LE(msg.block_metadata_size(), max_);
    }
    auto& tuples = out.messages.emplace_back();
    for (const auto& b : msg.block_metadata()) {
      EXPECT_GT(b.size_bytes(), 0);
      EXPECT_GE(b.byte_offset(), last_end_) << "tuples increase and do not overlap";
      EXPECT_GT(b.byte_offset() + b.size_bytes(), start_) << "no tuple ends before starting_offset";
      last_end_ = b.byte_offset() + b.size_bytes();
      tuples.emplace_back(b.byte_offset(), b.size_bytes());
      Add(out.ranges, b.byte_offset(), last_end_);
    }
    return true;
  }

  Streamed out;

 private:
  int64_t start_;
  int32_t max_;
  int64_t last_end_ = 0;
};

class SnapshotMetadataTestBase : public ::testing::Test {
 protected:
  Streamed Allocated(const std::string& snap, int64_t start = 0, int32_t max_results = 0) {
    GetMetadataAllocatedRequest req;
    req.set_snapshot_id(snap);
    req.set_starting_offset(start);
    req.set_max_results(max_results);
    Collector<GetMetadataAllocatedResponse> c(start, max_results);
    c.out.status = driver_->snapshot_metadata().DoGetAllocated(req, std::ref(c));
    return c.out;
  }
  Streamed Delta(const std::string& base, const std::string& target, int64_t start = 0, int32_t max_results = 0) {
    GetMetadataDeltaRequest req;
    req.set_base_snapshot_id(base);
    req.set_target_snapshot_id(target);
    req.set_starting_offset(start);
    req.set_max_results(max_results);
    Collector<GetMetadataDeltaResponse> c(start, max_results);
    c.out.status = driver_->snapshot_metadata().DoGetDelta(req, std::ref(c));
    return c.out;
  }

  static VolumeCapability Cap(bool block, const std::string& fs_type = "ext4") {
    VolumeCapability c;
    if (block) {
      c.mutable_block();
    } else {
      c.mutable_mount()->set_fs_type(fs_type);
    }
    c.mutable_access_mode()->set_mode(VolumeCapability::AccessMode::SINGLE_NODE_WRITER);
    return c;
  }
  std::string CreateVolume(const std::string& name, int64_t size, bool block) {
    ::csi::v1::CreateVolumeRequest req;
    req.set_name(name);
    req.mutable_capacity_range()->set_required_bytes(size);
    *req.add_volume_capabilities() = Cap(block);
    ::csi::v1::CreateVolumeResponse resp;
    absl::Status st = driver_->controller().DoCreateVolume(req, &resp);
    EXPECT_TRUE(st.ok()) << st;
    return resp.volume().volume_id();
  }
  std::string Snapshot(const std::string& name, const std::string& vol) {
    ::csi::v1::CreateSnapshotRequest req;
    req.set_name(name);
    req.set_source_volume_id(vol);
    ::csi::v1::CreateSnapshotResponse resp;
    absl::Status st = driver_->controller().DoCreateSnapshot(req, &resp);
    EXPECT_TRUE(st.ok()) << st;
    return resp.snapshot().snapshot_id();
  }

  // Writes `n` bytes of `fill` at `offset` of `path` and fsyncs.
  static void WriteAt(const std::string& path, int64_t offset, int64_t n, char fill) {
    Fd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
    ASSERT_TRUE(fd.ok()) << path << ": " << std::strerror(errno);
    std::string data(static_cast<size_t>(n), fill);
    ASSERT_EQ(::pwrite(fd.get(), data.data(), data.size(), offset), static_cast<ssize_t>(n)) << std::strerror(errno);
    ASSERT_EQ(::fsync(fd.get()), 0);
  }

  std::unique_ptr<Driver> driver_;
};

// ---- Over fake kernel interfaces ----

class SnapshotMetadataTest : public SnapshotMetadataTestBase {
 protected:
  void SetUp() override {
    DriverOptions o;
    o.endpoint = "unix:///unused.sock";
    o.node_id = "node-a";
    o.pool = dir_.Join("pool");
    o.kubelet_root = dir_.Join("kubelet");
    auto d = Driver::Open(o, {&loops_, &mounter_, &formatter_, &freezer_});
    ASSERT_TRUE(d.ok()) << d.status();
    driver_ = std::move(*d);
  }
  std::string Image(const std::string& vol) { return driver_->pool().VolumeImagePath(vol); }

  berth::testing::TempDir dir_;
  testing::FakeLoopDevices loops_;
  testing::FakeMounter mounter_;
  testing::FakeFormatter formatter_{loops_};
  testing::FakeFreezer freezer_;
};

TEST_F(SnapshotMetadataTest, AllocatedAndDeltaOfWritesToTheImage) {
  const std::string vol = CreateVolume("pvc-1", 64 * kMiB, /*block=*/true);
  WriteAt(Image(vol), 0, 2 * kMiB, 'a');
  WriteAt(Image(vol), 20 * kMiB, 4 * kMiB, 'b');
  WriteAt(Image(vol), 40 * kMiB, 2 * kMiB, 'c');
  const std::string s1 = Snapshot("s1", vol);
  WriteAt(Image(vol), 21 * kMiB, kMiB, 'x');
  WriteAt(Image(vol), 50 * kMiB, kMiB, 'n');
  // The same bytes again: compared by content (no reflink here) no change;
  // on a reflink pool a new block, so a change.
  WriteAt(Image(vol), 41 * kMiB, kMiB, 'c');
  const std::string s2 = Snapshot("s2", vol);

  Streamed a = Allocated(s1);
  ASSERT_TRUE(a.status.ok()) << a.status;
  EXPECT_EQ(a.type, BlockMetadataType::VARIABLE_LENGTH);
  EXPECT_EQ(a.capacity, 64 * kMiB);
  EXPECT_EQ(a.ranges, (RangeSet{{0, 2 * kMiB}, {20 * kMiB, 24 * kMiB}, {40 * kMiB, 42 * kMiB}}));

  Streamed d = Delta(s1, s2);
  ASSERT_TRUE(d.status.ok()) << d.status;
  EXPECT_EQ(d.type, BlockMetadataType::VARIABLE_LENGTH);
  EXPECT_EQ(d.capacity, 64 * kMiB);
  RangeSet expected = {{21 * kMiB, 22 * kMiB}, {50 * kMiB, 51 * kMiB}};
  if (driver_->pool().reflink()) Add(expected, 41 * kMiB, 42 * kMiB);
  EXPECT_EQ(d.ranges, expected);
  EXPECT_THAT(Delta(s1, s1).ranges, IsEmpty());
}

TEST_F(SnapshotMetadataTest, PagingAndRestartingGiveTheSameSet) {
  const std::string vol = CreateVolume("pvc-1", 64 * kMiB, /*block=*/true);
  for (int i = 0; i < 10; ++i) WriteAt(Image(vol), i * 4 * kMiB, 64 * kKiB, 'a');
  const std::string s1 = Snapshot("s1", vol);
  for (int i = 0; i < 10; ++i) WriteAt(Image(vol), i * 4 * kMiB + 16 * kKiB, 8 * kKiB, 'b');
  const std::string s2 = Snapshot("s2", vol);

  for (bool delta : {false, true}) {
    SCOPED_TRACE(delta ? "delta" : "allocated");
    auto call = [&](int64_t start, int32_t max) {
      return delta ? Delta(s1, s2, start, max) : Allocated(s2, start, max);
    };
    Streamed whole = call(0, 0);
    ASSERT_TRUE(whole.status.ok()) << whole.status;
    ASSERT_EQ(whole.messages.size(), 1u);
    ASSERT_EQ(whole.messages[0].size(), 10u);

    Streamed paged = call(0, 3);
    ASSERT_TRUE(paged.status.ok()) << paged.status;
    EXPECT_EQ(paged.messages.size(), 4u) << "3 + 3 + 3 + 1";
    EXPECT_EQ(paged.ranges, whole.ranges);

    // Interrupted after the fourth tuple (and once in the middle of one):
    // what came before plus the resumed stream is the whole set again.
    for (int64_t resume :
         {whole.messages[0][3].first + whole.messages[0][3].second, whole.messages[0][5].first + 4 * kKiB}) {
      Streamed rest = call(resume, 2);
      ASSERT_TRUE(rest.status.ok()) << rest.status;
      ASSERT_FALSE(rest.messages.empty());
      EXPECT_GE(rest.messages[0].front().first, resume) << "cut at the starting offset";
      RangeSet joined = rest.ranges;
      for (const auto& [o, e] : whole.ranges) {
        if (o < resume) Add(joined, o, std::min(e, resume));
      }
      EXPECT_EQ(joined, whole.ranges);
    }
  }
}

TEST_F(SnapshotMetadataTest, NothingToSayIsOneEmptyMessage) {
  const std::string vol = CreateVolume("pvc-1", 64 * kMiB, /*block=*/true);
  const std::string s1 = Snapshot("s1", vol);
  for (int64_t start : {int64_t{0}, 64 * kMiB}) {
    Streamed a = Allocated(s1, start);
    ASSERT_TRUE(a.status.ok()) << a.status;
    ASSERT_EQ(a.messages.size(), 1u);
    EXPECT_THAT(a.messages[0], IsEmpty());
    EXPECT_EQ(a.capacity, 64 * kMiB);
    EXPECT_EQ(a.type, BlockMetadataType::VARIABLE_LENGTH);
  }
}

TEST_F(SnapshotMetadataTest, DeltaCoversWhatWasWrittenAfterTheVolumeGrew) {
  const std::string vol = CreateVolume("pvc-1", 32 * kMiB, /*block=*/true);
  WriteAt(Image(vol), 0, kMiB, 'a');
  const std::string s1 = Snapshot("s1", vol);
  ::csi::v1::ControllerExpandVolumeRequest grow;
  grow.set_volume_id(vol);
  grow.mutable_capacity_range()->set_required_bytes(64 * kMiB);
  ::csi::v1::ControllerExpandVolumeResponse grown;
  ASSERT_TRUE(driver_->controller().DoExpand(grow, &grown).ok());
  WriteAt(Image(vol), 48 * kMiB, kMiB, 'g');
  const std::string s2 = Snapshot("s2", vol);
  Streamed d = Delta(s1, s2);
  ASSERT_TRUE(d.status.ok()) << d.status;
  EXPECT_EQ(d.capacity, 64 * kMiB) << "the target's capacity";
  EXPECT_EQ(d.ranges, (RangeSet{{48 * kMiB, 49 * kMiB}}));
}

TEST_F(SnapshotMetadataTest, EveryErrorHasTheSpecsCode) {
  const std::string vol = CreateVolume("pvc-1", 64 * kMiB, /*block=*/true);
  const std::string other = CreateVolume("pvc-2", 64 * kMiB, /*block=*/false);
  const std::string s1 = Snapshot("s1", vol);
  const std::string s2 = Snapshot("s2", vol);
  const std::string o1 = Snapshot("o1", other);
  const std::string unknown = IdForName(IdKind::kSnapshot, "never-made");
  using C = absl::StatusCode;

  // Missing or invalid arguments.
  EXPECT_EQ(Allocated("").status.code(), C::kInvalidArgument);
  EXPECT_EQ(Allocated("../etc/passwd").status.code(), C::kInvalidArgument);
  EXPECT_EQ(Allocated(s1, 0, -1).status.code(), C::kInvalidArgument);
  EXPECT_EQ(Delta("", s2).status.code(), C::kInvalidArgument);
  EXPECT_EQ(Delta(s1, "").status.code(), C::kInvalidArgument);
  EXPECT_EQ(Delta(s1, "a/b").status.code(), C::kInvalidArgument);
  EXPECT_EQ(Delta(s1, s2, 0, -5).status.code(), C::kInvalidArgument);
  Streamed mixed = Delta(s1, o1);
  EXPECT_EQ(mixed.status.code(), C::kInvalidArgument);
  EXPECT_THAT(mixed.status.message(), ::testing::HasSubstr("two snapshots of one volume"));
  // Snapshots that are not here (berth's shape or another driver's).
  EXPECT_EQ(Allocated(unknown).status.code(), C::kNotFound);
  EXPECT_EQ(Allocated("pvc-snapshot-of-someone-else").status.code(), C::kNotFound);
  EXPECT_EQ(Delta(unknown, s2).status.code(), C::kNotFound);
  EXPECT_EQ(Delta(s1, unknown).status.code(), C::kNotFound);
  EXPECT_EQ(Delta(s1, vol).status.code(), C::kNotFound) << "a volume ID is no snapshot";
  // Offsets: negative, or beyond the capacity (the capacity itself is the end).
  EXPECT_EQ(Allocated(s1, -1).status.code(), C::kOutOfRange);
  EXPECT_EQ(Allocated(s1, 64 * kMiB + 1).status.code(), C::kOutOfRange);
  EXPECT_EQ(Delta(s1, s2, -4096).status.code(), C::kOutOfRange);
  EXPECT_EQ(Delta(s1, s2, 64 * kMiB + 4096).status.code(), C::kOutOfRange);
  EXPECT_TRUE(Delta(s1, s2, 64 * kMiB).status.ok());
  // A deleted snapshot is gone.
  ::csi::v1::DeleteSnapshotRequest del;
  del.set_snapshot_id(s2);
  ASSERT_TRUE(driver_->controller().DoDeleteSnapshot(del).ok());
  EXPECT_EQ(Allocated(s2).status.code(), C::kNotFound);
  EXPECT_EQ(Delta(s1, s2).status.code(), C::kNotFound);
}

TEST_F(SnapshotMetadataTest, SecretsAreNotNeededAndIgnored) {
  const std::string vol = CreateVolume("pvc-1", 64 * kMiB, /*block=*/true);
  const std::string s1 = Snapshot("s1", vol);
  GetMetadataAllocatedRequest req;
  req.set_snapshot_id(s1);
  (*req.mutable_secrets())["token"] = "anything";
  int messages = 0;
  EXPECT_TRUE(driver_->snapshot_metadata()
                  .DoGetAllocated(req, [&](const GetMetadataAllocatedResponse&) { return ++messages > 0; })
                  .ok());
  EXPECT_EQ(messages, 1);
}

TEST_F(SnapshotMetadataTest, AClosedStreamStopsWithCancelled) {
  const std::string vol = CreateVolume("pvc-1", 64 * kMiB, /*block=*/true);
  for (int i = 0; i < 8; ++i) WriteAt(Image(vol), i * 2 * kMiB, 4 * kKiB, 'a');
  const std::string s1 = Snapshot("s1", vol);
  GetMetadataAllocatedRequest req;
  req.set_snapshot_id(s1);
  req.set_max_results(1);
  int messages = 0;
  absl::Status st = driver_->snapshot_metadata().DoGetAllocated(
      req, [&](const GetMetadataAllocatedResponse&) { return ++messages < 3; });
  EXPECT_EQ(st.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(messages, 3) << "nothing sent after the stream failed";
}

TEST_F(SnapshotMetadataTest, AdvertisedAndStreamedOverTheDriversSocket) {
  const std::string vol = CreateVolume("pvc-1", 64 * kMiB, /*block=*/true);
  for (int i = 0; i < 5; ++i) WriteAt(Image(vol), i * 8 * kMiB, 64 * kKiB, 'a');
  const std::string s1 = Snapshot("s1", vol);
  const std::string socket = dir_.Join("csi.sock");
  auto server = csi::CsiServer::Start({.endpoint = "unix://" + socket}, driver_->services());
  ASSERT_TRUE(server.ok()) << server.status();
  auto channel = csi::ConnectUnix("unix://" + socket, {.timeout = absl::Seconds(30)});
  ASSERT_TRUE(channel.ok()) << channel.status();
  {
    grpc::ClientContext ctx;
    ::csi::v1::GetPluginCapabilitiesResponse caps;
    ASSERT_TRUE(::csi::v1::Identity::NewStub(*channel)->GetPluginCapabilities(&ctx, {}, &caps).ok());
    std::vector<int> services;
    for (const auto& c : caps.capabilities()) {
      if (c.has_service()) services.push_back(c.service().type());
    }
    EXPECT_THAT(services, ::testing::Contains(::csi::v1::PluginCapability::Service::SNAPSHOT_METADATA_SERVICE));
  }
  auto stub = ::csi::v1::SnapshotMetadata::NewStub(*channel);
  {
    grpc::ClientContext ctx;
    GetMetadataAllocatedRequest req;
    req.set_snapshot_id(s1);
    req.set_max_results(2);
    auto reader = stub->GetMetadataAllocated(&ctx, req);
    GetMetadataAllocatedResponse msg;
    std::vector<int> sizes;
    int64_t tuples = 0;
    while (reader->Read(&msg)) {
      sizes.push_back(msg.block_metadata_size());
      tuples += msg.block_metadata_size();
    }
    grpc::Status st = reader->Finish();
    EXPECT_TRUE(st.ok()) << st.error_message();
    EXPECT_THAT(sizes, ElementsAre(2, 2, 1));
    EXPECT_EQ(tuples, 5);
  }
  {
    grpc::ClientContext ctx;
    GetMetadataDeltaRequest req;
    req.set_base_snapshot_id(s1);
    req.set_target_snapshot_id(IdForName(IdKind::kSnapshot, "nope"));
    auto reader = stub->GetMetadataDelta(&ctx, req);
    GetMetadataDeltaResponse msg;
    EXPECT_FALSE(reader->Read(&msg));
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::NOT_FOUND);
  }
  (*server)->Shutdown(absl::Seconds(5));
}

// ---- As root: a real XFS pool image, real loop devices and filesystems ----

class SnapshotMetadataRootTest : public SnapshotMetadataTestBase {
 protected:
  void SetUp() override {
    BERTH_REQUIRE_ROOT();
    DriverOptions o;
    o.endpoint = "unix:///unused.sock";
    o.node_id = "node-a";
    o.pool = sandbox_.Join("pool");
    o.pool_image = sandbox_.Join("pool.img");
    o.pool_size_bytes = 2048 * kMiB;
    o.kubelet_root = sandbox_.Join("kubelet");
    auto d = Driver::Open(o, {&loops_, &mounter_, &formatter_, &freezer_});
    ASSERT_TRUE(d.ok()) << d.status();
    driver_ = std::move(*d);
    ASSERT_TRUE(driver_->pool().reflink()) << "the pool image is XFS with reflink";
    kubelet_ = fs::canonical(sandbox_.Join("kubelet")).string();
  }
  void TearDown() override {
    // Unstage what was staged, so the sandbox finds nothing of ours left.
    if (driver_ == nullptr) return;
    for (const auto& v : driver_->pool().ListVolumes()) {
      if (v.staging_path.empty()) continue;
      ::csi::v1::NodeUnstageVolumeRequest req;
      req.set_volume_id(v.id);
      req.set_staging_target_path(v.staging_path);
      EXPECT_TRUE(driver_->node().DoUnstage(req).ok());
    }
    driver_.reset();
  }

  std::string Stage(const std::string& vol, bool block) {
    const std::string staging = kubelet_ + "/staging/" + vol;
    fs::create_directories(staging);
    ::csi::v1::NodeStageVolumeRequest req;
    req.set_volume_id(vol);
    req.set_staging_target_path(staging);
    *req.mutable_volume_capability() = Cap(block);
    absl::Status st = driver_->node().DoStage(req);
    EXPECT_TRUE(st.ok()) << st;
    return staging;
  }

  berth::testing::MountSandbox sandbox_;
  LinuxCommandRunner runner_;
  LinuxLoopDevices loops_;
  LinuxMounter mounter_;
  LinuxFormatter formatter_{runner_};
  LinuxFreezer freezer_;
  std::string kubelet_;
};

// The acceptance scenario on a block volume, written through its
// loop device as a workload would.
TEST_F(SnapshotMetadataRootTest, BlockVolumeDeltaIsExactlyTheRewrittenAndNewBlocks) {
  const std::string vol = CreateVolume("pvc-block", 64 * kMiB, /*block=*/true);
  Stage(vol, /*block=*/true);
  const std::string dev = driver_->pool().GetVolume(vol)->block_device;
  ASSERT_FALSE(dev.empty());
  // 8 MiB at three offsets.
  WriteAt(dev, 0, 2 * kMiB, 'a');
  WriteAt(dev, 20 * kMiB, 4 * kMiB, 'b');
  WriteAt(dev, 40 * kMiB, 2 * kMiB, 'c');
  const std::string s1 = Snapshot("s1", vol);
  // 1 MiB rewritten at one of them, 1 MiB at a new offset.
  WriteAt(dev, 21 * kMiB, kMiB, 'x');
  WriteAt(dev, 50 * kMiB, kMiB, 'n');
  const std::string s2 = Snapshot("s2", vol);

  Streamed a = Allocated(s1);
  ASSERT_TRUE(a.status.ok()) << a.status;
  EXPECT_EQ(a.capacity, 64 * kMiB);
  for (auto [o, e] : {std::pair{0 * kMiB, 2 * kMiB}, {20 * kMiB, 24 * kMiB}, {40 * kMiB, 42 * kMiB}}) {
    EXPECT_TRUE(Covers(a.ranges, o, e)) << o;
  }
  EXPECT_LE(Total(a.ranges), 8 * kMiB + 256 * kKiB) << "the 8 MiB written and little more";

  Streamed d = Delta(s1, s2);
  ASSERT_TRUE(d.status.ok()) << d.status;
  EXPECT_EQ(d.type, BlockMetadataType::VARIABLE_LENGTH);
  EXPECT_EQ(d.ranges, (RangeSet{{21 * kMiB, 22 * kMiB}, {50 * kMiB, 51 * kMiB}}));

  // Paged one tuple per message, and resumed in the middle of the first range.
  Streamed paged = Delta(s1, s2, 0, 1);
  ASSERT_TRUE(paged.status.ok()) << paged.status;
  EXPECT_EQ(paged.ranges, d.ranges);
  Streamed resumed = Delta(s1, s2, 21 * kMiB + 512 * kKiB, 1);
  ASSERT_TRUE(resumed.status.ok()) << resumed.status;
  EXPECT_EQ(resumed.ranges, (RangeSet{{21 * kMiB + 512 * kKiB, 22 * kMiB}, {50 * kMiB, 51 * kMiB}}));
}

// The FIEMAP extents of `path` (a file on a mounted filesystem): where its
// bytes live on the filesystem's device, i.e. in the volume's image.
RangeSet PhysicalRanges(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  EXPECT_TRUE(fd.ok());
  std::vector<char> buf(sizeof(fiemap) + 64 * sizeof(fiemap_extent));
  auto* map = reinterpret_cast<fiemap*>(buf.data());
  map->fm_length = FIEMAP_MAX_OFFSET;
  map->fm_flags = FIEMAP_FLAG_SYNC;
  map->fm_extent_count = 64;
  EXPECT_EQ(::ioctl(fd.get(), FS_IOC_FIEMAP, map), 0) << std::strerror(errno);
  RangeSet out;
  for (uint32_t i = 0; i < map->fm_mapped_extents; ++i) {
    const auto& e = map->fm_extents[i];
    Add(out, static_cast<int64_t>(e.fe_physical), static_cast<int64_t>(e.fe_physical + e.fe_length));
  }
  return out;
}

TEST_F(SnapshotMetadataRootTest, FilesystemVolumeDeltaHoldsTheFilesChangedBlocksAndIsSmall) {
  const std::string vol = CreateVolume("pvc-fs", 64 * kMiB, /*block=*/false);
  const std::string staging = Stage(vol, /*block=*/false);
  const std::string file = staging + "/data";
  {
    Fd fd(::open(file.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
    ASSERT_TRUE(fd.ok());
  }
  WriteAt(file, 0, 8 * kMiB, 'a');
  const std::string s1 = Snapshot("s1", vol);  // frozen around the clone
  WriteAt(file, 3 * kMiB, kMiB, 'x');
  const std::string s2 = Snapshot("s2", vol);

  // Where the rewritten MiB of the file lies in the image (ext4 rewrites in
  // place, so the file's map is the same before and after).
  RangeSet file_map = PhysicalRanges(file);
  ASSERT_EQ(Total(file_map), 8 * kMiB);
  RangeSet changed;
  int64_t logical = 0;
  for (const auto& [o, e] : file_map) {
    const int64_t lo = std::max<int64_t>(3 * kMiB, logical);
    const int64_t hi = std::min<int64_t>(4 * kMiB, logical + (e - o));
    if (lo < hi) Add(changed, o + (lo - logical), o + (hi - logical));
    logical += e - o;
  }
  ASSERT_EQ(Total(changed), kMiB);

  Streamed a = Allocated(s2);
  ASSERT_TRUE(a.status.ok()) << a.status;
  for (const auto& [o, e] : file_map) EXPECT_TRUE(Covers(a.ranges, o, e)) << "file data at " << o;

  Streamed d = Delta(s1, s2);
  ASSERT_TRUE(d.status.ok()) << d.status;
  for (const auto& [o, e] : changed) EXPECT_TRUE(Covers(d.ranges, o, e)) << "changed file data at " << o;
  // The MiB plus the filesystem's own writes (journal, inode, bitmaps).
  RecordProperty("delta_bytes", std::to_string(Total(d.ranges)));
  RecordProperty("allocated_bytes", std::to_string(Total(a.ranges)));
  EXPECT_LE(Total(d.ranges), 3 * kMiB) << "delta of " << Total(d.ranges) << " bytes";
  EXPECT_LT(Total(d.ranges), Total(a.ranges) / 4);
}

}  // namespace
}  // namespace berth::driver
