#include "controllers/snapshot/snapshot_metadata.h"

#include <memory>
#include <vector>

#include "client/object.h"
#include "common/status.h"
#include "common/strings.h"
#include "controllers/snapshot/snapshotter.h"
#include "csi/grpc_status.h"
#include "csi/v1/csi.grpc.pb.h"
#include "grpcpp/client_context.h"

namespace berth::controllers {
namespace {

using nlohmann::json;

constexpr char kGroup[] = "snapshot.storage.k8s.io";

// Where a VolumeSnapshot's storage snapshot is: the driver, its handle, and
// the node to call the driver for.
struct SnapshotRef {
  std::string driver;
  std::string handle;
  std::string node;
};

absl::StatusOr<SnapshotRef> Resolve(apiserver::Api& registry, client::DriverDirectory& directory, const std::string& ns,
                                    const std::string& name) {
  BERTH_ASSIGN_OR_RETURN(json snapshot, registry.Get(client::K("volumesnapshots", kGroup), ns, name));
  const json status = snapshot.value("status", json::object());
  const std::string content_name = status.value("boundVolumeSnapshotContentName", "");
  if (content_name.empty()) {
    return absl::FailedPreconditionError(
        StrCat("volume snapshot ", ns, "/", name, " is not bound to a snapshot content yet"));
  }
  BERTH_ASSIGN_OR_RETURN(json content, registry.Get(client::K("volumesnapshotcontents", kGroup), "", content_name));
  SnapshotRef ref;
  ref.driver = content["spec"].value("driver", "");
  // Dynamic contents get the handle in their status, pre-provisioned ones
  // name it in their spec.
  ref.handle = content.value("status", json::object()).value("snapshotHandle", "");
  if (ref.handle.empty()) ref.handle = content["spec"].value("source", json::object()).value("snapshotHandle", "");
  if (ref.handle.empty()) {
    return absl::FailedPreconditionError(StrCat("volume snapshot ", ns, "/", name, " (content ", content_name,
                                                ") has no snapshot handle yet: it is not cut"));
  }
  // The node it was cut on, as the snapshotter calls the driver
  // (Snapshotter::CallNode).
  ref.node = content["metadata"].value("annotations", json::object()).value(kAnnSnapshotNode, "");
  if (ref.node.empty() && directory.Endpoint(ref.driver, "").empty()) {
    std::vector<std::string> nodes = directory.Nodes(ref.driver);
    if (nodes.size() == 1) ref.node = nodes[0];
  }
  return ref;
}

template <typename Response>
absl::Status Collect(grpc::ClientReader<Response>& reader, const std::string& driver, json& out) {
  Response msg;
  json& blocks = out["blocks"];
  blocks = json::array();
  bool first = true;
  while (reader.Read(&msg)) {
    if (first) {
      out["blockMetadataType"] = ::csi::v1::BlockMetadataType_Name(msg.block_metadata_type());
      out["volumeCapacityBytes"] = msg.volume_capacity_bytes();
      first = false;
    }
    for (const auto& b : msg.block_metadata()) {
      blocks.push_back({{"byteOffset", b.byte_offset()}, {"sizeBytes", b.size_bytes()}});
    }
  }
  grpc::Status st = reader.Finish();
  if (st.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
    return absl::InvalidArgumentError(StrCat("CSI driver ", driver, " does not serve SnapshotMetadata"));
  }
  if (!st.ok()) {
    absl::Status s = csi::FromGrpcStatus(st);
    return absl::Status(s.code(), StrCat("CSI driver ", driver, ": ", s.message()));
  }
  if (first) return absl::InternalError(StrCat("CSI driver ", driver, " ended the stream without a message"));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<json> GetSnapshotMetadata(apiserver::Api& registry, client::DriverDirectory& directory,
                                         const std::string& ns, const std::string& name, const std::string& base) {
  BERTH_ASSIGN_OR_RETURN(SnapshotRef target, Resolve(registry, directory, ns, name));
  std::optional<SnapshotRef> from;
  if (!base.empty()) {
    BERTH_ASSIGN_OR_RETURN(from, Resolve(registry, directory, ns, base));
    if (from->driver != target.driver) {
      return absl::InvalidArgumentError(StrCat("volume snapshot ", ns, "/", base, " is of driver ", from->driver,
                                               " and ", ns, "/", name, " of ", target.driver,
                                               ": a delta is between two snapshots of one volume"));
    }
  }
  BERTH_ASSIGN_OR_RETURN(auto channel, directory.Channel(target.driver, target.node));
  auto stub = ::csi::v1::SnapshotMetadata::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + kSnapshotMetadataTimeout));
  json out = json::object();
  if (!from) {
    ::csi::v1::GetMetadataAllocatedRequest req;
    req.set_snapshot_id(target.handle);
    auto reader = stub->GetMetadataAllocated(&ctx, req);
    BERTH_RETURN_IF_ERROR(Collect(*reader, target.driver, out));
  } else {
    ::csi::v1::GetMetadataDeltaRequest req;
    req.set_base_snapshot_id(from->handle);
    req.set_target_snapshot_id(target.handle);
    auto reader = stub->GetMetadataDelta(&ctx, req);
    BERTH_RETURN_IF_ERROR(Collect(*reader, target.driver, out));
  }
  return out;
}

}  // namespace berth::controllers
