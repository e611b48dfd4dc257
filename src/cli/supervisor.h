// Keeps child processes running: berth up's berth-csi per node. A child
// that exits is started again after a backoff (1 s doubling to 30 s, reset
// once it has run for a minute). Children get SIGTERM if berth up dies
// (PR_SET_PDEATHSIG), so a killed berth up leaves no driver behind; each
// child's PID is kept in a file so the next start can wait for a previous
// child that is still shutting down. The monitor thread sleeps on the
// children's pidfds until one exits or a restart is due (no polling); a
// restart that is due wakes it through a timer on the clock.
//
//   Supervisor sup;
//   sup.Add({.name = "berth-csi/node-1", .argv = {...}, .log_file = ..., .pid_file = ...});
//   sup.Start();
//   ...
//   sup.Stop(absl::Seconds(15));  // SIGTERM, then SIGKILL after the grace
//
// Thread-safety: Add before Start; Start/Stop from one thread.
#pragma once

#include <sys/types.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/backoff.h"
#include "common/clock.h"

namespace berth::cli {

class Supervisor {
 public:
  struct Child {
    std::string name;
    std::vector<std::string> argv;  // argv[0]: absolute path of the binary
    std::string log_file;           // stdout and stderr, appended
    std::string pid_file;
    // The child's umask (-1: berth up's own).
    int umask = -1;
  };
  struct Options {
    // Times the restarts (nullptr: RealClock()). Waiting for processes to
    // exit in Start and Stop is real time: they are real processes.
    Clock* clock = nullptr;
    // The delay before restarting a child that exited.
    Backoff::Options restart_backoff = {
        .initial = absl::Seconds(1), .max = absl::Seconds(30), .multiplier = 2.0, .jitter = 0};
    // A child that ran this long before exiting starts over at `initial`.
    absl::Duration reset_after = absl::Minutes(1);
  };
  Supervisor();
  explicit Supervisor(Options options);
  ~Supervisor();  // Stop(0)

  void Add(Child child);
  // Waits (up to `grace`) for processes recorded in the children's PID
  // files by an earlier run to exit, killing them after that, then starts
  // every child and the monitor.
  void Start(absl::Duration grace = absl::Seconds(15));
  void Stop(absl::Duration grace);

  // Times each child has been started (tests).
  int starts(const std::string& name) const ABSL_LOCKS_EXCLUDED(mu_);
  pid_t pid(const std::string& name) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct State {
    Child child;
    pid_t pid = -1;
    int pidfd = -1;  // readable once the child exited
    int starts = 0;
    Backoff restarts;
    absl::Time started;
    absl::Time next_start;
  };
  void Monitor();
  // Makes the monitor's poll return (Stop, or a restart falling due).
  void WakeMonitor();
  void Spawn(State& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The child was waited for: forget its pid and close its pidfd.
  static void Reaped(State& s);

  const Options options_;
  Clock& clock_;
  std::thread monitor_;
  // Wakes the monitor when the earliest restart is due; set and reset by
  // the monitor thread only (and by Stop once it has joined).
  ScopedTimer restart_timer_;
  // Written by Stop() to wake the monitor from its poll (eventfd).
  int wake_fd_ = -1;
  mutable absl::Mutex mu_;
  std::vector<State> children_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace berth::cli
