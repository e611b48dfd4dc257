// `berth node-agent`: one node's agent (kubelet's role) as a process of its
// own, talking to berth's API over the root-only socket. `berth up` starts
// one per node under its supervisor (pid in <data>/nodes/<node>/agent.pid),
// so an agent that dies or hangs never takes the control plane with it, and
// the control plane's death leaves the node's mounts and containers alone.
//
// The agent also writes its volume statistics (kubelet_volume_stats_*) to
// <data>/nodes/<node>/volume-stats.prom, its CSI calls to csi-calls.prom and
// its volume manager's progress to agent.prom, for berth up's /metrics.
//
// Thread-safety: RunNodeAgent is called once, from main.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace berth::cli {

struct NodeAgentOptions {
  std::string data_dir = "/var/lib/berth";
  std::string node_name;
  absl::Duration heartbeat = absl::Seconds(10);
  int volume_stats_period_seconds = 60;
  std::string runtime_endpoint;  // unix:///...; empty: volumes only
  std::string host_ip;
  std::vector<std::string> static_drivers;  // NAME=unix:///path/csi.sock
  // How long to wait for the API socket at start (berth up starts agents
  // right after the API).
  absl::Duration api_wait = absl::Minutes(1);
};

// The node's directory under the data dir, its kubelet root and the file
// of its volume statistics.
std::string NodeDir(const std::string& data_dir, const std::string& node);
std::string VolumeStatsFile(const std::string& data_dir, const std::string& node);
// The agent's CSI calls (kubelet's csi_operations_seconds samples, labelled
// with the node, without HELP/TYPE: berth up writes the family header once
// for all nodes).
std::string CsiCallsFile(const std::string& data_dir, const std::string& node);
// The agent's own samples (berth_node_agent_start_time_seconds,
// berth_volume_manager_reconciles_total, berth_volume_manager_operations,
// labelled with the node), rewritten at start and after every reconcile
// pass of its volume manager; a reader tells a restarted agent's numbers
// from its predecessor's by the start time.
std::string AgentMetricsFile(const std::string& data_dir, const std::string& node);
// berth up's /metrics: those families, each with its HELP/TYPE once and then
// the samples of every node (`node_samples`: the nodes' AgentMetricsFile
// texts). Lines of other names are ignored.
void WriteAgentMetrics(std::string* out, const std::vector<std::string>& node_samples);

absl::Status ValidateNodeAgentOptions(const NodeAgentOptions& options);

// Runs until SIGTERM/SIGINT; OK after a clean stop.
absl::Status RunNodeAgent(const NodeAgentOptions& options);

}  // namespace berth::cli
