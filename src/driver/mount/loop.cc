#include "driver/mount/loop.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <linux/loop.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
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

}  // namespace

absl::StatusOr<FileId> IdentifyFile(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return ErrnoStatus(errno, StrCat("stat ", path));
  return FileId{st.st_dev, st.st_ino};
}

absl::StatusOr<std::string> LoopDevices::Find(const std::string& image) {
  auto id = IdentifyFile(image);
  if (absl::IsNotFound(id.status())) return std::string();
  if (!id.ok()) return id.status();
  BERTH_ASSIGN_OR_RETURN(auto loops, List());
  for (const auto& l : loops) {
    if (!l.backing_deleted && l.backing == *id) return l.device;
  }
  return std::string();
}

absl::StatusOr<LoopInfo> InspectLoopDevice(const std::string& device, const std::string& sysfs_dir) {
  // O_RDONLY: closing a block device opened for writing makes udev rescan it.
  int fd = ::open(device.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) {
      return absl::FailedPreconditionError(
          StrCat(device, " does not exist although ", sysfs_dir,
                 " does: berth-csi needs the host's /dev (in a container, mount it from the host)"));
    }
    return ErrnoStatus(errno, StrCat("open ", device));
  }
  loop_info64 info;
  std::memset(&info, 0, sizeof(info));
  const int r = ::ioctl(fd, LOOP_GET_STATUS64, &info);
  const int err = errno;
  ::close(fd);
  if (r != 0) {
    if (err == ENXIO) return absl::NotFoundError(StrCat(device, " is not attached"));
    return ErrnoStatus(err, StrCat("LOOP_GET_STATUS64 ", device));
  }
  LoopInfo out;
  out.device = device;
  // lo_device is the kernel's 64-bit encoding of the backing file's st_dev
  // (huge_encode_dev); decode it into this libc's dev_t.
  const uint64_t d = info.lo_device;
  out.backing.dev =
      makedev(static_cast<unsigned>((d & 0xfff00) >> 8), static_cast<unsigned>((d & 0xff) | ((d >> 12) & 0xfff00)));
  out.backing.ino = static_cast<ino_t>(info.lo_inode);
  out.autoclear = (info.lo_flags & LO_FLAGS_AUTOCLEAR) != 0;
  // The name is only for messages; " (deleted)" is how the kernel says the
  // file was unlinked, whoever reads it.
  auto name = ReadFile(sysfs_dir + "/loop/backing_file");
  if (name.ok()) {
    out.backing_name = std::string(TrimRight(*name));
  } else {
    out.backing_name = std::string(reinterpret_cast<const char*>(info.lo_file_name),
                                   ::strnlen(reinterpret_cast<const char*>(info.lo_file_name), LO_NAME_SIZE));
  }
  constexpr std::string_view kDeleted = " (deleted)";
  if (out.backing_name.ends_with(kDeleted)) {
    out.backing_deleted = true;
    out.backing_name.resize(out.backing_name.size() - kDeleted.size());
  }
  return out;
}

absl::StatusOr<std::vector<LoopInfo>> LinuxLoopDevices::List() {
  std::vector<LoopInfo> out;
  DIR* d = ::opendir("/sys/block");
  if (d == nullptr) return ErrnoStatus(errno, "open /sys/block");
  absl::Status status;
  while (dirent* e = ::readdir(d)) {
    std::string_view name = e->d_name;
    if (!name.starts_with("loop")) continue;
    const std::string sysfs = StrCat("/sys/block/", name);
    // loop/ exists only while the device is attached: skip free devices
    // without opening them.
    struct stat st {};
    if (::stat(StrCat(sysfs, "/loop").c_str(), &st) != 0) continue;
    auto info = InspectLoopDevice(StrCat("/dev/", name), sysfs);
    if (absl::IsNotFound(info.status())) continue;  // detached meanwhile
    if (!info.ok()) {
      status = info.status();
      break;
    }
    out.push_back(std::move(*info));
  }
  ::closedir(d);
  if (!status.ok()) return status;
  return out;
}

absl::StatusOr<std::unique_ptr<LoopHandle>> LinuxLoopDevices::Attach(const std::string& image, bool autoclear) {
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
    std::strncpy(reinterpret_cast<char*>(config.info.lo_file_name), image.c_str(), LO_NAME_SIZE - 1);
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

absl::StatusOr<int64_t> LinuxLoopDevices::Size(const std::string& device) { return BlockDeviceSize(device); }

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
