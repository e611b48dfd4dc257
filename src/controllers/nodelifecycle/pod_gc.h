// The part of kube-controller-manager's pod garbage collector that node
// failures need (pkg/controller/podgc gcTerminating, non-graceful node
// shutdown): a pod being deleted (Terminating) on a node that is not Ready
// and carries the node.kubernetes.io/out-of-service taint will never be
// stopped by its agent, so it is marked Failed and deleted with grace period
// 0 (its uid as precondition). The attach-detach controller then
// force-detaches its volumes at once (the taint), and its claims can be used
// elsewhere.
//
// Checked every period (20 s, upstream's gcCheckPeriod) on the injected
// clock and whenever a node's readiness or taints change.
//
// Not done (upstream): orphaned pods on deleted nodes, unscheduled
// terminating pods, the terminated-pod threshold.
//
// Thread-safety: thread-safe; Start/Stop from one thread.
#pragma once

#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "apiserver/registry.h"
#include "client/informer.h"
#include "client/workqueue.h"
#include "common/clock.h"

namespace berth::controllers {

struct PodGcInformers {
  client::Informer& nodes;
  client::Informer& pods;
};

class PodGarbageCollector {
 public:
  struct Options {
    absl::Duration period = absl::Seconds(20);
    Clock* clock = nullptr;  // null: RealClock()
  };
  PodGarbageCollector(apiserver::Registry& registry, PodGcInformers informers, Options options);
  ~PodGarbageCollector();  // Stop()

  void RegisterHandlers();
  void Start();
  void Stop();

  // Force-deletes the terminating pods of `node` if it is out of service
  // (tests; the loop runs it for every node).
  absl::Status SyncNode(const std::string& node);

 private:
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);

  // Immutable after construction.
  apiserver::Registry& registry_;
  PodGcInformers informers_;
  const Options options_;
  Clock& clock_;
  client::WorkQueue queue_;  // node names
  std::vector<std::thread> threads_;

  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace berth::controllers
