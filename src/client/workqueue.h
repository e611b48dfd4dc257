// The work queue every berth controller runs on (client-go's rate-limited
// workqueue, in berth's shape):
//
//   - keys are de-duplicated: a key added many times before a worker takes
//     it is processed once; a key added while it is being processed is
//     processed again after Done();
//   - failures back off per key: AddRateLimited waits the longer of the
//     key's backoff (base·2^n, jittered ±25%, capped: common's ItemBackoff)
//     and the queue's overall token bucket (qps/burst, off by default);
//     Forget resets n after a success;
//   - AddAfter schedules a key (resyncs, waits for an outside condition);
//   - ShutDown wakes every Get() with nullopt;
//   - delays run on the injected Clock, so tests move them with FakeClock;
//   - WaitIdle tells a test when nothing more happens until the clock moves
//     (client/testing/settle.h waits for every queue).
//
//   WorkQueue q;
//   q.Add("default/data");
//   while (auto key = q.Get()) {
//     absl::Status st = Reconcile(*key);
//     st.ok() ? q.Forget(*key) : q.AddRateLimited(*key);
//     q.Done(*key);
//   }
//
// Thread-safety: thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/backoff.h"
#include "common/clock.h"

namespace berth::client {

class WorkQueue {
 public:
  struct Options {
    absl::Duration base_delay = absl::Milliseconds(5);
    absl::Duration max_delay = absl::Minutes(5);
    // Overall limit on rate-limited re-adds (client-go's bucket limiter);
    // 0: none.
    double qps = 0;
    int burst = 100;
    Clock* clock = nullptr;  // null: RealClock()
  };
  WorkQueue() : WorkQueue(Options{}) {}
  explicit WorkQueue(Options options);
  ~WorkQueue();  // ShutDown(), and cancels the queue's timers

  void Add(const std::string& key) ABSL_LOCKS_EXCLUDED(mu_);
  void AddAfter(const std::string& key, absl::Duration delay) ABSL_LOCKS_EXCLUDED(mu_);
  // Adds after this key's backoff, and lengthens it.
  void AddRateLimited(const std::string& key) ABSL_LOCKS_EXCLUDED(mu_);
  // Forgets the key's failures (its next backoff is base_delay again).
  void Forget(const std::string& key) ABSL_LOCKS_EXCLUDED(mu_);
  int Failures(const std::string& key) const ABSL_LOCKS_EXCLUDED(mu_);

  // The next key to process (blocks); nullopt once shut down.
  std::optional<std::string> Get() ABSL_LOCKS_EXCLUDED(mu_);
  // Marks `key` processed; it is queued again if added meanwhile.
  void Done(const std::string& key) ABSL_LOCKS_EXCLUDED(mu_);

  void ShutDown() ABSL_LOCKS_EXCLUDED(mu_);
  bool shutting_down() const ABSL_LOCKS_EXCLUDED(mu_);
  // Keys queued (not counting delayed or in-process ones).
  size_t Len() const ABSL_LOCKS_EXCLUDED(mu_);
  // Keys added so far that were not already waiting (client-go's
  // workqueue_adds_total): each may wake a worker.
  uint64_t adds() const ABSL_LOCKS_EXCLUDED(mu_);

  // Waits up to `timeout` (real time: workers run on real threads) until
  // the queue is idle: no key queued, none being processed, and none
  // delayed to a time at or before the clock's now (with a FakeClock: until
  // the test advances it, nothing more happens here). True if it is.
  bool WaitIdle(absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_);
  bool Idle() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void AddLocked(const std::string& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues `key` and counts it in the process's Backlog (common/backlog.h)
  // until a worker takes it or the queue shuts down.
  void EnqueueLocked(const std::string& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ShutDownLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves delayed keys whose time has come into the queue.
  void PromoteLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Makes sure a timer fires at the earliest delayed time.
  void ArmLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnTimer(uint64_t token) ABSL_LOCKS_EXCLUDED(mu_);
  bool IdleLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  Clock& clock_;
  ItemBackoff backoff_;
  TokenBucket bucket_;
  mutable absl::Mutex mu_;
  std::deque<std::string> queue_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> dirty_ ABSL_GUARDED_BY(mu_);  // queued or to re-queue
  std::set<std::string> processing_ ABSL_GUARDED_BY(mu_);
  std::multimap<absl::Time, std::string> delayed_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, absl::Time> delayed_at_ ABSL_GUARDED_BY(mu_);  // earliest per key
  // Armed timers: token → (deadline, clock timer id). A timer's callback
  // erases its own token; stale timers (armed for a key later re-queued)
  // fire harmlessly.
  std::map<uint64_t, std::pair<absl::Time, Clock::TimerId>> timers_ ABSL_GUARDED_BY(mu_);
  uint64_t next_token_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t adds_ ABSL_GUARDED_BY(mu_) = 0;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t quiescence_id_ = 0;  // client/quiescence.h; last: registered once all else exists
};

// A sync result meaning "nothing failed, but the key is not done: someone
// else re-adds it" (a key parked until its CSI driver is back). RunWorker
// neither forgets nor counts it. Carries `message`.
absl::Status NotAFailure(std::string_view message);
bool IsNotAFailure(const absl::Status& st);

// A controller worker: takes keys from `queue` until it shuts down, runs
// `sync`, forgets the key's failures on success and re-adds it with backoff
// on error (logged, except conflicts, which are routine and retried); a
// NotAFailure result leaves the key's backoff as it was.
void RunWorker(WorkQueue& queue, std::string_view name,
               const std::function<absl::Status(const std::string& key)>& sync);

// Starts `n` threads, each running RunWorker(queue, name, sync), into
// `threads`. The name and the function are made here and shared: a worker
// thread that allocated them itself would keep a heap of its own for them
// as long as it lives (mimalloc: a segment, ~52 KiB, for a 40-byte name),
// and a controller has several workers idle most of the time.
void StartWorkers(std::vector<std::thread>& threads, int n, WorkQueue& queue, std::string name,
                  std::function<absl::Status(const std::string& key)> sync);

}  // namespace berth::client
