#include "driver/pool/records.h"

#include "gtest/gtest.h"

namespace berth::driver {
namespace {

TEST(RecordsTest, VolumeRoundTrip) {
  VolumeRecord r;
  r.id = "vol-1";
  r.name = "pvc-1";
  r.capacity_bytes = 1 << 30;
  r.access_type = AccessType::kBlock;
  r.parameters = {{"fsType", "xfs"}};
  r.source_snapshot_id = "snap-1";
  r.created_unix_nanos = 123456789;
  r.publications = {{"node-a", true}};
  r.staging_path = "/k/s";
  r.block_device = "/dev/loop7";
  r.targets = {{"/k/t", false}};
  r.formatted = true;
  r.fs_bytes = 42;
  auto back = VolumeFromJson(ToJson(r));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, r);
}

TEST(RecordsTest, SnapshotAndGroupRoundTrip) {
  SnapshotRecord s;
  s.id = "snap-1";
  s.name = "n";
  s.source_volume_id = "vol-1";
  s.size_bytes = 5;
  s.group_snapshot_id = "group-1";
  s.formatted = true;
  EXPECT_EQ(*SnapshotFromJson(ToJson(s)), s);
  GroupSnapshotRecord g;
  g.id = "group-1";
  g.source_volume_ids = {"vol-1", "vol-2"};
  g.snapshot_ids = {"snap-1", "snap-2"};
  EXPECT_EQ(*GroupSnapshotFromJson(ToJson(g)), g);
}

TEST(RecordsTest, RefusesNewerFormatsAndGarbage) {
  EXPECT_EQ(VolumeFromJson(R"({"format": 99, "kind": "volume"})").status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(VolumeFromJson("{not json").status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(VolumeFromJson(R"({"format": 1, "kind": "volume"})").status().code(), absl::StatusCode::kDataLoss);
  SnapshotRecord s;
  EXPECT_EQ(VolumeFromJson(ToJson(s)).status().code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace berth::driver
