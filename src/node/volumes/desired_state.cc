// The volume manager: the desired state (the volumes the pods on this node want).
#include "node/volumes/volume_manager_internal.h"

namespace berth::node {

using namespace internal;  // NOLINT: the volume manager's own helpers

// ---- desired state ----

std::vector<VolumeManager::Wanted> VolumeManager::Desired(std::map<std::string, std::string>* waiting, PodsSeen* pods) {
  std::vector<Wanted> out;
  const std::string node = options_.node_name;
  auto on_node = informers_.at("pods")->ByIndex(kPodsByNode, node);
  bool poll = false;  // a pod waits for its claim or PV
  for (const json& pod_json : on_node) {
    absl::StatusOr<types::Pod> decoded = client::DecodeAs<types::Pod>(pod_json);
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
    // Whatever a volume waits for here is in its claim or PV, which no watch
    // reports: looked at again within Options::poll.
    auto wait = [&](const std::string& why) {
      waiting->emplace(uid, why);
      poll = true;
    };
    for (const types::Volume& vol : pod.spec.volumes) {
      bool ephemeral = false;
      const std::string claim_name = pod.VolumeClaim(vol, &ephemeral);
      if (claim_name.empty()) continue;
      const bool read_only = vol.persistent_volume_claim && vol.persistent_volume_claim->read_only;
      absl::StatusOr<std::shared_ptr<const json>> claim_read =
          Read(/*claim=*/true, StrCat(pod.metadata.namespace_, "/", claim_name));
      if (!claim_read.ok() || !*claim_read) {
        wait(claim_read.ok() ? StrCat("persistentvolumeclaim \"", claim_name, "\" not found")
                             : StrCat("persistentvolumeclaim \"", claim_name, "\": ", claim_read.status().message()));
        continue;
      }
      const std::shared_ptr<const json>& claim_json = *claim_read;
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
      absl::StatusOr<std::shared_ptr<const json>> pv_read = Read(/*claim=*/false, pv_name);
      if (!pv_read.ok() || !*pv_read) {
        wait(pv_read.ok() ? StrCat("persistentvolume \"", pv_name, "\" not found")
                          : StrCat("persistentvolume \"", pv_name, "\": ", pv_read.status().message()));
        continue;
      }
      const std::shared_ptr<const json>& pv_json = *pv_read;
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
  ForgetUnread();
  if (poll) PollSoon();
  return out;
}

absl::StatusOr<std::shared_ptr<const json>> VolumeManager::Read(bool claim, const std::string& key) {
  const std::string id = StrCat(claim ? "c/" : "v/", key);
  const absl::Time now = clock_.Now();
  {
    absl::MutexLock lock(&read_mu_);
    if (auto it = read_.find(id); it != read_.end() && now - it->second.at < options_.poll) {
      it->second.used = true;
      return it->second.object;
    }
  }
  auto [ns, name] = client::SplitKey(key);
  absl::StatusOr<json> got =
      registry_.Get(claim ? K("persistentvolumeclaims") : K("persistentvolumes"), claim ? ns : "", name);
  std::shared_ptr<const json> object;
  if (got.ok()) {
    object = std::make_shared<const json>(*std::move(got));
  } else if (got.status().code() != absl::StatusCode::kNotFound) {
    // Unreadable now: what was read before stays (for the stats' names).
    absl::MutexLock lock(&read_mu_);
    if (auto it = read_.find(id); it != read_.end()) it->second.used = true;
    return got.status();
  }
  absl::MutexLock lock(&read_mu_);
  read_[id] = ReadObject{.object = object, .at = now, .used = true};
  return object;
}

std::shared_ptr<const json> VolumeManager::LastRead(bool claim, const std::string& key) const {
  absl::MutexLock lock(&read_mu_);
  auto it = read_.find(StrCat(claim ? "c/" : "v/", key));
  return it == read_.end() ? nullptr : it->second.object;
}

void VolumeManager::ForgetUnread() {
  absl::MutexLock lock(&read_mu_);
  for (auto it = read_.begin(); it != read_.end();) {
    if (!it->second.used) {
      it = read_.erase(it);
    } else {
      it->second.used = false;
      ++it;
    }
  }
}

}  // namespace berth::node
