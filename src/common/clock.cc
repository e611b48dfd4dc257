#include "common/clock.h"

#include "absl/time/clock.h"

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
      std::thread([this] { Loop(); }).detach();
    }
    const TimerId id = next_id_++;
    timers_.emplace(std::make_pair(when, id), std::move(fn));
    when_[id] = when;
    return id;
  }

  bool Cancel(TimerId id) override {
    absl::MutexLock l(&mu_);
    auto it = when_.find(id);
    if (it != when_.end()) {
      timers_.erase({it->second, id});
      when_.erase(it);
      return true;
    }
    // Running now: wait until it has returned.
    auto not_running = [this, id]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return running_ != id; };
    mu_.Await(absl::Condition(&not_running));
    return false;
  }

 private:
  void Loop() {
    absl::MutexLock l(&mu_);
    for (;;) {
      const absl::Time next = timers_.empty() ? absl::InfiniteFuture() : timers_.begin()->first.first;
      const absl::Time now = absl::Now();
      if (next > now) {
        const size_t before = timers_.size();
        const absl::Time earliest = next;
        auto changed = [this, before, earliest]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return timers_.size() != before || (!timers_.empty() && timers_.begin()->first.first < earliest);
        };
        mu_.AwaitWithDeadline(absl::Condition(&changed), next);
        continue;
      }
      auto it = timers_.begin();
      const TimerId id = it->first.second;
      std::function<void()> fn = std::move(it->second);
      timers_.erase(it);
      when_.erase(id);
      running_ = id;
      mu_.Unlock();
      fn();
      fn = nullptr;
      mu_.Lock();
      running_ = 0;
    }
  }

  absl::Mutex mu_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  TimerId next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<std::pair<absl::Time, TimerId>, std::function<void()>> timers_ ABSL_GUARDED_BY(mu_);
  std::map<TimerId, absl::Time> when_ ABSL_GUARDED_BY(mu_);
  TimerId running_ ABSL_GUARDED_BY(mu_) = 0;
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
  const TimerId id = next_id_++;
  timers_.emplace(std::make_pair(when, id), std::move(fn));
  when_[id] = when;
  return id;
}

bool FakeClock::Cancel(TimerId id) {
  absl::MutexLock l(&mu_);
  auto it = when_.find(id);
  if (it != when_.end()) {
    timers_.erase({it->second, id});
    when_.erase(it);
    return true;
  }
  auto not_running = [this, id]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return running_ != id; };
  mu_.Await(absl::Condition(&not_running));
  return false;
}

bool FakeClock::RunOneDue(absl::Time limit) {
  std::function<void()> fn;
  {
    absl::MutexLock l(&mu_);
    if (timers_.empty() || timers_.begin()->first.first > limit) return false;
    auto it = timers_.begin();
    const auto [when, id] = it->first;
    fn = std::move(it->second);
    timers_.erase(it);
    when_.erase(id);
    if (when > now_) now_ = when;
    running_ = id;
  }
  fn();
  fn = nullptr;
  absl::MutexLock l(&mu_);
  running_ = 0;
  return true;
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
  absl::MutexLock l(&mu_);
  if (now_ < target) now_ = target;
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
  return timers_.empty() ? absl::InfiniteFuture() : timers_.begin()->first.first;
}

}  // namespace berth
