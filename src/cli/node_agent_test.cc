#include "cli/node_agent.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

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
}

}  // namespace
}  // namespace berth::cli
