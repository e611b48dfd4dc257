#include "common/status.h"

#include <cerrno>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"

namespace berth {
namespace {

TEST(StatusTest, ErrnoStatusMapsCodeAndMessage) {
  absl::Status s = ErrnoStatus(ENOENT, "open /x");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "open /x: No such file or directory");
  EXPECT_EQ(ErrnoStatus(EACCES, "y").code(), absl::StatusCode::kPermissionDenied);
}

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError("odd");
  return x / 2;
}

absl::Status Quarter(int x, int* out) {
  BERTH_ASSIGN_OR_RETURN(int h, Half(x));
  BERTH_ASSIGN_OR_RETURN(*out, Half(h));
  return absl::OkStatus();
}

TEST(StatusTest, AssignOrReturnPropagates) {
  int out = 0;
  EXPECT_TRUE(Quarter(8, &out).ok());
  EXPECT_EQ(out, 2);
  EXPECT_EQ(Quarter(6, &out).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace berth
