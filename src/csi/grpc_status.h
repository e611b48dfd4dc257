// Conversion between absl::Status (used inside berth) and grpc::Status (used
// only at the gRPC service edge). The canonical codes share their numbering.
#pragma once

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace berth::csi {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace berth::csi
