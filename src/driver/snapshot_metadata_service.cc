#include "driver/snapshot_metadata_service.h"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "common/fd.h"
#include "common/status.h"
#include "common/strings.h"
#include "csi/grpc_status.h"
#include "driver/pool/extents.h"
#include "driver/pool/ids.h"

namespace berth::driver {
namespace {

using csi::ToGrpcStatus;
using ::csi::v1::BlockMetadataType;

// A snapshot named by a request, its image held open: once opened, the
// image stays readable even if the snapshot is deleted meanwhile.
struct OpenSnapshot {
  SnapshotRecord record;
  Fd image;
};

// INVALID_ARGUMENT for a missing or malformed ID, before any lookup.
absl::Status CheckSnapshotId(std::string_view field, const std::string& id) {
  if (id.empty()) return absl::InvalidArgumentError(StrCat(field, " is required"));
  return CheckId(field, id, IdKind::kSnapshot).status();
}

absl::StatusOr<OpenSnapshot> Open(const Pool& pool, std::string_view field, const std::string& id) {
  BERTH_ASSIGN_OR_RETURN(bool ours, CheckId(field, id, IdKind::kSnapshot));
  std::optional<SnapshotRecord> r;
  if (ours) r = pool.GetSnapshot(id);
  if (!r) return absl::NotFoundError(StrCat("snapshot ", id, " (", field, ") not found"));
  const std::string path = pool.SnapshotImagePath(id);
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.ok()) {
    // Deleted between the lookup and the open.
    if (errno == ENOENT) return absl::NotFoundError(StrCat("snapshot ", id, " (", field, ") not found"));
    return ErrnoStatus(errno, StrCat("open image of snapshot ", id));
  }
  return OpenSnapshot{.record = std::move(*r), .image = std::move(fd)};
}

// The spec's checks on the paging fields that need no lookup.
absl::Status CheckPaging(int64_t starting_offset, int32_t max_results) {
  if (starting_offset < 0) {
    return absl::OutOfRangeError(StrCat("starting_offset ", starting_offset, " is negative"));
  }
  if (max_results < 0) {
    return absl::InvalidArgumentError(StrCat("max_results ", max_results, " is negative"));
  }
  return absl::OkStatus();
}

absl::Status CheckOffsetWithin(int64_t starting_offset, int64_t capacity) {
  if (starting_offset > capacity) {
    return absl::OutOfRangeError(
        StrCat("starting_offset ", starting_offset, " is beyond the snapshot's capacity of ", capacity, " bytes"));
  }
  return absl::OkStatus();
}

// Streams `ranges` (sorted, non-overlapping) from `starting_offset` on, at
// most `max_results` tuples per message. A range that straddles the offset
// is cut there: a CO that resumes after the last byte it received gets
// exactly what it had not, and the spec's S < B0.byte_offset + B0.size_bytes
// holds. At least one message is sent.
template <typename Response>
absl::Status Stream(const std::vector<ByteRange>& ranges, int64_t starting_offset, int32_t max_results,
                    int64_t capacity, const SnapshotMetadataService::Sink<Response>& send) {
  const int32_t per_message = max_results > 0 ? max_results : kDefaultMaxResults;
  Response msg;
  auto reset = [&] {
    msg.Clear();
    msg.set_block_metadata_type(BlockMetadataType::VARIABLE_LENGTH);
    msg.set_volume_capacity_bytes(capacity);
  };
  auto flush = [&]() -> absl::Status {
    if (!send(msg)) return absl::CancelledError("the stream was closed before all metadata was sent");
    reset();
    return absl::OkStatus();
  };
  reset();
  bool sent = false;
  auto first = std::upper_bound(ranges.begin(), ranges.end(), starting_offset,
                                [](int64_t offset, const ByteRange& r) { return offset < r.end(); });
  for (auto it = first; it != ranges.end(); ++it) {
    const int64_t offset = std::max(it->offset, starting_offset);
    auto* b = msg.add_block_metadata();
    b->set_byte_offset(offset);
    b->set_size_bytes(it->end() - offset);
    if (msg.block_metadata_size() == per_message) {
      BERTH_RETURN_IF_ERROR(flush());
      sent = true;
    }
  }
  if (!sent || msg.block_metadata_size() > 0) BERTH_RETURN_IF_ERROR(flush());
  return absl::OkStatus();
}

template <typename Response>
SnapshotMetadataService::Sink<Response> WriterSink(grpc::ServerContext* context, grpc::ServerWriter<Response>* writer) {
  return [context, writer](const Response& msg) { return !context->IsCancelled() && writer->Write(msg); };
}

}  // namespace

grpc::Status SnapshotMetadataService::GetMetadataAllocated(
    grpc::ServerContext* context, const ::csi::v1::GetMetadataAllocatedRequest* req,
    grpc::ServerWriter<::csi::v1::GetMetadataAllocatedResponse>* writer) {
  return ToGrpcStatus(DoGetAllocated(*req, WriterSink(context, writer)));
}

grpc::Status SnapshotMetadataService::GetMetadataDelta(
    grpc::ServerContext* context, const ::csi::v1::GetMetadataDeltaRequest* req,
    grpc::ServerWriter<::csi::v1::GetMetadataDeltaResponse>* writer) {
  return ToGrpcStatus(DoGetDelta(*req, WriterSink(context, writer)));
}

absl::Status SnapshotMetadataService::DoGetAllocated(const ::csi::v1::GetMetadataAllocatedRequest& req,
                                                     const Sink<::csi::v1::GetMetadataAllocatedResponse>& send) {
  BERTH_RETURN_IF_ERROR(CheckSnapshotId("snapshot_id", req.snapshot_id()));
  BERTH_RETURN_IF_ERROR(CheckPaging(req.starting_offset(), req.max_results()));
  BERTH_ASSIGN_OR_RETURN(OpenSnapshot snap, Open(*ctx_.pool, "snapshot_id", req.snapshot_id()));
  const int64_t capacity = snap.record.size_bytes;
  BERTH_RETURN_IF_ERROR(CheckOffsetWithin(req.starting_offset(), capacity));
  BERTH_ASSIGN_OR_RETURN(std::vector<Extent> map,
                         ReadExtentMap(snap.image.get(), StrCat("image of snapshot ", snap.record.id)));
  return Stream(AllocatedRanges(map, capacity), req.starting_offset(), req.max_results(), capacity, send);
}

absl::Status SnapshotMetadataService::DoGetDelta(const ::csi::v1::GetMetadataDeltaRequest& req,
                                                 const Sink<::csi::v1::GetMetadataDeltaResponse>& send) {
  BERTH_RETURN_IF_ERROR(CheckSnapshotId("base_snapshot_id", req.base_snapshot_id()));
  BERTH_RETURN_IF_ERROR(CheckSnapshotId("target_snapshot_id", req.target_snapshot_id()));
  BERTH_RETURN_IF_ERROR(CheckPaging(req.starting_offset(), req.max_results()));
  BERTH_ASSIGN_OR_RETURN(OpenSnapshot base, Open(*ctx_.pool, "base_snapshot_id", req.base_snapshot_id()));
  BERTH_ASSIGN_OR_RETURN(OpenSnapshot target, Open(*ctx_.pool, "target_snapshot_id", req.target_snapshot_id()));
  if (base.record.source_volume_id != target.record.source_volume_id) {
    return absl::InvalidArgumentError(StrCat("base snapshot ", base.record.id, " is of volume ",
                                             base.record.source_volume_id, " but target snapshot ", target.record.id,
                                             " is of volume ", target.record.source_volume_id,
                                             "; a delta is between two snapshots of one volume"));
  }
  // The target's capacity: the volume may have grown since the base, and
  // what was written in the new space is part of the delta.
  const int64_t capacity = target.record.size_bytes;
  BERTH_RETURN_IF_ERROR(CheckOffsetWithin(req.starting_offset(), capacity));
  const std::string what = StrCat("snapshots ", base.record.id, " and ", target.record.id);
  // One map after the other: reading both at once was slower on XFS (both
  // look up the same refcount btree to flag shared extents, and contend).
  BERTH_ASSIGN_OR_RETURN(std::vector<Extent> base_map,
                         ReadExtentMap(base.image.get(), StrCat("image of snapshot ", base.record.id)));
  BERTH_ASSIGN_OR_RETURN(std::vector<Extent> target_map,
                         ReadExtentMap(target.image.get(), StrCat("image of snapshot ", target.record.id)));
  std::vector<ByteRange> changed = DiffExtentMaps(base_map, target_map, capacity);
  // Without reflink the two images share no blocks, so every range holding
  // data is only a candidate: read both and keep the blocks that differ.
  // Only the part from starting_offset on is read.
  if (!ctx_.pool->reflink()) {
    std::vector<ByteRange> wanted;
    for (const ByteRange& r : changed) {
      if (r.end() <= req.starting_offset()) continue;
      const int64_t offset = std::max(r.offset, req.starting_offset());
      wanted.push_back({offset, r.end() - offset});
    }
    BERTH_ASSIGN_OR_RETURN(changed, ConfirmByContent(base.image.get(), target.image.get(), wanted, what));
  }
  return Stream(changed, req.starting_offset(), req.max_results(), capacity, send);
}

}  // namespace berth::driver
