// Fault injection: berth-csi is killed (as by SIGKILL) at every crash point
// of every mutating RPC. The next start plus the CO's retry of the same call
// must succeed, and tearing everything down afterwards must leave no image,
// record, loop device or mount behind.
#include <filesystem>

#include "driver_process.h"
#include "gmock/gmock.h"

namespace berth::testing {
namespace {

namespace fs = std::filesystem;
using ::csi::v1::VolumeCapability;

struct Scenario {
  std::string crash_point;
  bool block = false;
  // Steps run before the crashing call (by name, see Run()).
  std::vector<std::string> setup;
  std::string call;
};

class DriverCrashTest : public ::testing::TestWithParam<Scenario> {
 protected:
  void SetUp() override { BERTH_REQUIRE_ROOT(); }

  VolumeCapability Cap() const { return GetParam().block ? BlockCapability() : MountCapability("ext4"); }
  std::string Staging() const { return driver_->kubelet() + "/staging/v"; }
  std::string Target() const { return driver_->kubelet() + "/pods/p/v/mount"; }

  // Runs one step against the current driver process; returns its status.
  grpc::Status Run(const std::string& step) {
    auto& c = driver_->controller();
    auto& n = driver_->node();
    if (step == "create") {
      ::csi::v1::CreateVolumeRequest req;
      req.set_name("pvc-crash");
      req.mutable_capacity_range()->set_required_bytes(64 << 20);
      *req.add_volume_capabilities() = Cap();
      ::csi::v1::CreateVolumeResponse resp;
      grpc::Status st = c.CreateVolume(Ctx().get(), req, &resp);
      if (st.ok()) volume_ = resp.volume().volume_id();
      return st;
    }
    if (step == "delete") {
      ::csi::v1::DeleteVolumeRequest req;
      req.set_volume_id(volume_);
      ::csi::v1::DeleteVolumeResponse resp;
      return c.DeleteVolume(Ctx().get(), req, &resp);
    }
    if (step == "expand") {
      ::csi::v1::ControllerExpandVolumeRequest req;
      req.set_volume_id(volume_);
      req.mutable_capacity_range()->set_required_bytes(128 << 20);
      ::csi::v1::ControllerExpandVolumeResponse resp;
      return c.ControllerExpandVolume(Ctx().get(), req, &resp);
    }
    if (step == "snapshot") {
      ::csi::v1::CreateSnapshotRequest req;
      req.set_name("snap-crash");
      req.set_source_volume_id(volume_);
      ::csi::v1::CreateSnapshotResponse resp;
      grpc::Status st = c.CreateSnapshot(Ctx().get(), req, &resp);
      if (st.ok()) snapshot_ = resp.snapshot().snapshot_id();
      return st;
    }
    if (step == "delete-snapshot") {
      ::csi::v1::DeleteSnapshotRequest req;
      req.set_snapshot_id(snapshot_);
      ::csi::v1::DeleteSnapshotResponse resp;
      return c.DeleteSnapshot(Ctx().get(), req, &resp);
    }
    if (step == "stage") {
      fs::create_directories(Staging());
      ::csi::v1::NodeStageVolumeRequest req;
      req.set_volume_id(volume_);
      req.set_staging_target_path(Staging());
      *req.mutable_volume_capability() = Cap();
      ::csi::v1::NodeStageVolumeResponse resp;
      return n.NodeStageVolume(Ctx().get(), req, &resp);
    }
    if (step == "unstage") {
      ::csi::v1::NodeUnstageVolumeRequest req;
      req.set_volume_id(volume_);
      req.set_staging_target_path(Staging());
      ::csi::v1::NodeUnstageVolumeResponse resp;
      return n.NodeUnstageVolume(Ctx().get(), req, &resp);
    }
    if (step == "publish") {
      fs::create_directories(fs::path(Target()).parent_path());
      ::csi::v1::NodePublishVolumeRequest req;
      req.set_volume_id(volume_);
      req.set_staging_target_path(Staging());
      req.set_target_path(Target());
      *req.mutable_volume_capability() = Cap();
      ::csi::v1::NodePublishVolumeResponse resp;
      return n.NodePublishVolume(Ctx().get(), req, &resp);
    }
    if (step == "unpublish") {
      ::csi::v1::NodeUnpublishVolumeRequest req;
      req.set_volume_id(volume_);
      req.set_target_path(Target());
      ::csi::v1::NodeUnpublishVolumeResponse resp;
      return n.NodeUnpublishVolume(Ctx().get(), req, &resp);
    }
    ADD_FAILURE() << "unknown step " << step;
    return grpc::Status::CANCELLED;
  }

  MountSandbox sandbox_;
  std::unique_ptr<DriverProcess> driver_;
  std::string volume_;
  std::string snapshot_;
};

TEST_P(DriverCrashTest, NextStartAndRetryRepairEverything) {
  const Scenario& s = GetParam();
  driver_ = std::make_unique<DriverProcess>(sandbox_);
  ASSERT_TRUE(driver_->Start());
  for (const auto& step : s.setup) ASSERT_TRUE(Run(step).ok()) << step << "\n" << driver_->Log();
  ASSERT_EQ(driver_->Stop(), 0);

  // The crashing run: the call fails because the process dies mid-way.
  ASSERT_TRUE(driver_->Start({"BERTH_CRASH_AT=" + s.crash_point}));
  grpc::Status crashed = Run(s.call);
  EXPECT_FALSE(crashed.ok()) << s.crash_point << " was never reached";
  EXPECT_EQ(driver_->WaitForExit(), 137) << driver_->Log();

  // Restart and retry: the same call now succeeds.
  ASSERT_TRUE(driver_->Start());
  grpc::Status retried = Run(s.call);
  ASSERT_TRUE(retried.ok()) << s.call << ": " << retried.error_message() << "\n" << driver_->Log();
  if (s.call == "create") {
    ASSERT_FALSE(volume_.empty());
  }

  // Tear everything down through the API.
  for (const char* step : {"unpublish", "unstage"}) {
    if (!volume_.empty()) {
      grpc::Status st = Run(step);
      EXPECT_TRUE(st.ok() || st.error_code() == grpc::StatusCode::NOT_FOUND) << step << ": " << st.error_message();
    }
  }
  if (!snapshot_.empty()) {
    EXPECT_TRUE(Run("delete-snapshot").ok());
  }
  if (!volume_.empty()) {
    grpc::Status st = Run("delete");
    EXPECT_TRUE(st.ok()) << st.error_message();
  }
  ASSERT_EQ(driver_->Stop(), 0) << driver_->Log();

  // Nothing is left: no images, records or scratch files; only the pool
  // image is attached and mounted.
  for (const char* dir : {"volumes", "snapshots", "tmp"}) {
    std::vector<std::string> left;
    for (const auto& e : fs::directory_iterator(driver_->pool() + "/" + dir)) {
      left.push_back(e.path().filename().string());
    }
    EXPECT_THAT(left, ::testing::IsEmpty()) << dir;
  }
  EXPECT_EQ(sandbox_.Loops().size(), 1u);
  EXPECT_EQ(sandbox_.Mounts().size(), 1u);
  if (HasFailure()) std::cerr << driver_->Log();
}

std::string Name(const ::testing::TestParamInfo<Scenario>& info) {
  std::string n = info.param.crash_point + (info.param.block ? "_block" : "");
  for (char& c : n) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return n;
}

INSTANTIATE_TEST_SUITE_P(
    CrashPoints, DriverCrashTest,
    ::testing::Values(Scenario{"create-volume/image-in-tmp", false, {}, "create"},
                      Scenario{"create-volume/image-in-place", false, {}, "create"},
                      Scenario{"create-volume/recorded", false, {}, "create"},
                      Scenario{"delete-volume/marked", false, {"create"}, "delete"},
                      Scenario{"delete-volume/image-removed", false, {"create"}, "delete"},
                      Scenario{"expand-volume/image-grown", false, {"create"}, "expand"},
                      Scenario{"create-snapshot/image-in-tmp", false, {"create"}, "snapshot"},
                      Scenario{"create-snapshot/recorded", false, {"create"}, "snapshot"},
                      Scenario{"delete-snapshot/marked", false, {"create", "snapshot"}, "delete-snapshot"},
                      Scenario{"node-stage/attached", false, {"create"}, "stage"},
                      Scenario{"node-stage/formatting", false, {"create"}, "stage"},
                      Scenario{"node-stage/formatted", false, {"create"}, "stage"},
                      Scenario{"node-stage/mounted", false, {"create"}, "stage"},
                      Scenario{"node-stage/block-attached", true, {"create"}, "stage"},
                      Scenario{"node-unstage/unmounted", false, {"create", "stage"}, "unstage"},
                      Scenario{"node-publish/mounted", false, {"create", "stage"}, "publish"},
                      Scenario{"node-publish/mounted", true, {"create", "stage"}, "publish"},
                      Scenario{"node-unpublish/unmounted", false, {"create", "stage", "publish"}, "unpublish"}),
    Name);

}  // namespace
}  // namespace berth::testing
