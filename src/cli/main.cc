// berth: the command line of the berth control plane. A thin main over
// berth::cli (commands) and berth::apiserver (serve).
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <iostream>
#include <string>
#include <tuple>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "apiserver/control_plane.h"
#include "apiserver/kubeconfig.h"
#include "berth/version.h"
#include "cli/backup_commands.h"
#include "cli/client_app.h"
#include "cli/commands.h"
#include "cli/node_agent.h"
#include "cli/runtime_commands.h"
#include "cli/snapshot_commands.h"
#include "cli/up.h"
#include "common/logging.h"
#include "common/memory.h"
#include "common/signals.h"
#include "common/units.h"
#include "http/api_client.h"
#include "spdlog/spdlog.h"

namespace {

constexpr int kExitFailure = 1;

// kubectl's form: "error: ..." or "Error from server (Reason): ...", exit 1.
int Fail(const absl::Status& st) {
  std::cerr << berth::cli::FormatError(st);
  return kExitFailure;
}

absl::StatusOr<absl::Duration> ParseTimeout(const std::string& text) {
  absl::Duration d;
  if (!absl::ParseDuration(text, &d) || d < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--timeout must be a duration like 30s, 5m or 1h");
  }
  return d;
}

// The API server's limits, as flags of `berth up` and `berth serve`
// (defaults: kube-apiserver's where it has one).
struct ApiLimitFlags {
  berth::http::HttpServer::Limits limits;
  std::string tls_handshake_timeout = "10s", header_timeout = "32s", idle_timeout = "90s";

  void Add(CLI::App* cmd) {
    cmd->add_option("--max-requests-inflight", limits.max_requests_inflight,
                    "API reads (GET) in flight before 429 Too Many Requests; 0: no limit")
        ->capture_default_str();
    cmd->add_option("--max-mutating-requests-inflight", limits.max_mutating_requests_inflight,
                    "API writes in flight before 429 Too Many Requests; 0: no limit")
        ->capture_default_str();
    cmd->add_option("--api-max-connections", limits.max_connections, "open API connections; more are closed at once")
        ->capture_default_str();
    cmd->add_option("--api-tls-handshake-timeout", tls_handshake_timeout,
                    "close a connection whose TLS handshake takes longer")
        ->capture_default_str();
    cmd->add_option("--api-request-header-timeout", header_timeout,
                    "close a connection whose request headers take longer to arrive")
        ->capture_default_str();
    cmd->add_option("--api-idle-timeout", idle_timeout, "close a kept-alive connection idle this long")
        ->capture_default_str();
    cmd->add_option("--api-threads", limits.handler_threads, "threads running API requests")->capture_default_str();
    cmd->add_option("--api-io-threads", limits.io_threads, "threads doing the API server's network I/O")
        ->capture_default_str();
  }

  absl::StatusOr<berth::http::HttpServer::Limits> Parse() const {
    berth::http::HttpServer::Limits out = limits;
    for (auto [text, field, flag] :
         {std::tuple{&tls_handshake_timeout, &out.tls_handshake_timeout, "--api-tls-handshake-timeout"},
          std::tuple{&header_timeout, &out.header_timeout, "--api-request-header-timeout"},
          std::tuple{&idle_timeout, &out.idle_timeout, "--api-idle-timeout"}}) {
      if (!absl::ParseDuration(*text, field) || *field <= absl::ZeroDuration()) {
        return absl::InvalidArgumentError(absl::StrCat(flag, " must be a positive duration like 500ms, 10s or 2m"));
      }
    }
    if (out.handler_threads < 1 || out.handler_threads > 256 || out.io_threads < 1 || out.io_threads > 64) {
      return absl::InvalidArgumentError("--api-threads must be 1-256 and --api-io-threads 1-64");
    }
    if (out.max_connections < 1) return absl::InvalidArgumentError("--api-max-connections must be at least 1");
    return out;
  }
};

// Each API connection is a descriptor: lift the soft limit to the hard one
// (as Go programs do at start), and say so when the connection cap cannot
// be reached.
void RaiseOpenFileLimit(size_t max_connections) {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  if (rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &rl);
  }
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < max_connections + 1024) {
    spdlog::warn("open files are limited to {} (ulimit -n): fewer than --api-max-connections {} can be open",
                 rl.rlim_cur, max_connections);
  }
}

}  // namespace

int main(int argc, char** argv) {
#ifdef NDEBUG
  // absl's deadlock detection (on in Debian's absl) updates a graph of the
  // locks held on every Mutex acquire: ~1.6 % of berth up's CPU at 10,000
  // claims, 0.5 % of its busiest thread. Optimized builds turn it off; the
  // sanitized test build keeps it, and clang's -Wthread-safety checks the
  // lock annotations in CI.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif
  berth::ConfigureAllocator();
  CLI::App app{"berth: a Kubernetes-shaped storage control plane for CSI drivers"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(berth::kVersion));
  // Global flags go anywhere on the line: `berth up --data-dir D` and
  // `berth get pvc --data-dir D` as `berth --data-dir D up`.
  berth::cli::GlobalFlags globals;
  berth::cli::AddGlobalFlags(app, globals);
  const std::string& data_dir = globals.data_dir;
  const std::string& kubeconfig = globals.kubeconfig;
  berth::cli::Target target;
  auto add_ns = [&](CLI::App* cmd, bool all) {
    cmd->add_option("-n,--namespace", target.namespace_, "namespace (default: the context's)");
    if (all) cmd->add_flag("-A,--all-namespaces", target.all_namespaces, "across all namespaces");
  };

  // serve
  auto* serve = app.add_subcommand("serve", "run the store and the API server (the control plane core)");
  std::string api_address = "127.0.0.1:7443", log_level = "info";
  serve->add_option("--api-address", api_address, "loopback TCP address for kubectl (\"\" to disable)");
  serve->add_option("--log-level", log_level, "trace|debug|info|warn|error");
  ApiLimitFlags serve_limits;
  serve_limits.Add(serve);

  // up
  auto* up = app.add_subcommand("up", "run the whole stack on this machine: API, controllers, node agents, berth-csi");
  berth::cli::UpOptions up_options;
  up->add_option("--pool", up_options.pool, "use this existing directory as the pool (one node)");
  up->add_option("--pool-size", up_options.pool_size,
                 "size of each node's pool image, allocated on the host filesystem of --data-dir when made")
      ->capture_default_str();
  up->add_flag("--pool-sparse", up_options.pool_sparse,
               "leave new pool images sparse: host space is taken as volumes are written, and each pool's "
               "capacity stays within what the host has free");
  up->add_option("--nodes", up_options.nodes, "simulated nodes, each with its own pool, agent and berth-csi")
      ->capture_default_str();
  up->add_option("--node-name", up_options.node_name, "node name (default: the host name; -1..-N with --nodes N)");
  up->add_option("--external-driver", up_options.external_drivers,
                 "NAME=unix:///path/csi.sock: drive an already-running CSI driver too (repeatable)");
  up->add_option("--sidecar-driver", up_options.sidecar_drivers,
                 "NAME: leave this driver's controller side to the upstream kubernetes-csi sidecars (repeatable)");
  up->add_flag("!--no-snapshot-controller", up_options.snapshot_controller,
               "leave VolumeSnapshots to the upstream snapshot-controller");
  up->add_option("--api-address", up_options.api_address, "loopback TCP address for kubectl (\"\" to disable)")
      ->capture_default_str();
  up->add_option("--csi-binary", up_options.csi_binary, "berth-csi to run (default: beside this binary)");
  up->add_option("--log-level", up_options.log_level, "trace|debug|info|warn|error")->capture_default_str();
  up->add_option("--volume-stats-period", up_options.volume_stats_period_seconds,
                 "seconds between NodeGetVolumeStats rounds (kubelet_volume_stats_* on /metrics)")
      ->capture_default_str();
  up->add_option("--runtime", up_options.runtime.runtime,
                 "containerd: run pods' containers with berth's own containerd per node; none: volumes only")
      ->capture_default_str();
  up->add_option("--container-runtime-endpoint", up_options.runtime.endpoint,
                 "unix:///path: run pods with this existing CRI runtime (containerd, CRI-O) instead");
  up->add_option("--pod-cidr", up_options.runtime.pod_cidr, "pod IP range, split between the nodes")
      ->capture_default_str();
  up->add_option("--images-dir", up_options.runtime.images_dir,
                 "berth's image archives (pause.tar, toolbox.tar; default: images/ beside this binary)");
  up->add_option("--node-monitor-grace-period", up_options.node_monitor_grace_period,
                 "a node whose lease is not renewed this long is marked Unknown and tainted (e.g. 40s)")
      ->capture_default_str();
  up->add_option("--backup-location", up_options.backup_location,
                 "DIR: keep backups in a repository there (made if missing), the BackupStorageLocation \"default\"");
  ApiLimitFlags up_limits;
  up_limits.Add(up);

  // node-agent (started by berth up, one per node)
  auto* node_agent =
      app.add_subcommand("node-agent", "run one node's agent over the API socket (berth up starts one per node)");
  berth::cli::NodeAgentOptions agent_options;
  std::string agent_heartbeat = "10s", agent_log_level = "info";
  node_agent->add_option("--node", agent_options.node_name, "the node's name")->required();
  node_agent->add_option("--heartbeat", agent_heartbeat, "lease renewal and status interval")->capture_default_str();
  node_agent
      ->add_option("--volume-stats-period", agent_options.volume_stats_period_seconds,
                   "seconds between NodeGetVolumeStats rounds")
      ->capture_default_str();
  node_agent->add_option("--runtime-endpoint", agent_options.runtime_endpoint, "unix:///path of the CRI runtime");
  node_agent->add_option("--host-ip", agent_options.host_ip, "status.hostIP of the node's pods");
  node_agent->add_option("--static-driver", agent_options.static_drivers,
                         "NAME=unix:///path/csi.sock: a driver without a registration socket (repeatable)");
  node_agent->add_option("--log-level", agent_log_level, "trace|debug|info|warn|error")->capture_default_str();

  // get, describe, apply, delete, wait, events, patch, edit, explain,
  // api-resources, version, completion
  berth::cli::ClientCommands client_commands(app);
  std::string timeout_text = "5m";
  std::vector<std::string> files, names;

  // logs
  auto* logs = app.add_subcommand("logs", "print a container's log (what kubectl logs prints)");
  std::string pod;
  berth::cli::LogsOptions logs_options;
  logs->add_option("pod", pod, "pod name")->required();
  logs->add_option("-c,--container", logs_options.container, "container (default: the pod's only one)");
  logs->add_flag("-f,--follow", logs_options.follow, "keep printing what the container writes");
  logs->add_flag("-p,--previous", logs_options.previous, "the previous, terminated instance's log");
  logs->add_flag("--timestamps", logs_options.timestamps, "prefix lines with their RFC 3339 time");
  logs->add_option("--tail", logs_options.tail, "only the last N lines (-1: all)");
  add_ns(logs, false);

  // exec
  auto* exec = app.add_subcommand("exec", "run a command in a running container (CRI ExecSync)");
  std::string exec_container;
  std::vector<std::string> exec_command;
  exec->add_option("pod", pod, "pod name")->required();
  exec->add_option("-c,--container", exec_container, "container (default: the pod's first)");
  exec->add_option("--timeout", timeout_text, "give up on the command after this long")->capture_default_str();
  exec->add_option("command", exec_command, "-- COMMAND [ARGS...]")->required();
  add_ns(exec, false);

  // snapshot allocated | diff
  auto* snapshot =
      app.add_subcommand("snapshot", "changed-block tracking: a volume snapshot's blocks (CSI SnapshotMetadata)");
  snapshot->require_subcommand(1);
  std::string snapshot_output, base_snapshot, target_snapshot;
  auto* allocated = snapshot->add_subcommand("allocated", "the byte ranges the snapshot holds");
  allocated->add_option("snapshot", target_snapshot, "volume snapshot name")->required();
  auto* diff = snapshot->add_subcommand("diff", "the byte ranges that changed from BASE to TARGET (one volume's)");
  diff->add_option("base", base_snapshot, "the earlier volume snapshot")->required();
  diff->add_option("target", target_snapshot, "the later volume snapshot")->required();
  for (auto* cmd : {allocated, diff}) {
    add_ns(cmd, false);
    cmd->add_option("-o,--output", snapshot_output, "json (default: a table)");
  }

  // backup create|get|describe|delete|verify, restore create|get|describe
  auto* backup =
      app.add_subcommand("backup", "backups of workloads and their volumes (backup.berth.io, Velero's shapes)");
  backup->require_subcommand(1);
  berth::cli::BackupCreateOptions backup_options;
  std::string backup_name, backup_namespaces, backup_location;
  auto* backup_create = backup->add_subcommand("create", "back up pods, their claims and the claims' data");
  backup_create->add_option("name", backup_options.name, "backup name")->required();
  backup_create->add_option("--include-namespaces", backup_namespaces, "namespaces to back up, a,b (default: all)");
  backup_create->add_option("--selector", backup_options.selector, "only pods with these labels (app=db,tier=primary)");
  backup_create->add_option("--ttl", backup_options.ttl, "keep the backup this long (Go duration; default 720h)");
  backup_create->add_option("--storage-location", backup_options.storage_location,
                            "BackupStorageLocation (default: the default one)");
  backup_create->add_flag("--wait", backup_options.wait, "follow the backup until it ends; exit 1 unless Completed");
  auto* backup_get = backup->add_subcommand("get", "list backups (or one) with their phase and progress");
  backup_get->add_option("name", backup_name, "backup name (default: all)");
  auto* backup_describe = backup->add_subcommand("describe", "a backup's spec, progress, volumes, errors and events");
  backup_describe->add_option("name", backup_name, "backup name")->required();
  auto* backup_delete = backup->add_subcommand("delete", "delete a backup and (by its controller) its data");
  backup_delete->add_option("name", backup_name, "backup name")->required();
  auto* backup_verify =
      backup->add_subcommand("verify",
                             "re-read and check a backup's chunks (all backups without NAME); exit 1 on "
                             "problems");
  backup_verify->add_option("name", backup_name, "backup name (default: every backup in the location)");
  backup_verify->add_option("--storage-location", backup_location,
                            "BackupStorageLocation (default: the backup's, else the default one)");
  auto* restore = app.add_subcommand("restore", "restores of backups (backup.berth.io, Velero's shapes)");
  restore->require_subcommand(1);
  berth::cli::RestoreCreateOptions restore_options;
  std::string restore_name, restore_mappings;
  auto* restore_create = restore->add_subcommand("create", "restore a backup's pods, claims and data");
  restore_create->add_option("name", restore_options.name, "restore name")->required();
  restore_create->add_option("--from-backup", restore_options.from_backup, "the backup to restore")->required();
  restore_create->add_option("--namespace-mappings", restore_mappings,
                             "restore namespaces under new names: old:new,...");
  restore_create->add_option("--target-node", restore_options.target_node,
                             "put every restored volume on this node (default: the scheduler's choice)");
  restore_create->add_flag("--wait", restore_options.wait, "follow the restore until it ends; exit 1 unless Completed");
  auto* restore_get = restore->add_subcommand("get", "list restores (or one) with their phase");
  restore_get->add_option("name", restore_name, "restore name (default: all)");
  auto* restore_describe = restore->add_subcommand("describe", "a restore's spec, progress, errors and events");
  restore_describe->add_option("name", restore_name, "restore name")->required();

  // image
  auto* image = app.add_subcommand("image", "the images of the nodes' container runtimes (offline)");
  image->require_subcommand(1);
  std::string image_node;
  image->add_option("--node", image_node, "only this node (default: every node)");
  auto* image_import = image->add_subcommand("import", "import docker-archive or OCI archives (several images each)");
  image_import->add_option("files", files, "archives")->required();
  auto* image_ls = image->add_subcommand("ls", "list images");
  auto* image_rm = image->add_subcommand("rm", "remove images");
  image_rm->add_option("images", names, "images")->required();

  // down
  auto* down = app.add_subcommand(
      "down", "with berth up stopped: stop every container, pod network and mount berth started (data stays)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // kubectl's form and exit code 1 (not CLI11's own codes), so scripts
    // see one failure code.
    std::cerr << "error: " << e.what() << "\nRun 'berth --help' (or 'berth COMMAND --help') for usage.\n";
    return kExitFailure;
  }

  if (serve->parsed() || up->parsed() || node_agent->parsed()) {
    // What the control plane and its nodes create under the data directory
    // (the store, keys, the token, kubeconfig, node records, pool images) is
    // private from creation; berth-csi children inherit this.
    ::umask(077);
  }
  if (serve->parsed()) {
    berth::BlockTerminationSignals();
    if (auto st = berth::InitLogging(log_level); !st.ok()) return Fail(st);
    auto limits = serve_limits.Parse();
    if (!limits.ok()) return Fail(limits.status());
    RaiseOpenFileLimit(limits->max_connections);
    berth::apiserver::ControlPlane::Options options;
    options.data_dir = data_dir;
    options.api_address = api_address;
    options.limits = *limits;
    auto cp = berth::apiserver::ControlPlane::Start(options);
    if (!cp.ok()) return Fail(cp.status());
    spdlog::info("berth API on {} (root only){}", (*cp)->socket_path(),
                 (*cp)->kubeconfig_path().empty()
                     ? ""
                     : fmt::format(" and 127.0.0.1:{}; kubeconfig {}", (*cp)->tcp_port(), (*cp)->kubeconfig_path()));
    int sig = berth::WaitForTerminationSignal();
    spdlog::info("signal {}: stopping", sig);
    (*cp)->Shutdown();
    return 0;
  }

  if (node_agent->parsed()) {
    berth::BlockTerminationSignals();
    if (auto st = berth::InitLogging(agent_log_level); !st.ok()) return Fail(st);
    if (!absl::ParseDuration(agent_heartbeat, &agent_options.heartbeat)) {
      return Fail(absl::InvalidArgumentError("--heartbeat \"" + agent_heartbeat + "\": want a duration such as 10s"));
    }
    agent_options.data_dir = data_dir;
    absl::Status st = berth::cli::RunNodeAgent(agent_options);
    return st.ok() ? 0 : Fail(st);
  }

  if (up->parsed()) {
    berth::BlockTerminationSignals();
    if (auto st = berth::InitLogging(up_options.log_level); !st.ok()) return Fail(st);
    auto limits = up_limits.Parse();
    if (!limits.ok()) return Fail(limits.status());
    RaiseOpenFileLimit(limits->max_connections);
    up_options.api_limits = *limits;
    up_options.data_dir = data_dir;
    absl::Status st = berth::cli::RunUp(up_options);
    return st.ok() ? 0 : Fail(st);
  }

  if (image->parsed()) {
    absl::Status st;
    if (image_import->parsed()) st = berth::cli::ImageImport(data_dir, files, image_node, std::cout);
    if (image_ls->parsed()) st = berth::cli::ImageList(data_dir, image_node, std::cout);
    if (image_rm->parsed()) st = berth::cli::ImageRemove(data_dir, names, image_node, std::cout);
    return st.ok() ? 0 : Fail(st);
  }
  if (down->parsed()) {
    absl::Status st = berth::cli::Down(data_dir, std::cout);
    return st.ok() ? 0 : Fail(st);
  }

  std::unique_ptr<berth::http::ApiClient> client;
  auto connect = [&]() -> absl::StatusOr<berth::http::ApiClient*> {
    if (!client) {
      auto made = kubeconfig.empty() ? berth::http::ApiClient::ForDataDir(data_dir)
                                     : berth::apiserver::ApiClientForKubeconfig(kubeconfig);
      if (!made.ok()) return made.status();
      client = std::move(*made);
    }
    return client.get();
  };
  if (client_commands.parsed()) {
    absl::Status st = client_commands.Run(connect, std::cout, std::cerr, ::isatty(STDOUT_FILENO) == 1);
    std::cout.flush();
    return st.ok() ? 0 : Fail(st);
  }
  auto connected = connect();
  if (!connected.ok()) return Fail(connected.status());
  absl::Status st;
  if (allocated->parsed()) {
    st = berth::cli::SnapshotAllocated(**connected, target_snapshot, target, snapshot_output, std::cout);
  } else if (diff->parsed()) {
    st = berth::cli::SnapshotDiff(**connected, base_snapshot, target_snapshot, target, snapshot_output, std::cout);
  } else if (backup->parsed()) {
    const bool terminal = ::isatty(STDOUT_FILENO) == 1;
    const auto& kinds = *berth::api::FindResource("backup.berth.io", "backups");
    if (backup_create->parsed()) {
      if (!backup_namespaces.empty()) backup_options.include_namespaces = {backup_namespaces};
      st = berth::cli::BackupCreate(**connected, backup_options, std::cout, terminal);
    } else if (backup_get->parsed()) {
      st = berth::cli::BackupKindGet(**connected, kinds, backup_name, std::cout);
    } else if (backup_describe->parsed()) {
      st = berth::cli::BackupKindDescribe(**connected, kinds, backup_name, std::cout);
    } else if (backup_delete->parsed()) {
      st = berth::cli::BackupDelete(**connected, backup_name, std::cout);
    } else if (backup_verify->parsed()) {
      st = berth::cli::BackupVerify(**connected, backup_name, backup_location, std::cout);
    }
  } else if (restore->parsed()) {
    const auto& kinds = *berth::api::FindResource("backup.berth.io", "restores");
    if (restore_create->parsed()) {
      if (!restore_mappings.empty()) restore_options.namespace_mappings = {restore_mappings};
      st = berth::cli::RestoreCreate(**connected, restore_options, std::cout, ::isatty(STDOUT_FILENO) == 1);
    } else if (restore_get->parsed()) {
      st = berth::cli::BackupKindGet(**connected, kinds, restore_name, std::cout);
    } else if (restore_describe->parsed()) {
      st = berth::cli::BackupKindDescribe(**connected, kinds, restore_name, std::cout);
    }
  } else if (logs->parsed()) {
    st = berth::cli::Logs(**connected, pod, target, logs_options, std::cout);
  } else if (exec->parsed()) {
    auto exec_timeout = ParseTimeout(timeout_text);
    if (!exec_timeout.ok()) return Fail(exec_timeout.status());
    auto code = berth::cli::Exec(**connected, data_dir, pod, target, exec_container, exec_command, *exec_timeout,
                                 std::cout, std::cerr);
    if (!code.ok()) return Fail(code.status());
    return *code;
  }
  return st.ok() ? 0 : Fail(st);
}
