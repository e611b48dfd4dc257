// scripts/image for real (root, debootstrap, a Debian mirror): the berth-csi
// image built from Debian packages without Docker, checked as an archive —
// a valid OCI image layout whose blobs are what their digests say, a config
// whose diff_id is the uncompressed layer, Docker's manifest.json beside it,
// a layer owned by root with the binary, the tools it runs and no device
// nodes — built twice to the same bytes, and imported into a containerd of
// the test's own, where it runs.
//
// Skips with the reason when a prerequisite is missing: not root, no
// debootstrap, no release berth-csi (scripts/build), no mirror. The root
// filesystem is cached in the build tree (image-test/), so a second run
// only repacks.
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "common/exec.h"
#include "common/hash.h"
#include "common/testing/eventually.h"
#include "common/testing/subprocess.h"
#include "common/testing/temp_dir.h"
#include "driver/testing/sandbox.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace berth::testing {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr char kName[] = "docker.io/library/berth-csi:image-test";

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class ImageTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (::geteuid() != 0) {
      skip_ = "needs root (debootstrap, chroot)";
      return;
    }
    if (::access("/usr/sbin/debootstrap", X_OK) != 0) {
      skip_ = "needs debootstrap (scripts/install-deps installs it)";
      return;
    }
    binary_ = std::string(BERTH_SOURCE_DIR) + "/build/release/berth-csi";
    if (::access(binary_.c_str(), X_OK) != 0) {
      skip_ = "needs a release berth-csi at " + binary_ + " (scripts/build)";
      return;
    }
    // CTest runs each case as its own process, two at a time: they share
    // the root filesystem cached in the build tree, so one builds at a time
    // (the lock is held until TearDownTestSuite; the kernel drops it if the
    // process dies).
    lock_fd_ = ::open((std::string(BERTH_BINARY_DIR) + "/image-test.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lock_fd_ < 0 || ::flock(lock_fd_, LOCK_EX) != 0) {
      build_output_ = "cannot lock the image test's cache: " + std::string(std::strerror(errno));
      return;
    }
    dir_ = new TempDir();
    auto r = Image({"--out", dir_->Join("berth-csi.tar")});
    if (r.exit_code == 3) {
      skip_ = "scripts/image: " + r.output;
      return;
    }
    build_output_ = r.output;
    built_ = r.exit_code == 0;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
    if (lock_fd_ >= 0) ::close(lock_fd_);
    lock_fd_ = -1;
  }
  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    ASSERT_TRUE(built_) << build_output_;
    archive_ = dir_->Join("berth-csi.tar");
    unpacked_ = tmp_.Join("archive");
    fs::create_directories(unpacked_);
    ASSERT_EQ(Run({"/usr/bin/tar", "-xf", archive_, "-C", unpacked_}).exit_code, 0);
  }

  static CommandResult Run(const std::vector<std::string>& argv, absl::Duration t = absl::Minutes(2)) {
    LinuxCommandRunner runner;
    auto r = runner.Run(argv, t);
    if (!r.ok()) return {-1, r.status().ToString()};
    return *r;
  }
  static CommandResult Image(std::vector<std::string> args) {
    std::vector<std::string> argv = {
        std::string(BERTH_SOURCE_DIR) + "/scripts/image", "--binary", binary_, "--name", kName, "--work",
        std::string(BERTH_BINARY_DIR) + "/image-test"};
    argv.insert(argv.end(), args.begin(), args.end());
    return Run(argv, absl::Minutes(20));
  }

  std::string Blob(const std::string& digest) {
    EXPECT_TRUE(digest.starts_with("sha256:")) << digest;
    return unpacked_ + "/blobs/sha256/" + digest.substr(7);
  }
  json Json(const std::string& path) { return json::parse(ReadAll(path), nullptr, false); }

  static inline std::string skip_;
  static inline std::string binary_;
  static inline std::string build_output_;
  static inline bool built_ = false;
  static inline TempDir* dir_ = nullptr;
  static inline int lock_fd_ = -1;
  TempDir tmp_;
  std::string archive_;
  std::string unpacked_;
};

TEST_F(ImageTest, IsAnOciLayoutWhoseBlobsMatchTheirDigests) {
  EXPECT_EQ(Json(unpacked_ + "/oci-layout"), json::parse(R"({"imageLayoutVersion":"1.0.0"})"));
  for (const auto& e : fs::directory_iterator(unpacked_ + "/blobs/sha256")) {
    EXPECT_EQ(Sha256Hex(ReadAll(e.path())), e.path().filename().string());
  }
  json index = Json(unpacked_ + "/index.json");
  ASSERT_EQ(index["manifests"].size(), 1u) << index.dump();
  const json& desc = index["manifests"][0];
  EXPECT_EQ(desc["mediaType"], "application/vnd.oci.image.manifest.v1+json");
  EXPECT_EQ(desc["annotations"]["io.containerd.image.name"], kName);
  EXPECT_EQ(desc["annotations"]["org.opencontainers.image.ref.name"], "image-test");
  EXPECT_EQ(desc["size"].get<uint64_t>(), fs::file_size(Blob(desc["digest"])));

  json manifest = Json(Blob(desc["digest"]));
  EXPECT_EQ(manifest["schemaVersion"], 2);
  EXPECT_EQ(manifest["config"]["mediaType"], "application/vnd.oci.image.config.v1+json");
  EXPECT_EQ(manifest["config"]["size"].get<uint64_t>(), fs::file_size(Blob(manifest["config"]["digest"])));
  ASSERT_EQ(manifest["layers"].size(), 1u);
  const json& layer = manifest["layers"][0];
  EXPECT_EQ(layer["mediaType"], "application/vnd.oci.image.layer.v1.tar+gzip");
  EXPECT_EQ(layer["size"].get<uint64_t>(), fs::file_size(Blob(layer["digest"])));

  json config = Json(Blob(manifest["config"]["digest"]));
  EXPECT_EQ(config["os"], "linux");
  EXPECT_EQ(config["config"]["Entrypoint"], json::array({"/usr/local/bin/berth-csi"}));
  ASSERT_EQ(config["rootfs"]["diff_ids"].size(), 1u);
  // diff_id: the digest of the uncompressed layer.
  const std::string plain = tmp_.Join("layer.tar");
  ASSERT_EQ(Run({"/bin/sh", "-c", "gzip -dc '" + Blob(layer["digest"]) + "' > '" + plain + "'"}).exit_code, 0);
  EXPECT_EQ(config["rootfs"]["diff_ids"][0], "sha256:" + Sha256Hex(ReadAll(plain)));

  // Docker's form of the same image.
  json docker = Json(unpacked_ + "/manifest.json");
  ASSERT_EQ(docker.size(), 1u);
  EXPECT_EQ(docker[0]["RepoTags"], json::array({"berth-csi:image-test"}));
  EXPECT_EQ("blobs/sha256/" + manifest["config"]["digest"].get<std::string>().substr(7), docker[0]["Config"]);
  EXPECT_EQ(docker[0]["Layers"], json::array({"blobs/sha256/" + layer["digest"].get<std::string>().substr(7)}));
}

TEST_F(ImageTest, LayerHoldsTheDriverAndItsToolsAndNoDevices) {
  json index = Json(unpacked_ + "/index.json");
  json manifest = Json(Blob(index["manifests"][0]["digest"]));
  // The runner caps output at 64 KiB: listings go to files.
  std::set<std::string> names;
  {
    const std::string list = tmp_.Join("names");
    ASSERT_EQ(
        Run({"/bin/sh", "-c", "tar -tzf '" + Blob(manifest["layers"][0]["digest"]) + "' > '" + list + "'"}).exit_code,
        0);
    std::ifstream in(list);
    for (std::string line; std::getline(in, line);) names.insert(line);
  }
  for (const char* want :
       {"./usr/local/bin/berth-csi", "./usr/sbin/mkfs.ext4", "./usr/sbin/mkfs.xfs", "./usr/sbin/e2fsck",
        "./usr/sbin/resize2fs", "./usr/sbin/xfs_growfs", "./usr/sbin/blkid", "./usr/bin/apt-get", "./etc/os-release"}) {
    EXPECT_TRUE(names.count(want)) << want;
  }
  for (const auto& n : names) {
    EXPECT_FALSE(n.starts_with("./dev/") && n != "./dev/") << n;
    EXPECT_FALSE(n.starts_with("./proc/") && n != "./proc/") << n;
    EXPECT_FALSE(n.starts_with("./var/lib/apt/lists/") && n != "./var/lib/apt/lists/") << n;
  }
  // The entrypoint: a root-owned executable (tar -tv: "-rwxr-xr-x 0/0 ...").
  const std::string details = tmp_.Join("details");
  ASSERT_EQ(Run({"/bin/sh", "-c",
                 "tar --numeric-owner -tvzf '" + Blob(manifest["layers"][0]["digest"]) +
                     "' ./usr/local/bin/berth-csi > '" + details + "'"})
                .exit_code,
            0);
  EXPECT_THAT(ReadAll(details), ::testing::StartsWith("-rwxr-xr-x 0/0 "));
  // Every entry belongs to 0/0.
  const std::string owners = tmp_.Join("owners");
  ASSERT_EQ(Run({"/bin/sh", "-c",
                 "tar --numeric-owner -tvzf '" + Blob(manifest["layers"][0]["digest"]) +
                     "' | awk '{print $2}' | sort -u > '" + owners + "'"})
                .exit_code,
            0);
  EXPECT_EQ(ReadAll(owners), "0/0\n");
}

TEST_F(ImageTest, RebuildingGivesTheSameBytes) {
  auto r = Image({"--out", tmp_.Join("again.tar")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(Sha256Hex(ReadAll(tmp_.Join("again.tar"))), Sha256Hex(ReadAll(archive_)));
}

// A containerd of the test's own (its own root, state and socket; no CRI),
// so the import and a run touch nothing of the machine's.
TEST_F(ImageTest, ImportsIntoContainerdAndRuns) {
  for (const char* tool : {"/usr/bin/containerd", "/usr/bin/ctr", "/usr/sbin/runc"}) {
    if (::access(tool, X_OK) != 0) GTEST_SKIP() << "needs " << tool << " (containerd, runc)";
  }
  MountSandbox sandbox;  // containerd's snapshots are mounted below it
  const std::string sock = sandbox.Join("containerd.sock");
  {
    std::ofstream config(sandbox.Join("config.toml"));
    config << "version = 2\n"
           << "root = \"" << sandbox.Join("root") << "\"\n"
           << "state = \"" << sandbox.Join("state") << "\"\n"
           << "disabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n"
           << "[grpc]\n  address = \"" << sock << "\"\n"
           << "[ttrpc]\n  address = \"" << sock << ".ttrpc\"\n";
  }
  Subprocess containerd({"/usr/bin/containerd", "--config", sandbox.Join("config.toml")},
                        sandbox.Join("containerd.log"));
  ASSERT_TRUE(berth::testing::Eventually(
      [&] {
        return Run({"/usr/bin/ctr", "--address", sock, "version"}, absl::Seconds(5)).exit_code == 0;
      },
      absl::Seconds(60)))
      << containerd.Output();

  auto r = Image({"--out", tmp_.Join("import.tar"), "--import", "--address", sock, "--namespace", "berth-image-test"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  // runc's state and the IO fifos in the sandbox too (not under /run/containerd).
  auto run = Run({"/usr/bin/ctr", "--address", sock, "--namespace", "berth-image-test", "run", "--rm", "--runc-root",
                  sandbox.Join("runc"), "--fifo-dir", sandbox.Join("fifo"), kName, "berth-image-test",
                  "/usr/local/bin/berth-csi", "--version"},
                 absl::Minutes(2));
  EXPECT_EQ(run.exit_code, 0) << run.output << containerd.Output();
  EXPECT_THAT(run.output, ::testing::HasSubstr("berth-csi "));
  // Leave nothing running: the task, then containerd.
  Run({"/usr/bin/ctr", "--address", sock, "--namespace", "berth-image-test", "task", "kill", "-s", "SIGKILL",
       "berth-image-test"});
  Run({"/usr/bin/ctr", "--address", sock, "--namespace", "berth-image-test", "container", "rm", "berth-image-test"});
  containerd.Signal(SIGTERM);
  EXPECT_TRUE(containerd.Wait(absl::Seconds(30)).has_value());
}

}  // namespace
}  // namespace berth::testing
