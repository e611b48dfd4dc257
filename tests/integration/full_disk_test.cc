// A full disk never corrupts a volume silently (issue 28): berth-csi on a
// small loop-mounted "host" filesystem. A pool the host cannot hold is
// refused; a sparse pool (by request) offers no more than the host can back;
// volumes filled past their size give the writer ENOSPC with no kernel I/O
// or filesystem error, also with the host itself full; a restart with a
// full host serves the data; an abnormal volume or pool is reported.
//
// Root only (loop devices, mounts); everything lives in a MountSandbox,
// which unmounts and detaches also when a test fails.

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>

#include "absl/strings/str_join.h"
#include "common/exec.h"
#include "common/strings.h"
#include "driver/health.h"
#include "driver_process.h"
#include "gmock/gmock.h"

namespace berth::testing {
namespace {

namespace fs = std::filesystem;
using ::csi::v1::VolumeCapability;
using ::testing::HasSubstr;

constexpr int64_t kMiB = 1 << 20;

// The kernel log from construction on (/dev/kmsg, opened at its end).
class KernelLogTail {
 public:
  KernelLogTail() : fd_(::open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC)) {
    if (fd_ >= 0) ::lseek(fd_, 0, SEEK_END);
  }
  ~KernelLogTail() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool ok() const { return fd_ >= 0; }
  // Lines logged since the last call (or construction).
  std::vector<std::string> Read() {
    std::vector<std::string> out;
    char buf[8192];
    for (;;) {
      ssize_t n = ::read(fd_, buf, sizeof(buf) - 1);
      if (n < 0 && errno == EPIPE) continue;
      if (n <= 0) break;
      out.emplace_back(driver::KmsgText(std::string_view(buf, static_cast<size_t>(n))));
    }
    return out;
  }

 private:
  int fd_;
};

class FullDiskTest : public ::testing::Test {
 protected:
  void SetUp() override {
    BERTH_REQUIRE_ROOT();
    ASSERT_TRUE(kmsg_.ok()) << "cannot read /dev/kmsg";
    // The host: a 1 GiB ext4 of its own, so that "full" is quick and real.
    fs::create_directories(host());
    ASSERT_EQ(Sh("truncate -s 1G " + sandbox_.Join("host.img") + " && mkfs.ext4 -q -F " + sandbox_.Join("host.img") +
                 " && mount -o loop " + sandbox_.Join("host.img") + " " + host()),
              "");
    driver_ = std::make_unique<DriverProcess>(sandbox_);
    driver_->SetPool(sandbox_.Join("pool"), host() + "/pool.img");
  }
  void TearDown() override {
    if (driver_ && HasFailure()) std::cerr << driver_->Log();
    if (driver_) driver_->Stop();
  }

  std::string host() const { return sandbox_.Join("host"); }
  std::string Staging(const std::string& v) const { return sandbox_.Join("kubelet/staging/" + v); }
  std::string Target(const std::string& v) const { return sandbox_.Join("kubelet/pods/p1/volumes/" + v + "/mount"); }

  // Runs a shell command; "" when it exits 0, else its exit code and output.
  std::string Sh(const std::string& command) {
    auto r = runner_.Run({"/bin/sh", "-c", command}, absl::Minutes(5));
    if (!r.ok()) return r.status().ToString();
    return r->exit_code == 0 ? "" : StrCat("exit ", r->exit_code, ": ", r->output);
  }
  // The output of a command expected to fail.
  std::string ShFails(const std::string& command) {
    auto r = runner_.Run({"/bin/sh", "-c", command}, absl::Minutes(5));
    if (!r.ok()) return r.status().ToString();
    EXPECT_NE(r->exit_code, 0) << command << ": " << r->output;
    return r->output;
  }

  // Fills the host filesystem to the last block.
  void FillHost() {
    ShFails("dd if=/dev/zero of=" + host() + "/filler bs=1M 2>&1");
    ShFails("dd if=/dev/zero of=" + host() + "/filler-tail bs=4k 2>&1");
    ASSERT_EQ(Sh("sync"), "");
  }

  grpc::Status Create(const std::string& name, int64_t bytes, const VolumeCapability& cap, std::string* id) {
    ::csi::v1::CreateVolumeRequest req;
    req.set_name(name);
    req.mutable_capacity_range()->set_required_bytes(bytes);
    *req.add_volume_capabilities() = cap;
    ::csi::v1::CreateVolumeResponse resp;
    grpc::Status st = driver_->controller().CreateVolume(Ctx().get(), req, &resp);
    if (id != nullptr) *id = resp.volume().volume_id();
    return st;
  }

  int64_t Available() {
    ::csi::v1::GetCapacityRequest req;
    ::csi::v1::GetCapacityResponse resp;
    grpc::Status st = driver_->controller().GetCapacity(Ctx().get(), req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp.available_capacity();
  }

  // NodeStage + NodePublish; the path to write to.
  std::string Use(const std::string& v, const VolumeCapability& cap) {
    fs::create_directories(Staging(v));
    {
      ::csi::v1::NodeStageVolumeRequest req;
      req.set_volume_id(v);
      req.set_staging_target_path(Staging(v));
      *req.mutable_volume_capability() = cap;
      ::csi::v1::NodeStageVolumeResponse resp;
      grpc::Status st = driver_->node().NodeStageVolume(Ctx().get(), req, &resp);
      EXPECT_TRUE(st.ok()) << st.error_message();
    }
    fs::create_directories(fs::path(Target(v)).parent_path());
    ::csi::v1::NodePublishVolumeRequest req;
    req.set_volume_id(v);
    req.set_staging_target_path(Staging(v));
    req.set_target_path(Target(v));
    *req.mutable_volume_capability() = cap;
    ::csi::v1::NodePublishVolumeResponse resp;
    grpc::Status st = driver_->node().NodePublishVolume(Ctx().get(), req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return Target(v);
  }

  void Release(const std::string& v) {
    ::csi::v1::NodeUnpublishVolumeRequest unpublish;
    unpublish.set_volume_id(v);
    unpublish.set_target_path(Target(v));
    ::csi::v1::NodeUnpublishVolumeResponse r1;
    grpc::Status st = driver_->node().NodeUnpublishVolume(Ctx().get(), unpublish, &r1);
    EXPECT_TRUE(st.ok()) << st.error_message();
    ::csi::v1::NodeUnstageVolumeRequest unstage;
    unstage.set_volume_id(v);
    unstage.set_staging_target_path(Staging(v));
    ::csi::v1::NodeUnstageVolumeResponse r2;
    st = driver_->node().NodeUnstageVolume(Ctx().get(), unstage, &r2);
    EXPECT_TRUE(st.ok()) << st.error_message();
  }

  ::csi::v1::VolumeCondition Condition(const std::string& v) {
    ::csi::v1::NodeGetVolumeStatsRequest req;
    req.set_volume_id(v);
    req.set_volume_path(Target(v));
    ::csi::v1::NodeGetVolumeStatsResponse resp;
    grpc::Status st = driver_->node().NodeGetVolumeStats(Ctx().get(), req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp.volume_condition();
  }

  bool Ready() {
    ::csi::v1::ProbeRequest req;
    ::csi::v1::ProbeResponse resp;
    grpc::Status st = driver_->identity().Probe(Ctx().get(), req, &resp);
    return st.ok() && resp.ready().value();
  }

  // Kernel log lines since the last call that report an error on one of
  // this test's loop devices (the pool's and its volumes').
  std::vector<std::string> LoopErrors() {
    std::set<std::string> ours;
    for (const auto& d : sandbox_.Loops()) ours.insert(fs::path(d).filename().string());
    std::vector<std::string> out;
    for (const auto& line : kmsg_.Read()) {
      std::string dev = driver::LoopDeviceWithError(line);
      if (!dev.empty() && ours.contains(dev)) out.push_back(line);
    }
    return out;
  }

  MountSandbox sandbox_;
  KernelLogTail kmsg_;
  LinuxCommandRunner runner_;
  std::unique_ptr<DriverProcess> driver_;
};

TEST_F(FullDiskTest, APoolTheHostCannotHoldIsRefusedWithTheSizes) {
  driver_->SetPoolSize("2Gi", /*sparse=*/false);
  driver_->Launch();
  auto code = driver_->WaitForExit();
  ASSERT_TRUE(code.has_value());
  EXPECT_NE(*code, 0);
  EXPECT_THAT(driver_->Log(), HasSubstr("needs 2Gi but the filesystem holding it (" + host() + ") has only"));
  EXPECT_THAT(driver_->Log(), HasSubstr("--pool-sparse"));
  EXPECT_FALSE(fs::exists(host() + "/pool.img")) << "a refused image is not left behind";
}

TEST_F(FullDiskTest, FullVolumesGiveTheWriterEnospcAndNoKernelErrorEvenOnAFullHost) {
  driver_->SetPoolSize("700Mi", /*sparse=*/false);
  ASSERT_TRUE(driver_->Start());
  struct stat img {};
  ASSERT_EQ(::stat((host() + "/pool.img").c_str(), &img), 0);
  EXPECT_GE(img.st_blocks * 512, 700 * kMiB) << "the pool image is allocated in full";

  const int64_t available = Available();
  EXPECT_GT(available, 560 * kMiB);
  EXPECT_LT(available, 700 * kMiB);
  std::string ext4, xfs, block, other;
  ASSERT_TRUE(Create("ext4", 100 * kMiB, MountCapability("ext4"), &ext4).ok());
  ASSERT_TRUE(Create("xfs", 300 * kMiB, MountCapability("xfs"), &xfs).ok());
  ASSERT_TRUE(Create("block", 100 * kMiB, BlockCapability(), &block).ok());
  ASSERT_TRUE(Create("other", 64 * kMiB, MountCapability("ext4"), &other).ok());
  // A claim larger than what is really left is not provisioned.
  grpc::Status too_big = Create("too-big", available - 564 * kMiB + kMiB, MountCapability("ext4"), nullptr);
  EXPECT_EQ(too_big.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << too_big.error_message();
  EXPECT_THAT(too_big.error_message(), HasSubstr("for filesystem metadata"));

  const std::string ext4_path = Use(ext4, MountCapability("ext4"));
  const std::string xfs_path = Use(xfs, MountCapability("xfs"));
  const std::string block_path = Use(block, BlockCapability());
  const std::string other_path = Use(other, MountCapability("ext4"));
  ASSERT_FALSE(HasFailure());
  ASSERT_EQ(Sh("echo keep > " + other_path + "/data && sync"), "");

  // The host fills up (images, logs, anything): the pool is allocated.
  FillHost();
  EXPECT_EQ(Sh("test $(stat -f -c %a " + host() + ") -lt 256"), "") << "the host has less than 1 MiB free";

  // Each volume filled past its size: the writer gets ENOSPC.
  EXPECT_THAT(ShFails("dd if=/dev/zero of=" + ext4_path + "/fill bs=1M count=200 conv=fsync 2>&1"),
              HasSubstr("No space left on device"));
  EXPECT_THAT(ShFails("dd if=/dev/zero of=" + xfs_path + "/fill bs=1M count=400 conv=fsync 2>&1"),
              HasSubstr("No space left on device"));
  EXPECT_THAT(ShFails("dd if=/dev/zero of=" + block_path + " bs=1M count=200 oflag=direct 2>&1"),
              HasSubstr("No space left on device"));
  ASSERT_EQ(Sh("sync"), "");
  // The other volume still works, and so do the full ones once space is freed.
  EXPECT_EQ(Sh("echo more >> " + other_path + "/data && sync && grep -q more " + other_path + "/data"), "");
  EXPECT_EQ(Sh("rm " + ext4_path + "/fill && echo ok > " + ext4_path + "/after && sync"), "");
  EXPECT_EQ(Sh("rm " + xfs_path + "/fill && echo ok > " + xfs_path + "/after && sync"), "");

  for (const auto& v : {ext4, xfs, block, other}) {
    ::csi::v1::VolumeCondition c = Condition(v);
    EXPECT_FALSE(c.abnormal()) << v << ": " << c.message();
  }
  EXPECT_TRUE(Ready());
  EXPECT_THAT(LoopErrors(), ::testing::IsEmpty()) << "no kernel I/O or filesystem error for any volume";

  // A restart with the host full: berth-csi starts and serves the data.
  ASSERT_EQ(driver_->Stop(), 0);
  ASSERT_TRUE(driver_->Start());
  EXPECT_TRUE(Ready());
  Release(other);
  Use(other, MountCapability("ext4"));
  EXPECT_EQ(Sh("grep -q keep " + other_path + "/data && grep -q more " + other_path + "/data"), "");
  EXPECT_THAT(LoopErrors(), ::testing::IsEmpty());
}

TEST_F(FullDiskTest, ASparsePoolOffersOnlyWhatTheHostCanBackAndReportsTheDamageWhenTheHostFills) {
  driver_->SetPoolSize("2Gi", /*sparse=*/true);
  ASSERT_TRUE(driver_->Start());
  // 1 GiB host, less the 10 % kept free: well under the 2Gi pool.
  const int64_t available = Available();
  EXPECT_GT(available, 500 * kMiB);
  EXPECT_LT(available, 900 * kMiB);
  grpc::Status too_big = Create("too-big", 1024 * kMiB, MountCapability("ext4"), nullptr);
  EXPECT_EQ(too_big.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << too_big.error_message();
  EXPECT_THAT(too_big.error_message(), HasSubstr("host"));
  std::string vol;
  ASSERT_TRUE(Create("data", 300 * kMiB, MountCapability("ext4"), &vol).ok());
  const std::string path = Use(vol, MountCapability("ext4"));
  ASSERT_FALSE(HasFailure());

  // Something else fills the host: the pool is over-committed, provisioning
  // stops with the reason.
  FillHost();
  EXPECT_EQ(Available(), 0);
  grpc::Status refused = Create("more", 64 * kMiB, MountCapability("ext4"), nullptr);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.error_message(), HasSubstr("free space on the host"));

  // What sparse means: the volume's writes now fail below it. berth-csi
  // says so: the volume is abnormal and the driver not ready.
  ShFails("dd if=/dev/urandom of=" + path + "/fill bs=1M count=250 conv=fsync 2>&1");
  Sh("sync");
  const std::vector<std::string> damage = LoopErrors();
  EXPECT_FALSE(damage.empty()) << "the kernel reports the failed writes";
  // Named, so that a reader of the kernel log can tell these lines from a
  // real loss.
  std::set<std::string> devices;
  for (const auto& line : damage) devices.insert(driver::LoopDeviceWithError(line));
  std::cout << "[ KERNEL   ] caused on purpose: " << damage.size() << " error lines on this test's "
            << absl::StrJoin(devices, ", ") << "\n";
  ::csi::v1::VolumeCondition c = Condition(vol);
  EXPECT_TRUE(c.abnormal());
  EXPECT_THAT(c.message(), ::testing::AnyOf(HasSubstr("the kernel logged"), HasSubstr("refuses writes"),
                                            HasSubstr("pool is unhealthy")));
  EXPECT_FALSE(Ready());
}

TEST_F(FullDiskTest, FilesystemErrorsAndShutdownsMakeTheVolumeAbnormal) {
  driver_->SetPoolSize("800Mi", /*sparse=*/false);
  ASSERT_TRUE(driver_->Start());
  std::string ext4, xfs;
  ASSERT_TRUE(Create("ext4", 64 * kMiB, MountCapability("ext4"), &ext4).ok());
  ASSERT_TRUE(Create("xfs", 300 * kMiB, MountCapability("xfs"), &xfs).ok());
  const std::string ext4_path = Use(ext4, MountCapability("ext4"));
  const std::string xfs_path = Use(xfs, MountCapability("xfs"));
  ASSERT_FALSE(HasFailure());
  EXPECT_FALSE(Condition(ext4).abnormal());
  EXPECT_FALSE(Condition(xfs).abnormal());

  // ext4 records an error in its superblock (here: its test trigger).
  std::string dev;
  {
    std::ifstream mounts("/proc/self/mounts");
    std::string source, target, rest;
    while (mounts >> source >> target && std::getline(mounts, rest)) {
      if (target == Staging(ext4)) dev = fs::path(source).filename().string();
    }
  }
  ASSERT_FALSE(dev.empty());
  const std::string trigger = "/sys/fs/ext4/" + dev + "/trigger_fs_error";
  ASSERT_TRUE(fs::exists(trigger)) << "this kernel's ext4 has no " << trigger;
  ASSERT_EQ(Sh("echo test-error > " + trigger), "");
  ::csi::v1::VolumeCondition ext4_condition = Condition(ext4);
  EXPECT_TRUE(ext4_condition.abnormal());
  EXPECT_THAT(ext4_condition.message(),
              ::testing::AnyOf(HasSubstr("recorded 1 error"), HasSubstr("the kernel logged")));
  // An XFS that shut down (as after a failed metadata write).
  ASSERT_EQ(Sh("xfs_io -x -c shutdown " + xfs_path), "");
  ::csi::v1::VolumeCondition c = Condition(xfs);
  EXPECT_TRUE(c.abnormal());
  EXPECT_THAT(c.message(), ::testing::AnyOf(HasSubstr("refuses writes"), HasSubstr("the kernel logged")));
  // The pool itself is fine.
  EXPECT_TRUE(Ready());
}

}  // namespace
}  // namespace berth::testing
