// Per-object operation exclusion: at most one CSI operation runs on a given
// volume or snapshot at a time. A second call arriving while one is in
// flight gets ABORTED ("operation pending", as the CSI spec recommends) and
// the CO retries it later; calls on different objects run in parallel.
//
//   auto guard = locks.TryAcquire({volume_id});
//   if (!guard.ok()) return guard.status();   // ABORTED
//
// Thread-safety: thread-safe.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace berth::driver {

class OperationLocks {
 public:
  // Holds a set of keys; releases them when destroyed.
  class Guard {
   public:
    Guard(OperationLocks* locks, std::vector<std::string> keys) : locks_(locks), keys_(std::move(keys)) {}
    Guard(Guard&& other) noexcept : locks_(other.locks_), keys_(std::move(other.keys_)) { other.locks_ = nullptr; }
    Guard& operator=(Guard&&) = delete;
    Guard(const Guard&) = delete;
    ~Guard() {
      if (locks_ != nullptr) locks_->Release(keys_);
    }

   private:
    OperationLocks* locks_;
    std::vector<std::string> keys_;
  };

  // Takes all `keys` (empty keys are ignored), or none: ABORTED naming the
  // first busy key.
  absl::StatusOr<Guard> TryAcquire(std::vector<std::string> keys);

 private:
  void Release(const std::vector<std::string>& keys);

  absl::Mutex mu_;
  std::set<std::string> busy_ ABSL_GUARDED_BY(mu_);
};

}  // namespace berth::driver
