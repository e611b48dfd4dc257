// The CSI SnapshotMetadata service of berth-csi (changed-block tracking):
// the allocated ranges of a snapshot and the ranges that changed between two
// snapshots of one volume, for block and filesystem volumes alike (a
// filesystem volume's image is its filesystem's block device).
//
// Both answers come from the images' extent maps (pool/extents.h): a
// snapshot is a reflink copy of its volume, so blocks unchanged between two
// snapshots are the same physical blocks and no data is read. On a pool that
// cannot reflink (snapshots are plain copies) the ranges where either image
// holds data are compared by content instead: the same answer, O(data).
//
// Answers are VARIABLE_LENGTH (the spec leaves the style to the plugin):
// runs of adjacent changed blocks are one tuple, block-aligned (4 KiB). A
// stream starts at `starting_offset` (a tuple straddling it is cut there),
// holds at most `max_results` tuples per message (kDefaultMaxResults when
// 0), and always holds at least one message, so a CO learns the capacity and
// type even when nothing is allocated or changed.
//
// Errors (the spec's): a missing or malformed ID, a negative max_results,
// or two snapshots of different volumes: INVALID_ARGUMENT; a snapshot that is
// not in this pool: NOT_FOUND; starting_offset negative or beyond the
// capacity: OUT_OF_RANGE. berth-csi needs no secrets; any given are ignored
// and never logged. A stream the CO closed ends with CANCELLED.
//
// The images are opened before anything is computed, so a snapshot deleted
// while its metadata streams stays readable until the stream ends; no
// operation lock is held (a backup reading a large delta must not make
// DeleteSnapshot fail with ABORTED).
//
// Thread-safety: thread-safe.
#pragma once

#include <functional>

#include "absl/status/status.h"
#include "csi/v1/csi.grpc.pb.h"
#include "driver/context.h"

namespace berth::driver {

// Tuples per response message when the request leaves max_results 0: about
// 20 KiB of protobuf, well under gRPC's 4 MiB message limit.
inline constexpr int32_t kDefaultMaxResults = 1024;

class SnapshotMetadataService final : public ::csi::v1::SnapshotMetadata::Service {
 public:
  // Receives each message of a stream in order; false when the stream is
  // gone (the computation stops with CANCELLED).
  template <typename Response>
  using Sink = std::function<bool(const Response&)>;

  explicit SnapshotMetadataService(DriverContext& ctx) : ctx_(ctx) {}

  // ::csi::v1::SnapshotMetadata::Service
  grpc::Status GetMetadataAllocated(grpc::ServerContext* context, const ::csi::v1::GetMetadataAllocatedRequest* req,
                                    grpc::ServerWriter<::csi::v1::GetMetadataAllocatedResponse>* writer) override;
  grpc::Status GetMetadataDelta(grpc::ServerContext* context, const ::csi::v1::GetMetadataDeltaRequest* req,
                                grpc::ServerWriter<::csi::v1::GetMetadataDeltaResponse>* writer) override;

  // The same operations with absl::Status, for callers inside berth-csi and
  // tests: every message goes to `send`.
  absl::Status DoGetAllocated(const ::csi::v1::GetMetadataAllocatedRequest& req,
                              const Sink<::csi::v1::GetMetadataAllocatedResponse>& send);
  absl::Status DoGetDelta(const ::csi::v1::GetMetadataDeltaRequest& req,
                          const Sink<::csi::v1::GetMetadataDeltaResponse>& send);

 private:
  DriverContext& ctx_;
};

}  // namespace berth::driver
