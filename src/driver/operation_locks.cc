#include "driver/operation_locks.h"

#include <algorithm>

#include "common/strings.h"

namespace berth::driver {

absl::StatusOr<OperationLocks::Guard> OperationLocks::TryAcquire(std::vector<std::string> keys) {
  keys.erase(std::remove(keys.begin(), keys.end(), std::string()), keys.end());
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  absl::MutexLock lock(&mu_);
  for (const auto& k : keys) {
    if (busy_.contains(k)) {
      return absl::AbortedError(StrCat("an operation on ", k, " is already in progress; retry later"));
    }
  }
  for (const auto& k : keys) busy_.insert(k);
  return Guard(this, std::move(keys));
}

void OperationLocks::Release(const std::vector<std::string>& keys) {
  absl::MutexLock lock(&mu_);
  for (const auto& k : keys) busy_.erase(k);
}

}  // namespace berth::driver
