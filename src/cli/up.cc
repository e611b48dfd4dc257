#include "cli/up.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <set>

#include "apiserver/control_plane.h"
#include "cli/backup_location.h"
#include "cli/hook_runner.h"
#include "cli/node_agent.h"
#include "cli/snapshot_commands.h"
#include "cli/supervisor.h"
#include "client/drivers.h"
#include "common/exec.h"
#include "common/fs.h"
#include "common/signals.h"
#include "common/status.h"
#include "common/strings.h"
#include "common/units.h"
#include "controllers/manager.h"
#include "csi/call_metrics.h"
#include "csi/endpoint.h"
#include "csi/registration.h"
#include "nlohmann/json.hpp"
#include "node/plugins/plugin_watcher.h"
#include "node/pods/exec.h"
#include "node/pods/logs.h"
#include "spdlog/spdlog.h"

namespace berth::cli {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

std::string Hostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "";
  return buf;
}

// A host name as a node name: lower case, DNS label characters only.
std::string NodeNameFrom(std::string host) {
  std::string out;
  for (char c : host) {
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.') out.push_back(c);
  }
  while (!out.empty() && !std::isalnum(static_cast<unsigned char>(out.front()))) out.erase(out.begin());
  while (!out.empty() && !std::isalnum(static_cast<unsigned char>(out.back()))) out.pop_back();
  return out.empty() ? "berth-node" : out.substr(0, 60);
}

struct External {
  std::string name;
  std::string endpoint;
};

absl::StatusOr<External> ParseExternal(const std::string& text) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos) {
    return absl::InvalidArgumentError(StrCat("--external-driver \"", text, "\": want NAME=unix:///path/csi.sock"));
  }
  External e{.name = text.substr(0, eq), .endpoint = text.substr(eq + 1)};
  if (absl::Status st = csi::CheckDriverName(e.name); !st.ok()) {
    return absl::InvalidArgumentError(StrCat("--external-driver: ", st.message()));
  }
  if (e.name == kBerthDriver) {
    return absl::InvalidArgumentError(StrCat("--external-driver: ", kBerthDriver, " is berth's own driver"));
  }
  if (auto path = csi::ParseUnixEndpoint(e.endpoint); !path.ok()) {
    return absl::InvalidArgumentError(StrCat("--external-driver ", e.name, ": ", path.status().message()));
  }
  return e;
}

using client::K;

// Creates the objects a fresh cluster needs, leaving existing ones (the
// user may have changed them) alone.
absl::Status CreateDefaults(apiserver::Registry& registry) {
  const std::vector<std::pair<const api::KindInfo*, json>> defaults = {
      // Where node agents keep their heartbeat leases.
      {&K("namespaces"), {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", "kube-node-lease"}}}}},
      {&K("csidrivers", "storage.k8s.io"),
       {{"apiVersion", "storage.k8s.io/v1"},
        {"kind", "CSIDriver"},
        {"metadata", {{"name", kBerthDriver}}},
        {"spec",
         {{"attachRequired", true},
          {"podInfoOnMount", false},
          {"storageCapacity", true},
          {"fsGroupPolicy", "File"},
          {"requiresRepublish", false},
          {"volumeLifecycleModes", json::array({"Persistent"})}}}}},
      {&K("storageclasses", "storage.k8s.io"),
       {{"apiVersion", "storage.k8s.io/v1"},
        {"kind", "StorageClass"},
        {"metadata",
         {{"name", "berth-local"}, {"annotations", {{"storageclass.kubernetes.io/is-default-class", "true"}}}}},
        {"provisioner", kBerthDriver},
        {"volumeBindingMode", "WaitForFirstConsumer"},
        {"allowVolumeExpansion", true},
        {"reclaimPolicy", "Delete"}}},
      {&K("volumesnapshotclasses", "snapshot.storage.k8s.io"),
       {{"apiVersion", "snapshot.storage.k8s.io/v1"},
        {"kind", "VolumeSnapshotClass"},
        {"metadata",
         {{"name", "berth-snapshots"}, {"annotations", {{"snapshot.storage.kubernetes.io/is-default-class", "true"}}}}},
        {"driver", kBerthDriver},
        {"deletionPolicy", "Delete"}}},
  };
  for (const auto& [kind, object] : defaults) {
    auto created = registry.Create(*kind, "", object);
    if (!created.ok() && created.status().code() != absl::StatusCode::kAlreadyExists) {
      return absl::Status(created.status().code(),
                          StrCat("creating the default ", kind->kind, ": ", created.status().message()));
    }
  }
  return absl::OkStatus();
}

// The controllers' side of a node's plugin registration: the node agent
// registers the node's drivers for the node; berth up follows the same
// directory to learn the endpoints its controllers call (as the upstream
// sidecars beside each driver know its socket).
class RegistrationFollower final : public node::PluginHandler {
 public:
  RegistrationFollower(client::DriverDirectory& directory, std::string node, std::string dir)
      : directory_(directory), node_(std::move(node)), watcher_(std::move(dir), *this, {.notify = false}) {}
  ~RegistrationFollower() override { Stop(); }
  absl::Status Start() { return watcher_.Start(); }
  void Stop() { watcher_.Stop(); }

  absl::Status RegisterPlugin(const std::string& name, const std::string& endpoint,
                              const std::vector<std::string>&) override {
    directory_.Add(name, node_, endpoint);
    return absl::OkStatus();
  }
  void DeregisterPlugin(const std::string& name) override { directory_.Remove(name, node_); }

 private:
  client::DriverDirectory& directory_;
  const std::string node_;
  node::PluginWatcher watcher_;
};

// Waits until berth-csi has registered on every node (its pool is made and
// mounted then), saying so per node; gives up with a warning after a
// minute (the logs say why). Returns a termination signal that came
// meanwhile, else 0.
int WaitForRegistrations(const client::DriverDirectory& directory, const std::vector<std::string>& nodes,
                         const std::string& data_dir);

// berth up's progress on stdout, one line per step, so a first start (pool
// images, containerd, image imports) says what it is doing.
void Say(std::string_view text) { std::cout << "berth up: " << text << "\n" << std::flush; }

int WaitForRegistrations(const client::DriverDirectory& directory, const std::vector<std::string>& nodes,
                         const std::string& data_dir) {
  Say(StrCat("waiting for berth-csi to register on ", nodes.size(), " node(s)"));
  std::set<std::string> pending(nodes.begin(), nodes.end());
  const absl::Time deadline = absl::Now() + absl::Minutes(1);
  while (!pending.empty()) {
    for (const auto& n : directory.Nodes(kBerthDriver)) {
      if (pending.erase(n) > 0) Say(StrCat("node ", n, ": berth-csi registered, its pool is ready"));
    }
    if (pending.empty()) break;
    if (absl::Now() >= deadline) {
      for (const auto& n : pending) {
        spdlog::warn("berth-csi on node {} has not registered after a minute; see {}/berth-csi.log", n,
                     NodeDir(data_dir, n));
      }
      break;
    }
    if (int sig = WaitForTerminationSignal(absl::Milliseconds(200)); sig != 0) return sig;
  }
  return 0;
}

}  // namespace

std::vector<std::string> UpNodeNames(const UpOptions& options) {
  const std::string base = options.node_name.empty() ? NodeNameFrom(Hostname()) : options.node_name;
  if (options.nodes <= 1) return {base};
  std::vector<std::string> names;
  for (int i = 1; i <= options.nodes; ++i) names.push_back(StrCat(base, "-", i));
  return names;
}

absl::Status ValidateUpOptions(const UpOptions& o) {
  if (!IsCanonicalAbsolutePath(o.data_dir)) {
    return absl::InvalidArgumentError(StrCat("--data-dir \"", o.data_dir, "\": want a canonical absolute path"));
  }
  if (o.nodes < 1 || o.nodes > 64) return absl::InvalidArgumentError("--nodes must be between 1 and 64");
  absl::Duration grace;
  if (!absl::ParseDuration(o.node_monitor_grace_period, &grace) || grace < absl::Seconds(2) || grace > absl::Hours(1)) {
    return absl::InvalidArgumentError(StrCat("--node-monitor-grace-period \"", o.node_monitor_grace_period,
                                             "\": want a duration between 2s and 1h (e.g. 40s)"));
  }
  if (o.volume_stats_period_seconds < 1 || o.volume_stats_period_seconds > 86400) {
    return absl::InvalidArgumentError("--volume-stats-period must be between 1 and 86400 seconds");
  }
  if (!o.pool.empty()) {
    if (!IsCanonicalAbsolutePath(o.pool)) {
      return absl::InvalidArgumentError(StrCat("--pool \"", o.pool, "\": want a canonical absolute path"));
    }
    if (o.nodes > 1) return absl::InvalidArgumentError("--pool serves one node; use --pool-size with --nodes");
  }
  auto size = ParseByteSize(o.pool_size);
  if (!size.ok()) return absl::InvalidArgumentError(StrCat("--pool-size: ", size.status().message()));
  if (*size < (int64_t{512} << 20)) return absl::InvalidArgumentError("--pool-size must be at least 512Mi");
  if (!o.node_name.empty()) {
    for (char c : o.node_name) {
      if (!std::islower(static_cast<unsigned char>(c)) && !std::isdigit(static_cast<unsigned char>(c)) && c != '-' &&
          c != '.') {
        return absl::InvalidArgumentError(
            StrCat("--node-name \"", o.node_name, "\": lower-case letters, digits, '-' and '.' only"));
      }
    }
  }
  for (const auto& e : o.external_drivers) BERTH_RETURN_IF_ERROR(ParseExternal(e).status());
  for (const auto& name : o.sidecar_drivers) {
    if (absl::Status st = csi::CheckDriverName(name); !st.ok()) {
      return absl::InvalidArgumentError(StrCat("--sidecar-driver: ", st.message()));
    }
    if (name == kBerthDriver) {
      return absl::InvalidArgumentError(StrCat("--sidecar-driver: ", kBerthDriver, " is berth's own driver"));
    }
    for (const auto& e : o.external_drivers) {
      if (e.starts_with(name + "=")) {
        return absl::InvalidArgumentError(
            StrCat("--sidecar-driver ", name, ": also an --external-driver (berth's controllers drive those)"));
      }
    }
  }
  return ValidateRuntimeOptions(o.runtime, o.nodes);
}

namespace {

// berth-csi refuses a pool image its host cannot hold, but under the
// supervisor that is a restart loop and a log line; the sum for all new
// pools is checked here, before anything starts, with the sizes named.
absl::Status CheckRoomForNewPools(const UpOptions& options, const std::vector<std::string>& node_names) {
  if (!options.pool.empty() || options.pool_sparse) return absl::OkStatus();
  BERTH_ASSIGN_OR_RETURN(int64_t size, ParseByteSize(options.pool_size));
  int64_t needed = 0;
  int fresh = 0;
  for (const auto& name : node_names) {
    std::error_code ec;
    if (fs::exists(NodeDir(options.data_dir, name) + "/pool.img", ec)) continue;
    needed += size;
    ++fresh;
  }
  if (fresh == 0) return absl::OkStatus();
  struct statvfs vfs {};
  if (::statvfs(options.data_dir.c_str(), &vfs) != 0) return ErrnoStatus(errno, StrCat("statvfs ", options.data_dir));
  const int64_t free_bytes = static_cast<int64_t>(vfs.f_bavail) * static_cast<int64_t>(vfs.f_frsize);
  if (needed <= free_bytes) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      StrCat(fresh, fresh == 1 ? " new pool image" : " new pool images", " of ", options.pool_size, " need ",
             FormatByteSizeApprox(needed), " but ", options.data_dir, " has only ", FormatByteSizeApprox(free_bytes),
             " free. Free space there, give a smaller --pool-size, or pass --pool-sparse to take the space only as "
             "volumes are written (each pool's capacity then stays within what the host has free)"));
}

}  // namespace

absl::Status RunUp(UpOptions options) {
  BERTH_RETURN_IF_ERROR(ValidateUpOptions(options));
  if (options.csi_binary.empty()) options.csi_binary = ExecutableDir() + "/berth-csi";
  if (::access(options.csi_binary.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(StrCat("berth-csi not found at ", options.csi_binary, " (--csi-binary)"));
  }
  BERTH_RETURN_IF_ERROR(MakeDirs(options.data_dir, 0700));
  // One berth up per data directory.
  const std::string lock_path = options.data_dir + "/berth-up.lock";
  int lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd < 0 || ::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    if (lock_fd >= 0) ::close(lock_fd);
    return absl::FailedPreconditionError(StrCat("another berth up is running on ", options.data_dir));
  }
  std::vector<External> externals;
  for (const auto& e : options.external_drivers) externals.push_back(*ParseExternal(e));

  std::error_code exists_ec;
  const bool first_start = !fs::exists(options.data_dir + "/state.db", exists_ec);
  Say(first_start ? StrCat("first start in ", options.data_dir, ": creating the store",
                           options.api_address.empty() ? "" : ", the API's TLS key, token and kubeconfig")
                  : StrCat("starting in ", options.data_dir, " (the state of the last run is kept)"));
  apiserver::ControlPlane::Options cp_options;
  cp_options.data_dir = options.data_dir;
  cp_options.api_address = options.api_address;
  cp_options.limits = options.api_limits;
  BERTH_ASSIGN_OR_RETURN(auto cp, apiserver::ControlPlane::Start(cp_options));
  apiserver::Registry& registry = cp->registry();
  BERTH_RETURN_IF_ERROR(CreateDefaults(registry));
  if (!options.backup_location.empty()) {
    BERTH_ASSIGN_OR_RETURN(const std::string note, EnsureBackupLocation(registry, options.backup_location));
    Say(note);
  }
  Say(StrCat("API server ready on ", cp->socket_path(),
             cp->kubeconfig_path().empty() ? "" : StrCat(" and https://127.0.0.1:", cp->tcp_port())));

  client::DriverDirectory directory;
  for (const auto& e : externals) directory.Add(e.name, "", e.endpoint);

  // Leases are renewed every 10 s as kubelet does, or four times per grace
  // period when that is shorter (else a healthy node would flap).
  absl::Duration grace = absl::Seconds(40);
  if (!absl::ParseDuration(options.node_monitor_grace_period, &grace)) grace = absl::Seconds(40);  // validated above
  const absl::Duration heartbeat = std::min(absl::Seconds(10), grace / 4);

  // Nodes: an agent and a berth-csi each, and (unless --runtime=none) a
  // container runtime; pod logs are served by the API from <data>/pods.
  Supervisor supervisor;
  if (options.runtime.runtime != "none" || !options.runtime.endpoint.empty()) {
    Say(options.runtime.endpoint.empty() ? "preparing a containerd per node (config, pod network, images)"
                                         : StrCat("using the container runtime at ", options.runtime.endpoint));
  }
  BERTH_ASSIGN_OR_RETURN(auto runtimes,
                         NodeRuntimes::Prepare(options.runtime, options.data_dir, UpNodeNames(options), supervisor));
  const std::string pod_logs = options.data_dir + "/pods";
  BERTH_RETURN_IF_ERROR(MakeDirs(pod_logs, 0700));
  cp->handler().AddSubresource("pods", "log",
                               [&registry, pod_logs](const http::HttpRequest& req, http::ResponseWriter& out,
                                                     const std::string& ns, const std::string& name) {
                                 return node::pods::ServePodLog(registry, pod_logs, ns, name, req, out);
                               });
  // pods/exec and pods/attach: through the pod's node's runtime to its
  // streaming server (node/pods/exec.h). The channels do not dial until used.
  auto node_runtimes = std::make_shared<std::map<std::string, std::unique_ptr<cri::GrpcRuntime>>>();
  for (const std::string& node : UpNodeNames(options)) {
    const std::string endpoint = runtimes->Endpoint(node);
    if (endpoint.empty()) continue;
    BERTH_ASSIGN_OR_RETURN((*node_runtimes)[node],
                           cri::GrpcRuntime::Connect(endpoint, {.retry_for = absl::Seconds(5)}));
  }
  node::pods::RuntimeForNode runtime_for_node =
      [node_runtimes](const std::string& node) -> absl::StatusOr<cri::Runtime*> {
    auto it = node_runtimes->find(node);
    if (it == node_runtimes->end())
      return absl::FailedPreconditionError(
          "berth up runs it with --runtime=none, or it is not a node of this berth up");
    return it->second.get();
  };
  for (const char* sub : {"exec", "attach"}) {
    cp->handler().AddSubresource(
        "pods", sub,
        [&registry, runtime_for_node, sub](const http::HttpRequest& req, http::ResponseWriter& out,
                                           const std::string& ns, const std::string& name) {
          return node::pods::ServePodStream(registry, runtime_for_node, sub, ns, name, req, out);
        },
        {"GET", "POST"});
  }
  // volumesnapshots/allocated and /delta: changed-block tracking answered by
  // the snapshot's CSI driver (cli/snapshot_commands.h). Declared after the
  // directory, so they are switched off before it goes.
  std::unique_ptr<SnapshotMetadataEndpoints> snapshot_metadata =
      ServeSnapshotMetadata(cp->handler(), registry, directory);
  const std::string host_ip = HostIp();
  // Each node's agent is a process of its own (berth node-agent, over the
  // API socket), supervised with its berth-csi: a dead or hung agent never
  // takes the control plane with it. The controllers learn the nodes'
  // drivers by following the same registration directories.
  std::error_code self_ec;
  const std::string self = fs::read_symlink("/proc/self/exe", self_ec).string();
  if (self_ec) return absl::InternalError(StrCat("cannot find berth's own binary: ", self_ec.message()));
  std::vector<std::unique_ptr<RegistrationFollower>> followers;
  std::vector<std::string> node_names = UpNodeNames(options);
  BERTH_RETURN_IF_ERROR(CheckRoomForNewPools(options, node_names));
  for (const std::string& name : node_names) {
    const std::string dir = NodeDir(options.data_dir, name);
    const std::string root = dir + "/kubelet";
    BERTH_RETURN_IF_ERROR(MakeDirs(root, 0750));
    const std::string registration_dir = root + "/plugins_registry";
    std::vector<std::string> agent_argv = {
        self,
        "--data-dir=" + options.data_dir,
        "node-agent",
        "--node=" + name,
        "--heartbeat=" + absl::FormatDuration(heartbeat),
        "--volume-stats-period=" + std::to_string(options.volume_stats_period_seconds),
        "--host-ip=" + host_ip,
        "--log-level=" + options.log_level};
    if (std::string endpoint = runtimes->Endpoint(name); !endpoint.empty()) {
      agent_argv.push_back("--runtime-endpoint=" + endpoint);
    }
    for (const auto& e : externals) agent_argv.push_back("--static-driver=" + e.name + "=" + e.endpoint);
    supervisor.Add({.name = "node-agent/" + name,
                    .argv = agent_argv,
                    .log_file = dir + "/agent.log",
                    .pid_file = dir + "/agent.pid"});
    std::vector<std::string> argv = {
        options.csi_binary, "--endpoint=unix://" + root + "/plugins/" + kBerthDriver + "/csi.sock", "--node-id=" + name,
        "--kubelet-root=" + root, "--registration-dir=" + registration_dir,
        // The pool's pressure on the Node (kubectl describe node), as a
        // node problem detector reports it.
        "--node-conditions", "--api-data-dir=" + options.data_dir, "--log-level=" + options.log_level};
    if (!options.pool.empty()) {
      argv.push_back("--pool=" + options.pool);
      Say(StrCat("node ", name, ": starting its node agent and berth-csi on the pool ", options.pool));
    } else {
      std::error_code image_ec;
      Say(fs::exists(dir + "/pool.img", image_ec)
              ? StrCat("node ", name, ": starting its node agent and berth-csi (pool image ", dir, "/pool.img)")
              : StrCat("node ", name, ": starting its node agent and berth-csi, which makes its ", options.pool_size,
                       options.pool_sparse ? " sparse" : " allocated", " XFS pool image ", dir,
                       "/pool.img (first start)"));
      argv.push_back("--pool=" + dir + "/pool");
      argv.push_back("--pool-image=" + dir + "/pool.img");
      argv.push_back("--pool-size=" + options.pool_size);
      if (options.pool_sparse) argv.push_back("--pool-sparse");
    }
    supervisor.Add({.name = "berth-csi/" + name,
                    .argv = argv,
                    .log_file = dir + "/berth-csi.log",
                    .pid_file = dir + "/berth-csi.pid"});
    followers.push_back(std::make_unique<RegistrationFollower>(directory, name, registration_dir));
  }
  // kubelet's volume stats, one set of families for every node here (a
  // claim's volume is published on one node at a time); each agent writes
  // its node's.
  cp->handler().AddMetricsCollector([data_dir = options.data_dir, node_names](std::string* out) {
    for (const auto& name : node_names) {
      auto text = ReadFile(VolumeStatsFile(data_dir, name));
      if (text.ok()) out->append(*text);
    }
    // The CSI calls: the controllers' (in this process) as the sidecars
    // count them, the node agents' as kubelet does — one family for all
    // nodes, each series labelled with its node.
    csi::CallMetrics::Sidecar().Write(out);
    std::string node_calls;
    for (const auto& name : node_names) {
      auto text = ReadFile(CsiCallsFile(data_dir, name));
      if (text.ok()) node_calls += *text;
    }
    if (!node_calls.empty()) {
      csi::CallMetrics::Kubelet().WriteHeader(out);
      out->append(node_calls);
    }
    // The agents' own: when each started, its volume manager's passes.
    std::vector<std::string> agents;
    for (const auto& name : node_names) {
      auto text = ReadFile(AgentMetricsFile(data_dir, name));
      if (text.ok()) agents.push_back(std::move(*text));
    }
    WriteAgentMetrics(out, agents);
  });
  supervisor.Start();
  absl::Status st = runtimes->WaitReady(absl::Minutes(2));
  for (auto& f : followers) {
    if (!st.ok()) break;
    st.Update(f->Start());
  }
  std::vector<std::string> drivers = {kBerthDriver};
  for (const auto& e : externals) drivers.push_back(e.name);
  controllers::ControllerManager::Options cm_options;
  cm_options.drivers = drivers;
  // GetCapacity is a statfs on a local pool: poll often, placement follows.
  cm_options.capacity_poll_interval = absl::Seconds(10);
  // A driver that registers later through a node's plugins_registry (e.g.
  // with the upstream node-driver-registrar) gets its controllers then.
  cm_options.follow_directory = true;
  cm_options.node_monitor_grace_period = grace;
  cm_options.sidecar_drivers = options.sidecar_drivers;
  cm_options.snapshot_controller = options.snapshot_controller;
  // Backups read and write volumes through each node's berth-csi, staged in
  // the node's kubelet root (where berth-csi accepts paths).
  cm_options.data_mover_work_dir = [data_dir = options.data_dir,
                                    node_names](const std::string& node) -> absl::StatusOr<std::string> {
    if (std::find(node_names.begin(), node_names.end(), node) == node_names.end()) {
      return absl::NotFoundError(StrCat("node ", node, " is not one of this berth up's nodes"));
    }
    return NodeDir(data_dir, node) + "/kubelet/berth-data-mover";
  };
  // Backup hooks run in the pods' containers through their node's runtime.
  CriHookRunner hook_runner(runtime_for_node);
  cm_options.hook_runner = &hook_runner;
  controllers::ControllerManager manager(registry, directory, cm_options);
  if (st.ok()) {
    Say("starting the controllers and the scheduler");
    st = manager.Start();
  }
  int sig = 0;
  if (st.ok()) sig = WaitForRegistrations(directory, node_names, options.data_dir);
  if (st.ok() && sig == 0) {
    std::cout << "berth is up: " << node_names.size() << " node(s), data in " << options.data_dir << "\n"
              << "  API socket: " << cp->socket_path() << " (root only)\n";
    if (!cp->kubeconfig_path().empty()) {
      std::cout << "  kubeconfig: " << cp->kubeconfig_path() << "\n"
                << "  connect:    export KUBECONFIG=" << cp->kubeconfig_path() << "; kubectl get pvc\n";
    }
    for (const auto& driver : options.sidecar_drivers) {
      std::cout << "  sidecar driver " << driver << ": its node plugin registers in " << options.data_dir
                << "/nodes/<node>/kubelet/plugins_registry (kubelet root " << options.data_dir
                << "/nodes/<node>/kubelet); its controller sidecars use "
                << (cp->kubeconfig_path().empty() ? std::string("a kubeconfig, which needs --api-address")
                                                  : "--kubeconfig " + cp->kubeconfig_path())
                << " (docs/api.md)\n";
    }
    std::cout << "  try: berth --data-dir " << options.data_dir << " apply -f examples/claim-and-pod.yaml\n"
              << std::flush;
    sig = WaitForTerminationSignal();
  }
  if (sig != 0) {
    spdlog::info("signal {}: stopping (volumes and data stay in place)", sig);
  }
  // Stop in reverse: controllers, agents (mounts stay) and drivers, API.
  manager.Stop();
  for (auto& f : followers) f->Stop();
  supervisor.Stop(absl::Seconds(15));
  cp->Shutdown();
  ::close(lock_fd);
  return st;
}

}  // namespace berth::cli
