#include "common/clock.h"

#include "absl/time/clock.h"
#include "common/thread_name.h"

namespace berth {

bool Clock::AwaitWithDeadline(absl::Mutex& mu, const absl::Condition& cond, absl::Time deadline) {
  if (cond.Eval()) return true;
  if (Now() >= deadline) return false;
  // A timer at the deadline marks `fired` under `mu`; releasing `mu`
  // re-evaluates the waiter's condition (absl::Mutex semantics).
  bool fired = false;
  const TimerId id = AfterFunc(deadline, [&mu, &fired] {
    absl::MutexLock l(&mu);
    fired = true;
  });
  // Time may have passed the deadline between the check above and the timer
  // being set: a fake clock advanced then runs no timer until it moves again.
  if (Now() >= deadline) fired = true;
  struct Either {
    const absl::Condition* cond;
    const bool* fired;
    bool operator()() const { return *fired || cond->Eval(); }
  } either{&cond, &fired};
  mu.Await(absl::Condition(&either));
  const bool satisfied = cond.Eval();
  // The callback takes `mu`: release it while cancelling (Cancel waits for a
  // running callback, whose captures live on this stack).
  mu.Unlock();
  Cancel(id);
  mu.Lock();
  return satisfied || cond.Eval();
}

void Clock::SleepUntil(absl::Time deadline) {
  absl::Mutex mu;
  bool never = false;
  absl::MutexLock l(&mu);
  AwaitWithDeadline(mu, absl::Condition(&never), deadline);
}

namespace clock_internal {

Clock::TimerId TimerSet::Add(absl::Time when, std::function<void()> fn) {
  const Clock::TimerId id = next_id_++;
  timers_.emplace(std::make_pair(when, id), std::move(fn));
  when_[id] = when;
  return id;
}

bool TimerSet::Cancel(absl::Mutex& mu, Clock::TimerId id) {
  auto it = when_.find(id);
  if (it != when_.end()) {
    timers_.erase({it->second, id});
    when_.erase(it);
    return true;
  }
  // Running now (or run already): wait until it has returned.
  struct NotRunning {
    const TimerSet* set;
    Clock::TimerId id;
    bool operator()() const { return set->running_ != id; }
  } not_running{this, id};
  mu.Await(absl::Condition(&not_running));
  return false;
}

bool TimerSet::RunEarliest(absl::Mutex& mu, absl::Time limit) {
  if (timers_.empty() || timers_.begin()->first.first > limit) return false;
  auto it = timers_.begin();
  const Clock::TimerId id = it->first.second;
  std::function<void()> fn = std::move(it->second);
  timers_.erase(it);
  when_.erase(id);
  running_ = id;
  mu.Unlock();
  fn();
  fn = nullptr;  // its captures go before Cancel may return
  mu.Lock();
  running_ = 0;
  return true;
}

}  // namespace clock_internal

namespace {

// Timers on one thread, started on first use and never stopped (the real
// clock lives as long as the process).
class RealClockImpl : public Clock {
 public:
  absl::Time Now() override { return absl::Now(); }

  TimerId AfterFunc(absl::Time when, std::function<void()> fn) override {
    absl::MutexLock l(&mu_);
    if (!started_) {
      started_ = true;
      NamedThread("clock timers", [this] { Loop(); }).detach();
    }
    return timers_.Add(when, std::move(fn));
  }

  bool Cancel(TimerId id) override {
    absl::MutexLock l(&mu_);
    return timers_.Cancel(mu_, id);
  }

  // absl's own deadline is this clock's: a sleep or a wait costs no timer
  // (two wake-ups of the timer thread, and its lock, per wait).
  bool AwaitWithDeadline(absl::Mutex& mu, const absl::Condition& cond, absl::Time deadline) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return mu.AwaitWithDeadline(cond, deadline);
  }

 private:
  void Loop() {
    absl::MutexLock l(&mu_);
    for (;;) {
      const absl::Time next = timers_.Next();
      if (next > absl::Now()) {
        // Woken only by a timer due before the one waited for: adding or
        // cancelling later ones (an HTTP request's deadline, a wait's) must
        // not cost this thread a wake-up each. A cancelled earliest timer
        // costs one wake-up at its deadline, which finds nothing due.
        auto earlier = [this, next]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return timers_.Next() < next; };
        mu_.AwaitWithDeadline(absl::Condition(&earlier), next);
        continue;
      }
      timers_.RunEarliest(mu_, absl::InfiniteFuture());
    }
  }

  absl::Mutex mu_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  clock_internal::TimerSet timers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

Clock& RealClock() {
  static Clock* const clock = new RealClockImpl();
  return *clock;
}

FakeClock::FakeClock() : FakeClock(absl::FromUnixSeconds(1767225600)) {}  // 2026-01-01T00:00:00Z
FakeClock::FakeClock(absl::Time start) : now_(start) {}
FakeClock::~FakeClock() = default;

absl::Time FakeClock::Now() {
  absl::MutexLock l(&mu_);
  return now_;
}

Clock::TimerId FakeClock::AfterFunc(absl::Time when, std::function<void()> fn) {
  absl::MutexLock l(&mu_);
  return timers_.Add(when, std::move(fn));
}

bool FakeClock::Cancel(TimerId id) {
  absl::MutexLock l(&mu_);
  return timers_.Cancel(mu_, id);
}

bool FakeClock::RunOneDue(absl::Time limit) {
  absl::MutexLock l(&mu_);
  const absl::Time when = timers_.Next();
  if (when > limit) {
    // Under the same lock as the check: a timer set from now on is either
    // seen here or set at a time already reached (AwaitWithDeadline looks).
    if (limit != absl::InfiniteFuture() && now_ < limit) now_ = limit;
    return false;
  }
  if (when > now_) now_ = when;  // Now() inside the callback is its deadline
  return timers_.RunEarliest(mu_, limit);
}

void FakeClock::Advance(absl::Duration d) {
  absl::MutexLock serial(&advance_mu_);
  absl::Time target;
  {
    absl::MutexLock l(&mu_);
    target = now_ + d;
  }
  while (RunOneDue(target)) {
  }
}

bool FakeClock::AdvanceToNextTimer() {
  absl::MutexLock serial(&advance_mu_);
  return RunOneDue(absl::InfiniteFuture());
}

int FakeClock::PendingTimers() {
  absl::MutexLock l(&mu_);
  return static_cast<int>(timers_.size());
}

bool FakeClock::BlockUntilTimers(int n, absl::Duration timeout) {
  absl::MutexLock l(&mu_);
  auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return static_cast<int>(timers_.size()) >= n; };
  return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
}

absl::Time FakeClock::NextTimer() {
  absl::MutexLock l(&mu_);
  return timers_.Next();
}

}  // namespace berth
