// The Node object of one node agent and its two health signals, as kubelet
// keeps them (pkg/kubelet/kubelet_node_status.go and the node lease
// controller of component-helpers):
//
//   - the Lease kube-node-lease/<node>: holderIdentity <node>,
//     leaseDurationSeconds 40, an ownerReference to the Node (so the lease
//     goes with it), spec.renewTime renewed every renew_interval (10 s; a
//     failed renewal is retried after 200 ms doubling to 7 s). The node
//     lifecycle controller watches renewTime;
//   - the Node's status: the Ready condition (True "KubeletReady" /
//     "kubelet is posting ready status", or False "KubeletNotReady" with
//     the readiness errors joined as kubelet does), capacity and allocatable
//     (cpu, memory, ephemeral-storage of the kubelet root, pods 110),
//     nodeInfo and addresses. It is computed every status_update_frequency
//     (10 s) against the stored Node and written when something other than
//     heartbeat times differs — a Ready condition the node lifecycle
//     controller set to Unknown is put right at the next tick — or when the
//     last write is older than status_report_frequency (1 min), with a new
//     lastHeartbeatTime. Transitions of Ready are recorded as NodeReady /
//     NodeNotReady events.
//
// status.volumesInUse is written by SetVolumesInUse (the volume manager, on
// change); status.volumesAttached belongs to the attach-detach controller
// and is never touched here.
//
// Everything runs on the injected Clock: tests move a FakeClock and see the
// lease renewed and the status posted, without sleeping.
//
//   NodeStatus status(registry, {.node_name = "node-1", .kubelet_root = "/var/lib/berth/nodes/node-1/kubelet"});
//   BERTH_RETURN_IF_ERROR(status.Start());
//
// Thread-safety: thread-safe; Start/Stop from one thread.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "apiserver/api.h"
#include "client/events.h"
#include "common/clock.h"
#include "nlohmann/json.hpp"

namespace berth::node {

inline constexpr char kNodeLeaseNamespace[] = "kube-node-lease";

class NodeStatus {
 public:
  struct Options {
    std::string node_name;
    // Labels set on the Node besides kubernetes.io/hostname and
    // kubernetes.io/os (existing ones with another value are overwritten).
    std::map<std::string, std::string> labels;
    // Its filesystem's size is the node's ephemeral-storage capacity.
    std::string kubelet_root;
    // kubelet's --node-lease-duration-seconds, and its renew interval (a
    // quarter of the duration in kubelet; berth up shortens it when the node
    // monitor grace period is shorter than 40 s).
    int64_t lease_duration_seconds = 40;
    absl::Duration lease_renew_interval = absl::Seconds(10);
    // kubelet's --node-status-update-frequency and nodeStatusReportFrequency.
    absl::Duration status_update_frequency = absl::Seconds(10);
    absl::Duration status_report_frequency = absl::Minutes(1);
    // Why the node cannot run pods now (kubelet's runtime, network and
    // storage errors): any entry makes Ready False. Null: always ready.
    std::function<std::vector<std::string>()> readiness_errors = nullptr;
    // TEST ONLY (berth up wires it only under BERTH_TEST_HOOKS=1): while it
    // returns true, neither the lease nor the status is written — what the
    // control plane sees of an agent that hangs (SIGSTOP), until node agents
    // run as their own processes.
    std::function<bool()> paused_for_test = nullptr;
    Clock* clock = nullptr;  // null: RealClock()
  };
  NodeStatus(apiserver::Api& registry, Options options);
  ~NodeStatus();  // Stop()

  // Creates the Node (or adopts the existing one: labels added), posts its
  // status, creates or renews the lease (a failure there is retried by the
  // loop: kube-node-lease may not exist yet), and starts both loops.
  absl::Status Start();
  void Stop();

  // Writes status.volumesInUse (sorted) when it differs from the last write.
  absl::Status SetVolumesInUse(std::vector<std::string> volumes) ABSL_LOCKS_EXCLUDED(mu_);

  // One lease renewal / one status sync, as the loops do them (tests).
  absl::Status RenewLease();
  absl::Status SyncStatus() ABSL_LOCKS_EXCLUDED(mu_);

  const std::string& name() const { return options_.node_name; }

 private:
  // The status kubelet would post now, on top of `node`'s (Ready with
  // lastHeartbeatTime = now; true when anything but heartbeat times
  // changed).
  bool ComputeStatus(nlohmann::json& node, absl::Time now) const;
  nlohmann::json Capacity() const;
  bool Paused() const { return options_.paused_for_test && options_.paused_for_test(); }
  void LeaseLoop() ABSL_LOCKS_EXCLUDED(mu_);
  void StatusLoop() ABSL_LOCKS_EXCLUDED(mu_);

  // Immutable after construction.
  apiserver::Api& registry_;
  const Options options_;
  Clock& clock_;
  client::EventRecorder events_;

  std::thread lease_thread_;
  std::thread status_thread_;
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<std::vector<std::string>> in_use_ ABSL_GUARDED_BY(mu_);  // last written
  absl::Time last_report_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace berth::node
