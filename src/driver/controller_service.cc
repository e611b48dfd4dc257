#include "driver/controller_service.h"

#include <sys/stat.h>

#include <algorithm>
#include <set>

#include "common/status.h"
#include "common/strings.h"
#include "common/units.h"
#include "csi/grpc_status.h"
#include "driver/pool/ids.h"

namespace berth::driver {
namespace {

using csi::ToGrpcStatus;
using ::csi::v1::ControllerServiceCapability;

constexpr std::string_view kReservedPrefix = "csi.storage.k8s.io/";

// berth's scheduler reads this class parameter (seed 001's node weighting);
// the provisioner passes every class parameter on, so it reaches us too.
constexpr char kNodeWeightingParameter[] = "berth.io/node-weighting";

// "true": a volume made from a snapshot or a clone may change between block
// and filesystem (the raw device of a filesystem volume, or a filesystem
// written as a device). berth's backup data mover sets it in its own
// requests (controllers/backup/data_mover.h); Kubernetes guards such changes
// in the CO (the content's allow-volume-mode-change annotation), berth-csi
// refuses them unless asked this way.
constexpr char kAllowModeChangeParameter[] = "csi.berth.io/allow-volume-mode-change";

// Class parameters berth-csi understands. Keys under csi.storage.k8s.io/ are
// added by Kubernetes' provisioner (PVC/PV names) and are accepted and kept;
// the node weighting is the scheduler's and says nothing about the volume.
absl::Status CheckParameters(const google::protobuf::Map<std::string, std::string>& params) {
  for (const auto& [k, v] : params) {
    if (k == "fsType" || k == kNodeWeightingParameter || std::string_view(k).starts_with(kReservedPrefix)) continue;
    if (k == kAllowModeChangeParameter) {
      if (v == "true" || v == "false") continue;
      return absl::InvalidArgumentError(StrCat("parameter ", k, " must be \"true\" or \"false\", not \"", v, "\""));
    }
    return absl::InvalidArgumentError(StrCat("unknown parameter \"", k, "\" (berth-csi knows: fsType, ",
                                             kNodeWeightingParameter, ", ", kAllowModeChangeParameter,
                                             ", csi.storage.k8s.io/*)"));
  }
  return absl::OkStatus();
}

// Whether `t` can be satisfied by this node: every key it names must be
// berth's topology key with this node's ID.
bool TopologyMatches(const ::csi::v1::Topology& t, const std::string& node_id) {
  if (t.segments().empty()) return false;
  for (const auto& [k, v] : t.segments()) {
    if (k != kTopologyKey || v != node_id) return false;
  }
  return true;
}

std::map<std::string, std::string> ToMap(const google::protobuf::Map<std::string, std::string>& m) {
  return {m.begin(), m.end()};
}

}  // namespace

int64_t MinimumVolumeSize(const std::string& fs_type, bool block) {
  if (block) return int64_t{1} << 20;
  if (fs_type == "xfs") return int64_t{300} << 20;  // mkfs.xfs refuses smaller
  return int64_t{16} << 20;
}

// ---- gRPC edge ----

grpc::Status ControllerService::CreateVolume(grpc::ServerContext*, const ::csi::v1::CreateVolumeRequest* req,
                                             ::csi::v1::CreateVolumeResponse* resp) {
  return ToGrpcStatus(DoCreateVolume(*req, resp));
}
grpc::Status ControllerService::DeleteVolume(grpc::ServerContext*, const ::csi::v1::DeleteVolumeRequest* req,
                                             ::csi::v1::DeleteVolumeResponse*) {
  return ToGrpcStatus(DoDeleteVolume(*req));
}
grpc::Status ControllerService::ControllerPublishVolume(grpc::ServerContext*,
                                                        const ::csi::v1::ControllerPublishVolumeRequest* req,
                                                        ::csi::v1::ControllerPublishVolumeResponse* resp) {
  return ToGrpcStatus(DoPublish(*req, resp));
}
grpc::Status ControllerService::ControllerUnpublishVolume(grpc::ServerContext*,
                                                          const ::csi::v1::ControllerUnpublishVolumeRequest* req,
                                                          ::csi::v1::ControllerUnpublishVolumeResponse*) {
  return ToGrpcStatus(DoUnpublish(*req));
}
grpc::Status ControllerService::ValidateVolumeCapabilities(grpc::ServerContext*,
                                                           const ::csi::v1::ValidateVolumeCapabilitiesRequest* req,
                                                           ::csi::v1::ValidateVolumeCapabilitiesResponse* resp) {
  return ToGrpcStatus(DoValidate(*req, resp));
}
grpc::Status ControllerService::ListVolumes(grpc::ServerContext*, const ::csi::v1::ListVolumesRequest* req,
                                            ::csi::v1::ListVolumesResponse* resp) {
  return ToGrpcStatus(DoListVolumes(*req, resp));
}
grpc::Status ControllerService::ControllerGetVolume(grpc::ServerContext*,
                                                    const ::csi::v1::ControllerGetVolumeRequest* req,
                                                    ::csi::v1::ControllerGetVolumeResponse* resp) {
  return ToGrpcStatus(DoGetVolume(*req, resp));
}
grpc::Status ControllerService::GetCapacity(grpc::ServerContext*, const ::csi::v1::GetCapacityRequest* req,
                                            ::csi::v1::GetCapacityResponse* resp) {
  return ToGrpcStatus(DoGetCapacity(*req, resp));
}
grpc::Status ControllerService::CreateSnapshot(grpc::ServerContext*, const ::csi::v1::CreateSnapshotRequest* req,
                                               ::csi::v1::CreateSnapshotResponse* resp) {
  return ToGrpcStatus(DoCreateSnapshot(*req, resp));
}
grpc::Status ControllerService::DeleteSnapshot(grpc::ServerContext*, const ::csi::v1::DeleteSnapshotRequest* req,
                                               ::csi::v1::DeleteSnapshotResponse*) {
  return ToGrpcStatus(DoDeleteSnapshot(*req));
}
grpc::Status ControllerService::ListSnapshots(grpc::ServerContext*, const ::csi::v1::ListSnapshotsRequest* req,
                                              ::csi::v1::ListSnapshotsResponse* resp) {
  return ToGrpcStatus(DoListSnapshots(*req, resp));
}
grpc::Status ControllerService::GetSnapshot(grpc::ServerContext*, const ::csi::v1::GetSnapshotRequest* req,
                                            ::csi::v1::GetSnapshotResponse* resp) {
  return ToGrpcStatus(DoGetSnapshot(*req, resp));
}
grpc::Status ControllerService::ControllerExpandVolume(grpc::ServerContext*,
                                                       const ::csi::v1::ControllerExpandVolumeRequest* req,
                                                       ::csi::v1::ControllerExpandVolumeResponse* resp) {
  return ToGrpcStatus(DoExpand(*req, resp));
}

grpc::Status ControllerService::ControllerGetCapabilities(grpc::ServerContext*,
                                                          const ::csi::v1::ControllerGetCapabilitiesRequest*,
                                                          ::csi::v1::ControllerGetCapabilitiesResponse* resp) {
  using Rpc = ControllerServiceCapability::RPC;
  // GET_SNAPSHOT (alpha) is served but not advertised: conformance suites
  // built for spec 1.10 reject capabilities they do not know.
  for (auto type :
       {Rpc::CREATE_DELETE_VOLUME, Rpc::PUBLISH_UNPUBLISH_VOLUME, Rpc::LIST_VOLUMES, Rpc::GET_CAPACITY,
        Rpc::CREATE_DELETE_SNAPSHOT, Rpc::LIST_SNAPSHOTS, Rpc::CLONE_VOLUME, Rpc::PUBLISH_READONLY, Rpc::EXPAND_VOLUME,
        Rpc::LIST_VOLUMES_PUBLISHED_NODES, Rpc::VOLUME_CONDITION, Rpc::GET_VOLUME, Rpc::SINGLE_NODE_MULTI_WRITER}) {
    // Without controller expansion, resizers grow only the PV object and
    // kubelet's NodeExpandVolume (on the node that holds the volume) grows
    // the image and its filesystem.
    if (type == Rpc::EXPAND_VOLUME && !ctx_.options.controller_expansion) continue;
    resp->add_capabilities()->mutable_rpc()->set_type(type);
  }
  return grpc::Status::OK;
}

// ---- Volumes ----

absl::Status ControllerService::DoCreateVolume(const ::csi::v1::CreateVolumeRequest& req,
                                               ::csi::v1::CreateVolumeResponse* resp) {
  BERTH_RETURN_IF_ERROR(ValidateName("name", req.name()));
  if (req.volume_capabilities().empty()) {
    return absl::InvalidArgumentError("volume_capabilities is required");
  }
  const bool block = req.volume_capabilities(0).has_block();
  std::string fs_type = block ? "" : RequestedFsType(req.volume_capabilities(0));
  if (!block && req.volume_capabilities(0).mount().fs_type().empty()) {
    if (auto it = req.parameters().find("fsType"); it != req.parameters().end()) fs_type = it->second;
  }
  for (const auto& cap : req.volume_capabilities()) {
    BERTH_RETURN_IF_ERROR(CheckCapability(cap));
    if (cap.has_block() != block) {
      return absl::InvalidArgumentError("volume_capabilities mix block and mount access; a volume is one or the other");
    }
    if (!block && !cap.mount().fs_type().empty() && cap.mount().fs_type() != fs_type) {
      return absl::InvalidArgumentError("volume_capabilities ask for different filesystem types");
    }
  }
  if (!block && !SupportedFsType(fs_type)) {
    return absl::InvalidArgumentError(StrCat("filesystem type \"", fs_type, "\" is not supported (ext4, xfs)"));
  }
  BERTH_RETURN_IF_ERROR(CheckParameters(req.parameters()));
  if (!req.mutable_parameters().empty()) {
    return absl::InvalidArgumentError("mutable_parameters are not supported (berth-csi has no MODIFY_VOLUME)");
  }

  // Capacity.
  const int64_t required = req.capacity_range().required_bytes();
  const int64_t limit = req.capacity_range().limit_bytes();
  if (required < 0 || limit < 0) {
    return absl::InvalidArgumentError("capacity_range must not be negative");
  }
  if (limit > 0 && limit < required) {
    return absl::InvalidArgumentError(
        StrCat("capacity_range limit_bytes ", limit, " is below required_bytes ", required));
  }
  int64_t size = required > 0 ? required : (limit > 0 ? std::min(limit, kDefaultVolumeSize) : kDefaultVolumeSize);
  size = std::max(RoundUpToMiB(size), MinimumVolumeSize(fs_type, block));

  // Content source.
  std::string source_snapshot, source_volume;
  if (req.has_volume_content_source()) {
    const auto& src = req.volume_content_source();
    if (src.has_snapshot()) {
      source_snapshot = src.snapshot().snapshot_id();
      BERTH_ASSIGN_OR_RETURN(bool ours, CheckId("source snapshot_id", source_snapshot, IdKind::kSnapshot));
      if (!ours) return absl::NotFoundError(StrCat("source snapshot ", source_snapshot, " not found"));
    } else if (src.has_volume()) {
      source_volume = src.volume().volume_id();
      BERTH_ASSIGN_OR_RETURN(bool ours, CheckId("source volume_id", source_volume, IdKind::kVolume));
      if (!ours) return absl::NotFoundError(StrCat("source volume ", source_volume, " not found"));
    } else {
      return absl::InvalidArgumentError("volume_content_source names neither snapshot nor volume");
    }
  }

  // Topology: the volume can only live on this node.
  if (req.has_accessibility_requirements() && !req.accessibility_requirements().requisite().empty()) {
    bool ok = false;
    for (const auto& t : req.accessibility_requirements().requisite()) {
      ok = ok || TopologyMatches(t, ctx_.options.node_id);
    }
    if (!ok) {
      return absl::ResourceExhaustedError(
          StrCat("no requisite topology includes this pool's node {", kTopologyKey, ": ", ctx_.options.node_id, "}"));
    }
  }

  const std::string id = IdForName(IdKind::kVolume, req.name());
  BERTH_ASSIGN_OR_RETURN(auto guard, ctx_.locks.TryAcquire({id, source_snapshot, source_volume}));

  const AccessType access = block ? AccessType::kBlock : AccessType::kMount;
  if (std::optional<VolumeRecord> existing = ctx_.pool->GetVolume(id)) {
    if (existing->name != req.name()) {
      return absl::InternalError(StrCat("volume id ", id, " is taken by another name"));
    }
    std::string why;
    if ((required > 0 && existing->capacity_bytes < required) || (limit > 0 && existing->capacity_bytes > limit)) {
      why = StrCat("its capacity ", existing->capacity_bytes, " is outside the requested range");
    } else if (existing->access_type != access) {
      why = "its access type differs";
    } else if (!block && existing->fs_type != fs_type) {
      why = StrCat("its filesystem is ", existing->fs_type);
    } else if (existing->parameters != ToMap(req.parameters())) {
      why = "its parameters differ";
    } else if (existing->source_snapshot_id != source_snapshot || existing->source_volume_id != source_volume) {
      why = "its content source differs";
    }
    if (!why.empty()) {
      return absl::AlreadyExistsError(StrCat("a volume named \"", req.name(), "\" already exists and ", why));
    }
    FillVolume(*existing, ctx_, resp->mutable_volume());
    return absl::OkStatus();
  }

  // Source compatibility and size.
  Quiesce quiesce;
  int64_t source_size = 0;
  const bool mode_change = [&] {
    auto it = req.parameters().find(kAllowModeChangeParameter);
    return it != req.parameters().end() && it->second == "true";
  }();
  if (!source_snapshot.empty()) {
    std::optional<SnapshotRecord> s = ctx_.pool->GetSnapshot(source_snapshot);
    if (!s) return absl::NotFoundError(StrCat("source snapshot ", source_snapshot, " not found"));
    if (!mode_change && (s->access_type != access || (!block && !s->fs_type.empty() && s->fs_type != fs_type))) {
      return absl::InvalidArgumentError(StrCat("snapshot ", source_snapshot, " is of a ",
                                               s->access_type == AccessType::kBlock ? "block" : s->fs_type,
                                               " volume and cannot be restored as this one"));
    }
    source_size = s->size_bytes;
  } else if (!source_volume.empty()) {
    std::optional<VolumeRecord> v = ctx_.pool->GetVolume(source_volume);
    if (!v) return absl::NotFoundError(StrCat("source volume ", source_volume, " not found"));
    if (!mode_change && (v->access_type != access || (!block && v->fs_type != fs_type))) {
      return absl::InvalidArgumentError(
          StrCat("volume ", source_volume, " is of another kind and cannot be cloned as this one"));
    }
    source_size = v->capacity_bytes;
    quiesce = ctx_.QuiesceFor(*v);
  }
  if (source_size > size) {
    if (limit > 0 && source_size > limit) {
      return absl::OutOfRangeError(StrCat("the source holds ", source_size, " bytes, more than limit_bytes ", limit));
    }
    size = source_size;
  }
  if (limit > 0 && size > limit) {
    return absl::OutOfRangeError(StrCat("berth-csi cannot make a ", block ? "block" : fs_type, " volume of at most ",
                                        limit, " bytes (minimum ", MinimumVolumeSize(fs_type, block), ")"));
  }

  Pool::NewVolume spec;
  spec.id = id;
  spec.name = req.name();
  spec.capacity_bytes = size;
  spec.access_type = access;
  spec.fs_type = fs_type;
  spec.parameters = ToMap(req.parameters());
  spec.source_snapshot_id = source_snapshot;
  spec.source_volume_id = source_volume;
  BERTH_ASSIGN_OR_RETURN(VolumeRecord r, ctx_.pool->CreateVolume(spec, quiesce));
  FillVolume(r, ctx_, resp->mutable_volume());
  return absl::OkStatus();
}

absl::Status ControllerService::DoDeleteVolume(const ::csi::v1::DeleteVolumeRequest& req) {
  BERTH_ASSIGN_OR_RETURN(bool ours, CheckId("volume_id", req.volume_id(), IdKind::kVolume));
  if (!ours) return absl::OkStatus();
  BERTH_ASSIGN_OR_RETURN(auto guard, ctx_.locks.TryAcquire({req.volume_id()}));
  std::optional<VolumeRecord> r = ctx_.pool->GetVolume(req.volume_id());
  if (!r) return absl::OkStatus();
  if (!r->staging_path.empty() || !r->targets.empty()) {
    return absl::FailedPreconditionError(
        StrCat("volume ", r->id, " is in use on node ", ctx_.options.node_id, " (",
               r->targets.empty() ? StrCat("staged at ", r->staging_path) : StrCat("published at ", r->targets[0].path),
               "); unpublish and unstage it first"));
  }
  if (!r->publications.empty()) {
    return absl::FailedPreconditionError(StrCat("volume ", r->id, " is published to node ", r->publications[0].node_id,
                                                "; ControllerUnpublishVolume it first"));
  }
  BERTH_ASSIGN_OR_RETURN(std::string dev, ctx_.loops->Find(ctx_.pool->VolumeImagePath(r->id)));
  if (!dev.empty()) {
    return absl::FailedPreconditionError(StrCat("volume ", r->id, " is still attached as ", dev, " on this node"));
  }
  return ctx_.pool->DeleteVolume(r->id);
}

absl::Status ControllerService::DoPublish(const ::csi::v1::ControllerPublishVolumeRequest& req,
                                          ::csi::v1::ControllerPublishVolumeResponse*) {
  if (req.volume_id().empty()) return absl::InvalidArgumentError("volume_id is required");
  if (req.node_id().empty()) return absl::InvalidArgumentError("node_id is required");
  if (!req.has_volume_capability()) {
    return absl::InvalidArgumentError("volume_capability is required");
  }
  BERTH_RETURN_IF_ERROR(CheckCapability(req.volume_capability()));
  BERTH_RETURN_IF_ERROR(CheckVolumeId("volume_id", req.volume_id()));
  BERTH_ASSIGN_OR_RETURN(auto guard, ctx_.locks.TryAcquire({req.volume_id()}));
  std::optional<VolumeRecord> r = ctx_.pool->GetVolume(req.volume_id());
  if (!r) return absl::NotFoundError(StrCat("volume ", req.volume_id(), " not found"));
  if (req.node_id() != ctx_.options.node_id) {
    return absl::NotFoundError(StrCat("node ", req.node_id(), " does not exist here: volume ", r->id, " lives on node ",
                                      ctx_.options.node_id));
  }
  BERTH_RETURN_IF_ERROR(CheckCapabilityFits(req.volume_capability(), *r));
  for (const auto& p : r->publications) {
    if (p.node_id == req.node_id()) {
      if (p.readonly != req.readonly()) {
        return absl::AlreadyExistsError(
            StrCat("volume ", r->id, " is already published to node ", p.node_id, " with readonly=", p.readonly));
      }
      return absl::OkStatus();
    }
  }
  if (ctx_.options.max_volumes > 0) {
    int64_t published = 0;
    for (const auto& v : ctx_.pool->ListVolumes()) {
      for (const auto& p : v.publications) published += p.node_id == req.node_id();
    }
    if (published >= ctx_.options.max_volumes) {
      return absl::ResourceExhaustedError(
          StrCat("node ", req.node_id(), " already has ", published, " volumes published (the maximum)"));
    }
  }
  r->publications.push_back({req.node_id(), req.readonly()});
  return ctx_.pool->UpdateVolume(*r);
}

absl::Status ControllerService::DoUnpublish(const ::csi::v1::ControllerUnpublishVolumeRequest& req) {
  BERTH_ASSIGN_OR_RETURN(bool ours, CheckId("volume_id", req.volume_id(), IdKind::kVolume));
  if (!ours) return absl::OkStatus();
  BERTH_ASSIGN_OR_RETURN(auto guard, ctx_.locks.TryAcquire({req.volume_id()}));
  std::optional<VolumeRecord> r = ctx_.pool->GetVolume(req.volume_id());
  if (!r) return absl::OkStatus();
  const size_t before = r->publications.size();
  std::erase_if(r->publications,
                [&](const Publication& p) { return req.node_id().empty() || p.node_id == req.node_id(); });
  if (r->publications.size() == before) return absl::OkStatus();
  return ctx_.pool->UpdateVolume(*r);
}

absl::Status ControllerService::DoValidate(const ::csi::v1::ValidateVolumeCapabilitiesRequest& req,
                                           ::csi::v1::ValidateVolumeCapabilitiesResponse* resp) {
  if (req.volume_id().empty()) return absl::InvalidArgumentError("volume_id is required");
  if (req.volume_capabilities().empty()) {
    return absl::InvalidArgumentError("volume_capabilities is required");
  }
  BERTH_RETURN_IF_ERROR(CheckVolumeId("volume_id", req.volume_id()));
  std::optional<VolumeRecord> r = ctx_.pool->GetVolume(req.volume_id());
  if (!r) return absl::NotFoundError(StrCat("volume ", req.volume_id(), " not found"));
  for (const auto& cap : req.volume_capabilities()) {
    if (absl::Status st = CheckCapabilityFits(cap, *r); !st.ok()) {
      resp->set_message(std::string(st.message()));
      return absl::OkStatus();
    }
  }
  if (!req.parameters().empty() && ToMap(req.parameters()) != r->parameters) {
    resp->set_message("the parameters differ from those the volume was created with");
    return absl::OkStatus();
  }
  if (!req.mutable_parameters().empty()) {
    resp->set_message("mutable_parameters are not supported");
    return absl::OkStatus();
  }
  auto* confirmed = resp->mutable_confirmed();
  *confirmed->mutable_volume_context() = req.volume_context();
  *confirmed->mutable_volume_capabilities() = req.volume_capabilities();
  *confirmed->mutable_parameters() = req.parameters();
  return absl::OkStatus();
}

::csi::v1::VolumeCondition ControllerService::Condition(const VolumeRecord& r) const {
  ::csi::v1::VolumeCondition c;
  struct stat st {};
  if (std::string fault = ctx_.VolumeFault(r); !fault.empty()) {
    c.set_abnormal(true);
    c.set_message(fault);
  } else if (::stat(ctx_.pool->VolumeImagePath(r.id).c_str(), &st) != 0) {
    c.set_abnormal(true);
    c.set_message(StrCat("image ", ctx_.pool->VolumeImagePath(r.id), " is missing"));
  } else if (st.st_size < r.capacity_bytes) {
    c.set_abnormal(true);
    c.set_message(StrCat("image is ", st.st_size, " bytes, smaller than the volume's ", r.capacity_bytes));
  } else {
    c.set_message("volume is healthy");
  }
  return c;
}

absl::Status ControllerService::DoListVolumes(const ::csi::v1::ListVolumesRequest& req,
                                              ::csi::v1::ListVolumesResponse* resp) {
  if (req.max_entries() < 0) return absl::InvalidArgumentError("max_entries must not be negative");
  if (!req.starting_token().empty()) {
    auto ours = CheckId("starting_token", req.starting_token(), IdKind::kVolume);
    if (!ours.ok() || !*ours) {
      return absl::AbortedError(
          StrCat("starting_token \"", req.starting_token(), "\" is not a token ListVolumes returned"));
    }
  }
  const auto volumes = ctx_.pool->ListVolumes();  // sorted by id
  int count = 0;
  for (const auto& v : volumes) {
    if (!req.starting_token().empty() && v.id <= req.starting_token()) continue;
    if (req.max_entries() > 0 && count == req.max_entries()) {
      resp->set_next_token(resp->entries(count - 1).volume().volume_id());
      break;
    }
    auto* e = resp->add_entries();
    FillVolume(v, ctx_, e->mutable_volume());
    for (const auto& p : v.publications) e->mutable_status()->add_published_node_ids(p.node_id);
    *e->mutable_status()->mutable_volume_condition() = Condition(v);
    ++count;
  }
  return absl::OkStatus();
}

absl::Status ControllerService::DoGetVolume(const ::csi::v1::ControllerGetVolumeRequest& req,
                                            ::csi::v1::ControllerGetVolumeResponse* resp) {
  BERTH_RETURN_IF_ERROR(CheckVolumeId("volume_id", req.volume_id()));
  std::optional<VolumeRecord> r = ctx_.pool->GetVolume(req.volume_id());
  if (!r) return absl::NotFoundError(StrCat("volume ", req.volume_id(), " not found"));
  FillVolume(*r, ctx_, resp->mutable_volume());
  for (const auto& p : r->publications) resp->mutable_status()->add_published_node_ids(p.node_id);
  *resp->mutable_status()->mutable_volume_condition() = Condition(*r);
  return absl::OkStatus();
}

absl::Status ControllerService::DoGetCapacity(const ::csi::v1::GetCapacityRequest& req,
                                              ::csi::v1::GetCapacityResponse* resp) {
  if (req.has_accessible_topology() && !TopologyMatches(req.accessible_topology(), ctx_.options.node_id)) {
    resp->set_available_capacity(0);
    return absl::OkStatus();
  }
  // Capacity does not depend on the access mode or type, so a capability
  // that leaves them out asks about any volume: external-provisioner v4.x
  // sends {mount: {}, access_mode: UNKNOWN} ("the standard makes it
  // mandatory to pass something"), v5.x sends no capability at all. Only a
  // capability berth-csi could never serve (a multi-node mode, an unknown
  // filesystem) has no room at all.
  for (const auto& cap : req.volume_capabilities()) {
    if (!CheckCapabilityForCapacity(cap).ok()) {
      resp->set_available_capacity(0);
      return absl::OkStatus();
    }
  }
  if (!CheckParameters(req.parameters()).ok()) {
    resp->set_available_capacity(0);
    return absl::OkStatus();
  }
  BERTH_ASSIGN_OR_RETURN(Pool::Capacity c, ctx_.pool->GetCapacity());
  resp->set_available_capacity(c.available_bytes);
  resp->mutable_maximum_volume_size()->set_value(c.available_bytes);
  return absl::OkStatus();
}

absl::Status ControllerService::DoExpand(const ::csi::v1::ControllerExpandVolumeRequest& req,
                                         ::csi::v1::ControllerExpandVolumeResponse* resp) {
  if (req.volume_id().empty()) return absl::InvalidArgumentError("volume_id is required");
  if (!req.has_capacity_range()) return absl::InvalidArgumentError("capacity_range is required");
  const int64_t required = req.capacity_range().required_bytes();
  const int64_t limit = req.capacity_range().limit_bytes();
  if (required < 0 || limit < 0 || (limit > 0 && limit < required) || (required == 0 && limit == 0)) {
    return absl::InvalidArgumentError("capacity_range must name a positive size");
  }
  BERTH_RETURN_IF_ERROR(CheckVolumeId("volume_id", req.volume_id()));
  BERTH_ASSIGN_OR_RETURN(auto guard, ctx_.locks.TryAcquire({req.volume_id()}));
  std::optional<VolumeRecord> r = ctx_.pool->GetVolume(req.volume_id());
  if (!r) return absl::NotFoundError(StrCat("volume ", req.volume_id(), " not found"));
  if (req.has_volume_capability()) {
    BERTH_RETURN_IF_ERROR(CheckCapabilityFits(req.volume_capability(), *r));
  }
  const int64_t wanted = RoundUpToMiB(required > 0 ? required : limit);
  if (limit > 0 && wanted > limit) {
    return absl::OutOfRangeError(StrCat("sizes are multiples of 1 MiB; none fits [", required, ", ", limit, "]"));
  }
  if (limit > 0 && r->capacity_bytes > limit) {
    return absl::OutOfRangeError(StrCat("volume ", r->id, " is already ", r->capacity_bytes,
                                        " bytes, above limit_bytes ", limit, "; volumes do not shrink"));
  }
  BERTH_ASSIGN_OR_RETURN(VolumeRecord grown, ctx_.pool->ExpandVolume(r->id, wanted));
  resp->set_capacity_bytes(grown.capacity_bytes);
  // A filesystem must be grown by the node; a block device needs its loop
  // device refreshed if it is attached.
  resp->set_node_expansion_required(grown.access_type == AccessType::kMount || !grown.block_device.empty());
  return absl::OkStatus();
}

// ---- Snapshots ----

absl::Status ControllerService::DoCreateSnapshot(const ::csi::v1::CreateSnapshotRequest& req,
                                                 ::csi::v1::CreateSnapshotResponse* resp) {
  BERTH_RETURN_IF_ERROR(ValidateName("name", req.name()));
  if (req.source_volume_id().empty()) {
    return absl::InvalidArgumentError("source_volume_id is required");
  }
  BERTH_RETURN_IF_ERROR(CheckParameters(req.parameters()));
  BERTH_ASSIGN_OR_RETURN(bool ours, CheckId("source_volume_id", req.source_volume_id(), IdKind::kVolume));
  const std::string id = IdForName(IdKind::kSnapshot, req.name());
  BERTH_ASSIGN_OR_RETURN(auto guard, ctx_.locks.TryAcquire({id, req.source_volume_id()}));
  if (std::optional<SnapshotRecord> existing = ctx_.pool->GetSnapshot(id)) {
    if (existing->source_volume_id != req.source_volume_id()) {
      return absl::AlreadyExistsError(
          StrCat("a snapshot named \"", req.name(), "\" already exists of volume ", existing->source_volume_id));
    }
    FillSnapshot(*existing, resp->mutable_snapshot());
    return absl::OkStatus();
  }
  std::optional<VolumeRecord> source;
  if (ours) source = ctx_.pool->GetVolume(req.source_volume_id());
  if (!source) {
    return absl::NotFoundError(StrCat("source volume ", req.source_volume_id(), " not found"));
  }
  BERTH_ASSIGN_OR_RETURN(
      SnapshotRecord s,
      ctx_.pool->CreateSnapshot(id, req.name(), source->id, ToMap(req.parameters()), "", ctx_.QuiesceFor(*source)));
  FillSnapshot(s, resp->mutable_snapshot());
  return absl::OkStatus();
}

absl::Status ControllerService::DoDeleteSnapshot(const ::csi::v1::DeleteSnapshotRequest& req) {
  BERTH_ASSIGN_OR_RETURN(bool ours, CheckId("snapshot_id", req.snapshot_id(), IdKind::kSnapshot));
  if (!ours) return absl::OkStatus();
  BERTH_ASSIGN_OR_RETURN(auto guard, ctx_.locks.TryAcquire({req.snapshot_id()}));
  std::optional<SnapshotRecord> s = ctx_.pool->GetSnapshot(req.snapshot_id());
  if (!s) return absl::OkStatus();
  if (!s->group_snapshot_id.empty() && ctx_.pool->GetGroupSnapshot(s->group_snapshot_id)) {
    return absl::InvalidArgumentError(StrCat("snapshot ", s->id, " belongs to group snapshot ", s->group_snapshot_id,
                                             "; delete it with DeleteVolumeGroupSnapshot"));
  }
  return ctx_.pool->DeleteSnapshot(s->id);
}

absl::Status ControllerService::DoListSnapshots(const ::csi::v1::ListSnapshotsRequest& req,
                                                ::csi::v1::ListSnapshotsResponse* resp) {
  if (req.max_entries() < 0) return absl::InvalidArgumentError("max_entries must not be negative");
  if (!req.starting_token().empty()) {
    auto ours = CheckId("starting_token", req.starting_token(), IdKind::kSnapshot);
    if (!ours.ok() || !*ours) {
      return absl::AbortedError(
          StrCat("starting_token \"", req.starting_token(), "\" is not a token ListSnapshots returned"));
    }
  }
  int count = 0;
  for (const auto& s : ctx_.pool->ListSnapshots()) {
    if (!req.snapshot_id().empty() && s.id != req.snapshot_id()) continue;
    if (!req.source_volume_id().empty() && s.source_volume_id != req.source_volume_id()) continue;
    if (!req.starting_token().empty() && s.id <= req.starting_token()) continue;
    if (req.max_entries() > 0 && count == req.max_entries()) {
      resp->set_next_token(resp->entries(count - 1).snapshot().snapshot_id());
      break;
    }
    FillSnapshot(s, resp->add_entries()->mutable_snapshot());
    ++count;
  }
  return absl::OkStatus();
}

absl::Status ControllerService::DoGetSnapshot(const ::csi::v1::GetSnapshotRequest& req,
                                              ::csi::v1::GetSnapshotResponse* resp) {
  BERTH_ASSIGN_OR_RETURN(bool ours, CheckId("snapshot_id", req.snapshot_id(), IdKind::kSnapshot));
  std::optional<SnapshotRecord> s;
  if (ours) s = ctx_.pool->GetSnapshot(req.snapshot_id());
  if (!s) return absl::NotFoundError(StrCat("snapshot ", req.snapshot_id(), " not found"));
  FillSnapshot(*s, resp->mutable_snapshot());
  return absl::OkStatus();
}

}  // namespace berth::driver
