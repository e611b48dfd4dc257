// Test helper (root): a containerd of the test's own, as `berth up` runs
// one, in a temp directory with its own bridge and pod subnet, berth's
// images imported. On destruction (also when the test fails) every sandbox
// is stopped and removed, containerd is stopped, shims still serving its
// socket are killed, the bridge is deleted and whatever is still mounted
// below the directory is unmounted, so no container, shim, netns, veth or
// mount outlives the test.
//
//   TestContainerd ctd("10.213.0.0/24");     // a subnet no other test uses
//   ASSERT_TRUE(ctd.Start().ok());
//   ctd.runtime().RunPodSandbox(...);
#pragma once

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "common/exec.h"
#include "common/strings.h"
#include "common/testing/eventually.h"
#include "common/testing/subprocess.h"
#include "cri/containerd.h"
#include "cri/runtime.h"
#include "driver/testing/sandbox.h"

namespace berth::cri::testing {

class TestContainerd {
 public:
  // Why these tests cannot run here ("" when they can).
  static std::string Unavailable() {
    if (::geteuid() != 0) return "containers need root";
    for (const char* bin : {"/usr/bin/containerd", "/usr/bin/ctr", "/usr/bin/containerd-shim-runc-v2"}) {
      if (::access(bin, X_OK) != 0) return StrCat(bin, " missing (scripts/install-deps installs containerd)");
    }
    if (::access("/usr/lib/cni/bridge", X_OK) != 0) return "CNI plugins missing (containernetworking-plugins)";
    return "";
  }

  explicit TestContainerd(std::string pod_cidr) {
    setup_.dir = sandbox_.Join("containerd");
    setup_.pod_cidr = std::move(pod_cidr);
    setup_.restrict_oom_score_adj = DefaultRestrictOomScoreAdj();
  }
  ~TestContainerd() { Stop(); }

  const ContainerdSetup& setup() const { return setup_; }
  Runtime& runtime() { return *runtime_; }
  const std::string& dir() const { return setup_.dir; }

  // Writes its files, starts containerd, waits until the CRI answers and
  // imports `archives` (default: berth's pause and toolbox images).
  absl::Status Start(std::vector<std::string> archives = {}) {
    if (archives.empty()) archives = {StrCat(BERTH_IMAGES_DIR, "/pause.tar"), StrCat(BERTH_IMAGES_DIR, "/toolbox.tar")};
    if (absl::Status st = WriteContainerdFiles(setup_); !st.ok()) return st;
    process_ = std::make_unique<berth::testing::Subprocess>(ContainerdArgv(setup_, "/usr/bin/containerd"),
                                                            setup_.dir + "/containerd.log");
    auto rt = GrpcRuntime::Connect(setup_.Endpoint(), {});
    if (!rt.ok()) return rt.status();
    runtime_ = std::move(*rt);
    if (!berth::testing::Eventually([&] { return runtime_->Version().ok(); }, absl::Seconds(30))) {
      return absl::DeadlineExceededError("containerd did not answer:\n" + process_->Output());
    }
    LinuxCommandRunner runner;
    return ImportImages(setup_.Socket(), archives, runner);
  }

  // containerd's log so far.
  std::string Log() const { return process_ ? process_->Output() : ""; }

  // Kills containerd abruptly (the containers keep running in their shims).
  void Kill() {
    if (process_) {
      process_->Signal(SIGKILL);
      process_->Wait(absl::Seconds(10));
      process_.reset();
    }
  }
  // Starts containerd again on the same directory.
  absl::Status Restart() {
    Kill();
    process_ = std::make_unique<berth::testing::Subprocess>(
        ContainerdArgv(setup_, "/usr/bin/containerd"),
        setup_.dir + "/containerd-" + std::to_string(++restarts_) + ".log");
    return berth::testing::Eventually([&] { return runtime_->Version().ok(); }, absl::Seconds(30))
               ? absl::OkStatus()
               : absl::DeadlineExceededError("containerd did not come back");
  }

  // PIDs of containerd shims serving this containerd.
  std::vector<pid_t> Shims() const {
    std::vector<pid_t> out;
    DIR* d = ::opendir("/proc");
    if (d == nullptr) return out;
    while (dirent* e = ::readdir(d)) {
      const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
      if (pid <= 0) continue;
      std::ifstream f(StrCat("/proc/", pid, "/cmdline"));
      std::stringstream ss;
      ss << f.rdbuf();
      std::string cmd = ss.str();
      for (char& c : cmd) c = c == '\0' ? ' ' : c;
      if (absl::StrContains(cmd, "containerd-shim") && absl::StrContains(cmd, setup_.Socket())) out.push_back(pid);
    }
    ::closedir(d);
    return out;
  }
  // Mounts below the containerd directory.
  std::vector<std::string> Mounts() const { return sandbox_.Mounts(); }
  bool BridgeExists() const { return ::access(("/sys/class/net/" + setup_.Bridge()).c_str(), F_OK) == 0; }

  void Stop() {
    if (runtime_ && process_) (void)RemoveAllSandboxes(*runtime_, {});
    if (process_) {
      process_->Signal(SIGTERM);
      if (!process_->Wait(absl::Seconds(20))) process_->Signal(SIGKILL);
      process_->Wait(absl::Seconds(10));
      process_.reset();
    }
    for (pid_t pid : Shims()) ::kill(pid, SIGKILL);
    LinuxCommandRunner runner;
    (void)DeleteLink(setup_.Bridge(), runner);
    sandbox_.Clean();
  }

 private:
  berth::testing::MountSandbox sandbox_;
  ContainerdSetup setup_;
  std::unique_ptr<berth::testing::Subprocess> process_;
  std::unique_ptr<GrpcRuntime> runtime_;
  int restarts_ = 0;
};

}  // namespace berth::cri::testing
