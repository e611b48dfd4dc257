#include "controllers/manager.h"

#include <algorithm>
#include <cstdlib>

#include "common/strings.h"
#include "spdlog/spdlog.h"

namespace berth::controllers {

using namespace ::berth::client;  // the controllers' own client library
namespace {

struct Watched {
  const char* group;
  const char* resource;
  // Held packed: kinds that grow with the cluster and are read by key or
  // index (a seventh of their parsed size; client/informer.h).
  bool packed = false;
};
// Every kind a controller reads.
constexpr Watched kWatched[] = {
    {"", "persistentvolumeclaims", true},
    {"", "persistentvolumes", true},
    {"", "pods"},
    {"", "nodes"},
    {"storage.k8s.io", "storageclasses"},
    {"storage.k8s.io", "csinodes"},
    {"storage.k8s.io", "csidrivers"},
    {"storage.k8s.io", "volumeattachments"},
    {"storage.k8s.io", "csistoragecapacities"},
    {"snapshot.storage.k8s.io", "volumesnapshots"},
    {"snapshot.storage.k8s.io", "volumesnapshotcontents"},
    {"snapshot.storage.k8s.io", "volumesnapshotclasses"},
    {"coordination.k8s.io", "leases"},
    {"backup.berth.io", "backups"},
    {"backup.berth.io", "backupstoragelocations"},
    {"backup.berth.io", "schedules"},
    {"backup.berth.io", "restores"},
};

}  // namespace

ControllerManager::ControllerManager(apiserver::Registry& registry, DriverDirectory& drivers, Options options)
    : registry_(registry),
      drivers_(drivers),
      options_(std::move(options)),
      monitor_(std::make_unique<DriverMonitor>(drivers, options_.clock != nullptr ? *options_.clock : RealClock(),
                                               options_.driver_monitor)) {
  for (const auto& w : kWatched) {
    const api::KindInfo* kind = api::FindResource(w.group, w.resource);
    if (kind == nullptr) {  // a programming error: the kinds are compiled in
      spdlog::critical("controller manager: unknown resource {}", w.resource);
      std::abort();
    }
    auto informer = std::make_unique<Informer>(registry_, *kind, absl::Minutes(5), w.packed);
    // A claim or volume changes several times on its way to Bound, then
    // rarely: only what is Bound is packed as it comes.
    if (w.packed) informer->DeferPacking([](const json& o) { return Str(o, {"status", "phase"}) == "Bound"; });
    informers_[w.resource] = std::move(informer);
  }
  auto i = [this](const char* r) -> Informer& { return informer(r); };
  binder_ = std::make_unique<PvBinder>(
      registry_,
      BinderInformers{i("persistentvolumeclaims"), i("persistentvolumes"), i("storageclasses"), i("pods"), i("nodes")},
      PvBinder::Options{.workers = options_.binder_workers,
                        .provisioner_runs_here =
                            [this](const std::string& provisioner) {
                              absl::MutexLock lock(&running_mu_);
                              return running_provisioners_.contains(provisioner);
                            },
                        .hand_over =
                            [this](const std::string& provisioner, const std::string& key, const std::string& uid) {
                              absl::MutexLock lock(&running_mu_);
                              auto it = running_provisioners_.find(provisioner);
                              if (it == running_provisioners_.end()) return false;
                              it->second->TakeOver(key, uid);
                              return true;
                            }});
  attach_detach_ = std::make_unique<AttachDetachController>(
      registry_,
      AttachDetachInformers{i("pods"), i("nodes"), i("persistentvolumes"), i("persistentvolumeclaims"), i("csidrivers"),
                            i("volumeattachments")},
      AttachDetachController::Options{.clock = options_.clock});
  scheduler_ = std::make_unique<Scheduler>(
      registry_,
      SchedulerInformers{i("pods"), i("nodes"), i("persistentvolumeclaims"), i("persistentvolumes"),
                         i("storageclasses"), i("csinodes"), i("csidrivers"), i("csistoragecapacities")},
      Scheduler::Options{});
  if (options_.snapshot_controller) {
    snapshot_controller_ =
        std::make_unique<SnapshotController>(registry_,
                                             SnapshotInformers{i("volumesnapshots"), i("volumesnapshotcontents"),
                                                               i("volumesnapshotclasses"), i("persistentvolumeclaims")},
                                             SnapshotController::Options{});
  }
  ephemeral_ = std::make_unique<EphemeralController>(registry_, i("pods"), i("persistentvolumeclaims"),
                                                     EphemeralController::Options{});
  node_lifecycle_ = std::make_unique<NodeLifecycleController>(
      registry_, NodeLifecycleInformers{i("nodes"), i("leases"), i("pods")},
      NodeLifecycleController::Options{.monitor_period = options_.node_monitor_period,
                                       .grace_period = options_.node_monitor_grace_period,
                                       .clock = options_.clock});
  taint_eviction_ =
      std::make_unique<TaintEvictionController>(registry_, TaintEvictionInformers{i("nodes"), i("pods")},
                                                TaintEvictionController::Options{.clock = options_.clock});
  pod_gc_ = std::make_unique<PodGarbageCollector>(registry_, PodGcInformers{i("nodes"), i("pods")},
                                                  PodGarbageCollector::Options{.clock = options_.clock});
  if (options_.data_mover_work_dir) {
    data_mover_ = std::make_unique<DataMover>(
        drivers_, DataMover::Options{.work_dir = options_.data_mover_work_dir, .rpc_timeout = options_.rpc_timeout});
    backup_controller_ = std::make_unique<BackupController>(registry_, i("backups"), i("backupstoragelocations"),
                                                            i("volumesnapshots"), *data_mover_, options_.hook_runner,
                                                            BackupController::Options{.clock = options_.clock});
    // Restores: claims filled from the repository by every berth provisioner
    // (populator), the Restore objects driven by their controller.
    backup_populator_ = std::make_unique<BackupPopulator>(registry_, *data_mover_, &restore_tracker_);
    restore_controller_ = std::make_unique<RestoreController>(
        registry_, RestoreInformers{i("restores"), i("backups"), i("persistentvolumeclaims")},
        RestoreController::Options{.tracker = &restore_tracker_, .clock = options_.clock});
  }
  // Schedules only create Backups: they run with or without a data mover.
  schedule_controller_ = std::make_unique<ScheduleController>(registry_, i("schedules"),
                                                              ScheduleController::Options{.clock = options_.clock});
  absl::MutexLock lock(&mu_);
  for (const auto& driver : options_.drivers) {
    if (!per_driver_.contains(driver) && !IsSidecarDriver(driver)) per_driver_.emplace(driver, MakeDriver(driver));
  }
}

bool ControllerManager::IsSidecarDriver(const std::string& driver) const {
  return std::find(options_.sidecar_drivers.begin(), options_.sidecar_drivers.end(), driver) !=
         options_.sidecar_drivers.end();
}

ControllerManager::PerDriver ControllerManager::MakeDriver(const std::string& driver) {
  auto i = [this](const char* r) -> Informer& { return informer(r); };
  PerDriver d;
  CapacityTracker::Options cap;
  cap.driver = driver;
  cap.poll_interval = options_.capacity_poll_interval;
  d.capacity = std::make_unique<CapacityTracker>(
      registry_, drivers_, CapacityInformers{i("storageclasses"), i("nodes"), i("csinodes"), i("csistoragecapacities")},
      cap);
  d.provisioner = std::make_unique<Provisioner>(
      registry_, drivers_,
      ProvisionerInformers{i("persistentvolumeclaims"), i("persistentvolumes"), i("storageclasses"), i("nodes"),
                           i("csinodes"), &i("volumeattachments")},
      Provisioner::Options{.driver = driver,
                           .workers = options_.provisioner_workers,
                           .rpc_timeout = options_.rpc_timeout,
                           .monitor = monitor_.get(),
                           .populator = backup_populator_.get(),
                           // What it creates or deletes changes that node's
                           // capacity: asked again within a second (a burst
                           // of creates shares one GetCapacity per object),
                           // not at the next poll. (The tracker stops first;
                           // its queue then takes nothing.)
                           .on_capacity_change = [capacity = d.capacity.get()](const std::string& node) {
                             constexpr absl::Duration kWithin = absl::Seconds(1);
                             if (node.empty()) {
                               capacity->Refresh(kWithin);
                             } else {
                               capacity->RefreshNode(node, kWithin);
                             }
                           }});
  d.attacher = std::make_unique<Attacher>(
      registry_, drivers_, AttacherInformers{i("volumeattachments"), i("persistentvolumes"), i("csinodes")},
      Attacher::Options{
          .driver = driver, .workers = 4, .rpc_timeout = options_.rpc_timeout, .monitor = monitor_.get()});
  d.resizer = std::make_unique<Resizer>(registry_, drivers_, i("persistentvolumeclaims"), i("persistentvolumes"),
                                        Resizer::Options{.driver = driver,
                                                         .workers = 2,
                                                         .rpc_timeout = options_.rpc_timeout,
                                                         .monitor = monitor_.get(),
                                                         .clock = options_.clock});
  Snapshotter::Options snap;
  snap.driver = driver;
  snap.rpc_timeout = options_.rpc_timeout;
  snap.monitor = monitor_.get();
  d.snapshotter =
      std::make_unique<Snapshotter>(registry_, drivers_, i("volumesnapshotcontents"), i("volumesnapshotclasses"), snap);
  d.provisioner->RegisterHandlers();
  d.attacher->RegisterHandlers();
  d.resizer->RegisterHandlers();
  d.snapshotter->RegisterHandlers();
  d.capacity->RegisterHandlers();
  return d;
}

void ControllerManager::StartDriver(const std::string& driver, PerDriver& d) {
  d.provisioner->Start();
  {
    absl::MutexLock lock(&running_mu_);
    running_provisioners_[driver] = d.provisioner.get();
  }
  d.attacher->Start();
  d.resizer->Start();
  d.snapshotter->Start();
  d.capacity->Start();
}

void ControllerManager::AddDriver(const std::string& driver) {
  if (IsSidecarDriver(driver)) return;
  absl::MutexLock lock(&mu_);
  if (per_driver_.contains(driver)) return;
  // Registered on running informers: the handlers first see every cached
  // object, so the new controllers catch up on what exists.
  auto [it, inserted] = per_driver_.emplace(driver, MakeDriver(driver));
  if (started_) {
    StartDriver(driver, it->second);
    spdlog::info("controllers running for driver {}", driver);
  }
}

std::vector<std::string> ControllerManager::drivers() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> out;
  for (const auto& [name, d] : per_driver_) out.push_back(name);
  return out;
}

ControllerManager::~ControllerManager() { Stop(); }

Informer& ControllerManager::informer(const std::string& resource) const {
  auto it = informers_.find(resource);
  if (it == informers_.end()) {
    spdlog::critical("controller manager: no informer for {}", resource);
    std::abort();
  }
  return *it->second;
}

absl::Status ControllerManager::Start() {
  {
    absl::MutexLock lock(&mu_);
    if (started_) return absl::OkStatus();
  }
  registry_.EnableStorageProtectionAdmission(true);
  binder_->RegisterHandlers();
  attach_detach_->RegisterHandlers();
  scheduler_->RegisterHandlers();
  if (snapshot_controller_) snapshot_controller_->RegisterHandlers();
  ephemeral_->RegisterHandlers();
  node_lifecycle_->RegisterHandlers();
  taint_eviction_->RegisterHandlers();
  pod_gc_->RegisterHandlers();
  schedule_controller_->RegisterHandlers();
  if (backup_controller_) backup_controller_->RegisterHandlers();
  if (restore_controller_) restore_controller_->RegisterHandlers();
  for (auto& [resource, inf] : informers_) inf->Start();
  for (auto& [resource, inf] : informers_) {
    if (!inf->WaitForSync(options_.informer_sync_timeout)) {
      return absl::DeadlineExceededError(StrCat("the ", resource, " informer did not sync"));
    }
  }
  binder_->Start();
  attach_detach_->Start();
  scheduler_->Start();
  if (snapshot_controller_) snapshot_controller_->Start();
  ephemeral_->Start();
  node_lifecycle_->Start();
  taint_eviction_->Start();
  pod_gc_->Start();
  schedule_controller_->Start();
  if (backup_controller_) backup_controller_->Start();
  if (restore_controller_) restore_controller_->Start();
  size_t count;
  {
    absl::MutexLock lock(&mu_);
    started_ = true;
    for (auto& [name, d] : per_driver_) StartDriver(name, d);
    count = per_driver_.size();
  }
  spdlog::info("controllers running for {} driver(s)", count);
  if (options_.follow_directory) {
    drivers_.SetOnNewDriver([this](const std::string& driver) { AddDriver(driver); });
  }
  return absl::OkStatus();
}

void ControllerManager::Stop() {
  // No new drivers (waits for one being added), then the workers (they read
  // the informers), then the informers.
  if (options_.follow_directory) drivers_.SetOnNewDriver(nullptr);
  absl::MutexLock lock(&mu_);
  {
    absl::MutexLock running(&running_mu_);
    running_provisioners_.clear();
  }
  for (auto& [name, d] : per_driver_) {
    d.capacity->Stop();
    d.snapshotter->Stop();
    d.resizer->Stop();
    d.attacher->Stop();
    d.provisioner->Stop();
  }
  if (restore_controller_) restore_controller_->Stop();
  if (backup_controller_) backup_controller_->Stop();
  schedule_controller_->Stop();
  pod_gc_->Stop();
  taint_eviction_->Stop();
  node_lifecycle_->Stop();
  ephemeral_->Stop();
  if (snapshot_controller_) snapshot_controller_->Stop();
  scheduler_->Stop();
  attach_detach_->Stop();
  binder_->Stop();
  for (auto& [resource, inf] : informers_) inf->Stop();
  started_ = false;
}

}  // namespace berth::controllers
