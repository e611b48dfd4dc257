#include "client/events.h"

#include <atomic>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "api/kinds.h"
#include "client/quiescence.h"
#include "client/writes.h"
#include "common/memory.h"
#include "common/strings.h"
#include "spdlog/spdlog.h"

namespace berth::client {

using nlohmann::json;

namespace {
const api::KindInfo& EventsKind() { return *api::FindResource("", "events"); }
}  // namespace

EventRecorder::EventRecorder(apiserver::Api& registry, std::string component, absl::Duration repeat_interval)
    : registry_(registry),
      component_(std::move(component)),
      repeat_interval_(repeat_interval),
      writer_([this] { WriterLoop(); }) {
  quiescence_id_ = Quiescence::Register([this](int64_t) {
    absl::MutexLock lock(&mu_);
    return written_ == queued_;
  });
}

EventRecorder::~EventRecorder() {
  Quiescence::Unregister(quiescence_id_);
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  writer_.join();
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

void EventRecorder::WriterLoop() {
  while (true) {
    std::deque<Pending> batch;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !queue_.empty(); };
      AwaitReleasingWhenIdle(mu_, absl::Condition(&ready));
      if (queue_.empty()) return;  // stopping, and everything is written
      while (!queue_.empty() && batch.size() < kMaxBatch) {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    const size_t n = batch.size();
    Write(std::move(batch));
    absl::MutexLock lock(&mu_);
    written_ += n;
  }
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
