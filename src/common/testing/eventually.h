// Test helper: polls `pred` until it holds or `timeout` passes (for
// asynchronous outcomes — controllers, watches — without fixed sleeps).
#pragma once

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace berth::testing {

template <class Pred>
bool Eventually(Pred pred, absl::Duration timeout = absl::Seconds(10)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (pred()) return true;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return pred();
}

}  // namespace berth::testing
