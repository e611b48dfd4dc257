#include "client/workqueue.h"

#include <algorithm>
#include <cmath>

#include "spdlog/spdlog.h"

namespace berth::client {

void WorkQueue::AddLocked(const std::string& key) {
  if (shutdown_ || dirty_.contains(key)) return;
  dirty_.insert(key);
  if (!processing_.contains(key)) queue_.push_back(key);
}

void WorkQueue::Add(const std::string& key) {
  absl::MutexLock lock(&mu_);
  AddLocked(key);
}

void WorkQueue::AddAfter(const std::string& key, absl::Duration delay) {
  absl::MutexLock lock(&mu_);
  if (shutdown_) return;
  if (delay <= absl::ZeroDuration()) {
    AddLocked(key);
    return;
  }
  const absl::Time at = absl::Now() + delay;
  // Keep only the earliest pending time per key.
  if (auto it = delayed_at_.find(key); it != delayed_at_.end()) {
    if (it->second <= at) return;
    auto range = delayed_.equal_range(it->second);
    for (auto d = range.first; d != range.second; ++d) {
      if (d->second == key) {
        delayed_.erase(d);
        break;
      }
    }
  }
  delayed_at_[key] = at;
  delayed_.emplace(at, key);  // wakes a sleeping Get() if it is due earliest
}

void WorkQueue::AddRateLimited(const std::string& key) {
  absl::Duration delay;
  {
    absl::MutexLock lock(&mu_);
    const int n = failures_[key]++;
    const double factor = std::ldexp(1.0, std::min(n, 40));
    delay = std::min(options_.base_delay * factor, options_.max_delay);
    std::uniform_real_distribution<double> jitter(0.75, 1.25);
    delay = std::min(delay * jitter(rng_), options_.max_delay);
  }
  AddAfter(key, delay);
}

void WorkQueue::Forget(const std::string& key) {
  absl::MutexLock lock(&mu_);
  failures_.erase(key);
}

int WorkQueue::Failures(const std::string& key) const {
  absl::MutexLock lock(&mu_);
  auto it = failures_.find(key);
  return it == failures_.end() ? 0 : it->second;
}

void WorkQueue::PromoteLocked(absl::Time now) {
  while (!delayed_.empty() && delayed_.begin()->first <= now) {
    std::string key = delayed_.begin()->second;
    delayed_.erase(delayed_.begin());
    delayed_at_.erase(key);
    AddLocked(key);
  }
}

std::optional<std::string> WorkQueue::Get() {
  absl::MutexLock lock(&mu_);
  while (true) {
    PromoteLocked(absl::Now());
    if (shutdown_) return std::nullopt;
    if (!queue_.empty()) {
      std::string key = std::move(queue_.front());
      queue_.pop_front();
      dirty_.erase(key);
      processing_.insert(key);
      return key;
    }
    // Sleep until a key can be taken, a delayed key is due earlier than
    // this sleeper would wake, or shutdown. Only those wake it: waking on any
    // change woke every idle worker for every key (a herd of futile
    // wake-ups, most of the queue's cost).
    const absl::Time due = delayed_.empty() ? absl::InfiniteFuture() : delayed_.begin()->first;
    auto ready = [this, due]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return shutdown_ || !queue_.empty() || (!delayed_.empty() && delayed_.begin()->first < due);
    };
    if (delayed_.empty()) {
      mu_.Await(absl::Condition(&ready));
    } else {
      mu_.AwaitWithDeadline(absl::Condition(&ready), due);
    }
  }
}

void WorkQueue::Done(const std::string& key) {
  absl::MutexLock lock(&mu_);
  processing_.erase(key);
  // Added while in process: it was kept out of the queue until now.
  if (dirty_.contains(key)) queue_.push_back(key);
}

void WorkQueue::ShutDown() {
  absl::MutexLock lock(&mu_);
  shutdown_ = true;
}

bool WorkQueue::shutting_down() const {
  absl::MutexLock lock(&mu_);
  return shutdown_;
}

size_t WorkQueue::Len() const {
  absl::MutexLock lock(&mu_);
  return queue_.size();
}

void RunWorker(WorkQueue& queue, const std::string& name,
               const std::function<absl::Status(const std::string& key)>& sync) {
  while (auto key = queue.Get()) {
    absl::Status st = sync(*key);
    if (st.ok()) {
      queue.Forget(*key);
    } else {
      if (st.code() != absl::StatusCode::kAborted) spdlog::info("{} {}: {}", name, *key, st.ToString());
      queue.AddRateLimited(*key);
    }
    queue.Done(*key);
  }
}

}  // namespace berth::client
