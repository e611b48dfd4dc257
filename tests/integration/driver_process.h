// Test helper: berth-csi as a child process on a sandboxed pool image and
// kubelet root, with stubs for its services and a restart.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/testing/subprocess.h"
#include "csi/client.h"
#include "csi/v1/csi.grpc.pb.h"
#include "driver/testing/sandbox.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"

namespace berth::testing {

class DriverProcess {
 public:
  // Paths inside `sandbox`: pool image + pool dir, kubelet root, socket.
  explicit DriverProcess(const MountSandbox& sandbox, std::vector<std::string> extra = {})
      : sandbox_(sandbox), extra_(std::move(extra)) {}

  ~DriverProcess() { Stop(); }

  std::string socket() const { return sandbox_.Join("csi.sock"); }
  std::string kubelet() const { return sandbox_.Join("kubelet"); }
  std::string pool() const { return pool_.empty() ? sandbox_.Join("pool") : pool_; }
  std::string pool_image() const { return pool_image_.empty() ? sandbox_.Join("pool.img") : pool_image_; }

  // Serves the pool at other paths from the next Start() on.
  void SetPool(std::string pool, std::string pool_image) {
    pool_ = std::move(pool);
    pool_image_ = std::move(pool_image);
  }

  // The size of a new pool image, and whether it is sparse (by default a
  // sparse 64Gi, so that tests of other things never take the space).
  void SetPoolSize(std::string size, bool sparse) {
    pool_size_ = std::move(size);
    pool_sparse_ = sparse;
  }

  // From the next Start() on, runs `wrapper... /bin/sh -c '<setup> && exec
  // berth-csi ...'` (e.g. wrapper = unshare -m: a mount namespace of its
  // own, set up by `setup`). berth-csi keeps the PID the test signals.
  void SetWrapper(std::vector<std::string> wrapper, std::string setup) {
    wrapper_ = std::move(wrapper);
    setup_ = std::move(setup);
  }

  // Starts berth-csi (with `env` set, e.g. BERTH_CRASH_AT=...) and connects.
  // Returns false if it did not come up.
  bool Start(const std::vector<std::string>& env = {}) {
    Launch(env);
    auto ch = csi::ConnectUnix("unix://" + socket(), {.timeout = absl::Seconds(30)});
    if (!ch.ok()) {
      ADD_FAILURE() << ch.status() << "\n" << process_->Output();
      return false;
    }
    channel_ = *ch;
    controller_ = ::csi::v1::Controller::NewStub(channel_);
    node_ = ::csi::v1::Node::NewStub(channel_);
    group_ = ::csi::v1::GroupController::NewStub(channel_);
    identity_ = ::csi::v1::Identity::NewStub(channel_);
    return true;
  }

  // Starts berth-csi without waiting for it to serve.
  void Launch(const std::vector<std::string>& env = {}) {
    std::vector<std::string> argv = {
        BERTH_CSI_BINARY, "--endpoint", "unix://" + socket(), "--node-id", "node-a",         "--pool", pool(),
        "--pool-image",   pool_image(), "--pool-size",        pool_size_,  "--kubelet-root", kubelet()};
    // Tests of other things than space take a big pool without taking the
    // space: sparse, by request.
    if (pool_sparse_) argv.push_back("--pool-sparse");
    argv.insert(argv.end(), extra_.begin(), extra_.end());
    if (!wrapper_.empty()) {
      std::string command = setup_.empty() ? "exec" : setup_ + " && exec";
      for (const auto& a : argv) command += " " + ShellQuote(a);
      argv = wrapper_;
      argv.insert(argv.end(), {"/bin/sh", "-c", command});
    }
    for (const auto& e : env) ::setenv(e.substr(0, e.find('=')).c_str(), e.substr(e.find('=') + 1).c_str(), 1);
    process_ = std::make_unique<Subprocess>(argv, sandbox_.Join("driver.log"));
    for (const auto& e : env) ::unsetenv(e.substr(0, e.find('=')).c_str());
  }

  // SIGTERM and wait; returns the exit code.
  int Stop() {
    if (!process_) return 0;
    process_->Signal(SIGTERM);
    auto code = process_->Wait(absl::Seconds(30));
    log_ += process_->Output();
    process_.reset();
    return code.value_or(-1);
  }

  // Waits for a process that is expected to die by itself (a crash point).
  std::optional<int> WaitForExit() {
    auto code = process_->Wait(absl::Seconds(60));
    log_ += process_->Output();
    process_.reset();
    return code;
  }

  // SIGKILL (a crash, or a container killed) and wait.
  void Kill() {
    if (!process_) return;
    process_->Signal(SIGKILL);
    process_->Wait(absl::Seconds(30));
    log_ += process_->Output();
    process_.reset();
  }

  std::string Log() const { return log_ + (process_ ? process_->Output() : ""); }

  static std::string ShellQuote(const std::string& s) {
    std::string out = "'";
    for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
  }

  ::csi::v1::Controller::Stub& controller() { return *controller_; }
  ::csi::v1::Node::Stub& node() { return *node_; }
  ::csi::v1::GroupController::Stub& group() { return *group_; }
  ::csi::v1::Identity::Stub& identity() { return *identity_; }

 private:
  const MountSandbox& sandbox_;
  std::vector<std::string> extra_;
  std::string pool_;
  std::string pool_image_;
  std::string pool_size_ = "64Gi";
  bool pool_sparse_ = true;
  std::vector<std::string> wrapper_;
  std::string setup_;
  std::unique_ptr<Subprocess> process_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<::csi::v1::Controller::Stub> controller_;
  std::unique_ptr<::csi::v1::Node::Stub> node_;
  std::unique_ptr<::csi::v1::GroupController::Stub> group_;
  std::unique_ptr<::csi::v1::Identity::Stub> identity_;
  std::string log_;
};

// SINGLE_NODE_WRITER capabilities for tests.
inline ::csi::v1::VolumeCapability MountCapability(const std::string& fs_type = "") {
  ::csi::v1::VolumeCapability c;
  c.mutable_mount()->set_fs_type(fs_type);
  c.mutable_access_mode()->set_mode(::csi::v1::VolumeCapability::AccessMode::SINGLE_NODE_WRITER);
  return c;
}
inline ::csi::v1::VolumeCapability BlockCapability() {
  ::csi::v1::VolumeCapability c;
  c.mutable_block();
  c.mutable_access_mode()->set_mode(::csi::v1::VolumeCapability::AccessMode::SINGLE_NODE_WRITER);
  return c;
}

// A fixture with berth-csi running on a sandboxed pool (root only).
class DriverProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    BERTH_REQUIRE_ROOT();
    driver_ = std::make_unique<DriverProcess>(sandbox_);
    driver_->SetPoolSize(pool_size_, pool_sparse_);
    ASSERT_TRUE(driver_->Start());
  }
  void TearDown() override {
    if (!driver_) return;
    EXPECT_EQ(driver_->Stop(), 0);
    if (HasFailure()) std::cerr << driver_->Log();
  }

  MountSandbox sandbox_;
  std::unique_ptr<DriverProcess> driver_;
  // The pool image, set before SetUp (a fixture's constructor): by default
  // sparse, so that tests of other things take no space.
  std::string pool_size_ = "64Gi";
  bool pool_sparse_ = true;
};

// A context with a generous deadline for one call.
inline std::unique_ptr<grpc::ClientContext> Ctx() {
  auto c = std::make_unique<grpc::ClientContext>();
  c->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(120)));
  return c;
}

}  // namespace berth::testing
