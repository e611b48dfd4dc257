// The upstream node-driver-registrar registers a driver with berth's node
// agent unchanged: the sidecar serves pluginregistration v1 on
// <root>/plugins_registry/<driver>-reg.sock as it does for kubelet, the agent
// publishes the driver in CSINode, the Node's annotation and labels, and
// takes it back when the sidecar goes.
//
// Runs when NODE_DRIVER_REGISTRAR names the sidecar's binary (built from
// kubernetes-csi/node-driver-registrar; see docs/kubernetes.md), else skips.
// The driver is the node tests' fake, serving Identity + Node on a socket of
// its own; no root needed.
#include <signal.h>

#include <cstdlib>
#include <filesystem>

#include "common/testing/eventually.h"
#include "common/testing/subprocess.h"
#include "common/testing/temp_dir.h"
#include "controllers/object.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "node/agent.h"
#include "node/testing/fake_node.h"
#include "store/store.h"

namespace berth::node {
namespace {

using controllers::Field;
using controllers::K;
using controllers::Str;
using nlohmann::json;

constexpr char kDriver[] = "fake.csi.berth.io";
constexpr char kNode[] = "node-1";

class RegistrarTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* bin = std::getenv("NODE_DRIVER_REGISTRAR");
    if (bin == nullptr || *bin == '\0') GTEST_SKIP() << "NODE_DRIVER_REGISTRAR is not set";
    registrar_bin_ = bin;
    ASSERT_TRUE(std::filesystem::exists(registrar_bin_)) << registrar_bin_;
    store_ = std::move(*store::Store::Open({.path = dir_.path() + "/state.db"}));
    registry_ = std::make_unique<apiserver::Registry>(*store_);
    ASSERT_TRUE(registry_->Bootstrap().ok());
    root_ = dir_.path() + "/kubelet";
    driver_ = std::make_unique<testing::FakeNodeDriver>(kDriver, "fake-node-1");
    driver_->SetTopology({{"topology.fake/zone", "z1"}});
    driver_->SetMaxVolumes(5);
    socket_ = dir_.path() + "/csi.sock";
    ASSERT_TRUE(driver_->Serve(socket_).ok());  // no registration socket of its own
    agent_ = std::make_unique<NodeAgent>(
        *registry_, directory_,
        NodeAgent::Options{.node_name = kNode, .root = root_, .labels = {}, .heartbeat = absl::Seconds(1), .workers = 1,
                           .volume_stats_period = absl::ZeroDuration(),
                           .mount_table = [this] { return driver_->MountTable(); }});
    ASSERT_TRUE(agent_->Start().ok());
  }
  void TearDown() override {
    registrar_.reset();  // SIGKILL + wait if still running
    if (agent_) agent_->Stop();
    if (driver_) driver_->Shutdown();
  }
  void StartRegistrar() {
    registrar_ = std::make_unique<berth::testing::Subprocess>(
        std::vector<std::string>{registrar_bin_, "--csi-address=" + socket_, "--kubelet-registration-path=" + socket_,
                                 "--plugin-registration-path=" + agent_->registration_dir(), "--v=5"},
        dir_.path() + "/registrar-" + std::to_string(++starts_) + ".log");
  }
  json Get(const char* resource, const std::string& name, const char* group = "") {
    auto o = registry_->Get(K(resource, group), "", name);
    return o.ok() ? *o : json();
  }
  json DriverEntry() {
    json csinode = Get("csinodes", kNode, "storage.k8s.io");
    for (const auto& d : Field(Field(csinode, "spec"), "drivers")) {
      if (Str(d, {"name"}) == kDriver) return d;
    }
    return json();
  }

  berth::testing::TempDir dir_;
  std::string registrar_bin_, root_, socket_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<apiserver::Registry> registry_;
  controllers::DriverDirectory directory_;
  std::unique_ptr<testing::FakeNodeDriver> driver_;
  std::unique_ptr<NodeAgent> agent_;
  std::unique_ptr<berth::testing::Subprocess> registrar_;
  int starts_ = 0;
};

TEST_F(RegistrarTest, UpstreamSidecarRegistersAndDeregistersTheDriver) {
  StartRegistrar();
  ASSERT_TRUE(berth::testing::Eventually([&] { return !DriverEntry().is_null(); }, absl::Seconds(30)))
      << registrar_->Output();
  json entry = DriverEntry();
  EXPECT_EQ(entry["nodeID"], "fake-node-1");
  EXPECT_EQ(entry["topologyKeys"], json({"topology.fake/zone"}));
  EXPECT_EQ(entry["allocatable"]["count"], 5);
  json node = Get("nodes", kNode);
  EXPECT_EQ(json::parse(Str(node, {"metadata", "annotations", "csi.volume.kubernetes.io/nodeid"})),
            json({{kDriver, "fake-node-1"}}));
  EXPECT_EQ(Str(node, {"metadata", "labels", "topology.fake/zone"}), "z1");
  EXPECT_TRUE(directory_.Known(kDriver));
  // The sidecar heard that kubelet (the agent) accepted the registration.
  EXPECT_TRUE(berth::testing::Eventually([&] {
    return registrar_->Output().find("PluginRegistered:true") != std::string::npos;
  }, absl::Seconds(10))) << registrar_->Output();

  // SIGTERM: the sidecar removes its socket; the agent deregisters.
  registrar_->Signal(SIGTERM);
  ASSERT_TRUE(registrar_->Wait(absl::Seconds(10)).has_value());
  EXPECT_TRUE(berth::testing::Eventually([&] { return DriverEntry().is_null(); }, absl::Seconds(30)))
      << registrar_->Output();
  EXPECT_TRUE(berth::testing::Eventually([&] {
    return Str(Get("nodes", kNode), {"metadata", "annotations", "csi.volume.kubernetes.io/nodeid"}).find(kDriver) ==
           std::string::npos;
  }, absl::Seconds(10)));

  // Back again: registered again.
  StartRegistrar();
  EXPECT_TRUE(berth::testing::Eventually([&] { return !DriverEntry().is_null(); }, absl::Seconds(30)))
      << registrar_->Output();
}

}  // namespace
}  // namespace berth::node
