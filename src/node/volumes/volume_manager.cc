// The volume manager: life cycle, paths and queries (see volume_manager.h).
#include "common/thread_name.h"
#include "node/volumes/volume_manager_internal.h"

namespace berth::node {

using namespace internal;  // NOLINT: the volume manager's own helpers

VolumeManager::VolumeManager(apiserver::Api& registry, CsiPlugins& plugins, client::DriverDirectory& directory,
                             NodeStatus& node_status, Options options)
    : registry_(registry),
      clock_(options.clock != nullptr ? *options.clock : RealClock()),
      plugins_(plugins),
      directory_(directory),
      node_status_(node_status),
      options_(std::move(options)),
      events_(registry, "kubelet"),
      // kubelet's exponentialbackoff: 500 ms doubling, at most 2 min 2 s.
      backoff_({.base = absl::Milliseconds(500), .max = absl::Seconds(122), .jitter = 0}) {
  quiescence_id_ = client::Quiescence::Register([this](int64_t) {
    absl::MutexLock lock(&mu_);
    return IdleLocked();
  });
}

VolumeManager::~VolumeManager() {
  client::Quiescence::Unregister(quiescence_id_);
  Stop();
}

bool VolumeManager::IdleLocked() const {
  if (stop_ || !started_) return true;
  if (dirty_ || reconciling_ || !locked_.empty()) return false;
  // Work due on the clock (a retry, a poll) since the last pass began is
  // about to happen: the reconciler wakes for it. (An entry due before that
  // pass was looked at; it stays until its operation runs again.)
  const absl::Time now = clock_.Now();
  if (poll_at_ <= now) return false;
  for (const auto* times : {&retry_at_, &waiting_until_}) {
    for (const auto& [id, at] : *times) {
      if (at <= now && at > last_pass_) return false;
    }
  }
  return true;
}

std::string VolumeManager::StagingPath(const std::string& driver, const std::string& handle, const std::string& pv,
                                       bool block) const {
  if (block) return StrCat(options_.root, kCsiPluginDir, "/volumeDevices/staging/", pv);
  return StrCat(options_.root, kCsiPluginDir, "/", driver, "/", Sha256Hex(handle), "/globalmount");
}

std::string VolumeManager::TargetPath(const std::string& pod_uid, const std::string& pv, bool block) const {
  if (block) return StrCat(options_.root, "/pods/", pod_uid, "/volumeDevices/kubernetes.io~csi/", pv);
  return StrCat(options_.root, "/pods/", pod_uid, "/volumes/kubernetes.io~csi/", pv, "/mount");
}

absl::Status VolumeManager::CheckInsideRoot(const std::string& path) const {
  return CheckPathInside(options_.root, path);
}

absl::Status VolumeManager::Start() {
  BERTH_RETURN_IF_ERROR(MakeDirs(options_.root + "/pods", 0750));
  BERTH_RETURN_IF_ERROR(MakeDirs(options_.root + kCsiPluginDir, 0750));
  BERTH_RETURN_IF_ERROR(Reconstruct());
  for (auto [resource, group] : std::vector<std::pair<const char*, const char*>>{
           {"pods", ""}, {"volumeattachments", "storage.k8s.io"}, {"csidrivers", "storage.k8s.io"}}) {
    auto informer = std::make_unique<client::Informer>(registry_, K(resource, group));
    if (std::string_view(resource) == "pods") {
      // Pods of other nodes neither wake the reconciler nor get looked at.
      // These run on every pod event of the cluster and read one key of the
      // raw object, the informer's index key: decoding every pod of every
      // node here would cost more than the filter saves. The pods of this
      // node are decoded in the desired-state pass (desired_state.cc).
      const std::string node = options_.node_name;
      auto here = [node](const json& pod) { return Str(pod, {"spec", "nodeName"}) == node; };
      informer->AddIndex(kPodsByNode, [](const json& pod) {
        return std::vector<std::string>{Str(pod, {"spec", "nodeName"})};
      });
      informer->AddHandlers({.on_add =
                                 [this, here](const json& p) {
                                   if (here(p)) Wake();
                                 },
                             .on_update =
                                 [this, here](const json& a, const json& b) {
                                   if (here(a) || here(b)) Wake();
                                 },
                             .on_delete =
                                 [this, here](const json& p) {
                                   if (here(p)) Wake();
                                 }});
    } else {
      informer->AddHandlers({.on_add = [this](const json&) { Wake(); },
                             .on_update = [this](const json&, const json&) { Wake(); },
                             .on_delete = [this](const json&) { Wake(); }});
    }
    informers_[resource] = std::move(informer);
  }
  for (auto& [r, informer] : informers_) informer->Start();
  plugins_.SetOnChange([this] {
    {
      absl::MutexLock lock(&mu_);
      waiting_until_.clear();  // what waited for a driver may go now
    }
    Wake();
  });
  {
    absl::MutexLock lock(&mu_);
    stop_ = false;
    started_ = true;
    passes_ = 0;
  }
  for (int i = 0; i < std::max(1, options_.workers); ++i)
    workers_.emplace_back(NamedThread("volume worker", [this] { WorkerLoop(); }));
  reconciler_ = NamedThread("volume reconcil", [this] { ReconcileLoop(); });
  if (options_.stats_period > absl::ZeroDuration()) {
    stats_thread_ = std::thread([this] {
      for (;;) {
        {
          absl::MutexLock lock(&mu_);
          auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_; };
          if (clock_.AwaitWithTimeout(mu_, absl::Condition(&stopping), options_.stats_period)) return;
        }
        CollectStats();
      }
    });
  }
  return absl::OkStatus();
}

void VolumeManager::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stop_ && !reconciler_.joinable()) return;
    stop_ = true;
  }
  plugins_.SetOnChange(nullptr);
  if (reconciler_.joinable()) reconciler_.join();
  if (stats_thread_.joinable()) stats_thread_.join();
  for (auto& w : workers_) w.join();
  workers_.clear();
  for (auto& [r, informer] : informers_) informer->Stop();
  informers_.clear();
}

void VolumeManager::Wake() {
  absl::MutexLock lock(&mu_);
  dirty_ = true;
}

std::set<std::string> VolumeManager::StagedVolumes() const {
  absl::MutexLock lock(&mu_);
  std::set<std::string> out;
  for (const auto& [unique, s] : staged_) {
    if (s.certain) out.insert(unique);
  }
  return out;
}

std::set<std::string> VolumeManager::PublishedVolumes() const {
  absl::MutexLock lock(&mu_);
  std::set<std::string> out;
  for (const auto& [key, p] : published_) {
    if (p.certain) out.insert(key.first + "/" + key.second);
  }
  return out;
}

std::set<std::string> VolumeManager::UncertainStagedVolumes() const {
  absl::MutexLock lock(&mu_);
  std::set<std::string> out;
  for (const auto& [unique, s] : staged_) {
    if (!s.certain) out.insert(unique);
  }
  return out;
}

std::set<std::string> VolumeManager::UncertainPublishedVolumes() const {
  absl::MutexLock lock(&mu_);
  std::set<std::string> out;
  for (const auto& [key, p] : published_) {
    if (!p.certain) out.insert(key.first + "/" + key.second);
  }
  return out;
}

VolumeManager::ReconcileProgress VolumeManager::Progress() const {
  absl::MutexLock lock(&mu_);
  return {.passes = passes_, .operations = locked_.size()};
}

bool VolumeManager::PodVolumesReady(const std::string& pod_uid) const {
  absl::MutexLock lock(&mu_);
  return ready_pods_.contains(pod_uid);
}

std::map<std::string, VolumeManager::PodVolume> VolumeManager::PodVolumePaths(const std::string& pod_uid) const {
  absl::MutexLock lock(&mu_);
  std::map<std::string, PodVolume> out;
  auto vols = pod_volumes_.find(pod_uid);
  if (vols == pod_volumes_.end()) return out;
  for (const auto& [name, pv_ro] : vols->second) {
    auto p = published_.find({pod_uid, pv_ro.first});
    if (p == published_.end() || !p->second.certain) continue;
    out[name] = PodVolume{.path = p->second.target, .block = p->second.volume.block, .read_only = pv_ro.second};
  }
  return out;
}

bool VolumeManager::ContainersMayRun(const std::string& pod_uid) const {
  return options_.containers_may_run && options_.containers_may_run(pod_uid);
}

}  // namespace berth::node
