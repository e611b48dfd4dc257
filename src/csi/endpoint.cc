#include "csi/endpoint.h"

#include <errno.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <filesystem>
#include <system_error>

#include "common/fs.h"
#include "common/status.h"
#include "common/strings.h"

namespace berth::csi {
namespace {

constexpr std::string_view kUnixScheme = "unix://";

// True when something accepts connections on the unix socket `path`.
bool SocketIsLive(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  path.copy(addr.sun_path, sizeof(addr.sun_path) - 1);
  const bool live = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return live;
}

}  // namespace

absl::StatusOr<std::string> ParseUnixEndpoint(std::string_view endpoint) {
  std::string_view path = endpoint;
  if (endpoint.starts_with(kUnixScheme)) {
    path.remove_prefix(kUnixScheme.size());
  } else if (endpoint.find("://") != std::string_view::npos) {
    return absl::InvalidArgumentError(StrCat("endpoint \"", endpoint, "\": only unix:// endpoints are supported"));
  }
  if (path.empty() || path.front() != '/') {
    return absl::InvalidArgumentError(
        StrCat("endpoint \"", endpoint, "\": want unix:///absolute/path or an absolute path"));
  }
  std::filesystem::path p(path);
  for (const auto& part : p) {
    if (part == "..") {
      return absl::InvalidArgumentError(StrCat("endpoint \"", endpoint, "\": \"..\" is not allowed in a socket path"));
    }
  }
  std::string normal = p.lexically_normal().string();
  if (normal.size() > 1 && normal.back() == '/') {
    return absl::InvalidArgumentError(StrCat("endpoint \"", endpoint, "\": names a directory, not a socket file"));
  }
  if (normal.size() >= sizeof(sockaddr_un::sun_path)) {
    return absl::InvalidArgumentError(StrCat("endpoint \"", endpoint, "\": socket path is ", normal.size(),
                                             " bytes, longer than the ", sizeof(sockaddr_un::sun_path) - 1,
                                             " a unix socket address can hold"));
  }
  return normal;
}

std::string GrpcUnixTarget(std::string_view socket_path) { return StrCat("unix:", socket_path); }

absl::Status PrepareSocketPath(const std::string& socket_path) {
  std::filesystem::path parent = std::filesystem::path(socket_path).parent_path();
  // 0750 less the umask: `berth up` (umask 077) keeps its nodes' plugin
  // directories owner-only.
  if (absl::Status st = MakeDirs(parent.string(), 0750); !st.ok()) {
    return absl::Status(st.code(), StrCat("create socket directory: ", st.message()));
  }

  struct stat st {};
  if (::lstat(socket_path.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return ErrnoStatus(errno, StrCat("stat ", socket_path));
  }
  if (!S_ISSOCK(st.st_mode)) {
    return absl::FailedPreconditionError(StrCat(socket_path,
                                                " exists and is not a socket; refusing to remove it (move it away or "
                                                "choose another endpoint)"));
  }
  if (SocketIsLive(socket_path)) {
    return absl::FailedPreconditionError(
        StrCat(socket_path, " is in use by a running server; stop it first or choose another endpoint"));
  }
  if (::unlink(socket_path.c_str()) != 0 && errno != ENOENT) {
    return ErrnoStatus(errno, StrCat("remove stale socket ", socket_path));
  }
  return absl::OkStatus();
}

void RemoveSocketFile(const std::string& socket_path) {
  struct stat st {};
  if (::lstat(socket_path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) {
    ::unlink(socket_path.c_str());
  }
}

}  // namespace berth::csi
