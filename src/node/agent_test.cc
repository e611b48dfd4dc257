// The node agent's registration of CSI plugins (CSINode, the node ID
// annotation, topology labels, version checks) and its Node object.
#include "node/testing/agent_fixture.h"

namespace berth::node::testing {
namespace {

TEST_F(NodeAgentTest, CreatesTheNodeWithLabelsAndHeartbeats) {
  StartAgent();
  json node = Get("nodes", "", kNode);
  EXPECT_EQ(Str(node, {"metadata", "labels", "kubernetes.io/hostname"}), kNode);
  std::string ready;
  for (const auto& c : Field(Field(node, "status"), "conditions")) {
    if (Str(c, {"type"}) == "Ready") ready = Str(c, {"status"});
  }
  EXPECT_EQ(ready, "True");
  // The heartbeat is the node's lease (NodeStatus; node_status_test.cc has
  // the details on a fake clock).
  const std::string first = Str(Get("leases", "kube-node-lease", kNode, "coordination.k8s.io"), {"spec", "renewTime"});
  ASSERT_FALSE(first.empty());
  EXPECT_TRUE(Eventually(
      [&] {
        return Str(Get("leases", "kube-node-lease", kNode, "coordination.k8s.io"), {"spec", "renewTime"}) != first;
      },
      absl::Seconds(5)));
}

TEST_F(NodeAgentTest, RegistrationPublishesCsiNodeAnnotationAndLabels) {
  StartAgent();
  ServeDriver();
  ASSERT_TRUE(Eventually([&] { return Registered(); }));
  json csinode = Get("csinodes", "", kNode, "storage.k8s.io");
  const json& d = csinode["spec"]["drivers"][0];
  EXPECT_EQ(d["name"], kDriver);
  EXPECT_EQ(d["nodeID"], "fake-node-1");
  EXPECT_EQ(d["topologyKeys"], json({"topology.fake/rack", "topology.fake/zone"}));
  EXPECT_EQ(d["allocatable"]["count"], 7);
  EXPECT_EQ(csinode["metadata"]["ownerReferences"][0]["kind"], "Node");
  json node = Get("nodes", "", kNode);
  EXPECT_EQ(json::parse(Str(node, {"metadata", "annotations", kAnnNodeId})), json({{kDriver, "fake-node-1"}}));
  EXPECT_EQ(Str(node, {"metadata", "labels", "topology.fake/zone"}), "z1");
  ASSERT_TRUE(Eventually([&] { return driver_->registration()->last_status().has_value(); }));
  EXPECT_TRUE(driver_->registration()->last_status()->plugin_registered());
  EXPECT_TRUE(directory_.Channel(kDriver, kNode).ok());

  // The registration socket goes away: the driver is deregistered.
  driver_->StopRegistration();
  ASSERT_TRUE(Eventually([&] { return !Registered(); }));
  node = Get("nodes", "", kNode);
  EXPECT_EQ(Str(node, {"metadata", "annotations", kAnnNodeId}), "");
  EXPECT_EQ(Str(node, {"metadata", "labels", "topology.fake/zone"}), "z1");  // labels stay, as in kubelet
  EXPECT_FALSE(agent_->plugins().Get(kDriver).has_value());
  // ...and comes back.
  ASSERT_TRUE(driver_->ServeRegistration(root_ + "/plugins_registry").ok());
  EXPECT_TRUE(Eventually([&] { return Registered(); }));
}

TEST_F(NodeAgentTest, RefusesPluginsWithoutCsi1Versions) {
  StartAgent();
  ASSERT_TRUE(driver_->Serve(dir_.path() + "/csi.sock").ok());
  ASSERT_TRUE(driver_->ServeRegistration(root_ + "/plugins_registry", {"0.3.0", "2.0.0"}).ok());
  ASSERT_TRUE(Eventually([&] { return driver_->registration()->last_status().has_value(); }));
  EXPECT_FALSE(driver_->registration()->last_status()->plugin_registered());
  EXPECT_THAT(driver_->registration()->last_status()->error(), ::testing::HasSubstr("CSI 1.x"));
  EXPECT_FALSE(Registered());
}

TEST_F(NodeAgentTest, VersionCheckFollowsKubelet) {
  EXPECT_TRUE(CheckCsiVersions({"1.0.0"}).ok());
  EXPECT_TRUE(CheckCsiVersions({"v1.2", "2.0.0"}).ok());
  EXPECT_FALSE(CheckCsiVersions({}).ok());
  EXPECT_FALSE(CheckCsiVersions({"0.3.0"}).ok());
  EXPECT_FALSE(CheckCsiVersions({"2.0.0", "junk"}).ok());
}

TEST_F(NodeAgentTest, TopologyLabelCollisionFailsRegistration) {
  StartAgent();
  ASSERT_TRUE(UpdateObject(*registry_, K("nodes"), "", kNode, apiserver::Subresource::kMain, [](json& n) {
                n["metadata"]["labels"]["topology.fake/zone"] = "other";
                return true;
              }).ok());
  ServeDriver();
  ASSERT_TRUE(Eventually([&] { return driver_->registration()->last_status().has_value(); }));
  EXPECT_FALSE(driver_->registration()->last_status()->plugin_registered());
  EXPECT_THAT(driver_->registration()->last_status()->error(), ::testing::HasSubstr("collides"));
  EXPECT_FALSE(Registered());
}

TEST_F(NodeAgentTest, NodeGetInfoFailureIsRetried) {
  driver_->Fail("info", 1, grpc::StatusCode::UNAVAILABLE);
  StartAgent();
  ServeDriver();
  EXPECT_TRUE(Eventually([&] { return Registered(); }));
  EXPECT_GE(driver_->Calls("info"), 2);
}

// node-driver-registrar restarting after a SIGKILL removes its stale socket
// and binds a new one at once, and ext4 hands the new socket the inode just
// freed. Seen with the upstream sidecar (tests/integration/registrar_test):
// the watcher took the new socket for the old one and never asked it, so the
// restarted sidecar never heard its verdict. Here the same inode comes back
// for certain: the socket is removed and linked back from a hidden hard link.
TEST_F(NodeAgentTest, ASocketCreatedAgainWithTheSameInodeRegistersAgain) {
  StartAgent();
  ServeDriver();
  ASSERT_TRUE(Eventually([&] { return Registered(); }));
  ASSERT_TRUE(Eventually([&] { return driver_->registration()->last_status().has_value(); }));
  const int infos = driver_->Calls("info");
  const std::string socket = csi::RegistrationSocketPath(root_ + "/plugins_registry", kDriver);
  const std::string hidden = root_ + "/plugins_registry/.old-reg.sock";
  struct stat before {
  }, after{};
  ASSERT_EQ(::lstat(socket.c_str(), &before), 0);
  ASSERT_EQ(::link(socket.c_str(), hidden.c_str()), 0);
  ASSERT_EQ(::unlink(socket.c_str()), 0);
  ASSERT_EQ(::link(hidden.c_str(), socket.c_str()), 0);
  ASSERT_EQ(::unlink(hidden.c_str()), 0);
  ASSERT_EQ(::lstat(socket.c_str(), &after), 0);
  ASSERT_EQ(after.st_ino, before.st_ino);
  EXPECT_TRUE(Eventually([&] { return driver_->Calls("info") > infos; })) << "not registered again";
  EXPECT_TRUE(Eventually([&] { return Registered(); }));
}

}  // namespace
}  // namespace berth::node::testing
