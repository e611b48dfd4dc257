// Kubernetes Events from controllers: `Record(object, "Warning",
// "ProvisioningFailed", message)` creates a core/v1 Event about the object,
// or bumps count and lastTimestamp of the same event (same object, reason
// and message) as kubelet's and the controllers' recorders do.
//
// Thread-safety: thread-safe. Failures to write an event are logged and
// dropped: events are diagnostics, never a reason to fail a reconcile.
#pragma once

#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "apiserver/registry.h"
#include "nlohmann/json.hpp"

namespace berth::controllers {

class EventRecorder {
 public:
  EventRecorder(apiserver::Registry& registry, std::string component)
      : registry_(registry), component_(std::move(component)) {}

  void Record(const nlohmann::json& object, const std::string& type, const std::string& reason,
              const std::string& message) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  apiserver::Registry& registry_;
  const std::string component_;
  absl::Mutex mu_;
  // (uid, reason, message) → event name, for aggregation.
  std::map<std::string, std::string> names_ ABSL_GUARDED_BY(mu_);
};

}  // namespace berth::controllers
