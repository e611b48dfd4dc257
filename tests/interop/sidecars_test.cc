// The upstream kubernetes-csi sidecars against `berth up`'s API: proof that
// berth's API serves the client-go programs a driver shipped for Kubernetes
// brings along, unchanged.
//
// When CSI_SIDECARS names a directory holding csi-node-driver-registrar,
// csi-provisioner, csi-attacher, csi-resizer, csi-snapshotter and
// snapshot-controller (built from their release tags; docs/api.md), each test
// runs, as root:
//   berth up --runtime none --sidecar-driver side.csi.berth.io
//   berth-csi --driver-name side.csi.berth.io   (a second driver, own pool)
//   csi-node-driver-registrar                    (registers it with the node agent)
//   csi-provisioner, csi-attacher, csi-resizer, csi-snapshotter
//                                                (over HTTPS with <data>/kubeconfig,
//                                                 leader election on Leases)
// and drives StorageClass → WaitForFirstConsumer claim → pod Running →
// restart of berth up (no sidecar restarted) → online expansion → snapshot
// ready → claim restored from it Running with the data → everything
// deleted, leaving no PV, VolumeAttachment, snapshot content, volume or
// snapshot image in the second driver's pool, volume mount or loop device.
// csi-provisioner also publishes CSIStorageCapacity, by which berth's
// scheduler places the pod. One test with berth's snapshot controller, one
// with the upstream snapshot-controller (--no-snapshot-controller), which
// then also snapshots a volume of berth's own driver. Without CSI_SIDECARS
// the tests say why and are skipped.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "../integration/up_fixture.h"
#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace berth::testing {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr char kSide[] = "side.csi.berth.io";
constexpr const char* kSidecars[] = {"csi-node-driver-registrar", "csi-provisioner",    "csi-attacher", "csi-resizer",
                                     "csi-snapshotter",           "snapshot-controller"};

// The driver's CSIDriver (as its deployment would create it), a class for it,
// and a snapshot class. XFS: ext4's online resize needs CAP_SYS_RESOURCE,
// which some sandboxes (this project's CI machine) do not grant even to
// root; XFS volumes are 300Mi at least.
constexpr char kDriverObjects[] = R"(apiVersion: storage.k8s.io/v1
kind: CSIDriver
metadata: {name: side.csi.berth.io}
spec: {attachRequired: true, podInfoOnMount: false, storageCapacity: true, fsGroupPolicy: File,
       volumeLifecycleModes: [Persistent]}
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: side}
provisioner: side.csi.berth.io
volumeBindingMode: WaitForFirstConsumer
allowVolumeExpansion: true
reclaimPolicy: Delete
parameters: {csi.storage.k8s.io/fstype: xfs}
---
apiVersion: snapshot.storage.k8s.io/v1
kind: VolumeSnapshotClass
metadata: {name: side-snapshots}
driver: side.csi.berth.io
deletionPolicy: Delete
)";
constexpr char kClaimAndPod[] = R"(apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data}
spec:
  storageClassName: side
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 300Mi}}
---
apiVersion: v1
kind: Pod
metadata: {name: app}
spec:
  containers: [{name: app, image: busybox, volumeMounts: [{name: data, mountPath: /data}]}]
  volumes: [{name: data, persistentVolumeClaim: {claimName: data}}]
)";
constexpr char kSnapshot[] = R"(apiVersion: snapshot.storage.k8s.io/v1
kind: VolumeSnapshot
metadata: {name: snap}
spec:
  volumeSnapshotClassName: side-snapshots
  source: {persistentVolumeClaimName: data}
)";
constexpr char kRestored[] = R"(apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: restored}
spec:
  storageClassName: side
  accessModes: [ReadWriteOnce]
  dataSource: {apiGroup: snapshot.storage.k8s.io, kind: VolumeSnapshot, name: snap}
  resources: {requests: {storage: 512Mi}}
---
apiVersion: v1
kind: Pod
metadata: {name: app2}
spec:
  containers: [{name: app, image: busybox, volumeMounts: [{name: data, mountPath: /data}]}]
  volumes: [{name: data, persistentVolumeClaim: {claimName: restored}}]
)";

// A claim of berth's own default class, its pod and a snapshot of it.
constexpr char kOwnClaimPodAndSnapshot[] = R"(apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: own}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 64Mi}}
---
apiVersion: v1
kind: Pod
metadata: {name: own-app}
spec:
  containers: [{name: app, image: busybox, volumeMounts: [{name: data, mountPath: /data}]}]
  volumes: [{name: data, persistentVolumeClaim: {claimName: own}}]
---
apiVersion: snapshot.storage.k8s.io/v1
kind: VolumeSnapshot
metadata: {name: own-snap}
spec:
  volumeSnapshotClassName: berth-snapshots
  source: {persistentVolumeClaimName: own}
)";

class SidecarsTest : public BerthUpFixture {
 protected:
  void SetUp() override {
    const char* dir = std::getenv("CSI_SIDECARS");
    if (dir == nullptr || *dir == '\0') {
      GTEST_SKIP() << "CSI_SIDECARS is not set: it names a directory holding the kubernetes-csi sidecar binaries "
                      "(csi-node-driver-registrar, csi-provisioner, csi-attacher, csi-resizer, csi-snapshotter, "
                      "snapshot-controller) built from their release tags (docs/api.md); nothing to run";
    }
    BerthUpFixture::SetUp();
    if (IsSkipped()) return;
    bin_ = dir;
    for (const char* name : kSidecars) {
      ASSERT_EQ(::access((bin_ + "/" + name).c_str(), X_OK), 0)
          << "CSI_SIDECARS=" << bin_ << " has no executable " << name;
    }
    api_address_ = "127.0.0.1:0";  // HTTPS + kubeconfig for the sidecars
    pool_size_ = "1Gi";
  }
  void TearDown() override {
    // The sidecars first (so none acts on what is torn down), each by its
    // own PID: SIGTERM, then SIGKILL from ~Subprocess.
    for (auto& [name, process] : sidecars_) process->Signal(SIGTERM);
    for (auto& [name, process] : sidecars_) {
      process->Wait(absl::Seconds(10));
      if (HasFailure()) {
        std::string text = process->Output();
        if (text.size() > 4000) text = text.substr(text.size() - 4000);
        std::cout << "---- " << name << " (tail)\n" << text << "----\n";
      }
    }
    sidecars_.clear();
    BerthUpFixture::TearDown();
    if (side_driver_) {
      side_driver_->Signal(SIGTERM);
      side_driver_->Wait(absl::Seconds(20));
      side_driver_.reset();
    }
  }

  std::string SideSocket() const { return sandbox_.Join("side.sock"); }
  std::string SidePool() const { return sandbox_.Join("side-pool"); }
  std::string Kubelet() const { return data_ + "/nodes/testnode/kubelet"; }

  // berth up with the side driver left to the sidecars, then the side
  // driver and its registrar.
  void StartStack(const std::vector<std::string>& up_extra) {
    std::vector<std::string> up = {"--runtime", "none", "--sidecar-driver", kSide};
    up.insert(up.end(), up_extra.begin(), up_extra.end());
    ASSERT_NO_FATAL_FAILURE(StartUp(up));
    port_ = ApiPort();
    ASSERT_GT(port_, 0) << ReadWholeFile(data_ + "/kubeconfig");
    side_driver_ = std::make_unique<Subprocess>(
        std::vector<std::string>{BERTH_CSI_BINARY, "--endpoint=unix://" + SideSocket(), "--driver-name", kSide,
                                 "--node-id", "testnode", "--kubelet-root", Kubelet(), "--pool", SidePool(),
                                 "--pool-image", sandbox_.Join("side-pool.img"), "--pool-size", "4Gi"},
        sandbox_.Join("side-csi.log"));
    ASSERT_TRUE(Eventually([&] { return fs::exists(SideSocket()) || side_driver_->Wait(absl::ZeroDuration()); },
                           absl::Seconds(60)))
        << side_driver_->Output();
    ASSERT_FALSE(side_driver_->Wait(absl::ZeroDuration()).has_value()) << side_driver_->Output();
    StartSidecar("csi-node-driver-registrar",
                 {"--csi-address=" + SideSocket(), "--kubelet-registration-path=" + SideSocket(),
                  "--plugin-registration-path=" + Kubelet() + "/plugins_registry"});
    ASSERT_NO_FATAL_FAILURE(WaitForDriverRegistered(kSide));
  }

  // A sidecar over HTTPS with berth's kubeconfig. Leader election on Leases
  // in kube-system, with a renew deadline longer than a restart of berth up
  // takes (at the default 10 s, a leader that cannot reach its API server
  // exits, as it would on Kubernetes, to be restarted by its kubelet).
  void StartSidecar(const std::string& name, std::vector<std::string> args, bool controller = false) {
    std::vector<std::string> argv = {bin_ + "/" + name, "--v=5"};
    if (controller) {
      argv.insert(argv.end(), {"--kubeconfig=" + data_ + "/kubeconfig", "--leader-election=true",
                               "--leader-election-namespace=kube-system", "--leader-election-lease-duration=150s",
                               "--leader-election-renew-deadline=120s", "--leader-election-retry-period=2s"});
    }
    argv.insert(argv.end(), args.begin(), args.end());
    sidecars_[name] = std::make_unique<Subprocess>(argv, sandbox_.Join(name + ".log"));
  }
  void StartControllerSidecars(bool upstream_snapshot_controller) {
    const std::string csi = "--csi-address=" + SideSocket();
    // Capacity tracking too (CSIStorageCapacity in NAMESPACE, no owner):
    // with storageCapacity in the CSIDriver the scheduler places the pod
    // only where the provisioner's objects say there is room.
    ::setenv("NAMESPACE", "kube-system", 1);
    StartSidecar("csi-provisioner",
                 {csi, "--feature-gates=Topology=true", "--enable-capacity", "--capacity-ownerref-level=-1",
                  "--capacity-poll-interval=5s"},
                 true);
    StartSidecar("csi-attacher", {csi}, true);
    StartSidecar("csi-resizer", {csi}, true);
    StartSidecar("csi-snapshotter", {csi}, true);
    if (upstream_snapshot_controller) StartSidecar("snapshot-controller", {}, true);
  }
  void ExpectSidecarsAlive() {
    for (auto& [name, process] : sidecars_) {
      EXPECT_FALSE(process->Wait(absl::ZeroDuration()).has_value()) << name << " exited:\n" << process->Output();
    }
  }
  // How often the sidecar called `rpc` (its --v=5 log of each gRPC call).
  size_t Calls(const std::string& sidecar, const std::string& rpc) {
    return CountOf(sidecars_.at(sidecar)->Output(), "GRPC call: /csi.v1." + rpc + "\n");
  }

  json Items(const std::string& path) { return Get(path).value("items", json::array()); }
  // Images in the side driver's pool: "volumes" or "snapshots" (each has
  // a record beside it).
  size_t PoolImages(const std::string& sub) {
    size_t n = 0;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(SidePool() + "/" + sub, ec)) {
      n += e.path().extension() == ".img" ? 1 : 0;
    }
    return n;
  }
  // Loop devices of volumes (not of the two pool images).
  size_t VolumeLoops() {
    size_t n = 0;
    for (const auto& dev : sandbox_.Loops()) {
      std::ifstream f("/sys/block/" + fs::path(dev).filename().string() + "/loop/backing_file");
      std::string backing;
      std::getline(f, backing);
      if (!absl::EndsWith(backing, "/pool.img") && !absl::EndsWith(backing, "/side-pool.img")) ++n;
    }
    return n;
  }

  // The whole flow; `upstream_snapshot_controller` runs snapshot-controller
  // with berth's turned off.
  void RunFlow(bool upstream_snapshot_controller) {
    std::vector<std::string> up_extra;
    if (upstream_snapshot_controller) up_extra.push_back("--no-snapshot-controller");
    ASSERT_NO_FATAL_FAILURE(StartStack(up_extra));
    StartControllerSidecars(upstream_snapshot_controller);
    Berth({"apply", "-f", WriteFile("driver.yaml", kDriverObjects)});
    // csi-provisioner publishes the node's capacity for the class.
    ASSERT_TRUE(Eventually(
        [&] {
          for (const auto& c : Items("/apis/storage.k8s.io/v1/namespaces/kube-system/csistoragecapacities")) {
            if (c.value("storageClassName", "") == "side" && c.contains("capacity")) return true;
          }
          return false;
        },
        absl::Seconds(60)))
        << Items("/apis/storage.k8s.io/v1/csistoragecapacities").dump();
    Berth({"apply", "-f", WriteFile("app.yaml", kClaimAndPod)});

    // Provisioned by csi-provisioner (WaitForFirstConsumer: after the
    // scheduler picked the node), attached by csi-attacher, staged and
    // published by berth's node agent.
    ASSERT_TRUE(Eventually([&] { return Running("app"); }, absl::Seconds(120))) << Pod("app").dump();
    const json pv = Get("/api/v1/persistentvolumes/" + Claim("data")["spec"]["volumeName"].get<std::string>());
    EXPECT_EQ(pv["spec"]["csi"]["driver"], kSide);
    EXPECT_EQ(pv["metadata"]["annotations"].value("pv.kubernetes.io/provisioned-by", ""), kSide);
    EXPECT_GE(Calls("csi-provisioner", "Controller/CreateVolume"), 1u);
    EXPECT_GE(Calls("csi-attacher", "Controller/ControllerPublishVolume"), 1u);
    EXPECT_FALSE(absl::StrContains(up_->Output(), std::string("controllers running for driver ") + kSide));
    const std::string mount = TargetOf("app", "data");
    ASSERT_TRUE(Mounted(mount)) << mount;
    { std::ofstream(mount + "/hello") << "written before the snapshot"; }
    ::sync();
    // Leader election: each sidecar holds its Lease.
    const json leases = Items("/apis/coordination.k8s.io/v1/namespaces/kube-system/leases");
    EXPECT_GE(leases.size(), upstream_snapshot_controller ? 5u : 4u) << leases.dump();

    // berth up restarts on the same port: the sidecars' watches recover
    // (410 Gone → relist where they fell behind), none restarts.
    ASSERT_EQ(StopUp(SIGTERM), 0);
    api_address_ = "127.0.0.1:" + std::to_string(port_);
    std::vector<std::string> up = {"--runtime", "none", "--sidecar-driver", kSide};
    up.insert(up.end(), up_extra.begin(), up_extra.end());
    ASSERT_NO_FATAL_FAILURE(StartUp(up));
    ASSERT_TRUE(Eventually([&] { return Running("app"); }, absl::Seconds(60)));

    // Online expansion: csi-resizer grows the volume and the PV, the node
    // agent the file system.
    auto patched =
        client_->Call("PATCH", "/api/v1/namespaces/default/persistentvolumeclaims/data",
                      R"({"spec":{"resources":{"requests":{"storage":"512Mi"}}}})", "application/merge-patch+json");
    ASSERT_TRUE(patched.ok() && patched->code == 200) << (patched.ok() ? patched->body : patched.status().ToString());
    EXPECT_TRUE(Eventually(
        [&] {
          return Claim("data")["status"].value("capacity", json::object()).value("storage", "") == "512Mi" &&
                 Get("/api/v1/persistentvolumes/" + pv["metadata"]["name"].get<std::string>())["spec"]["capacity"]
                         .value("storage", "") == "512Mi";
        },
        absl::Seconds(120)))
        << Claim("data").dump();
    EXPECT_GE(Calls("csi-resizer", "Controller/ControllerExpandVolume"), 1u);

    // A snapshot: VolumeSnapshot → content (berth's snapshot controller or
    // the upstream one) → CreateSnapshot by csi-snapshotter → ready.
    Berth({"apply", "-f", WriteFile("snapshot.yaml", kSnapshot)});
    ASSERT_TRUE(Eventually(
        [&] {
          return Get("/apis/snapshot.storage.k8s.io/v1/namespaces/default/volumesnapshots/snap")
              .value("status", json::object())
              .value("readyToUse", false);
        },
        absl::Seconds(120)))
        << Get("/apis/snapshot.storage.k8s.io/v1/namespaces/default/volumesnapshots/snap").dump();
    EXPECT_GE(Calls("csi-snapshotter", "Controller/CreateSnapshot"), 1u);
    EXPECT_EQ(PoolImages("snapshots"), 1u);

    // Restored from it, with the data.
    Berth({"apply", "-f", WriteFile("restored.yaml", kRestored)});
    ASSERT_TRUE(Eventually([&] { return Running("app2"); }, absl::Seconds(120))) << Pod("app2").dump();
    EXPECT_EQ(ReadWholeFile(TargetOf("app2", "restored") + "/hello"), "written before the snapshot");
    ExpectSidecarsAlive();

    // Everything deleted: nothing left behind.
    Berth({"delete", "pod", "app", "app2"});
    Berth({"delete", "volumesnapshot", "snap"});
    Berth({"delete", "pvc", "data", "restored"});
    EXPECT_TRUE(Eventually([&] { return Items("/api/v1/persistentvolumes").empty(); }, absl::Seconds(120)))
        << Items("/api/v1/persistentvolumes").dump();
    EXPECT_TRUE(
        Eventually([&] { return Items("/apis/storage.k8s.io/v1/volumeattachments").empty(); }, absl::Seconds(60)))
        << Items("/apis/storage.k8s.io/v1/volumeattachments").dump();
    EXPECT_TRUE(Eventually([&] { return Items("/apis/snapshot.storage.k8s.io/v1/volumesnapshotcontents").empty(); },
                           absl::Seconds(60)))
        << Items("/apis/snapshot.storage.k8s.io/v1/volumesnapshotcontents").dump();
    EXPECT_TRUE(
        Eventually([&] { return PoolImages("volumes") == 0 && PoolImages("snapshots") == 0; }, absl::Seconds(30)));
    EXPECT_TRUE(Eventually([&] { return VolumeMounts().empty() && VolumeLoops() == 0; }, absl::Seconds(30)))
        << ::testing::PrintToString(VolumeMounts());
    EXPECT_GE(Calls("csi-provisioner", "Controller/DeleteVolume"), 2u);
    EXPECT_GE(Calls("csi-snapshotter", "Controller/DeleteSnapshot"), 1u);
    EXPECT_GE(Calls("csi-attacher", "Controller/ControllerUnpublishVolume"), 2u);
    ExpectSidecarsAlive();
  }

  std::string bin_;
  int port_ = 0;
  std::unique_ptr<Subprocess> side_driver_;
  std::map<std::string, std::unique_ptr<Subprocess>> sidecars_;
};

TEST_F(SidecarsTest, SidecarsServeADriverThroughBerthUp) { RunFlow(/*upstream_snapshot_controller=*/false); }

TEST_F(SidecarsTest, UpstreamSnapshotControllerWithNoSnapshotController) {
  RunFlow(/*upstream_snapshot_controller=*/true);
  if (HasFatalFailure()) return;
  // berth's own driver under the upstream snapshot-controller: berth's
  // content handling takes the contents it makes.
  Berth({"apply", "-f", WriteFile("own.yaml", kOwnClaimPodAndSnapshot)});
  ASSERT_TRUE(Eventually([&] { return Running("own-app"); }, absl::Seconds(120))) << Pod("own-app").dump();
  const std::string own = "/apis/snapshot.storage.k8s.io/v1/namespaces/default/volumesnapshots/own-snap";
  EXPECT_TRUE(Eventually([&] { return Get(own).value("status", json::object()).value("readyToUse", false); },
                         absl::Seconds(120)))
      << Get(own).dump() << Items("/apis/snapshot.storage.k8s.io/v1/volumesnapshotcontents").dump();
  Berth({"delete", "-f", sandbox_.Join("own.yaml")});
  EXPECT_TRUE(Eventually([&] { return Items("/apis/snapshot.storage.k8s.io/v1/volumesnapshotcontents").empty(); },
                         absl::Seconds(60)))
      << Items("/apis/snapshot.storage.k8s.io/v1/volumesnapshotcontents").dump();
  EXPECT_TRUE(Eventually([&] { return Items("/api/v1/persistentvolumes").empty(); }, absl::Seconds(120)));
  ExpectSidecarsAlive();
}

}  // namespace
}  // namespace berth::testing
