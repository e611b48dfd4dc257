// Kubernetes Events from controllers: `Record(object, "Warning",
// "ProvisioningFailed", message)` creates a core/v1 Event about the object,
// or bumps count and lastTimestamp of the same event (same object, reason
// and message) as kubelet's and the controllers' recorders do — at most
// once per repeat interval.
//
// Thread-safety: thread-safe. Failures to write an event are logged and
// dropped: events are diagnostics, never a reason to fail a reconcile.
#pragma once

#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "apiserver/registry.h"
#include "nlohmann/json.hpp"

namespace berth::controllers {

class EventRecorder {
 public:
  // The same event (object, reason, message) recorded again within
  // `repeat_interval` of the last write is dropped.
  EventRecorder(apiserver::Registry& registry, std::string component,
                absl::Duration repeat_interval = absl::Seconds(10))
      : registry_(registry), component_(std::move(component)), repeat_interval_(repeat_interval) {}

  void Record(const nlohmann::json& object, const std::string& type, const std::string& reason,
              const std::string& message) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  static constexpr size_t kMaxRemembered = 50000;
  struct Written {
    std::string name;
    absl::Time last;
  };

  apiserver::Registry& registry_;
  const std::string component_;
  const absl::Duration repeat_interval_;
  absl::Mutex mu_;
  // (uid, reason, message) → the event, for aggregation.
  std::map<std::string, Written> names_ ABSL_GUARDED_BY(mu_);
};

}  // namespace berth::controllers
