// Clients' creates held back while the controllers are behind.
//
// `berth apply` writes thousands of objects a second; the controllers of
// `berth up` take each up at their own pace. Without a brake the distance
// grows for as long as the apply runs (65,000 claims at 100,000), every
// object written is read back long after the store's cache let it go, and
// each of those reads costs a SQLite lookup and a parse (berth up 10-15 %
// more CPU per claim, the whole burst slower). So a client's create waits
// while the controllers' queued work (common/backlog.h) is above `limit`,
// for at most `max_wait` in all; then it goes ahead whatever the backlog (a
// stuck controller slows clients, never stops them). Kubernetes' API
// Priority and Fairness queues requests the same way (for its own load, not
// its controllers').
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/backlog.h"
#include "common/clock.h"

namespace berth::apiserver {

struct HoldBackOptions {
  int64_t limit = 2000;  // 0: never hold back
  absl::Duration max_wait = absl::Milliseconds(250);
  // How often `pending` is read again while nothing wakes the wait (work
  // taken from a queue does).
  absl::Duration step = absl::Milliseconds(10);
};

// Waits on `clock` while `pending()` is above options.limit, woken as the
// controllers take work (Backlog::mutex() released, common/backlog.h) or
// every options.step, for at most options.max_wait; returns the time waited.
inline absl::Duration HoldBack(const HoldBackOptions& options, Clock& clock,
                               const std::function<int64_t()>& pending = &Backlog::Pending) {
  if (options.limit <= 0 || pending() <= options.limit) return absl::ZeroDuration();
  const absl::Time start = clock.Now();
  const absl::Time deadline = start + options.max_wait;
  auto fell = [&] { return pending() <= options.limit; };
  Backlog::Watch watch;
  absl::Mutex& changed = Backlog::mutex();
  absl::MutexLock lock(&changed);
  for (absl::Time now = start; now < deadline && !fell(); now = clock.Now()) {
    clock.AwaitWithDeadline(changed, absl::Condition(&fell), std::min(deadline, now + options.step));
  }
  return clock.Now() - start;
}

}  // namespace berth::apiserver
