// The upstream csi-test mock driver (kubernetes-csi/csi-test, a third-party
// driver that checks parts of the CO's side: the staging directory must
// exist, publish_context must carry the "device" its ControllerPublish
// returned, the target's parent must exist) through `berth up
// --external-driver`: claim → pod Running → pod deleted → claim deleted →
// DeleteVolume. Runs as root when MOCK_CSI_DRIVER names the mock-driver
// binary (built separately from its tag; docs/failure-semantics.md), and is
// skipped otherwise.
#include <stdlib.h>

#include <filesystem>

#include "csi/client.h"
#include "csi/v1/csi.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "up_fixture.h"

namespace berth::testing {
namespace {

namespace fs = std::filesystem;

constexpr char kDriver[] = "mock.csi.berth.io";

constexpr char kManifests[] = R"(apiVersion: storage.k8s.io/v1
kind: CSIDriver
metadata: {name: mock.csi.berth.io}
spec: {attachRequired: true, podInfoOnMount: false, volumeLifecycleModes: [Persistent]}
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: mock}
provisioner: mock.csi.berth.io
volumeBindingMode: Immediate
reclaimPolicy: Delete
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data}
spec:
  storageClassName: mock
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 64Mi}}
---
apiVersion: v1
kind: Pod
metadata: {name: app}
spec:
  containers: [{name: app, image: busybox, volumeMounts: [{name: data, mountPath: /data}]}]
  volumes: [{name: data, persistentVolumeClaim: {claimName: data}}]
)";

class MockDriverTest : public BerthUpFixture {
 protected:
  void SetUp() override {
    const char* binary = std::getenv("MOCK_CSI_DRIVER");
    if (binary == nullptr || *binary == '\0') {
      GTEST_SKIP() << "MOCK_CSI_DRIVER does not name the csi-test mock-driver binary";
    }
    binary_ = binary;
    BerthUpFixture::SetUp();
  }
  void TearDown() override {
    BerthUpFixture::TearDown();
    if (mock_) {
      mock_->Signal(SIGTERM);
      if (!mock_->Wait(absl::Seconds(20))) mock_->Signal(SIGKILL);
      mock_.reset();
    }
  }
  std::string Socket() const { return sandbox_.Join("mock.sock"); }
  // The mock's volumes besides the three it is born with.
  std::vector<std::string> MockVolumeNames() {
    auto channel = csi::ConnectUnix("unix://" + Socket(), {.timeout = absl::Seconds(5)});
    if (!channel.ok()) return {"(unreachable)"};
    auto stub = ::csi::v1::Controller::NewStub(*channel);
    grpc::ClientContext ctx;
    ::csi::v1::ListVolumesResponse resp;
    if (!stub->ListVolumes(&ctx, {}, &resp).ok()) return {"(ListVolumes failed)"};
    std::vector<std::string> out;
    for (const auto& e : resp.entries()) {
      const std::string name =
          e.volume().volume_context().contains("name") ? e.volume().volume_context().at("name") : "";
      if (name.rfind("Mock Volume ", 0) != 0) out.push_back(name);
    }
    return out;
  }

  std::string binary_;
  std::unique_ptr<Subprocess> mock_;
};

TEST_F(MockDriverTest, ClaimPodDelete) {
  // The mock takes its endpoint from CSI_ENDPOINT; its node ID is its name.
  ::setenv("CSI_ENDPOINT", ("unix://" + Socket()).c_str(), 1);
  mock_ = std::make_unique<Subprocess>(std::vector<std::string>{binary_, "--name", kDriver, "--v", "5"},
                                       sandbox_.Join("mock.log"));
  ::unsetenv("CSI_ENDPOINT");
  ASSERT_TRUE(Eventually([&] { return fs::exists(Socket()) || mock_->Wait(absl::ZeroDuration()); }, absl::Seconds(30)));
  ASSERT_FALSE(mock_->Wait(absl::ZeroDuration()).has_value()) << mock_->Output();
  StartUp({"--runtime", "none", "--external-driver", std::string(kDriver) + "=unix://" + Socket()});
  WaitForDriverRegistered(kDriver);
  Berth({"apply", "-f", WriteFile("mock.yaml", kManifests)});
  ASSERT_TRUE(Eventually([&] { return Running("app"); }, absl::Seconds(90)))
      << Pod("app").dump() << "\n"
      << Get("/api/v1/namespaces/default/events").dump() << "\n"
      << mock_->Output();
  EXPECT_THAT(MockVolumeNames(), ::testing::SizeIs(1));
  // The mock creates the target directory (no mount).
  const std::string target = TargetOf("app", "data");
  EXPECT_TRUE(fs::is_directory(target)) << target;
  Berth({"delete", "pod", "app"});
  EXPECT_FALSE(fs::exists(target));
  Berth({"delete", "pvc", "data"});
  EXPECT_TRUE(Eventually([&] { return Get("/api/v1/persistentvolumes")["items"].empty(); }, absl::Seconds(90)))
      << Get("/api/v1/persistentvolumes").dump();
  EXPECT_TRUE(
      Eventually([&] { return Get("/apis/storage.k8s.io/v1/volumeattachments")["items"].empty(); }, absl::Seconds(60)));
  EXPECT_THAT(MockVolumeNames(), ::testing::IsEmpty());
  EXPECT_EQ(StopUp(SIGTERM), 0);
}

}  // namespace
}  // namespace berth::testing
