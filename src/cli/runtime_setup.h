// berth up's container runtimes: for each node, berth's own containerd
// (cri/containerd.h: files under <data>/containerd/<node>/, a supervised
// child, berth's images imported at start), an existing CRI runtime
// (--container-runtime-endpoint), or none (--runtime=none: volume-only mode).
// The endpoint a node uses is also written to
// <data>/nodes/<node>/runtime-endpoint, where `berth exec` and `berth image`
// find it.
//
// Thread-safety: used from RunUp's thread only.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cli/supervisor.h"
#include "cri/containerd.h"

namespace berth::cli {

struct RuntimeOptions {
  std::string runtime = "containerd";  // containerd | none
  std::string endpoint;                // an existing CRI runtime (unix:///...) instead of berth's
  std::string pod_cidr = "10.88.0.0/16";
  std::string images_dir;  // default: images/ beside the berth binary
};

// INVALID_ARGUMENT naming the flag.
absl::Status ValidateRuntimeOptions(const RuntimeOptions& options, int nodes);

// The endpoint file of a node (read by the CLI).
std::string RuntimeEndpointFile(const std::string& data_dir, const std::string& node);

class NodeRuntimes {
 public:
  // Plans each node's runtime: writes berth's containerd files and adds one
  // supervised containerd per node, or records the external endpoint.
  static absl::StatusOr<std::unique_ptr<NodeRuntimes>> Prepare(const RuntimeOptions& options,
                                                               const std::string& data_dir,
                                                               const std::vector<std::string>& nodes,
                                                               Supervisor& supervisor);

  // The CRI endpoint of `node` ("" without a runtime).
  std::string Endpoint(const std::string& node) const;
  // Once the supervisor runs: waits until each runtime answers (berth's
  // containerd: and imports berth's pause and toolbox images into it).
  absl::Status WaitReady(absl::Duration timeout);

 private:
  NodeRuntimes() = default;
  std::string images_dir_;
  std::map<std::string, std::string> endpoints_;             // node →
  std::map<std::string, cri::ContainerdSetup> containerds_;  // node → berth's own
};

// The first IPv4 address of this host outside loopback and berth's bridges
// (status.hostIP), "" if none.
std::string HostIp();

}  // namespace berth::cli
