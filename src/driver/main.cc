// berth-csi: the berth CSI driver. A thin main over berth::driver.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/synchronization/mutex.h"
#include "berth/version.h"
#include "common/exec.h"
#include "common/fs.h"
#include "common/logging.h"
#include "common/signals.h"
#include "common/units.h"
#include "csi/endpoint.h"
#include "csi/registration.h"
#include "csi/server.h"
#include "driver/driver.h"
#include "driver/http_endpoint.h"
#include "driver/metrics.h"
#include "driver/options.h"
#include "driver/pool_monitor.h"
#include "driver/snapshot_adopter.h"
#include "http/server.h"
#include "spdlog/spdlog.h"

namespace {

constexpr int kExitUsage = 2;
constexpr int kExitFailure = 1;

std::string Hostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "";
  return buf;
}

int Run(const berth::driver::DriverOptions& options, const std::string& registration_dir,
        const std::string& http_endpoint, absl::Duration grace, bool adopt_snapshot_contents, bool node_conditions,
        const std::string& api_data_dir) {
  berth::LinuxCommandRunner runner;
  berth::driver::LinuxLoopDevices loops;
  berth::driver::LinuxMounter mounter;
  berth::driver::LinuxFormatter formatter(runner);
  berth::driver::LinuxFreezer freezer;
  auto driver = berth::driver::Driver::Open(options, {&loops, &mounter, &formatter, &freezer});
  if (!driver.ok()) {
    spdlog::error("cannot open the pool: {}", driver.status().ToString());
    return kExitFailure;
  }
  (*driver)->WatchKernelLog();
  berth::driver::PoolMonitor::ClientFactory conditions_client;
  if (node_conditions) {
    if (!api_data_dir.empty()) {
      conditions_client = [api_data_dir] { return berth::http::ApiClient::ForDataDir(api_data_dir); };
    } else {
      conditions_client = [] { return berth::driver::InClusterApiClient(); };
    }
  }
  berth::driver::PoolMonitor monitor((*driver)->context(), {.node_name = options.node_id}, conditions_client);
  monitor.Start();
  berth::driver::DriverMetrics metrics(**driver);
  berth::csi::ServerOptions server_options;
  server_options.endpoint = options.endpoint;
  server_options.observer = &metrics;
  auto server = berth::csi::CsiServer::Start(server_options, (*driver)->services());
  if (!server.ok()) {
    spdlog::error("cannot serve CSI: {}", server.status().ToString());
    return kExitFailure;
  }
  std::unique_ptr<berth::http::HttpServer> http;
  if (!http_endpoint.empty()) {
    auto started = berth::driver::StartHttpEndpoint(http_endpoint, **driver, metrics,
                                                    [s = server->get()] { return s->Serving(); });
    if (!started.ok()) {
      spdlog::error("cannot serve --http-endpoint {}: {}", http_endpoint, started.status().ToString());
      (*server)->Shutdown(absl::ZeroDuration());
      return kExitFailure;
    }
    http = std::move(*started);
    spdlog::info("serving /healthz and /metrics on http://{}", http_endpoint);
  }
  // Outside a pod there is no API server to talk to: the CSI services work
  // all the same, so that is an error in the log, not a reason to stop.
  std::unique_ptr<berth::driver::SnapshotContentAdopter> adopter;
  if (adopt_snapshot_contents) {
    if (auto client = berth::driver::InClusterApiClient(); !client.ok()) {
      spdlog::error(
          "--adopt-snapshot-contents: {}; pre-provisioned VolumeSnapshotContents will "
          "not be labelled for this node",
          client.status().ToString());
    } else {
      berth::driver::SnapshotContentAdopter::Options adopter_options;
      adopter_options.driver_name = options.driver_name;
      adopter_options.node_name = options.node_id;
      adopter = std::make_unique<berth::driver::SnapshotContentAdopter>(
          adopter_options, (*driver)->pool(), [] { return berth::driver::InClusterApiClient(); });
      adopter->Start();
      spdlog::info("labelling pre-provisioned VolumeSnapshotContents of this pool's snapshots {}={}",
                   berth::driver::kManagedByLabel, options.node_id);
    }
  }
  // kubelet-style registration: a node agent watching registration_dir
  // finds this socket and learns where the CSI socket is.
  std::unique_ptr<berth::csi::RegistrationService> registration;
  std::unique_ptr<berth::csi::CsiServer> registration_server;
  if (!registration_dir.empty()) {
    auto csi_socket = berth::csi::ParseUnixEndpoint(options.endpoint);
    if (!csi_socket.ok()) {
      spdlog::error("--endpoint: {}", csi_socket.status().ToString());
      return kExitFailure;
    }
    registration = std::make_unique<berth::csi::RegistrationService>(
        berth::csi::RegistrationService::Info{.name = options.driver_name, .endpoint = *csi_socket});
    auto reg = berth::csi::CsiServer::Start(
        {.endpoint = berth::csi::RegistrationSocketPath(registration_dir, options.driver_name)}, {registration.get()});
    if (!reg.ok()) {
      spdlog::error("cannot serve plugin registration: {}", reg.status().ToString());
      (*server)->Shutdown(absl::ZeroDuration());
      return kExitFailure;
    }
    registration_server = std::move(*reg);
  }
  spdlog::info("berth-csi {} driver={} node={} pool={}", berth::kVersion, options.driver_name, options.node_id,
               options.pool);
  const int sig = berth::WaitForTerminationSignal();
  spdlog::info("signal {} received; draining calls for up to {}", sig, absl::FormatDuration(grace));
  // Deregister first, so the node agent stops sending calls, then drain.
  if (adopter) adopter->Stop();
  monitor.Stop();
  if (registration_server) registration_server->Shutdown(absl::ZeroDuration());
  (*server)->Shutdown(grace);
  if (http) http->Shutdown();
  return 0;
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
  // Before any thread exists: signals are only taken by WaitForTerminationSignal.
  berth::BlockTerminationSignals();

  berth::driver::DriverOptions options;
  std::string pool_size;
  std::string log_level = "info";
  double grace_seconds = 10;
  std::string http_endpoint;
  bool node_expansion_only = false;
  bool adopt_snapshot_contents = false;
  std::string registration_dir;
  bool node_conditions = false;
  std::string api_data_dir;

  CLI::App app{"berth-csi: a CSI driver serving volumes from a local pool of sparse images", "berth-csi"};
  app.set_version_flag("--version", std::string("berth-csi ") + berth::kVersion);
  app.add_option("--endpoint", options.endpoint,
                 "CSI endpoint, unix:///abs/path (default: "
                 "unix://<kubelet-root>/plugins/<driver-name>/csi.sock)")
      ->envname("CSI_ENDPOINT");
  app.add_option("--node-id", options.node_id,
                 "this node's ID, the value of topology.berth.io/node (default: the host name; "
                 "a DaemonSet sets NODE_ID from spec.nodeName)")
      ->envname("NODE_ID");
  app.add_option("--pool", options.pool, "pool directory holding volume images")->required();
  app.add_option("--pool-image", options.pool_image, "XFS image file to create (if missing) and mount at --pool");
  app.add_option("--pool-size", pool_size, "size of a new --pool-image, e.g. 20Gi (allocated on the host)");
  app.add_flag("--pool-sparse", options.pool_sparse,
               "leave the --pool-image sparse: it takes host space only as it is written, and the pool's "
               "capacity stays within what the host filesystem has free (default: fully allocated)");
  app.add_option("--high-watermark", options.high_watermark,
                 "fraction of a filesystem past which it is nearly full: provisioning stops there for a sparse "
                 "pool's host and for an overprovisioned or directory pool")
      ->capture_default_str();
  app.add_option("--driver-name", options.driver_name, "CSI driver name")->capture_default_str();
  app.add_option("--kubelet-root", options.kubelet_root, "kubelet's root directory")->capture_default_str();
  app.add_option("--overprovision-ratio", options.overprovision_ratio,
                 "provisioned sizes may add up to pool size x this ratio")
      ->capture_default_str();
  app.add_option("--max-volumes", options.max_volumes, "volumes per node reported by NodeGetInfo (0: no limit)")
      ->capture_default_str();
  app.add_option("--registration-dir", registration_dir,
                 "serve kubelet plugin registration in this directory (e.g. "
                 "<kubelet-root>/plugins_registry), so no node-driver-registrar is needed");
  app.add_option("--http-endpoint", http_endpoint,
                 "serve GET /healthz and /metrics (Prometheus) over plain HTTP on this address, "
                 "host:port, e.g. 127.0.0.1:9809 or $(POD_IP):9809 (default: off)");
  app.add_flag("--node-expansion-only", node_expansion_only,
               "do not advertise ControllerExpandVolume: a cluster-wide external-resizer then "
               "only updates the PV, and NodeExpandVolume on the volume's node grows it");
  app.add_flag("--adopt-snapshot-contents", adopt_snapshot_contents,
               "in a pod of a cluster with distributed snapshotting: label pre-provisioned "
               "VolumeSnapshotContents whose snapshot this pool holds "
               "snapshot.storage.kubernetes.io/managed-by=<node id>, so this node's "
               "csi-snapshotter handles them (the node id must be the Node's name)");
  app.add_flag("--node-conditions", node_conditions,
               "report the pool's pressure and health as the condition BerthPoolPressure on this node's Node, "
               "with events (in a pod: its service account; else --api-data-dir)");
  app.add_option("--api-data-dir", api_data_dir,
                 "with --node-conditions: reach berth's API over <dir>/api.sock (berth up) instead of in-cluster");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")->capture_default_str();
  app.add_option("--shutdown-grace", grace_seconds, "seconds in-flight calls may take to finish on SIGTERM/SIGINT")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);

  if (absl::Status s = berth::InitLogging(log_level); !s.ok()) {
    std::cerr << "berth-csi: " << s.message() << "\n";
    return kExitUsage;
  }
  if (options.node_id.empty()) options.node_id = Hostname();
  if (options.endpoint.empty()) {
    options.endpoint = "unix://" + options.kubelet_root + "/plugins/" + options.driver_name + "/csi.sock";
  }
  if (!pool_size.empty()) {
    auto size = berth::ParseByteSize(pool_size);
    if (!size.ok()) {
      std::cerr << "berth-csi: --pool-size: " << size.status().message() << "\n";
      return kExitUsage;
    }
    options.pool_size_bytes = *size;
  }
  if (absl::Status s = berth::driver::ValidateDriverOptions(options); !s.ok()) {
    std::cerr << "berth-csi: " << s.message() << "\n";
    return kExitUsage;
  }
  options.controller_expansion = !node_expansion_only;
  if (!http_endpoint.empty()) {
    if (auto addr = berth::http::ParseTcpAddress(http_endpoint); !addr.ok()) {
      std::cerr << "berth-csi: --http-endpoint: " << addr.status().message() << "\n";
      return kExitUsage;
    }
  }
  if (!registration_dir.empty() && !berth::IsCanonicalAbsolutePath(registration_dir)) {
    std::cerr << "berth-csi: --registration-dir must be a canonical absolute path\n";
    return kExitUsage;
  }
  return Run(options, registration_dir, http_endpoint, absl::Seconds(grace_seconds), adopt_snapshot_contents,
             node_conditions, api_data_dir);
}
