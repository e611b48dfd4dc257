// Watches: a Watcher receives the events of its resource after a resource
// version, buffered, with bookmarks and an end when it falls behind.
#include "store/store.h"

#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "store/store_internal.h"

namespace berth::store {

// ---- Watcher ----

Watcher::~Watcher() { store_->Unsubscribe(this); }

std::optional<Event> Watcher::Next(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !queue_.empty() || ended_; };
  mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
  if (queue_.empty()) return std::nullopt;
  Event e = std::move(queue_.front());
  queue_.pop_front();
  return e;
}

bool Watcher::WaitReady(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !queue_.empty() || ended_ || interrupted_; };
  mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
  return !queue_.empty() || ended_;
}

void Watcher::Interrupt() {
  absl::MutexLock lock(&mu_);
  interrupted_ = true;
}

int64_t Watcher::BookmarkVersion() const {
  absl::MutexLock lock(&mu_);
  return queue_.empty() ? progress_rv_ : 0;
}

void Watcher::Progress(int64_t committed_rv) {
  absl::MutexLock lock(&mu_);
  progress_rv_ = std::max(progress_rv_, committed_rv);
}

bool Watcher::ended() const {
  absl::MutexLock lock(&mu_);
  return ended_ && queue_.empty();
}

std::optional<Event> Watcher::Filtered(const Offered& o) const {
  const Event& e = *o.event;
  if (e.resource != filter_.resource) return std::nullopt;
  if (!filter_.ns.empty() && Namespace(*e.object) != filter_.ns) return std::nullopt;
  Event out = e;  // shares the object
  if (!filter_.selector.empty()) {
    const bool now = filter_.selector.Matches(Labels(*e.object));
    const bool was = o.before_labels != nullptr && filter_.selector.Matches(*o.before_labels);
    if (e.type == EventType::kAdded && !now) return std::nullopt;
    if (e.type == EventType::kDeleted && !was && !now) return std::nullopt;
    if (e.type == EventType::kModified) {
      if (!now && !was) return std::nullopt;
      if (now && !was) out.type = EventType::kAdded;
      if (!now && was) out.type = EventType::kDeleted;
    }
  }
  return out;
}

void Watcher::Offer(std::span<const Offered> events) {
  std::vector<Event> wanted;
  for (const Offered& o : events) {
    if (std::optional<Event> e = Filtered(o)) wanted.push_back(std::move(*e));
  }
  if (wanted.empty()) return;
  std::function<void()> notify;
  {
    absl::MutexLock lock(&mu_);
    if (ended_) return;
    for (Event& e : wanted) {
      if (queue_.size() >= store_->options_.watcher_queue) {
        ended_ = true;  // too slow: the client relists
        break;
      }
      queue_.push_back(std::move(e));
    }
    notify = notify_;
  }
  if (notify) notify();
}

void Watcher::End() {
  std::function<void()> notify;
  {
    absl::MutexLock lock(&mu_);
    ended_ = true;
    notify = notify_;
  }
  if (notify) notify();
}

void Watcher::SetNotify(std::function<void()> notify) {
  absl::MutexLock lock(&mu_);
  notify_ = std::move(notify);
}

absl::StatusOr<std::unique_ptr<Watcher>> Store::Watch(const std::string& resource, const std::string& ns,
                                                      int64_t from_rv, const api::LabelSelector& selector) {
  std::unique_ptr<Watcher> w(new Watcher(this, {resource, ns, selector}));
  absl::MutexLock lock(&watch_mu_);
  if (from_rv > 0) {
    // A version from a list may not be published to watches yet: wait for it.
    auto caught_up = [this, from_rv]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(watch_mu_) { return committed_rv_ >= from_rv; };
    if (!watch_mu_.AwaitWithTimeout(absl::Condition(&caught_up), absl::Seconds(5))) {
      return absl::InvalidArgumentError(
          StrCat("resourceVersion ", from_rv, " is newer than the store's ", committed_rv_));
    }
    if (from_rv < history_start_rv_) {
      return absl::OutOfRangeError(StrCat("too old resource version: ", from_rv, " (", history_start_rv_, ")"));
    }
    // Only this watch's resource is parsed (a replay is rare: a watch
    // resumed after a relist or a reconnect).
    for (const auto& h : history_) {
      if (h.resource_version <= from_rv || h.resource != resource) continue;
      absl::StatusOr<Event> e = h.ToEvent();
      if (!e.ok()) {  // a damaged compressed text: the client relists instead
        return absl::OutOfRangeError(
            StrCat("resource version ", h.resource_version, " cannot be replayed: ", e.status().message()));
      }
      const Watcher::Offered offered[] = {{&*e, h.before_labels ? &*h.before_labels : nullptr}};
      w->Offer(offered);
    }
  }
  w->Progress(committed_rv_);  // everything up to here is offered (or not wanted)
  watchers_.push_back(w.get());
  return w;
}

void Store::Unsubscribe(Watcher* w) {
  absl::MutexLock lock(&watch_mu_);
  std::erase(watchers_, w);
}

}  // namespace berth::store
