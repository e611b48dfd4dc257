#include "common/exec.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "absl/time/clock.h"
#include "common/status.h"
#include "common/strings.h"

extern char** environ;

namespace berth {
namespace {

constexpr size_t kMaxOutput = 64 * 1024;
constexpr char kSystemPath[] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

// argv[0] resolved in the system PATH (or as given when it has a '/').
std::string Resolve(const std::string& prog) {
  if (prog.find('/') != std::string::npos) return prog;
  std::string_view path = kSystemPath;
  while (!path.empty()) {
    size_t colon = path.find(':');
    std::string dir(path.substr(0, colon));
    std::string candidate = dir + "/" + prog;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    if (colon == std::string_view::npos) break;
    path.remove_prefix(colon + 1);
  }
  return "";
}

}  // namespace

std::string JoinArgv(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    if (!out.empty()) out += ' ';
    out += a;
  }
  return out;
}

absl::StatusOr<CommandResult> LinuxCommandRunner::Run(const std::vector<std::string>& argv, absl::Duration timeout) {
  if (argv.empty()) return absl::InvalidArgumentError("empty command");
  const std::string prog = Resolve(argv[0]);
  if (prog.empty()) return absl::NotFoundError(StrCat(argv[0], ": program not found"));

  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) return ErrnoStatus(errno, "pipe");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, pipefd[1], 1);
  posix_spawn_file_actions_adddup2(&actions, pipefd[1], 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);  // berth blocks SIGTERM; children must not inherit it
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);

  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  // A fixed, minimal environment: locale-independent output, system PATH.
  std::string path_env = StrCat("PATH=", kSystemPath);
  char lc_all[] = "LC_ALL=C";
  char* env[] = {path_env.data(), lc_all, nullptr};

  pid_t pid = 0;
  int rc = ::posix_spawn(&pid, prog.c_str(), &actions, &attr, args.data(), env);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(pipefd[1]);
  if (rc != 0) {
    ::close(pipefd[0]);
    return ErrnoStatus(rc, StrCat("start ", prog));
  }

  CommandResult result;
  const absl::Time deadline = absl::Now() + timeout;
  bool timed_out = false;
  char buf[4096];
  while (true) {
    const int64_t left_ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left_ms <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{pipefd[0], POLLIN, 0};
    int pr = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left_ms, 1000)));
    if (pr < 0 && errno != EINTR) break;
    if (pr <= 0) continue;
    ssize_t n = ::read(pipefd[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EOF: the child closed its output (normally: exited)
    if (result.output.size() < kMaxOutput) {
      result.output.append(buf, std::min(static_cast<size_t>(n), kMaxOutput - result.output.size()));
    }
  }
  ::close(pipefd[0]);
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    return absl::DeadlineExceededError(
        StrCat(JoinArgv(argv), ": still running after ", absl::FormatDuration(timeout), "; killed"));
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

bool ProcessAlive(int pid) { return pid > 1 && ::kill(pid, 0) == 0; }

std::string ExecutableDir() {
  std::error_code ec;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? "" : self.parent_path().string();
}

}  // namespace berth
