// The parts of the scheduler (scheduler.cc, scheduler_filters.cc,
// scheduler_scores.cc, scheduler_binding.cc) share these: kube-scheduler's
// reason strings, the private types of one scheduling attempt, and small
// helpers over pods, claims and volumes. Not for use outside the scheduler.
#ifndef BERTH_CONTROLLERS_SCHEDULER_INTERNAL_H_
#define BERTH_CONTROLLERS_SCHEDULER_INTERNAL_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "api/types/core.h"
#include "api/types/core_pod.h"
#include "api/types/storage.h"
#include "client/typed.h"
#include "controllers/scheduling/scheduler.h"
#include "nlohmann/json.hpp"

namespace berth::controllers {
namespace scheduler_internal {

using nlohmann::json;

// kube-scheduler's reason strings (the filter plugins' and VolumeBinding's).
inline constexpr char kReasonUnschedulable[] = "node(s) were unschedulable";
inline constexpr char kReasonNodeAffinity[] = "node(s) didn't match Pod's node affinity/selector";
inline constexpr char kReasonMaxVolumeCount[] = "node(s) exceed max volume count";
inline constexpr char kReasonBindConflict[] = "node(s) didn't find available persistent volumes to bind";
inline constexpr char kReasonNodeConflict[] = "node(s) had volume node affinity conflict";
inline constexpr char kReasonNotEnoughSpace[] = "node(s) did not have enough free storage";
inline constexpr char kReasonPvNotExist[] = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)";
inline constexpr char kUnboundImmediate[] = "pod has unbound immediate PersistentVolumeClaims";
inline constexpr char kNoNodes[] = "no nodes available to schedule pods";

inline constexpr char kNoProvisioner[] = "kubernetes.io/no-provisioner";

// A queue key that is no pod: "look at every pending pod again". Bursts of
// cluster changes (thousands of PV updates) collapse into one such key.
inline constexpr char kRequeueAll[] = "\x01requeue-all";
// The value of the scheduler's pending-pods index (Scheduler::
// pending_index_) under which every pod waiting for it is filed; each is
// also filed under every claim it uses ("ns/claim"). A change that may make
// room finds exactly the pods to try again, and none when none wait,
// instead of scanning every pod (claims change several times each on their
// way to Bound).
inline constexpr char kAnyPending[] = "*";

int64_t ResourceVersion(const json& o);
std::optional<int64_t> Bytes(const json& q);
// The "storage" quantity of a claim's requests or a volume's capacity, in
// bytes (0 when absent).
int64_t StorageOf(const api::types::ResourceList& resources);
bool Terminal(const json& pod);
bool Terminal(const api::types::Pod& pod);
json PodScheduledCondition(const json& pod);
std::map<std::string, json> ByName(std::vector<json> objects);

// Defined with the filters (scheduler_filters.cc); the scores use the typed
// VolumeFitsNode and CapacityReaches.
// A PV's required nodeAffinity against a node (no affinity: any node).
bool VolumeFitsNode(const json& pv, const std::map<std::string, std::string>& labels, const std::string& node_name);
bool VolumeFitsNode(const api::types::PersistentVolume& pv, const std::map<std::string, std::string>& labels,
                    const std::string& node_name);
// Does a CSIStorageCapacity apply to a node? Only label selection is
// supported, and an object without nodeTopology applies nowhere (upstream).
bool CapacityReaches(const json& capacity, const std::map<std::string, std::string>& labels);
bool CapacityReaches(const api::types::CSIStorageCapacity& capacity, const std::map<std::string, std::string>& labels);
bool PodFitsLabels(const json& pod, const std::map<std::string, std::string>& labels, const std::string& node_name);

// Defined with the binding (scheduler_binding.cc).
// Reads the object fresh, applies `mutate` (false: nothing to do) and
// writes it back conditionally (a conflict comes back ABORTED). Returns the
// stored result, or nullopt when nothing was written.
absl::StatusOr<std::optional<json>> Mutate(apiserver::Registry& registry, const api::KindInfo& kind,
                                           const std::string& ns, const std::string& name, apiserver::Subresource sub,
                                           const std::function<bool(json&)>& mutate);

}  // namespace scheduler_internal

// The private types of one scheduling attempt (declared in scheduler.h).

struct Scheduler::NodeInfo {
  std::string name;
  nlohmann::json object;
  std::map<std::string, std::string> labels;
};

struct Scheduler::ClaimRef {
  enum class State {
    kBound,      // volumeName + bind-completed
    kDelayed,    // WaitForFirstConsumer, no volume yet: the scheduler's to place
    kBinding,    // WaitForFirstConsumer, sent to a node, the binder is finishing
    kImmediate,  // anything else unbound: the binder's, the pod waits
  };
  api::types::PersistentVolumeClaim claim;  // decoded once, at PreFilter
  State state = State::kImmediate;
  std::optional<api::types::PersistentVolume> pv;  // kBound: its volume, if it exists
  std::optional<api::types::StorageClass> storage_class;
  int64_t request = 0;
  std::string selected_node;
};

struct Scheduler::Snapshot {
  std::vector<NodeInfo> nodes;  // by name
  std::map<std::string, nlohmann::json> csinodes, classes, csidrivers;
  std::vector<nlohmann::json> capacities;
  // Available volumes and volumes pre-bound to the pod's claims, of the
  // classes of its WaitForFirstConsumer claims.
  std::vector<api::types::PersistentVolume> static_candidates;
  // The pod's volumes per driver (volume handle, or "claim:ns/name" for a
  // claim without a volume yet).
  std::map<std::string, std::set<std::string>> new_volumes;
  // The same for the pods already on each node, for nodes whose CSINode
  // limits one of those drivers.
  std::map<std::string, std::map<std::string, std::set<std::string>>> used;
  // Claims sent to a node that the informers do not count in full yet, by
  // claim uid (Scheduler::Placement, as of this attempt).
  struct InFlight {
    std::string node, storage_class, driver;
    int64_t bytes = 0;
    bool provisioned = false;    // its PV is in the cache: counted as a volume
    int64_t volume_version = 0;  // the PV's resourceVersion when first seen
  };
  std::map<std::string, InFlight> in_flight;
  // Per entry of `capacities`: the bytes of placements it does not reflect
  // yet, to subtract from what it offers.
  std::vector<int64_t> capacity_in_flight;
};

struct Scheduler::NodeFit {
  std::string node;
  std::vector<std::string> reasons;                                              // empty: the pod fits
  std::vector<std::pair<size_t, api::types::PersistentVolume>> static_bindings;  // claim index → PV to pre-bind
  std::vector<size_t> provisions;                                                // claim indexes to provision here
};

}  // namespace berth::controllers

#endif  // BERTH_CONTROLLERS_SCHEDULER_INTERNAL_H_
