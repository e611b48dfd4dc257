// Changed-block tracking with a driver nobody here wrote: the upstream
// csi-driver-host-path (v1.16.1, run with --enable-snapshot-metadata) as an
// --external-driver of `berth up`, next to berth's own berth-csi.
//
// When CSI_HOSTPATH_PLUGIN names the hostpathplugin binary (built from the
// release tag; docs/api.md), the test runs, as root:
//   hostpathplugin --drivername hostpath.csi.k8s.io --enable-snapshot-metadata
//                  (its state directory in the sandbox: volumes are files
//                   there, a block volume's loop device backed by one)
//   berth up --runtime none --external-driver hostpath.csi.k8s.io=unix://...
// and makes one block claim of each driver, each used by a pod (the node
// agent publishes the volume as a device file under the pod's
// volumeDevices directory), writes the same bytes through both devices
// (8 MiB at three offsets), has berth's snapshot controller cut s1, rewrites
// 1 MiB and writes 1 MiB at a new offset, cuts s2, and asks berth's API
// through `berth snapshot allocated|diff -o json`, which calls the driver
// that owns each snapshot. hostpath answers FIXED_LENGTH 4 KiB blocks found by
// reading and comparing its snapshot files; berth-csi VARIABLE_LENGTH ranges
// from the extent maps. Both must cover the same byte ranges (4 KiB-rounded):
// allocated the 8 MiB written, the delta the 2 MiB. Then everything is
// deleted and hostpath holds no volume or snapshot. Without
// CSI_HOSTPATH_PLUGIN the test says why and is skipped.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "../integration/up_fixture.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace berth::testing {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr char kHostpath[] = "hostpath.csi.k8s.io";
constexpr int64_t kMiB = 1 << 20;
constexpr int64_t kBlock = 4096;  // hostpath's FIXED_LENGTH block (state.BlockSizeBytes)

// The CSIDriver as hostpath's own deployment makes it (no attach: run
// without --enable-attach), an Immediate class per driver and a snapshot
// class for hostpath (berth's default one, berth-snapshots, serves berth-csi).
constexpr char kObjects[] = R"(apiVersion: storage.k8s.io/v1
kind: CSIDriver
metadata: {name: hostpath.csi.k8s.io}
spec: {attachRequired: false, podInfoOnMount: true, storageCapacity: false, fsGroupPolicy: File,
       volumeLifecycleModes: [Persistent, Ephemeral]}
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: hostpath}
provisioner: hostpath.csi.k8s.io
volumeBindingMode: Immediate
reclaimPolicy: Delete
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: berth-now}
provisioner: local.csi.berth.io
volumeBindingMode: Immediate
reclaimPolicy: Delete
---
apiVersion: snapshot.storage.k8s.io/v1
kind: VolumeSnapshotClass
metadata: {name: hostpath-snapshots}
driver: hostpath.csi.k8s.io
deletionPolicy: Delete
)";

// A 64Mi block claim of `cls` named `name` and a pod using it.
std::string ClaimAndPod(const std::string& name, const std::string& cls) {
  return "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: " + name +
         "}\nspec:\n  storageClassName: " + cls +
         "\n  volumeMode: Block\n  accessModes: [ReadWriteOnce]\n  resources: {requests: {storage: 64Mi}}\n"
         "---\napiVersion: v1\nkind: Pod\nmetadata: {name: " +
         name +
         "-app}\nspec:\n  containers: [{name: app, image: busybox, volumeDevices: [{name: data, devicePath: "
         "/dev/xvda}]}]\n  volumes: [{name: data, persistentVolumeClaim: {claimName: " +
         name + "}}]\n";
}

using Ranges = std::vector<std::pair<int64_t, int64_t>>;  // [begin, end), sorted, merged

// The byte ranges an answer covers, each widened to whole 4 KiB blocks,
// adjacent and overlapping ones merged: FIXED_LENGTH and VARIABLE_LENGTH
// answers of the same blocks give the same ranges.
Ranges Covered(const json& answer) {
  Ranges in;
  for (const auto& b : answer.value("blocks", json::array())) {
    const int64_t at = b.value("byteOffset", int64_t{0}), n = b.value("sizeBytes", int64_t{0});
    in.emplace_back(at / kBlock * kBlock, (at + n + kBlock - 1) / kBlock * kBlock);
  }
  std::sort(in.begin(), in.end());
  Ranges out;
  for (const auto& r : in) {
    if (!out.empty() && r.first <= out.back().second) {
      out.back().second = std::max(out.back().second, r.second);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

std::string Print(const Ranges& ranges) {
  std::string out;
  for (const auto& [b, e] : ranges) out += "[" + std::to_string(b) + ", " + std::to_string(e) + ") ";
  return out;
}

class HostpathSnapshotMetadataTest : public BerthUpFixture {
 protected:
  void SetUp() override {
    const char* binary = std::getenv("CSI_HOSTPATH_PLUGIN");
    if (binary == nullptr || *binary == '\0') {
      GTEST_SKIP() << "CSI_HOSTPATH_PLUGIN is not set: it names the hostpathplugin binary of "
                      "kubernetes-csi/csi-driver-host-path v1.16.1, built from its release tag (docs/api.md); "
                      "nothing to run";
    }
    BerthUpFixture::SetUp();
    if (IsSkipped()) return;
    binary_ = binary;
    ASSERT_EQ(::access(binary_.c_str(), X_OK), 0) << "CSI_HOSTPATH_PLUGIN=" << binary_ << " is not executable";
    state_ = sandbox_.Join("hostpath");
  }
  void TearDown() override {
    BerthUpFixture::TearDown();
    // Then the driver, by its own PID (SIGKILL from ~Subprocess if it
    // lingers); the sandbox unmounts its publications and detaches the loop
    // devices of its volume files.
    if (hostpath_) {
      hostpath_->Signal(SIGTERM);
      hostpath_->Wait(absl::Seconds(20));
      if (HasFailure()) {
        std::string text = hostpath_->Output();
        if (text.size() > 6000) text = text.substr(text.size() - 6000);
        std::cout << "---- hostpathplugin (tail)\n" << text << "----\n";
      }
      hostpath_.reset();
    }
  }

  std::string Socket() const { return sandbox_.Join("hostpath.sock"); }

  void StartHostpath() {
    hostpath_ = std::make_unique<Subprocess>(
        std::vector<std::string>{binary_, "--endpoint=unix://" + Socket(), "--drivername=" + std::string(kHostpath),
                                 "--nodeid=" + node_, "--statedir=" + state_, "--enable-snapshot-metadata", "--v=4"},
        sandbox_.Join("hostpath.log"));
    ASSERT_TRUE(
        Eventually([&] { return fs::exists(Socket()) || hostpath_->Wait(absl::ZeroDuration()); }, absl::Seconds(30)))
        << hostpath_->Output();
    ASSERT_FALSE(hostpath_->Wait(absl::ZeroDuration()).has_value()) << hostpath_->Output();
  }

  // hostpath's volumes or snapshots, from its state file.
  json HostpathState(const std::string& what) {
    json state = json::parse(ReadWholeFile(state_ + "/state.json"), nullptr, false);
    if (!state.is_object() || !state[what].is_array()) return json::array();
    return state[what];
  }

  // The pod's device file for its block claim.
  std::string Device(const std::string& claim) {
    return data_ + "/nodes/" + node_ + "/kubelet/pods/" + Pod(claim + "-app")["metadata"].value("uid", "") +
           "/volumeDevices/kubernetes.io~csi/" + Claim(claim)["spec"].value("volumeName", "");
  }
  // `n` bytes of `fill` at `offset` of both claims' devices, flushed.
  void WriteBoth(int64_t offset, int64_t n, char fill) {
    const std::string data(static_cast<size_t>(n), fill);
    for (const char* claim : {"hp", "own"}) {
      const std::string path = Device(claim);
      const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
      ASSERT_GE(fd, 0) << path << ": " << std::strerror(errno);
      EXPECT_EQ(::pwrite(fd, data.data(), data.size(), offset), static_cast<ssize_t>(n)) << path;
      EXPECT_EQ(::fsync(fd), 0) << path;
      ::close(fd);
    }
  }
  // Snapshots `name` of both claims: hp-NAME and own-NAME, ready.
  void SnapshotBoth(const std::string& name) {
    for (auto [claim, cls] : {std::pair{"hp", "hostpath-snapshots"}, std::pair{"own", "berth-snapshots"}}) {
      const std::string snap = std::string(claim) + "-" + name;
      Berth({"apply", "-f",
             WriteFile(snap + ".yaml",
                       "apiVersion: snapshot.storage.k8s.io/v1\nkind: VolumeSnapshot\nmetadata: {name: " + snap +
                           "}\nspec:\n  volumeSnapshotClassName: " + cls +
                           "\n  source: {persistentVolumeClaimName: " + claim + "}\n")});
    }
    for (const char* claim : {"hp", "own"}) {
      Berth({"wait", "volumesnapshot/" + std::string(claim) + "-" + name, "--for", "jsonpath={.status.readyToUse}=true",
             "--timeout", "60s"});
    }
  }
  json Answer(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"snapshot"};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.insert(argv.end(), {"-o", "json"});
    auto [rc, out] = RunBerth(argv);
    EXPECT_EQ(rc, 0) << out;
    json answer = json::parse(out, nullptr, false);
    EXPECT_TRUE(answer.is_object()) << out;
    return answer.is_object() ? answer : json::object();
  }

  std::string binary_;
  std::string state_;
  std::unique_ptr<Subprocess> hostpath_;
};

TEST_F(HostpathSnapshotMetadataTest, HostpathAndBerthCsiCoverTheSameChangedRanges) {
  ASSERT_NO_FATAL_FAILURE(StartHostpath());
  ASSERT_NO_FATAL_FAILURE(
      StartUp({"--runtime", "none", "--external-driver", std::string(kHostpath) + "=unix://" + Socket()}));
  ASSERT_NO_FATAL_FAILURE(WaitForDriverRegistered(kHostpath));
  Berth({"apply", "-f", WriteFile("objects.yaml", kObjects)});
  Berth({"apply", "-f", WriteFile("hp.yaml", ClaimAndPod("hp", "hostpath"))});
  Berth({"apply", "-f", WriteFile("own.yaml", ClaimAndPod("own", "berth-now"))});
  for (const char* claim : {"hp", "own"}) {
    ASSERT_TRUE(Eventually([&] { return Running(std::string(claim) + "-app"); }, absl::Seconds(90)))
        << Pod(std::string(claim) + "-app").dump() << "\n"
        << Claim(claim).dump();
    ASSERT_TRUE(Mounted(Device(claim))) << Device(claim);
  }
  ASSERT_EQ(HostpathState("Volumes").size(), 1u) << HostpathState("Volumes").dump();

  // 8 MiB at three offsets → s1; 1 MiB rewritten and 1 MiB new → s2.
  ASSERT_NO_FATAL_FAILURE(WriteBoth(0, 2 * kMiB, 'a'));
  ASSERT_NO_FATAL_FAILURE(WriteBoth(20 * kMiB, 4 * kMiB, 'a'));
  ASSERT_NO_FATAL_FAILURE(WriteBoth(40 * kMiB, 2 * kMiB, 'a'));
  ASSERT_NO_FATAL_FAILURE(SnapshotBoth("s1"));
  ASSERT_NO_FATAL_FAILURE(WriteBoth(21 * kMiB, kMiB, 'b'));
  ASSERT_NO_FATAL_FAILURE(WriteBoth(50 * kMiB, kMiB, 'c'));
  ASSERT_NO_FATAL_FAILURE(SnapshotBoth("s2"));
  ASSERT_EQ(HostpathState("Snapshots").size(), 2u) << HostpathState("Snapshots").dump();

  const Ranges written = {{0, 2 * kMiB}, {20 * kMiB, 24 * kMiB}, {40 * kMiB, 42 * kMiB}};
  const Ranges changed = {{21 * kMiB, 22 * kMiB}, {50 * kMiB, 51 * kMiB}};

  // Allocated: both cover the 8 MiB written, nothing else.
  const json hp_allocated = Answer({"allocated", "hp-s1"});
  const json own_allocated = Answer({"allocated", "own-s1"});
  EXPECT_EQ(hp_allocated.value("blockMetadataType", ""), "FIXED_LENGTH");
  EXPECT_EQ(own_allocated.value("blockMetadataType", ""), "VARIABLE_LENGTH");
  for (const auto& b : hp_allocated.value("blocks", json::array())) ASSERT_EQ(b.value("sizeBytes", 0), kBlock) << b;
  EXPECT_EQ(hp_allocated.value("volumeCapacityBytes", int64_t{0}), 64 * kMiB);
  EXPECT_EQ(own_allocated.value("volumeCapacityBytes", int64_t{0}), 64 * kMiB);
  EXPECT_EQ(Covered(hp_allocated), written) << Print(Covered(hp_allocated));
  EXPECT_EQ(Covered(own_allocated), written) << Print(Covered(own_allocated));

  // Delta: both cover exactly the rewritten and the new MiB.
  const json hp_delta = Answer({"diff", "hp-s1", "hp-s2"});
  const json own_delta = Answer({"diff", "own-s1", "own-s2"});
  EXPECT_EQ(hp_delta.value("blockMetadataType", ""), "FIXED_LENGTH");
  EXPECT_EQ(Covered(hp_delta), changed) << Print(Covered(hp_delta));
  EXPECT_EQ(Covered(own_delta), changed) << Print(Covered(own_delta));
  EXPECT_EQ(Covered(hp_delta), Covered(own_delta));
  RecordProperty("hostpath_allocated_tuples", static_cast<int>(hp_allocated.value("blocks", json::array()).size()));
  RecordProperty("berth_allocated_tuples", static_cast<int>(own_allocated.value("blocks", json::array()).size()));
  RecordProperty("hostpath_delta_tuples", static_cast<int>(hp_delta.value("blocks", json::array()).size()));
  RecordProperty("berth_delta_tuples", static_cast<int>(own_delta.value("blocks", json::array()).size()));

  // A delta across drivers is refused by berth's API before any driver is
  // asked; an unknown snapshot is NotFound.
  auto [rc, across] = RunBerth({"snapshot", "diff", "own-s1", "hp-s2"});
  EXPECT_EQ(rc, 1) << across;
  EXPECT_NE(across.find("of hostpath.csi.k8s.io: a delta is between two snapshots of one volume"), std::string::npos)
      << across;
  auto [rc2, missing] = RunBerth({"snapshot", "allocated", "hp-nope"});
  EXPECT_EQ(rc2, 1);
  EXPECT_NE(missing.find("NotFound"), std::string::npos) << missing;

  // Everything deleted through berth: hostpath keeps no snapshot or volume.
  Berth({"delete", "volumesnapshot", "hp-s1", "hp-s2", "own-s1", "own-s2"});
  Berth({"delete", "pod", "hp-app", "own-app"});
  Berth({"delete", "pvc", "hp", "own"});
  EXPECT_TRUE(Eventually([&] { return Get("/api/v1/persistentvolumes")["items"].empty(); }, absl::Seconds(90)))
      << Get("/api/v1/persistentvolumes").dump();
  EXPECT_TRUE(Eventually([&] { return HostpathState("Snapshots").empty() && HostpathState("Volumes").empty(); },
                         absl::Seconds(30)))
      << ReadWholeFile(state_ + "/state.json");
  EXPECT_TRUE(Eventually([&] { return VolumeMounts().empty(); }, absl::Seconds(30)))
      << ::testing::PrintToString(VolumeMounts());
  EXPECT_EQ(StopUp(SIGTERM), 0);
}

}  // namespace
}  // namespace berth::testing
