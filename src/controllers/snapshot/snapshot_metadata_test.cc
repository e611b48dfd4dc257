// Changed-block tracking through the API's objects: VolumeSnapshots bound to
// contents whose handles are berth-csi's snapshots, berth-csi (in process,
// over fake kernel interfaces, on its socket) answering through the
// DriverDirectory, as `berth up` wires it.
#include "controllers/snapshot/snapshot_metadata.h"

#include <fcntl.h>
#include <unistd.h>

#include "common/fd.h"
#include "controllers/testing/controller_fixture.h"
#include "csi/server.h"
#include "driver/driver.h"
#include "driver/testing/fakes.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace berth::controllers {
namespace {

using json = nlohmann::json;

constexpr char kDriver[] = "local.csi.berth.io";
constexpr char kGroup[] = "snapshot.storage.k8s.io";
constexpr int64_t kMiB = 1 << 20;

class SnapshotMetadataApiTest : public testing::ControllerTest {
 protected:
  void SetUp() override {
    ControllerTest::SetUp();
    if (HasFatalFailure()) return;
    driver::DriverOptions o;
    o.endpoint = "unix:///unused.sock";
    o.node_id = "node-a";
    o.pool = dir_.Join("pool");
    o.kubelet_root = dir_.Join("kubelet");
    auto d = driver::Driver::Open(o, {&loops_, &mounter_, &formatter_, &freezer_});
    ASSERT_TRUE(d.ok()) << d.status();
    driver_ = std::move(*d);
    const std::string socket = "unix://" + dir_.Join("csi.sock");
    auto server = csi::CsiServer::Start({.endpoint = socket}, driver_->services());
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    directory_.Add(kDriver, "node-a", socket);
  }
  void TearDown() override {
    if (server_) server_->Shutdown(absl::Seconds(5));
  }

  std::string CreateVolume(const std::string& name) {
    ::csi::v1::CreateVolumeRequest req;
    req.set_name(name);
    req.mutable_capacity_range()->set_required_bytes(64 * kMiB);
    auto* cap = req.add_volume_capabilities();
    cap->mutable_block();
    cap->mutable_access_mode()->set_mode(::csi::v1::VolumeCapability::AccessMode::SINGLE_NODE_WRITER);
    ::csi::v1::CreateVolumeResponse resp;
    EXPECT_TRUE(driver_->controller().DoCreateVolume(req, &resp).ok());
    return resp.volume().volume_id();
  }
  void Write(const std::string& vol, int64_t offset, int64_t n, char fill = 'a') {
    Fd fd(::open(driver_->pool().VolumeImagePath(vol).c_str(), O_WRONLY | O_CLOEXEC));
    std::string data(static_cast<size_t>(n), fill);
    ASSERT_EQ(::pwrite(fd.get(), data.data(), data.size(), offset), static_cast<ssize_t>(n));
  }
  // A storage snapshot of `vol`, and a VolumeSnapshot `name` bound to a
  // pre-provisioned content with its handle (as the snapshot controller
  // leaves them).
  void Snapshot(const std::string& name, const std::string& vol, const std::string& driver = kDriver) {
    ::csi::v1::CreateSnapshotRequest req;
    req.set_name(name);
    req.set_source_volume_id(vol);
    ::csi::v1::CreateSnapshotResponse resp;
    ASSERT_TRUE(driver_->controller().DoCreateSnapshot(req, &resp).ok());
    Create("volumesnapshotcontents", kGroup, "",
           {{"metadata", {{"name", "content-" + name}}},
            {"spec",
             {{"deletionPolicy", "Retain"},
              {"driver", driver},
              {"source", {{"snapshotHandle", resp.snapshot().snapshot_id()}}},
              {"volumeSnapshotRef", {{"name", name}, {"namespace", "default"}}}}}});
    Create(
        "volumesnapshots", kGroup, "default",
        {{"metadata", {{"name", name}}}, {"spec", {{"source", {{"volumeSnapshotContentName", "content-" + name}}}}}});
    PatchStatus("volumesnapshots", kGroup, "default", name, {{"boundVolumeSnapshotContentName", "content-" + name}});
  }
  absl::StatusOr<json> Get(const std::string& name, const std::string& base = "") {
    return GetSnapshotMetadata(*registry_, directory_, "default", name, base);
  }

  driver::testing::FakeLoopDevices loops_;
  driver::testing::FakeMounter mounter_;
  driver::testing::FakeFormatter formatter_{loops_};
  driver::testing::FakeFreezer freezer_;
  std::unique_ptr<driver::Driver> driver_;
  std::unique_ptr<csi::CsiServer> server_;
  client::DriverDirectory directory_;
};

TEST_F(SnapshotMetadataApiTest, AllocatedAndDeltaOfVolumeSnapshots) {
  const std::string vol = CreateVolume("pvc-1");
  Write(vol, 0, 2 * kMiB);
  Write(vol, 20 * kMiB, 4 * kMiB);
  Snapshot("s1", vol);
  Write(vol, 21 * kMiB, kMiB, 'b');
  Write(vol, 50 * kMiB, kMiB, 'c');
  Snapshot("s2", vol);

  auto allocated = Get("s1");
  ASSERT_TRUE(allocated.ok()) << allocated.status();
  EXPECT_EQ(*allocated, json::parse(R"({"blockMetadataType": "VARIABLE_LENGTH", "volumeCapacityBytes": 67108864,
      "blocks": [{"byteOffset": 0, "sizeBytes": 2097152}, {"byteOffset": 20971520, "sizeBytes": 4194304}]})"));

  auto delta = Get("s2", "s1");
  ASSERT_TRUE(delta.ok()) << delta.status();
  EXPECT_EQ((*delta)["blocks"], json::parse(R"([{"byteOffset": 22020096, "sizeBytes": 1048576},
      {"byteOffset": 52428800, "sizeBytes": 1048576}])"));
}

TEST_F(SnapshotMetadataApiTest, ErrorsSayWhatIsMissing) {
  const std::string vol = CreateVolume("pvc-1");
  Snapshot("s1", vol);
  EXPECT_EQ(Get("nope").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Get("s1", "nope").status().code(), absl::StatusCode::kNotFound);
  // Not bound yet.
  Create("volumesnapshots", kGroup, "default",
         {{"metadata", {{"name", "pending"}}}, {"spec", {{"source", {{"persistentVolumeClaimName", "c"}}}}}});
  auto pending = Get("pending");
  EXPECT_EQ(pending.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(pending.status().message(), ::testing::HasSubstr("not bound"));
  // The driver's own codes come through: snapshots of two volumes.
  Snapshot("o1", CreateVolume("pvc-2"));
  EXPECT_EQ(Get("o1", "s1").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(SnapshotMetadataApiTest, ADriverWithoutTheServiceIsNamed) {
  // Only berth-csi's Identity on another socket, registered as another driver.
  const std::string socket = "unix://" + dir_.Join("identity.sock");
  auto identity_only = csi::CsiServer::Start({.endpoint = socket}, {driver_->services()[0]});
  ASSERT_TRUE(identity_only.ok()) << identity_only.status();
  directory_.Add("other.csi.example.com", "node-a", socket);
  Snapshot("s1", CreateVolume("pvc-1"), "other.csi.example.com");
  auto got = Get("s1");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(got.status().message(), ::testing::HasSubstr("other.csi.example.com does not serve SnapshotMetadata"));
  (*identity_only)->Shutdown(absl::Seconds(5));
}

}  // namespace
}  // namespace berth::controllers
