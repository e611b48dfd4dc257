// Work this process's controllers have queued and not taken up yet, summed
// over every client::WorkQueue (each adds the keys it queues and takes away
// those its workers take, and what it still holds when it shuts down). The
// API server holds clients' creates back while it is high
// (apiserver/backpressure.h). Process-wide, as the queues' quiescence
// registry is: the queues live deep inside the controllers, the API server
// beside them.
#pragma once

#include <atomic>
#include <cstdint>

namespace berth {

class Backlog {
 public:
  static void Add(int64_t n) { count_.fetch_add(n, std::memory_order_relaxed); }
  static int64_t Pending() { return count_.load(std::memory_order_relaxed); }

 private:
  static inline std::atomic<int64_t> count_{0};
};

}  // namespace berth
