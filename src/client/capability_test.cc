#include "client/capability.h"

#include "gtest/gtest.h"

namespace berth::client {
namespace {

using Mode = ::csi::v1::VolumeCapability::AccessMode;

TEST(CsiAccessModeTest, SplitModesOnlyForDriversWithSingleNodeMultiWriter) {
  // Kubernetes' ToCSIAccessMode, both ways.
  EXPECT_EQ(CsiAccessMode("ReadWriteOnce", SingleNodeModes::kLegacy), Mode::SINGLE_NODE_WRITER);
  EXPECT_EQ(CsiAccessMode("ReadWriteOncePod", SingleNodeModes::kLegacy), Mode::SINGLE_NODE_WRITER);
  EXPECT_EQ(CsiAccessMode("ReadWriteOnce", SingleNodeModes::kSplit), Mode::SINGLE_NODE_MULTI_WRITER);
  EXPECT_EQ(CsiAccessMode("ReadWriteOncePod", SingleNodeModes::kSplit), Mode::SINGLE_NODE_SINGLE_WRITER);
  for (SingleNodeModes m : {SingleNodeModes::kLegacy, SingleNodeModes::kSplit}) {
    EXPECT_EQ(CsiAccessMode("ReadOnlyMany", m), Mode::MULTI_NODE_READER_ONLY);
    EXPECT_EQ(CsiAccessMode("ReadWriteMany", m), Mode::MULTI_NODE_MULTI_WRITER);
  }
  EXPECT_EQ(CsiAccessMode("", SingleNodeModes::kLegacy), Mode::SINGLE_NODE_WRITER);
}

TEST(CsiAccessModeTest, APvWithReadWriteOncePodAmongItsModesIsUsedAsIt) {
  auto decoded = api::types::Decode<api::types::PersistentVolume>(
      {{"spec", {{"accessModes", {"ReadWriteOnce", "ReadWriteOncePod"}}, {"csi", {{"fsType", "xfs"}}}}}});
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  const api::types::PersistentVolume& pv = *decoded;
  EXPECT_EQ(PvVolumeCapability(pv, SingleNodeModes::kSplit).access_mode().mode(), Mode::SINGLE_NODE_SINGLE_WRITER);
  EXPECT_EQ(PvVolumeCapability(pv, SingleNodeModes::kLegacy).access_mode().mode(), Mode::SINGLE_NODE_WRITER);
  EXPECT_EQ(PvVolumeCapability(pv, SingleNodeModes::kLegacy).mount().fs_type(), "xfs");
}

}  // namespace
}  // namespace berth::client
