#include "common/memory.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <vector>

// mimalloc's functions, when the binary links it (berth_use_allocator);
// null otherwise (weak).
#if __has_include(<mimalloc.h>)
#include <mimalloc.h>
#pragma weak mi_collect
#pragma weak mi_option_set
#pragma weak mi_heap_new
#pragma weak mi_heap_set_default
#pragma weak mi_heap_delete
#define BERTH_HAVE_MIMALLOC_H 1
#else
extern "C" {
struct mi_heap_s;
typedef struct mi_heap_s mi_heap_t;
void mi_collect(bool force) __attribute__((weak));
mi_heap_t* mi_heap_new() __attribute__((weak));
mi_heap_t* mi_heap_set_default(mi_heap_t* heap) __attribute__((weak));
void mi_heap_delete(mi_heap_t* heap) __attribute__((weak));
}
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

FreshPages::FreshPages() {
  if (mi_heap_new == nullptr || mi_heap_set_default == nullptr || mi_heap_delete == nullptr) return;
  mi_heap_t* heap = mi_heap_new();
  if (heap == nullptr) return;
  heap_ = heap;
  previous_ = mi_heap_set_default(heap);
}

FreshPages::~FreshPages() {
  if (heap_ == nullptr) return;
  mi_heap_set_default(static_cast<mi_heap_t*>(previous_));
  // Its pages, and the blocks still in them, join the thread's own heap.
  mi_heap_delete(static_cast<mi_heap_t*>(heap_));
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

namespace {

// A thread in AwaitReleasingWhenIdle past its first release, which
// RequestIdleRelease may wake.
struct IdleWaiter {
  absl::Mutex* mu;
  std::atomic<bool> asked{false};
  int pins = 0;  // RequestIdleRelease calls about to take *mu (waiters_mu)
};
absl::Mutex waiters_mu;
// Never freed: threads may wait past the end of main.
std::vector<IdleWaiter*>* const waiters ABSL_PT_GUARDED_BY(waiters_mu) = new std::vector<IdleWaiter*>;

void Register(IdleWaiter* w) {
  absl::MutexLock lock(&waiters_mu);
  waiters->push_back(w);
}

// Once no RequestIdleRelease is about to take w->mu.
void Unregister(IdleWaiter* w) {
  absl::MutexLock lock(&waiters_mu);
  waiters_mu.Await(absl::Condition(
      +[](IdleWaiter* x) { return x->pins == 0; }, w));
  auto it = std::find(waiters->begin(), waiters->end(), w);
  *it = waiters->back();
  waiters->pop_back();
}

struct AskedOrReady {
  const absl::Condition* cond;
  IdleWaiter* waiter;
  bool Eval() const { return waiter->asked.load(std::memory_order_acquire) || cond->Eval(); }
};

}  // namespace

void AwaitReleasingWhenIdle(absl::Mutex& mu, const absl::Condition& cond) {
  // Blocks other threads free come back to this heap only on a later call
  // of its own: released once idle, once more later, and when asked.
  for (;;) {
    IdleMemoryRelease idle;
    if (mu.AwaitWithTimeout(cond, idle.NextWait())) return;
    IdleWaiter me{&mu};
    // Registered before the release, so whoever sees it can ask for the next.
    mu.Unlock();
    Register(&me);
    idle.Idle();
    mu.Lock();
    const AskedOrReady woken{&cond, &me};
    for (;;) {
      const bool woke = mu.AwaitWithTimeout(absl::Condition(&woken, &AskedOrReady::Eval), idle.NextWait());
      me.asked.store(false, std::memory_order_relaxed);
      if (cond.Eval()) break;
      mu.Unlock();
      if (woke) {
        ReleaseThreadMemory();  // asked
      } else {
        idle.Idle();  // the second release, due
      }
      mu.Lock();
    }
    // The condition held; it may not once the waiter is gone, and then this
    // thread waits again from the start (the first wait returns at once if
    // it still holds).
    mu.Unlock();
    Unregister(&me);
    mu.Lock();
  }
}

int RequestIdleRelease() {
  std::vector<IdleWaiter*> asked;
  {
    absl::MutexLock lock(&waiters_mu);
    for (IdleWaiter* w : *waiters) {
      w->asked.store(true, std::memory_order_release);
      ++w->pins;
      asked.push_back(w);
    }
  }
  // A waiter's condition is evaluated again when its mutex is released.
  for (IdleWaiter* w : asked) {
    w->mu->Lock();
    w->mu->Unlock();
  }
  absl::MutexLock lock(&waiters_mu);
  for (IdleWaiter* w : asked) --w->pins;
  return static_cast<int>(asked.size());
}

}  // namespace berth
