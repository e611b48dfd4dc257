// The CSI side of plugin registration on one node (kubelet's csi plugin
// handler + nodeinfomanager): a registered driver is asked NodeGetInfo and
// NodeGetCapabilities, then published to the cluster —
//   - the Node's `csi.volume.kubernetes.io/nodeid` annotation (JSON map
//     driver → node ID) and its labels from accessible_topology (a label
//     already set to another value is a collision: registration fails);
//   - the CSINode `spec.drivers[]` entry (nodeID, sorted topologyKeys,
//     allocatable.count from max_volumes_per_node), creating the CSINode
//     (owned by the Node) when absent;
//   - the DriverDirectory entry (driver, node) → endpoint, through which
//     the controllers and the volume manager reach it.
// Deregistration (or a failed NodeGetInfo) undoes the annotation, the
// CSINode entry and the directory entry; topology labels stay, as in
// kubelet.
//
// Thread-safety: thread-safe.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "apiserver/api.h"
#include "client/drivers.h"
#include "csi/v1/csi.pb.h"
#include "node/plugins/plugin_watcher.h"

namespace berth::node {

inline constexpr char kAnnNodeId[] = "csi.volume.kubernetes.io/nodeid";

class CsiPlugins final : public PluginHandler {
 public:
  struct Driver {
    std::string endpoint;
    std::string node_id;
    // NodeServiceCapability::RPC::Type values the driver reported.
    std::set<int> capabilities;
    bool Has(::csi::v1::NodeServiceCapability::RPC::Type t) const { return capabilities.count(t) > 0; }
  };

  CsiPlugins(apiserver::Api& registry, std::string node_name, client::DriverDirectory& directory,
             absl::Duration call_timeout = absl::ZeroDuration());  // 0: the call layer's 30 s

  // PluginHandler
  absl::Status RegisterPlugin(const std::string& name, const std::string& endpoint,
                              const std::vector<std::string>& versions) override ABSL_LOCKS_EXCLUDED(mu_);
  void DeregisterPlugin(const std::string& name) override ABSL_LOCKS_EXCLUDED(mu_);

  std::optional<Driver> Get(const std::string& name) const ABSL_LOCKS_EXCLUDED(mu_);
  // Called after every registration change (the volume manager wakes up).
  void SetOnChange(std::function<void()> fn) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Writes the node ID annotation, topology labels and the CSINode entry.
  absl::Status Install(const std::string& name, const ::csi::v1::NodeGetInfoResponse& info);
  absl::Status Uninstall(const std::string& name);
  void Changed() ABSL_LOCKS_EXCLUDED(mu_);

  apiserver::Api& registry_;
  const std::string node_name_;
  client::DriverDirectory& directory_;
  const absl::Duration call_timeout_;
  mutable absl::Mutex mu_;
  std::map<std::string, Driver> drivers_ ABSL_GUARDED_BY(mu_);
  std::function<void()> on_change_ ABSL_GUARDED_BY(mu_);
};

// Reads the object, applies `mutate` (false: nothing to write) and writes
// it, retrying on conflicts. NOT_FOUND when the object does not exist.
absl::Status UpdateObject(apiserver::Api& registry, const api::KindInfo& kind, const std::string& ns,
                          const std::string& name, apiserver::Subresource sub,
                          const std::function<bool(nlohmann::json&)>& mutate);

}  // namespace berth::node
