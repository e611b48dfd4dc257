// The services' decisions over fake kernel interfaces (no root needed).
#include <filesystem>
#include <thread>

#include "absl/synchronization/notification.h"
#include "common/testing/temp_dir.h"
#include "driver/driver.h"
#include "driver/testing/fakes.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace berth::driver {
namespace {

namespace fs = std::filesystem;
using ::csi::v1::VolumeCapability;

class ServicesTest : public ::testing::Test {
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
    kubelet_ = fs::canonical(dir_.Join("kubelet")).string();
  }

  VolumeCapability Cap(const std::string& fs_type = "ext4") {
    VolumeCapability c;
    c.mutable_mount()->set_fs_type(fs_type);
    c.mutable_access_mode()->set_mode(VolumeCapability::AccessMode::SINGLE_NODE_WRITER);
    return c;
  }
  std::string Create(const std::string& name) {
    ::csi::v1::CreateVolumeRequest req;
    req.set_name(name);
    req.mutable_capacity_range()->set_required_bytes(32 << 20);
    *req.add_volume_capabilities() = Cap();
    ::csi::v1::CreateVolumeResponse resp;
    EXPECT_TRUE(driver_->controller().DoCreateVolume(req, &resp).ok());
    return resp.volume().volume_id();
  }
  ::csi::v1::NodeStageVolumeRequest StageReq(const std::string& vol, const std::string& fs_type = "ext4") {
    ::csi::v1::NodeStageVolumeRequest req;
    req.set_volume_id(vol);
    req.set_staging_target_path(kubelet_ + "/staging/" + vol);
    *req.mutable_volume_capability() = Cap(fs_type);
    return req;
  }

  berth::testing::TempDir dir_;
  testing::FakeLoopDevices loops_;
  testing::FakeMounter mounter_;
  testing::FakeFormatter formatter_{loops_};
  testing::FakeFreezer freezer_;
  std::unique_ptr<Driver> driver_;
  std::string kubelet_;
};

TEST_F(ServicesTest, FormatsBlankVolumeOnceAndNeverAgain) {
  const std::string vol = Create("pvc-1");
  ASSERT_TRUE(driver_->node().DoStage(StageReq(vol)).ok());
  EXPECT_EQ(formatter_.mkfs_calls, 1);
  ASSERT_TRUE(driver_->node().DoStage(StageReq(vol)).ok()) << "idempotent";
  ::csi::v1::NodeUnstageVolumeRequest un;
  un.set_volume_id(vol);
  un.set_staging_target_path(StageReq(vol).staging_target_path());
  ASSERT_TRUE(driver_->node().DoUnstage(un).ok());
  ASSERT_TRUE(driver_->node().DoStage(StageReq(vol)).ok());
  EXPECT_EQ(formatter_.mkfs_calls, 1);
  EXPECT_TRUE(driver_->pool().GetVolume(vol)->formatted);
}

TEST_F(ServicesTest, ForeignDataIsNeverFormattedOrMounted) {
  const std::string vol = Create("pvc-foreign");
  // Something else is on the device (say an LVM label written by hand).
  formatter_.SetFilesystem(driver_->pool().VolumeImagePath(vol), "LVM2_member");
  absl::Status st = driver_->node().DoStage(StageReq(vol));
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), ::testing::HasSubstr("refusing to format"));
  EXPECT_EQ(formatter_.mkfs_calls, 0);
  EXPECT_TRUE(mounter_.List()->empty());
}

TEST_F(ServicesTest, InterruptedFormatIsRedone) {
  const std::string vol = Create("pvc-half");
  auto r = *driver_->pool().GetVolume(vol);
  r.formatting = true;  // mkfs was running when the driver died
  ASSERT_TRUE(driver_->pool().UpdateVolume(r).ok());
  formatter_.SetFilesystem(driver_->pool().VolumeImagePath(vol), "ext4");  // half-written
  ASSERT_TRUE(driver_->node().DoStage(StageReq(vol)).ok());
  EXPECT_EQ(formatter_.mkfs_calls, 1);
  EXPECT_FALSE(driver_->pool().GetVolume(vol)->formatting);
}

TEST_F(ServicesTest, ConcurrentOperationOnTheSameVolumeIsAborted) {
  const std::string vol = Create("pvc-busy");
  const std::string other = Create("pvc-other");
  absl::Notification in_mkfs, release;
  formatter_.on_mkfs = [&] {
    if (!in_mkfs.HasBeenNotified()) {
      in_mkfs.Notify();
      release.WaitForNotification();
    }
  };
  absl::Status first;
  std::thread t([&] { first = driver_->node().DoStage(StageReq(vol)); });
  in_mkfs.WaitForNotification();
  EXPECT_EQ(driver_->node().DoStage(StageReq(vol)).code(), absl::StatusCode::kAborted);
  ::csi::v1::DeleteVolumeRequest del;
  del.set_volume_id(vol);
  EXPECT_EQ(driver_->controller().DoDeleteVolume(del).code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(driver_->node().DoStage(StageReq(other)).ok()) << "other volumes proceed";
  release.Notify();
  t.join();
  EXPECT_TRUE(first.ok()) << first;
}

TEST_F(ServicesTest, SnapshotOfAStagedVolumeFreezesAndThaws) {
  const std::string vol = Create("pvc-snap");
  ASSERT_TRUE(driver_->node().DoStage(StageReq(vol)).ok());
  ::csi::v1::CreateSnapshotRequest req;
  req.set_name("snap-1");
  req.set_source_volume_id(vol);
  ::csi::v1::CreateSnapshotResponse resp;
  ASSERT_TRUE(driver_->controller().DoCreateSnapshot(req, &resp).ok());
  const std::string staging = StageReq(vol).staging_target_path();
  EXPECT_THAT(freezer_.calls, ::testing::ElementsAre("freeze " + staging, "thaw " + staging));
  // An unstaged volume is not frozen.
  freezer_.calls.clear();
  const std::string idle = Create("pvc-idle");
  req.set_name("snap-2");
  req.set_source_volume_id(idle);
  ASSERT_TRUE(driver_->controller().DoCreateSnapshot(req, &resp).ok());
  EXPECT_TRUE(freezer_.calls.empty());
}

TEST_F(ServicesTest, RestoreIsGrownAndKeepsFormat) {
  const std::string vol = Create("pvc-src");
  ASSERT_TRUE(driver_->node().DoStage(StageReq(vol)).ok());
  ::csi::v1::CreateSnapshotRequest sreq;
  sreq.set_name("snap-src");
  sreq.set_source_volume_id(vol);
  ::csi::v1::CreateSnapshotResponse sresp;
  ASSERT_TRUE(driver_->controller().DoCreateSnapshot(sreq, &sresp).ok());
  ::csi::v1::CreateVolumeRequest creq;
  creq.set_name("pvc-restored");
  creq.mutable_capacity_range()->set_required_bytes(64 << 20);
  *creq.add_volume_capabilities() = Cap();
  creq.mutable_volume_content_source()->mutable_snapshot()->set_snapshot_id(sresp.snapshot().snapshot_id());
  ::csi::v1::CreateVolumeResponse cresp;
  ASSERT_TRUE(driver_->controller().DoCreateVolume(creq, &cresp).ok());
  EXPECT_TRUE(cresp.volume().content_source().has_snapshot());
  // Images are copies, so the fake filesystem follows the copy.
  formatter_.SetFilesystem(driver_->pool().VolumeImagePath(cresp.volume().volume_id()), "ext4");
  const int mkfs_before = formatter_.mkfs_calls;
  ASSERT_TRUE(driver_->node().DoStage(StageReq(cresp.volume().volume_id())).ok());
  EXPECT_EQ(formatter_.mkfs_calls, mkfs_before) << "a restore is never formatted";
  EXPECT_EQ(formatter_.grow_calls, 1) << "its filesystem grows to the larger size";
}

}  // namespace
}  // namespace berth::driver
