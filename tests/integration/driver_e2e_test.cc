// berth-csi end to end, as root, on a real XFS pool image with real loop
// devices, filesystems and mounts: the volume life cycle through snapshots,
// restores, online expansion, block volumes and a driver restart.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "common/hash.h"
#include "driver_process.h"
#include "gmock/gmock.h"

namespace berth::testing {
namespace {

namespace fs = std::filesystem;
using ::csi::v1::VolumeCapability;

VolumeCapability MountCap(const std::string& fs_type = "") { return MountCapability(fs_type); }
VolumeCapability BlockCap() { return BlockCapability(); }

std::string RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::string s(n, '\0');
  for (size_t i = 0; i + 8 <= n; i += 8) {
    uint64_t v = gen();
    std::memcpy(&s[i], &v, 8);
  }
  return s;
}

void WriteFileSynced(const std::string& path, const std::string& data, int flags = O_CREAT | O_TRUNC) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | flags, 0644);
  ASSERT_GE(fd, 0) << path << ": " << std::strerror(errno);
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    ASSERT_GT(n, 0) << std::strerror(errno);
    off += static_cast<size_t>(n);
  }
  ASSERT_EQ(::fsync(fd), 0);
  ::close(fd);
}

std::string ReadPrefix(const std::string& path, size_t n) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string s(n, '\0');
  size_t off = 0;
  while (off < n) {
    ssize_t r = ::read(fd, &s[off], n - off);
    if (r <= 0) break;
    off += static_cast<size_t>(r);
  }
  ::close(fd);
  s.resize(off);
  return s;
}

class DriverE2ETest : public DriverProcessTest {
 protected:
  std::string Staging(const std::string& vol) { return driver_->kubelet() + "/staging/" + vol; }
  std::string Target(const std::string& pod, const std::string& vol) {
    return driver_->kubelet() + "/pods/" + pod + "/" + vol + "/mount";
  }

  std::string Create(const std::string& name, int64_t size, const VolumeCapability& cap,
                     const std::string& from_snapshot = "", const std::string& from_volume = "") {
    ::csi::v1::CreateVolumeRequest req;
    req.set_name(name);
    req.mutable_capacity_range()->set_required_bytes(size);
    *req.add_volume_capabilities() = cap;
    if (!from_snapshot.empty()) {
      req.mutable_volume_content_source()->mutable_snapshot()->set_snapshot_id(from_snapshot);
    }
    if (!from_volume.empty()) {
      req.mutable_volume_content_source()->mutable_volume()->set_volume_id(from_volume);
    }
    ::csi::v1::CreateVolumeResponse resp;
    grpc::Status st = driver_->controller().CreateVolume(Ctx().get(), req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp.volume().volume_id();
  }

  void Stage(const std::string& vol, const VolumeCapability& cap) {
    fs::create_directories(Staging(vol));
    ::csi::v1::NodeStageVolumeRequest req;
    req.set_volume_id(vol);
    req.set_staging_target_path(Staging(vol));
    *req.mutable_volume_capability() = cap;
    ::csi::v1::NodeStageVolumeResponse resp;
    grpc::Status st = driver_->node().NodeStageVolume(Ctx().get(), req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }

  void Publish(const std::string& vol, const std::string& target, const VolumeCapability& cap, bool readonly = false) {
    fs::create_directories(fs::path(target).parent_path());
    ::csi::v1::NodePublishVolumeRequest req;
    req.set_volume_id(vol);
    req.set_staging_target_path(Staging(vol));
    req.set_target_path(target);
    req.set_readonly(readonly);
    *req.mutable_volume_capability() = cap;
    ::csi::v1::NodePublishVolumeResponse resp;
    grpc::Status st = driver_->node().NodePublishVolume(Ctx().get(), req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }

  void Unpublish(const std::string& vol, const std::string& target) {
    ::csi::v1::NodeUnpublishVolumeRequest req;
    req.set_volume_id(vol);
    req.set_target_path(target);
    ::csi::v1::NodeUnpublishVolumeResponse resp;
    grpc::Status st = driver_->node().NodeUnpublishVolume(Ctx().get(), req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_FALSE(fs::exists(target));
  }

  void Unstage(const std::string& vol) {
    ::csi::v1::NodeUnstageVolumeRequest req;
    req.set_volume_id(vol);
    req.set_staging_target_path(Staging(vol));
    ::csi::v1::NodeUnstageVolumeResponse resp;
    grpc::Status st = driver_->node().NodeUnstageVolume(Ctx().get(), req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }

  grpc::Status Delete(const std::string& vol) {
    ::csi::v1::DeleteVolumeRequest req;
    req.set_volume_id(vol);
    ::csi::v1::DeleteVolumeResponse resp;
    return driver_->controller().DeleteVolume(Ctx().get(), req, &resp);
  }

  std::string Snapshot(const std::string& name, const std::string& vol) {
    ::csi::v1::CreateSnapshotRequest req;
    req.set_name(name);
    req.set_source_volume_id(vol);
    ::csi::v1::CreateSnapshotResponse resp;
    grpc::Status st = driver_->controller().CreateSnapshot(Ctx().get(), req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    EXPECT_TRUE(resp.snapshot().ready_to_use());
    return resp.snapshot().snapshot_id();
  }
};

TEST_F(DriverE2ETest, SnapshotDeleteRestoreKeepsData) {
  const auto cap = MountCap();
  const std::string vol = Create("pvc-data", 1 << 30, cap);
  ASSERT_FALSE(vol.empty());
  Stage(vol, cap);
  const std::string target = Target("pod1", vol);
  Publish(vol, target, cap);

  const std::string data = RandomBytes(50 << 20, 42);
  WriteFileSynced(target + "/data.bin", data);
  const std::string want = Sha256Hex(data);

  const std::string snap = Snapshot("snap-data", vol);
  ASSERT_FALSE(snap.empty());
  // The source was frozen and thawed: still writable.
  WriteFileSynced(target + "/after-snapshot.txt", "later");

  Unpublish(vol, target);
  Unstage(vol);
  ASSERT_TRUE(Delete(vol).ok());
  EXPECT_FALSE(fs::exists(driver_->pool() + "/volumes/" + vol + ".img"));

  const std::string restored = Create("pvc-restored", 2LL << 30, cap, snap);
  ASSERT_FALSE(restored.empty());
  Stage(restored, cap);
  const std::string target2 = Target("pod2", restored);
  Publish(restored, target2, cap);
  EXPECT_EQ(Sha256Hex(ReadPrefix(target2 + "/data.bin", 60 << 20)), want);
  EXPECT_FALSE(fs::exists(target2 + "/after-snapshot.txt"));
  // Restored into a larger volume: the filesystem was grown at stage time.
  struct statvfs vfs {};
  ASSERT_EQ(::statvfs(target2.c_str(), &vfs), 0);
  EXPECT_GT(static_cast<int64_t>(vfs.f_blocks) * static_cast<int64_t>(vfs.f_frsize), 3LL << 29);

  Unpublish(restored, target2);
  Unstage(restored);
  EXPECT_TRUE(Delete(restored).ok());
  ::csi::v1::DeleteSnapshotRequest dreq;
  dreq.set_snapshot_id(snap);
  ::csi::v1::DeleteSnapshotResponse dresp;
  EXPECT_TRUE(driver_->controller().DeleteSnapshot(Ctx().get(), dreq, &dresp).ok());
  EXPECT_TRUE(sandbox_.Loops().size() == 1) << "only the pool image stays attached";
}

// Whether this process may grow a mounted ext4 filesystem (the ioctl needs
// CAP_SYS_RESOURCE, which some sandboxes drop even for root).
bool HasCapSysResource() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("CapEff:", 0) == 0) {
      const uint64_t caps = std::stoull(line.substr(7), nullptr, 16);
      return (caps >> 24) & 1;  // CAP_SYS_RESOURCE
    }
  }
  return false;
}

class OnlineExpansionTest : public DriverE2ETest, public ::testing::WithParamInterface<std::string> {};

TEST_P(OnlineExpansionTest, GrowsMountedFilesystem) {
  const auto cap = MountCap(GetParam());
  const std::string vol = Create("pvc-grow-" + GetParam(), 512 << 20, cap);
  Stage(vol, cap);
  const std::string target = Target("pod1", vol);
  Publish(vol, target, cap);
  WriteFileSynced(target + "/keep.txt", "still here");
  struct statvfs before {};
  ASSERT_EQ(::statvfs(target.c_str(), &before), 0);

  ::csi::v1::ControllerExpandVolumeRequest creq;
  creq.set_volume_id(vol);
  creq.mutable_capacity_range()->set_required_bytes(2LL << 30);
  ::csi::v1::ControllerExpandVolumeResponse cresp;
  grpc::Status st = driver_->controller().ControllerExpandVolume(Ctx().get(), creq, &cresp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(cresp.capacity_bytes(), 2LL << 30);
  EXPECT_TRUE(cresp.node_expansion_required());

  ::csi::v1::NodeExpandVolumeRequest nreq;
  nreq.set_volume_id(vol);
  nreq.set_volume_path(target);
  nreq.mutable_capacity_range()->set_required_bytes(2LL << 30);
  ::csi::v1::NodeExpandVolumeResponse nresp;
  st = driver_->node().NodeExpandVolume(Ctx().get(), nreq, &nresp);
  if (GetParam() == "ext4" && !HasCapSysResource()) {
    // This machine cannot grow a mounted ext4: the error says why, and the
    // filesystem is grown offline at the next stage instead.
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.error_message().find("CAP_SYS_RESOURCE"), std::string::npos) << st.error_message();
    Unpublish(vol, target);
    Unstage(vol);
    Stage(vol, cap);
    Publish(vol, target, cap);
  } else {
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(nresp.capacity_bytes(), 2LL << 30);
  }

  struct statvfs after {};
  ASSERT_EQ(::statvfs(target.c_str(), &after), 0);
  const double grown =
      static_cast<double>(after.f_blocks) * after.f_frsize / (static_cast<double>(before.f_blocks) * before.f_frsize);
  EXPECT_GT(grown, 3.0);
  EXPECT_EQ(ReadPrefix(target + "/keep.txt", 100), "still here");

  // Stats follow the new size.
  ::csi::v1::NodeGetVolumeStatsRequest sreq;
  sreq.set_volume_id(vol);
  sreq.set_volume_path(target);
  ::csi::v1::NodeGetVolumeStatsResponse sresp;
  ASSERT_TRUE(driver_->node().NodeGetVolumeStats(Ctx().get(), sreq, &sresp).ok());
  ASSERT_GE(sresp.usage_size(), 2);
  EXPECT_GT(sresp.usage(0).total(), 3LL << 29);
  EXPECT_FALSE(sresp.volume_condition().abnormal());

  Unpublish(vol, target);
  Unstage(vol);
  EXPECT_TRUE(Delete(vol).ok());
}

INSTANTIATE_TEST_SUITE_P(Filesystems, OnlineExpansionTest, ::testing::Values("ext4", "xfs"));

TEST_F(DriverE2ETest, BlockVolumeRoundTrip) {
  const auto cap = BlockCap();
  const std::string vol = Create("pvc-block", 64 << 20, cap);
  Stage(vol, cap);
  const std::string target = driver_->kubelet() + "/pods/pod1/volumeDevices/" + vol;
  Publish(vol, target, cap);
  struct stat st {};
  ASSERT_EQ(::stat(target.c_str(), &st), 0);
  EXPECT_TRUE(S_ISBLK(st.st_mode));
  const std::string data = RandomBytes(4 << 20, 7);
  WriteFileSynced(target, data, 0);

  const std::string snap = Snapshot("snap-block", vol);
  const std::string copy = Create("pvc-block-copy", 64 << 20, cap, snap);
  Stage(copy, cap);
  const std::string target2 = driver_->kubelet() + "/pods/pod2/volumeDevices/" + copy;
  Publish(copy, target2, cap);
  EXPECT_EQ(Sha256Hex(ReadPrefix(target2, 4 << 20)), Sha256Hex(data));

  for (const auto& [v, t] : {std::pair{vol, target}, std::pair{copy, target2}}) {
    Unpublish(v, t);
    Unstage(v);
    EXPECT_TRUE(Delete(v).ok());
  }
  EXPECT_EQ(sandbox_.Loops().size(), 1u);
}

TEST_F(DriverE2ETest, RestartKeepsEverything) {
  const auto cap = MountCap("xfs");
  const std::string vol = Create("pvc-restart", 512 << 20, cap);
  Stage(vol, cap);
  const std::string target = Target("pod1", vol);
  Publish(vol, target, cap);
  WriteFileSynced(target + "/a.txt", "before restart");
  const std::string snap = Snapshot("snap-restart", vol);

  ASSERT_EQ(driver_->Stop(), 0);
  ASSERT_TRUE(driver_->Start());

  // Still mounted and readable; the driver knows all of it.
  EXPECT_EQ(ReadPrefix(target + "/a.txt", 100), "before restart");
  ::csi::v1::ListVolumesResponse list;
  ASSERT_TRUE(driver_->controller().ListVolumes(Ctx().get(), {}, &list).ok());
  ASSERT_EQ(list.entries_size(), 1);
  EXPECT_EQ(list.entries(0).volume().volume_id(), vol);
  ::csi::v1::ListSnapshotsResponse snaps;
  ASSERT_TRUE(driver_->controller().ListSnapshots(Ctx().get(), {}, &snaps).ok());
  ASSERT_EQ(snaps.entries_size(), 1);
  EXPECT_EQ(snaps.entries(0).snapshot().snapshot_id(), snap);
  // Idempotent calls after the restart agree with the state.
  Stage(vol, cap);
  Publish(vol, target, cap);
  // A staged volume cannot be deleted.
  EXPECT_EQ(Delete(vol).error_code(), grpc::StatusCode::FAILED_PRECONDITION);

  Unpublish(vol, target);
  Unstage(vol);
  EXPECT_TRUE(Delete(vol).ok());
}

TEST_F(DriverE2ETest, NeverReformatsAVolumeWithData) {
  const auto cap = MountCap("ext4");
  const std::string vol = Create("pvc-keep", 256 << 20, cap);
  Stage(vol, cap);
  const std::string target = Target("pod1", vol);
  Publish(vol, target, cap);
  WriteFileSynced(target + "/precious", "data");
  Unpublish(vol, target);
  Unstage(vol);
  // Stage again, asking for another filesystem: refused, data intact.
  fs::create_directories(Staging(vol));
  ::csi::v1::NodeStageVolumeRequest req;
  req.set_volume_id(vol);
  req.set_staging_target_path(Staging(vol));
  *req.mutable_volume_capability() = MountCap("xfs");
  ::csi::v1::NodeStageVolumeResponse resp;
  EXPECT_FALSE(driver_->node().NodeStageVolume(Ctx().get(), req, &resp).ok());
  Stage(vol, cap);
  Publish(vol, target, cap);
  EXPECT_EQ(ReadPrefix(target + "/precious", 10), "data");
  Unpublish(vol, target);
  Unstage(vol);
  EXPECT_TRUE(Delete(vol).ok());
}

TEST_F(DriverE2ETest, RefusesPathsOutsideKubeletRootAndThroughSymlinks) {
  const auto cap = MountCap();
  const std::string vol = Create("pvc-paths", 64 << 20, cap);
  ::csi::v1::NodeStageVolumeRequest req;
  req.set_volume_id(vol);
  *req.mutable_volume_capability() = cap;
  ::csi::v1::NodeStageVolumeResponse resp;
  for (const std::string& bad : {sandbox_.Join("outside"), driver_->kubelet() + "/../escape",
                                 driver_->kubelet() + "/evil/x", std::string("relative/path")}) {
    if (bad.ends_with("/evil/x")) fs::create_directory_symlink("/etc", driver_->kubelet() + "/evil");
    req.set_staging_target_path(bad);
    EXPECT_EQ(driver_->node().NodeStageVolume(Ctx().get(), req, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << bad;
  }
  // A non-empty directory that is not ours is never mounted over.
  const std::string busy = driver_->kubelet() + "/busy";
  fs::create_directories(busy);
  WriteFileSynced(busy + "/file", "x");
  req.set_staging_target_path(busy);
  EXPECT_EQ(driver_->node().NodeStageVolume(Ctx().get(), req, &resp).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_TRUE(sandbox_.Mounts().size() == 1) << "only the pool is mounted";
  EXPECT_TRUE(Delete(vol).ok());
}

TEST_F(DriverE2ETest, GroupSnapshotOfMountedVolumes) {
  const auto cap = MountCap();
  std::vector<std::string> vols;
  for (const char* n : {"pvc-g1", "pvc-g2"}) {
    vols.push_back(Create(n, 128 << 20, cap));
    Stage(vols.back(), cap);
    Publish(vols.back(), Target("pod", vols.back()), cap);
    WriteFileSynced(Target("pod", vols.back()) + "/f", n);
  }
  ::csi::v1::CreateVolumeGroupSnapshotRequest greq;
  greq.set_name("group-1");
  for (const auto& v : vols) greq.add_source_volume_ids(v);
  ::csi::v1::CreateVolumeGroupSnapshotResponse gresp;
  grpc::Status st = driver_->group().CreateVolumeGroupSnapshot(Ctx().get(), greq, &gresp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  ASSERT_EQ(gresp.group_snapshot().snapshots_size(), 2);
  for (const auto& s : gresp.group_snapshot().snapshots()) {
    EXPECT_EQ(s.group_snapshot_id(), gresp.group_snapshot().group_snapshot_id());
  }
  // Still writable after the group freeze.
  WriteFileSynced(Target("pod", vols[0]) + "/g", "after");
  // A member cannot be deleted alone; the group deletes them all.
  ::csi::v1::DeleteSnapshotRequest dsreq;
  dsreq.set_snapshot_id(gresp.group_snapshot().snapshots(0).snapshot_id());
  ::csi::v1::DeleteSnapshotResponse dsresp;
  EXPECT_EQ(driver_->controller().DeleteSnapshot(Ctx().get(), dsreq, &dsresp).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  ::csi::v1::DeleteVolumeGroupSnapshotRequest dreq;
  dreq.set_group_snapshot_id(gresp.group_snapshot().group_snapshot_id());
  for (const auto& s : gresp.group_snapshot().snapshots()) dreq.add_snapshot_ids(s.snapshot_id());
  ::csi::v1::DeleteVolumeGroupSnapshotResponse dresp;
  EXPECT_TRUE(driver_->group().DeleteVolumeGroupSnapshot(Ctx().get(), dreq, &dresp).ok());
  ::csi::v1::ListSnapshotsResponse snaps;
  ASSERT_TRUE(driver_->controller().ListSnapshots(Ctx().get(), {}, &snaps).ok());
  EXPECT_EQ(snaps.entries_size(), 0);
  for (const auto& v : vols) {
    Unpublish(v, Target("pod", v));
    Unstage(v);
    EXPECT_TRUE(Delete(v).ok());
  }
}

}  // namespace
}  // namespace berth::testing
