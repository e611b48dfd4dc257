#include "client/events.h"

#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "api/kinds.h"
#include "client/quiescence.h"
#include "client/writes.h"
#include "common/hash.h"
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

void EventRecorder::Record(const json& object, const std::string& type, const std::string& reason,
                           const std::string& message) {
  const std::string uid = Uid(object), name = Name(object), object_ns = Ns(object);
  const std::string ns = object_ns.empty() ? "default" : object_ns;
  const std::string now = NowRfc3339();
  std::string id = StrCat(uid, "\n", reason, "\n", message);
  Pending p{.id = std::move(id), .ns = ns, .existing = "", .event = nullptr};
  {
    absl::MutexLock lock(&mu_);
    if (auto it = names_.find(p.id); it != names_.end()) {
      // The same event again within the repeat interval is dropped: a level-
      // triggered controller re-syncing must not write on every pass
      // (client-go's event correlator filters spam the same way).
      if (absl::Now() - it->second.last < repeat_interval_) return;
      it->second.last = absl::Now();
      p.existing = it->second.name;
    }
  }
  // Kubernetes names events <object>.<hex timestamp>; a hash keeps it short.
  const std::string event_name = StrCat(name, ".", Sha256Hex(StrCat(p.id, now)).substr(0, 16));
  p.event = {{"apiVersion", "v1"},
             {"kind", "Event"},
             {"metadata", {{"name", event_name}, {"namespace", ns}}},
             {"involvedObject",
              {{"kind", object.value("kind", "")},
               {"apiVersion", object.value("apiVersion", "")},
               {"name", name},
               {"uid", uid},
               {"resourceVersion", Str(object, {"metadata", "resourceVersion"})}}},
             {"reason", reason},
             {"message", message},
             {"type", type},
             {"count", 1},
             {"firstTimestamp", now},
             {"lastTimestamp", now},
             {"source", {{"component", component_}}},
             {"reportingComponent", component_}};
  if (!object_ns.empty()) p.event["involvedObject"]["namespace"] = ns;
  absl::MutexLock lock(&mu_);
  if (p.existing.empty()) {
    // Remembered now, so repeats recorded before the write lands are dropped.
    if (names_.size() >= kMaxRemembered) names_.clear();  // bounded memory; worst case a duplicate event
    names_[p.id] = {event_name, absl::Now()};
  }
  if (queue_.size() >= kMaxQueued) {
    spdlog::warn("{}: dropping event {} on {}/{}: {} events waiting to be written", component_, reason, ns, name,
                 queue_.size());
    if (p.existing.empty()) names_.erase(p.id);
    return;
  }
  queue_.push_back(std::move(p));
  ++queued_;
}

void EventRecorder::Flush() {
  absl::MutexLock lock(&mu_);
  const uint64_t target = queued_;
  auto done = [this, target]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return written_ >= target; };
  mu_.Await(absl::Condition(&done));
}

void EventRecorder::Forget(const std::string& id, const std::string& name) {
  absl::MutexLock lock(&mu_);
  if (auto it = names_.find(id); it != names_.end() && it->second.name == name) names_.erase(it);
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
                                    json({{"count", count + 1}, {"lastTimestamp", p.event["lastTimestamp"]}}).dump(),
                                    apiserver::PatchType::kMerge, apiserver::Subresource::kMain);
      if (bumped.ok()) continue;
    }
    // The event was deleted meanwhile: make a new one.
    {
      absl::MutexLock lock(&mu_);
      names_[p.id] = {p.event["metadata"]["name"].get<std::string>(), absl::Now()};
    }
    p.existing.clear();
    create.push_back(std::move(p));
  }
  if (create.empty()) return;
  std::vector<std::pair<std::string, json>> objects;
  objects.reserve(create.size());
  for (const auto& p : create) objects.emplace_back(p.ns, p.event);
  auto results = registry_.CreateAll(EventsKind(), std::move(objects));
  for (size_t i = 0; i < results.size(); ++i) {
    if (results[i].ok()) continue;
    const Pending& p = create[i];
    spdlog::warn("event {} on {}/{}: {}", p.event.value("reason", ""), p.ns, Str(p.event, {"involvedObject", "name"}),
                 results[i].status().ToString());
    Forget(p.id, Str(p.event, {"metadata", "name"}));
  }
}

}  // namespace berth::client
