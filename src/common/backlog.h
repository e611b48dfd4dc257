// Work this process's controllers have queued and not taken up yet, summed
// over every client::WorkQueue (each adds the keys it queues and takes away
// those its workers take, and what it still holds when it shuts down). The
// API server holds clients' creates back while it is high
// (apiserver/backpressure.h). Process-wide, as the queues' quiescence
// registry is: the queues live deep inside the controllers, the API server
// beside them.
//
// Someone waiting for it to fall (a held-back create) waits on mutex() with
// an absl::Condition that reads Pending(), inside a Watch: while a Watch is
// open, work taken releases mutex(), which has absl look at the waiters'
// conditions again, so they go as soon as it fell, not at their next poll.
#pragma once

#include <atomic>
#include <cstdint>

#include "absl/synchronization/mutex.h"

namespace berth {

class Backlog {
 public:
  static void Add(int64_t n) {
    // Sequentially consistent with Watch's count and Pending(): a waiter
    // either reads the new count or is seen waiting here.
    count_.fetch_add(n);
    if (n < 0 && watchers_.load() > 0) {
      absl::MutexLock lock(&mu_);
      ++wakes_;
    }
  }
  static int64_t Pending() { return count_.load(); }
  static absl::Mutex& mutex() { return mu_; }
  // How often taken work released mutex() for a Watch (tests).
  static int64_t wakes() {
    absl::MutexLock lock(&mu_);
    return wakes_;
  }

  // Open while its thread may wait on mutex() for Pending() to fall.
  class Watch {
   public:
    Watch() { watchers_.fetch_add(1); }
    ~Watch() { watchers_.fetch_sub(1); }
    Watch(const Watch&) = delete;
    Watch& operator=(const Watch&) = delete;
  };

 private:
  static inline std::atomic<int64_t> count_{0};
  static inline std::atomic<int> watchers_{0};
  static inline absl::Mutex mu_{absl::kConstInit};
  static inline int64_t wakes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace berth
