// The controller manager: every storage controller of berth's orchestrator
// wired to one set of shared informers (kube-controller-manager, the
// scheduler's volume binding and the kubernetes-csi sidecars, in process).
//
//   DriverDirectory drivers;
//   drivers.Add("local.csi.berth.io", "node-1", "unix:///run/berth/node-1/csi.sock");
//   ControllerManager manager(registry, drivers, {.drivers = {"local.csi.berth.io"}});
//   BERTH_RETURN_IF_ERROR(manager.Start());
//   ...
//   manager.Stop();
//
// Cluster-wide: the PV binder, the attach-detach controller, the scheduler,
// the snapshot controller, the generic ephemeral volume controller, the node
// lifecycle controller, taint-based eviction and the pod GC of out-of-service
// nodes. Per CSI driver: provisioner, attacher,
// resizer, snapshotter and capacity tracker. Turns on the registry's
// storage-protection admission (the binder removes those finalizers).
//
// Thread-safety: Start/Stop from one thread; the controllers are thread-safe.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "apiserver/registry.h"
#include "client/driver_monitor.h"
#include "client/drivers.h"
#include "client/informer.h"
#include "common/clock.h"
#include "controllers/backup/backup_controller.h"
#include "controllers/backup/backup_populator.h"
#include "controllers/backup/data_mover.h"
#include "controllers/backup/restore_controller.h"
#include "controllers/backup/schedule_controller.h"
#include "controllers/nodelifecycle/node_lifecycle.h"
#include "controllers/nodelifecycle/pod_gc.h"
#include "controllers/nodelifecycle/taint_eviction.h"
#include "controllers/scheduling/scheduler.h"
#include "controllers/snapshot/snapshotter.h"
#include "controllers/volume/attacher.h"
#include "controllers/volume/capacity.h"
#include "controllers/volume/ephemeral.h"
#include "controllers/volume/provisioner.h"
#include "controllers/volume/pv_binder.h"
#include "controllers/volume/resizer.h"

namespace berth::controllers {

using namespace ::berth::client;  // the controllers' own client library

class ControllerManager {
 public:
  struct Options {
    // The CSI drivers to run per-driver controllers for (their endpoints are
    // looked up in the DriverDirectory at each call).
    std::vector<std::string> drivers;
    // Each CSI call's deadline; zero: the call layer's default for the call
    // (csi::DefaultTimeout).
    absl::Duration rpc_timeout = absl::ZeroDuration();
    absl::Duration capacity_poll_interval = absl::Minutes(1);
    absl::Duration informer_sync_timeout = absl::Seconds(60);
    // Each worker waits for its own durable writes; more of them share a
    // group commit (stack_bench 10000, interleaved: 8 and 4 gave 6.2-6.7
    // writes per commit, 926-986 claims/s; 16 and 8 gave 13.2-13.8 writes
    // per commit, 1,009-1,112 claims/s, 14 % less of the store writer's
    // CPU). external-provisioner runs 100 workers by default.
    int provisioner_workers = 16;
    int binder_workers = 8;
    // Also run per-driver controllers for every driver that becomes known
    // to the DriverDirectory later (a node's plugin registration), as they
    // appear.
    bool follow_directory = false;
    // Drivers served by the upstream kubernetes-csi sidecars (external-
    // provisioner, -attacher, -resizer, -snapshotter, capacity): never given
    // per-driver controllers, even when they register on a node. The
    // cluster-wide controllers (binder, scheduler, attach-detach, snapshot
    // controller) still do Kubernetes' part for them, and the node agents
    // stage and publish their volumes.
    std::vector<std::string> sidecar_drivers = {};
    // false: VolumeSnapshots are left to the upstream snapshot-controller
    // (the per-driver content handling still runs for berth's drivers).
    bool snapshot_controller = true;
    // The node lifecycle controller (kube-controller-manager's
    // --node-monitor-period and --node-monitor-grace-period).
    absl::Duration node_monitor_period = absl::Seconds(5);
    absl::Duration node_monitor_grace_period = absl::Seconds(40);
    // Drivers whose connection fails are waited for (DriverMonitor): how
    // they are probed.
    DriverMonitorOptions driver_monitor = {};
    // Time for the node lifecycle, taint eviction, attach-detach and driver
    // monitor (null: RealClock()).
    Clock* clock = nullptr;
    // Backups (issue 30): a directory inside `node`'s kubelet root for the
    // data mover's staging (berth up: <data>/nodes/<node>/kubelet/
    // berth-data-mover). Null: no backup controllers run.
    std::function<absl::StatusOr<std::string>(const std::string& node)> data_mover_work_dir = nullptr;
    // Runs pods' backup hooks (null: a pod with hooks fails its backup).
    HookRunner* hook_runner = nullptr;
  };
  ControllerManager(apiserver::Registry& registry, DriverDirectory& drivers, Options options);
  ~ControllerManager();  // Stop()

  // Registers every controller, starts the informers, waits for their first
  // list, then starts the workers. DEADLINE_EXCEEDED if a list never came.
  absl::Status Start();
  void Stop();

  Informer& informer(const std::string& resource) const;
  // The backups' data path (null without Options::data_mover_work_dir).
  DataMover* data_mover() const { return data_mover_.get(); }
  // The one DriverMonitor every per-driver controller calls through.
  DriverMonitor& monitor() const { return *monitor_; }

  // Runs the per-driver controllers for `driver` (started at once when the
  // manager runs; no-op when they exist or `driver` is a sidecar driver).
  void AddDriver(const std::string& driver) ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<std::string> drivers() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct PerDriver {
    std::unique_ptr<Provisioner> provisioner;
    std::unique_ptr<Attacher> attacher;
    std::unique_ptr<Resizer> resizer;
    std::unique_ptr<Snapshotter> snapshotter;
    std::unique_ptr<CapacityTracker> capacity;
  };
  PerDriver MakeDriver(const std::string& driver);
  bool IsSidecarDriver(const std::string& driver) const;
  void StartDriver(const std::string& driver, PerDriver& d) ABSL_LOCKS_EXCLUDED(running_mu_);

  apiserver::Registry& registry_;
  DriverDirectory& drivers_;
  const Options options_;
  // Before the controllers (they call through it), destroyed after them.
  std::unique_ptr<DriverMonitor> monitor_;
  // resource → informer (one per kind, shared by every controller).
  std::map<std::string, std::unique_ptr<Informer>> informers_;
  std::unique_ptr<PvBinder> binder_;
  std::unique_ptr<AttachDetachController> attach_detach_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<SnapshotController> snapshot_controller_;
  std::unique_ptr<EphemeralController> ephemeral_;
  std::unique_ptr<NodeLifecycleController> node_lifecycle_;
  std::unique_ptr<TaintEvictionController> taint_eviction_;
  std::unique_ptr<PodGarbageCollector> pod_gc_;
  std::unique_ptr<ScheduleController> schedule_controller_;
  std::unique_ptr<DataMover> data_mover_;
  std::unique_ptr<BackupController> backup_controller_;
  // Restores (with the data mover): the populator outlives the provisioners
  // that call it (per_driver_ below goes first).
  RestoreTracker restore_tracker_;
  std::unique_ptr<BackupPopulator> backup_populator_;
  std::unique_ptr<RestoreController> restore_controller_;
  mutable absl::Mutex mu_;
  std::map<std::string, PerDriver> per_driver_ ABSL_GUARDED_BY(mu_);
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  // The drivers whose provisioner has started, for the binder's workers
  // (PvBinder::Options::provisioner_runs_here and hand_over: a provisioner
  // is called only under this lock, and Stop takes it out of here before
  // stopping it). A lock of its own: Stop joins those workers while it
  // holds mu_.
  mutable absl::Mutex running_mu_ ABSL_ACQUIRED_AFTER(mu_);
  std::map<std::string, Provisioner*> running_provisioners_ ABSL_GUARDED_BY(running_mu_);
};

}  // namespace berth::controllers
