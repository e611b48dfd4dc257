// Dynamic provisioning for one CSI driver (external-provisioner semantics,
// seeds 000 and 003), in process.
//
// Ownership is per driver, as upstream: a claim is this provisioner's when
// the binder handed it over (volume.kubernetes.io/storage-provisioner =
// our driver), or — the binder of this process — took it over in memory
// (TakeOver; our finalizer's write then carries those annotations); a PV
// is ours when pv.kubernetes.io/provisioned-by names our driver, or — a
// statically provisioned CSI volume — when it has no such annotation and
// spec.csi.driver is our driver. Nothing of another driver's is ever read
// for a decision or written, finalizers included. While our
// leak-protection finalizer is on a claim the binder does not hand it to
// another driver.
//
// WaitForFirstConsumer claims wait for the scheduler's
// volume.kubernetes.io/selected-node. Then:
//   1. the data source is validated (data_source.h) and a cloned claim gets
//      provisioner.storage.kubernetes.io/cloning-protection,
//   2. finalizer volume.berth.io/provisioning on the claim (leak protection),
//   3. CreateVolume: name pvc-<claim uid>, capacity range from the claim,
//      capabilities from accessModes/volumeMode and csi.storage.k8s.io/fstype,
//      class parameters without the reserved csi.storage.k8s.io/* keys,
//      provisioner secrets resolved from Secret objects, topology (requisite
//      from allowedTopologies or the CSINode segments of all nodes; the
//      selected node's segment first), content source from a VolumeSnapshot
//      or another claim,
//   4. the PV: pvc-<uid>, claimRef to the claim (the binder completes the
//      binding), nodeAffinity from accessible_topology, secrets refs,
//      pv.kubernetes.io/provisioned-by,
//   5. the finalizer comes off (in the binder's bind write).
// A claim whose dataSourceRef names a volume populator's kind (populator.h,
// e.g. a Backup) is filled by the injected VolumePopulator between 2 and 3,
// and created as a clone of what it filled; the PV only comes once the data
// is in.
// The finalizer carries the node the request went to
// (volume.berth.io/provisioning-node), so a retry after a crash asks the same
// node. A claim deleted while CreateVolume is in flight keeps its finalizer
// until the outcome is known: the provisioner repeats the (idempotent)
// CreateVolume and deletes what it returns; if the request cannot be rebuilt
// (its StorageClass is gone) the finalizer stays, with a warning event.
// Under WaitForFirstConsumer, selected-node is cleared so the scheduler
// picks again when the node is gone or not Ready (and no request is in
// flight), or when CreateVolume on its topology ended in a final error.
//
// Our PVs with reclaim policy Delete carry
// external-provisioner.volume.kubernetes.io/finalizer (provisioned ones from
// creation, static ones once Bound, as upstream): once Released (its claim
// gone, confirmed against the store), or — provisioned ones — deleted while
// not Bound, the storage is deleted (DeleteVolume on the volume's node; never
// while a VolumeAttachment still names the PV), then the PV object (with uid
// and resourceVersion preconditions), then the finalizer.
//
// Calls to the driver go through a DriverMonitor: while the driver is down
// (or not registered) a claim or volume waits for it without counting a
// failure, and resumes with all others the moment it is back.
//
// Thread-safety: thread-safe; Start/Stop from one thread.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "api/types/core.h"
#include "api/types/storage.h"
#include "apiserver/registry.h"
#include "client/driver_monitor.h"
#include "client/drivers.h"
#include "client/events.h"
#include "client/informer.h"
#include "client/workqueue.h"
#include "controllers/volume/populator.h"
#include "controllers/volume/pv_binder.h"  // kProvisioningFinalizer, kAnnProvisioningNode
#include "csi/v1/csi.grpc.pb.h"

namespace berth::controllers {

using namespace ::berth::client;  // the controllers' own client library

// On provisioned PVs with reclaim policy Delete: the storage is deleted
// before the PV object may go (external-provisioner's finalizer).
inline constexpr char kProvisionerFinalizer[] = "external-provisioner.volume.kubernetes.io/finalizer";

// On a claim used as the data source of a claim being provisioned, until
// no Pending claim clones it any more (external-provisioner's).
inline constexpr char kCloningProtectionFinalizer[] = "provisioner.storage.kubernetes.io/cloning-protection";

struct ProvisionerInformers {
  Informer& claims;
  Informer& volumes;
  Informer& classes;
  Informer& nodes;
  Informer& csinodes;
  // Optional: a deleted attachment lets its PV's storage be deleted at once
  // (without it, the volume's retry backoff does).
  Informer* attachments = nullptr;
};

class Provisioner {
 public:
  struct Options {
    std::string driver;  // the CSI driver name (StorageClass provisioner)
    int workers = 4;
    // Each CSI call's deadline; zero: the call layer's default for the call
    // (csi::DefaultTimeout).
    absl::Duration rpc_timeout = absl::ZeroDuration();
    // Shared with the other controllers (the manager's); null: one of our own.
    DriverMonitor* monitor = nullptr;
    // Fills claims whose dataSourceRef is its kind (populator.h); null:
    // such claims are refused as an unsupported data source. Not owned;
    // outlives the provisioner.
    VolumePopulator* populator = nullptr;
    // Called after the driver created or deleted a volume, with the node
    // whose driver was asked ("" for a controller without topology): the
    // manager has that node's CSIStorageCapacity asked again
    // (CapacityTracker::RefreshNode) instead of at the next poll. Null:
    // nothing. Runs on a provisioner worker; keep it quick.
    std::function<void(const std::string& node)> on_capacity_change = nullptr;
  };
  Provisioner(apiserver::Registry& registry, DriverDirectory& drivers, ProvisionerInformers informers, Options options);
  ~Provisioner();

  void RegisterHandlers();
  void Start();
  void Stop();

  // One reconcile (public for tests). While the driver is down these park
  // the key and return a NotAFailure status (see DriverMonitor).
  absl::Status SyncClaim(const std::string& key);
  absl::Status SyncVolume(const std::string& name);
  // Drops cloning-protection from a source claim no Pending claim clones.
  absl::Status SyncCloneSource(const std::string& key);
  // The binder of this process hands claim `key` (of `uid`) over without
  // writing the hand-over annotations (PvBinder::Options::hand_over): from
  // now on that claim is ours as if annotated, and our finalizer's write
  // carries the annotations, before the driver is asked for anything. Held
  // in memory only, until that write is seen or the claim goes: after a
  // restart the binder hands it over again. Queues the claim when new.
  void TakeOver(const std::string& key, const std::string& uid) ABSL_LOCKS_EXCLUDED(taken_mu_);
  // Claims taken over whose annotations are not written yet (tests).
  size_t TakenOverCount() const ABSL_LOCKS_EXCLUDED(taken_mu_);
  // Claims queued for SyncClaim so far (each a worker's wake-up).
  uint64_t claim_queue_adds() const { return claim_queue_.adds(); }
  // Volumes queued for SyncVolume so far.
  uint64_t volume_queue_adds() const { return volume_queue_.adds(); }

  // The CreateVolume request for `claim` of `storage_class` (public for
  // tests). `node` is the selected node ("" for none).
  absl::StatusOr<::csi::v1::CreateVolumeRequest> BuildRequest(const nlohmann::json& claim,
                                                              const nlohmann::json& storage_class,
                                                              const std::string& node);

 private:
  using Claim = api::types::PersistentVolumeClaim;
  using Class = api::types::StorageClass;
  using Volume = api::types::PersistentVolume;

  absl::StatusOr<::csi::v1::CreateVolumeRequest> BuildRequest(const Claim& claim, const Class& storage_class,
                                                              const std::string& node);
  // The claim's class when it exists and names our driver (else null),
  // shared with the other syncs of the class's informer object.
  absl::StatusOr<std::shared_ptr<const Class>> ClassOf(const Claim& claim) const;
  // A volume this provisioner made, or a static CSI volume of its driver
  // (read from the raw object).
  bool OwnsVolume(const nlohmann::json& pv) const;
  // Whether SyncVolume has anything to decide for `pv` (false: another
  // driver's, or ours provisioned and settled).
  bool VolumeNeedsSync(const nlohmann::json& pv) const;
  // The driver calls; a key waiting for the driver is parked on `queue`.
  absl::StatusOr<::csi::v1::CreateVolumeResponse> CreateVolume(const ::csi::v1::CreateVolumeRequest& request,
                                                               const std::string& node, WorkQueue& queue,
                                                               const std::string& key);
  absl::Status DeleteVolume(const std::string& handle, const std::string& node,
                            const google::protobuf::Map<std::string, std::string>& secrets, WorkQueue& queue,
                            const std::string& key);
  // DeleteVolume's secrets: the PV's deletion-secret annotations, else the
  // class's provisioner secret (as upstream).
  absl::StatusOr<google::protobuf::Map<std::string, std::string>> DeletionSecrets(const Volume& pv);
  // FAILED_PRECONDITION while a VolumeAttachment names the PV.
  absl::Status CheckNotAttached(const Volume& pv);
  absl::Status SyncClaimOnce(const std::string& key);
  // Whether `claim` (raw) is ours: handed over by the annotations, or taken
  // over (TakeOver) and not annotated by anyone.
  bool Mine(const nlohmann::json& claim) const ABSL_LOCKS_EXCLUDED(taken_mu_);
  // Forgets the claim taken over as `key`, if it is the one of `uid`.
  void ForgetTaken(const std::string& key, const std::string& uid) ABSL_LOCKS_EXCLUDED(taken_mu_);
  // `storage_class`: the claim's, when it exists and names our driver.
  absl::Status SyncDeletedClaim(const Claim& claim, const std::string& key,
                                const std::shared_ptr<const Class>& storage_class, bool pv_exists);
  absl::Status CreatePersistentVolume(const Claim& claim, const Class& storage_class,
                                      const ::csi::v1::CreateVolumeRequest& request,
                                      const ::csi::v1::CreateVolumeResponse& response);
  absl::Status SetFinalizer(const Claim& claim, bool present, const std::string& node = "");
  // Whether the populator fills `claim` (its dataSourceRef is the
  // populator's kind).
  bool Populated(const Claim& claim) const;
  PopulationRequest MakePopulationRequest(const Claim& claim, const Class& storage_class,
                                          const std::string& node) const;
  // Sets (`volume_id` non-empty) or removes kAnnPopulatedVolume.
  absl::Status RecordPopulatedVolume(const Claim& claim, const std::string& volume_id);
  // The populated volume goes (Release), then kAnnPopulatedVolume: once the
  // claim's own volume exists, or nothing was made of it. `storage_class`
  // null: the claim's class is gone.
  absl::Status ReleasePopulation(const Claim& claim, const Class* storage_class, const std::string& node);
  // The topology segment of `node` for our driver ({} if none): decoded
  // from its Node and CSINode once per version of the two (it was a decode
  // of both, per node, per claim).
  absl::StatusOr<std::map<std::string, std::string>> Segment(const std::string& node) const
      ABSL_LOCKS_EXCLUDED(segments_mu_);
  std::string NodeForClaim(const Claim& claim) const;
  // Removes volume.kubernetes.io/selected-node if it still names `node`.
  absl::Status ClearSelectedNode(const Claim& claim, const std::string& node);

  apiserver::Registry& registry_;
  DriverDirectory& drivers_;
  ProvisionerInformers informers_;
  const Options options_;
  std::unique_ptr<DriverMonitor> own_monitor_;  // when Options::monitor is null
  DriverMonitor& monitor_;
  EventRecorder events_;
  WorkQueue claim_queue_;
  WorkQueue volume_queue_;
  WorkQueue source_queue_;  // claims carrying cloning-protection
  std::vector<std::thread> workers_;
  struct KnownSegment {
    std::string node_version, csinode_version;  // resourceVersions decoded
    std::map<std::string, std::string> segment;
  };
  mutable absl::Mutex segments_mu_;
  mutable std::map<std::string, KnownSegment> segments_ ABSL_GUARDED_BY(segments_mu_);  // by node name
  mutable absl::Mutex taken_mu_;
  std::map<std::string, std::string> taken_ ABSL_GUARDED_BY(taken_mu_);  // TakeOver: key → uid
};

}  // namespace berth::controllers
