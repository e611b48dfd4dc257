#include "controllers/manager.h"

#include <cstdlib>

#include "common/strings.h"
#include "spdlog/spdlog.h"

namespace berth::controllers {
namespace {

struct Watched {
  const char* group;
  const char* resource;
};
// Every kind a controller reads.
constexpr Watched kWatched[] = {
    {"", "persistentvolumeclaims"},
    {"", "persistentvolumes"},
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
};

}  // namespace

ControllerManager::ControllerManager(apiserver::Registry& registry, DriverDirectory& drivers, Options options)
    : registry_(registry), drivers_(drivers), options_(std::move(options)) {
  for (const auto& w : kWatched) {
    const api::KindInfo* kind = api::FindResource(w.group, w.resource);
    if (kind == nullptr) {  // a programming error: the kinds are compiled in
      spdlog::critical("controller manager: unknown resource {}", w.resource);
      std::abort();
    }
    informers_[w.resource] = std::make_unique<Informer>(registry_, *kind);
  }
  auto i = [this](const char* r) -> Informer& { return informer(r); };
  binder_ = std::make_unique<PvBinder>(
      registry_,
      BinderInformers{i("persistentvolumeclaims"), i("persistentvolumes"), i("storageclasses"), i("pods"), i("nodes")},
      PvBinder::Options{.workers = options_.binder_workers});
  attach_detach_ = std::make_unique<AttachDetachController>(
      registry_,
      AttachDetachInformers{i("pods"), i("nodes"), i("persistentvolumes"), i("persistentvolumeclaims"),
                            i("csidrivers"), i("volumeattachments")},
      AttachDetachController::Options{});
  scheduler_ = std::make_unique<Scheduler>(
      registry_,
      SchedulerInformers{i("pods"), i("nodes"), i("persistentvolumeclaims"), i("persistentvolumes"),
                         i("storageclasses"), i("csinodes"), i("csidrivers"), i("csistoragecapacities")},
      Scheduler::Options{});
  snapshot_controller_ = std::make_unique<SnapshotController>(
      registry_,
      SnapshotInformers{i("volumesnapshots"), i("volumesnapshotcontents"), i("volumesnapshotclasses"),
                        i("persistentvolumeclaims")},
      SnapshotController::Options{});
  for (const auto& driver : options_.drivers) {
    PerDriver d;
    d.provisioner = std::make_unique<Provisioner>(
        registry_, drivers_,
        ProvisionerInformers{i("persistentvolumeclaims"), i("persistentvolumes"), i("storageclasses"), i("nodes"),
                             i("csinodes")},
        Provisioner::Options{.driver = driver, .workers = options_.provisioner_workers,
                             .rpc_timeout = options_.rpc_timeout});
    d.attacher = std::make_unique<Attacher>(
        registry_, drivers_, AttacherInformers{i("volumeattachments"), i("persistentvolumes"), i("csinodes")},
        Attacher::Options{.driver = driver, .workers = 4, .rpc_timeout = options_.rpc_timeout});
    d.resizer = std::make_unique<Resizer>(registry_, drivers_, i("persistentvolumeclaims"), i("persistentvolumes"),
                                          Resizer::Options{.driver = driver, .workers = 2,
                                                           .rpc_timeout = options_.rpc_timeout});
    Snapshotter::Options snap;
    snap.driver = driver;
    snap.rpc_timeout = options_.rpc_timeout;
    d.snapshotter = std::make_unique<Snapshotter>(registry_, drivers_, i("volumesnapshotcontents"),
                                                  i("volumesnapshotclasses"), snap);
    CapacityTracker::Options cap;
    cap.driver = driver;
    cap.poll_interval = options_.capacity_poll_interval;
    d.capacity = std::make_unique<CapacityTracker>(
        registry_, drivers_,
        CapacityInformers{i("storageclasses"), i("nodes"), i("csinodes"), i("csistoragecapacities")}, cap);
    per_driver_.push_back(std::move(d));
  }
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
  if (started_) return absl::OkStatus();
  registry_.EnableStorageProtectionAdmission(true);
  binder_->RegisterHandlers();
  attach_detach_->RegisterHandlers();
  scheduler_->RegisterHandlers();
  snapshot_controller_->RegisterHandlers();
  for (auto& d : per_driver_) {
    d.provisioner->RegisterHandlers();
    d.attacher->RegisterHandlers();
    d.resizer->RegisterHandlers();
    d.snapshotter->RegisterHandlers();
    d.capacity->RegisterHandlers();
  }
  for (auto& [resource, inf] : informers_) inf->Start();
  for (auto& [resource, inf] : informers_) {
    if (!inf->WaitForSync(options_.informer_sync_timeout)) {
      return absl::DeadlineExceededError(StrCat("the ", resource, " informer did not sync"));
    }
  }
  started_ = true;
  binder_->Start();
  attach_detach_->Start();
  scheduler_->Start();
  snapshot_controller_->Start();
  for (auto& d : per_driver_) {
    d.provisioner->Start();
    d.attacher->Start();
    d.resizer->Start();
    d.snapshotter->Start();
    d.capacity->Start();
  }
  spdlog::info("controllers running for {} driver(s)", per_driver_.size());
  return absl::OkStatus();
}

void ControllerManager::Stop() {
  // Workers first (they read the informers), then the informers.
  for (auto& d : per_driver_) {
    d.capacity->Stop();
    d.snapshotter->Stop();
    d.resizer->Stop();
    d.attacher->Stop();
    d.provisioner->Stop();
  }
  snapshot_controller_->Stop();
  scheduler_->Stop();
  attach_detach_->Stop();
  binder_->Stop();
  for (auto& [resource, inf] : informers_) inf->Stop();
  started_ = false;
}

}  // namespace berth::controllers
