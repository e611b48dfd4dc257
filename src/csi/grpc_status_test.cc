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

TEST(GrpcStatusTest, OnlyCodesThatMayLeaveWorkRunningAreNotFinal) {
  for (auto code : {absl::StatusCode::kCancelled, absl::StatusCode::kDeadlineExceeded, absl::StatusCode::kUnavailable,
                    absl::StatusCode::kResourceExhausted, absl::StatusCode::kAborted}) {
    EXPECT_FALSE(IsFinalError(absl::Status(code, "x"))) << code;
  }
  for (auto code :
       {absl::StatusCode::kInvalidArgument, absl::StatusCode::kNotFound, absl::StatusCode::kAlreadyExists,
        absl::StatusCode::kFailedPrecondition, absl::StatusCode::kOutOfRange, absl::StatusCode::kInternal,
        absl::StatusCode::kUnimplemented, absl::StatusCode::kPermissionDenied, absl::StatusCode::kUnknown}) {
    EXPECT_TRUE(IsFinalError(absl::Status(code, "x"))) << code;
  }
  EXPECT_FALSE(IsFinalError(absl::OkStatus()));
}

}  // namespace
}  // namespace berth::csi
