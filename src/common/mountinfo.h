// The mount table, from /proc/self/mountinfo (whose paths are unambiguous:
// octal-escaped, unlike /proc/mounts). Used by berth-csi's mounter and by
// the node agent, which rebuilds what is mounted after a restart.
//
// Thread-safety: stateless.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace berth {

struct MountEntry {
  std::string source;      // e.g. /dev/loop3
  std::string target;      // mount point
  std::string fs_type;     // ext4, xfs, ...
  std::string root;        // root of the mount within its filesystem
  std::string options;     // per-mount options ("rw,noatime")
  unsigned int major = 0;  // device of the mounted filesystem
  unsigned int minor = 0;
  bool read_only() const;
};

// Parses the text of /proc/self/mountinfo. DATA_LOSS for a malformed line.
absl::StatusOr<std::vector<MountEntry>> ParseMountInfo(const std::string& text);

// This process's mount table.
absl::StatusOr<std::vector<MountEntry>> ReadMountTable();

}  // namespace berth
