// The volume manager: NodeGetVolumeStats of published volumes, exported as kubelet_volume_stats_*.
#include "node/volumes/volume_manager_internal.h"

namespace berth::node {

using namespace internal;  // NOLINT: the volume manager's own helpers

void VolumeManager::CollectStats() {
  struct Target {
    Volume volume;
    std::string path, staging;
    std::vector<std::string> pod_uids;  // every pod it is published to
  };
  std::map<std::string, Target> targets;  // unique → one publish path
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [key, p] : published_) {
      if (!p.certain) continue;
      if (auto it = targets.find(p.volume.unique); it != targets.end()) {
        it->second.pod_uids.push_back(p.pod_uid);
        continue;
      }
      auto st = staged_.find(p.volume.unique);
      targets[p.volume.unique] = {
          p.volume, p.target, st != staged_.end() && st->second.certain ? st->second.path : "", {p.pod_uid}};
    }
  }
  std::vector<VolumeStat> out;
  for (const auto& entry : targets) {
    const Target& t = entry.second;  // (named: a [&] lambda below reads it; clang 14 cannot capture a binding)
    auto driver = plugins_.Get(t.volume.driver);
    if (!driver || !driver->Has(NodeCap::GET_VOLUME_STATS)) continue;
    auto pv = client::GetTyped<types::PersistentVolume>(registry_, K("persistentvolumes"), "", t.volume.pv);
    if (!pv.ok()) {
      // Gone (NOT_FOUND) needs no word; a volume that does not decode has no
      // claim to label its figures with.
      if (pv.status().code() != absl::StatusCode::kNotFound) {
        spdlog::warn("node {}: volume stats of {}: {}", options_.node_name, t.volume.pv, pv.status().ToString());
      }
      continue;
    }
    if (!pv->spec.claim_ref || pv->spec.claim_ref->name.empty()) continue;
    const types::ObjectReference ref = *pv->spec.claim_ref;
    ::csi::v1::NodeGetVolumeStatsRequest req;
    req.set_volume_id(t.volume.handle);
    req.set_volume_path(t.path);
    if (!t.staging.empty()) req.set_staging_target_path(t.staging);
    ::csi::v1::NodeGetVolumeStatsResponse resp;
    absl::Status st =
        CallNode(directory_, t.volume.driver, options_.node_name, "NodeGetVolumeStats", [&](const auto& csi) {
          auto got = csi.NodeGetVolumeStats(req, {.timeout = options_.call_timeout});
          if (got.ok()) resp = std::move(*got);
          return got.status();
        });
    if (!st.ok()) {
      spdlog::warn("node {}: volume stats of {}: {}", options_.node_name, t.volume.pv, std::string(st.message()));
      continue;
    }
    VolumeStat v;
    v.ns = ref.namespace_;
    v.claim = ref.name;
    v.pv = t.volume.pv;
    for (const auto& u : resp.usage()) {
      if (u.unit() == ::csi::v1::VolumeUsage::BYTES) {
        v.has_bytes = true;
        v.capacity_bytes = u.total();
        v.available_bytes = u.available();
        v.used_bytes = u.used();
      } else if (u.unit() == ::csi::v1::VolumeUsage::INODES) {
        v.has_inodes = true;
        v.inodes = u.total();
        v.inodes_free = u.available();
        v.inodes_used = u.used();
      }
    }
    if (resp.has_volume_condition()) {
      v.has_condition = true;
      v.abnormal = resp.volume_condition().abnormal();
      v.condition_message = resp.volume_condition().message();
      if (v.abnormal) ReportAbnormal(t.pod_uids, t.volume.pv, v.condition_message);
    }
    out.push_back(std::move(v));
  }
  absl::MutexLock lock(&stats_mu_);
  stats_ = std::move(out);
}

// kubelet's volume health (CSIVolumeHealth): a Warning VolumeConditionAbnormal
// on every pod using the volume, "Volume <name in the pod>: <message>", at
// every stats period while it lasts (the recorder counts repeats).
void VolumeManager::ReportAbnormal(const std::vector<std::string>& pod_uids, const std::string& pv,
                                   const std::string& message) {
  spdlog::warn("node {}: volume {} is abnormal: {}", options_.node_name, pv, message);
  for (const auto& pod_json : informers_.at("pods")->ByIndex(kPodsByNode, options_.node_name)) {
    auto pod = client::DecodeAs<types::Pod>(pod_json);
    if (!pod.ok() || std::find(pod_uids.begin(), pod_uids.end(), pod->metadata.uid) == pod_uids.end()) continue;
    std::string name = pv;
    for (const auto& vol : pod->spec.volumes) {
      std::string claim_name;
      if (vol.persistent_volume_claim) claim_name = vol.persistent_volume_claim->claim_name;
      if (vol.ephemeral) claim_name = StrCat(pod->metadata.name, "-", vol.name);  // the generic ephemeral claim
      if (claim_name.empty()) continue;
      auto claim = LastRead(/*claim=*/true, StrCat(pod->metadata.namespace_, "/", claim_name));
      if (claim && client::Str(*claim, {"spec", "volumeName"}) == pv) name = vol.name;
    }
    events_.Record(client::IdentityOf(*pod), "Warning", "VolumeConditionAbnormal",
                   StrCat("Volume ", name, ": ", message));
  }
}

std::vector<VolumeManager::VolumeStat> VolumeManager::Stats() const {
  absl::MutexLock lock(&stats_mu_);
  return stats_;
}

void VolumeManager::WriteStatsMetrics(std::string* out, const std::vector<VolumeStat>& stats) {
  struct Family {
    const char* name;
    const char* help;
    bool (*has)(const VolumeStat&);
    double (*value)(const VolumeStat&);
  };
  static constexpr Family kFamilies[] = {
      {"kubelet_volume_stats_capacity_bytes", "Capacity in bytes of the volume",
       [](const VolumeStat& v) { return v.has_bytes; }, [](const VolumeStat& v) { return double(v.capacity_bytes); }},
      {"kubelet_volume_stats_available_bytes", "Number of available bytes in the volume",
       [](const VolumeStat& v) { return v.has_bytes; }, [](const VolumeStat& v) { return double(v.available_bytes); }},
      {"kubelet_volume_stats_used_bytes", "Number of used bytes in the volume",
       [](const VolumeStat& v) { return v.has_bytes; }, [](const VolumeStat& v) { return double(v.used_bytes); }},
      {"kubelet_volume_stats_inodes", "Maximum number of inodes in the volume",
       [](const VolumeStat& v) { return v.has_inodes; }, [](const VolumeStat& v) { return double(v.inodes); }},
      {"kubelet_volume_stats_inodes_free", "Number of free inodes in the volume",
       [](const VolumeStat& v) { return v.has_inodes; }, [](const VolumeStat& v) { return double(v.inodes_free); }},
      {"kubelet_volume_stats_inodes_used", "Number of used inodes in the volume",
       [](const VolumeStat& v) { return v.has_inodes; }, [](const VolumeStat& v) { return double(v.inodes_used); }},
      {"kubelet_volume_stats_health_status_abnormal",
       "Abnormal volume health status. The count is either 1 or 0. 1 indicates the volume is unhealthy, 0 indicates "
       "volume is healthy",
       [](const VolumeStat& v) { return v.has_condition; }, [](const VolumeStat& v) { return v.abnormal ? 1.0 : 0.0; }},
  };
  for (const auto& f : kFamilies) {
    if (std::none_of(stats.begin(), stats.end(), f.has)) continue;
    metrics::WriteFamily(out, f.name, metrics::MetricType::kGauge, f.help);
    for (const auto& v : stats) {
      if (f.has(v))
        metrics::WriteSample(out, f.name, {{"namespace", v.ns}, {"persistentvolumeclaim", v.claim}}, f.value(v));
    }
  }
}

}  // namespace berth::node
