#include "csi/grpc_status.h"

#include "gtest/gtest.h"

namespace berth::csi {
namespace {

TEST(GrpcStatusTest, RoundTripsCodeAndMessage) {
  const absl::Status in = absl::ResourceExhaustedError("pool full");
  const grpc::Status g = ToGrpcStatus(in);
  EXPECT_EQ(g.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(g.error_message(), "pool full");
  EXPECT_EQ(FromGrpcStatus(g), in);
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  EXPECT_EQ(ToGrpcStatus(absl::AbortedError("x")).error_code(), grpc::StatusCode::ABORTED);
}

}  // namespace
}  // namespace berth::csi
