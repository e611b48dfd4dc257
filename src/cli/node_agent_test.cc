#include "cli/node_agent.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "metrics/testing/exposition_check.h"

namespace berth::cli {
namespace {

TEST(NodeAgentOptionsTest, NamesThatWouldLeaveTheDataDirectoryAreRefused) {
  NodeAgentOptions o;
  o.node_name = "node-1";
  EXPECT_TRUE(ValidateNodeAgentOptions(o).ok());
  for (const char* bad : {"", "..", "../etc", "a/b", "Node", "-x"}) {
    o.node_name = bad;
    absl::Status st = ValidateNodeAgentOptions(o);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(NodeAgentOptionsTest, EndpointsMustBeUnixSockets) {
  NodeAgentOptions o;
  o.node_name = "node-1";
  o.runtime_endpoint = "tcp://127.0.0.1:1";
  EXPECT_EQ(ValidateNodeAgentOptions(o).code(), absl::StatusCode::kInvalidArgument);
  o.runtime_endpoint = "unix:///run/containerd.sock";
  EXPECT_TRUE(ValidateNodeAgentOptions(o).ok());
  o.static_drivers = {"hostpath.csi.k8s.io"};
  EXPECT_THAT(std::string(ValidateNodeAgentOptions(o).message()), ::testing::HasSubstr("NAME=unix://"));
  o.static_drivers = {"hostpath.csi.k8s.io=unix:///run/hostpath/csi.sock"};
  EXPECT_TRUE(ValidateNodeAgentOptions(o).ok());
  o.heartbeat = absl::ZeroDuration();
  EXPECT_EQ(ValidateNodeAgentOptions(o).code(), absl::StatusCode::kInvalidArgument);
}

TEST(NodeAgentOptionsTest, FilesLiveUnderTheNodesDirectory) {
  EXPECT_EQ(NodeDir("/var/lib/berth", "node-1"), "/var/lib/berth/nodes/node-1");
  EXPECT_EQ(VolumeStatsFile("/d", "n"), "/d/nodes/n/volume-stats.prom");
  EXPECT_EQ(CsiCallsFile("/d", "n"), "/d/nodes/n/csi-calls.prom");
  EXPECT_EQ(AgentMetricsFile("/d", "n"), "/d/nodes/n/agent.prom");
}

// Two agents' files become one family each (its HELP/TYPE once, both
// nodes' samples together), as the exposition format requires.
TEST(NodeAgentMetricsTest, EachFamilyOnceWithEveryNodesSamples) {
  const std::vector<std::string> files = {
      "berth_node_agent_start_time_seconds{node=\"a\"} 1700000000.5\n"
      "berth_volume_manager_reconciles_total{node=\"a\"} 7\n"
      "berth_volume_manager_operations{node=\"a\"} 0\n",
      "berth_node_agent_start_time_seconds{node=\"b\"} 1700000001\n"
      "berth_volume_manager_reconciles_total{node=\"b\"} 2\n"
      "berth_volume_manager_operations{node=\"b\"} 1\n"
      "something_else 3\n"};
  std::string out;
  WriteAgentMetrics(&out, files);
  auto samples = metrics::testing::ParseExposition(out);
  ASSERT_TRUE(samples.ok()) << samples.status() << "\n" << out;
  EXPECT_EQ(samples->size(), 6u) << out;
  using metrics::testing::FindSample;
  EXPECT_EQ(*FindSample(*samples, "berth_volume_manager_reconciles_total", {{"node", "a"}}), 7);
  EXPECT_EQ(*FindSample(*samples, "berth_volume_manager_operations", {{"node", "b"}}), 1);
  EXPECT_EQ(*FindSample(*samples, "berth_node_agent_start_time_seconds", {{"node", "a"}}), 1700000000.5);
  EXPECT_THAT(out, ::testing::HasSubstr("# TYPE berth_volume_manager_reconciles_total counter\n"));
  EXPECT_THAT(out, ::testing::Not(::testing::HasSubstr("something_else")));
  // No agent file yet: nothing at all (no family without samples).
  std::string empty;
  WriteAgentMetrics(&empty, {});
  EXPECT_EQ(empty, "");
}

}  // namespace
}  // namespace berth::cli
