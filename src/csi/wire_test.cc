// Wire-format checks for proto/csi/v1/csi.proto: messages are encoded and the
// bytes compared with encodings worked out by hand from the CSI spec's field
// numbers and types. A wrong field number, type or oneof arm cannot pass.
#include <set>
#include <string>
#include <vector>

#include "csi/v1/csi.pb.h"
#include "google/protobuf/descriptor.h"
#include "gtest/gtest.h"

namespace berth::csi {
namespace {

std::string Bytes(std::initializer_list<int> b) {
  std::string s;
  for (int x : b) s.push_back(static_cast<char>(x));
  return s;
}

std::string Serialize(const google::protobuf::Message& m) {
  std::string out;
  EXPECT_TRUE(m.SerializeToString(&out));
  return out;
}

TEST(CsiWireTest, ProbeResponseWrapsBoolValue) {
  ::csi::v1::ProbeResponse r;
  r.mutable_ready()->set_value(true);
  EXPECT_EQ(Serialize(r), Bytes({0x0a, 0x02, 0x08, 0x01}));
}

TEST(CsiWireTest, CreateVolumeRequestAllFields) {
  ::csi::v1::CreateVolumeRequest r;
  r.set_name("v");
  r.mutable_capacity_range()->set_required_bytes(1024);
  auto* cap = r.add_volume_capabilities();
  cap->mutable_mount()->set_fs_type("xfs");
  cap->mutable_access_mode()->set_mode(::csi::v1::VolumeCapability::AccessMode::SINGLE_NODE_WRITER);
  (*r.mutable_parameters())["k"] = "v";
  (*r.mutable_secrets())["p"] = "s";
  r.mutable_volume_content_source()->mutable_snapshot()->set_snapshot_id("s1");
  (*r.mutable_accessibility_requirements()->add_requisite()->mutable_segments())["z"] = "1";
  (*r.mutable_mutable_parameters())["m"] = "1";

  const std::string want = Bytes({0x0a, 0x01, 'v'}) +                                         // 1 name
                           Bytes({0x12, 0x03, 0x08, 0x80, 0x08}) +                            // 2 capacity_range
                           Bytes({0x1a, 0x0b, 0x12, 0x05, 0x0a, 0x03, 'x', 'f', 's',          // 3 mount.fs_type
                                  0x1a, 0x02, 0x08, 0x01}) +                                  //   access_mode
                           Bytes({0x22, 0x06, 0x0a, 0x01, 'k', 0x12, 0x01, 'v'}) +            // 4 parameters
                           Bytes({0x2a, 0x06, 0x0a, 0x01, 'p', 0x12, 0x01, 's'}) +            // 5 secrets
                           Bytes({0x32, 0x06, 0x0a, 0x04, 0x0a, 0x02, 's', '1'}) +            // 6 content source
                           Bytes({0x3a, 0x0a, 0x0a, 0x08, 0x0a, 0x06, 0x0a, 0x01, 'z', 0x12,  // 7 requisite
                                  0x01, '1'}) +
                           Bytes({0x42, 0x06, 0x0a, 0x01, 'm', 0x12, 0x01, '1'});  // 8 mutable_parameters
  EXPECT_EQ(Serialize(r), want);

  ::csi::v1::CreateVolumeRequest back;
  ASSERT_TRUE(back.ParseFromString(want));
  EXPECT_EQ(back.secrets().at("p"), "s");
  EXPECT_EQ(back.volume_content_source().snapshot().snapshot_id(), "s1");
}

TEST(CsiWireTest, OneofArmsHaveTheirOwnNumbers) {
  ::csi::v1::PluginCapability service;
  service.mutable_service()->set_type(::csi::v1::PluginCapability::Service::CONTROLLER_SERVICE);
  EXPECT_EQ(Serialize(service), Bytes({0x0a, 0x02, 0x08, 0x01}));

  ::csi::v1::PluginCapability expansion;
  expansion.mutable_volume_expansion()->set_type(::csi::v1::PluginCapability::VolumeExpansion::OFFLINE);
  EXPECT_EQ(Serialize(expansion), Bytes({0x12, 0x02, 0x08, 0x02}));

  ::csi::v1::VolumeContentSource clone;
  clone.mutable_volume()->set_volume_id("a");
  EXPECT_EQ(Serialize(clone), Bytes({0x12, 0x03, 0x0a, 0x01, 'a'}));
}

TEST(CsiWireTest, NodeStageVolumeRequestBlockAndMaps) {
  ::csi::v1::NodeStageVolumeRequest r;
  r.set_volume_id("v");
  (*r.mutable_publish_context())["a"] = "b";
  r.set_staging_target_path("/s");
  r.mutable_volume_capability()->mutable_block();
  r.mutable_volume_capability()->mutable_access_mode()->set_mode(
      ::csi::v1::VolumeCapability::AccessMode::MULTI_NODE_MULTI_WRITER);
  (*r.mutable_secrets())["x"] = "y";
  (*r.mutable_volume_context())["c"] = "d";
  const std::string want = Bytes({0x0a, 0x01, 'v'}) + Bytes({0x12, 0x06, 0x0a, 0x01, 'a', 0x12, 0x01, 'b'}) +
                           Bytes({0x1a, 0x02, '/', 's'}) + Bytes({0x22, 0x06, 0x0a, 0x00, 0x1a, 0x02, 0x08, 0x05}) +
                           Bytes({0x2a, 0x06, 0x0a, 0x01, 'x', 0x12, 0x01, 'y'}) +
                           Bytes({0x32, 0x06, 0x0a, 0x01, 'c', 0x12, 0x01, 'd'});
  EXPECT_EQ(Serialize(r), want);
}

TEST(CsiWireTest, ListVolumesResponseRepeatedNested) {
  ::csi::v1::ListVolumesResponse r;
  for (int i = 0; i < 2; ++i) {
    auto* e = r.add_entries();
    e->mutable_volume()->set_capacity_bytes(1);
    e->mutable_volume()->set_volume_id("a");
    e->mutable_status()->add_published_node_ids("n");
  }
  r.set_next_token("t");
  const std::string entry = Bytes({0x0a, 0x0c, 0x0a, 0x05, 0x08, 0x01, 0x12, 0x01, 'a', 0x12, 0x03, 0x0a, 0x01, 'n'});
  EXPECT_EQ(Serialize(r), entry + entry + Bytes({0x12, 0x01, 't'}));
}

TEST(CsiWireTest, GetCapacityResponseLargeVarintAndWrapper) {
  ::csi::v1::GetCapacityResponse r;
  r.set_available_capacity(int64_t{1} << 40);
  r.mutable_maximum_volume_size()->set_value(5);
  EXPECT_EQ(Serialize(r), Bytes({0x08, 0x80, 0x80, 0x80, 0x80, 0x80, 0x20, 0x12, 0x02, 0x08, 0x05}));
}

TEST(CsiWireTest, MethodPathsMatchTheSpec) {
  const auto* pool = google::protobuf::DescriptorPool::generated_pool();
  for (const char* m :
       {"csi.v1.Identity.Probe", "csi.v1.Controller.CreateVolume", "csi.v1.Controller.ControllerModifyVolume",
        "csi.v1.Node.NodeStageVolume", "csi.v1.GroupController.CreateVolumeGroupSnapshot",
        "csi.v1.SnapshotMetadata.GetMetadataDelta"}) {
    EXPECT_NE(pool->FindMethodByName(m), nullptr) << m;
  }
  EXPECT_TRUE(pool->FindMethodByName("csi.v1.SnapshotMetadata.GetMetadataDelta")->server_streaming());
}

// Every field the spec marks csi_secret, and no other, carries the option.
TEST(CsiWireTest, SecretOptionOnExactlyTheSpecsFields) {
  const auto* file = ::csi::v1::CreateVolumeRequest::descriptor()->file();
  std::set<std::string> got;
  for (int i = 0; i < file->message_type_count(); ++i) {
    const auto* m = file->message_type(i);
    for (int j = 0; j < m->field_count(); ++j) {
      if (m->field(j)->options().GetExtension(::csi::v1::csi_secret)) {
        got.insert(std::string(m->field(j)->full_name()));
      }
    }
  }
  std::set<std::string> want;
  for (const char* m :
       {"CreateVolumeRequest", "DeleteVolumeRequest", "ControllerPublishVolumeRequest",
        "ControllerUnpublishVolumeRequest", "ValidateVolumeCapabilitiesRequest", "ControllerModifyVolumeRequest",
        "CreateSnapshotRequest", "DeleteSnapshotRequest", "ListSnapshotsRequest", "GetSnapshotRequest",
        "ControllerExpandVolumeRequest", "NodeStageVolumeRequest", "NodePublishVolumeRequest",
        "NodeExpandVolumeRequest", "CreateVolumeGroupSnapshotRequest", "DeleteVolumeGroupSnapshotRequest",
        "GetVolumeGroupSnapshotRequest", "GetMetadataAllocatedRequest", "GetMetadataDeltaRequest"}) {
    want.insert(std::string("csi.v1.") + m + ".secrets");
  }
  EXPECT_EQ(got, want);
  EXPECT_EQ(::csi::v1::csi_secret.number(), 1059);
  EXPECT_EQ(::csi::v1::alpha_field.number(), 1060);
}

}  // namespace
}  // namespace berth::csi
