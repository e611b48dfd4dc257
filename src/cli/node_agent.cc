#include "cli/node_agent.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "api/names.h"
#include "client/drivers.h"
#include "client/remote_api.h"
#include "common/fs.h"
#include "common/signals.h"
#include "common/status.h"
#include "common/strings.h"
#include "csi/call_metrics.h"
#include "csi/endpoint.h"
#include "metrics/prometheus.h"
#include "node/agent.h"
#include "spdlog/spdlog.h"

namespace berth::cli {
namespace {

// Replaces `path` with `text` atomically (readers see the old or the new).
void WriteAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    if (!out) {
      spdlog::warn("cannot write {}", tmp);
      return;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) spdlog::warn("cannot rename {} to {}", tmp, path);
}

// Writes the node's volume statistics and CSI call metrics as Prometheus
// text for berth up's /metrics.
void WriteMetrics(node::NodeAgent& agent, const std::string& data_dir, const std::string& node) {
  std::string stats;
  node::VolumeManager::WriteStatsMetrics(&stats, agent.volumes().Stats());
  WriteAtomically(VolumeStatsFile(data_dir, node), stats);
  std::string calls;
  csi::CallMetrics::Kubelet().WriteSamples(&calls, {{"node", node}});
  WriteAtomically(CsiCallsFile(data_dir, node), calls);
}

// The agent's own families (berth's names). Each agent writes its samples
// to AgentMetricsFile; berth up adds the headers (WriteAgentMetrics).
struct AgentFamily {
  const char* name;
  metrics::MetricType type;
  const char* help;
};
constexpr AgentFamily kAgentFamilies[] = {
    {"berth_node_agent_start_time_seconds", metrics::MetricType::kGauge,
     "Start time of the node agent process since unix epoch in seconds."},
    {"berth_volume_manager_reconciles_total", metrics::MetricType::kCounter,
     "Reconcile passes the node's volume manager completed since its agent started (all after the "
     "reconstruction of its state from disk)."},
    {"berth_volume_manager_operations", metrics::MetricType::kGauge,
     "Volume operations (stage, publish, expand, unpublish, unstage) queued or running at the end of the volume "
     "manager's last reconcile pass."},
};

// Writes the agent's samples: at start (no pass yet, before reconstruction,
// so the file never shows a previous agent's count beside this one's start
// time) and after every reconcile pass, so a reader sees a pass as soon as
// it ends.
void WriteAgentSamples(const std::string& data_dir, const std::string& node, absl::Time start,
                       const node::VolumeManager::ReconcileProgress& progress) {
  const metrics::Labels labels = {{"node", node}};
  std::string out;
  metrics::WriteSample(&out, kAgentFamilies[0].name, labels, absl::ToDoubleSeconds(start - absl::UnixEpoch()));
  metrics::WriteSample(&out, kAgentFamilies[1].name, labels, static_cast<double>(progress.passes));
  metrics::WriteSample(&out, kAgentFamilies[2].name, labels, static_cast<double>(progress.operations));
  WriteAtomically(AgentMetricsFile(data_dir, node), out);
}

}  // namespace

std::string AgentMetricsFile(const std::string& data_dir, const std::string& node) {
  return NodeDir(data_dir, node) + "/agent.prom";
}

void WriteAgentMetrics(std::string* out, const std::vector<std::string>& node_samples) {
  for (const auto& family : kAgentFamilies) {
    const std::string_view name = family.name;
    std::string lines;
    for (const auto& text : node_samples) {
      for (std::string_view rest = text; !rest.empty();) {
        const size_t nl = rest.find('\n');
        const std::string_view line = rest.substr(0, nl == std::string_view::npos ? rest.size() : nl + 1);
        rest.remove_prefix(line.size());
        if (line.size() > name.size() && line.substr(0, name.size()) == name &&
            (line[name.size()] == '{' || line[name.size()] == ' ')) {
          lines.append(line);
          if (line.back() != '\n') lines.push_back('\n');
        }
      }
    }
    if (lines.empty()) continue;
    metrics::WriteFamily(out, family.name, family.type, family.help);
    out->append(lines);
  }
}

std::string NodeDir(const std::string& data_dir, const std::string& node) { return StrCat(data_dir, "/nodes/", node); }

std::string VolumeStatsFile(const std::string& data_dir, const std::string& node) {
  return NodeDir(data_dir, node) + "/volume-stats.prom";
}

std::string CsiCallsFile(const std::string& data_dir, const std::string& node) {
  return NodeDir(data_dir, node) + "/csi-calls.prom";
}

absl::Status ValidateNodeAgentOptions(const NodeAgentOptions& o) {
  if (o.node_name.empty()) return absl::InvalidArgumentError("--node is required");
  // The name becomes a directory: a DNS subdomain has no '/' and no "..".
  if (absl::Status st = api::ValidateDns1123Subdomain("--node", o.node_name); !st.ok()) {
    return absl::InvalidArgumentError(st.message());
  }
  if (o.heartbeat <= absl::ZeroDuration()) return absl::InvalidArgumentError("--heartbeat must be positive");
  if (o.volume_stats_period_seconds < 0) {
    return absl::InvalidArgumentError("--volume-stats-period must not be negative");
  }
  if (!o.runtime_endpoint.empty()) {
    BERTH_RETURN_IF_ERROR(csi::ParseUnixEndpoint(o.runtime_endpoint).status());
  }
  for (const auto& d : o.static_drivers) {
    const size_t eq = d.find('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError(StrCat("--static-driver \"", d, "\": want NAME=unix:///path/csi.sock"));
    }
    BERTH_RETURN_IF_ERROR(csi::ParseUnixEndpoint(d.substr(eq + 1)).status());
  }
  return absl::OkStatus();
}

absl::Status RunNodeAgent(const NodeAgentOptions& o) {
  const absl::Time start = absl::Now();
  BERTH_RETURN_IF_ERROR(ValidateNodeAgentOptions(o));
  const std::string dir = NodeDir(o.data_dir, o.node_name);
  const std::string root = dir + "/kubelet";
  BERTH_RETURN_IF_ERROR(MakeDirs(root, 0750));
  // This agent's numbers replace a predecessor's at once (no pass yet).
  WriteAgentSamples(o.data_dir, o.node_name, start, {});
  const std::string pod_logs = o.data_dir + "/pods";
  BERTH_RETURN_IF_ERROR(MakeDirs(pod_logs, 0700));

  auto api = client::RemoteApi::ForDataDir(o.data_dir);
  // berth up starts the agents right after the API; a restarted agent may
  // find the API restarting too.
  const absl::Time deadline = absl::Now() + o.api_wait;
  while (true) {
    auto ns = api->Get(*api::FindResource("", "namespaces"), "", "default");
    if (ns.ok()) break;
    if (absl::Now() >= deadline) {
      return absl::UnavailableError(StrCat("node agent ", o.node_name, ": berth's API at ", o.data_dir,
                                           "/api.sock did not answer: ", ns.status().message()));
    }
    absl::SleepFor(absl::Milliseconds(100));
  }

  client::DriverDirectory directory;
  node::NodeAgent agent(
      *api, directory,
      node::NodeAgent::Options{.node_name = o.node_name,
                               .root = root,
                               .labels = {},
                               .heartbeat = o.heartbeat,
                               .workers = 4,
                               .volume_stats_period = absl::Seconds(o.volume_stats_period_seconds),
                               .mount_table = ReadMountTable,
                               .runtime_endpoint = o.runtime_endpoint,
                               .pod_log_root = pod_logs,
                               .host_ip = o.host_ip,
                               .on_volume_pass = [&](const node::VolumeManager::ReconcileProgress& progress) {
                                 WriteAgentSamples(o.data_dir, o.node_name, start, progress);
                               }});
  for (const auto& d : o.static_drivers) {
    const size_t eq = d.find('=');
    agent.AddStaticDriver(d.substr(0, eq), d.substr(eq + 1));
  }
  BERTH_RETURN_IF_ERROR(agent.Start());
  spdlog::info("node agent {} running (pid {})", o.node_name, ::getpid());

  // Volume statistics and CSI call metrics for berth up's /metrics, until a
  // termination signal.
  const absl::Duration stats_every = o.volume_stats_period_seconds > 0
                                         ? std::min(absl::Seconds(o.volume_stats_period_seconds), absl::Seconds(10))
                                         : absl::Seconds(10);
  int sig = 0;
  while ((sig = WaitForTerminationSignal(stats_every)) == 0) WriteMetrics(agent, o.data_dir, o.node_name);
  spdlog::info("node agent {}: signal {}: stopping (mounts and containers stay)", o.node_name, sig);
  agent.Stop();
  return absl::OkStatus();
}

}  // namespace berth::cli
