// Giving memory back when a thread goes idle.
//
// berth links mimalloc, which keeps per-thread heaps: a block freed by
// another thread (an object a handler thread parsed, dropped by the store's
// writer) returns to its owner's page only when the owner allocates again,
// and an emptied page is decommitted only on the owner's later calls. A
// worker that goes idle after a burst never makes those calls, so what the
// burst freed stays resident (measured on berth up with 100 pods: 7.5 MiB
// of the API server's and 4 MiB of a node agent's anonymous memory).
//
//   absl::MutexLock lock(&mu_);
//   AwaitReleasingWhenIdle(mu_, absl::Condition(&ready));  // instead of mu_.Await
//
// Thread-safety: thread-safe; each call concerns the calling thread's heap.
#pragma once

#include <cstdint>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace berth {

// How long a thread waits before it gives its freed memory back: longer
// than the gaps inside a burst of work, so a busy worker never pays for it.
inline constexpr absl::Duration kIdleMemoryRelease = absl::Seconds(1);
// And how long after that it gives back once more what other threads freed
// meanwhile (the store's writer lets go of what it kept past its cache's
// budget a second after the writes stop): a provisioner's workers, idle
// before the last claims of a burst were bound, held 18 MiB of berth up's
// RSS after 10,000 claims without it.
inline constexpr absl::Duration kIdleMemoryReleaseAgain = absl::Seconds(5);

// Runs the registered releasers (below) on the calling thread, then returns
// its free memory to the allocator and the system (mimalloc's
// mi_collect(true); that part is nothing without mimalloc: tests,
// berth-csi).
void ReleaseThreadMemory();

// Registers `release`, which ReleaseThreadMemory runs first on the calling
// thread: a library's per-thread caches (zstd's contexts, common/zstd.h)
// given back when the thread goes idle, before the allocator collects. A
// cache left in an idle worker's heap keeps its pages resident (berth up
// after 10,000 claims: ~375 KiB of zstd context in each worker that had
// read one compacted object). At most kMaxThreadMemoryReleasers; one
// registered twice runs once.
inline constexpr int kMaxThreadMemoryReleasers = 8;
void AddThreadMemoryReleaser(void (*release)());

// Sets the allocator's process-wide options, once at the start of main:
// mimalloc decommits a page it has freed at once instead of after its
// default 25 ms, which it only checks on the owning thread's later calls
// (berth up after 10,000 claims: peak RSS 207 → 161 MiB, no measurable
// cost in time). An environment's MIMALLOC_DECOMMIT_DELAY still wins.
// Nothing without mimalloc.
void ConfigureAllocator();

// While alive, what the calling thread allocates goes into pages of their
// own (a new mimalloc heap), which join the thread's heap when it ends. For
// copying long-lived objects made during a burst, where each sat among the
// burst's temporaries and kept a page resident after they were freed, into
// a few dense pages: the old pages then empty and go back (the store's
// cache and history and the informers' caches at rest; berth up at rest
// after 10,000 claims: 74 MiB before, 71 after, medians of five runs, and
// steadier). Nothing without mimalloc. Used on one thread, not nested.
class FreshPages {
 public:
  FreshPages();
  ~FreshPages();
  FreshPages(const FreshPages&) = delete;
  FreshPages& operator=(const FreshPages&) = delete;

 private:
  void* heap_ = nullptr;
  void* previous_ = nullptr;
};

// How many times ReleaseThreadMemory ran in this process (tests).
int64_t ThreadMemoryReleases();

// When an idle thread gives its memory back: kIdleMemoryRelease after its
// last work, kIdleMemoryReleaseAgain after that, then not until it has
// worked again. For waits that are not a plain condition (the informer's).
class IdleMemoryRelease {
 public:
  // How long to wait for work before the next release (InfiniteDuration:
  // none is due).
  absl::Duration NextWait() const;
  // The wait for work ran out: gives the thread's memory back.
  void Idle();
  // Work came: the schedule starts over.
  void Worked() { done_ = 0; }

 private:
  int done_ = 0;
};

// mu.Await(cond), which after kIdleMemoryRelease without `cond` releases
// the thread's memory (mu released meanwhile), again kIdleMemoryReleaseAgain
// later, and waits on. A thread that stays idle therefore wakes twice, not
// periodically, and once more for each RequestIdleRelease.
void AwaitReleasingWhenIdle(absl::Mutex& mu, const absl::Condition& cond) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

// Each thread idle in AwaitReleasingWhenIdle since its first release gives
// its memory back once more, now; returns how many were asked. For a thread
// that has just freed much that others allocated (the store's writer, its
// cache compacted after a burst): the blocks wait in their owners' heaps,
// and an owner idle past its second release would keep their pages for good
// (berth up after 10,000 claims: 31 MiB in the provisioner's eight workers
// when the store compacted after their second release). Call with no lock
// held: it takes each waiter's mutex in turn.
int RequestIdleRelease();

}  // namespace berth
