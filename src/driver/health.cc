#include "driver/health.h"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>

#include "common/fd.h"
#include "common/fs.h"
#include "common/strings.h"
#include "common/thread_name.h"
#include "spdlog/spdlog.h"

namespace berth::driver {
namespace {

bool ContainsNoCase(std::string_view haystack, std::string_view needle) {
  if (needle.size() > haystack.size()) return false;
  for (size_t i = 0; i + needle.size() <= haystack.size(); ++i) {
    size_t j = 0;
    while (j < needle.size() && std::tolower(static_cast<unsigned char>(haystack[i + j])) ==
                                    std::tolower(static_cast<unsigned char>(needle[j]))) {
      ++j;
    }
    if (j == needle.size()) return true;
  }
  return false;
}

// The first "loopN" in `text` that is a whole word ("loop3", not "loop30x"
// nor "kloop3"; "loop3p1" counts as loop3).
std::string FirstLoopDevice(std::string_view text) {
  for (size_t pos = text.find("loop"); pos != std::string_view::npos; pos = text.find("loop", pos + 1)) {
    if (pos > 0 && std::isalnum(static_cast<unsigned char>(text[pos - 1]))) continue;
    size_t end = pos + 4;
    while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
    if (end == pos + 4) continue;
    if (end < text.size() && std::isalpha(static_cast<unsigned char>(text[end])) && text[end] != 'p') continue;
    return std::string(text.substr(pos, end - pos));
  }
  return "";
}

}  // namespace

void HealthRegistry::Record(const FileId& image, std::string message) {
  absl::MutexLock lock(&mu_);
  Fault& f = faults_[image];
  if (f.count++ == 0) f.first = std::move(message);
}

std::optional<std::string> HealthRegistry::FaultOf(const FileId& image) const {
  absl::MutexLock lock(&mu_);
  auto it = faults_.find(image);
  if (it == faults_.end()) return std::nullopt;
  return StrCat("the kernel logged ", it->second.count, " error(s) on its device, the first: ", it->second.first);
}

void HealthRegistry::Clear(const FileId& image) {
  absl::MutexLock lock(&mu_);
  faults_.erase(image);
}

std::string_view KmsgText(std::string_view record) {
  size_t semi = record.find(';');
  if (semi == std::string_view::npos) return {};
  std::string_view text = record.substr(semi + 1);
  if (size_t nl = text.find('\n'); nl != std::string_view::npos) text = text.substr(0, nl);
  return text;
}

std::string LoopDeviceWithError(std::string_view message) {
  std::string device = FirstLoopDevice(message);
  if (device.empty()) return "";
  // "operation not supported error, dev loop3, ... op 0x9:(WRITE_ZEROES)":
  // the block layer's notice that the device cannot zero by fallocate
  // (recent kernels, a backing filesystem without FALLOC_FL_WRITE_ZEROES);
  // it then writes the zeros itself. No data is lost.
  if (message.starts_with("operation not supported error")) return "";
  // Mount messages echo options such as errors=remount-ro; those are not
  // errors.
  bool error = false;
  for (size_t pos = 0; (pos = message.find("rror", pos)) != std::string_view::npos; ++pos) {
    size_t end = pos + 4;
    if (end < message.size() && message[end] == 's') ++end;
    if (end < message.size() && message[end] == '=') continue;
    error = true;
    break;
  }
  if (error || ContainsNoCase(message, "shut down") || ContainsNoCase(message, "shutting down") ||
      ContainsNoCase(message, "aborting journal") || ContainsNoCase(message, "corruption")) {
    return device;
  }
  return "";
}

void KernelLogWatcher::Start() {
  fd_ = ::open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd_ < 0) {
    spdlog::warn("cannot read the kernel log (/dev/kmsg: {}): loop device I/O errors will not mark volumes abnormal",
                 std::strerror(errno));
    return;
  }
  // Only what happens from now on: an older line may name a device number
  // that another image held then.
  ::lseek(fd_, 0, SEEK_END);
  thread_ = NamedThread("volume health", [this] { Loop(); });
}

void KernelLogWatcher::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void KernelLogWatcher::Loop() {
  char buf[8192];
  while (!stop_) {
    pollfd p{fd_, POLLIN, 0};
    int r = ::poll(&p, 1, 200);
    if (r <= 0) continue;
    for (;;) {
      ssize_t n = ::read(fd_, buf, sizeof(buf) - 1);
      if (n < 0) {
        if (errno == EPIPE) continue;  // records overwritten before we read them
        break;                         // EAGAIN: drained
      }
      Handle(std::string_view(buf, static_cast<size_t>(n)));
    }
  }
}

void KernelLogWatcher::Handle(std::string_view record) {
  std::string_view text = KmsgText(record);
  std::string device = LoopDeviceWithError(text);
  if (device.empty()) return;
  auto loops = loops_.List();
  if (!loops.ok()) return;
  for (const auto& l : *loops) {
    if (l.device != "/dev/" + device || l.backing_deleted) continue;
    spdlog::warn("kernel reports an error on {} (backing inode {}): {}", l.device, l.backing.ino, text);
    registry_.Record(l.backing, std::string(text));
    return;
  }
}

int64_t Ext4ErrorCount(const std::string& device) {
  std::string_view name = device;
  if (size_t slash = name.rfind('/'); slash != std::string_view::npos) name = name.substr(slash + 1);
  if (name.empty()) return 0;
  auto text = ReadFile(StrCat("/sys/fs/ext4/", name, "/errors_count"));
  if (!text.ok()) return 0;
  return std::atoll(text->c_str());
}

std::string BlockDeviceOf(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "";
  const std::string link = StrCat("/sys/dev/block/", major(st.st_dev), ":", minor(st.st_dev));
  char target[PATH_MAX];
  ssize_t n = ::readlink(link.c_str(), target, sizeof(target) - 1);
  if (n <= 0) return "";
  std::string_view t(target, static_cast<size_t>(n));
  return StrCat("/dev/", t.substr(t.rfind('/') + 1));
}

std::string FsyncFailure(const std::string& dir) {
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.ok()) return StrCat("open ", dir, ": ", std::strerror(errno));
  if (::fsync(fd.get()) != 0) return StrCat("fsync ", dir, ": ", std::strerror(errno));
  return "";
}

}  // namespace berth::driver
