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
  for (auto& pod : on_node) {
    const std::string uid = Uid(pod);
    if (!CheckComponent("pod uid", uid).ok()) continue;
    const std::string phase = Str(pod, {"status", "phase"});
    const bool deleting = client::Deleting(pod);
    if (deleting) pods->deleting[uid] = pod;
    if (deleting || phase == "Succeeded" || phase == "Failed") {
      // Nothing new is mounted for it; what is mounted stays while its
      // containers may still use it.
      if (ContainersMayRun(uid)) pods->holding.insert(uid);
      continue;
    }
    auto wait = [&](const std::string& why) { waiting->emplace(uid, why); };
    for (const auto& vol : Field(Field(pod, "spec"), "volumes")) {
      std::string claim_name;
      bool read_only = false, ephemeral = false;
      if (const json& pvc = Field(vol, "persistentVolumeClaim"); pvc.is_object()) {
        claim_name = Str(pvc, {"claimName"});
        read_only = Field(pvc, "readOnly") == true;
      } else if (Field(vol, "ephemeral").is_object()) {
        claim_name = Name(pod) + "-" + Str(vol, {"name"});
        ephemeral = true;
      } else {
        continue;
      }
      std::shared_ptr<const json> claim_json = claims.GetSharedByKey(StrCat(Ns(pod), "/", claim_name));
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
                           .volume_name = Str(vol, {"name"}),
                           .read_only = volume_read_only});
    }
    pods->active[uid] = std::move(pod);
  }
  return out;
}

}  // namespace berth::node
