// The volume manager: the CSI node operations (stage, publish, unpublish, unstage, expand) and their inputs.
#include "node/volumes/volume_manager_internal.h"

namespace berth::node {

using namespace internal;  // NOLINT: the volume manager's own helpers

// ---- inputs of the CSI calls ----

absl::StatusOr<std::map<std::string, std::string>> VolumeManager::PublishContext(const Volume& v) {
  auto driver_obj = informers_.at("csidrivers")->Get("", v.driver);
  const bool attach = !driver_obj || Field(Field(*driver_obj, "spec"), "attachRequired") != false;
  if (!attach) return std::map<std::string, std::string>{};
  const std::string name = client::AttachmentName(v.handle, v.driver, options_.node_name);
  auto va = informers_.at("volumeattachments")->Get("", name);
  if (!va) return absl::UnavailableError(StrCat("waiting for VolumeAttachment ", name, " of volume ", v.pv));
  const json& status = Field(*va, "status");
  if (Field(status, "attached") != true) {
    const std::string err = Str(status, {"attachError", "message"});
    return absl::UnavailableError(
        StrCat("waiting for volume ", v.pv, " to be attached", err.empty() ? "" : StrCat(" (", err, ")")));
  }
  std::map<std::string, std::string> out;
  for (const auto& [k, val] : Field(status, "attachmentMetadata").items()) {
    if (val.is_string()) out[k] = val.get<std::string>();
  }
  return out;
}

std::map<std::string, std::string> VolumeManager::VolumeContext(const Wanted& w) {
  std::map<std::string, std::string> out = w.pv.spec.csi->volume_attributes;
  auto driver_obj = informers_.at("csidrivers")->Get("", w.volume.driver);
  if (driver_obj && Field(Field(*driver_obj, "spec"), "podInfoOnMount") == true) {
    out["csi.storage.k8s.io/pod.name"] = w.pod.metadata.name;
    out["csi.storage.k8s.io/pod.namespace"] = w.pod.metadata.namespace_;
    out["csi.storage.k8s.io/pod.uid"] = w.pod_uid;
    const std::string& sa = w.pod.spec.service_account_name;
    out["csi.storage.k8s.io/serviceAccount.name"] = sa.empty() ? "default" : sa;
    out["csi.storage.k8s.io/ephemeral"] = "false";
  }
  return out;
}

// The volume's capability as the node's driver takes it (kubelet asks the
// node service for SINGLE_NODE_MULTI_WRITER before using the split modes).
::csi::v1::VolumeCapability VolumeManager::NodeVolumeCapability(const Wanted& w) {
  auto driver = plugins_.Get(w.volume.driver);
  const bool split = driver && driver->Has(NodeCap::SINGLE_NODE_MULTI_WRITER);
  return client::PvVolumeCapability(w.pv, split ? client::SingleNodeModes::kSplit : client::SingleNodeModes::kLegacy);
}

// A NodeExpandVolume that failed, on the claim (kubelet with
// RecoverVolumeExpansionFailure): an infeasible size (csi::IsInfeasibleError)
// sets allocatedResourceStatuses NodeResizeInfeasible, so the user sees it
// and may lower the request; any failure sets the NodeResizeError condition
// with the driver's message. The operation's own backoff paces the retries.
void VolumeManager::RecordNodeResizeFailure(const Wanted& w, const absl::Status& failure) {
  if (client::IsNotAFailure(failure)) return;  // waiting for the driver: nothing failed
  const bool infeasible = csi::IsInfeasibleError(failure);
  absl::Status st = EditClaimStatus(registry_, w.claim, [&](types::PersistentVolumeClaimStatus& status) {
    if (infeasible) status.allocated_resource_statuses["storage"] = "NodeResizeInfeasible";
    types::PersistentVolumeClaimCondition c;
    c.type = "NodeResizeError";
    c.status = "True";
    c.last_transition_time = client::NowRfc3339();
    c.message = StrCat("resize of volume \"", w.volume.pv, "\" on node failed: ", failure.message());
    for (auto& existing : status.conditions) {
      if (existing.type == "NodeResizeError") {
        if (!existing.last_transition_time.empty()) c.last_transition_time = existing.last_transition_time;
        existing = std::move(c);
        return;
      }
    }
    status.conditions.push_back(std::move(c));
  });
  if (!st.ok())
    spdlog::warn("node {}: recording the failed resize of {}: {}", options_.node_name, w.volume.pv, st.ToString());
}

// ---- the operations ----

absl::Status VolumeManager::Stage(const Wanted& w) {
  const Volume& v = w.volume;
  const std::string path = StagingPath(v.driver, v.handle, v.pv, v.block);
  BERTH_RETURN_IF_ERROR(CheckInsideRoot(path));
  BERTH_ASSIGN_OR_RETURN(auto publish_context, PublishContext(v));
  BERTH_ASSIGN_OR_RETURN(auto secrets,
                         client::PvSecret(registry_, w.pv.spec.csi->node_stage_secret_ref, "nodeStageSecretRef"));
  const std::string record = StagedRecord(options_.root, path, v.pv, v.block);
  BERTH_RETURN_IF_ERROR(MakeDirs(Parent(record), 0750));
  // The CO creates the staging directory itself (kubelet's MkdirAll; the
  // spec: "the CO SHALL ensure that the path exists").
  BERTH_RETURN_IF_ERROR(MakeDirs(path, 0750));
  // The record goes first: a crash during the call leaves something the
  // next start can clean up.
  json data = {{"driverName", v.driver}, {"volumeHandle", v.handle},
               {"specVolID", v.pv},      {"volumeMode", v.block ? "Block" : "Filesystem"},
               {"stagingPath", path},    {"nodeName", options_.node_name}};
  BERTH_RETURN_IF_ERROR(WriteFileAtomic(record, data.dump(), 0600));
  ::csi::v1::NodeStageVolumeRequest req;
  req.set_volume_id(v.handle);
  req.set_staging_target_path(path);
  *req.mutable_volume_capability() = NodeVolumeCapability(w);
  SetMap(req.mutable_publish_context(), publish_context);
  SetMap(req.mutable_volume_context(), VolumeContext(w));
  absl::Status call = CallNode(directory_, v.driver, options_.node_name, "NodeStageVolume", [&](const auto& csi) {
    return csi.NodeStageVolume(req, {.timeout = options_.call_timeout, .secrets = secrets});
  });
  if (call.ok()) {
    spdlog::info("node {}: staged {} at {}", options_.node_name, v.pv, path);
  } else if (csi::IsFinalError(call)) {
    // The driver staged nothing: forget this attempt (and an earlier
    // uncertain one), on disk too.
    absl::Status removed = RemoveFileDurably(record);
    if (!removed.ok() && removed.code() != absl::StatusCode::kNotFound) return removed;
    if (!v.block) RemoveIfEmpty(path);
  } else {
    spdlog::warn("node {}: staging {} may or may not have happened ({}): the volume is uncertain", options_.node_name,
                 v.pv, std::string(call.message()));
  }
  absl::MutexLock lock(&mu_);
  if (call.ok() || !csi::IsFinalError(call)) {
    staged_[v.unique] = Staged{.volume = v, .path = path, .certain = call.ok()};
  } else {
    staged_.erase(v.unique);
    expanded_.erase(v.unique);
  }
  return call;
}

absl::Status VolumeManager::Unstage(const Staged& s) {
  const Volume& v = s.volume;
  BERTH_RETURN_IF_ERROR(CheckInsideRoot(s.path));
  if (!plugins_.Get(v.driver)) return DriverNotRegistered(v.driver);
  ::csi::v1::NodeUnstageVolumeRequest req;
  req.set_volume_id(v.handle);
  req.set_staging_target_path(s.path);
  // NOT_FOUND (the driver no longer has the volume: nothing is staged) is OK.
  BERTH_RETURN_IF_ERROR(CallNode(directory_, v.driver, options_.node_name, "NodeUnstageVolume", [&](const auto& csi) {
    return csi.NodeUnstageVolume(req, {.timeout = options_.call_timeout});
  }));
  const std::string record = StagedRecord(options_.root, s.path, v.pv, v.block);
  RemoveIfEmpty(s.path);
  absl::Status removed = RemoveFileDurably(record);
  if (!removed.ok() && removed.code() != absl::StatusCode::kNotFound) return removed;
  RemoveIfEmpty(Parent(record));
  spdlog::info("node {}: unstaged {} from {}", options_.node_name, v.pv, s.path);
  absl::MutexLock lock(&mu_);
  staged_.erase(v.unique);
  expanded_.erase(v.unique);
  return absl::OkStatus();
}

absl::Status VolumeManager::Publish(const Wanted& w, const std::string& staging) {
  const Volume& v = w.volume;
  const std::string target = TargetPath(w.pod_uid, v.pv, v.block);
  BERTH_RETURN_IF_ERROR(CheckInsideRoot(target));
  BERTH_ASSIGN_OR_RETURN(auto publish_context, PublishContext(v));
  BERTH_ASSIGN_OR_RETURN(auto secrets,
                         client::PvSecret(registry_, w.pv.spec.csi->node_publish_secret_ref, "nodePublishSecretRef"));
  const std::string record = PublishedRecord(target, v.block);
  BERTH_RETURN_IF_ERROR(MakeDirs(Parent(target), 0750));
  json data = {{"driverName", v.driver}, {"volumeHandle", v.handle},
               {"specVolID", v.pv},      {"volumeMode", v.block ? "Block" : "Filesystem"},
               {"targetPath", target},   {"stagingPath", staging},
               {"podUID", w.pod_uid},    {"nodeName", options_.node_name}};
  BERTH_RETURN_IF_ERROR(WriteFileAtomic(record, data.dump(), 0600));
  ::csi::v1::NodePublishVolumeRequest req;
  req.set_volume_id(v.handle);
  req.set_staging_target_path(staging);
  req.set_target_path(target);
  req.set_readonly(w.read_only);
  *req.mutable_volume_capability() = NodeVolumeCapability(w);
  SetMap(req.mutable_publish_context(), publish_context);
  SetMap(req.mutable_volume_context(), VolumeContext(w));
  absl::Status call = CallNode(directory_, v.driver, options_.node_name, "NodePublishVolume", [&](const auto& csi) {
    return csi.NodePublishVolume(req, {.timeout = options_.call_timeout, .secrets = secrets});
  });
  if (call.ok()) {
    spdlog::info("node {}: published {} for pod {}/{} at {}", options_.node_name, v.pv, w.pod.metadata.namespace_,
                 w.pod.metadata.name, target);
  } else if (csi::IsFinalError(call)) {
    absl::Status removed = RemoveFileDurably(record);
    if (!removed.ok() && removed.code() != absl::StatusCode::kNotFound) return removed;
  } else {
    spdlog::warn("node {}: publishing {} for pod {}/{} may or may not have happened ({}): the volume is uncertain",
                 options_.node_name, v.pv, w.pod.metadata.namespace_, w.pod.metadata.name, std::string(call.message()));
  }
  absl::MutexLock lock(&mu_);
  if (call.ok() || !csi::IsFinalError(call)) {
    published_[{w.pod_uid, v.pv}] =
        Published{.volume = v, .pod_uid = w.pod_uid, .target = target, .certain = call.ok()};
  } else {
    published_.erase({w.pod_uid, v.pv});
  }
  return call;
}

absl::Status VolumeManager::Unpublish(const Published& p) {
  const Volume& v = p.volume;
  BERTH_RETURN_IF_ERROR(CheckInsideRoot(p.target));
  if (!plugins_.Get(v.driver)) return DriverNotRegistered(v.driver);
  ::csi::v1::NodeUnpublishVolumeRequest req;
  req.set_volume_id(v.handle);
  req.set_target_path(p.target);
  // NOT_FOUND (the driver no longer has the volume) is OK; the mount check
  // below still makes sure nothing is left mounted at the target.
  BERTH_RETURN_IF_ERROR(CallNode(directory_, v.driver, options_.node_name, "NodeUnpublishVolume", [&](const auto& csi) {
    return csi.NodeUnpublishVolume(req, {.timeout = options_.call_timeout});
  }));
  // The driver removed the target; make sure nothing is mounted there before
  // touching the directories (rmdir refuses mount points and non-empty
  // directories anyway).
  BERTH_ASSIGN_OR_RETURN(auto table, options_.mount_table());
  for (const auto& m : table) {
    if (m.target == p.target) {
      return absl::InternalError(StrCat("NodeUnpublishVolume returned OK but ", p.target, " is still mounted"));
    }
  }
  struct stat st {};
  if (::lstat(p.target.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      ::rmdir(p.target.c_str());
    } else if (v.block && S_ISREG(st.st_mode) && st.st_size == 0) {
      ::unlink(p.target.c_str());
    }
  }
  absl::Status removed = RemoveFileDurably(PublishedRecord(p.target, v.block));
  if (!removed.ok() && removed.code() != absl::StatusCode::kNotFound) return removed;
  // The pod's directories, as far as they are empty now.
  std::string dir = Parent(p.target);
  if (!v.block) {
    RemoveIfEmpty(dir);  // .../kubernetes.io~csi/<pv>
    dir = Parent(dir);
  }
  RemoveIfEmpty(dir);                  // .../kubernetes.io~csi
  RemoveIfEmpty(Parent(dir));          // .../volumes or volumeDevices
  RemoveIfEmpty(Parent(Parent(dir)));  // <root>/pods/<uid>
  spdlog::info("node {}: unpublished {} from {}", options_.node_name, v.pv, p.target);
  absl::MutexLock lock(&mu_);
  published_.erase({p.pod_uid, v.pv});
  return absl::OkStatus();
}

absl::Status VolumeManager::Expand(const Wanted& w, const std::string& target, const std::string& staging) {
  const Volume& v = w.volume;
  const int64_t size = StorageBytes(w.pv.spec.capacity);
  auto storage = w.pv.spec.capacity.find("storage");
  const json capacity = storage == w.pv.spec.capacity.end() ? json() : types::EncodeValue(storage->second);
  auto driver = plugins_.Get(v.driver);
  if (!driver) return DriverNotRegistered(v.driver);
  if (driver->Has(NodeCap::EXPAND_VOLUME)) {
    BERTH_ASSIGN_OR_RETURN(auto secrets,
                           client::PvSecret(registry_, w.pv.spec.csi->node_expand_secret_ref, "nodeExpandSecretRef"));
    ::csi::v1::NodeExpandVolumeRequest req;
    req.set_volume_id(v.handle);
    req.set_volume_path(target);
    req.set_staging_target_path(staging);
    req.mutable_capacity_range()->set_required_bytes(size);
    *req.mutable_volume_capability() = NodeVolumeCapability(w);
    absl::Status grown = CallNode(directory_, v.driver, options_.node_name, "NodeExpandVolume", [&](const auto& csi) {
      return csi.NodeExpandVolume(req, {.timeout = options_.call_timeout, .secrets = secrets}).status();
    });
    if (!grown.ok()) {
      RecordNodeResizeFailure(w, grown);
      return grown;
    }
  }
  // The node's part is done: the claim shows the new size.
  BERTH_RETURN_IF_ERROR(EditClaimStatus(registry_, w.claim, [&](types::PersistentVolumeClaimStatus& status) {
    if (storage != w.pv.spec.capacity.end()) status.capacity["storage"] = storage->second;
    std::erase_if(status.conditions, [](const types::PersistentVolumeClaimCondition& c) {
      return c.type == "FileSystemResizePending" || c.type == "Resizing" || c.type == "NodeResizeError";
    });
    status.allocated_resource_statuses.erase("storage");
  }));
  spdlog::info("node {}: expanded {} to {}", options_.node_name, v.pv, capacity.dump());
  absl::MutexLock lock(&mu_);
  expanded_[v.unique] = size;
  return absl::OkStatus();
}

}  // namespace berth::node
