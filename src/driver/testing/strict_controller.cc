// The strict driver's Controller service: volumes are directories (sparse
// files for block) under <state-dir>/volumes; attachments are bookkeeping
// with a publish_context that changes with every new attachment, so a stale
// or invented one is caught on the node.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "common/hash.h"
#include "common/status.h"
#include "common/strings.h"
#include "driver/testing/strict_driver.h"
#include "driver/testing/strict_internal.h"

namespace berth::driver::testing {
namespace {

namespace fs = std::filesystem;
using namespace strict_internal;
using ::csi::v1::VolumeCapability;

constexpr int64_t kDefaultSize = int64_t{1} << 30;

// Creates the volume's directory or sparse image (idempotent: what a crash
// left behind is reused).
absl::Status CreateBacking(const std::string& path, bool block, int64_t size) {
  if (!block) {
    if (::mkdir(path.c_str(), 0750) != 0 && errno != EEXIST) return ErrnoStatus(errno, StrCat("mkdir ", path));
    return absl::OkStatus();
  }
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoStatus(errno, StrCat("create ", path));
  absl::Status st = ::ftruncate(fd, size) == 0 ? absl::OkStatus() : ErrnoStatus(errno, StrCat("truncate ", path));
  ::close(fd);
  return st;
}

}  // namespace

absl::Status StrictDriver::CreateVolume(Call&, const ::csi::v1::CreateVolumeRequest& req,
                                        ::csi::v1::CreateVolumeResponse* resp) {
  const char* rpc = "CreateVolume";
  BERTH_RETURN_IF_ERROR(CheckSet(rpc, "", "name", req.name()));
  const std::string id = StrictVolumeId(req.name());
  if (req.volume_capabilities().empty()) {
    return Violation(rpc, id, "the REQUIRED field volume_capabilities is empty", absl::StatusCode::kInvalidArgument);
  }
  bool block = false, mount = false;
  for (const auto& cap : req.volume_capabilities()) {
    BERTH_RETURN_IF_ERROR(CheckCapability(rpc, id, nullptr, &cap));
    block |= cap.has_block();
    mount |= cap.has_mount();
  }
  if (block && mount) return absl::InvalidArgumentError("a volume is either block or mount, not both");
  if (req.has_volume_content_source()) {
    return Violation(rpc, id,
                     "volume_content_source is set, but the driver advertises neither CLONE_VOLUME nor "
                     "CREATE_DELETE_SNAPSHOT");
  }
  if (req.has_accessibility_requirements() && !options_.topology) {
    return Violation(rpc, id,
                     "accessibility_requirements is set, but the driver does not advertise "
                     "VOLUME_ACCESSIBILITY_CONSTRAINTS (it SHALL NOT be specified)");
  }
  if (req.has_accessibility_requirements() && !req.accessibility_requirements().requisite().empty()) {
    bool ours = false;
    for (const auto& t : req.accessibility_requirements().requisite()) {
      auto it = t.segments().find(TopologyKey());
      ours |= it != t.segments().end() && it->second == options_.node_id;
    }
    if (!ours) {
      return absl::ResourceExhaustedError(
          StrCat("node ", options_.node_id, " is not in the requisite topology of the request"));
    }
  }
  const int64_t limit = req.capacity_range().limit_bytes();
  int64_t size = req.capacity_range().required_bytes();
  if (size == 0) size = limit > 0 ? std::min(limit, kDefaultSize) : kDefaultSize;
  if (size < 0 || limit < 0 || (limit > 0 && limit < size)) {
    return absl::OutOfRangeError(StrCat("capacity range ", size, "..", limit, " is not satisfiable"));
  }
  std::map<std::string, std::string> parameters = ToMap(req.parameters());

  absl::MutexLock lock(&mu_);
  if (auto it = volumes_.find(id); it != volumes_.end()) {
    const Volume& v = it->second;
    bool same = v.capacity >= size && (limit == 0 || v.capacity <= limit) && v.parameters == parameters &&
                v.capabilities.size() == static_cast<size_t>(req.volume_capabilities().size());
    for (int i = 0; same && i < req.volume_capabilities().size(); ++i) {
      same = SameCap(v.capabilities[i], req.volume_capabilities(i));
    }
    if (!same) {
      return absl::AlreadyExistsError(StrCat("volume \"", req.name(), "\" exists with other parameters"));
    }
  } else {
    int64_t used = 0;
    for (const auto& [vid, v] : volumes_) used += v.capacity;
    if (used + size > options_.capacity_bytes) {
      return absl::ResourceExhaustedError(
          StrCat("no room for ", size, " bytes: ", options_.capacity_bytes - used, " bytes left"));
    }
    Volume v{.id = id,
             .name = req.name(),
             .capacity = size,
             .node_capacity = size,
             .block = block,
             .parameters = parameters,
             .context = {{kContextKey, req.name()}},
             .capabilities = {},
             .attached = {},
             .staged = std::nullopt,
             .targets = {}};
    for (const auto& cap : req.volume_capabilities()) v.capabilities.push_back(cap);
    BERTH_RETURN_IF_ERROR(CreateBacking(VolumePath(v), v.block, v.capacity));
    volumes_[id] = std::move(v);
    BERTH_RETURN_IF_ERROR(Save());
  }
  const Volume& v = volumes_[id];
  auto* out = resp->mutable_volume();
  out->set_volume_id(v.id);
  out->set_capacity_bytes(v.capacity);
  for (const auto& [k, val] : v.context) (*out->mutable_volume_context())[k] = val;
  if (options_.topology) (*out->add_accessible_topology()->mutable_segments())[TopologyKey()] = options_.node_id;
  return absl::OkStatus();
}

absl::Status StrictDriver::DeleteVolume(Call&, const ::csi::v1::DeleteVolumeRequest& req) {
  const char* rpc = "DeleteVolume";
  BERTH_RETURN_IF_ERROR(CheckSet(rpc, "", "volume_id", req.volume_id()));
  absl::MutexLock lock(&mu_);
  auto found = Find(req.volume_id());
  if (!found.ok()) return absl::OkStatus();  // gone already: idempotent
  Volume& v = **found;
  for (const auto& [node, a] : v.attached) {
    return Violation(rpc, v.id,
                     StrCat("DeleteVolume while the volume is ControllerPublished to node ", node,
                            " (ControllerUnpublishVolume must succeed first)"));
  }
  if (v.staged) {
    return Violation(rpc, v.id, StrCat("DeleteVolume while the volume is staged at ", v.staged->path));
  }
  if (!v.targets.empty()) {
    return Violation(rpc, v.id, StrCat("DeleteVolume while the volume is published at ", v.targets.begin()->first));
  }
  std::error_code ec;
  fs::remove_all(VolumePath(v), ec);
  if (ec) return absl::InternalError(StrCat("removing ", VolumePath(v), ": ", ec.message()));
  volumes_.erase(v.id);
  return Save();
}

absl::Status StrictDriver::ControllerPublish(Call& call, const ::csi::v1::ControllerPublishVolumeRequest& req,
                                             ::csi::v1::ControllerPublishVolumeResponse* resp) {
  const char* rpc = "ControllerPublishVolume";
  BERTH_RETURN_IF_ERROR(CheckSet(rpc, "", "volume_id", req.volume_id()));
  BERTH_RETURN_IF_ERROR(CheckSet(rpc, req.volume_id(), "node_id", req.node_id()));
  absl::MutexLock lock(&mu_);
  BERTH_ASSIGN_OR_RETURN(Volume * v, Find(req.volume_id()));
  BERTH_RETURN_IF_ERROR(
      CheckCapability(rpc, v->id, v, req.has_volume_capability() ? &req.volume_capability() : nullptr));
  if (req.node_id() != options_.node_id) {
    return Violation(rpc, v->id,
                     StrCat("node_id \"", req.node_id(),
                            "\" was never returned by NodeGetInfo (this driver's node is \"", options_.node_id, "\")"),
                     absl::StatusCode::kNotFound);
  }
  if (req.readonly()) {
    return Violation(rpc, v->id,
                     "readonly is true, but the driver does not advertise PUBLISH_READONLY (the CO MUST set it false)");
  }
  BERTH_RETURN_IF_ERROR(CheckVolumeContext(rpc, *v, req.volume_context()));
  call.confirmed = req.node_id();
  if (auto it = v->attached.find(req.node_id()); it != v->attached.end()) {
    if (!SameCap(it->second.capability, req.volume_capability()) || it->second.readonly != req.readonly()) {
      return absl::AlreadyExistsError(
          StrCat("volume ", v->id, " is published to ", req.node_id(), " with other arguments"));
    }
    it->second.confirmed = true;
  } else {
    for (const auto& [node, a] : v->attached) {
      return absl::FailedPreconditionError(StrCat("volume ", v->id, " is published to node ", node));
    }
    ++attach_seq_;
    v->attached[req.node_id()] = Attachment{
        .publish_context = {{kAttachmentKey,
                             StrCat(attach_seq_, "-",
                                    Sha256Hex(StrCat(v->id, "/", req.node_id(), "/", attach_seq_)).substr(0, 12))}},
        .readonly = req.readonly(),
        .capability = req.volume_capability(),
        .confirmed = true};
  }
  BERTH_RETURN_IF_ERROR(Save());
  for (const auto& [k, val] : v->attached[req.node_id()].publish_context) (*resp->mutable_publish_context())[k] = val;
  return absl::OkStatus();
}

absl::Status StrictDriver::ControllerUnpublish(Call&, const ::csi::v1::ControllerUnpublishVolumeRequest& req) {
  const char* rpc = "ControllerUnpublishVolume";
  BERTH_RETURN_IF_ERROR(CheckSet(rpc, "", "volume_id", req.volume_id()));
  absl::MutexLock lock(&mu_);
  auto found = Find(req.volume_id());
  if (!found.ok()) return absl::OkStatus();  // no volume: nothing is attached
  Volume& v = **found;
  // Unset node_id: from every node. Only this node's state is known here.
  if (req.node_id().empty() || req.node_id() == options_.node_id) {
    if (!v.targets.empty()) {
      return Violation(
          rpc, v.id,
          StrCat("ControllerUnpublishVolume from node ", options_.node_id, " while the volume is published at ",
                 v.targets.begin()->first, " (NodeUnpublishVolume must succeed first)"));
    }
    if (v.staged) {
      return Violation(
          rpc, v.id,
          StrCat("ControllerUnpublishVolume from node ", options_.node_id, " while the volume is staged at ",
                 v.staged->path, " (NodeUnstageVolume must succeed first)"));
    }
  }
  if (req.node_id().empty()) {
    v.attached.clear();
  } else {
    v.attached.erase(req.node_id());
  }
  return Save();
}

absl::Status StrictDriver::ControllerExpand(Call&, const ::csi::v1::ControllerExpandVolumeRequest& req,
                                            ::csi::v1::ControllerExpandVolumeResponse* resp) {
  const char* rpc = "ControllerExpandVolume";
  BERTH_RETURN_IF_ERROR(CheckSet(rpc, "", "volume_id", req.volume_id()));
  if (!req.has_capacity_range()) {
    return Violation(rpc, req.volume_id(), "the REQUIRED field capacity_range is not set",
                     absl::StatusCode::kInvalidArgument);
  }
  absl::MutexLock lock(&mu_);
  BERTH_ASSIGN_OR_RETURN(Volume * v, Find(req.volume_id()));
  if (req.has_volume_capability()) BERTH_RETURN_IF_ERROR(CheckCapability(rpc, v->id, v, &req.volume_capability()));
  const int64_t want = std::max(v->capacity, req.capacity_range().required_bytes());
  const int64_t limit = req.capacity_range().limit_bytes();
  if (limit > 0 && limit < want) return absl::OutOfRangeError(StrCat("the volume has ", v->capacity, " bytes already"));
  int64_t used = 0;
  for (const auto& [id, other] : volumes_) used += other.capacity;
  if (used - v->capacity + want > options_.capacity_bytes) {
    return absl::ResourceExhaustedError(StrCat("no room to grow to ", want, " bytes"));
  }
  if (v->block && want > v->capacity) BERTH_RETURN_IF_ERROR(CreateBacking(VolumePath(*v), true, want));
  v->capacity = want;
  BERTH_RETURN_IF_ERROR(Save());
  resp->set_capacity_bytes(v->capacity);
  resp->set_node_expansion_required(options_.node_expand && !v->block);
  return absl::OkStatus();
}

absl::Status StrictDriver::ValidateCapabilities(Call&, const ::csi::v1::ValidateVolumeCapabilitiesRequest& req,
                                                ::csi::v1::ValidateVolumeCapabilitiesResponse* resp) {
  const char* rpc = "ValidateVolumeCapabilities";
  BERTH_RETURN_IF_ERROR(CheckSet(rpc, "", "volume_id", req.volume_id()));
  if (req.volume_capabilities().empty()) {
    return Violation(rpc, req.volume_id(), "the REQUIRED field volume_capabilities is empty",
                     absl::StatusCode::kInvalidArgument);
  }
  absl::MutexLock lock(&mu_);
  BERTH_ASSIGN_OR_RETURN(Volume * v, Find(req.volume_id()));
  if (!req.volume_context().empty()) BERTH_RETURN_IF_ERROR(CheckVolumeContext(rpc, *v, req.volume_context()));
  for (const auto& cap : req.volume_capabilities()) {
    if (absl::Status st = CheckCapability(rpc, v->id, v, &cap); !st.ok()) {
      if (absl::StartsWith(st.message(), "CO violation")) return st;
      resp->set_message(std::string(st.message()));
      return absl::OkStatus();  // not confirmed
    }
  }
  auto* confirmed = resp->mutable_confirmed();
  for (const auto& cap : req.volume_capabilities()) *confirmed->add_volume_capabilities() = cap;
  *confirmed->mutable_volume_context() = req.volume_context();
  *confirmed->mutable_parameters() = req.parameters();
  return absl::OkStatus();
}

absl::Status StrictDriver::ListVolumes(Call&, const ::csi::v1::ListVolumesRequest& req,
                                       ::csi::v1::ListVolumesResponse* resp) {
  size_t start = 0;
  if (!req.starting_token().empty() && !absl::SimpleAtoi(absl::string_view(req.starting_token()), &start)) {
    return absl::AbortedError(StrCat("starting_token \"", req.starting_token(), "\" was not returned by ListVolumes"));
  }
  absl::MutexLock lock(&mu_);
  if (start > volumes_.size()) return absl::AbortedError("starting_token is past the end of the list");
  const size_t max = req.max_entries() > 0 ? static_cast<size_t>(req.max_entries()) : volumes_.size();
  size_t i = 0;
  for (const auto& [id, v] : volumes_) {
    if (i++ < start) continue;
    if (static_cast<size_t>(resp->entries_size()) == max) {
      resp->set_next_token(std::to_string(i - 1));
      break;
    }
    auto* vol = resp->add_entries()->mutable_volume();
    vol->set_volume_id(v.id);
    vol->set_capacity_bytes(v.capacity);
    for (const auto& [k, val] : v.context) (*vol->mutable_volume_context())[k] = val;
  }
  return absl::OkStatus();
}

absl::Status StrictDriver::GetCapacity(Call&, const ::csi::v1::GetCapacityRequest& req,
                                       ::csi::v1::GetCapacityResponse* resp) {
  const char* rpc = "GetCapacity";
  for (const auto& cap : req.volume_capabilities()) BERTH_RETURN_IF_ERROR(CheckCapability(rpc, "", nullptr, &cap));
  if (req.has_accessible_topology() && !options_.topology) {
    return Violation(rpc, "",
                     "accessible_topology is set, but the driver does not advertise VOLUME_ACCESSIBILITY_CONSTRAINTS");
  }
  if (req.has_accessible_topology()) {
    auto it = req.accessible_topology().segments().find(TopologyKey());
    if (it == req.accessible_topology().segments().end() || it->second != options_.node_id) {
      resp->set_available_capacity(0);
      return absl::OkStatus();
    }
  }
  absl::MutexLock lock(&mu_);
  int64_t used = 0;
  for (const auto& [id, v] : volumes_) used += v.capacity;
  resp->set_available_capacity(std::max<int64_t>(0, options_.capacity_bytes - used));
  return absl::OkStatus();
}

}  // namespace berth::driver::testing
