// An injectable clock: the one source of "now", timers and waits for every
// component whose behaviour depends on time (backoffs, resyncs, leases,
// grace periods, timeouts). Production code takes a `Clock&` (default
// `RealClock()`); tests pass a `FakeClock` and move time with Advance(), so
// a five-minute backoff is tested in microseconds and never by sleeping.
//
//   class Renewer {
//     explicit Renewer(Clock& clock = RealClock()) : clock_(clock) {}
//     void Loop() {
//       absl::MutexLock l(&mu_);
//       while (!stop_) {
//         Renew();
//         // Returns early when Stop() sets stop_ (a condition on mu_).
//         clock_.AwaitWithDeadline(mu_, absl::Condition(&stop_), clock_.Now() + absl::Seconds(10));
//       }
//     }
//   };
//
//   FakeClock clock;
//   Renewer r(clock);             // starts its loop
//   clock.BlockUntilTimers(1);    // the loop waits on the clock
//   clock.Advance(absl::Seconds(10));  // renews again, synchronously woken
//
// Timers (AfterFunc) run on the clock's own thread (RealClock) or inside
// Advance() on the caller's thread (FakeClock), never while the clock's lock
// is held, so a callback may take the component's locks and schedule timers.
//
// Thread-safety: every method is thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace berth {

class Clock {
 public:
  using TimerId = uint64_t;

  virtual ~Clock() = default;

  virtual absl::Time Now() = 0;

  // Runs `fn` once at or after `when`. Returns an id for Cancel().
  virtual TimerId AfterFunc(absl::Time when, std::function<void()> fn) = 0;
  // Cancels a timer that has not run. When its callback is running on
  // another thread, waits until it has returned (so after Cancel the
  // callback's captures may be destroyed). Returns whether it was cancelled
  // before running. Never call it from the timer's own callback.
  virtual bool Cancel(TimerId id) = 0;

  // With `mu` held: waits until `cond` holds or the clock reaches
  // `deadline`; returns whether `cond` holds. `mu` is held again on return.
  // (absl::Mutex::AwaitWithDeadline, on this clock's time: a timer of the
  // clock's marks the deadline; the real clock waits with absl's own
  // deadline instead, with no timer thread in between.)
  virtual bool AwaitWithDeadline(absl::Mutex& mu, const absl::Condition& cond, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  bool AwaitWithTimeout(absl::Mutex& mu, const absl::Condition& cond, absl::Duration timeout)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return AwaitWithDeadline(mu, cond, Now() + timeout);
  }
  // Blocks the calling thread until `deadline` on this clock.
  void SleepUntil(absl::Time deadline);
  void SleepFor(absl::Duration d) { SleepUntil(Now() + d); }
};

// The process's real clock (absl::Now; timers on one lazily started thread).
Clock& RealClock();

// Owns a timer and cancels it on destruction or Reset (for members whose
// object may be destroyed before the timer fires).
class ScopedTimer {
 public:
  ScopedTimer() = default;
  ~ScopedTimer() { Reset(); }
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;

  void Set(Clock& clock, absl::Time when, std::function<void()> fn) {
    Reset();
    clock_ = &clock;
    id_ = clock.AfterFunc(when, std::move(fn));
  }
  void Reset() {
    if (clock_ != nullptr) clock_->Cancel(id_);
    clock_ = nullptr;
  }

 private:
  Clock* clock_ = nullptr;
  Clock::TimerId id_ = 0;
};

namespace clock_internal {

// The timers of one clock: pending callbacks in deadline order (ties in the
// order they were set) and the one running. Not locked itself: the owning
// clock's mutex guards it, and the methods that wait or run a callback take
// that mutex as an argument.
class TimerSet {
 public:
  Clock::TimerId Add(absl::Time when, std::function<void()> fn);
  // Removes a pending timer and returns true; when it is running, waits on
  // `mu` (released meanwhile) until its callback has returned, and returns
  // false.
  bool Cancel(absl::Mutex& mu, Clock::TimerId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Runs the earliest timer if it is due at `limit`, with `mu` released
  // while its callback runs; returns whether one ran.
  bool RunEarliest(absl::Mutex& mu, absl::Time limit) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // The earliest deadline, or InfiniteFuture.
  absl::Time Next() const { return timers_.empty() ? absl::InfiniteFuture() : timers_.begin()->first.first; }
  size_t size() const { return timers_.size(); }

 private:
  Clock::TimerId next_id_ = 1;
  std::map<std::pair<absl::Time, Clock::TimerId>, std::function<void()>> timers_;
  std::map<Clock::TimerId, absl::Time> when_;
  Clock::TimerId running_ = 0;  // the callback running now, 0: none
};

}  // namespace clock_internal

// A clock that moves only when told. Starts at 2026-01-01T00:00:00Z unless
// given a time.
class FakeClock : public Clock {
 public:
  FakeClock();
  explicit FakeClock(absl::Time start);
  ~FakeClock() override;

  absl::Time Now() override ABSL_LOCKS_EXCLUDED(mu_);
  TimerId AfterFunc(absl::Time when, std::function<void()> fn) override ABSL_LOCKS_EXCLUDED(mu_);
  bool Cancel(TimerId id) override ABSL_LOCKS_EXCLUDED(mu_);

  // Moves time forward by `d`, running every timer that falls due, in time
  // order, each at its own time (Now() inside a callback is its deadline;
  // timers a callback adds are run too if due). Returns after the last one.
  void Advance(absl::Duration d) ABSL_LOCKS_EXCLUDED(mu_);
  // Advances to the earliest pending timer (if any) and runs it; returns
  // whether one ran.
  bool AdvanceToNextTimer() ABSL_LOCKS_EXCLUDED(mu_);
  // Pending timers (waits included: a thread in AwaitWithDeadline counts).
  int PendingTimers() ABSL_LOCKS_EXCLUDED(mu_);
  // Blocks (real time, up to `timeout`) until at least `n` timers are
  // pending: lets a test know a component is waiting on the clock before it
  // advances. Returns whether they were.
  bool BlockUntilTimers(int n, absl::Duration timeout = absl::Seconds(30)) ABSL_LOCKS_EXCLUDED(mu_);
  // The earliest pending deadline, or InfiniteFuture.
  absl::Time NextTimer() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  bool RunOneDue(absl::Time limit) ABSL_LOCKS_EXCLUDED(mu_);

  absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
  clock_internal::TimerSet timers_ ABSL_GUARDED_BY(mu_);
  // Serializes Advance calls (so time never moves backwards under a callback).
  absl::Mutex advance_mu_;
};

}  // namespace berth
