// berth-csi's configuration, as given on the command line, and its checks.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace berth::driver {

inline constexpr char kDefaultDriverName[] = "local.csi.berth.io";
inline constexpr char kDefaultKubeletRoot[] = "/var/lib/kubelet";

struct DriverOptions {
  std::string endpoint;         // unix:///abs/path or /abs/path
  std::string node_id;          // this node's ID in NodeGetInfo and topology
  std::string pool;             // pool directory (absolute)
  std::string pool_image;       // optional self-contained pool image file
  int64_t pool_size_bytes = 0;  // size of a new pool image
  // Leave the pool image sparse: it takes host space only as it is written,
  // and the pool's capacity is bounded by what the host has free.
  bool pool_sparse = false;
  // Fraction of the pool's (overprovisioned or directory pools) or the
  // host's (sparse pool image) filesystem past which it is nearly full:
  // provisioning stops and the pool reports pressure.
  double high_watermark = 0.9;
  std::string driver_name = kDefaultDriverName;
  std::string kubelet_root = kDefaultKubeletRoot;
  double overprovision_ratio = 1.0;  // thin provisioning factor
  int64_t max_volumes = 0;           // NodeGetInfo max_volumes_per_node; 0 = no limit
  // Advertise the controller's EXPAND_VOLUME. Off for deployments where the
  // caller of ControllerExpandVolume cannot reach the node holding the volume
  // (a cluster-wide external-resizer): expansion is then node-only, and
  // NodeExpandVolume on the volume's node grows image and filesystem.
  bool controller_expansion = true;
};

// INVALID_ARGUMENT naming the flag when a value is unusable:
//  - driver name: the spec's rules (at most 63 characters, alphanumerics,
//    '-', '_' and '.', starting and ending with an alphanumeric);
//  - node id: non-empty, at most 256 bytes, printable ASCII;
//  - pool, kubelet root, pool image: absolute paths without "..";
//  - pool image needs a positive pool size when the image does not exist yet.
absl::Status ValidateDriverOptions(const DriverOptions& options);

// The CSI spec's rule for a plugin name (GetPluginInfoResponse.name).
absl::Status ValidateDriverName(const std::string& name);

}  // namespace berth::driver
