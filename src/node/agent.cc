#include "node/agent.h"

#include "common/fs.h"
#include "common/status.h"
#include "spdlog/spdlog.h"

namespace berth::node {

NodeAgent::NodeAgent(apiserver::Registry& registry, client::DriverDirectory& directory, Options options)
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
  status_ = std::make_unique<NodeStatus>(registry_, options_.node_name, options_.labels, options_.heartbeat);
  BERTH_RETURN_IF_ERROR(status_->Start());
  plugins_ = std::make_unique<CsiPlugins>(registry_, options_.node_name, directory_);
  VolumeManager::Options vm;
  vm.node_name = options_.node_name;
  vm.root = options_.root;
  vm.workers = options_.workers;
  vm.mount_table = options_.mount_table;
  vm.stats_period = options_.volume_stats_period;
  volumes_ = std::make_unique<VolumeManager>(registry_, *plugins_, directory_, *status_, vm);
  BERTH_RETURN_IF_ERROR(volumes_->Start());
  watcher_ = std::make_unique<PluginWatcher>(registration_dir_, *plugins_);
  BERTH_RETURN_IF_ERROR(watcher_->Start());
  {
    absl::MutexLock lock(&mu_);
    stop_ = false;
  }
  static_thread_ = std::thread([this] { StaticLoop(); });
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
        spdlog::warn("node {}: registering driver {} at {}: {}", options_.node_name, name, endpoint, std::string(st.message()));
      }
    }
  }
}

}  // namespace berth::node
