// The node lifecycle controller (kube-controller-manager's nodelifecycle,
// pkg/controller/nodelifecycle): it watches each node's two health signals
// — its Lease in kube-node-lease and the Ready condition its agent posts —
// and acts when they stop.
//
// Every monitor period (5 s) on the injected clock, per node:
//   - a signal that changed (the lease's renewTime, the Ready condition's
//     lastHeartbeatTime) is a probe at this controller's own "now" (clock
//     skew between node and controller does not matter);
//   - no probe within the grace period (--node-monitor-grace-period, 40 s;
//     a node that never posted status gets the startup grace period, 60 s)
//     → Ready (and MemoryPressure, DiskPressure, PIDPressure when present)
//     becomes Unknown, reason NodeStatusUnknown, message "Kubelet stopped
//     posting node status." (absent ones: NodeStatusNeverUpdated, "Kubelet
//     never posted node status."), event NodeNotReady on the node;
//   - taint-based eviction's NoExecute taints follow Ready: False →
//     node.kubernetes.io/not-ready, Unknown → node.kubernetes.io/unreachable
//     (swapped at once when Ready changes between the two), True → both
//     removed;
//   - when Ready leaves True the pods on the node get Ready=False (event
//     NodeNotReady "Node is not ready"), and so does a pod bound to such a
//     node later.
// When no node of any zone (topology.kubernetes.io/region + zone) is Ready,
// the controller assumes the fault is its own (master disruption, as
// upstream): it removes every NoExecute not-ready/unreachable taint and adds
// none, so nothing is evicted; leaving that state restarts every node's
// grace period.
//
// On every node change, the NoSchedule taints mirror the conditions
// (TaintNodesByCondition): Ready False → not-ready, Unknown → unreachable,
// MemoryPressure / DiskPressure / PIDPressure / NetworkUnavailable True →
// their taints, spec.unschedulable → node.kubernetes.io/unschedulable. Taints
// the controller adds carry timeAdded. The scheduler keeps pods off nodes
// with NoSchedule taints they do not tolerate; TaintEvictionController
// evicts pods that do not tolerate the NoExecute ones.
//
// Not done (upstream): the eviction rate limits per zone
// (--node-eviction-rate, partial disruption); berth taints at once.
//
//   NodeLifecycleController nlc(registry, {nodes, leases, pods}, {.grace_period = absl::Seconds(40)});
//   nlc.RegisterHandlers();   // before the informers start
//   ... start informers ...
//   nlc.Start();
//
// Thread-safety: thread-safe; Start/Stop from one thread.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "api/types/core_node.h"
#include "apiserver/registry.h"
#include "client/events.h"
#include "client/informer.h"
#include "client/workqueue.h"
#include "common/clock.h"
#include "nlohmann/json.hpp"

namespace berth::controllers {

inline constexpr char kNodeLeaseNamespace[] = "kube-node-lease";
// The pods informer's index by spec.nodeName (shared with taint eviction).
inline constexpr char kPodsByNode[] = "spec.nodeName";
// Nodes labelled so are left out of the disruption computation (upstream).
inline constexpr char kLabelExcludeDisruption[] = "node.kubernetes.io/exclude-disruption";

// Adds kPodsByNode to the pods informer (idempotent; before it starts).
void IndexPodsByNode(client::Informer& pods);

struct NodeLifecycleInformers {
  client::Informer& nodes;
  client::Informer& leases;  // coordination.k8s.io leases (kube-node-lease)
  client::Informer& pods;
};

class NodeLifecycleController {
 public:
  struct Options {
    absl::Duration monitor_period = absl::Seconds(5);
    absl::Duration grace_period = absl::Seconds(40);
    absl::Duration startup_grace_period = absl::Minutes(1);
    Clock* clock = nullptr;  // null: RealClock()
  };
  NodeLifecycleController(apiserver::Registry& registry, NodeLifecycleInformers informers, Options options);
  ~NodeLifecycleController();  // Stop()

  void RegisterHandlers();
  // The monitor loop (a pass at once, then every monitor period) and the
  // workers for NoSchedule taints and newly bound pods.
  void Start();
  void Stop();

  // One monitor pass over every node (public for tests).
  absl::Status MonitorNodeHealth() ABSL_LOCKS_EXCLUDED(mu_);
  // The NoSchedule taints of `node` made to mirror its conditions.
  absl::Status SyncNoScheduleTaints(const std::string& node);
  // A pod bound to a node that is not Ready gets Ready=False.
  absl::Status SyncPod(const std::string& key) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // What the controller last saw of a node, at its own clock's times.
  struct Health {
    absl::Time probe;             // the last time a health signal changed
    absl::Time ready_transition;  // when the Ready condition last changed
    bool has_ready = false;       // the node had a Ready condition
    std::string heartbeat;        // its lastHeartbeatTime
    std::string transition;       // its lastTransitionTime
    std::string status;           // its status ("True", "False", "Unknown")
    std::optional<absl::Time> lease_renew;
    bool retry_pods = false;  // marking the pods NotReady failed
  };
  struct Observed {
    std::string before;  // Ready status at the start of the pass ("": none)
    std::string after;   // after it ("": still within the startup grace)
  };

  // upstream tryUpdateNodeHealth.
  absl::StatusOr<Observed> UpdateNodeHealth(const api::types::Node& node) ABSL_LOCKS_EXCLUDED(mu_);
  // The NoExecute taint for `ready` (False / Unknown) put on, its opposite
  // taken off; "True": both off.
  absl::Status SetNoExecuteTaints(const api::types::Node& node, const std::string& ready);
  absl::Status MarkPodsNotReady(const std::string& node);
  // Taints are matched by key and effect.
  absl::Status SwapTaints(const std::string& node, const std::vector<api::types::Taint>& add,
                          const std::vector<api::types::Taint>& remove);
  void MonitorLoop() ABSL_LOCKS_EXCLUDED(mu_);

  // Immutable after construction.
  apiserver::Registry& registry_;
  NodeLifecycleInformers informers_;
  const Options options_;
  Clock& clock_;
  client::EventRecorder events_;
  client::WorkQueue node_queue_;  // NoSchedule taints
  client::WorkQueue pod_queue_;   // pods bound to unhealthy nodes
  std::vector<std::thread> threads_;

  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::string, Health> health_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> known_ ABSL_GUARDED_BY(mu_);
  bool fully_disrupted_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace berth::controllers
