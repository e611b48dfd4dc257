#include "driver/mount/mounter.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include <cerrno>
#include <map>
#include <optional>

#include "common/fs.h"
#include "common/status.h"
#include "common/strings.h"

namespace berth::driver {
namespace {

struct FlagBits {
  unsigned long set;
  unsigned long clear;
};

const std::map<std::string, FlagBits>& KnownFlags() {
  static const auto* flags = new std::map<std::string, FlagBits>{
      {"ro", {MS_RDONLY, 0}},
      {"rw", {0, MS_RDONLY}},
      {"nosuid", {MS_NOSUID, 0}},
      {"suid", {0, MS_NOSUID}},
      {"nodev", {MS_NODEV, 0}},
      {"dev", {0, MS_NODEV}},
      {"noexec", {MS_NOEXEC, 0}},
      {"exec", {0, MS_NOEXEC}},
      {"sync", {MS_SYNCHRONOUS, 0}},
      {"async", {0, MS_SYNCHRONOUS}},
      {"dirsync", {MS_DIRSYNC, 0}},
      {"noatime", {MS_NOATIME, 0}},
      {"atime", {0, MS_NOATIME}},
      {"nodiratime", {MS_NODIRATIME, 0}},
      {"diratime", {0, MS_NODIRATIME}},
      {"relatime", {MS_RELATIME, 0}},
      {"norelatime", {0, MS_RELATIME}},
      {"strictatime", {MS_STRICTATIME, 0}},
      {"lazytime", {MS_LAZYTIME, 0}},
      {"nolazytime", {0, MS_LAZYTIME}},
      {"silent", {MS_SILENT, 0}},
      {"loud", {0, MS_SILENT}},
      {"defaults", {0, 0}},
  };
  return *flags;
}

// Flags that change what a mount *is* rather than how it behaves; never
// accepted from a request.
bool Forbidden(std::string_view f) {
  for (std::string_view bad : {"bind", "rbind", "move", "remount", "shared", "rshared", "private", "rprivate", "slave",
                               "rslave", "unbindable", "runbindable"}) {
    if (f == bad) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<std::optional<MountEntry>> Mounter::Find(const std::string& target) {
  BERTH_ASSIGN_OR_RETURN(auto entries, List());
  std::optional<MountEntry> found;
  for (auto& e : entries) {
    if (e.target == target) found = e;  // later lines are mounted on top
  }
  return found;
}

absl::StatusOr<bool> Mounter::IsMountPoint(const std::string& target) {
  BERTH_ASSIGN_OR_RETURN(auto found, Find(target));
  return found.has_value();
}

absl::StatusOr<bool> LinuxMounter::IsMountPoint(const std::string& target) {
  struct statx stx {};
  if (::statx(AT_FDCWD, target.c_str(), AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT, STATX_BASIC_STATS, &stx) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return false;
    return Mounter::IsMountPoint(target);  // e.g. EIO: the mount table still answers
  }
  // Linux 5.8+ reports STATX_ATTR_MOUNT_ROOT; the mount table otherwise.
  if ((stx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) == 0) return Mounter::IsMountPoint(target);
  return (stx.stx_attributes & STATX_ATTR_MOUNT_ROOT) != 0;
}

absl::Status ParseMountFlags(const std::vector<std::string>& flags, unsigned long* ms_flags, std::string* data) {
  *ms_flags = 0;
  data->clear();
  for (const std::string& flag : flags) {
    for (std::string_view f : Split(flag, ',')) {
      if (f.empty()) continue;
      for (char c : f) {
        if (static_cast<unsigned char>(c) < 0x21 || c == 0x7f) {
          return absl::InvalidArgumentError(
              StrCat("mount flag \"", std::string(f), "\" contains whitespace or control characters"));
        }
      }
      if (Forbidden(f)) {
        return absl::InvalidArgumentError(StrCat("mount flag \"", std::string(f), "\" is not allowed"));
      }
      auto it = KnownFlags().find(std::string(f));
      if (it != KnownFlags().end()) {
        *ms_flags = (*ms_flags | it->second.set) & ~it->second.clear;
        continue;
      }
      if (!data->empty()) data->push_back(',');
      data->append(f.data(), f.size());
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<MountEntry>> LinuxMounter::List() { return ReadMountTable(); }

absl::Status LinuxMounter::Mount(const std::string& source, const std::string& target, const std::string& fs_type,
                                 const std::vector<std::string>& flags) {
  unsigned long ms = 0;
  std::string data;
  BERTH_RETURN_IF_ERROR(ParseMountFlags(flags, &ms, &data));
  if (::mount(source.c_str(), target.c_str(), fs_type.c_str(), ms, data.empty() ? nullptr : data.c_str()) != 0) {
    return ErrnoStatus(errno,
                       StrCat("mount ", source, " (", fs_type, ") at ", target, data.empty() ? "" : " with " + data));
  }
  return absl::OkStatus();
}

absl::Status LinuxMounter::BindMount(const std::string& source, const std::string& target, bool read_only) {
  if (::mount(source.c_str(), target.c_str(), nullptr, MS_BIND, nullptr) != 0) {
    return ErrnoStatus(errno, StrCat("bind mount ", source, " at ", target));
  }
  if (read_only && ::mount(nullptr, target.c_str(), nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY, nullptr) != 0) {
    absl::Status st = ErrnoStatus(errno, StrCat("remount ", target, " read-only"));
    ::umount2(target.c_str(), 0);
    return st;
  }
  return absl::OkStatus();
}

absl::Status LinuxMounter::Unmount(const std::string& target) {
  if (::umount2(target.c_str(), UMOUNT_NOFOLLOW) != 0) {
    if (errno == EINVAL || errno == ENOENT) return absl::OkStatus();  // not a mount point
    return ErrnoStatus(errno, StrCat("unmount ", target));
  }
  return absl::OkStatus();
}

}  // namespace berth::driver
