// Shared by the benchmark harnesses.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace berth::bench {

// The process's resident set size now, in KiB (/proc/self/statm).
inline long CurrentRssKiB() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  long pages = 0, resident = 0;
  if (f != nullptr) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

// A free loopback TCP port (bound, read, closed); `fallback` if none could
// be had.
inline int FreePort(int fallback) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  int port = fallback;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  ::close(fd);
  return port;
}

// berth's pool images are loop-mounted by berth-csi: unmounts what lies
// below `dir` (deepest first), detaches its loop devices, removes it.
inline void Cleanup(const std::string& dir) {
  std::string cmd =
      "for i in 1 2 3; do awk -v d='" + dir +
      "' 'index($5, d\"/\")==1 {print length($5), $5}' /proc/self/mountinfo | sort -rn | cut -d' ' -f2- | "
      "xargs -r -n1 umount -l; done; for f in /sys/block/loop*/loop/backing_file; do "
      "case \"$(cat $f 2>/dev/null)\" in '" +
      dir +
      "'/*) losetup -d /dev/$(basename $(dirname $(dirname $f)));; esac; done; "
      "rm -rf '" +
      dir + "'";
  if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "cleanup of %s incomplete\n", dir.c_str());
}

// The kubectl to time: $BERTH_KUBECTL, the Debian kubernetes-client berth
// installs, or /usr/bin/kubectl; "" if none is there.
inline std::string FindKubectl() {
  const char* env = std::getenv("BERTH_KUBECTL");
  for (const std::string& p :
       {std::string(env != nullptr ? env : ""), std::string("/usr/local/lib/berth/kubernetes-client/usr/bin/kubectl"),
        std::string("/usr/bin/kubectl")}) {
    if (!p.empty() && ::access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

// A file's bytes, "" when it cannot be read. With read(2), not a stream:
// libstdc++'s filebuf throws when a read fails, as reading
// /proc/<pid>/cmdline does (ESRCH) for a process that exits meanwhile.
inline std::string ReadWhole(const std::string& path) {
  std::string out;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof(buf))) > 0;) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

}  // namespace berth::bench
