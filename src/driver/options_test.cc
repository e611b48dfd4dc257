#include "driver/options.h"

#include <vector>

#include "gtest/gtest.h"

namespace berth::driver {
namespace {

DriverOptions Good() {
  DriverOptions o;
  o.endpoint = "unix:///tmp/x/csi.sock";
  o.node_id = "n1";
  o.pool = "/var/lib/berth/pool";
  return o;
}

TEST(DriverOptionsTest, AcceptsDefaults) { EXPECT_TRUE(ValidateDriverOptions(Good()).ok()); }

TEST(DriverOptionsTest, DriverNameFollowsTheSpec) {
  EXPECT_TRUE(ValidateDriverName("local.csi.berth.io").ok());
  EXPECT_TRUE(ValidateDriverName("a").ok());
  for (const std::string& bad :
       std::vector<std::string>{"", ".berth", "berth-", "ber th", "berth/x", std::string(64, 'a')}) {
    EXPECT_EQ(ValidateDriverName(bad).code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(DriverOptionsTest, RejectsBadNodeIdAndPaths) {
  auto o = Good();
  o.node_id = "";
  EXPECT_EQ(ValidateDriverOptions(o).code(), absl::StatusCode::kInvalidArgument);
  o = Good();
  o.node_id = "has space";
  EXPECT_EQ(ValidateDriverOptions(o).code(), absl::StatusCode::kInvalidArgument);
  o = Good();
  o.node_id = std::string(257, 'n');
  EXPECT_EQ(ValidateDriverOptions(o).code(), absl::StatusCode::kInvalidArgument);
  o = Good();
  o.pool = "relative/pool";
  EXPECT_EQ(ValidateDriverOptions(o).code(), absl::StatusCode::kInvalidArgument);
  o = Good();
  o.pool = "/var/lib/../../etc";
  absl::Status s = ValidateDriverOptions(o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--pool"), std::string::npos);
}

}  // namespace
}  // namespace berth::driver
