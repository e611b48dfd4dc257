// berth snapshot allocated / diff end to end in one process: the API server
// (over HTTPS with its kubeconfig's token, as kubectl and berth reach it),
// the subresources berth up serves, the DriverDirectory, and berth-csi over
// fake kernel interfaces on its socket.
#include "cli/snapshot_commands.h"

#include <fcntl.h>
#include <unistd.h>

#include <sstream>

#include "apiserver/control_plane.h"
#include "apiserver/kubeconfig.h"
#include "client/object.h"
#include "common/fd.h"
#include "common/testing/temp_dir.h"
#include "csi/server.h"
#include "driver/driver.h"
#include "driver/testing/fakes.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace berth::cli {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

constexpr char kDriver[] = "local.csi.berth.io";
constexpr char kGroup[] = "snapshot.storage.k8s.io";
constexpr int64_t kMiB = 1 << 20;

class SnapshotCommandsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    apiserver::ControlPlane::Options o;
    o.data_dir = dir_.Join("data");
    o.api_address = "127.0.0.1:0";
    auto cp = apiserver::ControlPlane::Start(o);
    ASSERT_TRUE(cp.ok()) << cp.status();
    cp_ = std::move(*cp);
    auto client = apiserver::ApiClientForKubeconfig(cp_->kubeconfig_path());
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);

    driver::DriverOptions d;
    d.endpoint = "unix:///unused.sock";
    d.node_id = "node-a";
    d.pool = dir_.Join("pool");
    d.kubelet_root = dir_.Join("kubelet");
    auto driver = driver::Driver::Open(d, {&loops_, &mounter_, &formatter_, &freezer_});
    ASSERT_TRUE(driver.ok()) << driver.status();
    driver_ = std::move(*driver);
    const std::string socket = "unix://" + dir_.Join("csi.sock");
    auto server = csi::CsiServer::Start({.endpoint = socket}, driver_->services());
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    directory_.Add(kDriver, "node-a", socket);
    endpoints_ = ServeSnapshotMetadata(cp_->handler(), cp_->registry(), directory_);
  }
  void TearDown() override {
    endpoints_.reset();
    if (server_) server_->Shutdown(absl::Seconds(5));
    if (cp_) cp_->Shutdown();
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
  void Write(const std::string& vol, int64_t offset, int64_t n, char fill) {
    Fd fd(::open(driver_->pool().VolumeImagePath(vol).c_str(), O_WRONLY | O_CLOEXEC));
    std::string data(static_cast<size_t>(n), fill);
    ASSERT_EQ(::pwrite(fd.get(), data.data(), data.size(), offset), static_cast<ssize_t>(n));
  }
  // A storage snapshot and a VolumeSnapshot bound to a content with its handle.
  void Snapshot(const std::string& name, const std::string& vol) {
    ::csi::v1::CreateSnapshotRequest req;
    req.set_name(name);
    req.set_source_volume_id(vol);
    ::csi::v1::CreateSnapshotResponse resp;
    ASSERT_TRUE(driver_->controller().DoCreateSnapshot(req, &resp).ok());
    auto& r = cp_->registry();
    ASSERT_TRUE(r.Create(client::K("volumesnapshotcontents", kGroup), "",
                         {{"metadata", {{"name", "content-" + name}}},
                          {"spec",
                           {{"deletionPolicy", "Retain"},
                            {"driver", kDriver},
                            {"source", {{"snapshotHandle", resp.snapshot().snapshot_id()}}},
                            {"volumeSnapshotRef", {{"name", name}, {"namespace", "default"}}}}}})
                    .ok());
    ASSERT_TRUE(r.Create(client::K("volumesnapshots", kGroup), "default",
                         {{"metadata", {{"name", name}}},
                          {"spec", {{"source", {{"volumeSnapshotContentName", "content-" + name}}}}}})
                    .ok());
    ASSERT_TRUE(r.Patch(client::K("volumesnapshots", kGroup), "default", name,
                        json({{"status", {{"boundVolumeSnapshotContentName", "content-" + name}}}}).dump(),
                        apiserver::PatchType::kMerge, apiserver::Subresource::kStatus)
                    .ok());
  }

  berth::testing::TempDir dir_;
  std::unique_ptr<apiserver::ControlPlane> cp_;
  std::unique_ptr<http::ApiClient> client_;
  driver::testing::FakeLoopDevices loops_;
  driver::testing::FakeMounter mounter_;
  driver::testing::FakeFormatter formatter_{loops_};
  driver::testing::FakeFreezer freezer_;
  std::unique_ptr<driver::Driver> driver_;
  std::unique_ptr<csi::CsiServer> server_;
  client::DriverDirectory directory_;
  std::unique_ptr<SnapshotMetadataEndpoints> endpoints_;
};

TEST_F(SnapshotCommandsTest, AllocatedAndDiffAsTableAndJson) {
  const std::string vol = CreateVolume("pvc-1");
  Write(vol, 0, 2 * kMiB, 'a');
  Write(vol, 20 * kMiB, 4 * kMiB, 'a');
  Snapshot("s1", vol);
  Write(vol, 21 * kMiB, kMiB, 'b');
  Write(vol, 50 * kMiB, kMiB, 'c');
  Snapshot("s2", vol);

  std::ostringstream table;
  ASSERT_TRUE(SnapshotAllocated(*client_, "s1", {}, "", table).ok());
  EXPECT_EQ(table.str(),
            "OFFSET        SIZE          END\n"
            "0             2097152       2097152\n"
            "20971520      4194304       25165824\n"
            "2 ranges, 6Mi of 64Mi (VARIABLE_LENGTH)\n");

  std::ostringstream diff;
  ASSERT_TRUE(SnapshotDiff(*client_, "s1", "s2", {.namespace_ = "default"}, "json", diff).ok());
  EXPECT_EQ(json::parse(diff.str()), json::parse(R"({"blockMetadataType": "VARIABLE_LENGTH",
      "volumeCapacityBytes": 67108864, "blocks": [{"byteOffset": 22020096, "sizeBytes": 1048576},
      {"byteOffset": 52428800, "sizeBytes": 1048576}]})"));
}

TEST_F(SnapshotCommandsTest, ErrorsAreTheServersAndTheFlags) {
  const std::string vol = CreateVolume("pvc-1");
  Snapshot("s1", vol);
  std::ostringstream out;
  absl::Status st = SnapshotAllocated(*client_, "nope", {}, "", out);
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound) << st;
  EXPECT_THAT(st.message(), HasSubstr("nope"));
  st = SnapshotDiff(*client_, "gone", "s1", {}, "", out);
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound) << st;
  EXPECT_EQ(SnapshotAllocated(*client_, "s1", {}, "yaml", out).code(), absl::StatusCode::kInvalidArgument);
  auto r = client_->Call("GET", "/apis/snapshot.storage.k8s.io/v1/namespaces/default/volumesnapshots/s1/delta");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->code, 422) << "delta without ?base= is Invalid";
  // Once berth up stops serving them (the directory goes), they say so.
  endpoints_.reset();
  st = SnapshotAllocated(*client_, "s1", {}, "", out);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_TRUE(out.str().empty());
}

}  // namespace
}  // namespace berth::cli
