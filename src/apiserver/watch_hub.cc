#include "apiserver/watch_hub.h"
#include "common/thread_name.h"

#include <algorithm>

namespace berth::apiserver {

using nlohmann::json;

WatchHub::WatchHub(Options options) : options_(options), clock_(*options.clock) {
  {
    absl::MutexLock lock(&bell_->mu);
    bell_->hub = this;
  }
  thread_ = NamedThread("watch hub", [this] { Loop(); });
}

WatchHub::~WatchHub() {
  {
    absl::MutexLock lock(&bell_->mu);
    bell_->hub = nullptr;
  }
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
  std::map<uint64_t, std::unique_ptr<Entry>> entries;
  {
    absl::MutexLock lock(&mu_);
    entries.swap(entries_);
  }
  // Outside mu_: a watcher's destructor takes the store's watch lock, under
  // which the store calls our notify (which takes mu_).
  for (auto& [id, e] : entries) e->stream->Finish();
}

void WatchHub::Add(Watch watch, std::shared_ptr<http::Stream> stream) {
  auto e = std::make_unique<Entry>();
  e->watch = std::move(watch);
  e->stream = std::move(stream);
  if (e->watch.bookmark) e->next_bookmark = clock_.Now() + options_.bookmark_interval;
  uint64_t id;
  {
    absl::MutexLock lock(&mu_);
    id = next_id_++;
  }
  // Callbacks first: once the entry is in, only the hub thread may touch it.
  auto ring = [bell = bell_, id] {
    absl::MutexLock lock(&bell->mu);
    if (bell->hub != nullptr) bell->hub->MarkReady(id);
  };
  e->watch.watcher->SetNotify(ring);
  e->stream->SetWakeup(ring);
  {
    absl::MutexLock lock(&mu_);
    if (!stopping_) {
      entries_[id] = std::move(e);
      ready_.insert(id);
      return;
    }
  }
  e->stream->Finish();  // the hub is going away
}

size_t WatchHub::size() const {
  absl::MutexLock lock(&mu_);
  return entries_.size();
}

void WatchHub::MarkReady(uint64_t id) {
  absl::MutexLock lock(&mu_);
  if (entries_.contains(id)) ready_.insert(id);
}

void WatchHub::Loop() {
  while (true) {
    std::vector<std::pair<uint64_t, Entry*>> batch;
    {
      absl::MutexLock lock(&mu_);
      auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !ready_.empty(); };
      while (!woken()) {
        const absl::Time due = dues_.empty() ? absl::InfiniteFuture() : dues_.begin()->first;
        if (due == absl::InfiniteFuture()) {
          mu_.Await(absl::Condition(&woken));  // no timer: nothing is due
        } else if (clock_.Now() >= due || !clock_.AwaitWithDeadline(mu_, absl::Condition(&woken), due)) {
          break;
        }
      }
      if (stopping_) return;
      std::set<uint64_t> ids;
      ids.swap(ready_);
      const absl::Time now = clock_.Now();
      while (!dues_.empty() && dues_.begin()->first <= now) {
        ids.insert(dues_.begin()->second);
        dues_.erase(dues_.begin());
      }
      for (uint64_t id : ids) {
        auto it = entries_.find(id);
        if (it == entries_.end()) continue;
        dues_.erase({it->second->due, id});
        batch.emplace_back(id, it->second.get());
      }
    }
    std::vector<uint64_t> over;
    for (auto& [id, e] : batch) {
      if (!Pump(*e)) {
        over.push_back(id);
        continue;
      }
      e->due = std::min(e->watch.deadline, e->next_bookmark);
    }
    std::vector<std::unique_ptr<Entry>> finished;
    {
      absl::MutexLock lock(&mu_);
      for (auto& [id, e] : batch) {
        if (std::find(over.begin(), over.end(), id) != over.end()) {
          finished.push_back(std::move(entries_[id]));
          entries_.erase(id);
        } else if (e->due != absl::InfiniteFuture()) {
          dues_.insert({e->due, id});
        }
      }
    }
    // Watchers are destroyed outside mu_ (see the destructor).
    finished.clear();
  }
}

bool WatchHub::Send(Entry& e, const std::string& type, const json& object, const std::string* text) {
  return e.stream->Write(e.watch.encode(type, object, text));
}

bool WatchHub::Pump(Entry& e) {
  Watch& w = e.watch;
  if (e.stream->Ended()) return false;
  const absl::Time now = clock_.Now();
  if (now >= w.deadline) {
    e.stream->Finish();
    return false;
  }
  // A backlogged stream wakes us when it has been written.
  while (e.next_initial < w.initial.size()) {
    if (e.stream->Backlogged()) return true;
    const store::Event& ev = w.initial[e.next_initial++];
    if ((!w.filter || w.filter(*ev.object)) && !Send(e, "ADDED", *ev.object, ev.text.get())) return false;
  }
  if (!w.initial.empty()) {
    std::vector<store::Event>().swap(w.initial);
    e.next_initial = 0;
  }
  while (!e.stream->Backlogged()) {
    std::optional<store::Event> ev = w.watcher->Next(absl::ZeroDuration());
    if (!ev) break;
    if (w.filter && !w.filter(*ev->object)) continue;
    if (!Send(e, store::EventTypeName(ev->type), *ev->object, ev->text.get())) return false;
  }
  if (e.stream->Backlogged()) return true;
  if (w.watcher->ended()) {
    Send(e, "ERROR", w.ended_status);
    e.stream->Finish();
    return false;
  }
  if (w.bookmark && now >= e.next_bookmark) {
    e.next_bookmark = now + options_.bookmark_interval;
    const int64_t rv = w.watcher->BookmarkVersion();
    if (rv > e.last_bookmark) {
      e.last_bookmark = rv;
      if (!Send(e, "BOOKMARK", w.bookmark(rv))) return false;
    }
  }
  return true;
}

}  // namespace berth::apiserver
