// The volume manager: the desired state (the volumes the pods on this node want).
#include "node/volumes/volume_manager_internal.h"

namespace berth::node {

using namespace internal;  // NOLINT: the volume manager's own helpers

// ---- desired state ----

std::vector<VolumeManager::Wanted> VolumeManager::Desired(std::map<std::string, std::string>* waiting, PodsSeen* pods) {
  std::vector<Wanted> out;
  const std::string node = options_.node_name;
  auto on_node = informers_.at("pods")->ByIndex(kPodsByNode, node);
  auto& claims = *informers_.at("persistentvolumeclaims");
  auto& volumes = *informers_.at("persistentvolumes");
  std::vector<absl::StatusOr<types::Pod>> pods_here;
  pods_here.reserve(on_node.size());
  // The claims these pods use, published before any claim is read: a claim
  // event from now on wakes the reconciler, and one before it is already in
  // the informer's cache read below (see ClaimUsed).
  std::set<std::string> claims_used, pvs_used;  // "ns/name", name
  for (const json& pod_json : on_node) {
    pods_here.push_back(client::DecodeAs<types::Pod>(pod_json));
    if (!pods_here.back().ok()) continue;
    const types::Pod& pod = *pods_here.back();
    for (const types::Volume& vol : pod.spec.volumes) {
      bool ephemeral = false;
      const std::string claim_name = pod.VolumeClaim(vol, &ephemeral);
      if (!claim_name.empty()) claims_used.insert(StrCat(pod.metadata.namespace_, "/", claim_name));
    }
  }
  {
    absl::MutexLock lock(&used_mu_);
    claims_used_ = std::move(claims_used);
  }
  for (size_t i = 0; i < on_node.size(); ++i) {
    const json& pod_json = on_node[i];
    absl::StatusOr<types::Pod>& decoded = pods_here[i];
    if (!decoded.ok()) {
      // Nothing is mounted for a pod that does not decode, and what is
      // mounted for it stays: its containers may use it, and tearing down
      // on a read error would pull volumes from under a running pod.
      const std::string uid = Uid(pod_json);
      spdlog::warn("node {}: pod {}: {}", node, uid, decoded.status().ToString());
      if (CheckComponent("pod uid", uid).ok()) pods->holding.insert(uid);
      continue;
    }
    types::Pod& pod = *decoded;
    const std::string uid = pod.metadata.uid;
    if (!CheckComponent("pod uid", uid).ok()) continue;
    const std::string& phase = pod.status.phase;
    const bool deleting = pod.metadata.Deleting();
    if (deleting) pods->deleting[uid] = pod;
    if (deleting || phase == "Succeeded" || phase == "Failed") {
      // Nothing new is mounted for it; what is mounted stays while its
      // containers may still use it.
      if (ContainersMayRun(uid)) pods->holding.insert(uid);
      continue;
    }
    auto wait = [&](const std::string& why) { waiting->emplace(uid, why); };
    for (const types::Volume& vol : pod.spec.volumes) {
      bool ephemeral = false;
      const std::string claim_name = pod.VolumeClaim(vol, &ephemeral);
      if (claim_name.empty()) continue;
      const bool read_only = vol.persistent_volume_claim && vol.persistent_volume_claim->read_only;
      std::shared_ptr<const json> claim_json = claims.GetSharedByKey(StrCat(pod.metadata.namespace_, "/", claim_name));
      if (!claim_json) {
        wait(StrCat("persistentvolumeclaim \"", claim_name, "\" not found"));
        continue;
      }
      absl::StatusOr<types::PersistentVolumeClaim> claim = client::DecodeAs<types::PersistentVolumeClaim>(*claim_json);
      if (!claim.ok()) {
        wait(std::string(claim.status().message()));
        continue;
      }
      if (ephemeral) {
        const auto& refs = claim->metadata.owner_references;
        if (std::none_of(refs.begin(), refs.end(), [&](const types::OwnerReference& r) { return r.uid == uid; })) {
          wait(StrCat("persistentvolumeclaim \"", claim_name, "\" was not created for this pod"));
          continue;
        }
      }
      const std::string pv_name = claim->spec.volume_name;
      if (!pv_name.empty()) pvs_used.insert(pv_name);
      if (claim->status.phase != "Bound" || pv_name.empty()) {
        wait(StrCat("persistentvolumeclaim \"", claim_name, "\" is not bound"));
        continue;
      }
      std::shared_ptr<const json> pv_json = volumes.GetSharedByKey(pv_name);
      if (!pv_json) {
        wait(StrCat("persistentvolume \"", pv_name, "\" not found"));
        continue;
      }
      absl::StatusOr<types::PersistentVolume> pv = client::DecodeAs<types::PersistentVolume>(*pv_json);
      if (!pv.ok()) {
        wait(std::string(pv.status().message()));
        continue;
      }
      if (!pv->spec.csi) {
        wait(StrCat("persistentvolume \"", pv_name, "\" is not a CSI volume; berth mounts CSI volumes only"));
        continue;
      }
      const types::CSIPersistentVolumeSource& csi = *pv->spec.csi;
      Volume v{.driver = csi.driver,
               .handle = csi.volume_handle,
               .pv = pv_name,
               .block = types::VolumeModeOf(pv->spec.volume_mode) == "Block",
               .unique = ""};
      if (!csi::CheckDriverName(v.driver).ok() || v.handle.empty() || !CheckComponent("pv", v.pv).ok()) {
        wait(StrCat("persistentvolume \"", pv_name, "\" has an unusable driver or volume handle"));
        continue;
      }
      v.unique = client::UniqueVolumeName(v.driver, v.handle);
      const bool volume_read_only = read_only || csi.read_only;
      out.push_back(Wanted{.pod = pod,
                           .claim = *std::move(claim),
                           .pv = *std::move(pv),
                           .volume = v,
                           .pod_uid = uid,
                           .volume_name = vol.name,
                           .read_only = volume_read_only});
    }
    pods->active[uid] = std::move(pod);
  }
  {
    absl::MutexLock lock(&used_mu_);
    pvs_used_ = std::move(pvs_used);
  }
  return out;
}

bool VolumeManager::ClaimUsed(const json& claim) const {
  const std::string key = client::ObjectKey(claim);
  absl::MutexLock lock(&used_mu_);
  return claims_used_.count(key) > 0;
}

bool VolumeManager::PvUsed(const json& pv) const {
  const std::string ref =
      StrCat(Str(pv, {"spec", "claimRef", "namespace"}), "/", Str(pv, {"spec", "claimRef", "name"}));
  const std::string name = Str(pv, {"metadata", "name"});
  absl::MutexLock lock(&used_mu_);
  return pvs_used_.count(name) > 0 || claims_used_.count(ref) > 0;
}

}  // namespace berth::node
