// Test helper: runs a binary as a child process with its output in a file,
// and makes sure it is gone when the test ends (SIGKILL + reap), also when the
// test fails.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace berth::testing {

class Subprocess {
 public:
  // Starts `argv[0]` with `argv`; stdout and stderr go to `log_path`.
  Subprocess(const std::vector<std::string>& argv, const std::string& log_path) : log_path_(log_path) {
    pid_ = ::fork();
    if (pid_ == 0) {
      int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      // The test binary may block signals; the child starts clean.
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
  }
  ~Subprocess() {
    if (!exit_status_ && pid_ > 0) {
      ::kill(pid_, SIGKILL);
      int status = 0;
      ::waitpid(pid_, &status, 0);
    }
  }
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  pid_t pid() const { return pid_; }
  void Signal(int sig) { ::kill(pid_, sig); }

  // Waits up to `timeout` for the child to exit. Returns its exit code
  // (128 + signal when killed by a signal), or nullopt if it still runs.
  std::optional<int> Wait(absl::Duration timeout) {
    if (exit_status_) return exit_status_;
    const absl::Time deadline = absl::Now() + timeout;
    while (true) {
      int status = 0;
      pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        exit_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        return exit_status_;
      }
      if (absl::Now() >= deadline) return std::nullopt;
      absl::SleepFor(absl::Milliseconds(10));
    }
  }

  // Everything the child printed so far.
  std::string Output() const {
    std::ifstream in(log_path_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

 private:
  std::string log_path_;
  pid_t pid_ = -1;
  std::optional<int> exit_status_;
};

}  // namespace berth::testing
