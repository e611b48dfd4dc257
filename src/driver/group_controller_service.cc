#include "driver/group_controller_service.h"

#include <algorithm>
#include <set>

#include "common/status.h"
#include "common/strings.h"
#include "csi/grpc_status.h"
#include "driver/pool/ids.h"
#include "spdlog/spdlog.h"

namespace berth::driver {
namespace {

using csi::ToGrpcStatus;

std::vector<std::string> Sorted(const google::protobuf::RepeatedPtrField<std::string>& ids) {
  std::vector<std::string> v(ids.begin(), ids.end());
  std::sort(v.begin(), v.end());
  return v;
}

}  // namespace

grpc::Status GroupControllerService::GroupControllerGetCapabilities(
    grpc::ServerContext*, const ::csi::v1::GroupControllerGetCapabilitiesRequest*,
    ::csi::v1::GroupControllerGetCapabilitiesResponse* resp) {
  resp->add_capabilities()->mutable_rpc()->set_type(
      ::csi::v1::GroupControllerServiceCapability::RPC::CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT);
  return grpc::Status::OK;
}

grpc::Status GroupControllerService::CreateVolumeGroupSnapshot(grpc::ServerContext*,
                                                               const ::csi::v1::CreateVolumeGroupSnapshotRequest* req,
                                                               ::csi::v1::CreateVolumeGroupSnapshotResponse* resp) {
  return ToGrpcStatus(DoCreate(*req, resp));
}
grpc::Status GroupControllerService::DeleteVolumeGroupSnapshot(grpc::ServerContext*,
                                                               const ::csi::v1::DeleteVolumeGroupSnapshotRequest* req,
                                                               ::csi::v1::DeleteVolumeGroupSnapshotResponse*) {
  return ToGrpcStatus(DoDelete(*req));
}
grpc::Status GroupControllerService::GetVolumeGroupSnapshot(grpc::ServerContext*,
                                                            const ::csi::v1::GetVolumeGroupSnapshotRequest* req,
                                                            ::csi::v1::GetVolumeGroupSnapshotResponse* resp) {
  return ToGrpcStatus(DoGet(*req, resp));
}

void GroupControllerService::Fill(const GroupSnapshotRecord& g, ::csi::v1::VolumeGroupSnapshot* out) {
  out->set_group_snapshot_id(g.id);
  out->mutable_creation_time()->set_seconds(g.created_unix_nanos / 1000000000);
  out->mutable_creation_time()->set_nanos(static_cast<int32_t>(g.created_unix_nanos % 1000000000));
  out->set_ready_to_use(true);
  for (const auto& sid : g.snapshot_ids) {
    if (auto s = ctx_.pool->GetSnapshot(sid)) FillSnapshot(*s, out->add_snapshots());
  }
}

absl::Status GroupControllerService::DoCreate(const ::csi::v1::CreateVolumeGroupSnapshotRequest& req,
                                              ::csi::v1::CreateVolumeGroupSnapshotResponse* resp) {
  BERTH_RETURN_IF_ERROR(ValidateName("name", req.name()));
  if (req.source_volume_ids().empty()) {
    return absl::InvalidArgumentError("source_volume_ids is required");
  }
  const std::vector<std::string> sources = Sorted(req.source_volume_ids());
  if (std::adjacent_find(sources.begin(), sources.end()) != sources.end()) {
    return absl::InvalidArgumentError("source_volume_ids names a volume twice");
  }
  for (const auto& v : sources) {
    BERTH_ASSIGN_OR_RETURN(bool ours, CheckId("source_volume_ids", v, IdKind::kVolume));
    if (!ours) return absl::NotFoundError(StrCat("source volume ", v, " not found"));
  }
  const std::string id = IdForName(IdKind::kGroupSnapshot, req.name());
  std::vector<std::string> keys = sources;
  keys.push_back(id);
  BERTH_ASSIGN_OR_RETURN(auto guard, ctx_.locks.TryAcquire(keys));

  if (auto existing = ctx_.pool->GetGroupSnapshot(id)) {
    std::vector<std::string> had = existing->source_volume_ids;
    std::sort(had.begin(), had.end());
    if (had != sources ||
        existing->parameters != std::map<std::string, std::string>(req.parameters().begin(), req.parameters().end())) {
      return absl::AlreadyExistsError(
          StrCat("a group snapshot named \"", req.name(), "\" already exists of other volumes or parameters"));
    }
    Fill(*existing, resp->mutable_group_snapshot());
    return absl::OkStatus();
  }
  std::vector<VolumeRecord> volumes;
  std::vector<std::string> freeze;
  for (const auto& v : sources) {
    auto r = ctx_.pool->GetVolume(v);
    if (!r) return absl::NotFoundError(StrCat("source volume ", v, " not found"));
    if (r->access_type == AccessType::kMount && !r->staging_path.empty()) {
      auto m = ctx_.mounter->Find(r->staging_path);
      if (m.ok() && m->has_value()) freeze.push_back(r->staging_path);
    }
    volumes.push_back(*r);
  }

  GroupSnapshotRecord g;
  g.id = id;
  g.name = req.name();
  g.source_volume_ids = sources;
  g.parameters = {req.parameters().begin(), req.parameters().end()};
  g.created_unix_nanos = absl::ToUnixNanos(absl::Now());
  std::vector<std::string> made;
  // All members are cut while every mounted member is frozen.
  absl::Status st = WithFrozen(*ctx_.freezer, freeze, [&]() -> absl::Status {
    for (const auto& v : volumes) {
      const std::string member_name = StrCat(req.name(), "/", v.id);
      const std::string sid = IdForName(IdKind::kSnapshot, member_name);
      BERTH_ASSIGN_OR_RETURN(SnapshotRecord s, ctx_.pool->CreateSnapshot(sid, member_name, v.id, g.parameters, id));
      made.push_back(s.id);
    }
    return absl::OkStatus();
  });
  if (st.ok()) {
    g.snapshot_ids = made;
    st = ctx_.pool->SaveGroupSnapshot(g);
  }
  if (!st.ok()) {
    for (const auto& sid : made) {
      if (absl::Status d = ctx_.pool->DeleteSnapshot(sid); !d.ok()) {
        spdlog::error("group snapshot {}: cleaning member {} failed: {}", id, sid, d.ToString());
      }
    }
    return st;
  }
  Fill(g, resp->mutable_group_snapshot());
  return absl::OkStatus();
}

absl::Status GroupControllerService::DoDelete(const ::csi::v1::DeleteVolumeGroupSnapshotRequest& req) {
  BERTH_ASSIGN_OR_RETURN(bool ours, CheckId("group_snapshot_id", req.group_snapshot_id(), IdKind::kGroupSnapshot));
  if (!ours) return absl::OkStatus();
  BERTH_ASSIGN_OR_RETURN(auto guard, ctx_.locks.TryAcquire({req.group_snapshot_id()}));
  auto g = ctx_.pool->GetGroupSnapshot(req.group_snapshot_id());
  if (!g) return absl::OkStatus();
  std::vector<std::string> have = g->snapshot_ids;
  std::sort(have.begin(), have.end());
  if (Sorted(req.snapshot_ids()) != have) {
    return absl::InvalidArgumentError(StrCat("snapshot_ids do not match the members of group snapshot ", g->id));
  }
  for (const auto& sid : g->snapshot_ids) BERTH_RETURN_IF_ERROR(ctx_.pool->DeleteSnapshot(sid));
  return ctx_.pool->DeleteGroupSnapshot(g->id);
}

absl::Status GroupControllerService::DoGet(const ::csi::v1::GetVolumeGroupSnapshotRequest& req,
                                           ::csi::v1::GetVolumeGroupSnapshotResponse* resp) {
  BERTH_ASSIGN_OR_RETURN(bool ours, CheckId("group_snapshot_id", req.group_snapshot_id(), IdKind::kGroupSnapshot));
  std::optional<GroupSnapshotRecord> g;
  if (ours) g = ctx_.pool->GetGroupSnapshot(req.group_snapshot_id());
  if (!g) return absl::NotFoundError(StrCat("group snapshot ", req.group_snapshot_id(), " not found"));
  std::vector<std::string> have = g->snapshot_ids;
  std::sort(have.begin(), have.end());
  if (!req.snapshot_ids().empty() && Sorted(req.snapshot_ids()) != have) {
    return absl::InvalidArgumentError(StrCat("snapshot_ids do not match the members of group snapshot ", g->id));
  }
  Fill(*g, resp->mutable_group_snapshot());
  return absl::OkStatus();
}

}  // namespace berth::driver
