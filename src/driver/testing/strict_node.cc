// The strict driver's Node service: real bind mounts. NodeStage mounts the
// volume's directory at the staging path (block: its image on a file
// "dev" inside it), NodePublish mounts the staging path (or the volume
// itself without STAGE_UNSTAGE_VOLUME) at the target, which the driver
// creates, and the reverse calls unmount and remove what the driver made.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "common/status.h"
#include "common/strings.h"
#include "driver/testing/strict_driver.h"
#include "driver/testing/strict_internal.h"

namespace berth::driver::testing {
namespace {

namespace fs = std::filesystem;
using namespace strict_internal;

// What lstat says is at `path`.
enum class Kind { kMissing, kDirectory, kFile, kOther };
Kind KindOf(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return Kind::kMissing;
  if (S_ISDIR(st.st_mode)) return Kind::kDirectory;
  if (S_ISREG(st.st_mode)) return Kind::kFile;
  return Kind::kOther;
}

std::string Parent(const std::string& path) { return fs::path(path).parent_path().string(); }

absl::Status TouchFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return ErrnoStatus(errno, StrCat("create ", path));
  ::close(fd);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<bool> StrictDriver::IsMountPoint(const std::string& path) {
  BERTH_ASSIGN_OR_RETURN(auto found, mounter_.Find(path));
  return found.has_value();
}

// ---- mounts ----

absl::Status StrictDriver::MountStaging(const Volume& v, const std::string& staging) {
  const std::string at = v.block ? staging + "/dev" : staging;
  if (v.block && KindOf(at) == Kind::kMissing) BERTH_RETURN_IF_ERROR(TouchFile(at));
  BERTH_ASSIGN_OR_RETURN(bool mounted, IsMountPoint(at));
  if (mounted) return absl::OkStatus();  // done before (a repeated call)
  return mounter_.BindMount(VolumePath(v), at, false);
}

absl::Status StrictDriver::UnmountStaging(const Volume& v, const std::string& staging) {
  const std::string at = v.block ? staging + "/dev" : staging;
  BERTH_RETURN_IF_ERROR(mounter_.Unmount(at));
  BERTH_ASSIGN_OR_RETURN(bool mounted, IsMountPoint(at));
  if (mounted) return absl::InternalError(StrCat(at, " is still mounted"));
  if (v.block && ::unlink(at.c_str()) != 0 && errno != ENOENT) return ErrnoStatus(errno, StrCat("unlink ", at));
  // The staging directory itself is the CO's: it stays.
  return absl::OkStatus();
}

absl::Status StrictDriver::MountTarget(const Volume& v, const std::string& source, const std::string& target,
                                       bool readonly) {
  if (v.block) {
    if (KindOf(target) == Kind::kMissing) BERTH_RETURN_IF_ERROR(TouchFile(target));
  } else if (::mkdir(target.c_str(), 0750) != 0 && errno != EEXIST) {
    return ErrnoStatus(errno, StrCat("mkdir ", target));
  }
  BERTH_ASSIGN_OR_RETURN(bool mounted, IsMountPoint(target));
  if (mounted) return absl::OkStatus();
  absl::Status st = mounter_.BindMount(source, target, readonly);
  if (!st.ok()) {
    // Leave nothing of ours behind after a failure.
    if (v.block) {
      ::unlink(target.c_str());
    } else {
      ::rmdir(target.c_str());
    }
  }
  return st;
}

absl::Status StrictDriver::UnmountTarget(const Volume& v, const std::string& target) {
  BERTH_RETURN_IF_ERROR(mounter_.Unmount(target));
  BERTH_ASSIGN_OR_RETURN(bool mounted, IsMountPoint(target));
  if (mounted) return absl::InternalError(StrCat(target, " is still mounted"));
  // "The SP MUST delete the file or directory it created at this path."
  const int rc = v.block ? ::unlink(target.c_str()) : ::rmdir(target.c_str());
  if (rc != 0 && errno != ENOENT) return ErrnoStatus(errno, StrCat("removing ", target));
  return absl::OkStatus();
}

// ---- the RPCs ----

absl::Status StrictDriver::Stage(Call& call, const ::csi::v1::NodeStageVolumeRequest& req) {
  const char* rpc = "NodeStageVolume";
  BERTH_RETURN_IF_ERROR(CheckSet(rpc, "", "volume_id", req.volume_id()));
  const std::string& id = req.volume_id();
  BERTH_RETURN_IF_ERROR(CheckSet(rpc, id, "staging_target_path", req.staging_target_path()));
  BERTH_RETURN_IF_ERROR(CheckAbsolute(rpc, id, "staging_target_path", req.staging_target_path()));
  absl::MutexLock lock(&mu_);
  BERTH_ASSIGN_OR_RETURN(Volume * v, Find(id));
  BERTH_RETURN_IF_ERROR(CheckCapability(rpc, id, v, req.has_volume_capability() ? &req.volume_capability() : nullptr));
  BERTH_RETURN_IF_ERROR(CheckPublishContext(rpc, *v, req.publish_context()));
  BERTH_RETURN_IF_ERROR(CheckVolumeContext(rpc, *v, req.volume_context()));
  const std::string& path = req.staging_target_path();
  switch (KindOf(path)) {
    case Kind::kDirectory:
      break;
    case Kind::kMissing:
      return Violation(rpc, id,
                       StrCat("staging_target_path ", path,
                              " does not exist (the CO SHALL create the directory before NodeStageVolume)"));
    default:
      return Violation(rpc, id, StrCat("staging_target_path ", path, " is not a directory (it MUST be one)"));
  }
  if (v->staged && v->staged->path != path) {
    return Violation(rpc, id,
                     StrCat("staging_target_path ", path, " differs from ", v->staged->path,
                            ", where the volume is staged (the CO SHALL ensure one staging_target_path per volume)"));
  }
  if (v->staged && !SameCap(v->staged->capability, req.volume_capability())) {
    return absl::AlreadyExistsError(StrCat("volume ", id, " is staged at ", path, " with another volume_capability"));
  }
  BERTH_RETURN_IF_ERROR(MountStaging(*v, path));
  v->staged = Staging{.path = path, .capability = req.volume_capability(), .confirmed = true};
  call.confirmed = path;
  return Save();
}

absl::Status StrictDriver::Unstage(Call&, const ::csi::v1::NodeUnstageVolumeRequest& req) {
  const char* rpc = "NodeUnstageVolume";
  BERTH_RETURN_IF_ERROR(CheckSet(rpc, "", "volume_id", req.volume_id()));
  const std::string& id = req.volume_id();
  BERTH_RETURN_IF_ERROR(CheckSet(rpc, id, "staging_target_path", req.staging_target_path()));
  BERTH_RETURN_IF_ERROR(CheckAbsolute(rpc, id, "staging_target_path", req.staging_target_path()));
  absl::MutexLock lock(&mu_);
  BERTH_ASSIGN_OR_RETURN(Volume * v, Find(id));
  if (!v->targets.empty()) {
    return Violation(rpc, id,
                     StrCat("NodeUnstageVolume while the volume is still published at ", v->targets.begin()->first,
                            " (every NodeUnpublishVolume must succeed first)"));
  }
  if (!v->staged) return absl::OkStatus();  // not staged: idempotent
  if (v->staged->path != req.staging_target_path()) {
    return Violation(
        rpc, id,
        StrCat("NodeUnstageVolume at ", req.staging_target_path(), ", but the volume is staged at ", v->staged->path));
  }
  BERTH_RETURN_IF_ERROR(UnmountStaging(*v, v->staged->path));
  v->staged.reset();
  return Save();
}

absl::Status StrictDriver::Publish(Call& call, const ::csi::v1::NodePublishVolumeRequest& req) {
  const char* rpc = "NodePublishVolume";
  BERTH_RETURN_IF_ERROR(CheckSet(rpc, "", "volume_id", req.volume_id()));
  const std::string& id = req.volume_id();
  BERTH_RETURN_IF_ERROR(CheckSet(rpc, id, "target_path", req.target_path()));
  BERTH_RETURN_IF_ERROR(CheckAbsolute(rpc, id, "target_path", req.target_path()));
  if (!req.staging_target_path().empty()) {
    BERTH_RETURN_IF_ERROR(CheckAbsolute(rpc, id, "staging_target_path", req.staging_target_path()));
  }
  absl::MutexLock lock(&mu_);
  BERTH_ASSIGN_OR_RETURN(Volume * v, Find(id));
  BERTH_RETURN_IF_ERROR(CheckCapability(rpc, id, v, req.has_volume_capability() ? &req.volume_capability() : nullptr));
  BERTH_RETURN_IF_ERROR(CheckPublishContext(rpc, *v, req.publish_context()));
  BERTH_RETURN_IF_ERROR(CheckVolumeContext(rpc, *v, req.volume_context()));
  const std::string& target = req.target_path();
  std::string source = VolumePath(*v);
  if (options_.stage_unstage) {
    if (req.staging_target_path().empty()) {
      return Violation(rpc, id,
                       "staging_target_path is not set, but the driver has STAGE_UNSTAGE_VOLUME (it MUST be set)");
    }
    if (!v->staged) return Violation(rpc, id, "NodePublishVolume before NodeStageVolume succeeded");
    if (v->staged->path != req.staging_target_path()) {
      return Violation(rpc, id,
                       StrCat("staging_target_path ", req.staging_target_path(), " differs from ", v->staged->path,
                              ", where NodeStageVolume staged the volume"));
    }
    if (!v->staged->confirmed) {
      return Violation(rpc, id,
                       "NodePublishVolume after a NodeStageVolume that did not return success (the CO must see "
                       "NodeStageVolume succeed first)");
    }
    source = v->block ? v->staged->path + "/dev" : v->staged->path;
  }
  if (KindOf(Parent(target)) != Kind::kDirectory) {
    return Violation(
        rpc, id,
        StrCat("the parent directory of target_path ", target, " does not exist (the CO SHALL ensure that it exists)"));
  }
  if (auto it = v->targets.find(target); it != v->targets.end()) {
    const Target& t = it->second;
    if (t.staging != req.staging_target_path() || t.readonly != req.readonly() ||
        !SameCap(t.capability, req.volume_capability())) {
      return absl::AlreadyExistsError(StrCat("volume ", id, " is published at ", target, " with other arguments"));
    }
  } else {
    if (KindOf(target) != Kind::kMissing) {
      return Violation(rpc, id,
                       StrCat("target_path ", target,
                              " exists before NodePublishVolume (creating it is the SP's job; the CO creates its "
                              "parent only)"));
    }
    if (!v->targets.empty()) {
      // The spec's table for a second target on one node without
      // MULTI_NODE or SINGLE_NODE_MULTI_WRITER.
      return absl::FailedPreconditionError(
          StrCat("volume ", id, " is published at ", v->targets.begin()->first, " already"));
    }
  }
  BERTH_RETURN_IF_ERROR(MountTarget(*v, source, target, req.readonly()));
  v->targets[target] = Target{.staging = req.staging_target_path(),
                              .readonly = req.readonly(),
                              .capability = req.volume_capability(),
                              .confirmed = true};
  call.confirmed = target;
  return Save();
}

absl::Status StrictDriver::Unpublish(Call&, const ::csi::v1::NodeUnpublishVolumeRequest& req) {
  const char* rpc = "NodeUnpublishVolume";
  BERTH_RETURN_IF_ERROR(CheckSet(rpc, "", "volume_id", req.volume_id()));
  const std::string& id = req.volume_id();
  BERTH_RETURN_IF_ERROR(CheckSet(rpc, id, "target_path", req.target_path()));
  BERTH_RETURN_IF_ERROR(CheckAbsolute(rpc, id, "target_path", req.target_path()));
  absl::MutexLock lock(&mu_);
  BERTH_ASSIGN_OR_RETURN(Volume * v, Find(id));
  auto it = v->targets.find(req.target_path());
  if (it == v->targets.end()) return absl::OkStatus();  // not published there: idempotent
  BERTH_RETURN_IF_ERROR(UnmountTarget(*v, req.target_path()));
  v->targets.erase(it);
  return Save();
}

absl::Status StrictDriver::Stats(Call&, const ::csi::v1::NodeGetVolumeStatsRequest& req,
                                 ::csi::v1::NodeGetVolumeStatsResponse* resp) {
  const char* rpc = "NodeGetVolumeStats";
  BERTH_RETURN_IF_ERROR(CheckSet(rpc, "", "volume_id", req.volume_id()));
  const std::string& id = req.volume_id();
  BERTH_RETURN_IF_ERROR(CheckSet(rpc, id, "volume_path", req.volume_path()));
  absl::MutexLock lock(&mu_);
  BERTH_ASSIGN_OR_RETURN(Volume * v, Find(id));
  const std::string& staging = req.staging_target_path();
  if (!staging.empty() && !options_.stage_unstage) {
    return Violation(rpc, id,
                     StrCat("staging_target_path ", staging,
                            " is set, but the driver has no STAGE_UNSTAGE_VOLUME (it must then be empty)"));
  }
  if (!staging.empty() && v->staged && v->staged->path != staging) {
    return Violation(
        rpc, id, StrCat("staging_target_path ", staging, " is not where the volume is staged (", v->staged->path, ")"));
  }
  const bool known = (v->staged && v->staged->path == req.volume_path()) || v->targets.contains(req.volume_path());
  if (!known) {
    // Stats race with unpublishing in every CO: an answer, not a violation.
    return absl::NotFoundError(StrCat("volume ", id, " is neither staged nor published at ", req.volume_path()));
  }
  auto* bytes = resp->add_usage();
  bytes->set_unit(::csi::v1::VolumeUsage::BYTES);
  bytes->set_total(v->capacity);
  if (!v->block) {
    int64_t used = 0, inodes = 0;
    std::error_code ec;
    for (auto e = fs::recursive_directory_iterator(VolumePath(*v), ec); !ec && e != fs::recursive_directory_iterator();
         e.increment(ec)) {
      ++inodes;
      std::error_code ec2;
      if (e->is_regular_file(ec2)) used += static_cast<int64_t>(e->file_size(ec2));
    }
    bytes->set_used(used);
    bytes->set_available(std::max<int64_t>(0, v->capacity - used));
    auto* in = resp->add_usage();
    in->set_unit(::csi::v1::VolumeUsage::INODES);
    in->set_total(1 << 20);
    in->set_used(inodes);
    in->set_available((1 << 20) - inodes);
  }
  return absl::OkStatus();
}

absl::Status StrictDriver::NodeExpand(Call&, const ::csi::v1::NodeExpandVolumeRequest& req,
                                      ::csi::v1::NodeExpandVolumeResponse* resp) {
  const char* rpc = "NodeExpandVolume";
  BERTH_RETURN_IF_ERROR(CheckSet(rpc, "", "volume_id", req.volume_id()));
  const std::string& id = req.volume_id();
  BERTH_RETURN_IF_ERROR(CheckSet(rpc, id, "volume_path", req.volume_path()));
  absl::MutexLock lock(&mu_);
  BERTH_ASSIGN_OR_RETURN(Volume * v, Find(id));
  if (req.has_volume_capability()) BERTH_RETURN_IF_ERROR(CheckCapability(rpc, id, v, &req.volume_capability()));
  const std::string& staging = req.staging_target_path();
  if (options_.stage_unstage) {
    if (!v->staged || !v->staged->confirmed) {
      return Violation(rpc, id, "NodeExpandVolume before NodeStageVolume succeeded (it MUST come after)");
    }
    if (!staging.empty() && staging != v->staged->path) {
      return Violation(
          rpc, id,
          StrCat("staging_target_path ", staging, " is not where the volume is staged (", v->staged->path, ")"));
    }
  } else {
    if (v->targets.empty())
      return Violation(rpc, id, "NodeExpandVolume before NodePublishVolume succeeded (it MUST come after)");
    if (!staging.empty()) {
      return Violation(rpc, id,
                       StrCat("staging_target_path ", staging,
                              " is set, but the driver has no STAGE_UNSTAGE_VOLUME (it must then be empty)"));
    }
  }
  const bool known = (v->staged && v->staged->path == req.volume_path()) || v->targets.contains(req.volume_path());
  if (!known)
    return absl::NotFoundError(StrCat("volume ", id, " is neither staged nor published at ", req.volume_path()));
  const int64_t want = req.capacity_range().required_bytes();
  if (options_.expand && want > v->capacity) {
    return Violation(rpc, id,
                     StrCat("NodeExpandVolume to ", want, " bytes, but ControllerExpandVolume made the volume ",
                            v->capacity, " bytes (the controller expands first)"));
  }
  v->node_capacity = std::max(v->node_capacity, want > 0 ? want : v->capacity);
  BERTH_RETURN_IF_ERROR(Save());
  resp->set_capacity_bytes(v->node_capacity);
  return absl::OkStatus();
}

}  // namespace berth::driver::testing
