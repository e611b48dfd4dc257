// The node agent's volume manager (kubelet's, seed 003): the volumes the
// pods bound to this node want, against what is staged and published here,
// made equal by a reconciler.
//
// Desired state: for every pod with spec.nodeName = this node that is not
// finished, its persistentVolumeClaim (and generic ephemeral) volumes whose
// claim is Bound to a CSI PersistentVolume. Actual state: what this agent
// staged and published, kept on disk beside the mounts (vol_data.json) so a
// restarted agent rebuilds it from the pod directories and the mount table.
//
// For each wanted volume the reconciler
//   (a) waits until the driver is registered on this node and, when the
//       driver requires attach (CSIDriver.attachRequired, or no CSIDriver
//       object), until its VolumeAttachment is attached (publish_context =
//       attachmentMetadata);
//   (b) lists it in the Node's status.volumesInUse, then NodeStageVolume to
//       <root>/plugins/kubernetes.io/csi/<driver>/<sha256(handle)>/globalmount
//       if the driver has STAGE_UNSTAGE;
//   (c) NodePublishVolume to <root>/pods/<uid>/volumes/kubernetes.io~csi/<pv>/mount
//       (block: <root>/pods/<uid>/volumeDevices/kubernetes.io~csi/<pv>);
//   (d) NodeExpandVolume when the claim waits for the node's part of a
//       resize, then records the new size in the claim's status;
// and for what is no longer wanted: NodeUnpublishVolume, then, once no pod
// here uses the volume, NodeUnstageVolume and volumesInUse. A pod is
// Running once all its volumes are published; failures become FailedMount
// events and the pod's Ready condition. Operations on one volume never
// overlap; failed ones back off per operation (kubelet's 500 ms doubling to
// 2 min 2 s, on the injected clock).
//
// Uncertain states (kubelet's rule): a NodeStage or NodePublish that ends in
// an error that is not final (csi::IsFinalError: a timeout, UNAVAILABLE, a
// driver restart, ...) may have mounted, or may still mount: the volume is
// kept as *uncertain* — listed in volumesInUse (so it is never detached and
// its claim's PV never released while in use), staged/published again while
// wanted, and unpublished/unstaged like a mounted one once not. A final error
// forgets the attempt. After a restart, records on disk without a mount come
// back uncertain.
//
// Deleting pods (graceful deletion): a pod with deletionTimestamp mounts
// nothing new; while `containers_may_run` says its containers may still run
// it keeps its volumes; then they are unpublished (and unstaged when unused),
// and only when nothing of the pod is mounted, certain or uncertain, and no
// operation for it runs does the agent delete the pod object (grace period
// 0, UID precondition), as kubelet's status manager does.
//
// Thread-safety: Start/Stop from one thread; the rest is thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "api/types/core.h"
#include "api/types/core_pod.h"
#include "apiserver/api.h"
#include "client/drivers.h"
#include "client/events.h"
#include "client/informer.h"
#include "common/backoff.h"
#include "common/clock.h"
#include "common/mountinfo.h"
#include "node/plugins/csi_plugins.h"
#include "node/status/node_status.h"

namespace berth::node {

class VolumeManager {
 public:
  // The reconciler's progress since Start(). Reconstruction (the actual
  // state rebuilt from disk) finishes before the first pass, so every pass
  // counted here decided on the reconstructed state. `operations` are the
  // volume operations (stage, publish, expand, unpublish, unstage) queued or
  // running: one that ends marks the state dirty, so another pass follows
  // it. A pass that ends with no operation queued or running found nothing
  // to do (beyond retries waiting for their backoff).
  struct ReconcileProgress {
    uint64_t passes = 0;
    size_t operations = 0;
  };
  struct Options {
    std::string node_name;
    std::string root;  // kubelet root: canonical, absolute
    // Each CSI call's deadline; zero: the call layer's default for the call
    // (csi::DefaultTimeout: 2 min for stage/publish/expand and their
    // reverse, 30 s for NodeGetVolumeStats).
    absl::Duration call_timeout = absl::ZeroDuration();
    // The reconciler works when something changes (an object, a plugin, an
    // operation ending, a retry falling due); this is its safety net.
    absl::Duration resync = absl::Seconds(10);
    // How soon work that waits on something with no event of its own is
    // looked at again: a driver that is unreachable, an API server that did
    // not take volumesInUse.
    absl::Duration poll = absl::Seconds(1);
    int workers = 4;
    // How often NodeGetVolumeStats is asked of every published volume
    // (kubelet's --volume-stats-agg-period); zero: never on its own.
    absl::Duration stats_period = absl::Minutes(1);
    // The mount table (tests substitute one).
    std::function<absl::StatusOr<std::vector<MountEntry>>()> mount_table = ReadMountTable;
    // Time for backoffs and resyncs (null: RealClock()).
    Clock* clock = nullptr;
    // Whether a pod's containers may still be running (kubelet's
    // CouldHaveRunningContainers). A deleting or finished pod keeps its
    // volumes while this is true; the pod worker calls Wake() when it turns
    // false. Null: no container runtime, nothing ever runs.
    std::function<bool(const std::string& pod_uid)> containers_may_run = nullptr;
    // A container runtime reports pod phases and conditions: the volume
    // manager then leaves pod status alone (see PodVolumesReady).
    bool runtime_owns_pod_status = false;
    // Called by the reconciler thread after every completed pass, never
    // under the manager's lock (the node agent publishes the progress for
    // berth up's /metrics). Keep it short: the next pass waits for it.
    std::function<void(const ReconcileProgress&)> on_pass = nullptr;
  };
  VolumeManager(apiserver::Api& registry, CsiPlugins& plugins, client::DriverDirectory& directory,
                NodeStatus& node_status, Options options);
  ~VolumeManager();  // Stop()

  // Rebuilds the actual state from disk, starts informers, reconciler and
  // workers.
  absl::Status Start();
  void Stop();
  // Asks for a reconcile pass soon.
  void Wake() ABSL_LOCKS_EXCLUDED(mu_);

  // What is staged (unique volume names) and published ("<pod uid>/<pv>").
  std::set<std::string> StagedVolumes() const ABSL_LOCKS_EXCLUDED(mu_);
  std::set<std::string> PublishedVolumes() const ABSL_LOCKS_EXCLUDED(mu_);
  // The same for the uncertain ones (may be mounted; see above).
  std::set<std::string> UncertainStagedVolumes() const ABSL_LOCKS_EXCLUDED(mu_);
  std::set<std::string> UncertainPublishedVolumes() const ABSL_LOCKS_EXCLUDED(mu_);

  // As of the last completed pass (passes) and now (operations).
  ReconcileProgress Progress() const ABSL_LOCKS_EXCLUDED(mu_);

  // Whether every volume of the pod that this manager mounts is published
  // (as of the last reconcile pass): its containers may start.
  bool PodVolumesReady(const std::string& pod_uid) const ABSL_LOCKS_EXCLUDED(mu_);
  // Where each published volume of a pod is, by the pod spec's volume name:
  // the path to bind-mount into containers (a directory, or for block
  // volumes the device node).
  struct PodVolume {
    std::string path;
    bool block = false;
    bool read_only = false;
  };
  std::map<std::string, PodVolume> PodVolumePaths(const std::string& pod_uid) const ABSL_LOCKS_EXCLUDED(mu_);

  // The latest NodeGetVolumeStats answer of a volume published on this
  // node, by the claim it belongs to.
  struct VolumeStat {
    std::string ns, claim, pv;
    bool has_bytes = false, has_inodes = false;
    int64_t capacity_bytes = 0, available_bytes = 0, used_bytes = 0;
    int64_t inodes = 0, inodes_free = 0, inodes_used = 0;
    bool has_condition = false, abnormal = false;
    std::string condition_message;
  };
  // Asks every published volume whose driver offers GET_VOLUME_STATS (one
  // call per volume, however many pods use it) and replaces the kept
  // answers: a volume no longer published, or whose call failed, is dropped.
  // An abnormal volume is a Warning VolumeConditionAbnormal event on each
  // pod using it, "Volume <its name in the pod>: <the driver's message>", at
  // every collection while it lasts (kubelet's CSIVolumeHealth).
  void CollectStats() ABSL_LOCKS_EXCLUDED(mu_, stats_mu_);
  // Waits until the events recorded so far are written (tests).
  void FlushEvents() { events_.Flush(); }
  std::vector<VolumeStat> Stats() const ABSL_LOCKS_EXCLUDED(stats_mu_);
  // kubelet's kubelet_volume_stats_* families (labels namespace,
  // persistentvolumeclaim) for `stats` (of every node in this process).
  static void WriteStatsMetrics(std::string* out, const std::vector<VolumeStat>& stats);

  // Paths (exposed for tests and the docs).
  std::string StagingPath(const std::string& driver, const std::string& handle, const std::string& pv,
                          bool block) const;
  std::string TargetPath(const std::string& pod_uid, const std::string& pv, bool block) const;

 private:
  // A volume as the driver knows it.
  struct Volume {
    std::string driver;
    std::string handle;
    std::string pv;
    bool block = false;
    std::string unique;  // kubernetes.io/csi/<driver>^<handle>
  };
  struct Staged {
    Volume volume;
    std::string path;
    bool certain = true;  // false: found on disk but not mounted; stage again or clean up
  };
  void ReportAbnormal(const std::vector<std::string>& pod_uids, const std::string& pv, const std::string& message);
  struct Published {
    Volume volume;
    std::string pod_uid;
    std::string target;
    bool certain = true;
  };
  // One pod volume this node should have.
  struct Wanted {
    api::types::Pod pod;  // decoded once, in the desired-state pass
    api::types::PersistentVolumeClaim claim;
    api::types::PersistentVolume pv;  // a CSI volume: spec.csi is set
    Volume volume;
    std::string pod_uid;
    std::string volume_name;  // in the pod spec
    bool read_only = false;
  };
  // What the desired-state pass found besides the wanted volumes.
  struct PodsSeen {
    std::map<std::string, api::types::Pod> active;    // uid → pod that runs or may start
    std::set<std::string> holding;                    // deleting/finished/undecodable: keep volumes
    std::map<std::string, api::types::Pod> deleting;  // uid → pod with deletionTimestamp on this node
  };
  struct Op {
    std::string lock_key;  // the volume: ops on it never overlap
    std::string id;        // "stage/<unique>", "publish/<uid>/<pv>", ...: backoff per id
    std::function<absl::Status()> run;
    nlohmann::json pod;   // FailedMount events go to the pod: its client::IdentityOf (null: none)
    std::string pod_uid;  // "" when `pod` is null
    std::string what;     // "MountVolume.MountDevice failed for volume \"pv\""
  };

  void ReconcileLoop();
  // For client/quiescence.h: no pass or operation running or due.
  bool IdleLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WorkerLoop();
  void Reconcile();
  absl::Status Reconstruct();
  // Desired state; `waiting` collects per-pod reasons a volume is not ready.
  std::vector<Wanted> Desired(std::map<std::string, std::string>* waiting, PodsSeen* pods);
  bool ContainersMayRun(const std::string& pod_uid) const;
  // The claim ("ns/name") or PV ("name") a pass needs, read from the API
  // unless read within Options::poll (null when there is none). The node
  // agent watches no claim or PV, as kubelet: it reads those of its own
  // pods when a pass needs them (a pod changed, an operation ended, a poll
  // while a pod waits for its claim, the resync), so it holds and hears
  // nothing of the cluster's others.
  absl::StatusOr<std::shared_ptr<const nlohmann::json>> Read(bool claim, const std::string& key)
      ABSL_LOCKS_EXCLUDED(read_mu_);
  // The last read of a claim, without reading it again (null if none).
  std::shared_ptr<const nlohmann::json> LastRead(bool claim, const std::string& key) const
      ABSL_LOCKS_EXCLUDED(read_mu_);
  // Forgets what the last pass did not read (pods gone, or moved to other
  // claims).
  void ForgetUnread() ABSL_LOCKS_EXCLUDED(read_mu_);
  // Deletes (grace 0) the deleting pods that have nothing left mounted.
  void FinishDeletedPods(const std::map<std::string, api::types::Pod>& deleting) ABSL_LOCKS_EXCLUDED(mu_);
  void Dispatch(Op op) ABSL_LOCKS_EXCLUDED(mu_);
  void UpdatePodStatus(const api::types::Pod& pod, bool ready, const std::string& reason, const std::string& message);

  // The operations (run on workers).
  absl::Status Stage(const Wanted& w);
  absl::Status Unstage(const Staged& s);
  absl::Status Publish(const Wanted& w, const std::string& staging);
  absl::Status Unpublish(const Published& p);
  absl::Status Expand(const Wanted& w, const std::string& target, const std::string& staging);

  // Whether the driver needs the VolumeAttachment; its attachmentMetadata
  // when attached, else an error saying what is awaited.
  absl::StatusOr<std::map<std::string, std::string>> PublishContext(const Volume& v);
  // Reconcile again within Options::poll, changed or not.
  void PollSoon() ABSL_LOCKS_EXCLUDED(mu_);
  ::csi::v1::VolumeCapability NodeVolumeCapability(const Wanted& w);
  void RecordNodeResizeFailure(const Wanted& w, const absl::Status& failure);
  std::map<std::string, std::string> VolumeContext(const Wanted& w);
  absl::Status CheckInsideRoot(const std::string& path) const;

  apiserver::Api& registry_;
  Clock& clock_;
  CsiPlugins& plugins_;
  client::DriverDirectory& directory_;
  NodeStatus& node_status_;
  const Options options_;
  client::EventRecorder events_;
  std::map<std::string, std::unique_ptr<client::Informer>> informers_;
  std::thread reconciler_;
  std::thread stats_thread_;
  std::vector<std::thread> workers_;
  struct ReadObject {
    std::shared_ptr<const nlohmann::json> object;  // null: not found
    absl::Time at;                                 // clock_
    bool used = true;                              // read or looked at by the current pass
  };
  mutable absl::Mutex read_mu_;
  std::map<std::string, ReadObject> read_ ABSL_GUARDED_BY(read_mu_);  // "c/ns/name", "v/name"
  mutable absl::Mutex stats_mu_;
  std::vector<VolumeStat> stats_ ABSL_GUARDED_BY(stats_mu_);

  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool dirty_ ABSL_GUARDED_BY(mu_) = true;
  bool reconciling_ ABSL_GUARDED_BY(mu_) = false;                     // a pass is running
  absl::Time last_pass_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();  // when the last pass began (clock_)
  uint64_t passes_ ABSL_GUARDED_BY(mu_) = 0;                          // completed passes since Start()
  // The next reconcile for work without an event of its own (Options::poll).
  absl::Time poll_at_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  std::map<std::string, Staged> staged_ ABSL_GUARDED_BY(mu_);                                // unique →
  std::map<std::pair<std::string, std::string>, Published> published_ ABSL_GUARDED_BY(mu_);  // (uid, pv) →
  // unique → the size this agent last finished NodeExpandVolume for: the
  // claim read from the informer may not show that write yet, and one
  // expansion is done once.
  std::map<std::string, int64_t> expanded_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> locked_ ABSL_GUARDED_BY(mu_);  // volumes with an op running
  // Ops finished since the reconciler's snapshot of staged_/published_: an op
  // on such a volume is decided on stale state and is not dispatched (the
  // finished op marks the state dirty, so the next pass decides again).
  uint64_t done_seq_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t snapshot_seq_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, uint64_t> done_at_ ABSL_GUARDED_BY(mu_);  // lock key → done_seq_ when its last op ended
  std::deque<Op> queue_ ABSL_GUARDED_BY(mu_);
  ItemBackoff backoff_;                                                   // per op id
  std::map<std::string, absl::Time> retry_at_ ABSL_GUARDED_BY(mu_);       // op id → not before
  std::map<std::string, absl::Time> waiting_until_ ABSL_GUARDED_BY(mu_);  // op id waiting for its driver → poll at
  std::map<std::string, int> pod_ops_ ABSL_GUARDED_BY(mu_);               // pod uid → ops queued or running
  std::set<std::string> ready_pods_ ABSL_GUARDED_BY(mu_);                 // every volume published
  // pod uid → spec volume name → (pv, read-only), from the last pass.
  std::map<std::string, std::map<std::string, std::pair<std::string, bool>>> pod_volumes_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> errors_ ABSL_GUARDED_BY(mu_);  // pod uid → last mount error
  uint64_t quiescence_id_ = 0;                                      // client/quiescence.h
};

}  // namespace berth::node
