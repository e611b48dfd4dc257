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
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
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

  // Loop devices backed by files below the sandbox, and by files on
  // filesystems that those devices hold (volume images in a pool image),
  // found by the backing file's device and inode (LOOP_GET_STATUS64) as
  // berth-csi finds them: the path /sys shows depends on the mount namespace
  // that attached the device. Devices backing other devices come after them
  // (detach in reverse order).
  std::vector<std::string> Loops() const {
    struct Loop {
      std::string device;
      dev_t rdev = 0;
      dev_t backing_dev = 0;
      ino_t backing_ino = 0;
      std::string name;
    };
    std::vector<Loop> all;
    DIR* d = ::opendir("/sys/block");
    if (d == nullptr) return {};
    while (dirent* e = ::readdir(d)) {
      std::string name = e->d_name;
      if (name.rfind("loop", 0) != 0) continue;
      Loop l;
      l.device = "/dev/" + name;
      int fd = ::open(l.device.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) continue;
      loop_info64 info{};
      struct stat st {};
      const bool attached = ::ioctl(fd, LOOP_GET_STATUS64, &info) == 0 && ::fstat(fd, &st) == 0;
      ::close(fd);
      if (!attached) continue;
      const uint64_t dev = info.lo_device;
      l.rdev = st.st_rdev;
      l.backing_dev = makedev(static_cast<unsigned>((dev & 0xfff00) >> 8),
                              static_cast<unsigned>((dev & 0xff) | ((dev >> 12) & 0xfff00)));
      l.backing_ino = static_cast<ino_t>(info.lo_inode);
      std::ifstream f("/sys/block/" + name + "/loop/backing_file");
      std::getline(f, l.name);
      all.push_back(std::move(l));
    }
    ::closedir(d);
    // Files below the sandbox (through whatever is mounted there).
    std::set<std::pair<dev_t, ino_t>> files;
    std::error_code ec;
    for (auto it = std::filesystem::recursive_directory_iterator(
             dir_.path(), std::filesystem::directory_options::skip_permission_denied, ec);
         !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
      struct stat st {};
      if (::lstat(it->path().c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
        files.emplace(st.st_dev, st.st_ino);
      }
    }
    std::vector<std::string> out;
    std::set<dev_t> ours;  // device numbers of our loop devices
    std::vector<bool> taken(all.size(), false);
    for (bool grew = true; grew;) {
      grew = false;
      for (size_t i = 0; i < all.size(); ++i) {
        const Loop& l = all[i];
        if (taken[i]) continue;
        const bool below = l.name.rfind(dir_.path() + "/", 0) == 0;
        if (below || files.count({l.backing_dev, l.backing_ino}) || ours.count(l.backing_dev)) {
          taken[i] = grew = true;
          ours.insert(l.rdev);
          out.push_back(l.device);
        }
      }
    }
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
    std::vector<std::string> loops = Loops();
    for (auto it = loops.rbegin(); it != loops.rend(); ++it) {
      const std::string& dev = *it;
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

#define BERTH_REQUIRE_ROOT()                                                       \
  do {                                                                             \
    if (!::berth::testing::IsRoot()) GTEST_SKIP() << "needs root (mounts, loops)"; \
  } while (0)
