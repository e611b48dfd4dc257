#include "driver/context.h"

#include "common/status.h"
#include "common/strings.h"
#include "driver/pool/ids.h"
#include "spdlog/spdlog.h"

namespace berth::driver {

using ::csi::v1::VolumeCapability;

::csi::v1::Topology DriverContext::NodeTopology() const {
  ::csi::v1::Topology t;
  (*t.mutable_segments())[kTopologyKey] = options.node_id;
  return t;
}

std::string DriverContext::PoolFault() const { return LookForPoolFault(); }

std::string DriverContext::RecentPoolFault() const {
  // One look a second is enough when NodeGetVolumeStats asks for every
  // volume in turn.
  const absl::Time now = absl::Now();
  {
    absl::MutexLock lock(&pool_fault_mu_);
    if (now - pool_fault_at_ < absl::Seconds(1)) return pool_fault_;
  }
  std::string fault = LookForPoolFault();
  absl::MutexLock lock(&pool_fault_mu_);
  pool_fault_ = fault;
  pool_fault_at_ = now;
  return fault;
}

std::string DriverContext::LookForPoolFault() const {
  if (!options.pool_image.empty()) {
    auto m = mounter->Find(options.pool);
    if (!m.ok() || !m->has_value())
      return StrCat("pool image ", options.pool_image, " is not mounted at ", options.pool);
    if (health != nullptr) {
      if (auto id = IdentifyFile(options.pool_image); id.ok()) {
        if (auto fault = health->FaultOf(*id)) return StrCat("pool image ", options.pool_image, ": ", *fault);
      }
    }
  }
  Pool::Health h = pool->CheckHealth();
  return h.healthy ? "" : h.message;
}

std::string DriverContext::VolumeFault(const VolumeRecord& r) const {
  if (std::string pool_fault = RecentPoolFault(); !pool_fault.empty())
    return StrCat("the volume's pool is unhealthy: ", pool_fault);
  auto id = IdentifyFile(pool->VolumeImagePath(r.id));
  if (!id.ok()) return StrCat("image of volume ", r.id, " is missing");
  if (health != nullptr) {
    if (auto fault = health->FaultOf(*id)) return *fault;
  }
  if (!r.staging_path.empty() && r.access_type == AccessType::kMount) {
    // kubelet asks every minute for every volume: statx, not the mount table.
    auto mounted = mounter->IsMountPoint(r.staging_path);
    if (mounted.ok() && *mounted) {
      const std::string device = BlockDeviceOf(r.staging_path);
      if (int64_t errors = device.empty() ? 0 : Ext4ErrorCount(device); errors > 0) {
        return StrCat("its ext4 filesystem (", device, ") recorded ", errors,
                      " error(s); unmount it and run fsck.ext4");
      }
      if (std::string failure = FsyncFailure(r.staging_path); !failure.empty()) {
        return StrCat("its filesystem (", device, ") refuses writes (", failure,
                      "): it shut down or turned read-only after an error");
      }
    }
  }
  return "";
}

Quiesce DriverContext::QuiesceFor(const VolumeRecord& source) {
  if (source.access_type != AccessType::kMount || source.staging_path.empty()) return {};
  auto mounted = mounter->Find(source.staging_path);
  if (!mounted.ok() || !mounted->has_value()) return {};
  const std::string path = source.staging_path;
  Freezer* f = freezer;
  return [f, path](const std::function<absl::Status()>& clone) { return WithFrozen(*f, {path}, clone); };
}

absl::Status WithFrozen(Freezer& freezer, const std::vector<std::string>& paths,
                        const std::function<absl::Status()>& fn) {
  std::vector<std::string> frozen;
  absl::Status result;
  for (const auto& p : paths) {
    result = freezer.Freeze(p);
    if (!result.ok()) break;
    frozen.push_back(p);
  }
  if (result.ok()) result = fn();
  for (auto it = frozen.rbegin(); it != frozen.rend(); ++it) {
    absl::Status thawed = freezer.Thaw(*it);
    if (!thawed.ok()) {
      spdlog::error("thaw {} failed: {}", *it, thawed.ToString());
      if (result.ok()) result = thawed;
    }
  }
  return result;
}

std::string RequestedFsType(const VolumeCapability& cap) {
  if (cap.has_mount() && !cap.mount().fs_type().empty()) return cap.mount().fs_type();
  return "ext4";
}

absl::Status CheckCapability(const VolumeCapability& cap) {
  if (!cap.has_mount() && !cap.has_block()) {
    return absl::InvalidArgumentError("volume capability must set an access type (mount or block)");
  }
  if (!cap.has_access_mode() || cap.access_mode().mode() == VolumeCapability::AccessMode::UNKNOWN) {
    return absl::InvalidArgumentError("volume capability must set an access mode");
  }
  switch (cap.access_mode().mode()) {
    case VolumeCapability::AccessMode::SINGLE_NODE_WRITER:
    case VolumeCapability::AccessMode::SINGLE_NODE_READER_ONLY:
    case VolumeCapability::AccessMode::SINGLE_NODE_SINGLE_WRITER:
    case VolumeCapability::AccessMode::SINGLE_NODE_MULTI_WRITER:
      break;
    default:
      return absl::InvalidArgumentError(StrCat("access mode ",
                                               VolumeCapability::AccessMode::Mode_Name(cap.access_mode().mode()),
                                               " is not supported: berth volumes live on one node"));
  }
  if (cap.has_mount()) {
    const std::string fs = RequestedFsType(cap);
    if (!SupportedFsType(fs)) {
      return absl::InvalidArgumentError(StrCat("filesystem type \"", fs, "\" is not supported (ext4, xfs)"));
    }
    if (!cap.mount().volume_mount_group().empty()) {
      return absl::InvalidArgumentError("volume_mount_group is not supported");
    }
  }
  return absl::OkStatus();
}

absl::Status CheckCapabilityForCapacity(const VolumeCapability& cap) {
  VolumeCapability complete = cap;
  if (!complete.has_mount() && !complete.has_block()) complete.mutable_mount();
  if (complete.access_mode().mode() == VolumeCapability::AccessMode::UNKNOWN) {
    complete.mutable_access_mode()->set_mode(VolumeCapability::AccessMode::SINGLE_NODE_WRITER);
  }
  return CheckCapability(complete);
}

absl::Status CheckCapabilityFits(const VolumeCapability& cap, const VolumeRecord& r) {
  if (absl::Status st = CheckCapability(cap); !st.ok()) return st;
  const bool block = cap.has_block();
  if (block != (r.access_type == AccessType::kBlock)) {
    return absl::InvalidArgumentError(
        StrCat("volume ", r.id, " is a ", r.access_type == AccessType::kBlock ? "block" : "filesystem",
               " volume; the capability asks for ", block ? "a block device" : "a filesystem"));
  }
  if (!block && !r.fs_type.empty() && cap.mount().fs_type().size() > 0 && cap.mount().fs_type() != r.fs_type) {
    return absl::InvalidArgumentError(
        StrCat("volume ", r.id, " has filesystem ", r.fs_type, "; the capability asks for ", cap.mount().fs_type()));
  }
  return absl::OkStatus();
}

bool IsReadOnlyMode(const VolumeCapability& cap) {
  const auto m = cap.access_mode().mode();
  return m == VolumeCapability::AccessMode::SINGLE_NODE_READER_ONLY ||
         m == VolumeCapability::AccessMode::MULTI_NODE_READER_ONLY;
}

absl::Status CheckVolumeId(std::string_view field, const std::string& id) {
  BERTH_ASSIGN_OR_RETURN(bool ours, CheckId(field, id, IdKind::kVolume));
  if (!ours) return absl::NotFoundError(StrCat("volume ", id, " not found"));
  return absl::OkStatus();
}

void FillVolume(const VolumeRecord& r, const DriverContext& ctx, ::csi::v1::Volume* out) {
  out->set_volume_id(r.id);
  out->set_capacity_bytes(r.capacity_bytes);
  if (!r.source_snapshot_id.empty()) {
    out->mutable_content_source()->mutable_snapshot()->set_snapshot_id(r.source_snapshot_id);
  } else if (!r.source_volume_id.empty()) {
    out->mutable_content_source()->mutable_volume()->set_volume_id(r.source_volume_id);
  }
  *out->add_accessible_topology() = ctx.NodeTopology();
}

void FillSnapshot(const SnapshotRecord& r, ::csi::v1::Snapshot* out) {
  out->set_snapshot_id(r.id);
  out->set_source_volume_id(r.source_volume_id);
  out->set_size_bytes(r.size_bytes);
  out->mutable_creation_time()->set_seconds(r.created_unix_nanos / 1000000000);
  out->mutable_creation_time()->set_nanos(static_cast<int32_t>(r.created_unix_nanos % 1000000000));
  out->set_ready_to_use(true);
  out->set_group_snapshot_id(r.group_snapshot_id);
}

}  // namespace berth::driver
