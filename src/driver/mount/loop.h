// Loop devices: block devices backed by image files.
//
// LinuxLoopDevices talks to the kernel directly: /dev/loop-control
// (LOOP_CTL_GET_FREE) for a free device and LOOP_CONFIGURE to bind the image
// in one step, with direct I/O (no double caching through the pool's page
// cache) and, for devices that a mount will hold, autoclear: the kernel
// detaches the device when its last user goes, so a crash between attach and
// mount cannot leak it.
//
// A device is matched to its image by the backing file's identity — the
// device and inode numbers LOOP_GET_STATUS64 reports (lo_device, lo_inode),
// compared with stat(2) of the image — never by a path. The path the kernel
// shows in /sys/block/loopN/loop/backing_file is resolved through the mounts
// of whoever set the device up: once the container that attached an image
// is gone, a new container reads "/pool.img" or "/volumes/vol-….img" there,
// whatever path it uses itself. Device and inode are the same in every mount
// namespace, so berth-csi finds its devices again after a restart in a new
// container. An image that is already attached is reused, which makes
// Attach idempotent.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace berth::driver {

// An attached loop device. While the handle lives, the device stays open, so
// an autoclear device cannot vanish before the caller has mounted it.
class LoopHandle {
 public:
  virtual ~LoopHandle() = default;
  virtual const std::string& device() const = 0;  // "/dev/loopN"
};

// Which file a path is, independent of the path: stat(2)'s st_dev and st_ino.
struct FileId {
  dev_t dev = 0;
  ino_t ino = 0;
  friend bool operator==(const FileId&, const FileId&) = default;
  friend auto operator<=>(const FileId&, const FileId&) = default;
};

// The identity of the file at `path` (following symlinks). NOT_FOUND when it
// does not exist.
absl::StatusOr<FileId> IdentifyFile(const std::string& path);

struct LoopInfo {
  std::string device;  // /dev/loopN
  FileId backing;      // the backing file, as the kernel holds it
  // The backing file was unlinked: its inode number may already belong to
  // another file, so it is never matched to a path again.
  bool backing_deleted = false;
  // For messages only: the name the kernel shows, which depends on the mount
  // namespace of whoever attached the device.
  std::string backing_name;
  bool autoclear = false;
};

class LoopDevices {
 public:
  virtual ~LoopDevices() = default;

  // Every attached loop device.
  virtual absl::StatusOr<std::vector<LoopInfo>> List() = 0;

  // The device backed by the file at `image`, or "" if none (or if `image`
  // does not exist).
  virtual absl::StatusOr<std::string> Find(const std::string& image);

  // Attaches `image` (or reuses its existing device) and returns a handle
  // holding it open.
  virtual absl::StatusOr<std::unique_ptr<LoopHandle>> Attach(const std::string& image, bool autoclear) = 0;

  // Detaches `device`. OK if it is not attached.
  virtual absl::Status Detach(const std::string& device) = 0;

  // Makes `device` pick up a changed size of its backing file
  // (LOOP_SET_CAPACITY).
  virtual absl::Status RefreshCapacity(const std::string& device) = 0;

  // The size of `device` in bytes.
  virtual absl::StatusOr<int64_t> Size(const std::string& device) = 0;
};

// Thread-safety: thread-safe.
class LinuxLoopDevices final : public LoopDevices {
 public:
  // LoopDevices
  absl::StatusOr<std::vector<LoopInfo>> List() override;
  absl::StatusOr<std::unique_ptr<LoopHandle>> Attach(const std::string& image, bool autoclear) override;
  absl::Status Detach(const std::string& device) override;
  absl::Status RefreshCapacity(const std::string& device) override;
  absl::StatusOr<int64_t> Size(const std::string& device) override;
};

// What the kernel reports about the loop device `device` (/dev/loopN):
// NOT_FOUND when it is not attached. `sysfs_dir` is its /sys/block/loopN.
absl::StatusOr<LoopInfo> InspectLoopDevice(const std::string& device, const std::string& sysfs_dir);

// The size in bytes of a block device.
absl::StatusOr<int64_t> BlockDeviceSize(const std::string& device);

}  // namespace berth::driver
