#include "client/events.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "api/kinds.h"
#include "client/quiescence.h"
#include "client/writes.h"
#include "common/memory.h"
#include "common/strings.h"
#include "common/thread_name.h"
#include "spdlog/spdlog.h"

namespace berth::client {

using nlohmann::json;

namespace {
const api::KindInfo& EventsKind() { return *api::FindResource("", "events"); }
}  // namespace

// The thread that writes every recorder's queued events, a batch of one
// recorder at a time, the recorders with events waiting in turn. Made by
// the first recorder, stopped with the last: a process with ~20 recorders
// (berth up) keeps one thread, its stack and its heap, instead of ~20.
class EventWriter {
 public:
  static EventWriter* Acquire() ABSL_LOCKS_EXCLUDED(users_mu_) {
    absl::MutexLock lock(&users_mu_);
    if (users_++ == 0) writer_ = new EventWriter();
    return writer_;
  }
  static void Release() ABSL_LOCKS_EXCLUDED(users_mu_) {
    EventWriter* last = nullptr;
    {
      absl::MutexLock lock(&users_mu_);
      if (--users_ == 0) std::swap(last, writer_);
    }
    delete last;  // joins its thread: no recorder is left to write for
  }

  // `r` has events waiting: it takes its turn.
  void Ring(EventRecorder* r) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    if (std::find(ready_.begin(), ready_.end(), r) == ready_.end()) ready_.push_back(r);
  }
  // Once this returns the thread neither writes `r`'s events nor will.
  void Remove(EventRecorder* r) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    // First the batch being written, which may put `r` back in turn.
    auto idle = [this, r]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return busy_ != r; };
    mu_.Await(absl::Condition(&idle));
    ready_.erase(std::remove(ready_.begin(), ready_.end(), r), ready_.end());
  }

 private:
  EventWriter() : thread_(NamedThread("event writer", [this] { Loop(); })) {}
  ~EventWriter() {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    thread_.join();
  }

  void Loop() ABSL_LOCKS_EXCLUDED(mu_) {
    EventRecorder* written = nullptr;  // the last batch's recorder
    bool more = false;                 // and whether it has more waiting
    while (true) {
      EventRecorder* r = nullptr;
      {
        absl::MutexLock lock(&mu_);
        busy_ = nullptr;
        // Behind the others with events waiting: one recorder's burst does
        // not hold back another's.
        if (more && std::find(ready_.begin(), ready_.end(), written) == ready_.end()) ready_.push_back(written);
        auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !ready_.empty(); };
        AwaitReleasingWhenIdle(mu_, absl::Condition(&ready));
        if (ready_.empty()) return;  // stopping: the last recorder is gone
        r = ready_.front();
        ready_.pop_front();
        busy_ = r;
      }
      more = r->WriteBatch();
      written = r;
    }
  }

  static absl::Mutex users_mu_;
  static int users_ ABSL_GUARDED_BY(users_mu_);
  static EventWriter* writer_ ABSL_GUARDED_BY(users_mu_);

  absl::Mutex mu_;
  std::deque<EventRecorder*> ready_ ABSL_GUARDED_BY(mu_);
  EventRecorder* busy_ ABSL_GUARDED_BY(mu_) = nullptr;  // whose batch is being written
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts once everything above exists
};

ABSL_CONST_INIT absl::Mutex EventWriter::users_mu_(absl::kConstInit);
int EventWriter::users_ = 0;
EventWriter* EventWriter::writer_ = nullptr;

EventRecorder::EventRecorder(apiserver::Api& registry, std::string component, absl::Duration repeat_interval)
    : registry_(registry),
      component_(std::move(component)),
      repeat_interval_(repeat_interval),
      writer_(EventWriter::Acquire()) {
  quiescence_id_ = Quiescence::Register([this](int64_t) {
    absl::MutexLock lock(&mu_);
    return written_ == queued_;
  });
}

EventRecorder::~EventRecorder() {
  Quiescence::Unregister(quiescence_id_);
  writer_->Remove(this);
  while (WriteBatch()) {
  }
  EventWriter::Release();
}

namespace {
// Kubernetes names an event <object>.<UnixNano in hex>; the nanoseconds are
// made unique within the process, so two recorders never pick one name.
int64_t UniqueNanos(absl::Time now) {
  static std::atomic<int64_t> last{0};
  int64_t ns = absl::ToUnixNanos(now);
  int64_t prev = last.load();
  while (true) {
    if (ns <= prev) ns = prev + 1;
    if (last.compare_exchange_weak(prev, ns)) break;
  }
  return ns;
}

std::string EventName(const std::string& object, int64_t ns) { return absl::StrCat(object, ".", absl::Hex(ns)); }
}  // namespace

void EventRecorder::Record(const json& object, const std::string& type, const std::string& reason,
                           const std::string& message) {
  const absl::Time now = absl::Now();
  Pending p{.key = {},
            .ns = "",
            .existing = "",
            .name = "",
            .name_ns = 0,
            .timestamp = Rfc3339(now),
            .type = type,
            .reason = reason,
            .message = message,
            .object_kind = object.value("kind", ""),
            .object_api_version = object.value("apiVersion", ""),
            .object_name = Name(object),
            .object_ns = Ns(object),
            .object_uid = Uid(object),
            .object_rv = Str(object, {"metadata", "resourceVersion"})};
  p.ns = p.object_ns.empty() ? "default" : p.object_ns;
  p.key = EventMemory::KeyOf(StrCat(p.object_uid, "\n", reason, "\n", message));
  absl::MutexLock lock(&mu_);
  if (const EventMemory::Event* seen = remembered_.Find(p.key); seen != nullptr) {
    // The same event again within the repeat interval is dropped: a level-
    // triggered controller re-syncing must not write on every pass
    // (client-go's event correlator filters spam the same way).
    if (now - seen->last < repeat_interval_) return;
    p.name_ns = seen->name_ns;
    p.existing = EventName(p.object_name, p.name_ns);
  } else {
    // Remembered now, so repeats recorded before the write lands are dropped.
    p.name_ns = UniqueNanos(now);
    p.name = EventName(p.object_name, p.name_ns);
  }
  remembered_.Remember(p.key, {.name_ns = p.name_ns, .last = now});
  if (queue_.size() >= kMaxQueued) {
    spdlog::warn("{}: dropping event {} on {}/{}: {} events waiting to be written", component_, reason, p.ns,
                 p.object_name, queue_.size());
    if (p.existing.empty()) remembered_.Forget(p.key);
    return;
  }
  queue_.push_back(std::move(p));
  ++queued_;
  if (queue_.size() == 1) writer_->Ring(this);  // else it has its turn already
}

json EventRecorder::EventOf(const Pending& p) const {
  json involved = {{"kind", p.object_kind},
                   {"apiVersion", p.object_api_version},
                   {"name", p.object_name},
                   {"uid", p.object_uid},
                   {"resourceVersion", p.object_rv}};
  if (!p.object_ns.empty()) involved["namespace"] = p.object_ns;
  return {{"apiVersion", "v1"},
          {"kind", "Event"},
          {"metadata", {{"name", p.name}, {"namespace", p.ns}}},
          {"involvedObject", std::move(involved)},
          {"reason", p.reason},
          {"message", p.message},
          {"type", p.type},
          {"count", 1},
          {"firstTimestamp", p.timestamp},
          {"lastTimestamp", p.timestamp},
          {"source", {{"component", component_}}},
          {"reportingComponent", component_}};
}

void EventRecorder::Flush() {
  absl::MutexLock lock(&mu_);
  const uint64_t target = queued_;
  auto done = [this, target]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return written_ >= target; };
  mu_.Await(absl::Condition(&done));
}

void EventRecorder::Forget(const EventMemory::Key& key, int64_t name_ns) {
  absl::MutexLock lock(&mu_);
  if (const EventMemory::Event* e = remembered_.Find(key); e != nullptr && e->name_ns == name_ns) {
    remembered_.Forget(key);
  }
}

bool EventRecorder::WriteBatch() {
  std::deque<Pending> batch;
  {
    absl::MutexLock lock(&mu_);
    while (!queue_.empty() && batch.size() < kMaxBatch) {
      batch.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
  }
  const size_t n = batch.size();
  if (n > 0) Write(std::move(batch));
  absl::MutexLock lock(&mu_);
  written_ += n;
  return !queue_.empty();
}

void EventRecorder::Write(std::deque<Pending> batch) {
  std::vector<Pending> create;
  for (auto& p : batch) {
    if (p.existing.empty()) {
      create.push_back(std::move(p));
      continue;
    }
    // A repeat: bump the existing event (rare: once per repeat interval).
    auto current = registry_.Get(EventsKind(), p.ns, p.existing);
    if (current.ok()) {
      const int count = current->value("count", 1);
      auto bumped = registry_.Patch(EventsKind(), p.ns, p.existing,
                                    json({{"count", count + 1}, {"lastTimestamp", p.timestamp}}).dump(),
                                    apiserver::PatchType::kMerge, apiserver::Subresource::kMain);
      if (bumped.ok()) continue;
    }
    // The event was deleted meanwhile: make a new one.
    const absl::Time now = absl::Now();
    p.name_ns = UniqueNanos(now);
    p.name = EventName(p.object_name, p.name_ns);
    {
      absl::MutexLock lock(&mu_);
      remembered_.Remember(p.key, {.name_ns = p.name_ns, .last = now});
    }
    p.existing.clear();
    create.push_back(std::move(p));
  }
  if (create.empty()) return;
  std::vector<std::pair<std::string, json>> objects;
  objects.reserve(create.size());
  for (const auto& p : create) objects.emplace_back(p.ns, EventOf(p));
  auto results = registry_.CreateAll(EventsKind(), std::move(objects));
  for (size_t i = 0; i < results.size(); ++i) {
    if (results[i].ok()) continue;
    const Pending& p = create[i];
    spdlog::warn("event {} on {}/{}: {}", p.reason, p.ns, p.object_name, results[i].status().ToString());
    Forget(p.key, p.name_ns);
  }
}

}  // namespace berth::client
