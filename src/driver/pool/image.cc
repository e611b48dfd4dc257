#include "driver/pool/image.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/fd.h"
#include "common/status.h"
#include "common/strings.h"
#include "common/units.h"

namespace berth::driver {
namespace {

absl::Status SparseCopy(int in, int out, int64_t size, const std::string& src) {
  off_t pos = 0;
  while (pos < size) {
    off_t data = ::lseek(in, pos, SEEK_DATA);
    if (data < 0) {
      if (errno == ENXIO) break;  // only a hole remains
      return ErrnoStatus(errno, StrCat("seek data in ", src));
    }
    off_t hole = ::lseek(in, data, SEEK_HOLE);
    if (hole < 0) return ErrnoStatus(errno, StrCat("seek hole in ", src));
    off_t in_off = data;
    off_t out_off = data;
    while (in_off < hole) {
      ssize_t n = ::copy_file_range(in, &in_off, out, &out_off, static_cast<size_t>(hole - in_off), 0);
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus(errno, StrCat("copy data of ", src));
      }
      if (n == 0) break;
    }
    pos = hole;
  }
  return absl::OkStatus();
}

// fallocate's failures, as the statuses CreateAllocatedImage promises.
absl::Status AllocateError(int err, const std::string& path, int64_t bytes) {
  if (err == ENOSPC || err == EDQUOT) {
    return absl::ResourceExhaustedError(StrCat("cannot allocate ", FormatByteSizeApprox(bytes), " for ", path,
                                               ": its filesystem has not enough free space"));
  }
  if (err == EOPNOTSUPP) {
    return absl::FailedPreconditionError(
        StrCat("the filesystem holding ", path, " cannot preallocate files (fallocate: ", std::strerror(err), ")"));
  }
  return ErrnoStatus(err, StrCat("allocate ", path));
}

// Allocates [offset, offset+len) of `fd`; mode 0 leaves existing blocks and
// the data in them alone.
int Fallocate(int fd, int64_t offset, int64_t len) {
  while (::fallocate(fd, 0, offset, len) != 0) {
    if (errno != EINTR) return errno;
  }
  return 0;
}

}  // namespace

absl::Status CreateAllocatedImage(const std::string& path, int64_t size) {
  Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!fd.ok()) return ErrnoStatus(errno, StrCat("create image ", path));
  // btrfs: preallocated blocks are overwritten in place only the first
  // time; NOCOW (settable only while the file is empty) makes that always
  // so. Other filesystems refuse the flag, which is fine.
  int flags = 0;
  if (::ioctl(fd.get(), FS_IOC_GETFLAGS, &flags) == 0) {
    flags |= FS_NOCOW_FL;
    (void)::ioctl(fd.get(), FS_IOC_SETFLAGS, &flags);
  }
  absl::Status st;
  if (int err = Fallocate(fd.get(), 0, size); err != 0) {
    st = AllocateError(err, path, size);
  } else if (::fsync(fd.get()) != 0) {
    st = ErrnoStatus(errno, StrCat("fsync ", path));
  }
  if (!st.ok()) ::unlink(path.c_str());
  return st;
}

absl::Status AllocateImage(const std::string& path) {
  Fd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd.ok()) return ErrnoStatus(errno, StrCat("open ", path));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus(errno, StrCat("stat ", path));
  const int64_t missing = st.st_size - static_cast<int64_t>(st.st_blocks) * 512;
  if (int err = Fallocate(fd.get(), 0, st.st_size); err != 0)
    return AllocateError(err, path, std::max<int64_t>(missing, 0));
  if (::fsync(fd.get()) != 0) return ErrnoStatus(errno, StrCat("fsync ", path));
  return absl::OkStatus();
}

absl::StatusOr<int64_t> AllocatedBytes(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return ErrnoStatus(errno, StrCat("stat ", path));
  return static_cast<int64_t>(st.st_blocks) * 512;
}

absl::Status CreateSparseImage(const std::string& path, int64_t size) {
  Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!fd.ok()) return ErrnoStatus(errno, StrCat("create image ", path));
  if (::ftruncate(fd.get(), size) != 0 || ::fsync(fd.get()) != 0) {
    absl::Status st = ErrnoStatus(errno, StrCat("size image ", path));
    ::unlink(path.c_str());
    return st;
  }
  return absl::OkStatus();
}

absl::Status CopyImage(const std::string& src, const std::string& dst, bool reflink) {
  Fd in(::open(src.c_str(), O_RDONLY | O_CLOEXEC));
  if (!in.ok()) return ErrnoStatus(errno, StrCat("open ", src));
  struct stat st {};
  if (::fstat(in.get(), &st) != 0) return ErrnoStatus(errno, StrCat("stat ", src));
  Fd out(::open(dst.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!out.ok()) return ErrnoStatus(errno, StrCat("create image ", dst));
  absl::Status result;
  if (reflink) {
    if (::ioctl(out.get(), FICLONE, in.get()) != 0) {
      result = ErrnoStatus(errno, StrCat("reflink ", src, " to ", dst));
    }
  } else {
    if (::ftruncate(out.get(), st.st_size) != 0) {
      result = ErrnoStatus(errno, StrCat("size ", dst));
    } else {
      result = SparseCopy(in.get(), out.get(), st.st_size, src);
    }
  }
  if (result.ok() && ::fsync(out.get()) != 0) result = ErrnoStatus(errno, StrCat("fsync ", dst));
  if (!result.ok()) ::unlink(dst.c_str());
  return result;
}

absl::Status GrowImage(const std::string& path, int64_t size, bool allocate) {
  Fd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd.ok()) return ErrnoStatus(errno, StrCat("open ", path));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus(errno, StrCat("stat ", path));
  if (st.st_size >= size) return absl::OkStatus();
  if (allocate) {
    // fallocate extends the size too: a failure leaves the old size (the
    // blocks it got are freed again by the truncate).
    if (int err = Fallocate(fd.get(), st.st_size, size - st.st_size); err != 0) {
      (void)::ftruncate(fd.get(), st.st_size);
      return AllocateError(err, path, size - st.st_size);
    }
  }
  if (::ftruncate(fd.get(), size) != 0) return ErrnoStatus(errno, StrCat("grow ", path));
  if (::fsync(fd.get()) != 0) return ErrnoStatus(errno, StrCat("fsync ", path));
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ImageSize(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return ErrnoStatus(errno, StrCat("stat ", path));
  return static_cast<int64_t>(st.st_size);
}

absl::StatusOr<HostSpace> StatHost(const std::string& dir) {
  struct statvfs vfs {};
  if (::statvfs(dir.c_str(), &vfs) != 0) return ErrnoStatus(errno, StrCat("statvfs ", dir));
  HostSpace h;
  h.total_bytes = static_cast<int64_t>(vfs.f_blocks) * static_cast<int64_t>(vfs.f_frsize);
  h.free_bytes = static_cast<int64_t>(vfs.f_bavail) * static_cast<int64_t>(vfs.f_frsize);
  return h;
}

absl::StatusOr<bool> ProbeReflink(const std::string& dir) {
  const std::string a = StrCat(dir, "/.reflink-probe-a");
  const std::string b = StrCat(dir, "/.reflink-probe-b");
  ::unlink(a.c_str());
  ::unlink(b.c_str());
  Fd fa(::open(a.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!fa.ok()) return ErrnoStatus(errno, StrCat("create ", a));
  Fd fb(::open(b.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!fb.ok()) {
    absl::Status st = ErrnoStatus(errno, StrCat("create ", b));
    ::unlink(a.c_str());
    return st;
  }
  char block[4096] = {1};
  bool supported = false;
  if (::write(fa.get(), block, sizeof(block)) == static_cast<ssize_t>(sizeof(block))) {
    supported = ::ioctl(fb.get(), FICLONE, fa.get()) == 0;
  }
  ::unlink(a.c_str());
  ::unlink(b.c_str());
  return supported;
}

}  // namespace berth::driver
