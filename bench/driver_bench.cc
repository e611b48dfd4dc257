// berth-csi storage path figures (run as root; creates and removes its own
// pools under /tmp):
//   - CreateVolume p50 (1 GiB thin volumes)
//   - NodeStageVolume p50 including mkfs.ext4 of a blank 1 GiB volume
//   - CreateSnapshot of a staged volume (freeze, clone, thaw) with 256 MiB
//     and with 2 GiB written, on a reflink pool (XFS image) and on a
//     non-reflink pool (the host filesystem), with the 2 GiB / 256 MiB ratio.
//
//   build/release/bench/driver_bench [--skip-copy-pool]
#include <fcntl.h>
#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "common/exec.h"
#include "driver/driver.h"
#include "driver/testing/sandbox.h"
#include "spdlog/spdlog.h"

namespace {

using berth::driver::Driver;
using Clock = std::chrono::steady_clock;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double P50(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

::csi::v1::VolumeCapability Cap() {
  ::csi::v1::VolumeCapability c;
  c.mutable_mount()->set_fs_type("ext4");
  c.mutable_access_mode()->set_mode(::csi::v1::VolumeCapability::AccessMode::SINGLE_NODE_WRITER);
  return c;
}

void Check(const absl::Status& st, const char* what) {
  if (!st.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, st.ToString().c_str());
    std::exit(1);
  }
}

std::string CreateVolume(Driver& d, const std::string& name, int64_t size) {
  ::csi::v1::CreateVolumeRequest req;
  req.set_name(name);
  req.mutable_capacity_range()->set_required_bytes(size);
  *req.add_volume_capabilities() = Cap();
  ::csi::v1::CreateVolumeResponse resp;
  Check(d.controller().DoCreateVolume(req, &resp), "CreateVolume");
  return resp.volume().volume_id();
}

std::string Stage(Driver& d, const std::string& kubelet, const std::string& vol) {
  ::csi::v1::NodeStageVolumeRequest req;
  req.set_volume_id(vol);
  req.set_staging_target_path(kubelet + "/staging/" + vol);
  *req.mutable_volume_capability() = Cap();
  Check(d.node().DoStage(req), "NodeStageVolume");
  return req.staging_target_path();
}

void Unstage(Driver& d, const std::string& vol, const std::string& staging) {
  ::csi::v1::NodeUnstageVolumeRequest req;
  req.set_volume_id(vol);
  req.set_staging_target_path(staging);
  Check(d.node().DoUnstage(req), "NodeUnstageVolume");
}

void Delete(Driver& d, const std::string& vol) {
  ::csi::v1::DeleteVolumeRequest req;
  req.set_volume_id(vol);
  Check(d.controller().DoDeleteVolume(req), "DeleteVolume");
}

// Appends `mib` MiB of random data to `path` and syncs it.
void Fill(const std::string& path, int mib) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  std::mt19937_64 gen(mib);
  std::vector<uint64_t> buf((1 << 20) / 8);
  for (int i = 0; i < mib; ++i) {
    for (auto& w : buf) w = gen();
    if (::write(fd, buf.data(), 1 << 20) != 1 << 20) std::exit(1);
  }
  ::fsync(fd);
  ::close(fd);
}

double SnapshotMs(Driver& d, const std::string& vol, const std::string& name) {
  ::csi::v1::CreateSnapshotRequest req;
  req.set_name(name);
  req.set_source_volume_id(vol);
  ::csi::v1::CreateSnapshotResponse resp;
  const auto t0 = Clock::now();
  Check(d.controller().DoCreateSnapshot(req, &resp), "CreateSnapshot");
  const double ms = Ms(Clock::now() - t0);
  ::csi::v1::DeleteSnapshotRequest del;
  del.set_snapshot_id(resp.snapshot().snapshot_id());
  Check(d.controller().DoDeleteSnapshot(del), "DeleteSnapshot");
  return ms;
}

void RunPool(const char* label, berth::driver::DriverOptions o, Driver::Deps deps, bool lifecycle) {
  auto opened = Driver::Open(o, deps);
  Check(opened.status(), "open pool");
  Driver& d = **opened;
  const std::string kubelet = std::filesystem::canonical(o.kubelet_root).string();
  std::printf("== %s (reflink %s)\n", label, d.pool().reflink() ? "yes" : "no");

  if (lifecycle) {
    std::vector<double> create, stage;
    std::vector<std::string> vols;
    for (int i = 0; i < 30; ++i) {
      const auto t0 = Clock::now();
      vols.push_back(CreateVolume(d, "bench-create-" + std::to_string(i), 1LL << 30));
      create.push_back(Ms(Clock::now() - t0));
    }
    for (int i = 0; i < 15; ++i) {
      const auto t0 = Clock::now();
      const std::string staging = Stage(d, kubelet, vols[i]);
      stage.push_back(Ms(Clock::now() - t0));
      Unstage(d, vols[i], staging);
    }
    for (const auto& v : vols) Delete(d, v);
    std::printf("CreateVolume (1Gi thin)         p50 %8.2f ms  (n=%zu)\n", P50(create), create.size());
    std::printf("NodeStageVolume (mkfs.ext4 1Gi) p50 %8.2f ms  (n=%zu)\n", P50(stage), stage.size());
  }

  const std::string vol = CreateVolume(d, "bench-snap", 4LL << 30);
  const std::string staging = Stage(d, kubelet, vol);
  Fill(staging + "/data", 256);
  std::vector<double> small, large;
  for (int i = 0; i < 5; ++i) small.push_back(SnapshotMs(d, vol, "bench-s-" + std::to_string(i)));
  Fill(staging + "/data", 2048 - 256);
  for (int i = 0; i < 5; ++i) large.push_back(SnapshotMs(d, vol, "bench-l-" + std::to_string(i)));
  std::printf("CreateSnapshot, 256Mi written   p50 %8.2f ms\n", P50(small));
  std::printf("CreateSnapshot, 2Gi written     p50 %8.2f ms\n", P50(large));
  std::printf("ratio 2Gi / 256Mi                   %8.2f\n", P50(large) / P50(small));
  Unstage(d, vol, staging);
  Delete(d, vol);
}

}  // namespace

int main(int argc, char** argv) {
  if (::geteuid() != 0) {
    std::fprintf(stderr, "driver_bench needs root (loop devices, mounts)\n");
    return 1;
  }
  const bool skip_copy = argc > 1 && std::strcmp(argv[1], "--skip-copy-pool") == 0;
  spdlog::set_level(spdlog::level::warn);
  berth::LinuxCommandRunner runner;
  berth::driver::LinuxLoopDevices loops;
  berth::driver::LinuxMounter mounter;
  berth::driver::LinuxFormatter formatter(runner);
  berth::driver::LinuxFreezer freezer;
  Driver::Deps deps{&loops, &mounter, &formatter, &freezer};
  berth::testing::MountSandbox sandbox;  // unmounts and detaches everything at exit

  berth::driver::DriverOptions o;
  o.node_id = "bench";
  o.endpoint = "unix:///unused.sock";
  o.kubelet_root = sandbox.Join("kubelet");
  o.pool = sandbox.Join("xfs-pool");
  o.pool_image = sandbox.Join("xfs-pool.img");
  o.pool_size_bytes = 64LL << 30;
  RunPool("XFS pool image", o, deps, /*lifecycle=*/true);

  if (!skip_copy) {
    o.pool = sandbox.Join("host-pool");
    o.pool_image.clear();
    RunPool("host filesystem pool", o, deps, /*lifecycle=*/false);
  }
  return 0;
}
