// Loop devices: block devices backed by image files.
//
// LinuxLoopDevices talks to the kernel directly: /dev/loop-control
// (LOOP_CTL_GET_FREE) for a free device and LOOP_CONFIGURE to bind the image
// in one step, with direct I/O (no double caching through the pool's page
// cache) and, for devices that a mount will hold, autoclear: the kernel
// detaches the device when its last user goes, so a crash between attach and
// mount cannot leak it. An image that is already attached is found through
// /sys/block/loop*/loop/backing_file and reused, which makes Attach
// idempotent.
#pragma once

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

struct LoopInfo {
  std::string device;        // /dev/loopN
  std::string backing_file;  // as the kernel reports it
  bool autoclear = false;
};

class LoopDevices {
 public:
  virtual ~LoopDevices() = default;

  // Every attached loop device.
  virtual absl::StatusOr<std::vector<LoopInfo>> List() = 0;

  // The device backed by `image` (canonical path), or "" if none.
  virtual absl::StatusOr<std::string> Find(const std::string& image);

  // Attaches `image` (or reuses its existing device) and returns a handle
  // holding it open.
  virtual absl::StatusOr<std::unique_ptr<LoopHandle>> Attach(const std::string& image,
                                                             bool autoclear) = 0;

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
  absl::StatusOr<std::unique_ptr<LoopHandle>> Attach(const std::string& image,
                                                     bool autoclear) override;
  absl::Status Detach(const std::string& device) override;
  absl::Status RefreshCapacity(const std::string& device) override;
  absl::StatusOr<int64_t> Size(const std::string& device) override;
};

// The size in bytes of a block device.
absl::StatusOr<int64_t> BlockDeviceSize(const std::string& device);

}  // namespace berth::driver
