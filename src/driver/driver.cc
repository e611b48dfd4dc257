#include "driver/driver.h"

#include <stdlib.h>

#include <map>

#include "berth/version.h"
#include "common/fs.h"
#include "common/status.h"
#include "common/strings.h"
#include "driver/pool/pool_image.h"
#include "spdlog/spdlog.h"

namespace berth::driver {
namespace {

absl::StatusOr<std::string> Canonical(const std::string& path) {
  BERTH_RETURN_IF_ERROR(MakeDirs(path, 0750));
  char* real = ::realpath(path.c_str(), nullptr);
  if (real == nullptr) return ErrnoStatus(errno, StrCat("resolve ", path));
  std::string out = real;
  ::free(real);
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Driver>> Driver::Open(DriverOptions options, Deps deps) {
  std::unique_ptr<Driver> d(new Driver());
  BERTH_ASSIGN_OR_RETURN(options.kubelet_root, Canonical(options.kubelet_root));
  if (!options.pool_image.empty()) {
    BERTH_RETURN_IF_ERROR(MakeDirs(options.pool, 0700));
    BERTH_ASSIGN_OR_RETURN(std::string pool, Canonical(options.pool));
    std::string image = options.pool_image;
    if (char* real = ::realpath(image.c_str(), nullptr)) {
      image = real;
      ::free(real);
    }
    BERTH_RETURN_IF_ERROR(EnsurePoolImage(image, options.pool_size_bytes, pool, *deps.loops, *deps.mounter,
                                          *deps.formatter, options.pool_sparse));
    options.pool_image = image;
  }
  BERTH_ASSIGN_OR_RETURN(options.pool, Canonical(options.pool));
  BERTH_ASSIGN_OR_RETURN(d->pool_, Pool::Open({.dir = options.pool,
                                               .overprovision_ratio = options.overprovision_ratio,
                                               .image = options.pool_image,
                                               .high_watermark = options.high_watermark}));
  d->ctx_.options = options;
  d->ctx_.pool = d->pool_.get();
  d->ctx_.loops = deps.loops;
  d->ctx_.mounter = deps.mounter;
  d->ctx_.formatter = deps.formatter;
  d->ctx_.freezer = deps.freezer;
  d->ctx_.health = &d->health_;
  BERTH_RETURN_IF_ERROR(d->Repair());

  using ::csi::v1::PluginCapability;
  d->identity_ = std::make_unique<IdentityService>(
      options.driver_name, kVersion,
      std::vector<PluginCapability>{ServiceCapability(PluginCapability::Service::CONTROLLER_SERVICE),
                                    ServiceCapability(PluginCapability::Service::VOLUME_ACCESSIBILITY_CONSTRAINTS),
                                    ServiceCapability(PluginCapability::Service::GROUP_CONTROLLER_SERVICE),
                                    ServiceCapability(PluginCapability::Service::SNAPSHOT_METADATA_SERVICE),
                                    ExpansionCapability(PluginCapability::VolumeExpansion::ONLINE),
                                    ExpansionCapability(PluginCapability::VolumeExpansion::OFFLINE)},
      [raw = d.get()] { return raw->Ready(); });
  d->controller_ = std::make_unique<ControllerService>(d->ctx_);
  d->node_ = std::make_unique<NodeService>(d->ctx_);
  d->group_ = std::make_unique<GroupControllerService>(d->ctx_);
  d->snapshot_metadata_ = std::make_unique<SnapshotMetadataService>(d->ctx_);
  return d;
}

std::vector<grpc::Service*> Driver::services() {
  return {identity_.get(), controller_.get(), node_.get(), group_.get(), snapshot_metadata_.get()};
}

absl::StatusOr<bool> Driver::Ready() {
  if (std::string fault = ctx_.PoolFault(); !fault.empty()) {
    spdlog::warn("not ready: {}", fault);
    return false;
  }
  return true;
}

void Driver::WatchKernelLog() {
  if (kernel_log_) return;
  kernel_log_ = std::make_unique<KernelLogWatcher>(health_, *ctx_.loops);
  kernel_log_->Start();
}

absl::Status Driver::Repair() {
  // Group members whose group record was never written: the group was never
  // acknowledged, so its members go.
  for (const auto& s : pool_->ListSnapshots()) {
    if (!s.group_snapshot_id.empty() && !pool_->GetGroupSnapshot(s.group_snapshot_id)) {
      spdlog::warn("removing snapshot {}: member of group {} that was never completed", s.id, s.group_snapshot_id);
      BERTH_RETURN_IF_ERROR(pool_->DeleteSnapshot(s.id));
    }
  }
  // Loop devices of pool images that nothing mounts and no staged block
  // volume owns were left by a crash between attach and use. A device is
  // ours when its backing file is one of our volume images — by device and
  // inode, which hold in every mount namespace (loop.h) — or, when the pool
  // is a filesystem of its own, any file on it (an image removed while
  // still attached). Devices backed by anything else are never touched.
  BERTH_ASSIGN_OR_RETURN(auto loops, ctx_.loops->List());
  BERTH_ASSIGN_OR_RETURN(auto mounts, ctx_.mounter->List());
  BERTH_ASSIGN_OR_RETURN(FileId pool_id, IdentifyFile(ctx_.options.pool));
  BERTH_ASSIGN_OR_RETURN(FileId parent_id, IdentifyFile(ctx_.options.pool + "/.."));
  const bool own_filesystem = pool_id.dev != parent_id.dev;
  std::map<FileId, VolumeRecord> images;
  for (auto& v : pool_->ListVolumes()) {
    auto id = IdentifyFile(pool_->VolumeImagePath(v.id));
    if (id.ok()) images.emplace(*id, std::move(v));
  }
  for (const auto& l : loops) {
    auto owner = l.backing_deleted ? images.end() : images.find(l.backing);
    const bool on_pool = own_filesystem && l.backing.dev == pool_id.dev;
    if (owner == images.end() && !on_pool) continue;
    bool mounted = false;
    for (const auto& m : mounts) mounted = mounted || m.source == l.device;
    if (mounted) continue;
    if (owner != images.end()) {
      const VolumeRecord& r = owner->second;
      if (r.access_type == AccessType::kBlock && r.block_device == l.device) continue;
      spdlog::warn("detaching {} (image of volume {}): left attached by an interrupted operation", l.device, r.id);
    } else {
      spdlog::warn("detaching {} (inode {} of the pool, {}): no volume's image", l.device, l.backing.ino,
                   l.backing_deleted ? "removed" : "unrecorded");
    }
    BERTH_RETURN_IF_ERROR(ctx_.loops->Detach(l.device));
  }
  return absl::OkStatus();
}

}  // namespace berth::driver
