#include "driver/node_service.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <filesystem>

#include "absl/time/clock.h"
#include "common/fs.h"
#include "common/status.h"
#include "common/strings.h"
#include "csi/grpc_status.h"
#include "driver/fault.h"
#include "driver/pool/ids.h"
#include "spdlog/spdlog.h"

namespace berth::driver {
namespace {

using csi::ToGrpcStatus;
using ::csi::v1::VolumeCapability;

// Makes sure `path` is a directory we may mount on: created if missing;
// refused if it is something else or holds anything.
absl::Status PrepareMountDir(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) return ErrnoStatus(errno, StrCat("stat ", path));
    return MakeDirs(path, 0750);
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(StrCat(path, " exists and is not a directory"));
  }
  BERTH_ASSIGN_OR_RETURN(bool empty, IsEmptyDir(path));
  if (!empty) {
    return absl::FailedPreconditionError(StrCat(path,
                                                " is a non-empty directory that is not a mount of this volume; "
                                                "refusing to mount over it"));
  }
  return absl::OkStatus();
}

// Unmounts everything stacked at `path` (bounded).
absl::Status UnmountAll(Mounter& mounter, const std::string& path) {
  for (int i = 0; i < 8; ++i) {
    BERTH_ASSIGN_OR_RETURN(auto m, mounter.Find(path));
    if (!m) return absl::OkStatus();
    BERTH_RETURN_IF_ERROR(mounter.Unmount(path));
  }
  return absl::InternalError(StrCat("still mounted after 8 unmounts: ", path));
}

}  // namespace

// ---- gRPC edge ----

grpc::Status NodeService::NodeStageVolume(grpc::ServerContext*, const ::csi::v1::NodeStageVolumeRequest* req,
                                          ::csi::v1::NodeStageVolumeResponse*) {
  return ToGrpcStatus(DoStage(*req));
}
grpc::Status NodeService::NodeUnstageVolume(grpc::ServerContext*, const ::csi::v1::NodeUnstageVolumeRequest* req,
                                            ::csi::v1::NodeUnstageVolumeResponse*) {
  return ToGrpcStatus(DoUnstage(*req));
}
grpc::Status NodeService::NodePublishVolume(grpc::ServerContext*, const ::csi::v1::NodePublishVolumeRequest* req,
                                            ::csi::v1::NodePublishVolumeResponse*) {
  return ToGrpcStatus(DoPublish(*req));
}
grpc::Status NodeService::NodeUnpublishVolume(grpc::ServerContext*, const ::csi::v1::NodeUnpublishVolumeRequest* req,
                                              ::csi::v1::NodeUnpublishVolumeResponse*) {
  return ToGrpcStatus(DoUnpublish(*req));
}
grpc::Status NodeService::NodeGetVolumeStats(grpc::ServerContext*, const ::csi::v1::NodeGetVolumeStatsRequest* req,
                                             ::csi::v1::NodeGetVolumeStatsResponse* resp) {
  return ToGrpcStatus(DoStats(*req, resp));
}
grpc::Status NodeService::NodeExpandVolume(grpc::ServerContext*, const ::csi::v1::NodeExpandVolumeRequest* req,
                                           ::csi::v1::NodeExpandVolumeResponse* resp) {
  return ToGrpcStatus(DoExpand(*req, resp));
}

grpc::Status NodeService::NodeGetCapabilities(grpc::ServerContext*, const ::csi::v1::NodeGetCapabilitiesRequest*,
                                              ::csi::v1::NodeGetCapabilitiesResponse* resp) {
  using Rpc = ::csi::v1::NodeServiceCapability::RPC;
  for (auto type : {Rpc::STAGE_UNSTAGE_VOLUME, Rpc::GET_VOLUME_STATS, Rpc::EXPAND_VOLUME, Rpc::VOLUME_CONDITION,
                    Rpc::SINGLE_NODE_MULTI_WRITER}) {
    resp->add_capabilities()->mutable_rpc()->set_type(type);
  }
  return grpc::Status::OK;
}

grpc::Status NodeService::NodeGetInfo(grpc::ServerContext*, const ::csi::v1::NodeGetInfoRequest*,
                                      ::csi::v1::NodeGetInfoResponse* resp) {
  resp->set_node_id(ctx_.options.node_id);
  resp->set_max_volumes_per_node(ctx_.options.max_volumes);
  *resp->mutable_accessible_topology() = ctx_.NodeTopology();
  return grpc::Status::OK;
}

// ---- Stage / unstage ----

absl::StatusOr<std::string> NodeService::OurDeviceAt(const MountEntry& m, const VolumeRecord& r) {
  if (!m.source.starts_with("/dev/loop")) return std::string();
  BERTH_ASSIGN_OR_RETURN(std::string dev, ctx_.loops->Find(ctx_.pool->VolumeImagePath(r.id)));
  return dev == m.source ? dev : std::string();
}

absl::Status NodeService::DoStage(const ::csi::v1::NodeStageVolumeRequest& req) {
  if (req.volume_id().empty()) return absl::InvalidArgumentError("volume_id is required");
  if (req.staging_target_path().empty()) {
    return absl::InvalidArgumentError("staging_target_path is required");
  }
  if (!req.has_volume_capability()) {
    return absl::InvalidArgumentError("volume_capability is required");
  }
  BERTH_RETURN_IF_ERROR(CheckCapability(req.volume_capability()));
  BERTH_RETURN_IF_ERROR(CheckPathInside(ctx_.options.kubelet_root, req.staging_target_path()));
  BERTH_RETURN_IF_ERROR(CheckVolumeId("volume_id", req.volume_id()));
  BERTH_ASSIGN_OR_RETURN(auto guard, ctx_.locks.TryAcquire({req.volume_id()}));
  std::optional<VolumeRecord> r = ctx_.pool->GetVolume(req.volume_id());
  if (!r) return absl::NotFoundError(StrCat("volume ", req.volume_id(), " not found"));
  if (absl::Status st = CheckCapabilityFits(req.volume_capability(), *r); !st.ok()) {
    return absl::FailedPreconditionError(st.message());
  }
  if (!r->staging_path.empty() && r->staging_path != req.staging_target_path()) {
    return absl::FailedPreconditionError(StrCat("volume ", r->id, " is already staged at ", r->staging_path));
  }
  return r->access_type == AccessType::kBlock ? StageBlock(req, *r) : StageFilesystem(req, *r);
}

absl::Status NodeService::StageFilesystem(const ::csi::v1::NodeStageVolumeRequest& req, VolumeRecord& r) {
  const std::string& staging = req.staging_target_path();
  const std::string image = ctx_.pool->VolumeImagePath(r.id);
  BERTH_ASSIGN_OR_RETURN(auto existing, ctx_.mounter->Find(staging));
  if (existing) {
    BERTH_ASSIGN_OR_RETURN(std::string dev, OurDeviceAt(*existing, r));
    if (dev.empty()) {
      return absl::FailedPreconditionError(StrCat(staging, " already has ", existing->source, " mounted"));
    }
    if (existing->read_only() != IsReadOnlyMode(req.volume_capability())) {
      return absl::AlreadyExistsError(
          StrCat("volume ", r.id, " is staged at ", staging, existing->read_only() ? " read-only" : " read-write"));
    }
    if (r.staging_path != staging) {
      r.staging_path = staging;
      return ctx_.pool->UpdateVolume(r);
    }
    return absl::OkStatus();
  }
  BERTH_RETURN_IF_ERROR(PrepareMountDir(staging));

  // The handle keeps the (autoclear) loop device open until it is mounted.
  BERTH_ASSIGN_OR_RETURN(auto loop, ctx_.loops->Attach(image, /*autoclear=*/true));
  const std::string& dev = loop->device();
  BERTH_CRASH_POINT("node-stage/attached");
  BERTH_ASSIGN_OR_RETURN(std::string found, ctx_.formatter->Detect(dev));
  if (!r.formatted && (found.empty() || r.formatting)) {
    // Blank, or a format that never finished: nothing on it was ever used.
    r.formatting = true;
    BERTH_RETURN_IF_ERROR(ctx_.pool->UpdateVolume(r));
    BERTH_CRASH_POINT("node-stage/formatting");
    BERTH_RETURN_IF_ERROR(ctx_.formatter->Mkfs(dev, r.fs_type));
    BERTH_CRASH_POINT("node-stage/formatted");
    r.formatting = false;
    r.formatted = true;
    r.fs_bytes = r.capacity_bytes;
    BERTH_RETURN_IF_ERROR(ctx_.pool->UpdateVolume(r));
    found = r.fs_type;
  }
  if (found != r.fs_type) {
    return absl::FailedPreconditionError(StrCat("volume ", r.id, " holds ", found.empty() ? "no filesystem" : found,
                                                " but should hold ", r.fs_type, "; refusing to format or mount it"));
  }
  if (!r.formatted) {
    r.formatted = true;  // adopted: it came with a filesystem
    BERTH_RETURN_IF_ERROR(ctx_.pool->UpdateVolume(r));
  }
  const bool readonly = IsReadOnlyMode(req.volume_capability());
  // A clone or restore may be larger than its source's filesystem, and a
  // volume may have been expanded while unstaged. ext4 grows best before it
  // is mounted, xfs only while mounted.
  const bool grow = !readonly && r.fs_bytes < r.capacity_bytes;
  if (grow && r.fs_type == "ext4") {
    BERTH_RETURN_IF_ERROR(ctx_.formatter->Grow(dev, "", r.fs_type));
  }
  std::vector<std::string> flags(req.volume_capability().mount().mount_flags().begin(),
                                 req.volume_capability().mount().mount_flags().end());
  if (readonly) flags.push_back("ro");
  if (r.fs_type == "xfs") flags.push_back("nouuid");  // clones share the source's UUID
  BERTH_RETURN_IF_ERROR(ctx_.mounter->Mount(dev, staging, r.fs_type, flags));
  BERTH_CRASH_POINT("node-stage/mounted");
  if (grow && r.fs_type == "xfs") {
    if (absl::Status st = ctx_.formatter->Grow(dev, staging, r.fs_type); !st.ok()) {
      ctx_.mounter->Unmount(staging).IgnoreError();
      return st;
    }
  }
  if (grow) r.fs_bytes = r.capacity_bytes;
  r.staging_path = staging;
  return ctx_.pool->UpdateVolume(r);
}

absl::Status NodeService::StageBlock(const ::csi::v1::NodeStageVolumeRequest& req, VolumeRecord& r) {
  const std::string image = ctx_.pool->VolumeImagePath(r.id);
  BERTH_ASSIGN_OR_RETURN(std::string dev, ctx_.loops->Find(image));
  if (dev.empty()) {
    BERTH_ASSIGN_OR_RETURN(auto loop, ctx_.loops->Attach(image, /*autoclear=*/false));
    dev = loop->device();
  }
  BERTH_CRASH_POINT("node-stage/block-attached");
  if (r.staging_path == req.staging_target_path() && r.block_device == dev) return absl::OkStatus();
  r.staging_path = req.staging_target_path();
  r.block_device = dev;
  return ctx_.pool->UpdateVolume(r);
}

absl::Status NodeService::DoUnstage(const ::csi::v1::NodeUnstageVolumeRequest& req) {
  if (req.volume_id().empty()) return absl::InvalidArgumentError("volume_id is required");
  if (req.staging_target_path().empty()) {
    return absl::InvalidArgumentError("staging_target_path is required");
  }
  BERTH_RETURN_IF_ERROR(CheckPathInside(ctx_.options.kubelet_root, req.staging_target_path()));
  BERTH_RETURN_IF_ERROR(CheckVolumeId("volume_id", req.volume_id()));
  BERTH_ASSIGN_OR_RETURN(auto guard, ctx_.locks.TryAcquire({req.volume_id()}));
  std::optional<VolumeRecord> r = ctx_.pool->GetVolume(req.volume_id());
  if (!r) return absl::NotFoundError(StrCat("volume ", req.volume_id(), " not found"));
  const std::string& staging = req.staging_target_path();
  if (!r->targets.empty()) {
    return absl::FailedPreconditionError(
        StrCat("volume ", r->id, " is still published at ", r->targets[0].path, "; unpublish it first"));
  }
  const std::string image = ctx_.pool->VolumeImagePath(r->id);
  if (r->access_type == AccessType::kMount) {
    BERTH_ASSIGN_OR_RETURN(auto existing, ctx_.mounter->Find(staging));
    if (existing) {
      BERTH_ASSIGN_OR_RETURN(std::string dev, OurDeviceAt(*existing, *r));
      if (dev.empty()) {
        return absl::FailedPreconditionError(
            StrCat(staging, " has ", existing->source, " mounted, which is not volume ", r->id));
      }
      BERTH_RETURN_IF_ERROR(UnmountAll(*ctx_.mounter, staging));
      BERTH_CRASH_POINT("node-unstage/unmounted");
    }
  }
  // Autoclear devices go away with their last mount; wait briefly, then
  // detach whatever is left (block volumes, or a device nobody mounts).
  const absl::Time deadline = absl::Now() + absl::Seconds(2);
  while (true) {
    BERTH_ASSIGN_OR_RETURN(std::string dev, ctx_.loops->Find(image));
    if (dev.empty()) break;
    bool mounted = false;
    BERTH_ASSIGN_OR_RETURN(auto mounts, ctx_.mounter->List());
    for (const auto& m : mounts) mounted = mounted || m.source == dev;
    if (mounted) {
      return absl::FailedPreconditionError(
          StrCat("volume ", r->id, " (", dev, ") is still mounted elsewhere on this node"));
    }
    if (r->access_type == AccessType::kBlock || absl::Now() >= deadline) {
      BERTH_RETURN_IF_ERROR(ctx_.loops->Detach(dev));
      break;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  if (r->staging_path.empty() && r->block_device.empty()) return absl::OkStatus();
  r->staging_path.clear();
  r->block_device.clear();
  return ctx_.pool->UpdateVolume(*r);
}

// ---- Publish / unpublish ----

absl::Status NodeService::DoPublish(const ::csi::v1::NodePublishVolumeRequest& req) {
  if (req.volume_id().empty()) return absl::InvalidArgumentError("volume_id is required");
  if (req.target_path().empty()) return absl::InvalidArgumentError("target_path is required");
  if (!req.has_volume_capability()) {
    return absl::InvalidArgumentError("volume_capability is required");
  }
  BERTH_RETURN_IF_ERROR(CheckCapability(req.volume_capability()));
  if (req.staging_target_path().empty()) {
    return absl::FailedPreconditionError(
        "staging_target_path is required: berth-csi stages volumes before publishing them");
  }
  BERTH_RETURN_IF_ERROR(CheckPathInside(ctx_.options.kubelet_root, req.target_path()));
  BERTH_RETURN_IF_ERROR(CheckPathInside(ctx_.options.kubelet_root, req.staging_target_path()));
  BERTH_RETURN_IF_ERROR(CheckVolumeId("volume_id", req.volume_id()));
  BERTH_ASSIGN_OR_RETURN(auto guard, ctx_.locks.TryAcquire({req.volume_id()}));
  std::optional<VolumeRecord> r = ctx_.pool->GetVolume(req.volume_id());
  if (!r) return absl::NotFoundError(StrCat("volume ", req.volume_id(), " not found"));
  if (absl::Status st = CheckCapabilityFits(req.volume_capability(), *r); !st.ok()) {
    return absl::FailedPreconditionError(st.message());
  }
  if (r->staging_path != req.staging_target_path()) {
    return absl::FailedPreconditionError(StrCat("volume ", r->id, " is not staged at ", req.staging_target_path()));
  }
  const std::string& target = req.target_path();
  const bool readonly = req.readonly() || IsReadOnlyMode(req.volume_capability());
  const bool block = r->access_type == AccessType::kBlock;

  // What the target must be a mount of: the staging mount's filesystem, or
  // the loop device node.
  std::string source;
  std::optional<MountEntry> staged;
  if (block) {
    BERTH_ASSIGN_OR_RETURN(std::string dev, ctx_.loops->Find(ctx_.pool->VolumeImagePath(r->id)));
    if (dev.empty() || dev != r->block_device) {
      return absl::FailedPreconditionError(StrCat("volume ", r->id, " is not attached; stage it again"));
    }
    source = dev;
  } else {
    BERTH_ASSIGN_OR_RETURN(staged, ctx_.mounter->Find(r->staging_path));
    if (!staged || OurDeviceAt(*staged, *r).value_or("").empty()) {
      return absl::FailedPreconditionError(
          StrCat("volume ", r->id, " is no longer mounted at ", r->staging_path, "; stage it again"));
    }
    source = r->staging_path;
  }
  auto is_ours = [&](const MountEntry& m) {
    if (block) return m.root == "/" + std::filesystem::path(source).filename().string();
    return m.major == staged->major && m.minor == staged->minor;
  };

  BERTH_ASSIGN_OR_RETURN(auto existing, ctx_.mounter->Find(target));
  if (existing) {
    if (!is_ours(*existing)) {
      return absl::FailedPreconditionError(StrCat(target, " already has ", existing->source, " mounted"));
    }
    if (existing->read_only() != readonly) {
      return absl::AlreadyExistsError(
          StrCat("volume ", r->id, " is published at ", target, existing->read_only() ? " read-only" : " read-write"));
    }
  } else {
    const bool single_writer =
        req.volume_capability().access_mode().mode() == VolumeCapability::AccessMode::SINGLE_NODE_SINGLE_WRITER;
    for (const auto& t : r->targets) {
      if (t.path != target && single_writer) {
        return absl::FailedPreconditionError(
            StrCat("volume ", r->id, " is already published at ", t.path, " and allows a single writer"));
      }
    }
    if (block) {
      struct stat st {};
      if (::lstat(target.c_str(), &st) == 0) {
        if (!S_ISREG(st.st_mode) || st.st_size != 0) {
          return absl::FailedPreconditionError(
              StrCat(target, " exists and is not an empty file; refusing to bind a device onto it"));
        }
      } else {
        BERTH_RETURN_IF_ERROR(MakeDirs(std::filesystem::path(target).parent_path().string(), 0750));
        int fd = ::open(target.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0640);
        if (fd < 0) return ErrnoStatus(errno, StrCat("create ", target));
        ::close(fd);
      }
    } else {
      BERTH_RETURN_IF_ERROR(PrepareMountDir(target));
    }
    BERTH_RETURN_IF_ERROR(ctx_.mounter->BindMount(source, target, readonly));
    BERTH_CRASH_POINT("node-publish/mounted");
  }
  for (const auto& t : r->targets) {
    if (t.path == target) return absl::OkStatus();
  }
  r->targets.push_back({target, readonly});
  return ctx_.pool->UpdateVolume(*r);
}

absl::Status NodeService::DoUnpublish(const ::csi::v1::NodeUnpublishVolumeRequest& req) {
  if (req.volume_id().empty()) return absl::InvalidArgumentError("volume_id is required");
  if (req.target_path().empty()) return absl::InvalidArgumentError("target_path is required");
  BERTH_RETURN_IF_ERROR(CheckPathInside(ctx_.options.kubelet_root, req.target_path()));
  BERTH_RETURN_IF_ERROR(CheckVolumeId("volume_id", req.volume_id()));
  BERTH_ASSIGN_OR_RETURN(auto guard, ctx_.locks.TryAcquire({req.volume_id()}));
  std::optional<VolumeRecord> r = ctx_.pool->GetVolume(req.volume_id());
  const std::string& target = req.target_path();
  BERTH_ASSIGN_OR_RETURN(auto existing, ctx_.mounter->Find(target));
  struct stat st {};
  const bool exists = ::lstat(target.c_str(), &st) == 0;
  if (!r) {
    if (existing || exists) {
      return absl::NotFoundError(StrCat("volume ", req.volume_id(), " not found; leaving ", target, " alone"));
    }
    return absl::OkStatus();
  }
  if (existing) {
    BERTH_RETURN_IF_ERROR(UnmountAll(*ctx_.mounter, target));
    BERTH_CRASH_POINT("node-unpublish/unmounted");
  }
  if (::lstat(target.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      if (::rmdir(target.c_str()) != 0) {
        return ErrnoStatus(errno, StrCat("remove target directory ", target));
      }
    } else if (S_ISREG(st.st_mode)) {
      if (::unlink(target.c_str()) != 0) return ErrnoStatus(errno, StrCat("remove ", target));
    }
  }
  const size_t before = r->targets.size();
  std::erase_if(r->targets, [&](const PublishedTarget& t) { return t.path == target; });
  if (r->targets.size() == before) return absl::OkStatus();
  return ctx_.pool->UpdateVolume(*r);
}

// ---- Stats and expansion ----

// The volume `id` if `path` is its staging path or one of its targets (the
// two calls that name a volume by where it is used).
absl::StatusOr<VolumeRecord> NodeService::StagedOrPublishedAt(const std::string& id, const std::string& path) {
  if (id.empty()) return absl::InvalidArgumentError("volume_id is required");
  if (path.empty()) return absl::InvalidArgumentError("volume_path is required");
  BERTH_RETURN_IF_ERROR(CheckVolumeId("volume_id", id));
  std::optional<VolumeRecord> r = ctx_.pool->GetVolume(id);
  if (!r) return absl::NotFoundError(StrCat("volume ", id, " not found"));
  bool known = path == r->staging_path;
  for (const auto& t : r->targets) known = known || t.path == path;
  if (!known || !IsCanonicalAbsolutePath(path)) {
    return absl::NotFoundError(StrCat("volume ", r->id, " is not staged or published at ", path));
  }
  return *std::move(r);
}

absl::Status NodeService::DoStats(const ::csi::v1::NodeGetVolumeStatsRequest& req,
                                  ::csi::v1::NodeGetVolumeStatsResponse* resp) {
  BERTH_ASSIGN_OR_RETURN(VolumeRecord r, StagedOrPublishedAt(req.volume_id(), req.volume_path()));
  const std::string& path = req.volume_path();
  auto* cond = resp->mutable_volume_condition();
  cond->set_message("volume is healthy");
  if (std::string fault = ctx_.VolumeFault(r); !fault.empty()) {
    cond->set_abnormal(true);
    cond->set_message(fault);
  }
  if (r.access_type == AccessType::kBlock) {
    auto size = ctx_.loops->Size(r.block_device);
    if (!size.ok()) {
      cond->set_abnormal(true);
      cond->set_message(StrCat("device ", r.block_device, ": ", size.status().message()));
      return absl::OkStatus();
    }
    auto* u = resp->add_usage();
    u->set_unit(::csi::v1::VolumeUsage::BYTES);
    u->set_total(*size);
    return absl::OkStatus();
  }
  // kubelet asks every minute for every volume: a statx, not the mount
  // table (read below only for a read-only filesystem).
  BERTH_ASSIGN_OR_RETURN(bool mounted, ctx_.mounter->IsMountPoint(path));
  if (!mounted) {
    cond->set_abnormal(true);
    cond->set_message(StrCat(path, " is not mounted"));
    return absl::OkStatus();
  }
  struct statvfs vfs {};
  if (::statvfs(path.c_str(), &vfs) != 0) return ErrnoStatus(errno, StrCat("statvfs ", path));
  const int64_t frsize = static_cast<int64_t>(vfs.f_frsize);
  auto* bytes = resp->add_usage();
  bytes->set_unit(::csi::v1::VolumeUsage::BYTES);
  bytes->set_total(static_cast<int64_t>(vfs.f_blocks) * frsize);
  bytes->set_available(static_cast<int64_t>(vfs.f_bavail) * frsize);
  bytes->set_used(static_cast<int64_t>(vfs.f_blocks - vfs.f_bfree) * frsize);
  auto* inodes = resp->add_usage();
  inodes->set_unit(::csi::v1::VolumeUsage::INODES);
  inodes->set_total(static_cast<int64_t>(vfs.f_files));
  inodes->set_available(static_cast<int64_t>(vfs.f_favail));
  inodes->set_used(static_cast<int64_t>(vfs.f_files - vfs.f_ffree));
  if (vfs.f_flag & ST_RDONLY) {
    // Read-only: as mounted (the mount's own flag), or turned so by the
    // filesystem (errors=remount-ro)?
    BERTH_ASSIGN_OR_RETURN(auto entry, ctx_.mounter->Find(path));
    if (!entry || !entry->read_only()) {
      cond->set_abnormal(true);
      cond->set_message(StrCat(path, entry ? " turned read-only (filesystem errors?)" : " is not mounted"));
    }
  }
  return absl::OkStatus();
}

absl::Status NodeService::DoExpand(const ::csi::v1::NodeExpandVolumeRequest& req,
                                   ::csi::v1::NodeExpandVolumeResponse* resp) {
  BERTH_ASSIGN_OR_RETURN(VolumeRecord r, StagedOrPublishedAt(req.volume_id(), req.volume_path()));
  const std::string& path = req.volume_path();
  if (req.has_volume_capability()) {
    BERTH_RETURN_IF_ERROR(CheckCapabilityFits(req.volume_capability(), r));
  }
  const int64_t required = req.capacity_range().required_bytes();
  const int64_t limit = req.capacity_range().limit_bytes();
  if (required < 0 || limit < 0 || (limit > 0 && limit < required)) {
    return absl::InvalidArgumentError("capacity_range is invalid");
  }
  BERTH_ASSIGN_OR_RETURN(auto guard, ctx_.locks.TryAcquire({r.id}));
  const int64_t wanted = RoundUpToMiB(required > 0 ? required : limit);
  if (wanted > r.capacity_bytes) {
    if (limit > 0 && wanted > limit) return absl::OutOfRangeError("no 1 MiB multiple fits the range");
    BERTH_ASSIGN_OR_RETURN(r, ctx_.pool->ExpandVolume(r.id, wanted));
  }
  BERTH_ASSIGN_OR_RETURN(std::string dev, ctx_.loops->Find(ctx_.pool->VolumeImagePath(r.id)));
  if (dev.empty()) {
    return absl::FailedPreconditionError(StrCat("volume ", r.id, " is not attached on this node"));
  }
  BERTH_RETURN_IF_ERROR(ctx_.loops->RefreshCapacity(dev));
  if (r.access_type == AccessType::kMount && r.fs_bytes < r.capacity_bytes) {
    BERTH_RETURN_IF_ERROR(ctx_.formatter->Grow(dev, path, r.fs_type));
    r.fs_bytes = r.capacity_bytes;
    BERTH_RETURN_IF_ERROR(ctx_.pool->UpdateVolume(r));
  }
  BERTH_ASSIGN_OR_RETURN(int64_t size, ctx_.loops->Size(dev));
  resp->set_capacity_bytes(size);
  return absl::OkStatus();
}

}  // namespace berth::driver
