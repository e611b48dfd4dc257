#include "driver/mount/loop.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <linux/loop.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>

#include "common/fs.h"
#include "common/status.h"
#include "common/strings.h"

namespace berth::driver {
namespace {

// Serializes attach within this process: LOOP_CTL_GET_FREE followed by
// LOOP_CONFIGURE is not atomic; another process may still take the device in
// between, which shows as EBUSY and is retried.
std::mutex attach_mu;

class LinuxLoopHandle final : public LoopHandle {
 public:
  LinuxLoopHandle(std::string device, int fd) : device_(std::move(device)), fd_(fd) {}
  ~LinuxLoopHandle() override {
    if (fd_ >= 0) ::close(fd_);
  }
  const std::string& device() const override { return device_; }

 private:
  const std::string device_;
  const int fd_;
};

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

absl::StatusOr<std::string> LoopDevices::Find(const std::string& image) {
  BERTH_ASSIGN_OR_RETURN(auto loops, List());
  for (const auto& l : loops) {
    if (l.backing_file == image) return l.device;
  }
  return std::string();
}

absl::StatusOr<std::vector<LoopInfo>> LinuxLoopDevices::List() {
  std::vector<LoopInfo> out;
  DIR* d = ::opendir("/sys/block");
  if (d == nullptr) return ErrnoStatus(errno, "open /sys/block");
  while (dirent* e = ::readdir(d)) {
    std::string_view name = e->d_name;
    if (!name.starts_with("loop")) continue;
    const std::string base = StrCat("/sys/block/", name, "/loop/");
    auto backing = ReadFile(base + "backing_file");
    if (!backing.ok()) continue;  // not attached
    LoopInfo info;
    info.device = StrCat("/dev/", name);
    info.backing_file = Trim(*backing);
    // The kernel appends " (deleted)" when the backing file was unlinked.
    auto autoclear = ReadFile(base + "autoclear");
    info.autoclear = autoclear.ok() && Trim(*autoclear) == "1";
    out.push_back(std::move(info));
  }
  ::closedir(d);
  return out;
}

absl::StatusOr<std::unique_ptr<LoopHandle>> LinuxLoopDevices::Attach(const std::string& image,
                                                                     bool autoclear) {
  std::lock_guard<std::mutex> lock(attach_mu);
  BERTH_ASSIGN_OR_RETURN(std::string existing, Find(image));
  if (!existing.empty()) {
    int fd = ::open(existing.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus(errno, StrCat("open ", existing));
    return std::unique_ptr<LoopHandle>(new LinuxLoopHandle(existing, fd));
  }

  int file_fd = ::open(image.c_str(), O_RDWR | O_CLOEXEC);
  if (file_fd < 0) return ErrnoStatus(errno, StrCat("open image ", image));
  int ctl = ::open("/dev/loop-control", O_RDWR | O_CLOEXEC);
  if (ctl < 0) {
    absl::Status st = ErrnoStatus(errno, "open /dev/loop-control");
    ::close(file_fd);
    return st;
  }
  absl::Status last = absl::UnavailableError("no free loop device");
  for (int attempt = 0; attempt < 16; ++attempt) {
    const int n = ::ioctl(ctl, LOOP_CTL_GET_FREE);
    if (n < 0) {
      last = ErrnoStatus(errno, "LOOP_CTL_GET_FREE");
      break;
    }
    const std::string dev = StrCat("/dev/loop", n);
    int loop_fd = ::open(dev.c_str(), O_RDWR | O_CLOEXEC);
    if (loop_fd < 0) {
      last = ErrnoStatus(errno, StrCat("open ", dev));
      continue;
    }
    loop_config config;
    std::memset(&config, 0, sizeof(config));
    config.fd = static_cast<uint32_t>(file_fd);
    config.info.lo_flags = LO_FLAGS_DIRECT_IO | (autoclear ? LO_FLAGS_AUTOCLEAR : 0);
    std::strncpy(reinterpret_cast<char*>(config.info.lo_file_name), image.c_str(),
                 LO_NAME_SIZE - 1);
    if (::ioctl(loop_fd, LOOP_CONFIGURE, &config) == 0) {
      ::close(ctl);
      ::close(file_fd);
      return std::unique_ptr<LoopHandle>(new LinuxLoopHandle(dev, loop_fd));
    }
    last = ErrnoStatus(errno, StrCat("LOOP_CONFIGURE ", dev, " with ", image));
    ::close(loop_fd);
    if (errno != EBUSY) break;  // taken by someone else in between: try another
  }
  ::close(ctl);
  ::close(file_fd);
  return last;
}

absl::Status LinuxLoopDevices::Detach(const std::string& device) {
  int fd = ::open(device.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENXIO) return absl::OkStatus();
    return ErrnoStatus(errno, StrCat("open ", device));
  }
  absl::Status st;
  if (::ioctl(fd, LOOP_CLR_FD, 0) != 0 && errno != ENXIO) {
    st = ErrnoStatus(errno, StrCat("detach ", device));
  }
  ::close(fd);
  return st;
}

absl::Status LinuxLoopDevices::RefreshCapacity(const std::string& device) {
  int fd = ::open(device.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, StrCat("open ", device));
  absl::Status st;
  if (::ioctl(fd, LOOP_SET_CAPACITY, 0) != 0) {
    st = ErrnoStatus(errno, StrCat("LOOP_SET_CAPACITY ", device));
  }
  ::close(fd);
  return st;
}

absl::StatusOr<int64_t> LinuxLoopDevices::Size(const std::string& device) {
  return BlockDeviceSize(device);
}

absl::StatusOr<int64_t> BlockDeviceSize(const std::string& device) {
  int fd = ::open(device.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, StrCat("open ", device));
  uint64_t size = 0;
  absl::Status st;
  if (::ioctl(fd, BLKGETSIZE64, &size) != 0) st = ErrnoStatus(errno, StrCat("size of ", device));
  ::close(fd);
  if (!st.ok()) return st;
  return static_cast<int64_t>(size);
}

}  // namespace berth::driver
