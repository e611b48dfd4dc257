// The ground csi-sanity covers, in our own suite, over berth-csi's real
// socket: required fields, spec error codes, idempotency, pagination,
// capacity and topology. (csi-sanity itself is run by hand; see README.)
#include <filesystem>

#include "driver_process.h"
#include "gmock/gmock.h"

namespace berth::testing {
namespace {

namespace fs = std::filesystem;
using ::csi::v1::VolumeCapability;
using grpc::StatusCode;

VolumeCapability Cap(bool block = false) { return block ? BlockCapability() : MountCapability(); }

class DriverConformanceTest : public DriverProcessTest {
 protected:
  // Capacity is checked to the byte: an allocated pool, whose capacity does
  // not move with the host's free space as a sparse one's does.
  DriverConformanceTest() {
    pool_size_ = "4Gi";
    pool_sparse_ = false;
  }
  grpc::Status Create(const std::string& name, int64_t required, int64_t limit, ::csi::v1::CreateVolumeResponse* resp,
                      const ::csi::v1::TopologyRequirement* topo = nullptr) {
    ::csi::v1::CreateVolumeRequest req;
    req.set_name(name);
    if (required) req.mutable_capacity_range()->set_required_bytes(required);
    if (limit) req.mutable_capacity_range()->set_limit_bytes(limit);
    *req.add_volume_capabilities() = Cap();
    if (topo) *req.mutable_accessibility_requirements() = *topo;
    return driver_->controller().CreateVolume(Ctx().get(), req, resp);
  }
  std::string MustCreate(const std::string& name, int64_t size = 64 << 20) {
    ::csi::v1::CreateVolumeResponse resp;
    grpc::Status st = Create(name, size, 0, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp.volume().volume_id();
  }
  std::string MustSnapshot(const std::string& name, const std::string& vol) {
    ::csi::v1::CreateSnapshotRequest req;
    req.set_name(name);
    req.set_source_volume_id(vol);
    ::csi::v1::CreateSnapshotResponse resp;
    grpc::Status st = driver_->controller().CreateSnapshot(Ctx().get(), req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp.snapshot().snapshot_id();
  }
};

TEST_F(DriverConformanceTest, IdentityAdvertisesWhatIsServed) {
  ::csi::v1::GetPluginCapabilitiesResponse caps;
  ASSERT_TRUE(driver_->identity().GetPluginCapabilities(Ctx().get(), {}, &caps).ok());
  std::set<int> services, expansion;
  for (const auto& c : caps.capabilities()) {
    if (c.has_service()) services.insert(c.service().type());
    if (c.has_volume_expansion()) expansion.insert(c.volume_expansion().type());
  }
  using S = ::csi::v1::PluginCapability::Service;
  using E = ::csi::v1::PluginCapability::VolumeExpansion;
  EXPECT_EQ(services, (std::set<int>{S::CONTROLLER_SERVICE, S::VOLUME_ACCESSIBILITY_CONSTRAINTS,
                                     S::GROUP_CONTROLLER_SERVICE, S::SNAPSHOT_METADATA_SERVICE}));
  EXPECT_EQ(expansion, (std::set<int>{E::ONLINE, E::OFFLINE}));
  ::csi::v1::ProbeResponse probe;
  ASSERT_TRUE(driver_->identity().Probe(Ctx().get(), {}, &probe).ok());
  EXPECT_TRUE(probe.ready().value());
  ::csi::v1::NodeGetInfoResponse info;
  ASSERT_TRUE(driver_->node().NodeGetInfo(Ctx().get(), {}, &info).ok());
  EXPECT_EQ(info.node_id(), "node-a");
  EXPECT_EQ(info.accessible_topology().segments().at("topology.berth.io/node"), "node-a");
}

TEST_F(DriverConformanceTest, RequiredFieldsAreInvalidArgumentBeforeLookups) {
  auto& c = driver_->controller();
  auto& n = driver_->node();
  {
    ::csi::v1::CreateVolumeResponse r;
    ::csi::v1::CreateVolumeRequest q;
    EXPECT_EQ(c.CreateVolume(Ctx().get(), q, &r).error_code(), StatusCode::INVALID_ARGUMENT);
    q.set_name("x");
    EXPECT_EQ(c.CreateVolume(Ctx().get(), q, &r).error_code(), StatusCode::INVALID_ARGUMENT);
  }
  {
    ::csi::v1::DeleteVolumeResponse r;
    EXPECT_EQ(c.DeleteVolume(Ctx().get(), {}, &r).error_code(), StatusCode::INVALID_ARGUMENT);
  }
  {
    ::csi::v1::ControllerPublishVolumeRequest q;
    ::csi::v1::ControllerPublishVolumeResponse r;
    q.set_volume_id("fake-vol-id-1");
    q.set_node_id("fake-node");
    EXPECT_EQ(c.ControllerPublishVolume(Ctx().get(), q, &r).error_code(), StatusCode::INVALID_ARGUMENT);
  }
  {
    ::csi::v1::NodeStageVolumeRequest q;
    ::csi::v1::NodeStageVolumeResponse r;
    q.set_volume_id("fake-vol-id-1");
    *q.mutable_volume_capability() = Cap();
    EXPECT_EQ(n.NodeStageVolume(Ctx().get(), q, &r).error_code(), StatusCode::INVALID_ARGUMENT);
  }
  {
    ::csi::v1::NodePublishVolumeRequest q;
    ::csi::v1::NodePublishVolumeResponse r;
    q.set_volume_id("fake-vol-id-1");
    q.set_target_path(driver_->kubelet() + "/t");
    EXPECT_EQ(n.NodePublishVolume(Ctx().get(), q, &r).error_code(), StatusCode::INVALID_ARGUMENT);
  }
  {
    ::csi::v1::CreateSnapshotRequest q;
    ::csi::v1::CreateSnapshotResponse r;
    q.set_source_volume_id("testId");
    EXPECT_EQ(c.CreateSnapshot(Ctx().get(), q, &r).error_code(), StatusCode::INVALID_ARGUMENT);
  }
  // IDs that could become paths are refused outright.
  for (const std::string& bad : std::vector<std::string>{"../../etc/passwd", "vol/x", std::string("a\0b", 3),
                                                         std::string(129, 'v'), "\xc3\xa9t\xc3\xa9"}) {
    ::csi::v1::DeleteVolumeRequest q;
    q.set_volume_id(bad);
    ::csi::v1::DeleteVolumeResponse r;
    EXPECT_EQ(c.DeleteVolume(Ctx().get(), q, &r).error_code(), StatusCode::INVALID_ARGUMENT) << bad;
  }
}

TEST_F(DriverConformanceTest, UnknownIdsFollowTheSpec) {
  auto& c = driver_->controller();
  auto& n = driver_->node();
  ::csi::v1::DeleteVolumeRequest dv;
  dv.set_volume_id("fake-vol-id");
  ::csi::v1::DeleteVolumeResponse dvr;
  EXPECT_TRUE(c.DeleteVolume(Ctx().get(), dv, &dvr).ok());
  ::csi::v1::DeleteSnapshotRequest ds;
  ds.set_snapshot_id("reallyfakesnapshotid");
  ::csi::v1::DeleteSnapshotResponse dsr;
  EXPECT_TRUE(c.DeleteSnapshot(Ctx().get(), ds, &dsr).ok());
  ::csi::v1::ControllerUnpublishVolumeRequest cu;
  cu.set_volume_id("fake-vol-id");
  cu.set_node_id("node-a");
  ::csi::v1::ControllerUnpublishVolumeResponse cur;
  EXPECT_TRUE(c.ControllerUnpublishVolume(Ctx().get(), cu, &cur).ok());

  ::csi::v1::ValidateVolumeCapabilitiesRequest vv;
  vv.set_volume_id("fake-vol-id-1");
  *vv.add_volume_capabilities() = Cap();
  ::csi::v1::ValidateVolumeCapabilitiesResponse vvr;
  EXPECT_EQ(c.ValidateVolumeCapabilities(Ctx().get(), vv, &vvr).error_code(), StatusCode::NOT_FOUND);

  ::csi::v1::CreateVolumeRequest cv;
  cv.set_name("from-nothing");
  *cv.add_volume_capabilities() = Cap();
  cv.mutable_volume_content_source()->mutable_snapshot()->set_snapshot_id("non-existing-snapshot-id");
  ::csi::v1::CreateVolumeResponse cvr;
  EXPECT_EQ(c.CreateVolume(Ctx().get(), cv, &cvr).error_code(), StatusCode::NOT_FOUND);

  ::csi::v1::NodeGetVolumeStatsRequest st;
  st.set_volume_id("fake-vol-id-1");
  st.set_volume_path("some/path");
  ::csi::v1::NodeGetVolumeStatsResponse str;
  EXPECT_EQ(n.NodeGetVolumeStats(Ctx().get(), st, &str).error_code(), StatusCode::NOT_FOUND);

  // A real volume, a node that does not exist.
  const std::string vol = MustCreate("pvc-real");
  ::csi::v1::ControllerPublishVolumeRequest cp;
  cp.set_volume_id(vol);
  cp.set_node_id("fake-node-id-1");
  *cp.mutable_volume_capability() = Cap();
  ::csi::v1::ControllerPublishVolumeResponse cpr;
  EXPECT_EQ(c.ControllerPublishVolume(Ctx().get(), cp, &cpr).error_code(), StatusCode::NOT_FOUND);
}

TEST_F(DriverConformanceTest, CreateIsIdempotentByNameAndRefusesIncompatibleRepeats) {
  ::csi::v1::CreateVolumeResponse a, b, c;
  ASSERT_TRUE(Create("pvc-same", 100 << 20, 0, &a).ok());
  ASSERT_TRUE(Create("pvc-same", 100 << 20, 0, &b).ok());
  EXPECT_EQ(a.volume().volume_id(), b.volume().volume_id());
  EXPECT_EQ(a.volume().capacity_bytes(), 100 << 20);
  EXPECT_EQ(Create("pvc-same", 200 << 20, 200 << 20, &c).error_code(), StatusCode::ALREADY_EXISTS);
  // Rounded up to whole MiB; a limit that allows no MiB multiple is out of range.
  ::csi::v1::CreateVolumeResponse odd;
  ASSERT_TRUE(Create("pvc-odd", (64 << 20) + 1, 0, &odd).ok());
  EXPECT_EQ(odd.volume().capacity_bytes(), 65 << 20);
  EXPECT_EQ(Create("pvc-tight", (64 << 20) + 1, (64 << 20) + 2, &c).error_code(), StatusCode::OUT_OF_RANGE);
  // A 128-byte name works; 129 does not.
  EXPECT_TRUE(Create(std::string(128, 'n'), 0, 0, &c).ok());
  EXPECT_EQ(Create(std::string(129, 'n'), 0, 0, &c).error_code(), StatusCode::INVALID_ARGUMENT);
  // Snapshots are idempotent by name too; another source is a conflict.
  const std::string other = MustCreate("pvc-other");
  const std::string s1 = MustSnapshot("snap-x", a.volume().volume_id());
  EXPECT_EQ(MustSnapshot("snap-x", a.volume().volume_id()), s1);
  ::csi::v1::CreateSnapshotRequest q;
  q.set_name("snap-x");
  q.set_source_volume_id(other);
  ::csi::v1::CreateSnapshotResponse r;
  EXPECT_EQ(driver_->controller().CreateSnapshot(Ctx().get(), q, &r).error_code(), StatusCode::ALREADY_EXISTS);
}

TEST_F(DriverConformanceTest, CapacityAndTopology) {
  ::csi::v1::GetCapacityResponse before, after;
  ASSERT_TRUE(driver_->controller().GetCapacity(Ctx().get(), {}, &before).ok());
  // A 4Gi pool image, less its XFS's own use and the metadata reserve.
  EXPECT_GT(before.available_capacity(), 3584LL << 20);
  EXPECT_LT(before.available_capacity(), 4LL << 30);
  EXPECT_EQ(before.maximum_volume_size().value(), before.available_capacity());
  MustCreate("pvc-1g", 1LL << 30);
  ASSERT_TRUE(driver_->controller().GetCapacity(Ctx().get(), {}, &after).ok());
  EXPECT_EQ(before.available_capacity() - after.available_capacity(), 1LL << 30);

  // More than the pool can hold (ratio 1.0): RESOURCE_EXHAUSTED naming numbers.
  ::csi::v1::CreateVolumeResponse r;
  grpc::Status st = Create("pvc-huge", 1LL << 40, 0, &r);
  EXPECT_EQ(st.error_code(), StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(st.error_message(), ::testing::HasSubstr("1Ti"));
  // Growing a volume past what the pool holds: RESOURCE_EXHAUSTED too (the
  // resizer records it as ControllerResizeInfeasible), the volume unchanged.
  const std::string grown = MustCreate("pvc-grow", 64 << 20);
  ::csi::v1::ControllerExpandVolumeRequest ereq;
  ereq.set_volume_id(grown);
  ereq.mutable_capacity_range()->set_required_bytes(1LL << 40);
  ::csi::v1::ControllerExpandVolumeResponse eresp;
  st = driver_->controller().ControllerExpandVolume(Ctx().get(), ereq, &eresp);
  EXPECT_EQ(st.error_code(), StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  EXPECT_THAT(st.error_message(), ::testing::HasSubstr("expanding volume " + grown));
  ::csi::v1::GetCapacityResponse unchanged;
  ASSERT_TRUE(driver_->controller().GetCapacity(Ctx().get(), {}, &unchanged).ok());
  EXPECT_EQ(after.available_capacity() - unchanged.available_capacity(), 64LL << 20) << "nothing stays reserved";

  // Capacity for another node's topology is zero.
  ::csi::v1::GetCapacityRequest other;
  (*other.mutable_accessible_topology()->mutable_segments())["topology.berth.io/node"] = "node-b";
  ::csi::v1::GetCapacityResponse zero;
  ASSERT_TRUE(driver_->controller().GetCapacity(Ctx().get(), other, &zero).ok());
  EXPECT_EQ(zero.available_capacity(), 0);

  // Requisite topology without this node cannot be provisioned.
  ::csi::v1::TopologyRequirement topo;
  (*topo.add_requisite()->mutable_segments())["topology.berth.io/node"] = "node-b";
  EXPECT_EQ(Create("pvc-elsewhere", 0, 0, &r, &topo).error_code(), StatusCode::RESOURCE_EXHAUSTED);
  (*topo.add_requisite()->mutable_segments())["topology.berth.io/node"] = "node-a";
  ASSERT_TRUE(Create("pvc-here", 0, 0, &r, &topo).ok());
  ASSERT_EQ(r.volume().accessible_topology_size(), 1);
  EXPECT_EQ(r.volume().accessible_topology(0).segments().at("topology.berth.io/node"), "node-a");
}

TEST_F(DriverConformanceTest, ListingsPaginateAndFilter) {
  std::vector<std::string> vols;
  for (int i = 0; i < 5; ++i) vols.push_back(MustCreate("pvc-list-" + std::to_string(i)));
  ::csi::v1::ListVolumesRequest q;
  q.set_max_entries(2);
  std::vector<std::string> seen;
  while (true) {
    ::csi::v1::ListVolumesResponse r;
    ASSERT_TRUE(driver_->controller().ListVolumes(Ctx().get(), q, &r).ok());
    EXPECT_LE(r.entries_size(), 2);
    for (const auto& e : r.entries()) seen.push_back(e.volume().volume_id());
    if (r.next_token().empty()) break;
    q.set_starting_token(r.next_token());
  }
  std::sort(vols.begin(), vols.end());
  EXPECT_EQ(seen, vols);
  q.set_starting_token("invalid-token");
  ::csi::v1::ListVolumesResponse bad;
  EXPECT_EQ(driver_->controller().ListVolumes(Ctx().get(), q, &bad).error_code(), StatusCode::ABORTED);

  const std::string s0 = MustSnapshot("snap-l0", vols[0]);
  MustSnapshot("snap-l1", vols[1]);
  MustSnapshot("snap-l2", vols[1]);
  ::csi::v1::ListSnapshotsRequest sq;
  ::csi::v1::ListSnapshotsResponse sr;
  sq.set_snapshot_id(s0);
  ASSERT_TRUE(driver_->controller().ListSnapshots(Ctx().get(), sq, &sr).ok());
  ASSERT_EQ(sr.entries_size(), 1);
  EXPECT_EQ(sr.entries(0).snapshot().source_volume_id(), vols[0]);
  sq.Clear();
  sq.set_source_volume_id(vols[1]);
  sr.Clear();
  ASSERT_TRUE(driver_->controller().ListSnapshots(Ctx().get(), sq, &sr).ok());
  EXPECT_EQ(sr.entries_size(), 2);
  sq.Clear();
  sq.set_snapshot_id("none-exist-id");
  sr.Clear();
  ASSERT_TRUE(driver_->controller().ListSnapshots(Ctx().get(), sq, &sr).ok());
  EXPECT_EQ(sr.entries_size(), 0);
  sq.Clear();
  sq.set_max_entries(2);
  sr.Clear();
  ASSERT_TRUE(driver_->controller().ListSnapshots(Ctx().get(), sq, &sr).ok());
  EXPECT_EQ(sr.entries_size(), 2);
  ASSERT_FALSE(sr.next_token().empty());
  sq.set_max_entries(0);
  sq.set_starting_token(sr.next_token());
  sr.Clear();
  ASSERT_TRUE(driver_->controller().ListSnapshots(Ctx().get(), sq, &sr).ok());
  EXPECT_EQ(sr.entries_size(), 1);
}

TEST_F(DriverConformanceTest, PublishRecordsNodesAndRefusesIncompatibleRepeat) {
  const std::string vol = MustCreate("pvc-pub");
  ::csi::v1::ControllerPublishVolumeRequest q;
  q.set_volume_id(vol);
  q.set_node_id("node-a");
  *q.mutable_volume_capability() = Cap();
  ::csi::v1::ControllerPublishVolumeResponse r;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(driver_->controller().ControllerPublishVolume(Ctx().get(), q, &r).ok());
  q.set_readonly(true);
  EXPECT_EQ(driver_->controller().ControllerPublishVolume(Ctx().get(), q, &r).error_code(), StatusCode::ALREADY_EXISTS);
  // Published volumes cannot be deleted.
  ::csi::v1::DeleteVolumeRequest d;
  d.set_volume_id(vol);
  ::csi::v1::DeleteVolumeResponse dr;
  EXPECT_EQ(driver_->controller().DeleteVolume(Ctx().get(), d, &dr).error_code(), StatusCode::FAILED_PRECONDITION);
  ::csi::v1::ControllerGetVolumeRequest g;
  g.set_volume_id(vol);
  ::csi::v1::ControllerGetVolumeResponse gr;
  ASSERT_TRUE(driver_->controller().ControllerGetVolume(Ctx().get(), g, &gr).ok());
  EXPECT_THAT(gr.status().published_node_ids(), ::testing::ElementsAre("node-a"));
  EXPECT_FALSE(gr.status().volume_condition().abnormal());
  ::csi::v1::ControllerUnpublishVolumeRequest u;
  u.set_volume_id(vol);
  ::csi::v1::ControllerUnpublishVolumeResponse ur;
  ASSERT_TRUE(driver_->controller().ControllerUnpublishVolume(Ctx().get(), u, &ur).ok());
  EXPECT_TRUE(driver_->controller().DeleteVolume(Ctx().get(), d, &dr).ok());
  // A missing image makes the volume's condition abnormal.
  const std::string v2 = MustCreate("pvc-gone");
  fs::remove(driver_->pool() + "/volumes/" + v2 + ".img");
  g.set_volume_id(v2);
  gr.Clear();
  ASSERT_TRUE(driver_->controller().ControllerGetVolume(Ctx().get(), g, &gr).ok());
  EXPECT_TRUE(gr.status().volume_condition().abnormal());
}

TEST_F(DriverConformanceTest, ValidateCapabilitiesConfirmsOnlyWhatFits) {
  const std::string vol = MustCreate("pvc-validate");
  ::csi::v1::ValidateVolumeCapabilitiesRequest q;
  q.set_volume_id(vol);
  *q.add_volume_capabilities() = Cap();
  ::csi::v1::ValidateVolumeCapabilitiesResponse r;
  ASSERT_TRUE(driver_->controller().ValidateVolumeCapabilities(Ctx().get(), q, &r).ok());
  EXPECT_TRUE(r.has_confirmed());
  q.clear_volume_capabilities();
  *q.add_volume_capabilities() = Cap(/*block=*/true);
  r.Clear();
  ASSERT_TRUE(driver_->controller().ValidateVolumeCapabilities(Ctx().get(), q, &r).ok());
  EXPECT_FALSE(r.has_confirmed());
  EXPECT_FALSE(r.message().empty());
  q.clear_volume_capabilities();
  auto multi = Cap();
  multi.mutable_access_mode()->set_mode(VolumeCapability::AccessMode::MULTI_NODE_MULTI_WRITER);
  *q.add_volume_capabilities() = multi;
  r.Clear();
  ASSERT_TRUE(driver_->controller().ValidateVolumeCapabilities(Ctx().get(), q, &r).ok());
  EXPECT_FALSE(r.has_confirmed());
}

}  // namespace
}  // namespace berth::testing
