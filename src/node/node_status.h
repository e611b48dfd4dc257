// The Node object of one node agent (kubelet's node status): created at
// start with kubernetes.io/hostname and kubernetes.io/os labels, a Ready
// condition whose lastHeartbeatTime is renewed every heartbeat, and
// status.volumesInUse as the volume manager reports it (the attach-detach
// controller waits for a volume to leave that list before detaching it).
//
// Thread-safety: thread-safe.
#pragma once

#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "apiserver/registry.h"

namespace berth::node {

class NodeStatus {
 public:
  NodeStatus(apiserver::Registry& registry, std::string node_name, std::map<std::string, std::string> labels = {},
             absl::Duration heartbeat = absl::Seconds(10));
  ~NodeStatus();  // Stop()

  // Creates the Node (or adopts the existing one: labels added, Ready set)
  // and starts the heartbeat.
  absl::Status Start();
  void Stop();

  // Writes status.volumesInUse (sorted) when it differs from the last write.
  absl::Status SetVolumesInUse(std::vector<std::string> volumes) ABSL_LOCKS_EXCLUDED(mu_);

  const std::string& name() const { return node_name_; }

 private:
  absl::Status Heartbeat();

  apiserver::Registry& registry_;
  const std::string node_name_;
  const std::map<std::string, std::string> labels_;
  const absl::Duration heartbeat_;
  std::thread thread_;
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<std::vector<std::string>> in_use_ ABSL_GUARDED_BY(mu_);  // last written
};

}  // namespace berth::node
