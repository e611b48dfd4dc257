#include "common/memory.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>

// mimalloc's functions, when the binary links it (berth_use_allocator);
// null otherwise (weak).
#if __has_include(<mimalloc.h>)
#include <mimalloc.h>
#pragma weak mi_collect
#pragma weak mi_option_set
#define BERTH_HAVE_MIMALLOC_H 1
#else
extern "C" void mi_collect(bool force) __attribute__((weak));
#endif

namespace berth {
namespace {
std::atomic<int64_t> releases{0};
// Registered releasers: each slot is written once, before the count that
// publishes it.
std::atomic<void (*)()> releasers[kMaxThreadMemoryReleasers];
std::atomic<int> releaser_count{0};
absl::Mutex releasers_mu;
}  // namespace

void AddThreadMemoryReleaser(void (*release)()) {
  absl::MutexLock lock(&releasers_mu);
  const int n = releaser_count.load(std::memory_order_relaxed);
  for (int i = 0; i < n; ++i) {
    if (releasers[i].load(std::memory_order_relaxed) == release) return;
  }
  if (n == kMaxThreadMemoryReleasers) {
    std::fputs("AddThreadMemoryReleaser: more than kMaxThreadMemoryReleasers\n", stderr);
    std::abort();
  }
  releasers[n].store(release, std::memory_order_relaxed);
  releaser_count.store(n + 1, std::memory_order_release);
}

void ReleaseThreadMemory() {
  const int n = releaser_count.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) releasers[i].load(std::memory_order_relaxed)();
  if (mi_collect != nullptr) mi_collect(true);
  releases.fetch_add(1, std::memory_order_relaxed);
}

void ConfigureAllocator() {
#ifdef BERTH_HAVE_MIMALLOC_H
  if (mi_option_set == nullptr || std::getenv("MIMALLOC_DECOMMIT_DELAY") != nullptr ||
      std::getenv("MIMALLOC_RESET_DELAY") != nullptr) {
    return;
  }
  mi_option_set(mi_option_decommit_delay, 0);
#endif
}

int64_t ThreadMemoryReleases() { return releases.load(std::memory_order_relaxed); }

absl::Duration IdleMemoryRelease::NextWait() const {
  return done_ == 0 ? kIdleMemoryRelease : done_ == 1 ? kIdleMemoryReleaseAgain : absl::InfiniteDuration();
}

void IdleMemoryRelease::Idle() {
  if (done_ >= 2) return;
  ReleaseThreadMemory();
  ++done_;
}

void AwaitReleasingWhenIdle(absl::Mutex& mu, const absl::Condition& cond) {
  // Blocks other threads free come back to this heap only on a later call
  // of its own: released once idle, and once more later.
  IdleMemoryRelease idle;
  while (!mu.AwaitWithTimeout(cond, idle.NextWait())) {
    mu.Unlock();
    idle.Idle();
    mu.Lock();
  }
}

}  // namespace berth
