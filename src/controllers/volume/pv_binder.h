// The PV binder (kube-controller-manager's persistentvolume controller, seed
// 003): binds claims to volumes and keeps both sides' phases right.
//
// Claims: a claim naming a volume (spec.volumeName) that nobody claims is
// bound to it only if it fits (CheckVolumeSatisfyClaim, and its node
// affinity admits the node the claim's consumer is on); otherwise it stays
// Pending with a VolumeMismatch event. An unbound claim gets the smallest Available volume that fits
// (FindBestMatch: class, access modes, volume mode, size, label selector,
// the selected node for WaitForFirstConsumer), or — when none fits and its
// class has a provisioner — the volume.kubernetes.io/storage-provisioner
// annotation that hands it to dynamic provisioning. WaitForFirstConsumer
// claims wait for volume.kubernetes.io/selected-node. Binding writes the
// volume side first (claimRef), then the claim (volumeName,
// pv.kubernetes.io/bind-completed, bound-by-controller), then both
// statuses; every step is idempotent, so a crash between any two steps is
// finished by the next sync. A bound claim whose volume disappeared is Lost.
//
// Volumes: no claimRef → Available; claim gone → Released (reclaim Retain
// keeps it; Delete is left to the provisioner that made it; Recycle is not
// supported → Failed); bound to a claim that bound elsewhere → unbound if we
// bound it.
//
// Protection: claims and volumes get kubernetes.io/pvc-protection and
// kubernetes.io/pv-protection; a deleted claim keeps its finalizer while a
// pod that is not finished uses it, a deleted volume while it is Bound.
//
// Thread-safety: thread-safe; Start/Stop from one thread.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "api/types/core.h"
#include "apiserver/registry.h"
#include "client/events.h"
#include "client/informer.h"
#include "client/workqueue.h"

namespace berth::controllers {

using namespace ::berth::client;  // the controllers' own client library

inline constexpr char kAnnBindCompleted[] = "pv.kubernetes.io/bind-completed";
inline constexpr char kAnnBoundByController[] = "pv.kubernetes.io/bound-by-controller";
inline constexpr char kAnnSelectedNode[] = "volume.kubernetes.io/selected-node";
inline constexpr char kAnnStorageProvisioner[] = "volume.kubernetes.io/storage-provisioner";
inline constexpr char kAnnBetaStorageProvisioner[] = "volume.beta.kubernetes.io/storage-provisioner";
inline constexpr char kAnnProvisionedBy[] = "pv.kubernetes.io/provisioned-by";
// The provisioner's leak protection on a claim while CreateVolume is in
// flight, with the node its driver was asked on. Once the provisioned PV
// exists (its claimRef holds the claim's uid, so the volume cannot leak) the
// binder drops both in the write that binds the claim; a claim deleted first
// has them dropped by the provisioner.
inline constexpr char kProvisioningFinalizer[] = "volume.berth.io/provisioning";
inline constexpr char kAnnProvisioningNode[] = "volume.berth.io/provisioning-node";
inline constexpr char kPvcProtection[] = "kubernetes.io/pvc-protection";
inline constexpr char kPvProtection[] = "kubernetes.io/pv-protection";

// Whether a volume's change is only its phase becoming Bound from Pending or
// Available (spec and finalizers as they were, not being deleted): the binder's own status write in
// Bind, whose claim write follows (queuing the claim); Bind queues the volume
// itself when the claim does not end up naming it. Such a change queues
// neither the volume nor its claim; any other change, and every resync (the
// same object twice), does.
bool VolumeChangeIsOnlyItsBinding(const nlohmann::json& before, const nlohmann::json& after);

// The informers a binder reads (shared with other controllers).
struct BinderInformers {
  Informer& claims;
  Informer& volumes;
  Informer& classes;
  Informer& pods;
  Informer& nodes;
};

class PvBinder {
 public:
  struct Options {
    int workers = 2;
    // Whether a provisioner named so runs in this process and has started
    // (berth's own, per driver). A claim handed to one gets no
    // ExternalProvisioning event: that event asks the user to check that an
    // external provisioner is running, and this one is, and records its own
    // (Provisioning, ProvisioningFailed, ProvisioningSucceeded). Unset:
    // every provisioner is external.
    std::function<bool(const std::string& provisioner)> provisioner_runs_here = nullptr;
    // Hands claim `key` (of `uid`) to the provisioner named so when it runs
    // in this process, without the hand-over write: that provisioner writes
    // the annotations with its finalizer, before it asks its driver for
    // anything (Provisioner::TakeOver), so every claim it provisions is
    // written once fewer. Returns false when no provisioner here takes it;
    // then the annotations are written. Unset: always written.
    std::function<bool(const std::string& provisioner, const std::string& key, const std::string& uid)> hand_over =
        nullptr;
  };
  PvBinder(apiserver::Registry& registry, BinderInformers informers, Options options);
  ~PvBinder();

  // Registers handlers (call before the informers start) and starts workers.
  void RegisterHandlers();
  void Start();
  void Stop();

  // One reconcile of a claim ("ns/name") or a volume ("name"); public for tests.
  absl::Status SyncClaim(const std::string& key);
  absl::Status SyncVolume(const std::string& name);

  // The best Available volume for `claim` among `volumes`, or nullptr.
  // Exposed for tests and the scheduler; `node_labels` is the selected
  // node's labels (or null).
  static const api::types::PersistentVolume* FindBestMatch(const api::types::PersistentVolumeClaim& claim,
                                                           const std::vector<api::types::PersistentVolume>& volumes,
                                                           const std::map<std::string, std::string>* node_labels);
  // The same over JSON objects (those that do not decode are skipped).
  static const nlohmann::json* FindBestMatch(const nlohmann::json& claim, const std::vector<nlohmann::json>& volumes,
                                             const nlohmann::json* node_labels);
  // Whether `volume` can serve `claim` (kube-controller-manager's
  // checkVolumeSatisfyClaim): not being deleted, large enough, same class,
  // volume mode and every access mode. FAILED_PRECONDITION says why, in
  // upstream's words.
  static absl::Status CheckVolumeSatisfyClaim(const api::types::PersistentVolume& volume,
                                              const api::types::PersistentVolumeClaim& claim);
  static absl::Status CheckVolumeSatisfyClaim(const nlohmann::json& volume, const nlohmann::json& claim);

 private:
  using PersistentVolume = api::types::PersistentVolume;
  using PersistentVolumeClaim = api::types::PersistentVolumeClaim;

  // Syncs take the object decoded once at the top of SyncClaim/SyncVolume.
  absl::Status SyncUnboundClaim(const PersistentVolumeClaim& claim);
  absl::Status SyncBoundClaim(const PersistentVolumeClaim& claim);
  absl::Status Bind(const PersistentVolumeClaim& claim, const PersistentVolume& volume);
  absl::Status ReleaseOrUnbind(const PersistentVolume& volume);
  absl::Status ProtectClaim(const PersistentVolumeClaim& claim);
  absl::Status ProtectVolume(const PersistentVolume& volume);
  absl::Status SetClaimPhase(const PersistentVolumeClaim& claim, const std::string& phase,
                             const PersistentVolume* volume);
  absl::Status SetVolumePhase(const PersistentVolume& volume, const std::string& phase,
                              const std::string& message = "");
  bool ClaimInUse(const PersistentVolumeClaim& claim) const;
  // The node a consumer of `claim` is on or chosen for: its selected-node,
  // else the node of a scheduled pod using it ("" if none).
  std::string ConsumerNode(const PersistentVolumeClaim& claim) const;
  // A node's labels (kubernetes.io/hostname defaulting to its name).
  std::map<std::string, std::string> NodeLabelsOf(const std::string& node) const;
  // The volumes that decode (one that does not is logged and skipped).
  static std::vector<PersistentVolume> DecodeAll(const std::vector<std::shared_ptr<const nlohmann::json>>& volumes);

  apiserver::Registry& registry_;
  BinderInformers informers_;
  const Options options_;
  EventRecorder events_;
  WorkQueue claim_queue_;
  WorkQueue volume_queue_;
  std::vector<std::thread> workers_;
};

}  // namespace berth::controllers
