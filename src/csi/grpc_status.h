// Conversion between absl::Status (used inside berth) and grpc::Status (used
// only at the gRPC service edge). The canonical codes share their numbering.
#pragma once

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace berth::csi {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

// Whether a failed call to the driver is final: the driver is not doing, and
// will not do, what was asked. CANCELLED, DEADLINE_EXCEEDED, UNAVAILABLE,
// RESOURCE_EXHAUSTED and ABORTED are not: the operation may have happened or
// may still be running, so its outcome is unknown (kubelet's isFinalError,
// which makes a NodeStage/NodePublish ending so leave the volume uncertain).
bool IsFinalError(const absl::Status& status);

// Whether an expansion failed because the size cannot be had (external-
// resizer's IsInfeasibleError, plus RESOURCE_EXHAUSTED: the pool cannot hold
// it): INVALID_ARGUMENT, OUT_OF_RANGE, NOT_FOUND, RESOURCE_EXHAUSTED. Retrying
// at once cannot help; the user may lower the request.
bool IsInfeasibleError(const absl::Status& status);

}  // namespace berth::csi
