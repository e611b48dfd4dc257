// The node agent: kubelet's storage side for one node — the Node object,
// its status and its lease (NodeStatus), plugin registration (the plugins_registry watcher and
// the CSI plugin handler, which publishes CSINode and the node ID), and the
// volume manager.
//
//   NodeAgent agent(registry, directory, {.node_name = "node-1", .root = "/var/lib/berth/nodes/node-1"});
//   BERTH_RETURN_IF_ERROR(agent.Start());
//   agent.AddStaticDriver("hostpath.csi.k8s.io", "/run/hostpath/csi.sock");  // --external-driver
//
// Thread-safety: Start/Stop from one thread; the rest is thread-safe.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "apiserver/api.h"
#include "client/drivers.h"
#include "common/clock.h"
#include "cri/runtime.h"
#include "node/plugins/csi_plugins.h"
#include "node/plugins/plugin_watcher.h"
#include "node/pods/pod_workers.h"
#include "node/status/node_status.h"
#include "node/volumes/volume_manager.h"

namespace berth::node {

class NodeAgent {
 public:
  struct Options {
    std::string node_name;
    std::string root;  // the node's kubelet root (canonical, absolute)
    std::map<std::string, std::string> labels;
    // The lease renewal interval and how often the node status is computed
    // (kubelet: 10 s each; see NodeStatus).
    absl::Duration heartbeat = absl::Seconds(10);
    int workers = 4;
    // NodeGetVolumeStats of every published volume this often (zero: off).
    absl::Duration volume_stats_period = absl::Minutes(1);
    // The mount table the volume manager reads (tests substitute one).
    std::function<absl::StatusOr<std::vector<MountEntry>>()> mount_table = ReadMountTable;
    // Time for the volume manager's backoffs and resyncs and for the node's
    // lease and status (null: RealClock()).
    Clock* clock = nullptr;
    // The pod workers' answers (see VolumeManager::Options); unset: no
    // container runtime. Set by the agent itself when `runtime_endpoint` is.
    std::function<bool(const std::string& pod_uid)> containers_may_run = nullptr;
    bool runtime_owns_pod_status = false;
    // The node status is written at least this often even when unchanged.
    absl::Duration status_report = absl::Minutes(1);
    // TEST ONLY: see NodeStatus::Options::paused_for_test.
    std::function<bool()> paused_for_test = nullptr;
    // The CRI runtime that runs this node's pods (unix:///...); empty: none,
    // pods are Running once their volumes are (volume-only mode).
    std::string runtime_endpoint{};
    // With a runtime: where pod logs go (<pod_log_root>/<ns>_<name>_<uid>/),
    // status.hostIP, and how many pods sync at once (the clock is `clock`).
    std::string pod_log_root{};
    std::string host_ip{};
    int pod_workers = 8;
    // After every reconcile pass of the volume manager (see
    // VolumeManager::Options::on_pass).
    std::function<void(const VolumeManager::ReconcileProgress&)> on_volume_pass = nullptr;
  };
  NodeAgent(apiserver::Api& registry, client::DriverDirectory& directory, Options options);
  ~NodeAgent();  // Stop()

  absl::Status Start();
  // Stops every loop; mounts and registrations stay as they are (the next
  // start picks them up).
  void Stop();

  // Registers a driver that has no registration socket (berth up
  // --external-driver), retrying until it answers.
  void AddStaticDriver(const std::string& name, const std::string& endpoint) ABSL_LOCKS_EXCLUDED(mu_);

  VolumeManager& volumes() { return *volumes_; }
  // Null without a runtime.
  pods::PodWorkers* pods() { return pods_.get(); }
  CsiPlugins& plugins() { return *plugins_; }
  const PluginWatcher& plugin_watcher() const { return *watcher_; }
  const std::string& registration_dir() const { return registration_dir_; }

 private:
  void StaticLoop();

  apiserver::Api& registry_;
  client::DriverDirectory& directory_;
  const Options options_;
  const std::string registration_dir_;
  std::unique_ptr<NodeStatus> status_;
  std::unique_ptr<CsiPlugins> plugins_;
  std::unique_ptr<PluginWatcher> watcher_;
  std::unique_ptr<VolumeManager> volumes_;
  VolumeManager* volumes_raw_ = nullptr;  // for the pod workers' view of it
  std::unique_ptr<cri::GrpcRuntime> runtime_;
  std::unique_ptr<pods::PodVolumes> pod_volumes_;
  std::unique_ptr<pods::PodWorkers> pods_;
  std::thread static_thread_;
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::string, std::string> static_drivers_ ABSL_GUARDED_BY(mu_);  // name → endpoint
};

}  // namespace berth::node
