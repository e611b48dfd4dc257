// The pod scheduler (kube-scheduler's filters that matter for storage, and
// its VolumeBinding plugin), in process: it puts pods without
// spec.nodeName whose schedulerName is ours ("default-scheduler" or empty)
// on a node.
//
// Filters, in kube-scheduler's order, each with Kubernetes' reason string:
//   - spec.unschedulable nodes ("node(s) were unschedulable") and NoSchedule /
//     NoExecute taints the pod does not tolerate ("node(s) had untolerated
//     taint {key: value}"); a node whose Ready condition is False or Unknown
//     carries node.kubernetes.io/not-ready or .../unreachable as the node
//     lifecycle controller would taint it. A node without a Ready condition
//     counts as ready: berth's embedded nodes may be registered without
//     heartbeats.
//   - nodeSelector and required node affinity ("node(s) didn't match Pod's
//     node affinity/selector"),
//   - CSINode spec.drivers[].allocatable.count: distinct volumes of a driver
//     used by the node's pods plus this pod's new ones ("node(s) exceed max
//     volume count"),
//   - volume binding: bound claims' PV nodeAffinity ("node(s) had volume
//     node affinity conflict", "...bound to non-existent pv(s)"); unbound
//     WaitForFirstConsumer claims need an Available PV on the node
//     (PvBinder::FindBestMatch) or dynamic provisioning there: the class has
//     a provisioner, its allowedTopologies admit the node, the node's CSINode
//     lists the driver ("node(s) didn't find available persistent volumes to
//     bind"), and CSIStorageCapacity allows it ("node(s) did not have enough
//     free storage"): with CSIDriver spec.storageCapacity true some object of
//     the class whose nodeTopology selects the node must offer
//     maximumVolumeSize (else capacity) >= the request; without it the same
//     holds whenever such objects exist.
// Claims that are missing, being deleted, or unbound with Immediate binding
// make the pod unschedulable before any node is tried.
//
// Choice among the fitting nodes by the class parameter
// berth.io/node-weighting of the pod's first unbound WaitForFirstConsumer
// claim, else of its first claim with a class (seed 001; see
// NodeWeighting); pods without claims go to the node with the fewest pods.
// Ties are broken by name or by an injected random source.
//
// Placements (upstream's assume cache, for volumes): every claim the
// scheduler sends to a node to be provisioned counts there — its bytes and
// one volume — from the moment of the decision, so a burst of pods spreads
// instead of piling onto the node the informers still show as emptiest. A
// placement counts
//   - for VolumeWeighted and CapacityWeighted until its PV is in the
//     informer's cache (from then on the PV itself is counted, not both);
//   - against CSIStorageCapacity (SpaceWeighted's free space, and the
//     capacity filter, so a burst does not over-commit a node whose
//     capacity object lags) until the object has been written after the PV
//     appeared: resourceVersions come from one counter, so an object with a
//     greater one than the PV as first seen was computed after the volume
//     was created. The capacity tracker only polls (and writes only
//     changed values), so this bounds the count to Options::
//     capacity_catch_up after the PV appeared, in case no write ever comes;
//     a GetCapacity that started before CreateVolume returned and was
//     written after the PV may still miss the volume (the driver then
//     refuses the CreateVolume that does not fit, and the pod is retried).
// A placement is forgotten when its claim is deleted or loses or changes
// selected-node (the provisioner gave up: the pod is retried after a
// backoff), or when writing selected-node fails. Claims that name a node
// but have no volume yet when the scheduler starts (a restart) count as
// placements too.
//
// Binding (upstream's AssumePodVolumes/BindPodVolumes, level-triggered):
// static matches get the PV's claimRef (the PV binder completes them), and
// every unbound WaitForFirstConsumer claim — static matches too, since
// berth's binder waits for it — gets volume.kubernetes.io/selected-node;
// the pod is bound (pods/binding) once all its claims are bound
// (volumeName + pv.kubernetes.io/bind-completed, as upstream). The pod and
// the claims are the only durable state, so a restart at any point
// converges: a claim that already names a node pins the pod there. A
// provisioner that gives up clears selected-node; the pod is then scheduled
// again after a backoff.
//
// Outcomes on the pod: condition PodScheduled=False/Unschedulable with
// Kubernetes' message ("0/3 nodes are available: 1 node(s) didn't match
// Pod's node affinity/selector, 2 node(s) did not have enough free
// storage.") and a Warning FailedScheduling event when that message
// changes; PodScheduled=True and a Normal Scheduled event on success.
// Unschedulable pods are retried with backoff and whenever nodes, claims,
// volumes, classes, CSINodes, CSIDrivers or CSIStorageCapacities change.
//
//   Scheduler scheduler(registry, SchedulerInformers{...}, Scheduler::Options{});
//   scheduler.RegisterHandlers();   // before the informers start
//   ... start informers ...
//   scheduler.Start();
//
// Thread-safety: thread-safe; Start/Stop from one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "apiserver/registry.h"
#include "client/events.h"
#include "client/informer.h"
#include "client/workqueue.h"
#include "common/clock.h"
#include "controllers/node_affinity.h"
#include "nlohmann/json.hpp"

namespace berth::controllers {

using namespace ::berth::client;  // the controllers' own client library

// The StorageClass parameter choosing how nodes are weighed (seed 001).
inline constexpr char kNodeWeightingParameter[] = "berth.io/node-weighting";

// Seed 001's three weightings, for the class's driver on each node:
enum class NodeWeighting {
  // Most free space first: the largest CSIStorageCapacity capacity of the
  // class that the node can reach. The default.
  kSpaceWeighted,
  // Least allocated first: the sum of the sizes of the driver's volumes on
  // the node (and of claims already sent there).
  kCapacityWeighted,
  // Fewest volumes first: the number of the driver's volumes on the node
  // (and of claims already sent there).
  kVolumeWeighted,
};

// "SpaceWeighted" / "CapacityWeighted" / "VolumeWeighted"; "" is the default
// (SpaceWeighted). INVALID_ARGUMENT for anything else.
absl::StatusOr<NodeWeighting> ParseNodeWeighting(std::string_view value);

// What ChooseNode weighs about one fitting node.
struct NodeCandidate {
  std::string name;
  int64_t free_bytes = -1;      // SpaceWeighted; -1 = no capacity known (ranks last)
  int64_t allocated_bytes = 0;  // CapacityWeighted
  int64_t volumes = 0;          // VolumeWeighted
};

// The best candidate's name by `weighting` ("" if there is none). Ties go to
// the smallest name, or — with `rng` — to a uniformly random one of the
// tied candidates. Pure; exposed for tests.
std::string ChooseNode(const std::vector<NodeCandidate>& candidates, NodeWeighting weighting,
                       std::mt19937_64* rng = nullptr);

// Does the pod's spec.nodeSelector and required node affinity admit `node`?
bool PodFitsNodeAffinity(const nlohmann::json& pod, const nlohmann::json& node);

struct SchedulerInformers {
  Informer& pods;
  Informer& nodes;
  Informer& claims;
  Informer& volumes;
  Informer& classes;
  Informer& csinodes;
  Informer& csidrivers;
  Informer& capacities;  // CSIStorageCapacity, all namespaces
};

class Scheduler {
 public:
  struct Options {
    std::string scheduler_name = "default-scheduler";
    // Decisions are taken one pod at a time, as kube-scheduler's scheduling
    // cycle does; more workers would let two pods count the same free slot.
    int workers = 1;
    // Ties among equally weighted nodes: by name when unset, else random
    // from this seed.
    std::optional<uint64_t> random_seed;
    // Retry of unschedulable pods (besides retries on cluster changes).
    absl::Duration initial_backoff = absl::Seconds(1);
    absl::Duration max_backoff = absl::Minutes(5);
    // The clock the retry backoff runs on (null: RealClock()).
    Clock* clock = nullptr;
    // How long after its PV appeared a placement still counts against
    // CSIStorageCapacity objects not written since (longer than the
    // capacity tracker's poll interval, 1 min by default).
    absl::Duration capacity_catch_up = absl::Minutes(3);
  };
  Scheduler(apiserver::Registry& registry, SchedulerInformers informers, Options options);
  ~Scheduler();  // Stop()

  // Registers handlers (call before the informers start); Start runs workers.
  void RegisterHandlers();
  void Start();
  void Stop();
  // Keys queued for SyncPod so far (each a worker's wake-up).
  uint64_t queue_adds() const { return queue_.adds(); }

  // One scheduling attempt for the pod "ns/name"; public for tests. OK when
  // the pod was bound, needs nothing, or waits for its claims to bind;
  // FAILED_PRECONDITION with the unschedulable message when no node fits
  // (the worker retries it with backoff); other codes for API errors.
  absl::Status SyncPod(const std::string& key);

 private:
  struct NodeInfo;  // a node and its labels
  struct Snapshot;  // the cluster state one attempt works from
  struct ClaimRef;  // one claim of the pod, classified
  struct NodeFit;   // one node's verdict and volume plan

  // A claim sent to a node to be provisioned there, until the informers
  // count its volume (see the header comment).
  struct Placement {
    std::string claim;  // "ns/name"
    std::string pod;    // "ns/name" of the pod placed; "" when adopted at a restart
    std::string node, storage_class, driver;
    int64_t bytes = 0;
    // The claim's resourceVersion as we wrote it (or first saw it): an older
    // one in the informer is lag, not a rollback.
    int64_t claim_version = 0;
    // The PV's resourceVersion when the scheduler first saw it, and when
    // (0: no volume yet).
    int64_t volume_version = 0;
    absl::Time volume_seen;
  };

  bool Pending(const nlohmann::json& pod) const;
  void RequeuePending();
  // Queues kRequeueAll if any pod waits (see pending_index_).
  void RequeueAllIfAnyPending();
  void RequeuePodsUsing(const nlohmann::json& claim);

  // Our own writes, kept until the informers catch up (upstream's assume
  // cache), so that decisions taken in a row see each other.
  void Assume(const std::string& kind, const nlohmann::json& object) ABSL_LOCKS_EXCLUDED(mu_);
  std::optional<nlohmann::json> Current(Informer& informer, const std::string& kind, const std::string& key)
      ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<nlohmann::json> SelectCurrent(Informer& informer, const std::string& kind,
                                            const std::function<bool(const nlohmann::json&)>& pred)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Placements: the decision recorded before its write (and forgotten if
  // the write fails), every placement of a pod forgotten (its provisioning
  // failed), and what they add to one attempt's snapshot (forgetting those
  // the informers have caught up with).
  void AssumePlacement(const std::string& uid, Placement placement) ABSL_LOCKS_EXCLUDED(mu_);
  void ForgetPlacement(const std::string& uid) ABSL_LOCKS_EXCLUDED(mu_);
  void ForgetPlacements(const std::string& pod_key) ABSL_LOCKS_EXCLUDED(mu_);
  void CountPlacements(Snapshot& snap) ABSL_LOCKS_EXCLUDED(mu_);

  // The pod's claims, classified; a message for the pod's condition when
  // one is missing, not its own, or being deleted ("" otherwise).
  std::string CollectClaims(const nlohmann::json& pod, std::vector<ClaimRef>& claims);
  // Everything the filters read besides the nodes (already in `snap`).
  void FillSnapshot(const std::string& key, const nlohmann::json& pod, const std::vector<ClaimRef>& claims,
                    Snapshot& snap);
  NodeFit Filter(const nlohmann::json& pod, const std::vector<ClaimRef>& claims, const NodeInfo& node,
                 const Snapshot& snap);
  void FilterVolumes(const std::vector<ClaimRef>& claims, const NodeInfo& node, const Snapshot& snap, NodeFit& fit);
  // The fitting node to use: one the pod's claims already name, else the
  // best by the weighting of the pod's (first unbound, else first) class.
  const NodeFit& PickNode(const std::vector<ClaimRef>& claims, const std::vector<NodeFit>& fits, const Snapshot& snap);

  absl::Status Unschedulable(const nlohmann::json& pod, const std::string& reason, const std::string& message);
  absl::Status AssumeVolumes(const nlohmann::json& pod, const std::vector<ClaimRef>& claims, const NodeFit& fit);
  absl::Status Bind(const nlohmann::json& pod, const std::string& node);
  absl::Status SetScheduledCondition(const nlohmann::json& pod, const std::string& status, const std::string& reason,
                                     const std::string& message);

  apiserver::Registry& registry_;
  SchedulerInformers informers_;
  const Options options_;
  // The pods informer's index of the pods this scheduler waits to place:
  // each under kAnyPending and under every claim it uses ("ns/claim").
  const std::string pending_index_;
  EventRecorder events_;
  WorkQueue queue_;
  std::vector<std::thread> workers_;

  absl::Mutex mu_;
  // kind → "ns/name" → the object as we last wrote it.
  std::map<std::string, std::map<std::string, nlohmann::json>> assumed_ ABSL_GUARDED_BY(mu_);
  // Pods whose claims we sent to a node ("ns/name" → node): a claim that
  // loses selected-node afterwards means its provisioning failed.
  std::map<std::string, std::string> binding_ ABSL_GUARDED_BY(mu_);
  // Claim uid → where we sent it, until the informers count it.
  std::map<std::string, Placement> placements_ ABSL_GUARDED_BY(mu_);
  std::mt19937_64 rng_ ABSL_GUARDED_BY(mu_);
};

}  // namespace berth::controllers
