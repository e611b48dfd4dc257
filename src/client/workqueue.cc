#include "client/workqueue.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "absl/strings/cord.h"
#include "client/quiescence.h"
#include "common/backlog.h"
#include "common/memory.h"
#include "common/thread_name.h"
#include "spdlog/spdlog.h"

namespace berth::client {

WorkQueue::WorkQueue(Options options)
    : options_(options),
      clock_(options.clock != nullptr ? *options.clock : RealClock()),
      backoff_({.base = options.base_delay, .max = options.max_delay, .jitter = 0.25}),
      bucket_(options.qps, options.burst, clock_) {
  quiescence_id_ = Quiescence::Register([this](int64_t) { return Idle(); });
}

WorkQueue::~WorkQueue() {
  Quiescence::Unregister(quiescence_id_);
  std::vector<Clock::TimerId> ids;
  {
    absl::MutexLock lock(&mu_);
    ShutDownLocked();
    for (const auto& [token, t] : timers_) ids.push_back(t.second);
  }
  // Without mu_: a running callback takes it, and Cancel waits for it.
  for (Clock::TimerId id : ids) clock_.Cancel(id);
}

void WorkQueue::ArmLocked() {
  if (shutdown_ || delayed_.empty()) return;
  const absl::Time due = delayed_.begin()->first;
  for (const auto& [token, t] : timers_) {
    if (t.first <= due) return;  // an armed timer fires in time
  }
  const uint64_t token = next_token_++;
  // mu_ is held: the callback (which takes mu_) cannot run before its id is
  // recorded.
  const Clock::TimerId id = clock_.AfterFunc(due, [this, token] { OnTimer(token); });
  timers_[token] = {due, id};
}

void WorkQueue::OnTimer(uint64_t token) {
  absl::MutexLock lock(&mu_);
  timers_.erase(token);
  PromoteLocked(clock_.Now());
  ArmLocked();
}

void WorkQueue::AddLocked(const std::string& key) {
  if (shutdown_ || dirty_.contains(key)) return;
  dirty_.insert(key);
  ++adds_;
  if (!processing_.contains(key)) EnqueueLocked(key);
}

void WorkQueue::EnqueueLocked(const std::string& key) {
  queue_.push_back(key);
  if (!shutdown_) Backlog::Add(1);
}

void WorkQueue::ShutDownLocked() {
  if (shutdown_) return;
  shutdown_ = true;
  // What is queued is never taken now.
  Backlog::Add(-static_cast<int64_t>(queue_.size()));
}

uint64_t WorkQueue::adds() const {
  absl::MutexLock lock(&mu_);
  return adds_;
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
  const absl::Time at = clock_.Now() + delay;
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
  delayed_.emplace(at, key);
  ArmLocked();
}

void WorkQueue::AddRateLimited(const std::string& key) {
  AddAfter(key, std::max(backoff_.When(key), bucket_.Reserve()));
}

void WorkQueue::Forget(const std::string& key) { backoff_.Forget(key); }

int WorkQueue::Failures(const std::string& key) const { return backoff_.Failures(key); }

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
  // Delayed keys reach the queue from the clock's timers: a worker sleeps
  // only until a key can be taken or shutdown (waking on any other change
  // woke every idle worker for every key: a herd of futile wake-ups).
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return shutdown_ || !queue_.empty(); };
  AwaitReleasingWhenIdle(mu_, absl::Condition(&ready));  // an idle worker gives its memory back
  if (shutdown_) return std::nullopt;
  std::string key = std::move(queue_.front());
  queue_.pop_front();
  Backlog::Add(-1);
  dirty_.erase(key);
  processing_.insert(key);
  return key;
}

void WorkQueue::Done(const std::string& key) {
  absl::MutexLock lock(&mu_);
  processing_.erase(key);
  // Added while in process: it was kept out of the queue until now.
  if (dirty_.contains(key)) EnqueueLocked(key);
}

void WorkQueue::ShutDown() {
  absl::MutexLock lock(&mu_);
  ShutDownLocked();
}

bool WorkQueue::shutting_down() const {
  absl::MutexLock lock(&mu_);
  return shutdown_;
}

size_t WorkQueue::Len() const {
  absl::MutexLock lock(&mu_);
  return queue_.size();
}

bool WorkQueue::IdleLocked() const {
  if (!processing_.empty()) return false;
  if (shutdown_) return true;  // what is queued is never taken
  if (!queue_.empty()) return false;
  // A delayed key that is due is on its way in (its timer is running).
  return delayed_.empty() || delayed_.begin()->first > clock_.Now();
}

bool WorkQueue::Idle() const {
  absl::MutexLock lock(&mu_);
  return IdleLocked();
}

bool WorkQueue::WaitIdle(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  // Re-evaluated whenever mu_ is released: a worker's Get/Done, an Add, and
  // a timer promoting a delayed key (FakeClock::Advance runs it) all take it.
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return IdleLocked(); };
  return mu_.AwaitWithTimeout(absl::Condition(&idle), timeout);
}

namespace {
constexpr char kNotAFailureUrl[] = "berth.io/not-a-failure";
}  // namespace

absl::Status NotAFailure(std::string_view message) {
  absl::Status st = absl::UnavailableError(std::string(message));
  st.SetPayload(kNotAFailureUrl, absl::Cord("1"));
  return st;
}

bool IsNotAFailure(const absl::Status& st) { return !st.ok() && st.GetPayload(kNotAFailureUrl).has_value(); }

void RunWorker(WorkQueue& queue, std::string_view name,
               const std::function<absl::Status(const std::string& key)>& sync) {
  while (auto key = queue.Get()) {
    absl::Status st = sync(*key);
    if (IsNotAFailure(st)) {
      // Parked elsewhere, which re-adds it: its backoff stays as it was.
    } else if (st.ok()) {
      queue.Forget(*key);
    } else {
      if (st.code() != absl::StatusCode::kAborted) spdlog::info("{} {}: {}", name, *key, st.ToString());
      queue.AddRateLimited(*key);
    }
    queue.Done(*key);
  }
}

void StartWorkers(std::vector<std::thread>& threads, int n, WorkQueue& queue, std::string name,
                  std::function<absl::Status(const std::string& key)> sync) {
  struct Work {
    std::string name;
    std::function<absl::Status(const std::string& key)> sync;
  };
  auto work = std::make_shared<const Work>(Work{std::move(name), std::move(sync)});
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&queue, work] {
      NameThisThread(work->name);
      RunWorker(queue, work->name, work->sync);
    });
  }
}

}  // namespace berth::client
