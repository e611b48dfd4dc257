// berth-csi restarted as Kubernetes restarts a container: each run in a mount
// namespace of its own, where the host's pool directory is a bind mount
// (hostPath with Bidirectional propagation) and the kubelet root is shared
// with the host. The first run attaches and mounts; it is killed; its
// namespace goes with it. The kernel then names the run's loop devices'
// backing files relative to a mount that no longer exists ("/pool.img",
// "/volumes/vol-….img"), so the second run must find its pool and volumes by
// device and inode: it opens the pool, serves the staged volumes, detaches
// only what nobody uses, and everything comes down cleanly afterwards.
#include <fcntl.h>
#include <linux/loop.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "driver_process.h"
#include "gmock/gmock.h"

namespace berth::testing {
namespace {

namespace fs = std::filesystem;
using ::csi::v1::VolumeCapability;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The backing file name /sys shows for `device` ("" if detached).
std::string KernelName(const std::string& device) {
  std::string name = ReadAll("/sys/block/" + fs::path(device).filename().string() + "/loop/backing_file");
  while (!name.empty() && name.back() == '\n') name.pop_back();
  return name;
}

bool Attached(const std::string& device) { return !KernelName(device).empty(); }

class DriverRestartTest : public ::testing::Test {
 protected:
  void SetUp() override {
    BERTH_REQUIRE_ROOT();
    if (::access("/usr/bin/unshare", X_OK) != 0) GTEST_SKIP() << "needs unshare (util-linux)";
    // The host: the plugin directory holding the pool and the kubelet root,
    // each a shared mount (kubelet makes its root rshared; a hostPath with
    // Bidirectional propagation needs its source shared).
    for (const std::string& d : {host(), sandbox_.Join("kubelet"), container()}) {
      fs::create_directories(d);
    }
    for (const std::string& d : {host(), sandbox_.Join("kubelet")}) {
      ASSERT_EQ(::mount(d.c_str(), d.c_str(), nullptr, MS_BIND, nullptr), 0) << d;
      ASSERT_EQ(::mount(nullptr, d.c_str(), nullptr, MS_SHARED, nullptr), 0) << d;
    }
    driver_ = std::make_unique<DriverProcess>(sandbox_);
    // Each run: a new mount namespace (copies of shared mounts stay peers of
    // the host's), the host directory bound recursively where the container
    // sees it, as kubelet binds a hostPath volume.
    driver_->SetWrapper(
        {"/usr/bin/unshare", "-m", "--propagation", "unchanged"},
        "mount --rbind " + DriverProcess::ShellQuote(host()) + " " + DriverProcess::ShellQuote(container()));
    driver_->SetPool(container() + "/pool", container() + "/pool.img");
  }

  void TearDown() override {
    if (driver_ && HasFailure()) std::cerr << driver_->Log();
  }

  std::string host() const { return sandbox_.Join("host"); }
  std::string container() const { return sandbox_.Join("container"); }
  std::string Staging(const std::string& v) const { return sandbox_.Join("kubelet/staging/" + v); }
  std::string Target(const std::string& v) const { return sandbox_.Join("kubelet/pods/p1/volumes/" + v + "/mount"); }

  std::string Create(const std::string& name, const VolumeCapability& cap) {
    ::csi::v1::CreateVolumeRequest req;
    req.set_name(name);
    req.mutable_capacity_range()->set_required_bytes(64 << 20);
    *req.add_volume_capabilities() = cap;
    ::csi::v1::CreateVolumeResponse resp;
    grpc::Status st = driver_->controller().CreateVolume(Ctx().get(), req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp.volume().volume_id();
  }

  grpc::Status Stage(const std::string& v, const VolumeCapability& cap) {
    fs::create_directories(Staging(v));
    ::csi::v1::NodeStageVolumeRequest req;
    req.set_volume_id(v);
    req.set_staging_target_path(Staging(v));
    *req.mutable_volume_capability() = cap;
    ::csi::v1::NodeStageVolumeResponse resp;
    return driver_->node().NodeStageVolume(Ctx().get(), req, &resp);
  }

  grpc::Status Publish(const std::string& v, const VolumeCapability& cap) {
    fs::create_directories(fs::path(Target(v)).parent_path());
    ::csi::v1::NodePublishVolumeRequest req;
    req.set_volume_id(v);
    req.set_staging_target_path(Staging(v));
    req.set_target_path(Target(v));
    *req.mutable_volume_capability() = cap;
    ::csi::v1::NodePublishVolumeResponse resp;
    return driver_->node().NodePublishVolume(Ctx().get(), req, &resp);
  }

  grpc::Status Unpublish(const std::string& v) {
    ::csi::v1::NodeUnpublishVolumeRequest req;
    req.set_volume_id(v);
    req.set_target_path(Target(v));
    ::csi::v1::NodeUnpublishVolumeResponse resp;
    return driver_->node().NodeUnpublishVolume(Ctx().get(), req, &resp);
  }

  grpc::Status Unstage(const std::string& v) {
    ::csi::v1::NodeUnstageVolumeRequest req;
    req.set_volume_id(v);
    req.set_staging_target_path(Staging(v));
    ::csi::v1::NodeUnstageVolumeResponse resp;
    return driver_->node().NodeUnstageVolume(Ctx().get(), req, &resp);
  }

  grpc::Status Delete(const std::string& v) {
    ::csi::v1::DeleteVolumeRequest req;
    req.set_volume_id(v);
    ::csi::v1::DeleteVolumeResponse resp;
    return driver_->controller().DeleteVolume(Ctx().get(), req, &resp);
  }

  ::csi::v1::NodeGetVolumeStatsResponse Stats(const std::string& v, const std::string& path) {
    ::csi::v1::NodeGetVolumeStatsRequest req;
    req.set_volume_id(v);
    req.set_volume_path(path);
    ::csi::v1::NodeGetVolumeStatsResponse resp;
    grpc::Status st = driver_->node().NodeGetVolumeStats(Ctx().get(), req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp;
  }

  // The loop device whose mount is at `target` in this (the host's)
  // namespace, "" if none.
  std::string MountedDevice(const std::string& target) {
    std::ifstream in("/proc/self/mountinfo");
    std::string line, found;
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string id, parent, dev, root, mp, opts, field;
      f >> id >> parent >> dev >> root >> mp >> opts;
      if (mp != target) continue;
      while (f >> field && field != "-") {
      }
      std::string type, source;
      f >> type >> source;
      found = source;
    }
    return found;
  }

  // Attaches `image` from the host, not autoclear: what a crash between
  // attaching a block volume and recording it leaves behind.
  std::string AttachFromHost(const std::string& image) {
    int ctl = ::open("/dev/loop-control", O_RDWR | O_CLOEXEC);
    EXPECT_GE(ctl, 0);
    const int n = ::ioctl(ctl, LOOP_CTL_GET_FREE);
    ::close(ctl);
    const std::string dev = "/dev/loop" + std::to_string(n);
    int file = ::open(image.c_str(), O_RDWR | O_CLOEXEC);
    int loop = ::open(dev.c_str(), O_RDWR | O_CLOEXEC);
    EXPECT_GE(file, 0) << image;
    EXPECT_GE(loop, 0) << dev;
    EXPECT_EQ(::ioctl(loop, LOOP_SET_FD, file), 0) << dev;
    ::close(file);
    ::close(loop);
    return dev;
  }

  MountSandbox sandbox_;
  std::unique_ptr<DriverProcess> driver_;
};

TEST_F(DriverRestartTest, NewContainerServesWhatTheKilledOneStaged) {
  const VolumeCapability fs_cap = MountCapability("ext4");
  const VolumeCapability block_cap = BlockCapability();

  // ---- Run 1: create, stage and publish a filesystem and a block volume.
  ASSERT_TRUE(driver_->Start());
  const std::string a = Create("pvc-a", fs_cap);
  const std::string b = Create("pvc-b", block_cap);
  const std::string c = Create("pvc-c", block_cap);  // attached later by a "crash"
  ASSERT_FALSE(a.empty() || b.empty() || c.empty());
  for (auto [v, cap] : {std::pair{a, fs_cap}, std::pair{b, block_cap}}) {
    grpc::Status st = Stage(v, cap);
    ASSERT_TRUE(st.ok()) << v << ": " << st.error_message();
    st = Publish(v, cap);
    ASSERT_TRUE(st.ok()) << v << ": " << st.error_message();
  }
  { std::ofstream(Target(a) + "/data") << "written before the restart"; }
  ::sync();
  driver_->Kill();

  // What the host sees now: the pool and the volumes stay mounted, and the
  // kernel's names for the backing files no longer say where they are.
  const std::string pool_dev = MountedDevice(host() + "/pool");
  ASSERT_TRUE(pool_dev.starts_with("/dev/loop")) << "the pool mount did not reach the host";
  const std::string a_dev = MountedDevice(Staging(a));
  ASSERT_TRUE(a_dev.starts_with("/dev/loop")) << "the staging mount did not reach the host";
  EXPECT_EQ(ReadAll(Target(a) + "/data"), "written before the restart");
  std::cerr << "after the container is gone, /sys names " << pool_dev << "'s file \"" << KernelName(pool_dev)
            << "\" and " << a_dev << "'s \"" << KernelName(a_dev) << "\"\n";
  std::string b_dev;
  for (const auto& l : sandbox_.Loops()) {
    if (l != pool_dev && l != a_dev) b_dev = l;
  }
  ASSERT_FALSE(b_dev.empty()) << "the block volume's device is gone";
  // A device nobody uses: the image of volume c, attached by a crashed stage.
  const std::string stray = AttachFromHost(host() + "/pool/volumes/" + c + ".img");
  ASSERT_TRUE(Attached(stray));

  // ---- Run 2: a new container, the same paths inside it.
  const size_t earlier = driver_->Log().size();
  ASSERT_TRUE(driver_->Start()) << driver_->Log();
  const std::string run2 = driver_->Log().substr(earlier);
  EXPECT_THAT(run2, ::testing::HasSubstr("is mounted at"));
  EXPECT_THAT(run2, ::testing::Not(::testing::HasSubstr("created pool image")));
  // Kept: the pool, the staged filesystem and the staged block device.
  EXPECT_EQ(MountedDevice(host() + "/pool"), pool_dev);
  EXPECT_EQ(MountedDevice(Staging(a)), a_dev);
  EXPECT_TRUE(Attached(b_dev)) << "the staged block volume's device was swept";
  // Swept: the device nobody uses.
  EXPECT_FALSE(Attached(stray)) << "the stray device was kept";

  // kubelet repeats stage and publish for volumes in use: all idempotent.
  for (auto [v, cap] : {std::pair{a, fs_cap}, std::pair{b, block_cap}}) {
    grpc::Status st = Stage(v, cap);
    EXPECT_TRUE(st.ok()) << v << ": " << st.error_message();
    st = Publish(v, cap);
    EXPECT_TRUE(st.ok()) << v << ": " << st.error_message();
  }
  EXPECT_EQ(MountedDevice(Staging(a)), a_dev) << "staged again on another device";
  EXPECT_EQ(ReadAll(Target(a) + "/data"), "written before the restart");
  auto stats = Stats(a, Target(a));
  EXPECT_FALSE(stats.volume_condition().abnormal()) << stats.volume_condition().message();
  auto block_stats = Stats(b, Target(b));
  EXPECT_FALSE(block_stats.volume_condition().abnormal()) << block_stats.volume_condition().message();
  ASSERT_GT(block_stats.usage_size(), 0);
  EXPECT_EQ(block_stats.usage(0).total(), 64 << 20);
  // A staged volume cannot be deleted (its loop device is found).
  EXPECT_EQ(Delete(b).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  driver_->Kill();

  // ---- Run 3: another new container that sees the host directory at
  // another path; then everything comes down through the API.
  driver_->SetWrapper({"/usr/bin/unshare", "-m", "--propagation", "unchanged"},
                      "mkdir -p " + DriverProcess::ShellQuote(container() + "-2") + " && mount --rbind " +
                          DriverProcess::ShellQuote(host()) + " " + DriverProcess::ShellQuote(container() + "-2"));
  driver_->SetPool(container() + "-2/pool", container() + "-2/pool.img");
  ASSERT_TRUE(driver_->Start()) << driver_->Log();
  EXPECT_TRUE(Attached(b_dev));
  for (const std::string& v : {a, b}) {
    grpc::Status st = Unpublish(v);
    EXPECT_TRUE(st.ok()) << v << ": " << st.error_message();
    st = Unstage(v);
    EXPECT_TRUE(st.ok()) << v << ": " << st.error_message();
  }
  EXPECT_EQ(MountedDevice(Staging(a)), "");
  EXPECT_FALSE(Attached(b_dev)) << "unstage left the block volume attached";
  for (const std::string& v : {a, b, c}) {
    grpc::Status st = Delete(v);
    EXPECT_TRUE(st.ok()) << v << ": " << st.error_message();
  }
  EXPECT_EQ(driver_->Stop(), 0);
  EXPECT_THAT(sandbox_.Loops(), ::testing::ElementsAre(pool_dev)) << "only the pool stays";
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(host() + "/pool/volumes")) {
    left.push_back(e.path().filename().string());
  }
  EXPECT_THAT(left, ::testing::IsEmpty());
}

// The pool check names what is wrong when the pool directory holds some
// other image's filesystem, whatever namespace attached it.
TEST_F(DriverRestartTest, RefusesAPoolDirectoryHoldingAnotherImage) {
  ASSERT_TRUE(driver_->Start());
  driver_->Kill();
  // Another image (a blank sparse file) in the host directory.
  { std::ofstream(host() + "/other.img"); }
  ASSERT_EQ(::truncate((host() + "/other.img").c_str(), 1 << 20), 0);
  driver_->SetPool(container() + "/pool", container() + "/other.img");
  driver_->Launch();
  EXPECT_EQ(driver_->WaitForExit(), 1) << "started on a pool directory holding another image";
  EXPECT_THAT(driver_->Log(), ::testing::HasSubstr("other.img is not attached to any loop device"));
  EXPECT_THAT(driver_->Log(), ::testing::HasSubstr("a loop device backed by inode"));
  fs::remove(host() + "/other.img");
}

}  // namespace
}  // namespace berth::testing
