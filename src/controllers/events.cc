#include "controllers/events.h"

#include "absl/time/clock.h"
#include "api/kinds.h"
#include "common/hash.h"
#include "common/strings.h"
#include "controllers/writes.h"
#include "spdlog/spdlog.h"

namespace berth::controllers {

using nlohmann::json;

void EventRecorder::Record(const json& object, const std::string& type, const std::string& reason,
                           const std::string& message) {
  const std::string uid = Uid(object), name = Name(object), object_ns = Ns(object);
  const std::string ns = object_ns.empty() ? "default" : object_ns;
  const std::string now = NowRfc3339();
  const api::KindInfo& events = *api::FindResource("", "events");
  const std::string id = StrCat(uid, "\n", reason, "\n", message);
  // The lock guards the name map only: writes happen outside it, so
  // workers recording events do not queue behind each other's fsyncs.
  std::string existing;
  {
    absl::MutexLock lock(&mu_);
    if (auto it = names_.find(id); it != names_.end()) {
      // The same event again within the repeat interval is dropped: a level-
      // triggered controller re-syncing must not write on every pass
      // (client-go's event correlator filters spam the same way).
      if (absl::Now() - it->second.last < repeat_interval_) return;
      it->second.last = absl::Now();
      existing = it->second.name;
    }
  }
  if (!existing.empty()) {
    auto current = registry_.Get(events, ns, existing);
    if (current.ok()) {
      const int count = current->value("count", 1);
      auto bumped = registry_.Patch(events, ns, existing,
                                    json({{"count", count + 1}, {"lastTimestamp", now}}).dump(),
                                    apiserver::PatchType::kMerge, apiserver::Subresource::kMain);
      if (bumped.ok()) return;
    }
    absl::MutexLock lock(&mu_);
    names_.erase(id);  // the event was deleted meanwhile: make a new one
  }
  // Kubernetes names events <object>.<hex timestamp>; a hash keeps it short.
  const std::string event_name = StrCat(name, ".", Sha256Hex(StrCat(id, now)).substr(0, 16));
  json ev = {{"apiVersion", "v1"},
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
  if (!object_ns.empty()) ev["involvedObject"]["namespace"] = ns;
  auto created = registry_.Create(events, ns, ev);
  if (!created.ok()) {
    spdlog::warn("event {} on {}/{}: {}", reason, ns, name, created.status().ToString());
    return;
  }
  absl::MutexLock lock(&mu_);
  if (names_.size() >= kMaxRemembered) names_.clear();  // bounded memory; worst case a duplicate event
  names_[id] = {event_name, absl::Now()};
}

}  // namespace berth::controllers
