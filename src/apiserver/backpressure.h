// Clients' creates held back while the controllers are behind.
//
// `berth apply` writes thousands of objects a second; the controllers of
// `berth up` take each up at their own pace. Without a brake the distance
// grows for as long as the apply runs (65,000 claims at 100,000), every
// object written is read back long after the store's cache let it go, and
// each of those reads costs a SQLite lookup and a parse (berth up 10-15 %
// more CPU per claim, the whole burst slower). So a client's create waits,
// in steps of `step`, while the controllers' queued work (common/backlog.h)
// is above `limit`, for at most `max_wait` in all; then it goes ahead
// whatever the backlog (a stuck controller slows clients, never stops
// them). Kubernetes' API Priority and Fairness queues requests the same way
// (for its own load, not its controllers').
#pragma once

#include <cstdint>
#include <functional>

#include "absl/time/time.h"

namespace berth::apiserver {

struct HoldBackOptions {
  int64_t limit = 2000;  // 0: never hold back
  absl::Duration max_wait = absl::Milliseconds(250);
  absl::Duration step = absl::Milliseconds(1);
};

// Waits while `pending()` is above options.limit; returns the time waited
// (the sum of the steps slept with `sleep`).
inline absl::Duration HoldBack(const HoldBackOptions& options, const std::function<int64_t()>& pending,
                               const std::function<void(absl::Duration)>& sleep) {
  absl::Duration waited;
  while (options.limit > 0 && waited + options.step <= options.max_wait && pending() > options.limit) {
    sleep(options.step);
    waited += options.step;
  }
  return waited;
}

}  // namespace berth::apiserver
