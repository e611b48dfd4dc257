// Test helper: wait until the system has settled instead of sleeping a
// fixed time to see that "nothing happens".
//
//   registry_->Create(...);          // something a controller must ignore
//   ASSERT_TRUE(Settle(*store_));
//   EXPECT_EQ(driver_->Calls("CreateVolume"), 0);
//
// Settled means, at one instant and again at the next check: every running
// informer has delivered every change up to the store's current
// resourceVersion to its handlers, every work queue is idle (nothing queued
// or being processed, no delayed key due at its clock's now) and every event
// recorder has written what it was given — and the store's resourceVersion
// did not move meanwhile. Work that waits for a clock (a backoff, a resync)
// is not waited for: with a FakeClock it happens only when the test
// advances it, then Settle again. Background threads that are none of
// these (a driver's own delays, the DriverMonitor's probes) are not seen.
#pragma once

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/quiescence.h"
#include "store/store.h"

namespace berth::testing {

// True once settled; false after `timeout` (real time) if it never was.
inline bool Settle(const store::Store& store, absl::Duration timeout = absl::Seconds(15)) {
  const absl::Time deadline = absl::Now() + timeout;
  int settled = 0;
  while (absl::Now() < deadline) {
    const int64_t rv = store.ResourceVersion();
    if (client::Quiescence::AllIdle(rv) && store.ResourceVersion() == rv) {
      // Twice in a row: a worker between taking a key's result and writing
      // it shows as "processing", but a handler that adds to a queue only
      // after its informer reported delivered is caught the second time.
      if (++settled == 2) return true;
    } else {
      settled = 0;
    }
    absl::SleepFor(absl::Milliseconds(1));  // polling interval, not a wait for an outcome
  }
  return false;
}

}  // namespace berth::testing
