// strict-csi-driver: the spec-strict CSI driver of the test suite as a
// process (a thin main over berth::strict_driver). Every CO violation is
// answered "CO violation: ..." and appended to --violations; run as root for
// real bind mounts.
//
//   strict-csi-driver --endpoint unix:///tmp/s/csi.sock --node-id node-1
//       --state-dir /tmp/s/state --violations /tmp/s/violations
//       [--no-stage-unstage] [--fault stage:DEADLINE_EXCEEDED:1:after]
#include <iostream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "common/logging.h"
#include "common/signals.h"
#include "common/units.h"
#include "csi/server.h"
#include "driver/mount/mounter.h"
#include "driver/testing/strict_driver.h"
#include "spdlog/spdlog.h"

int main(int argc, char** argv) {
  berth::BlockTerminationSignals();
  berth::driver::testing::StrictDriver::Options options;
  std::string endpoint, log_level = "info", capacity = "10Gi";
  std::vector<std::string> faults;
  bool no_stage = false, no_publish = false, no_stats = false, no_expand = false, no_node_expand = false,
       no_topology = false;

  CLI::App app{"strict-csi-driver: a CSI driver that fails loudly on every CO violation of the CSI spec",
               "strict-csi-driver"};
  app.add_option("--endpoint", endpoint, "unix:///abs/path/csi.sock")->required()->envname("CSI_ENDPOINT");
  app.add_option("--name", options.name, "driver name")->capture_default_str();
  app.add_option("--node-id", options.node_id, "this node's ID (NodeGetInfo)")->required();
  app.add_option("--state-dir", options.state_dir, "volumes and state.json (canonical absolute path)")->required();
  app.add_option("--violations", options.violations_file, "append one line per CO violation to this file");
  app.add_option("--capacity", capacity, "what GetCapacity offers in all, e.g. 10Gi")->capture_default_str();
  app.add_flag("--no-stage-unstage", no_stage, "do not advertise STAGE_UNSTAGE_VOLUME");
  app.add_flag("--no-publish-unpublish", no_publish, "do not advertise PUBLISH_UNPUBLISH_VOLUME");
  app.add_flag("--no-volume-stats", no_stats, "do not advertise GET_VOLUME_STATS");
  app.add_flag("--no-expand", no_expand, "advertise no expansion (controller or node)");
  app.add_flag("--no-node-expand", no_node_expand, "do not advertise the node's EXPAND_VOLUME");
  app.add_flag("--no-topology", no_topology, "do not advertise VOLUME_ACCESSIBILITY_CONSTRAINTS");
  app.add_option("--fault", faults,
                 "op:CODE[:count[:before|after]], e.g. stage:DEADLINE_EXCEEDED:1:after (repeatable); op is one of "
                 "create delete controller-publish controller-unpublish controller-expand stage unstage publish "
                 "unpublish stats node-expand");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  if (absl::Status s = berth::InitLogging(log_level); !s.ok()) {
    std::cerr << "strict-csi-driver: " << s.message() << "\n";
    return 2;
  }
  auto bytes = berth::ParseByteSize(capacity);
  if (!bytes.ok()) {
    std::cerr << "strict-csi-driver: --capacity: " << bytes.status().message() << "\n";
    return 2;
  }
  options.capacity_bytes = *bytes;
  options.stage_unstage = !no_stage;
  options.publish_unpublish = !no_publish;
  options.volume_stats = !no_stats;
  options.expand = !no_expand;
  options.node_expand = !no_expand && !no_node_expand;
  options.topology = !no_topology;
  for (const auto& f : faults) {
    auto fault = berth::driver::testing::ParseStrictFault(f);
    if (!fault.ok()) {
      std::cerr << "strict-csi-driver: " << fault.status().message() << "\n";
      return 2;
    }
    options.faults.push_back(*fault);
  }
  berth::driver::LinuxMounter mounter;
  auto driver = berth::driver::testing::StrictDriver::Open(options, mounter);
  if (!driver.ok()) {
    spdlog::error("strict-csi-driver: {}", driver.status().ToString());
    return 1;
  }
  auto server = berth::csi::CsiServer::Start({.endpoint = endpoint}, (*driver)->services());
  if (!server.ok()) {
    spdlog::error("strict-csi-driver: cannot serve {}: {}", endpoint, server.status().ToString());
    return 1;
  }
  spdlog::info("strict-csi-driver {} node={} state={} serving {}", options.name, options.node_id, options.state_dir,
               endpoint);
  const int sig = berth::WaitForTerminationSignal();
  spdlog::info("signal {}: stopping", sig);
  (*server)->Shutdown(absl::Seconds(10));
  const auto violations = (*driver)->Violations();
  if (!violations.empty()) spdlog::error("{} CO violation(s) seen", violations.size());
  return 0;
}
