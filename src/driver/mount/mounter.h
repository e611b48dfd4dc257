// Mounting, unmounting and reading the mount table.
//
// LinuxMounter calls mount(2)/umount2(2) directly (no mount(8)): request
// mount flags such as "ro", "noatime" or "nosuid" become MS_* flags, the rest
// is passed to the filesystem as data ("discard", "nouuid", ...). The mount
// table is read from /proc/self/mountinfo, whose paths are unambiguous
// (octal-escaped), unlike /proc/mounts.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/mountinfo.h"

namespace berth::driver {

using ::berth::MountEntry;
using ::berth::ParseMountInfo;

class Mounter {
 public:
  virtual ~Mounter() = default;

  // The current mount table.
  virtual absl::StatusOr<std::vector<MountEntry>> List() = 0;

  // Mounts `source` (a block device) with `fs_type` at `target`.
  // INVALID_ARGUMENT for a flag berth does not accept (see ParseMountFlags).
  virtual absl::Status Mount(const std::string& source, const std::string& target, const std::string& fs_type,
                             const std::vector<std::string>& flags) = 0;

  // Bind-mounts `source` (directory or device node) onto `target`,
  // read-only if asked (bind, then remount read-only: the kernel ignores
  // MS_RDONLY on the initial bind).
  virtual absl::Status BindMount(const std::string& source, const std::string& target, bool read_only) = 0;

  // Unmounts `target`. OK if nothing is mounted there.
  virtual absl::Status Unmount(const std::string& target) = 0;

  // The topmost mount at `target`, if any.
  absl::StatusOr<std::optional<MountEntry>> Find(const std::string& target);

  // Whether something is mounted at `target` (false if it does not exist).
  // By default Find; LinuxMounter asks statx(2) whether `target` is the root
  // of a mount instead of reading the whole mount table, which with a
  // hundred containers' overlay mounts costs milliseconds a call.
  virtual absl::StatusOr<bool> IsMountPoint(const std::string& target);
};

// Thread-safety: thread-safe.
class LinuxMounter final : public Mounter {
 public:
  // Mounter
  absl::StatusOr<std::vector<MountEntry>> List() override;
  absl::Status Mount(const std::string& source, const std::string& target, const std::string& fs_type,
                     const std::vector<std::string>& flags) override;
  absl::Status BindMount(const std::string& source, const std::string& target, bool read_only) override;
  absl::Status Unmount(const std::string& target) override;
  absl::StatusOr<bool> IsMountPoint(const std::string& target) override;
};

// Splits mount flags into MS_* bits and a data string. Each flag may itself
// be a comma-separated list. INVALID_ARGUMENT for flags that would undermine
// the node ("bind", "rbind", "move", "remount", "shared", ...) or contain
// characters that cannot be passed safely.
absl::Status ParseMountFlags(const std::vector<std::string>& flags, unsigned long* ms_flags, std::string* data);

}  // namespace berth::driver
