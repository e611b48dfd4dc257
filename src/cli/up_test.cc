// berth up's options: what --sidecar-driver accepts.
#include "cli/up.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace berth::cli {
namespace {

using ::testing::HasSubstr;

UpOptions Defaults() {
  UpOptions o;
  o.data_dir = "/var/lib/berth-test";
  return o;
}

TEST(UpOptionsTest, SidecarDriversAreDriverNamesBerthDoesNotDriveItself) {
  UpOptions o = Defaults();
  o.sidecar_drivers = {"side.csi.example.com", "other.csi.example.com"};
  EXPECT_TRUE(ValidateUpOptions(o).ok()) << ValidateUpOptions(o);

  o.sidecar_drivers = {kBerthDriver};
  EXPECT_EQ(ValidateUpOptions(o).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ValidateUpOptions(o).message(), HasSubstr("berth's own driver"));

  o.sidecar_drivers = {"not a name!"};
  EXPECT_EQ(ValidateUpOptions(o).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ValidateUpOptions(o).message(), HasSubstr("--sidecar-driver"));

  // An --external-driver is driven by berth's controllers: not both.
  o.sidecar_drivers = {"side.csi.example.com"};
  o.external_drivers = {"side.csi.example.com=unix:///run/side/csi.sock"};
  EXPECT_EQ(ValidateUpOptions(o).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ValidateUpOptions(o).message(), HasSubstr("also an --external-driver"));
  o.external_drivers = {"side.csi.example.com.other=unix:///run/side/csi.sock"};
  EXPECT_TRUE(ValidateUpOptions(o).ok()) << ValidateUpOptions(o);
}

}  // namespace
}  // namespace berth::cli
