#include "cri/containerd.h"

#include "absl/strings/match.h"
#include "common/fs.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace berth::cri {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(SplitPodCidrTest, OneNodeKeepsTheWholeRange) {
  auto s = SplitPodCidr("10.88.0.0/16", 1);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_THAT(*s, ElementsAre("10.88.0.0/16"));
}

TEST(SplitPodCidrTest, SplitsIntoEqualPowerOfTwoSubnets) {
  auto s = SplitPodCidr("10.88.0.0/16", 3);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_THAT(*s, ElementsAre("10.88.0.0/18", "10.88.64.0/18", "10.88.128.0/18"));
}

TEST(SplitPodCidrTest, RefusesWhatCannotWork) {
  EXPECT_EQ(SplitPodCidr("10.88.0.0/27", 4).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SplitPodCidr("fd00::/64", 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SplitPodCidr("10.88.0.1/16", 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SplitPodCidr("10.88.0.0", 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SplitPodCidr("10.88.0.0/33", 1).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ContainerdSetupTest, EverythingLivesUnderItsDirectory) {
  ContainerdSetup s{.dir = "/var/lib/berth/containerd/n1", .pod_cidr = "10.88.0.0/24"};
  ASSERT_TRUE(CheckContainerdSetup(s).ok());
  const std::string toml = ContainerdConfigToml(s);
  EXPECT_THAT(toml, HasSubstr("root = \"/var/lib/berth/containerd/n1/root\""));
  EXPECT_THAT(toml, HasSubstr("state = \"/var/lib/berth/containerd/n1/state\""));
  EXPECT_THAT(toml, HasSubstr("address = \"/var/lib/berth/containerd/n1/containerd.sock\""));
  EXPECT_THAT(toml, HasSubstr("sandbox_image = \"berth.local/pause:1\""));
  EXPECT_THAT(toml, HasSubstr("conf_dir = \"/var/lib/berth/containerd/n1/cni/net.d\""));
  EXPECT_THAT(toml, HasSubstr("netns_mounts_under_state_dir = true"));
  EXPECT_FALSE(absl::StrContains(toml, "/run/containerd"));
  EXPECT_FALSE(absl::StrContains(toml, "/var/lib/containerd"));

  auto conf = nlohmann::json::parse(CniConflist(s));
  const auto& bridge = conf["plugins"][0];
  EXPECT_EQ(bridge["type"], "bridge");
  EXPECT_EQ(bridge["bridge"], s.Bridge());
  EXPECT_LE(s.Bridge().size(), 15u);
  EXPECT_EQ(bridge["ipMasq"], false);
  EXPECT_EQ(bridge["ipam"]["ranges"][0][0]["subnet"], "10.88.0.0/24");
  EXPECT_EQ(bridge["ipam"]["dataDir"], "/var/lib/berth/containerd/n1/cni/ipam");
  // Another directory, another bridge.
  EXPECT_NE(s.Bridge(), (ContainerdSetup{.dir = "/var/lib/berth/containerd/n2", .pod_cidr = ""}.Bridge()));
}

TEST(ContainerdSetupTest, RefusesPathsThatCannotWork) {
  EXPECT_EQ(CheckContainerdSetup({.dir = "relative", .pod_cidr = "10.88.0.0/24"}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckContainerdSetup({.dir = "/a\"b", .pod_cidr = "10.88.0.0/24"}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckContainerdSetup({.dir = "/" + std::string(100, 'x'), .pod_cidr = "10.88.0.0/24"}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckContainerdSetup({.dir = "/x", .pod_cidr = "10.88.0.0/30"}).code(), absl::StatusCode::kInvalidArgument);
}

TEST(ContainerdSetupTest, WritesBothFilesPrivately) {
  testing::TempDir tmp;
  ContainerdSetup s{.dir = tmp.path() + "/ctd", .pod_cidr = "10.88.0.0/24"};
  ASSERT_TRUE(WriteContainerdFiles(s).ok());
  auto toml = ReadFile(s.Config());
  ASSERT_TRUE(toml.ok());
  EXPECT_EQ(*toml, ContainerdConfigToml(s));
  auto conf = ReadFile(s.CniConfDir() + "/10-berth.conflist");
  ASSERT_TRUE(conf.ok());
  EXPECT_EQ(*conf, CniConflist(s));
  ASSERT_TRUE(WriteContainerdFiles(s).ok());  // again: idempotent
}

}  // namespace
}  // namespace berth::cri
