#include "common/memory.h"

#include <atomic>

// mimalloc's, when the binary links it (berth_use_allocator); null otherwise.
extern "C" void mi_collect(bool force) __attribute__((weak));

namespace berth {
namespace {
std::atomic<int64_t> releases{0};
}  // namespace

void ReleaseThreadMemory() {
  if (mi_collect != nullptr) mi_collect(true);
  releases.fetch_add(1, std::memory_order_relaxed);
}

int64_t ThreadMemoryReleases() { return releases.load(std::memory_order_relaxed); }

void AwaitReleasingWhenIdle(absl::Mutex& mu, const absl::Condition& cond) {
  if (mu.AwaitWithTimeout(cond, kIdleMemoryRelease)) return;
  mu.Unlock();
  ReleaseThreadMemory();
  mu.Lock();
  mu.Await(cond);
}

}  // namespace berth
