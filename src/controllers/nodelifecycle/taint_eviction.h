// Taint-based eviction (kube-controller-manager's taint-eviction-controller,
// pkg/controller/tainteviction): pods bound to a node with NoExecute taints
// they do not tolerate are deleted.
//
// For each pod on a node (re-evaluated whenever the pod or the node's
// NoExecute taints change):
//   - no NoExecute taints: any scheduled eviction is cancelled;
//   - a taint no toleration of the pod matches: the pod is evicted at once;
//   - all tolerated, none with tolerationSeconds: tolerated forever
//     (a scheduled eviction is cancelled);
//   - else the pod is evicted the smallest tolerationSeconds (of the first
//     toleration matching each taint) after the controller first saw it
//     tainted — 300 s for the tolerations the DefaultTolerationSeconds
//     admission adds.
// Scheduling and cancelling are recorded as TaintManagerEviction events
// ("Marking for deletion Pod ns/name", "Cancelling deletion of Pod
// ns/name"). Eviction adds the DisruptionTarget condition (True,
// DeletionByTaintManager, "Taint manager: deleting due to NoExecute taint")
// and deletes the pod with its uid as precondition. Pods already being
// deleted are left alone.
//
// Timers run on the injected clock; the decision is re-taken on the
// current objects when one fires.
//
// Difference from upstream: a scheduled eviction keeps its start when the
// pod's tolerations or the node's taints change (upstream keeps the first
// deadline), so a shorter tolerationSeconds takes effect; and the start is
// when this controller first saw the pod tainted, so a control-plane
// restart restarts the count, as upstream.
//
// Thread-safety: thread-safe; Start/Stop from one thread.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "apiserver/registry.h"
#include "client/events.h"
#include "client/informer.h"
#include "client/workqueue.h"
#include "common/clock.h"
#include "nlohmann/json.hpp"

namespace berth::controllers {

struct TaintEvictionInformers {
  client::Informer& nodes;
  client::Informer& pods;
};

class TaintEvictionController {
 public:
  struct Options {
    int workers = 1;
    Clock* clock = nullptr;  // null: RealClock()
  };
  TaintEvictionController(apiserver::Registry& registry, TaintEvictionInformers informers, Options options);
  ~TaintEvictionController();  // Stop()

  void RegisterHandlers();
  void Start();
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

  // Re-evaluates one pod ("ns/name") / every pod on one node (tests).
  absl::Status SyncPod(const std::string& key) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status SyncNode(const std::string& node) ABSL_LOCKS_EXCLUDED(mu_);

  // When the pod "ns/name" is due to be evicted (tests).
  std::optional<absl::Time> ScheduledEviction(const std::string& key) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Scheduled {
    std::string uid;
    absl::Time start;
    absl::Time due;
    Clock::TimerId timer = 0;
  };
  absl::Status ProcessPod(const nlohmann::json& pod) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Evict(const nlohmann::json& pod);
  // Cancels the pod's scheduled eviction (with an event when `announce`).
  void Cancel(const std::string& key, const nlohmann::json* pod) ABSL_LOCKS_EXCLUDED(mu_);

  // Immutable after construction.
  apiserver::Registry& registry_;
  TaintEvictionInformers informers_;
  const Options options_;
  Clock& clock_;
  client::EventRecorder events_;
  client::WorkQueue queue_;  // "pod/<ns>/<name>" and "node/<name>"
  std::vector<std::thread> workers_;

  absl::Mutex mu_;
  std::map<std::string, Scheduled> scheduled_ ABSL_GUARDED_BY(mu_);
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace berth::controllers
