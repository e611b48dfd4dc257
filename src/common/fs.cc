#include "common/fs.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <random>

#include "common/status.h"
#include "common/strings.h"

namespace berth {
namespace {

std::string RandomSuffix() {
  static thread_local std::mt19937_64 gen(std::random_device{}());
  return fmt::format("{:016x}", gen());
}

absl::Status WriteAll(int fd, std::string_view data, const std::string& path) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, StrCat("write ", path));
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteFileAtomic(const std::string& path, std::string_view content, mode_t mode) {
  const std::filesystem::path p(path);
  const std::string dir = p.parent_path().string();
  const std::string tmp = StrCat(dir, "/.", p.filename().string(), ".tmp-", RandomSuffix());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) return ErrnoStatus(errno, StrCat("create ", tmp));
  absl::Status st = WriteAll(fd, content, tmp);
  if (st.ok() && ::fsync(fd) != 0) st = ErrnoStatus(errno, StrCat("fsync ", tmp));
  if (::close(fd) != 0 && st.ok()) st = ErrnoStatus(errno, StrCat("close ", tmp));
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    st = ErrnoStatus(errno, StrCat("rename ", tmp, " to ", path));
  }
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    return st;
  }
  return FsyncDir(dir);
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, StrCat("open ", path));
  std::string out;
  char buf[8192];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      absl::Status st = ErrnoStatus(errno, StrCat("read ", path));
      ::close(fd);
      return st;
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

absl::Status FsyncDir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, StrCat("open directory ", dir));
  absl::Status st;
  if (::fsync(fd) != 0) st = ErrnoStatus(errno, StrCat("fsync directory ", dir));
  ::close(fd);
  return st;
}

absl::Status RemoveFileDurably(const std::string& path) {
  if (::unlink(path.c_str()) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return ErrnoStatus(errno, StrCat("remove ", path));
  }
  return FsyncDir(std::filesystem::path(path).parent_path().string());
}

absl::Status MakeDirs(const std::string& path, mode_t mode) {
  // Create each prefix ending before a '/', then the path itself.
  for (size_t pos = path.find('/', 1); pos != std::string::npos; pos = path.find('/', pos + 1)) {
    const std::string prefix = path.substr(0, pos);
    if (::mkdir(prefix.c_str(), mode) != 0 && errno != EEXIST) {
      return ErrnoStatus(errno, StrCat("mkdir ", prefix));
    }
  }
  if (::mkdir(path.c_str(), mode) != 0 && errno != EEXIST) {
    return ErrnoStatus(errno, StrCat("mkdir ", path));
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return ErrnoStatus(errno, StrCat("stat ", path));
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(StrCat(path, " exists and is not a directory"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<mode_t>> NarrowToOwner(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return std::nullopt;
    return ErrnoStatus(errno, StrCat("stat ", path));
  }
  if (S_ISLNK(st.st_mode) || (st.st_mode & 077) == 0) return std::nullopt;
  const mode_t narrowed = S_ISDIR(st.st_mode) ? 0700 : (st.st_mode & 0600);
  if (::chmod(path.c_str(), narrowed) != 0) return ErrnoStatus(errno, StrCat("chmod ", path));
  return st.st_mode & 07777;
}

absl::StatusOr<int> RemoveTempFiles(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return ErrnoStatus(errno, StrCat("open directory ", dir));
  int removed = 0;
  while (dirent* e = ::readdir(d)) {
    std::string_view name = e->d_name;
    if (name.size() > 1 && name[0] == '.' && name.find(".tmp-") != std::string_view::npos) {
      if (::unlinkat(::dirfd(d), e->d_name, 0) == 0) ++removed;
    }
  }
  ::closedir(d);
  if (removed > 0) {
    if (absl::Status st = FsyncDir(dir); !st.ok()) return st;
  }
  return removed;
}

bool IsCanonicalAbsolutePath(std::string_view path) {
  if (path.empty() || path[0] != '/') return false;
  if (path == "/") return true;
  if (path.back() == '/') return false;
  if (path.find('\0') != std::string_view::npos) return false;
  size_t start = 1;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    std::string_view part = path.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = end + 1;
  }
  return true;
}

absl::Status CheckPathInside(const std::string& root, const std::string& path) {
  if (!IsCanonicalAbsolutePath(path)) {
    return absl::InvalidArgumentError(StrCat("path \"", path, "\" is not an absolute canonical path"));
  }
  if (path.size() <= root.size() || path.compare(0, root.size(), root) != 0 ||
      (root != "/" && path[root.size()] != '/')) {
    return absl::InvalidArgumentError(StrCat("path \"", path, "\" is not inside ", root));
  }
  // Walk the components below root; none may be a symlink.
  size_t pos = root == "/" ? 1 : root.size() + 1;
  while (pos <= path.size()) {
    size_t end = path.find('/', pos);
    if (end == std::string::npos) end = path.size();
    const std::string prefix = path.substr(0, end);
    struct stat st {};
    if (::lstat(prefix.c_str(), &st) != 0) {
      if (errno == ENOENT) return absl::OkStatus();  // the rest does not exist yet
      return ErrnoStatus(errno, StrCat("stat ", prefix));
    }
    if (S_ISLNK(st.st_mode)) {
      return absl::InvalidArgumentError(StrCat("path \"", path, "\" goes through a symlink at ", prefix));
    }
    pos = end + 1;
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> IsEmptyDir(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return ErrnoStatus(errno, StrCat("open directory ", dir));
  bool empty = true;
  while (dirent* e = ::readdir(d)) {
    std::string_view name = e->d_name;
    if (name != "." && name != "..") {
      empty = false;
      break;
    }
  }
  ::closedir(d);
  return empty;
}

}  // namespace berth
