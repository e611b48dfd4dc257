// berth driving the spec-strict CSI driver end to end, as root with real
// bind mounts: `berth up --external-driver strict.csi.berth.io=unix://...`,
// a StorageClass for it, claim → pod Running with the volume mounted → data
// written → pod deleted (Terminating until unmounted) → claim deleted →
// DeleteVolume. The driver records every CO violation of the CSI spec; each
// test ends with its violations file empty and nothing left mounted,
// attached or stored. Variants: no STAGE_UNSTAGE_VOLUME, a NodeStage that
// times out after really mounting (once, and for ever), pod and claim
// deleted together, kill -9 of berth up between the steps.
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "up_fixture.h"

namespace berth::testing {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr char kDriver[] = "strict.csi.berth.io";

// The CSIDriver (attach required, pod info on mount: kubelet's extra
// volume_context keys must be tolerated), a class for the driver, a claim
// and a pod.
constexpr char kManifests[] = R"(apiVersion: storage.k8s.io/v1
kind: CSIDriver
metadata: {name: strict.csi.berth.io}
spec: {attachRequired: true, podInfoOnMount: true, volumeLifecycleModes: [Persistent]}
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: strict}
provisioner: strict.csi.berth.io
volumeBindingMode: WaitForFirstConsumer
reclaimPolicy: Delete
allowVolumeExpansion: true
)";
// The claim and its pod; %s is the claim's access mode, %s its size.
constexpr char kClaimAndPod[] = R"(apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data}
spec:
  storageClassName: strict
  accessModes: [%s]
  resources: {requests: {storage: %s}}
---
apiVersion: v1
kind: Pod
metadata: {name: app}
spec:
  containers: [{name: app, image: busybox, volumeMounts: [{name: data, mountPath: /data}]}]
  volumes: [{name: data, persistentVolumeClaim: {claimName: data}}]
)";

class StrictE2eTest : public BerthUpFixture {
 protected:
  void SetUp() override {
    BerthUpFixture::SetUp();
    if (IsSkipped()) return;
    state_ = sandbox_.Join("strict");
    violations_ = sandbox_.Join("violations");
    strict_yaml_ = WriteFile("strict.yaml", kManifests);
    app_yaml_ = WriteFile("app.yaml", App());
  }
  static std::string App(const std::string& mode = "ReadWriteOnce", const std::string& size = "64Mi") {
    std::string out = kClaimAndPod;
    out.replace(out.find("%s"), 2, mode);
    out.replace(out.find("%s"), 2, size);
    return out;
  }
  void TearDown() override {
    BerthUpFixture::TearDown();
    if (driver_) {
      driver_->Signal(SIGTERM);
      if (!driver_->Wait(absl::Seconds(20))) driver_->Signal(SIGKILL);
      driver_.reset();
    }
  }

  void StartDriver(std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {STRICT_DRIVER_BINARY, "--endpoint", "unix://" + Socket(), "--name", kDriver,
                                     "--node-id",          "testnode",   "--state-dir",        state_,   "--violations",
                                     violations_};
    argv.insert(argv.end(), extra.begin(), extra.end());
    driver_ = std::make_unique<Subprocess>(argv, sandbox_.Join("strict.log"));
    ASSERT_TRUE(
        Eventually([&] { return fs::exists(Socket()) || driver_->Wait(absl::ZeroDuration()); }, absl::Seconds(30)));
    ASSERT_FALSE(driver_->Wait(absl::ZeroDuration()).has_value()) << driver_->Output();
  }
  std::string Socket() const { return sandbox_.Join("strict.sock"); }
  // Volumes only (--runtime none): this suite is about the CSI calls.
  void StartUpWithDriver() {
    StartUp({"--runtime", "none", "--external-driver", std::string(kDriver) + "=unix://" + Socket()});
  }

  // The strict driver's volumes (from its state file).
  json DriverVolumes() {
    json state = json::parse(ReadWholeFile(state_ + "/state.json"), nullptr, false);
    return state.is_object() ? state.value("volumes", json::array()) : json::array();
  }
  std::string DriverLog() { return driver_ ? driver_->Output() : ""; }
  size_t DriverCalls(const std::string& rpc, const std::string& code) {
    return CountOf(DriverLog(), "method=/csi.v1." + rpc + " code=" + code + " ");
  }
  // Everything is gone: objects, mounts, the driver's volumes, and not one
  // CO violation on the way.
  void ExpectAllClean() {
    EXPECT_TRUE(Eventually([&] { return Get("/api/v1/persistentvolumes")["items"].empty(); }, absl::Seconds(90)))
        << Get("/api/v1/persistentvolumes").dump();
    EXPECT_TRUE(Eventually([&] { return Get("/apis/storage.k8s.io/v1/volumeattachments")["items"].empty(); },
                           absl::Seconds(60)))
        << Get("/apis/storage.k8s.io/v1/volumeattachments").dump();
    EXPECT_TRUE(Eventually([&] { return DriverVolumes().empty(); }, absl::Seconds(30))) << DriverVolumes().dump();
    EXPECT_TRUE(Eventually([&] { return VolumeMounts().empty(); }, absl::Seconds(30)))
        << ::testing::PrintToString(VolumeMounts());
    size_t left = 0;
    for (const auto& e : fs::directory_iterator(state_ + "/volumes")) left += e.exists() ? 1 : 0;
    EXPECT_EQ(left, 0u);
    EXPECT_EQ(ReadWholeFile(violations_), "") << DriverLog();
  }
  // Applies the class and the claim + pod, waits for Running and writes
  // through the pod's mount; returns the mount.
  std::string ClaimPodRunningWithData() {
    Berth({"apply", "-f", strict_yaml_});
    Berth({"apply", "-f", app_yaml_});
    EXPECT_TRUE(Eventually([&] { return Running("app"); }, absl::Seconds(90))) << Pod("app").dump() << "\n"
                                                                               << ReadWholeFile(violations_);
    if (!Running("app")) return "";
    const std::string mount = TargetOf("app", "data");
    EXPECT_TRUE(Mounted(mount)) << mount;
    { std::ofstream(mount + "/hello") << "written by the pod"; }
    ::sync();
    // The data is in the driver's volume, through staging and publish.
    const json vols = DriverVolumes();
    EXPECT_EQ(vols.size(), 1u);
    if (vols.size() == 1) {
      EXPECT_EQ(ReadWholeFile(state_ + "/volumes/" + vols[0].value("id", "") + "/hello"), "written by the pod");
    }
    return mount;
  }
  // Deletes the pod and waits until it is gone, checking on the way that
  // it is never gone while its volume is still mounted.
  void DeletePodAndWait(const std::string& mount) {
    Berth({"delete", "pod", "app", "--wait=false"});
    WaitPodGone(mount);
  }
  void WaitPodGone(const std::string& mount) {
    bool gone_while_mounted = false;
    EXPECT_TRUE(Eventually(
        [&] {
          const bool gone = Pod("app").is_null();
          if (gone && Mounted(mount)) gone_while_mounted = true;
          return gone;
        },
        absl::Seconds(90)));
    EXPECT_FALSE(gone_while_mounted) << "the pod object went before its volume was unmounted";
    EXPECT_FALSE(Mounted(mount));
  }

  std::string state_, violations_, strict_yaml_, app_yaml_;
  std::unique_ptr<Subprocess> driver_;
};

TEST_F(StrictE2eTest, ClaimPodDataDeleteWithoutViolations) {
  // Two failed unpublishes keep the pod Terminating long enough to see it.
  StartDriver({"--fault", "unpublish:UNAVAILABLE:2"});
  StartUpWithDriver();
  WaitForDriverRegistered(kDriver);
  const std::string mount = ClaimPodRunningWithData();
  ASSERT_FALSE(mount.empty());
  EXPECT_GE(DriverCalls("Controller/ControllerPublishVolume", "OK"), 1u);
  EXPECT_EQ(DriverCalls("Node/NodeStageVolume", "OK"), 1u);
  // Volume stats (every second here), with the staging path.
  EXPECT_TRUE(Eventually([&] { return DriverCalls("Node/NodeGetVolumeStats", "OK") >= 1; }, absl::Seconds(30)));
  Berth({"delete", "pod", "app", "--wait=false"});
  // Terminating (deletionTimestamp set) while the volume is still mounted.
  EXPECT_TRUE(Eventually(
      [&] {
        const json p = Pod("app");
        return !p.is_null() && p["metadata"].contains("deletionTimestamp") && Mounted(mount);
      },
      absl::Seconds(30)))
      << Pod("app").dump();
  WaitPodGone(mount);
  EXPECT_EQ(DriverCalls("Node/NodeUnpublishVolume", "UNAVAILABLE"), 2u);
  Berth({"delete", "pvc", "data"});
  ExpectAllClean();
  EXPECT_GE(DriverCalls("Controller/DeleteVolume", "OK"), 1u);
  EXPECT_EQ(StopUp(SIGTERM), 0);
}

TEST_F(StrictE2eTest, WithoutStageUnstage) {
  StartDriver({"--no-stage-unstage"});
  StartUpWithDriver();
  WaitForDriverRegistered(kDriver);
  const std::string mount = ClaimPodRunningWithData();
  ASSERT_FALSE(mount.empty());
  DeletePodAndWait(mount);
  Berth({"delete", "pvc", "data"});
  ExpectAllClean();
  EXPECT_EQ(CountOf(DriverLog(), "NodeStageVolume"), 0u);  // never called (it would be a violation too)
  EXPECT_EQ(StopUp(SIGTERM), 0);
}

TEST_F(StrictE2eTest, WithoutPublishUnpublishOrStats) {
  // The CSIDriver still says attachRequired: the attachment is a formality,
  // and no publish_context may reach the node calls.
  StartDriver({"--no-publish-unpublish", "--no-volume-stats"});
  StartUpWithDriver();
  WaitForDriverRegistered(kDriver);
  const std::string mount = ClaimPodRunningWithData();
  ASSERT_FALSE(mount.empty());
  DeletePodAndWait(mount);
  Berth({"delete", "pvc", "data"});
  ExpectAllClean();
  EXPECT_EQ(CountOf(DriverLog(), "ControllerPublishVolume"), 0u);
  EXPECT_EQ(CountOf(DriverLog(), "NodeGetVolumeStats"), 0u);
  EXPECT_EQ(StopUp(SIGTERM), 0);
}

// A raw block volume: the driver binds its image at a file it creates in the
// staging directory, then at the target file (which the CO must not create).
TEST_F(StrictE2eTest, BlockVolume) {
  StartDriver();
  StartUpWithDriver();
  WaitForDriverRegistered(kDriver);
  Berth({"apply", "-f", strict_yaml_});
  Berth({"apply", "-f", WriteFile("block.yaml", R"(apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data}
spec:
  storageClassName: strict
  volumeMode: Block
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 64Mi}}
---
apiVersion: v1
kind: Pod
metadata: {name: app}
spec:
  containers: [{name: app, image: busybox, volumeDevices: [{name: data, devicePath: /dev/xvda}]}]
  volumes: [{name: data, persistentVolumeClaim: {claimName: data}}]
)")});
  ASSERT_TRUE(Eventually([&] { return Running("app"); }, absl::Seconds(90))) << Pod("app").dump() << "\n"
                                                                             << ReadWholeFile(violations_);
  const std::string device = data_ + "/nodes/testnode/kubelet/pods/" +
                             Pod("app")["metadata"]["uid"].get<std::string>() + "/volumeDevices/kubernetes.io~csi/" +
                             Claim("data")["spec"]["volumeName"].get<std::string>();
  EXPECT_TRUE(Mounted(device)) << device;
  { std::fstream(device, std::ios::in | std::ios::out | std::ios::binary) << "through the device"; }
  ::sync();
  const json vols = DriverVolumes();
  ASSERT_EQ(vols.size(), 1u);
  char head[18] = {};
  std::ifstream(state_ + "/volumes/" + vols[0].value("id", "") + ".img", std::ios::binary).read(head, sizeof(head));
  EXPECT_EQ(std::string(head, sizeof(head)), "through the device");
  DeletePodAndWait(device);
  Berth({"delete", "pvc", "data"});
  ExpectAllClean();
  EXPECT_EQ(StopUp(SIGTERM), 0);
}

// Online expansion: ControllerExpandVolume, then NodeExpandVolume on the
// node (only because the driver advertises it), then the claim's size.
TEST_F(StrictE2eTest, OnlineExpansion) {
  StartDriver();
  StartUpWithDriver();
  WaitForDriverRegistered(kDriver);
  const std::string mount = ClaimPodRunningWithData();
  ASSERT_FALSE(mount.empty());
  Berth({"apply", "-f", WriteFile("app.yaml", App("ReadWriteOnce", "128Mi"))});
  EXPECT_TRUE(Eventually(
      [&] {
        return Claim("data").value("status", json::object()).value("capacity", json::object()).value("storage", "") ==
               "128Mi";
      },
      absl::Seconds(90)))
      << Claim("data").dump() << "\n"
      << ReadWholeFile(violations_);
  EXPECT_EQ(DriverCalls("Controller/ControllerExpandVolume", "OK"), 1u);
  EXPECT_EQ(DriverCalls("Node/NodeExpandVolume", "OK"), 1u);
  DeletePodAndWait(mount);
  Berth({"delete", "pvc", "data"});
  ExpectAllClean();
  EXPECT_EQ(StopUp(SIGTERM), 0);
}

TEST_F(StrictE2eTest, ExpansionWithoutNodeExpansion) {
  StartDriver({"--no-node-expand"});
  StartUpWithDriver();
  WaitForDriverRegistered(kDriver);
  const std::string mount = ClaimPodRunningWithData();
  ASSERT_FALSE(mount.empty());
  Berth({"apply", "-f", WriteFile("app.yaml", App("ReadWriteOnce", "128Mi"))});
  EXPECT_TRUE(Eventually(
      [&] {
        return Claim("data").value("status", json::object()).value("capacity", json::object()).value("storage", "") ==
               "128Mi";
      },
      absl::Seconds(90)))
      << Claim("data").dump() << "\n"
      << ReadWholeFile(violations_);
  EXPECT_EQ(DriverCalls("Controller/ControllerExpandVolume", "OK"), 1u);
  EXPECT_EQ(CountOf(DriverLog(), "NodeExpandVolume"), 0u);
  DeletePodAndWait(mount);
  Berth({"delete", "pvc", "data"});
  ExpectAllClean();
  EXPECT_EQ(StopUp(SIGTERM), 0);
}

// ReadWriteOncePod maps to SINGLE_NODE_SINGLE_WRITER only for a driver that
// advertises SINGLE_NODE_MULTI_WRITER (Kubernetes' ToCSIAccessMode, in
// external-provisioner, external-attacher and kubelet); otherwise to
// SINGLE_NODE_WRITER.
TEST_F(StrictE2eTest, ReadWriteOncePodClaim) {
  StartDriver();
  StartUpWithDriver();
  WaitForDriverRegistered(kDriver);
  app_yaml_ = WriteFile("app.yaml", App("ReadWriteOncePod"));
  const std::string mount = ClaimPodRunningWithData();
  ASSERT_FALSE(mount.empty());
  DeletePodAndWait(mount);
  Berth({"delete", "pvc", "data"});
  ExpectAllClean();
  EXPECT_EQ(StopUp(SIGTERM), 0);
}

TEST_F(StrictE2eTest, StageTimesOutAfterMountingThenSucceeds) {
  StartDriver({"--fault", "stage:DEADLINE_EXCEEDED:1:after"});
  StartUpWithDriver();
  WaitForDriverRegistered(kDriver);
  const std::string mount = ClaimPodRunningWithData();
  ASSERT_FALSE(mount.empty());
  // Uncertain, then staged: the second NodeStage found the work done.
  EXPECT_EQ(DriverCalls("Node/NodeStageVolume", "DEADLINE_EXCEEDED"), 1u);
  EXPECT_EQ(DriverCalls("Node/NodeStageVolume", "OK"), 1u);
  DeletePodAndWait(mount);
  Berth({"delete", "pvc", "data"});
  ExpectAllClean();
  EXPECT_EQ(StopUp(SIGTERM), 0);
}

TEST_F(StrictE2eTest, StageThatNeverConfirmsIsUnstagedBeforeDetach) {
  // Every NodeStage mounts and then times out: the volume stays uncertain.
  StartDriver({"--fault", "stage:DEADLINE_EXCEEDED:1000:after"});
  StartUpWithDriver();
  WaitForDriverRegistered(kDriver);
  Berth({"apply", "-f", strict_yaml_});
  Berth({"apply", "-f", app_yaml_});
  ASSERT_TRUE(
      Eventually([&] { return DriverCalls("Node/NodeStageVolume", "DEADLINE_EXCEEDED") >= 2; }, absl::Seconds(90)))
      << DriverLog();
  EXPECT_FALSE(Running("app"));
  EXPECT_EQ(DriverCalls("Node/NodePublishVolume", "OK"), 0u);
  Berth({"delete", "pod", "app", "--wait=false"});
  EXPECT_TRUE(Eventually([&] { return Pod("app").is_null(); }, absl::Seconds(90))) << Pod("app").dump();
  Berth({"delete", "pvc", "data"});
  ExpectAllClean();
  // The uncertain stage was undone, and before the detach.
  const std::string log = DriverLog();
  const size_t unstage = log.find("method=/csi.v1.Node/NodeUnstageVolume code=OK");
  const size_t detach = log.find("method=/csi.v1.Controller/ControllerUnpublishVolume code=OK");
  ASSERT_NE(unstage, std::string::npos) << log;
  ASSERT_NE(detach, std::string::npos) << log;
  EXPECT_LT(unstage, detach);
  EXPECT_EQ(StopUp(SIGTERM), 0);
}

TEST_F(StrictE2eTest, PodAndClaimDeletedTogether) {
  StartDriver();
  StartUpWithDriver();
  WaitForDriverRegistered(kDriver);
  const std::string mount = ClaimPodRunningWithData();
  ASSERT_FALSE(mount.empty());
  Berth({"delete", "-f", app_yaml_, "--wait=false"});
  EXPECT_TRUE(Eventually([&] { return Pod("app").is_null() && Claim("data").is_null(); }, absl::Seconds(90)));
  ExpectAllClean();
  EXPECT_EQ(StopUp(SIGTERM), 0);
}

TEST_F(StrictE2eTest, KillNineBetweenStepsEndsClean) {
  StartDriver();
  StartUpWithDriver();
  WaitForDriverRegistered(kDriver);
  const std::string mount = ClaimPodRunningWithData();
  ASSERT_FALSE(mount.empty());
  ASSERT_EQ(StopUp(SIGKILL), 128 + SIGKILL);
  StartUpWithDriver();
  EXPECT_TRUE(Running("app"));
  EXPECT_TRUE(Mounted(mount));
  EXPECT_EQ(ReadWholeFile(mount + "/hello"), "written by the pod");
  // Deleting the pod, and killed right after.
  Berth({"delete", "pod", "app", "--wait=false"});
  ASSERT_EQ(StopUp(SIGKILL), 128 + SIGKILL);
  StartUpWithDriver();
  EXPECT_TRUE(Eventually([&] { return Pod("app").is_null(); }, absl::Seconds(90))) << Pod("app").dump();
  EXPECT_FALSE(Mounted(mount));
  // Deleting the claim, and killed right after.
  Berth({"delete", "pvc", "data", "--wait=false"});
  ASSERT_EQ(StopUp(SIGKILL), 128 + SIGKILL);
  StartUpWithDriver();
  ExpectAllClean();
  EXPECT_EQ(DriverCalls("Node/NodeStageVolume", "OK"), 1u);  // nothing staged twice across the restarts
  EXPECT_EQ(StopUp(SIGTERM), 0);
}

}  // namespace
}  // namespace berth::testing
