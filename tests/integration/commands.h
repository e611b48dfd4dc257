// Test helpers for running commands as a user would (the berth CLI, stock
// kubectl) and collecting what they print.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <ostream>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace berth::testing {

struct CommandResult {
  int exit_code = -1;  // 128 + signal when killed
  std::string out;
  std::string err;
};
inline std::ostream& operator<<(std::ostream& os, const CommandResult& r) {
  return os << "exit " << r.exit_code << "\n--- stdout\n" << r.out << "--- stderr\n" << r.err;
}

// Runs `argv` (argv[0] absolute or found on PATH) with `env` added and
// `input` on stdin; its output goes through files in `scratch`. Killed after
// `timeout`. Thread-safe.
inline CommandResult RunCommand(const std::string& scratch, const std::vector<std::string>& argv,
                                const std::vector<std::string>& env = {}, const std::string& input = "",
                                absl::Duration timeout = absl::Seconds(120)) {
  static std::atomic<int> n{0};
  const std::string base = scratch + "/cmd-" + std::to_string(++n);
  { std::ofstream(base + ".in") << input; }
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int in = ::open((base + ".in").c_str(), O_RDONLY);
    const int out = ::open((base + ".out").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int err = ::open((base + ".err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(in, 0);
    ::dup2(out, 1);
    ::dup2(err, 2);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    for (const auto& e : env) ::putenv(const_cast<char*>(e.c_str()));
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  CommandResult r;
  const absl::Time deadline = absl::Now() + timeout;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (absl::Now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      break;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  auto slurp = [](const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  r.out = slurp(base + ".out");
  r.err = slurp(base + ".err");
  return r;
}

// The kubectl the API tests use: $BERTH_KUBECTL, Debian's kubernetes-client
// (v1.20, berth's compatibility target) where scripts/install-deps puts it,
// or /usr/bin/kubectl. "" when there is none.
inline std::string FindKubectl() {
  const char* env = std::getenv("BERTH_KUBECTL");
  for (std::string p :
       {std::string(env != nullptr ? env : ""), std::string("/usr/local/lib/berth/kubernetes-client/usr/bin/kubectl"),
        std::string("/usr/bin/kubectl")}) {
    if (!p.empty() && ::access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

}  // namespace berth::testing
