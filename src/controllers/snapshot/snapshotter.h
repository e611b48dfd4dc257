// Volume snapshots (seed 002, snapshot.storage.k8s.io/v1) as
// kubernetes-csi/external-snapshotter does them, in process, in two parts
// that split the work the way upstream's two binaries do:
//
//   SnapshotController  (upstream's snapshot-controller; one per cluster)
//     VolumeSnapshot ↔ VolumeSnapshotContent binding, driver-agnostic: it
//     never talks CSI. Dynamic snapshots (spec.source.persistentVolumeClaimName):
//     the class (spec.volumeSnapshotClassName, else the one class annotated
//     snapshot.storage.kubernetes.io/is-default-class: "true" for the driver
//     of the claim's volume, written back into the snapshot's spec) → the
//     claim must be Bound → finalizer pvc-as-source-protection on the claim →
//     content snapcontent-<snapshot uid> (spec.source.volumeHandle, driver and
//     deletionPolicy from the class, volumeSnapshotRef, class name, the
//     snapshotter secret as deletion-secret annotations) → snapshot status
//     (boundVolumeSnapshotContentName, then creationTime, restoreSize,
//     readyToUse and error copied from the content's status).
//     Pre-provisioned snapshots (spec.source.volumeSnapshotContentName) bind to
//     a content whose volumeSnapshotRef names them (its uid is filled in); a
//     dangling or mismatched pair is a status.error and a Warning event.
//     Finalizers: volumesnapshot-as-source-protection on every snapshot,
//     volumesnapshot-bound-protection while it is bound to a content with
//     deletionPolicy Delete, volumesnapshotcontent-bound-protection on bound
//     contents, pvc-as-source-protection on a claim while a snapshot of it is
//     being cut. Deletion: a snapshot used as the dataSource of a still
//     Pending claim waits; otherwise its content is marked
//     volumesnapshot-being-deleted and, with deletionPolicy Delete, deleted;
//     the snapshot goes once the content is gone (Retain: at once, the
//     content stays).
//
//   Snapshotter  (upstream's csi-snapshotter sidecar; one per CSI driver)
//     Contents of its driver → CSI. Dynamic contents: CreateSnapshot named
//     snapshot-<snapshot uid> (deterministic, so repeating it after a crash
//     or a lost answer never makes a second snapshot) with the class
//     parameters minus the reserved csi.storage.k8s.io/* keys and the
//     snapshotter secrets; it is repeated (idempotent) until the driver says
//     ready_to_use, polling with growing delays. While a call's outcome is
//     unknown the content carries volumesnapshot-being-created and is not
//     deleted. Pre-provisioned contents (spec.source.snapshotHandle) get
//     their status from ListSnapshots(snapshot_id). Failures become
//     status.error + a Warning event and are retried with backoff; a final
//     gRPC code also clears volumesnapshot-being-created. A deleted content
//     with deletionPolicy Delete gets DeleteSnapshot before its finalizer
//     comes off. Calls go through a DriverMonitor: a content waiting for its
//     driver is parked, not backed off.
//
// Every step is re-derived from the stored objects (names are deterministic,
// markers are annotations and finalizers), so a restart between any two
// steps converges. Secrets are read from Secret objects and sent in the
// request only: they are never logged nor written to objects or events.
//
//   SnapshotController controller(registry, {snapshots, contents, classes, claims}, {});
//   Snapshotter snapshotter(registry, directory, contents, classes, {.driver = "x.csi.io"});
//   controller.RegisterHandlers();
//   snapshotter.RegisterHandlers();
//   ... start and sync the informers ...
//   controller.Start();
//   snapshotter.Start();
//
// Thread-safety: both classes are thread-safe; RegisterHandlers before the
// informers start, Start/Stop from one thread.
#pragma once

#include <array>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "api/types/core.h"
#include "api/types/snapshot.h"
#include "apiserver/registry.h"
#include "client/driver_monitor.h"
#include "client/drivers.h"
#include "client/events.h"
#include "client/informer.h"
#include "client/workqueue.h"
#include "common/clock.h"
#include "csi/v1/csi.grpc.pb.h"

namespace berth::controllers {

using namespace ::berth::client;  // the controllers' own client library

// Finalizers and annotations, as external-snapshotter names them.
inline constexpr char kSnapshotAsSourceFinalizer[] =
    "snapshot.storage.kubernetes.io/volumesnapshot-as-source-protection";
inline constexpr char kSnapshotBoundFinalizer[] = "snapshot.storage.kubernetes.io/volumesnapshot-bound-protection";
inline constexpr char kContentBoundFinalizer[] =
    "snapshot.storage.kubernetes.io/volumesnapshotcontent-bound-protection";
inline constexpr char kPvcAsSourceFinalizer[] = "snapshot.storage.kubernetes.io/pvc-as-source-protection";
inline constexpr char kAnnDefaultSnapshotClass[] = "snapshot.storage.kubernetes.io/is-default-class";
inline constexpr char kAnnSnapshotBeingCreated[] = "snapshot.storage.kubernetes.io/volumesnapshot-being-created";
inline constexpr char kAnnSnapshotBeingDeleted[] = "snapshot.storage.kubernetes.io/volumesnapshot-being-deleted";
inline constexpr char kAnnDeletionSecretName[] = "snapshot.storage.kubernetes.io/deletion-secret-name";
inline constexpr char kAnnDeletionSecretNamespace[] = "snapshot.storage.kubernetes.io/deletion-secret-namespace";
// berth's own: the node whose driver endpoint holds the source volume (a
// node-local driver must cut and delete the snapshot there).
inline constexpr char kAnnSnapshotNode[] = "snapshot.berth.io/node";

struct SnapshotInformers {
  Informer& snapshots;  // snapshot.storage.k8s.io volumesnapshots
  Informer& contents;   // snapshot.storage.k8s.io volumesnapshotcontents
  Informer& classes;    // snapshot.storage.k8s.io volumesnapshotclasses
  Informer& claims;     // persistentvolumeclaims
};

class SnapshotController {
 public:
  struct Options {
    int workers = 2;
    // How soon a deleted snapshot that a Pending claim restores from is
    // looked at again (besides the claim's own updates).
    absl::Duration restore_wait = absl::Seconds(5);
  };
  SnapshotController(apiserver::Registry& registry, SnapshotInformers informers, Options options);
  ~SnapshotController();  // Stop()

  void RegisterHandlers();
  void Start();
  void Stop();

  // One reconcile (public for tests): a snapshot ("ns/name"), a content
  // ("name"), a source claim's pvc-as-source-protection ("ns/name"). Errors
  // are retried by the work queue; those users can act on are also in the
  // object's status.error and an event.
  absl::Status SyncSnapshot(const std::string& key);
  absl::Status SyncContent(const std::string& name);
  absl::Status SyncClaim(const std::string& key);

 private:
  using Snapshot = api::types::VolumeSnapshot;
  using Content = api::types::VolumeSnapshotContent;

  absl::Status ProcessDeletion(const Snapshot& snapshot);
  // The bound content for `snapshot` (binding a pre-provisioned one),
  // created for a dynamic one that has none yet. Errors users can act on
  // are recorded on the snapshot before they are returned.
  absl::StatusOr<Content> BoundContent(const Snapshot& snapshot);
  absl::StatusOr<Content> CreateContent(const Snapshot& snapshot);
  // The class of a dynamic snapshot, defaulting (and recording) it.
  absl::StatusOr<api::types::VolumeSnapshotClass> SnapshotClass(const Snapshot& snapshot, const std::string& driver);
  absl::Status EnsureFinalizers(const Snapshot& snapshot, const Content& content);
  absl::Status UpdateStatus(const Snapshot& snapshot, const Content& content);
  // Records status.error (and readyToUse false) plus a Warning event when
  // the message is new; returns FAILED_PRECONDITION with the message.
  absl::Status Fail(const Snapshot& snapshot, const std::string& reason, const std::string& message);
  // A content by name: the cache, else the store (the cache may lag a
  // write); nullopt when neither has it.
  absl::StatusOr<std::optional<Content>> GetContent(const std::string& name);
  bool RestoreInProgress(const Snapshot& snapshot) const;
  bool ClaimInUse(const api::types::PersistentVolumeClaim& claim) const;
  // Serializes, per source claim, adding pvc-as-source-protection for a
  // snapshot about to be cut with deciding to remove it: otherwise a claim
  // found unused could lose the finalizer just after a new snapshot relied
  // on it being there.
  absl::Mutex& ClaimLock(const std::string& ns, const std::string& name);

  apiserver::Registry& registry_;
  SnapshotInformers informers_;
  std::array<absl::Mutex, 32> claim_locks_;
  const Options options_;
  EventRecorder events_;
  WorkQueue snapshot_queue_;
  WorkQueue content_queue_;
  WorkQueue claim_queue_;
  std::vector<std::thread> workers_;
};

class Snapshotter {
 public:
  struct Options {
    std::string driver;  // the CSI driver name (VolumeSnapshotClass driver)
    int workers = 2;
    // Each CSI call's deadline; zero: the call layer's default for the call
    // (csi::DefaultTimeout).
    absl::Duration rpc_timeout = absl::ZeroDuration();
    // Not-ready snapshots are asked again after poll_initial, doubling up to
    // poll_max.
    absl::Duration poll_initial = absl::Seconds(1);
    absl::Duration poll_max = absl::Minutes(1);
    DriverMonitor* monitor = nullptr;  // null: one of our own
    // A failed content is retried after retry_start, doubling up to
    // retry_max (csi-snapshotter's --retry-interval-start/-max).
    absl::Duration retry_start = absl::Seconds(1);
    absl::Duration retry_max = absl::Minutes(5);
    Clock* clock = nullptr;  // the retries' and polls' clock; null: RealClock()
  };
  Snapshotter(apiserver::Registry& registry, DriverDirectory& drivers, Informer& contents, Informer& classes,
              Options options);
  ~Snapshotter();  // Stop()

  void RegisterHandlers();
  void Start();
  void Stop();

  // One reconcile of a content (public for tests).
  absl::Status SyncContent(const std::string& name);

 private:
  using Content = api::types::VolumeSnapshotContent;

  absl::Status CreateSnapshot(const Content& content);
  absl::Status CheckPreprovisioned(const Content& content);
  absl::Status DeleteContent(const Content& content);
  // Writes the driver's answer into the content's status.
  absl::Status RecordSnapshot(const Content& content, const ::csi::v1::Snapshot& snapshot);
  // status.error + Warning event (when new); returns `st`.
  absl::Status Fail(const Content& content, const std::string& reason, const std::string& message, absl::Status st);
  absl::StatusOr<std::map<std::string, std::string>> Secrets(const std::string& ns, const std::string& name);
  // The node whose endpoint serves `content` ("" : the cluster-wide one).
  std::string CallNode(const Content& content) const;
  // One call to the driver through the DriverMonitor; a content waiting for
  // the driver is parked.
  absl::Status Call(const Content& content, const std::function<absl::Status(const csi::DriverClient&)>& fn);
  absl::StatusOr<bool> CanListSnapshots(const Content& content);
  void SchedulePoll(const std::string& name) ABSL_LOCKS_EXCLUDED(mu_);
  void ResetPoll(const std::string& name) ABSL_LOCKS_EXCLUDED(mu_);

  apiserver::Registry& registry_;
  DriverDirectory& drivers_;
  Informer& contents_;
  Informer& classes_;
  const Options options_;
  std::unique_ptr<DriverMonitor> own_monitor_;
  DriverMonitor& monitor_;
  EventRecorder events_;
  WorkQueue queue_;
  std::vector<std::thread> workers_;

  absl::Mutex mu_;
  std::map<std::string, int> polls_ ABSL_GUARDED_BY(mu_);  // content → polls so far
  std::optional<bool> can_list_ ABSL_GUARDED_BY(mu_);
};

}  // namespace berth::controllers
