// Filesystems on block devices: detection, creation, growth, and freezing.
//
// Formatter runs the distribution's tools through a CommandRunner: blkid to
// see whether a device holds anything (a filesystem, a partition table, LVM,
// ...), mkfs.ext4 / mkfs.xfs to create one on a blank device only, and
// resize2fs / xfs_growfs to grow a mounted filesystem online.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "common/exec.h"

namespace berth::driver {

// The filesystems berth-csi makes and grows.
bool SupportedFsType(const std::string& fs_type);

class Formatter {
 public:
  virtual ~Formatter() = default;
  // What blkid finds on `device`: a filesystem type ("ext4"), another
  // signature ("LVM2_member", "PTTYPE:gpt"), or "" when the device is blank.
  virtual absl::StatusOr<std::string> Detect(const std::string& device) = 0;
  // Makes a filesystem. Callers must have checked Detect() == "".
  virtual absl::Status Mkfs(const std::string& device, const std::string& fs_type) = 0;
  // Grows the filesystem of `device` to fill it: online when `mount_path`
  // names a mount of it, offline (ext4 only: e2fsck -f, then resize2fs) when
  // `mount_path` is empty. Online ext4 growth needs CAP_SYS_RESOURCE.
  virtual absl::Status Grow(const std::string& device, const std::string& mount_path, const std::string& fs_type) = 0;
};

class LinuxFormatter final : public Formatter {
 public:
  explicit LinuxFormatter(CommandRunner& runner) : runner_(runner) {}

  // Formatter
  absl::StatusOr<std::string> Detect(const std::string& device) override;
  absl::Status Mkfs(const std::string& device, const std::string& fs_type) override;
  absl::Status Grow(const std::string& device, const std::string& mount_path, const std::string& fs_type) override;

 private:
  absl::Status RunChecked(const std::vector<std::string>& argv, absl::Duration timeout);
  CommandRunner& runner_;
};

// FIFREEZE / FITHAW of the filesystem mounted at a path.
class Freezer {
 public:
  virtual ~Freezer() = default;
  virtual absl::Status Freeze(const std::string& mount_path) = 0;
  virtual absl::Status Thaw(const std::string& mount_path) = 0;
};

class LinuxFreezer final : public Freezer {
 public:
  // Freezer
  absl::Status Freeze(const std::string& mount_path) override;
  absl::Status Thaw(const std::string& mount_path) override;
};

}  // namespace berth::driver
