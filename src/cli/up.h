// `berth up`: the whole stack on one machine in one foreground process —
// store + API server, controllers + scheduler, one node agent per
// (simulated) node — supervising one berth-csi per node on its own pool.
//
// Data directory layout (docs/architecture.md):
//   <data>/state.db, api.sock, kubeconfig, ...   the control plane
//   <data>/nodes/<node>/kubelet/                  the node's kubelet root
//   <data>/nodes/<node>/pool.img, pool/           its pool image and mount
//   <data>/nodes/<node>/berth-csi.log, .pid       its driver's log and PID
//   <data>/nodes/<node>/runtime-endpoint          its CRI runtime's socket
//   <data>/containerd/<node>/                     berth's containerd for it
//   <data>/pods/<namespace>_<name>_<uid>/         container logs
//
// Thread-safety: RunUp is called once, from main.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "cli/runtime_setup.h"
#include "http/server.h"

namespace berth::cli {

inline constexpr char kBerthDriver[] = "local.csi.berth.io";

struct UpOptions {
  std::string data_dir = "/var/lib/berth";
  std::string pool;  // an existing pool directory (one node) instead of images
  std::string pool_size = "20Gi";
  // Leave new pool images sparse (berth-csi --pool-sparse): they take host
  // space as it is written and each pool's capacity stays within what the
  // host has free. By default they are allocated in full when made.
  bool pool_sparse = false;
  int nodes = 1;
  std::string node_name;                      // default: the host name; with --nodes N, <name>-1 ... <name>-N
  std::vector<std::string> external_drivers;  // NAME=unix:///path/csi.sock
  // Drivers whose controller side the upstream kubernetes-csi sidecars
  // serve against this API (berth's per-driver controllers leave them be);
  // their node side registers with a node agent as any driver does.
  std::vector<std::string> sidecar_drivers;
  // false (--no-snapshot-controller): VolumeSnapshots are handled by the
  // upstream snapshot-controller run against this API.
  bool snapshot_controller = true;
  std::string api_address = "127.0.0.1:7443";
  std::string csi_binary;  // default: berth-csi beside the berth binary
  std::string log_level = "info";
  // NodeGetVolumeStats of published volumes, served as kubelet_volume_stats_*
  // on the API server's /metrics (kubelet's --volume-stats-agg-period).
  int volume_stats_period_seconds = 60;
  // kube-controller-manager's --node-monitor-grace-period: a node whose lease
  // is not renewed for this long is marked Unknown and tainted. Below 40 s
  // the agents renew their leases every quarter of it instead of every 10 s.
  std::string node_monitor_grace_period = "40s";
  // The API server's threads, connection and in-flight limits, deadlines.
  http::HttpServer::Limits api_limits;
  // Containers: berth's containerd per node (default), an existing CRI
  // runtime, or none (cli/runtime_setup.h).
  RuntimeOptions runtime{};
  // --backup-location DIR: a backup repository in DIR (made when missing)
  // and the BackupStorageLocation "default" naming it (cli/backup_location.h).
  std::string backup_location;
};

// Checks options; INVALID_ARGUMENT naming the flag.
absl::Status ValidateUpOptions(const UpOptions& options);

// The node names `berth up` uses.
std::vector<std::string> UpNodeNames(const UpOptions& options);

// Runs until SIGTERM/SIGINT; OK after a clean stop.
absl::Status RunUp(UpOptions options);

}  // namespace berth::cli
