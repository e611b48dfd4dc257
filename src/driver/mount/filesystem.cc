#include "driver/mount/filesystem.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>

#include "common/status.h"
#include "common/strings.h"

namespace berth::driver {

bool SupportedFsType(const std::string& fs_type) { return fs_type == "ext4" || fs_type == "xfs"; }

absl::Status LinuxFormatter::RunChecked(const std::vector<std::string>& argv, absl::Duration timeout) {
  BERTH_ASSIGN_OR_RETURN(CommandResult r, runner_.Run(argv, timeout));
  if (r.exit_code != 0) {
    return absl::InternalError(
        StrCat(JoinArgv(argv), " failed with exit code ", r.exit_code, ": ", TrimRight(r.output)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> LinuxFormatter::Detect(const std::string& device) {
  // -p: low-level probe of the device itself (no cache); prints TYPE= for a
  // filesystem or PTTYPE= for a partition table; exit code 2 means nothing.
  BERTH_ASSIGN_OR_RETURN(CommandResult r, runner_.Run({"blkid", "-p", "-o", "export", device}, absl::Seconds(60)));
  if (r.exit_code == 2) return std::string();
  if (r.exit_code != 0) {
    return absl::InternalError(
        StrCat("blkid ", device, " failed with exit code ", r.exit_code, ": ", TrimRight(r.output)));
  }
  std::string type, pttype;
  size_t pos = 0;
  while (pos < r.output.size()) {
    size_t end = r.output.find('\n', pos);
    if (end == std::string::npos) end = r.output.size();
    std::string_view line(r.output.data() + pos, end - pos);
    if (line.starts_with("TYPE=")) type = std::string(line.substr(5));
    if (line.starts_with("PTTYPE=")) pttype = std::string(line.substr(7));
    pos = end + 1;
  }
  if (!type.empty()) return type;
  if (!pttype.empty()) return StrCat("PTTYPE:", pttype);
  // blkid found something (exit 0) it cannot name: treat as not blank.
  return std::string("unknown");
}

absl::Status LinuxFormatter::Mkfs(const std::string& device, const std::string& fs_type) {
  if (fs_type == "ext4") {
    // lazy init keeps mkfs fast on large sparse images; the kernel finishes
    // inode table zeroing in the background. 4 KiB blocks always: a loop
    // device's logical block size can differ between attaches (direct I/O
    // takes the backing filesystem's), and a small filesystem made with
    // mke2fs's default 1 KiB blocks then fails to mount ("bad block size")
    // — e.g. a clone or restore of a volume formatted on a 512-byte device.
    return RunChecked(
        {"mkfs.ext4", "-q", "-F", "-b", "4096", "-E", "lazy_itable_init=1,lazy_journal_init=1", "-m", "0", device},
        absl::Minutes(10));
  }
  if (fs_type == "xfs") {
    // 4 KiB sectors for the same reason (an XFS with 512-byte sectors does
    // not mount on a 4 KiB device; the reverse works).
    return RunChecked({"mkfs.xfs", "-q", "-s", "size=4096", device}, absl::Minutes(10));
  }
  return absl::InvalidArgumentError(StrCat("unsupported filesystem type \"", fs_type, "\""));
}

absl::Status LinuxFormatter::Grow(const std::string& device, const std::string& mount_path,
                                  const std::string& fs_type) {
  if (fs_type == "ext4") {
    if (mount_path.empty()) {
      // resize2fs insists on a freshly checked filesystem when offline.
      BERTH_ASSIGN_OR_RETURN(CommandResult fsck, runner_.Run({"e2fsck", "-f", "-p", device}, absl::Minutes(30)));
      if (fsck.exit_code >= 4) {
        return absl::InternalError(StrCat("e2fsck -f -p ", device, " found problems it could not fix (exit ",
                                          fsck.exit_code, "): ", TrimRight(fsck.output)));
      }
    }
    absl::Status st = RunChecked({"resize2fs", device}, absl::Minutes(30));
    if (!st.ok() && !mount_path.empty() && st.message().find("Permission denied") != absl::string_view::npos) {
      return absl::InternalError(StrCat(st.message(),
                                        " (growing a mounted ext4 filesystem needs "
                                        "CAP_SYS_RESOURCE; run berth-csi with it)"));
    }
    return st;
  }
  if (fs_type == "xfs") {
    if (mount_path.empty()) {
      return absl::InvalidArgumentError("xfs can only be grown while mounted");
    }
    return RunChecked({"xfs_growfs", mount_path}, absl::Minutes(30));
  }
  return absl::InvalidArgumentError(StrCat("cannot grow filesystem type \"", fs_type, "\""));
}

absl::Status LinuxFreezer::Freeze(const std::string& mount_path) {
  int fd = ::open(mount_path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, StrCat("open ", mount_path));
  absl::Status st;
  if (::ioctl(fd, FIFREEZE, 0) != 0) st = ErrnoStatus(errno, StrCat("freeze ", mount_path));
  ::close(fd);
  return st;
}

absl::Status LinuxFreezer::Thaw(const std::string& mount_path) {
  int fd = ::open(mount_path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, StrCat("open ", mount_path));
  absl::Status st;
  if (::ioctl(fd, FITHAW, 0) != 0 && errno != EINVAL) {  // EINVAL: not frozen
    st = ErrnoStatus(errno, StrCat("thaw ", mount_path));
  }
  ::close(fd);
  return st;
}

}  // namespace berth::driver
