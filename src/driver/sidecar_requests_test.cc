// The calls the kubernetes-csi sidecars and kubelet make, in the shapes each
// version sends them (read from their sources), answered as they need:
//  - external-provisioner v4.x's capacity controller asks GetCapacity with
//    one capability {mount: {}, access_mode: UNKNOWN}, the class parameters
//    and the node's topology segment; v5.x leaves the capability out. Both
//    must get the pool's real capacity, or every CSIStorageCapacity reads 0
//    and WaitForFirstConsumer pods never schedule.
//  - the topology the node reports (NodeGetInfo, kubelet's CSINode keys and
//    node label) is the segment capacity is asked for and volumes carry.
//  - the capabilities each sidecar checks before it acts.
#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "common/testing/temp_dir.h"
#include "driver/driver.h"
#include "driver/testing/fakes.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace berth::driver {
namespace {

using ::csi::v1::VolumeCapability;
using Mode = ::csi::v1::VolumeCapability::AccessMode;

class SidecarRequestsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DriverOptions o;
    o.endpoint = "unix:///unused.sock";
    o.node_id = "node-a";
    o.pool = dir_.Join("pool");
    o.kubelet_root = dir_.Join("kubelet");
    o.controller_expansion = false;  // the DaemonSet's --node-expansion-only
    auto d = Driver::Open(o, {&loops_, &mounter_, &formatter_, &freezer_});
    ASSERT_TRUE(d.ok()) << d.status();
    driver_ = std::move(*d);
  }

  ::csi::v1::Topology NodeTopology() {
    ::csi::v1::NodeGetInfoResponse info;
    EXPECT_TRUE(driver_->node().NodeGetInfo(nullptr, nullptr, &info).ok());
    return info.accessible_topology();
  }

  // What the provisioner's capacity controller sends for the class
  // berth-local on this node (v5.x: no capability).
  ::csi::v1::GetCapacityRequest ProvisionerRequest(bool v4) {
    ::csi::v1::GetCapacityRequest req;
    (*req.mutable_parameters())["csi.storage.k8s.io/fstype"] = "ext4";
    *req.mutable_accessible_topology() = NodeTopology();
    if (v4) {
      VolumeCapability* cap = req.add_volume_capabilities();
      cap->mutable_mount();
      cap->mutable_access_mode()->set_mode(Mode::UNKNOWN);
    }
    return req;
  }

  int64_t Capacity(const ::csi::v1::GetCapacityRequest& req) {
    ::csi::v1::GetCapacityResponse resp;
    grpc::Status st = driver_->controller().GetCapacity(nullptr, &req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp.available_capacity();
  }

  int64_t PoolAvailable() { return driver_->pool().GetCapacity()->available_bytes; }

  std::string Create(const std::string& name) {
    ::csi::v1::CreateVolumeRequest req;
    req.set_name(name);
    req.mutable_capacity_range()->set_required_bytes(64 << 20);
    VolumeCapability* cap = req.add_volume_capabilities();
    cap->mutable_mount()->set_fs_type("ext4");
    cap->mutable_access_mode()->set_mode(Mode::SINGLE_NODE_WRITER);
    *req.mutable_accessibility_requirements()->add_requisite() = NodeTopology();
    ::csi::v1::CreateVolumeResponse resp;
    EXPECT_TRUE(driver_->controller().CreateVolume(nullptr, &req, &resp).ok());
    return resp.volume().volume_id();
  }

  berth::testing::TempDir dir_;
  testing::FakeLoopDevices loops_;
  testing::FakeMounter mounter_;
  testing::FakeFormatter formatter_{loops_};
  testing::FakeFreezer freezer_;
  std::unique_ptr<Driver> driver_;
};

TEST_F(SidecarRequestsTest, ProvisionerV4AndV5GetTheRealCapacity) {
  const int64_t available = PoolAvailable();
  ASSERT_GT(available, 0);
  EXPECT_EQ(Capacity(ProvisionerRequest(/*v4=*/true)), available);
  EXPECT_EQ(Capacity(ProvisionerRequest(/*v4=*/false)), available);
  // And they follow what is provisioned.
  Create("pvc-1");
  EXPECT_EQ(Capacity(ProvisionerRequest(true)), available - (64 << 20));
  EXPECT_EQ(Capacity(ProvisionerRequest(false)), available - (64 << 20));
}

TEST_F(SidecarRequestsTest, CapabilitiesConstrainOnlyWhatTheyName) {
  const int64_t available = PoolAvailable();
  auto with = [&](const std::function<void(VolumeCapability*)>& fill) {
    ::csi::v1::GetCapacityRequest req = ProvisionerRequest(false);
    fill(req.add_volume_capabilities());
    return Capacity(req);
  };
  // No access mode at all, no access type, block with UNKNOWN, a known mode.
  EXPECT_EQ(with([](VolumeCapability* c) { c->mutable_mount(); }), available);
  EXPECT_EQ(with([](VolumeCapability* c) { c->mutable_access_mode()->set_mode(Mode::SINGLE_NODE_WRITER); }), available);
  EXPECT_EQ(with([](VolumeCapability* c) {
              c->mutable_block();
              c->mutable_access_mode()->set_mode(Mode::UNKNOWN);
            }),
            available);
  EXPECT_EQ(with([](VolumeCapability* c) {
              c->mutable_mount()->set_fs_type("xfs");
              c->mutable_access_mode()->set_mode(Mode::SINGLE_NODE_SINGLE_WRITER);
            }),
            available);
  // What no berth volume can be: nothing fits.
  EXPECT_EQ(with([](VolumeCapability* c) {
              c->mutable_mount();
              c->mutable_access_mode()->set_mode(Mode::MULTI_NODE_MULTI_WRITER);
            }),
            0);
  EXPECT_EQ(with([](VolumeCapability* c) {
              c->mutable_mount()->set_fs_type("btrfs");
              c->mutable_access_mode()->set_mode(Mode::UNKNOWN);
            }),
            0);
  // Parameters berth-csi would refuse in CreateVolume: nothing fits either.
  ::csi::v1::GetCapacityRequest unknown = ProvisionerRequest(true);
  (*unknown.mutable_parameters())["replicas"] = "3";
  EXPECT_EQ(Capacity(unknown), 0);
  // The scheduler's node weighting (seed 001) is no volume property: a class
  // with it offers the whole pool, and its volumes are made.
  ::csi::v1::GetCapacityRequest weighted = ProvisionerRequest(true);
  (*weighted.mutable_parameters())["berth.io/node-weighting"] = "VolumeWeighted";
  EXPECT_EQ(Capacity(weighted), available);
}

TEST_F(SidecarRequestsTest, TopologyIsTheNodesOwnSegmentEverywhere) {
  const ::csi::v1::Topology node = NodeTopology();
  ASSERT_EQ(node.segments_size(), 1);
  EXPECT_EQ(node.segments().at("topology.berth.io/node"), "node-a");
  // Capacity for this node's segment (what the provisioner asks in node
  // deployment), none for another node's or a segment with other keys.
  EXPECT_EQ(Capacity(ProvisionerRequest(true)), PoolAvailable());
  ::csi::v1::GetCapacityRequest other = ProvisionerRequest(true);
  (*other.mutable_accessible_topology()->mutable_segments())["topology.berth.io/node"] = "node-b";
  EXPECT_EQ(Capacity(other), 0);
  ::csi::v1::GetCapacityRequest zone = ProvisionerRequest(true);
  (*zone.mutable_accessible_topology()->mutable_segments())["topology.kubernetes.io/zone"] = "z";
  EXPECT_EQ(Capacity(zone), 0);
  // Volumes carry the same segment (the PV's nodeAffinity with Topology=true).
  const std::string vol = Create("pvc-topo");
  ::csi::v1::ListVolumesRequest list;
  ::csi::v1::ListVolumesResponse listed;
  ASSERT_TRUE(driver_->controller().ListVolumes(nullptr, &list, &listed).ok());
  ASSERT_EQ(listed.entries_size(), 1);
  EXPECT_EQ(listed.entries(0).volume().volume_id(), vol);
  ASSERT_EQ(listed.entries(0).volume().accessible_topology_size(), 1);
  const auto& segments = listed.entries(0).volume().accessible_topology(0).segments();
  EXPECT_EQ((std::map<std::string, std::string>(segments.begin(), segments.end())),
            (std::map<std::string, std::string>(node.segments().begin(), node.segments().end())));
  EXPECT_TRUE(listed.entries(0).status().has_volume_condition());
}

TEST_F(SidecarRequestsTest, ListVolumesResumesAfterTheTokensVolumeWasDeleted) {
  std::vector<std::string> ids;
  for (int i = 0; i < 4; ++i) ids.push_back(Create("pvc-list-" + std::to_string(i)));
  std::sort(ids.begin(), ids.end());
  ::csi::v1::ListVolumesRequest first;
  first.set_max_entries(2);
  ::csi::v1::ListVolumesResponse page1;
  ASSERT_TRUE(driver_->controller().ListVolumes(nullptr, &first, &page1).ok());
  ASSERT_EQ(page1.next_token(), ids[1]);
  ::csi::v1::DeleteVolumeRequest del;
  del.set_volume_id(ids[1]);
  ::csi::v1::DeleteVolumeResponse deleted;
  ASSERT_TRUE(driver_->controller().DeleteVolume(nullptr, &del, &deleted).ok());
  ::csi::v1::ListVolumesRequest next;
  next.set_starting_token(page1.next_token());
  ::csi::v1::ListVolumesResponse page2;
  ASSERT_TRUE(driver_->controller().ListVolumes(nullptr, &next, &page2).ok());
  std::vector<std::string> rest;
  for (const auto& e : page2.entries()) rest.push_back(e.volume().volume_id());
  EXPECT_THAT(rest, ::testing::ElementsAre(ids[2], ids[3]));
}

TEST_F(SidecarRequestsTest, EverySidecarFindsTheCapabilitiesItChecks) {
  using Rpc = ::csi::v1::ControllerServiceCapability::RPC;
  using NodeRpc = ::csi::v1::NodeServiceCapability::RPC;
  ::csi::v1::ControllerGetCapabilitiesResponse controller;
  ASSERT_TRUE(driver_->controller().ControllerGetCapabilities(nullptr, nullptr, &controller).ok());
  std::set<int> rpcs;
  for (const auto& c : controller.capabilities()) rpcs.insert(c.rpc().type());
  // external-provisioner: provisioning, capacity (--enable-capacity),
  // clones, ReadWriteOncePod; csi-snapshotter: snapshots, and ListSnapshots
  // for pre-provisioned contents.
  for (Rpc::Type r : {Rpc::CREATE_DELETE_VOLUME, Rpc::GET_CAPACITY, Rpc::CLONE_VOLUME, Rpc::SINGLE_NODE_MULTI_WRITER,
                      Rpc::CREATE_DELETE_SNAPSHOT, Rpc::LIST_SNAPSHOTS}) {
    EXPECT_TRUE(rpcs.count(r)) << Rpc::Type_Name(r);
  }
  // external-resizer: with --node-expansion-only no controller expansion,
  // so it takes its trivial (PV-only) path, which needs node expansion.
  EXPECT_FALSE(rpcs.count(Rpc::EXPAND_VOLUME));
  ::csi::v1::NodeGetCapabilitiesResponse node;
  ASSERT_TRUE(driver_->node().NodeGetCapabilities(nullptr, nullptr, &node).ok());
  std::set<int> node_rpcs;
  for (const auto& c : node.capabilities()) node_rpcs.insert(c.rpc().type());
  // kubelet: staging, stats, expansion, health, ReadWriteOncePod.
  for (NodeRpc::Type r : {NodeRpc::STAGE_UNSTAGE_VOLUME, NodeRpc::GET_VOLUME_STATS, NodeRpc::EXPAND_VOLUME,
                          NodeRpc::VOLUME_CONDITION, NodeRpc::SINGLE_NODE_MULTI_WRITER}) {
    EXPECT_TRUE(node_rpcs.count(r)) << NodeRpc::Type_Name(r);
  }
  // external-provisioner's topology support needs the plugin capability.
  ::csi::v1::GetPluginCapabilitiesResponse plugin;
  ASSERT_TRUE(driver_->services()[0] != nullptr);
  auto* identity = static_cast<IdentityService*>(driver_->services()[0]);
  ASSERT_TRUE(identity->GetPluginCapabilities(nullptr, nullptr, &plugin).ok());
  bool topology = false;
  for (const auto& c : plugin.capabilities()) {
    topology = topology || c.service().type() == ::csi::v1::PluginCapability::Service::VOLUME_ACCESSIBILITY_CONSTRAINTS;
  }
  EXPECT_TRUE(topology);
}

}  // namespace
}  // namespace berth::driver
