// Running external programs (mkfs, blkid, resize2fs, ...) without a shell.
//
// CommandRunner is an interface so drivers can be tested with a fake; the
// real one, LinuxCommandRunner, spawns the program with argv as given (no
// shell, no PATH surprises: argv[0] is searched in a fixed system PATH),
// captures stdout+stderr (capped), and kills it at the timeout.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace berth {

struct CommandResult {
  int exit_code = 0;   // 128 + signal if killed by a signal
  std::string output;  // stdout and stderr interleaved, at most 64 KiB
};

class CommandRunner {
 public:
  virtual ~CommandRunner() = default;
  // Runs argv. Errors only when the program could not be started
  // (NOT_FOUND) or ran past `timeout` (DEADLINE_EXCEEDED, after SIGKILL); a
  // non-zero exit is a result, not an error.
  virtual absl::StatusOr<CommandResult> Run(const std::vector<std::string>& argv, absl::Duration timeout) = 0;
};

// Thread-safety: thread-safe.
class LinuxCommandRunner final : public CommandRunner {
 public:
  // CommandRunner
  absl::StatusOr<CommandResult> Run(const std::vector<std::string>& argv, absl::Duration timeout) override;
};

// "prog a b" for messages.
std::string JoinArgv(const std::vector<std::string>& argv);

// True while process `pid` exists (kill(pid, 0)); false for pids 0 and 1,
// which would name a process group or init.
bool ProcessAlive(int pid);

// The directory of the running program (/proc/self/exe), "" if unknown: the
// CLI finds berth-csi and the images beside itself.
std::string ExecutableDir();

}  // namespace berth
