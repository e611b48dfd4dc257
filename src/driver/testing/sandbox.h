// Test helper for tests that mount and attach for real (as root): a temp
// directory that, when destroyed, unmounts everything mounted below it
// (deepest first, lazily if busy), detaches every loop device whose backing
// file lies below it, and removes it. Cleanup runs also when the test fails,
// so a failing test cannot leak mounts or loop devices into the next one.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <linux/loop.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/testing/temp_dir.h"

namespace berth::testing {

class MountSandbox {
 public:
  MountSandbox() = default;
  ~MountSandbox() { Clean(); }
  MountSandbox(const MountSandbox&) = delete;
  MountSandbox& operator=(const MountSandbox&) = delete;

  const std::string& path() const { return dir_.path(); }
  std::string Join(const std::string& name) const { return dir_.Join(name); }

  // Mount points below the sandbox, as the kernel lists them.
  std::vector<std::string> Mounts() const {
    std::vector<std::string> out;
    std::ifstream in("/proc/self/mountinfo");
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string id, parent, dev, root, target;
      fields >> id >> parent >> dev >> root >> target;
      if (target.rfind(dir_.path() + "/", 0) == 0 || target == dir_.path()) out.push_back(target);
    }
    return out;
  }

  // Loop devices backed by files below the sandbox.
  std::vector<std::string> Loops() const {
    std::vector<std::string> out;
    DIR* d = ::opendir("/sys/block");
    if (d == nullptr) return out;
    while (dirent* e = ::readdir(d)) {
      std::string name = e->d_name;
      if (name.rfind("loop", 0) != 0) continue;
      std::ifstream f("/sys/block/" + name + "/loop/backing_file");
      std::string backing;
      if (std::getline(f, backing) && backing.rfind(dir_.path() + "/", 0) == 0) {
        out.push_back("/dev/" + name);
      }
    }
    ::closedir(d);
    return out;
  }

  void Clean() {
    for (int round = 0; round < 4; ++round) {
      std::vector<std::string> mounts = Mounts();
      if (mounts.empty()) break;
      std::sort(mounts.begin(), mounts.end(),
                [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
      for (const auto& m : mounts) {
        if (::umount2(m.c_str(), 0) != 0) ::umount2(m.c_str(), MNT_DETACH);
      }
    }
    for (const auto& dev : Loops()) {
      int fd = ::open(dev.c_str(), O_RDWR | O_CLOEXEC);
      if (fd >= 0) {
        ::ioctl(fd, LOOP_CLR_FD, 0);
        ::close(fd);
      }
    }
  }

 private:
  TempDir dir_;
};

inline bool IsRoot() { return ::geteuid() == 0; }

}  // namespace berth::testing

#define BERTH_REQUIRE_ROOT()                                                   \
  do {                                                                         \
    if (!::berth::testing::IsRoot()) GTEST_SKIP() << "needs root (mounts, loops)"; \
  } while (0)
