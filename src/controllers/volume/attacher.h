// Attaching volumes to nodes (seeds 000 and 003), as two controllers the way
// Kubernetes splits it:
//
// AttachDetachController (kube-controller-manager's attach-detach
// controller) compares, per node, the volumes its pods need (desired state:
// every PVC of a pod scheduled there and not terminated — finished, or
// being deleted with no container running, as Kubernetes' IsPodTerminated —
// through the bound PV to its CSI driver) with the VolumeAttachment objects
// for that node (actual
// state), and creates or deletes VolumeAttachments named
// csi-<sha256(volumeHandle + driver + node)> for drivers that require attach
// (CSIDriver attachRequired, true when there is no CSIDriver object). A
// volume the node still reports in status.volumesInUse is not detached until
// the node agent has unmounted it — never while the node is Ready; from a
// node whose Ready condition is not True, after max_wait_for_unmount (6 min,
// kcm's maxWaitForUnmountDuration); at once from a node with the
// node.kubernetes.io/out-of-service taint (non-graceful node shutdown); Node
// status.volumesAttached lists what is attached; pods get
// SuccessfulAttachVolume / FailedAttachVolume events. Nodes annotated
// volumes.kubernetes.io/keep-terminated-pod-volumes=true keep the volumes of
// finished pods attached.
//
// Attacher (external-attacher, one per driver) acts on the VolumeAttachments
// of its driver: finalizer external-attacher/<driver> on the attachment and
// on the PV, ControllerPublishVolume with the node ID from CSINode (kept in
// the attachment's csi.alpha.kubernetes.io/node-id annotation so detach works
// after the CSINode is gone), then status.attached + attachmentMetadata, or
// status.attachError {time, message} and a retry with backoff. A deleted
// attachment → ControllerUnpublishVolume → status.detachError on failure, or
// the finalizer comes off; the PV's finalizer comes off once no attachment
// of this driver refers to it. Drivers without PUBLISH_UNPUBLISH_VOLUME are
// marked attached without a call. Calls go through a DriverMonitor: while
// the driver is down an attachment waits for it (its attachError says so)
// without backing off, and resumes when it is back.
//
//   AttachDetachController ad(registry, {pods, nodes, volumes, claims, csidrivers, attachments}, {});
//   Attacher attacher(registry, directory, {attachments, volumes, csinodes}, {.driver = "x"});
//   ad.RegisterHandlers(); attacher.RegisterHandlers();  // before informers start
//   ad.Start(); attacher.Start();
//
// Thread-safety: thread-safe; Start/Stop from one thread.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "api/types/core.h"
#include "api/types/core_node.h"
#include "api/types/storage.h"
#include "apiserver/registry.h"
#include "client/driver_monitor.h"
#include "client/drivers.h"
#include "client/events.h"
#include "client/informer.h"
#include "client/volume_names.h"
#include "client/workqueue.h"
#include "common/clock.h"

namespace berth::controllers {

using namespace ::berth::client;  // the controllers' own client library

inline constexpr char kAnnKeepTerminatedPodVolumes[] = "volumes.kubernetes.io/keep-terminated-pod-volumes";
inline constexpr char kAnnAttachNodeId[] = "csi.alpha.kubernetes.io/node-id";

// external-attacher/<driver with characters other than [A-Za-z0-9-._] as '-'>.
std::string AttacherFinalizer(const std::string& driver);

struct AttachDetachInformers {
  Informer& pods;
  Informer& nodes;
  Informer& volumes;
  Informer& claims;
  Informer& csidrivers;
  Informer& attachments;
};

class AttachDetachController {
 public:
  struct Options {
    int workers = 2;
    // How long a volume the node still reports in use may stay attached
    // after no pod wants it (Kubernetes' maxWaitForUnmountDuration).
    absl::Duration max_wait_for_unmount = absl::Minutes(6);
    Clock* clock = nullptr;  // null: RealClock()
  };
  AttachDetachController(apiserver::Registry& registry, AttachDetachInformers informers, Options options);
  ~AttachDetachController();

  void RegisterHandlers();
  void Start();
  void Stop();

  // One reconcile of a node's attachments; public for tests.
  absl::Status SyncNode(const std::string& node);

 private:
  struct Wanted {
    std::string pv;
    std::string driver;
    std::string handle;
    std::vector<nlohmann::json> pods;  // the pods that need it (IdentityOf)
  };
  // Attachment name → what the node's pods need.
  absl::StatusOr<std::map<std::string, Wanted>> DesiredState(const api::types::Node& node) const;
  absl::StatusOr<bool> AttachRequired(const std::string& driver) const;
  // The PV an attachment names, from the cache (nullopt: none, or gone).
  absl::StatusOr<std::optional<api::types::PersistentVolume>> SourceVolume(
      const api::types::VolumeAttachment& attachment) const;
  void EnqueueAllNodes();
  absl::Status UpdateNodeVolumesAttached(const api::types::Node& node,
                                         const std::vector<api::types::VolumeAttachment>& attachments);
  void ReportToPods(const Wanted& wanted, const api::types::VolumeAttachment& attachment) ABSL_LOCKS_EXCLUDED(mu_);

  apiserver::Registry& registry_;
  AttachDetachInformers informers_;
  const Options options_;
  Clock& clock_;
  EventRecorder events_;
  WorkQueue queue_;
  std::vector<std::thread> workers_;

  absl::Mutex mu_;
  // Attachment name → when it stopped being wanted while the node still
  // had the volume in use.
  std::map<std::string, absl::Time> unwanted_since_ ABSL_GUARDED_BY(mu_);
  // (pod uid, attachment, outcome) already reported as a pod event.
  std::map<std::string, std::string> reported_ ABSL_GUARDED_BY(mu_);
};

struct AttacherInformers {
  Informer& attachments;
  Informer& volumes;
  Informer& csinodes;
};

class Attacher {
 public:
  struct Options {
    std::string driver;
    int workers = 4;
    // Each CSI call's deadline; zero: the call layer's default for the call
    // (csi::DefaultTimeout).
    absl::Duration rpc_timeout = absl::ZeroDuration();
    // Shared with the other controllers (the manager's); null: our own.
    DriverMonitor* monitor = nullptr;
    // A failed attachment is retried after retry_start, doubling up to
    // retry_max (external-attacher's --retry-interval-start/-max).
    absl::Duration retry_start = absl::Seconds(1);
    absl::Duration retry_max = absl::Minutes(5);
    Clock* clock = nullptr;  // the retries' clock; null: RealClock()
  };
  Attacher(apiserver::Registry& registry, DriverDirectory& drivers, AttacherInformers informers, Options options);
  ~Attacher();

  void RegisterHandlers();
  void Start();
  void Stop();

  // Public for tests.
  absl::Status SyncAttachment(const std::string& name);
  absl::Status SyncVolume(const std::string& name);

 private:
  absl::Status Attach(const api::types::VolumeAttachment& attachment);
  absl::Status Detach(const api::types::VolumeAttachment& attachment);
  // The node whose controller endpoint serves `pv` (node-local drivers: the
  // volume's node; else the attachment's node).
  std::string EndpointNode(const api::types::PersistentVolume& pv,
                           const api::types::VolumeAttachment& attachment) const;
  // The node's ID for our driver: from CSINode, else (or first, with
  // `annotation_first`) the one recorded on the attachment when it started.
  absl::StatusOr<std::string> NodeId(const api::types::VolumeAttachment& attachment, bool annotation_first) const;
  absl::StatusOr<google::protobuf::Map<std::string, std::string>> PublishSecrets(
      const api::types::PersistentVolume& pv);

  apiserver::Registry& registry_;
  DriverDirectory& drivers_;
  AttacherInformers informers_;
  const Options options_;
  std::unique_ptr<DriverMonitor> own_monitor_;
  DriverMonitor& monitor_;
  const std::string finalizer_;
  EventRecorder events_;
  WorkQueue attachment_queue_;
  WorkQueue volume_queue_;
  std::vector<std::thread> workers_;
};

}  // namespace berth::controllers
