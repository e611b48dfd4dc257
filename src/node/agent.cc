#include "node/agent.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/fs.h"
#include "common/status.h"
#include "common/strings.h"
#include "common/thread_name.h"
#include "spdlog/spdlog.h"

namespace berth::node {
namespace {

// The volume manager as the pod workers see it.
class VolumeManagerPodVolumes final : public pods::PodVolumes {
 public:
  explicit VolumeManagerPodVolumes(VolumeManager*& vm) : vm_(vm) {}
  bool PodVolumesReady(const std::string& uid) override { return vm_ != nullptr && vm_->PodVolumesReady(uid); }
  std::map<std::string, pods::VolumePath> PodVolumePaths(const std::string& uid) override {
    std::map<std::string, pods::VolumePath> out;
    if (vm_ == nullptr) return out;
    for (auto& [name, v] : vm_->PodVolumePaths(uid)) {
      out[name] = {.path = std::move(v.path), .block = v.block, .read_only = v.read_only};
    }
    return out;
  }
  void Wake() override {
    if (vm_ != nullptr) vm_->Wake();
  }

 private:
  VolumeManager*& vm_;
};

}  // namespace

NodeAgent::NodeAgent(apiserver::Api& registry, client::DriverDirectory& directory, Options options)
    : registry_(registry),
      directory_(directory),
      options_(std::move(options)),
      registration_dir_(options_.root + "/plugins_registry") {}

NodeAgent::~NodeAgent() { Stop(); }

absl::Status NodeAgent::Start() {
  if (!IsCanonicalAbsolutePath(options_.root)) {
    return absl::InvalidArgumentError("the node root must be a canonical absolute path: " + options_.root);
  }
  BERTH_RETURN_IF_ERROR(MakeDirs(options_.root, 0750));
  NodeStatus::Options status;
  status.node_name = options_.node_name;
  status.labels = options_.labels;
  status.kubelet_root = options_.root;
  status.lease_renew_interval = options_.heartbeat;
  status.status_update_frequency = options_.heartbeat;
  status.status_report_frequency = options_.status_report;
  status.paused_for_test = options_.paused_for_test;
  status.clock = options_.clock;
  // kubelet's storage errors, for berth: a node whose kubelet root cannot
  // be written can stage and publish nothing.
  status.readiness_errors = [root = options_.root]() -> std::vector<std::string> {
    if (::access(root.c_str(), W_OK | X_OK) == 0) return {};
    return {StrCat("kubelet root ", root, " is not usable: ", std::strerror(errno))};
  };
  status_ = std::make_unique<NodeStatus>(registry_, std::move(status));
  BERTH_RETURN_IF_ERROR(status_->Start());
  plugins_ = std::make_unique<CsiPlugins>(registry_, options_.node_name, directory_);
  VolumeManager::Options vm;
  vm.node_name = options_.node_name;
  vm.root = options_.root;
  vm.workers = options_.workers;
  vm.mount_table = options_.mount_table;
  vm.stats_period = options_.volume_stats_period;
  vm.clock = options_.clock;
  vm.containers_may_run = options_.containers_may_run;
  vm.runtime_owns_pod_status = options_.runtime_owns_pod_status;
  vm.on_pass = options_.on_volume_pass;
  if (!options_.runtime_endpoint.empty()) {
    // The pod workers run the pods; the volume manager asks them whether a
    // pod's containers may still run and leaves pod status to them.
    BERTH_ASSIGN_OR_RETURN(runtime_, cri::GrpcRuntime::Connect(options_.runtime_endpoint, {}));
    pod_volumes_ = std::make_unique<VolumeManagerPodVolumes>(volumes_raw_);
    pods::PodWorkers::Options po;
    po.node_name = options_.node_name;
    po.root = options_.root;
    po.log_root = options_.pod_log_root;
    po.host_ip = options_.host_ip;
    po.workers = options_.pod_workers;
    po.clock = options_.clock;
    pods_ = std::make_unique<pods::PodWorkers>(registry_, *runtime_, *pod_volumes_, po);
    vm.containers_may_run = [this](const std::string& uid) { return pods_->CouldHaveRunningContainers(uid); };
    vm.runtime_owns_pod_status = true;
  }
  volumes_ = std::make_unique<VolumeManager>(registry_, *plugins_, directory_, *status_, vm);
  volumes_raw_ = volumes_.get();
  BERTH_RETURN_IF_ERROR(volumes_->Start());
  if (pods_) BERTH_RETURN_IF_ERROR(pods_->Start());
  watcher_ = std::make_unique<PluginWatcher>(registration_dir_, *plugins_);
  BERTH_RETURN_IF_ERROR(watcher_->Start());
  {
    absl::MutexLock lock(&mu_);
    stop_ = false;
  }
  static_thread_ = NamedThread("static pods", [this] { StaticLoop(); });
  spdlog::info("node agent {} on {}", options_.node_name, options_.root);
  return absl::OkStatus();
}

void NodeAgent::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (static_thread_.joinable()) static_thread_.join();
  if (watcher_) watcher_->Stop();
  if (pods_) pods_->Stop();
  if (volumes_) volumes_->Stop();
  if (status_) status_->Stop();
}

void NodeAgent::AddStaticDriver(const std::string& name, const std::string& endpoint) {
  absl::MutexLock lock(&mu_);
  static_drivers_[name] = endpoint;
}

void NodeAgent::StaticLoop() {
  for (;;) {
    std::map<std::string, std::string> drivers;
    {
      absl::MutexLock lock(&mu_);
      auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_; };
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping), absl::Seconds(2))) return;
      drivers = static_drivers_;
    }
    for (const auto& [name, endpoint] : drivers) {
      if (plugins_->Get(name)) continue;
      if (absl::Status st = plugins_->RegisterPlugin(name, endpoint, {"1.0.0"}); !st.ok()) {
        spdlog::warn("node {}: registering driver {} at {}: {}", options_.node_name, name, endpoint,
                     std::string(st.message()));
      }
    }
  }
}

}  // namespace berth::node
