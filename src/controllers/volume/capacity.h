// Storage capacity tracking for one CSI driver (external-provisioner's
// capacity controller, in process): the driver's GetCapacity answer for
// every (topology segment × StorageClass) pair, published as one
// CSIStorageCapacity object each, so the scheduler can tell which nodes
// have room for a WaitForFirstConsumer claim.
//
//   CapacityTracker tracker(registry, directory,
//                           {.classes = classes, .nodes = nodes, .csinodes = csinodes, .capacities = capacities},
//                           {.driver = "local.csi.berth.io"});
//   tracker.RegisterHandlers();  // before the informers start
//   ... start the informers ...
//   tracker.Start();
//   ... after CreateVolume/DeleteVolume on node-a: tracker.RefreshNode("node-a");
//
// What is tracked:
//   - segments: the distinct topology segments of the nodes where the driver
//     runs: a CSINode entry for the driver names the topology keys, the
//     Node's labels give the values. A node missing one of those labels (its
//     update has not arrived yet) or without a Node object is skipped; a
//     driver without topology keys has one segment, {} (every node).
//   - classes: StorageClasses whose provisioner is the driver. Unlike
//     external-provisioner (whose --capacity-for-immediate-binding defaults
//     to false), Immediate classes are tracked too by default: berth picks a
//     node for Immediate claims of node-local storage by free space
//     (berth.io/node-weighting, seed 001), which needs the numbers.
//     `Options::immediate_binding = false` gives upstream's behaviour.
//   - nothing at all when the driver does not report the GET_CAPACITY
//     controller capability (objects of ours that exist are then deleted).
//
// Each object: generateName "csisc-" in `Options::ns`, labels
// csi.storage.k8s.io/drivername = driver and csi.storage.k8s.io/managed-by =
// `Options::managed_by`, nodeTopology.matchLabels = the segment,
// storageClassName, capacity = available_capacity and maximumVolumeSize =
// maximum_volume_size when the driver sets it (both canonical binary
// quantities, "100Gi"), ownerReferences = `Options::owner` when set.
// Objects with our labels in our namespace are ours: at start they are
// matched to (segment, class) by nodeTopology + storageClassName and reused,
// so a restart does not duplicate them; duplicates and objects whose segment
// or class is gone are deleted. An object is written only when a value
// changed.
//
// The GetCapacity request: accessible_topology = the segment (none for {}),
// parameters = the class parameters without the reserved
// csi.storage.k8s.io/* keys (as CreateVolume gets them), one mount
// capability with the class's csi.storage.k8s.io/fstype and access mode
// SINGLE_NODE_WRITER. It goes to the driver endpoint of a node in the
// segment (berth-csi is node-local: each node answers for its own storage),
// falling back to the next node of the segment while endpoints are
// unavailable. A failed call is logged and recorded as a Warning event
// (GetCapacityFailed) on the object, or on the class when there is none
// yet; the object keeps its previous values (a transient error must not
// make the scheduler think the storage is full) and the call is retried
// with backoff.
//
// Refresh: every `Options::poll_interval` (--capacity-poll-interval,
// default 1m), at once when classes, Nodes, CSINodes or our objects change,
// and on Refresh()/RefreshNode() (the provisioner after CreateVolume and
// DeleteVolume).
//
// Thread-safety: thread-safe; RegisterHandlers before the informers start,
// Start/Stop from one thread, a stopped tracker is not restarted.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "api/types/storage.h"
#include "apiserver/registry.h"
#include "client/drivers.h"
#include "client/events.h"
#include "client/informer.h"
#include "client/workqueue.h"
#include "common/clock.h"
#include "csi/v1/csi.grpc.pb.h"
#include "nlohmann/json.hpp"

namespace berth::controllers {

using namespace ::berth::client;  // the controllers' own client library

inline constexpr char kCapacityDriverLabel[] = "csi.storage.k8s.io/drivername";
inline constexpr char kCapacityManagedByLabel[] = "csi.storage.k8s.io/managed-by";

// A topology segment: label key → value.
using TopologySegment = std::map<std::string, std::string>;

struct CapacityInformers {
  Informer& classes;     // storageclasses
  Informer& nodes;       // nodes
  Informer& csinodes;    // csinodes
  Informer& capacities;  // csistoragecapacities (all namespaces)
};

class CapacityTracker {
 public:
  struct Options {
    std::string driver = "";  // the CSI driver name (StorageClass provisioner)
    // Where the CSIStorageCapacity objects live.
    std::string ns = "kube-system";
    // The csi.storage.k8s.io/managed-by value: which objects are ours.
    std::string managed_by = "berth-capacity-tracker";
    absl::Duration poll_interval = absl::Minutes(1);
    // Each CSI call's deadline; zero: the call layer's default for the call
    // (csi::DefaultTimeout).
    absl::Duration rpc_timeout = absl::ZeroDuration();
    // Track Immediate classes too (see the file comment).
    bool immediate_binding = true;
    // An ownerReference ({apiVersion, kind, name, uid, controller}) put on
    // every object, e.g. the CSIDriver's, so they go with it; null: none.
    nlohmann::json owner = nullptr;
    int workers = 2;
    // The clock of the poll interval and of the retry backoff (null:
    // RealClock()).
    Clock* clock = nullptr;
  };

  CapacityTracker(apiserver::Registry& registry, DriverDirectory& drivers, CapacityInformers informers,
                  Options options);
  ~CapacityTracker();  // Stop()

  void RegisterHandlers();
  void Start();
  void Stop();

  // Asks the driver again for every tracked (segment, class), now, or
  // within `within`: the requests of a burst (one per volume the
  // provisioner creates) then share one GetCapacity per object, at the
  // earliest time asked for.
  void Refresh(absl::Duration within = absl::ZeroDuration());
  // The same for the segments `node` belongs to.
  void RefreshNode(const std::string& node, absl::Duration within = absl::ZeroDuration());

  // The GetCapacity request for `storage_class` in `segment` (public for
  // tests).
  static ::csi::v1::GetCapacityRequest BuildRequest(const api::types::StorageClass& storage_class,
                                                    const TopologySegment& segment);
  // The same for a class as JSON (one that does not decode: as a class
  // without parameters).
  static ::csi::v1::GetCapacityRequest BuildRequest(const nlohmann::json& storage_class,
                                                    const TopologySegment& segment);

 private:
  struct Item {
    std::string storage_class;
    TopologySegment segment;
  };

  // Work keys: kTopologyKey recomputes what should exist and deletes the
  // rest; kPollKey is the periodic refresh; anything else is an item key
  // "<class>|<k>=<v>,..." (one object).
  absl::Status Sync(const std::string& key);
  absl::Status SyncTopology();
  absl::Status SyncItem(const std::string& key);

  bool Tracked(const api::types::StorageClass& storage_class) const;
  bool Ours(const api::types::CSIStorageCapacity& capacity) const;
  // The item key an object of ours stands for (nullopt: a shape we never
  // write).
  static std::optional<std::string> KeyOf(const api::types::CSIStorageCapacity& capacity);
  // Segment → the nodes in it, from the CSINode and Node caches.
  absl::StatusOr<std::map<TopologySegment, std::vector<std::string>>> Segments() const;
  // Whether the driver reports GET_CAPACITY (cached for a poll interval;
  // a failed check falls back to the last answer).
  absl::StatusOr<bool> SupportsGetCapacity() ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<::csi::v1::GetCapacityResponse> GetCapacity(const ::csi::v1::GetCapacityRequest& request,
                                                             const std::vector<std::string>& nodes);
  // Our objects in the cache, not being deleted.
  std::vector<api::types::CSIStorageCapacity> OurObjects() const;
  // Our live objects for `key`, the one to keep first: the cache's, plus
  // the last one we wrote while the cache has not caught up with it.
  std::vector<api::types::CSIStorageCapacity> ObjectsFor(const std::string& key) ABSL_LOCKS_EXCLUDED(mu_);
  // `capacity` and `maximum` (nullopt: unset) in bytes.
  absl::Status CreateObject(const std::string& key, const Item& item, int64_t capacity, std::optional<int64_t> maximum);
  // Updates `existing` when a value differs (or our owner is missing).
  absl::Status UpdateObject(const std::string& key, const Item& item, const api::types::CSIStorageCapacity& existing,
                            int64_t capacity, std::optional<int64_t> maximum);
  absl::Status DeleteObject(const api::types::CSIStorageCapacity& capacity, const std::string& why);
  void Remember(const std::string& key, const api::types::CSIStorageCapacity& written) ABSL_LOCKS_EXCLUDED(mu_);
  void ForgetName(const std::string& name) ABSL_LOCKS_EXCLUDED(mu_);
  void ForgetNameLocked(const std::string& name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool Desired(const std::string& key) const ABSL_LOCKS_EXCLUDED(mu_);

  // Immutable after construction.
  apiserver::Registry& registry_;
  DriverDirectory& drivers_;
  CapacityInformers informers_;
  const Options options_;
  const std::optional<api::types::OwnerReference> owner_;  // options_.owner
  EventRecorder events_;
  WorkQueue queue_;
  std::vector<std::thread> workers_;

  mutable absl::Mutex mu_;
  // What should exist: item key → item, and each segment's nodes.
  std::map<std::string, Item> desired_ ABSL_GUARDED_BY(mu_);
  std::map<TopologySegment, std::vector<std::string>> segments_ ABSL_GUARDED_BY(mu_);
  // The last object written per item key (and name → key), until the
  // capacities cache shows it; entries go when the object is deleted.
  std::map<std::string, api::types::CSIStorageCapacity> written_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> written_names_ ABSL_GUARDED_BY(mu_);
  std::optional<bool> get_capacity_ ABSL_GUARDED_BY(mu_);
};

}  // namespace berth::controllers
