#include "driver/identity_service.h"

#include "gtest/gtest.h"

namespace berth::driver {
namespace {

using ::csi::v1::PluginCapability;

TEST(IdentityServiceTest, InfoAndCapabilities) {
  IdentityService s("local.csi.berth.io", "1.2.3",
                    {ServiceCapability(PluginCapability::Service::CONTROLLER_SERVICE),
                     ExpansionCapability(PluginCapability::VolumeExpansion::ONLINE)},
                    [] { return true; });
  ::csi::v1::GetPluginInfoResponse info;
  ASSERT_TRUE(s.GetPluginInfo(nullptr, nullptr, &info).ok());
  EXPECT_EQ(info.name(), "local.csi.berth.io");
  EXPECT_EQ(info.vendor_version(), "1.2.3");

  ::csi::v1::GetPluginCapabilitiesResponse caps;
  ASSERT_TRUE(s.GetPluginCapabilities(nullptr, nullptr, &caps).ok());
  ASSERT_EQ(caps.capabilities_size(), 2);
  EXPECT_EQ(caps.capabilities(0).service().type(), PluginCapability::Service::CONTROLLER_SERVICE);
  EXPECT_EQ(caps.capabilities(1).volume_expansion().type(), PluginCapability::VolumeExpansion::ONLINE);
}

TEST(IdentityServiceTest, ProbeFollowsReadiness) {
  absl::StatusOr<bool> state = false;
  IdentityService s("d", "1", {}, [&] { return state; });
  ::csi::v1::ProbeResponse r;
  ASSERT_TRUE(s.Probe(nullptr, nullptr, &r).ok());
  ASSERT_TRUE(r.has_ready());
  EXPECT_FALSE(r.ready().value());

  state = true;
  ASSERT_TRUE(s.Probe(nullptr, nullptr, &r).ok());
  EXPECT_TRUE(r.ready().value());

  state = absl::InternalError("pool is read-only");
  grpc::Status st = s.Probe(nullptr, nullptr, &r);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(st.error_message(), "pool is read-only");
}

}  // namespace
}  // namespace berth::driver
