#include "cli/supervisor.h"

#include <sys/stat.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <utility>
#include <vector>

#include "common/exec.h"
#include "common/fs.h"
#include "common/strings.h"
#include "spdlog/spdlog.h"

namespace berth::cli {
namespace {

// The PID in `pid_file` if that process still runs the same binary.
pid_t LivePid(const std::string& pid_file, const std::string& binary) {
  std::ifstream in(pid_file);
  pid_t pid = -1;
  if (!(in >> pid) || pid <= 1) return -1;
  auto exe = ReadFile(StrCat("/proc/", pid, "/cmdline"));
  if (!exe.ok() || exe->rfind(binary, 0) != 0) return -1;
  return pid;
}

}  // namespace

Supervisor::Supervisor() : Supervisor(Options{}) {}

Supervisor::Supervisor(Options options)
    : options_(std::move(options)), clock_(options_.clock != nullptr ? *options_.clock : RealClock()) {}

Supervisor::~Supervisor() {
  Stop(absl::ZeroDuration());
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

void Supervisor::Reaped(State& s) {
  s.pid = -1;
  if (s.pidfd >= 0) ::close(s.pidfd);
  s.pidfd = -1;
}

void Supervisor::Add(Child child) {
  absl::MutexLock lock(&mu_);
  children_.push_back(State{.child = std::move(child),
                            .pid = -1,
                            .starts = 0,
                            .restarts = Backoff(options_.restart_backoff),
                            .started = absl::InfinitePast(),
                            .next_start = absl::InfinitePast()});
}

void Supervisor::Start(absl::Duration grace) {
  absl::MutexLock lock(&mu_);
  stop_ = false;
  // A child of an earlier berth up that was killed got SIGTERM; let it
  // finish (it removes its sockets) before a new one takes its place.
  for (auto& s : children_) {
    pid_t old = LivePid(s.child.pid_file, s.child.argv[0]);
    if (old <= 0) continue;
    spdlog::info("waiting for {} (pid {}) from an earlier run to exit", s.child.name, old);
    ::kill(old, SIGTERM);
    const absl::Time deadline = absl::Now() + grace;
    while (ProcessAlive(old) && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(50));
    if (ProcessAlive(old)) ::kill(old, SIGKILL);
    while (ProcessAlive(old)) absl::SleepFor(absl::Milliseconds(20));
  }
  if (wake_fd_ < 0) wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  // Spawned from the monitor thread: PR_SET_PDEATHSIG fires when the
  // thread that forked exits, so that must be the long-lived one.
  monitor_ = std::thread([this] { Monitor(); });
}

void Supervisor::Spawn(State& s) {
  std::vector<char*> argv;
  for (auto& a : s.child.argv) argv.push_back(a.data());
  argv.push_back(nullptr);
  int log = ::open(s.child.log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid == 0) {
    // Only async-signal-safe calls until exec.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(127);  // the parent died already
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, 0);
    if (log >= 0) {
      ::dup2(log, 1);
      ::dup2(log, 2);
    }
    ::setpgid(0, 0);  // a terminal's Ctrl-C goes to berth up, which stops the children in order
    if (s.child.umask >= 0) ::umask(static_cast<mode_t>(s.child.umask));
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  if (log >= 0) ::close(log);
  s.started = clock_.Now();
  ++s.starts;
  if (pid < 0) {
    spdlog::error("cannot start {}: {}", s.child.name, std::strerror(errno));
    s.pid = -1;
    s.next_start = s.started + s.restarts.Next();
    return;
  }
  s.pid = pid;
  // Readable when the child exits, so the monitor sleeps until something
  // happens (-1 on kernels before 5.3: the monitor polls then).
  // (glibc 2.36's pidfd_open lacks C linkage for C++: the syscall.)
  s.pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  WriteFileAtomic(s.child.pid_file, StrCat(pid, "\n"), 0644).IgnoreError();
  spdlog::info("started {} (pid {}), log {}", s.child.name, pid, s.child.log_file);
}

void Supervisor::WakeMonitor() {
  const uint64_t one = 1;
  if (wake_fd_ >= 0 && ::write(wake_fd_, &one, sizeof one) < 0) {
    // Only a counter at its maximum fails, and that is already readable.
  }
}

void Supervisor::Monitor() {
  for (;;) {
    // What to sleep on: a wake-up (Stop, or the timer of the next restart)
    // and each child's exit. Nothing else happens while every child runs.
    std::vector<pollfd> fds = {{.fd = wake_fd_, .events = POLLIN, .revents = 0}};
    absl::Duration wait = absl::InfiniteDuration();
    {
      absl::MutexLock lock(&mu_);
      if (stop_) return;
      const absl::Time now = clock_.Now();
      absl::Time next_restart = absl::InfiniteFuture();
      for (auto& s : children_) {
        if (s.pid > 0) {
          int status = 0;
          if (::waitpid(s.pid, &status, WNOHANG) == s.pid) {
            if (now - s.started >= options_.reset_after) s.restarts.Reset();
            const absl::Duration delay = s.restarts.Next();
            spdlog::warn("{} (pid {}) {} {}; restarting in {}", s.child.name, s.pid,
                         WIFEXITED(status) ? "exited with" : "was killed by signal",
                         WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), absl::FormatDuration(delay));
            Reaped(s);
            s.next_start = now + delay;
          }
        }
        if (s.pid <= 0 && now >= s.next_start) Spawn(s);
        if (s.pid > 0 && s.pidfd >= 0) {
          fds.push_back({.fd = s.pidfd, .events = POLLIN, .revents = 0});
        } else if (s.pid > 0) {
          wait = std::min(wait, absl::Milliseconds(100));  // no pidfd: poll
        } else {
          next_restart = std::min(next_restart, s.next_start);
        }
      }
      // The callback only writes the eventfd (no lock), so setting the
      // timer here, which may wait for a running callback, cannot deadlock.
      if (next_restart == absl::InfiniteFuture()) {
        restart_timer_.Reset();
      } else {
        restart_timer_.Set(clock_, next_restart, [this] { WakeMonitor(); });
      }
      if (wake_fd_ < 0) wait = std::min(wait, absl::Milliseconds(100));
    }
    const int timeout_ms = wait == absl::InfiniteDuration()
                               ? -1
                               : static_cast<int>(std::clamp<int64_t>(absl::ToInt64Milliseconds(wait) + 1, 0, 60000));
    ::poll(fds.data(), fds.size(), timeout_ms);
    uint64_t drained;
    if (wake_fd_ >= 0 && ::read(wake_fd_, &drained, sizeof drained) < 0) {
      // EAGAIN: not woken by Stop() or the timer.
    }
  }
}

void Supervisor::Stop(absl::Duration grace) {
  {
    absl::MutexLock lock(&mu_);
    if (stop_ && !monitor_.joinable()) return;
    stop_ = true;
  }
  WakeMonitor();
  if (monitor_.joinable()) monitor_.join();
  restart_timer_.Reset();
  absl::MutexLock lock(&mu_);
  for (auto& s : children_) {
    if (s.pid > 0) ::kill(s.pid, SIGTERM);
  }
  const absl::Time deadline = absl::Now() + grace;
  for (auto& s : children_) {
    while (s.pid > 0) {
      int status = 0;
      pid_t r = ::waitpid(s.pid, &status, WNOHANG);
      if (r == s.pid || (r < 0 && errno == ECHILD)) {
        Reaped(s);
        ::unlink(s.child.pid_file.c_str());
        break;
      }
      if (absl::Now() >= deadline) {
        spdlog::warn("{} (pid {}) did not stop in time; killing it", s.child.name, s.pid);
        ::kill(s.pid, SIGKILL);
        ::waitpid(s.pid, &status, 0);
        Reaped(s);
        ::unlink(s.child.pid_file.c_str());
        break;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  }
}

int Supervisor::starts(const std::string& name) const {
  absl::MutexLock lock(&mu_);
  for (const auto& s : children_) {
    if (s.child.name == name) return s.starts;
  }
  return 0;
}

pid_t Supervisor::pid(const std::string& name) const {
  absl::MutexLock lock(&mu_);
  for (const auto& s : children_) {
    if (s.child.name == name) return s.pid;
  }
  return -1;
}

}  // namespace berth::cli
