// The volume manager: the actual state rebuilt from disk after a restart.
#include "node/volumes/volume_manager_internal.h"

namespace berth::node {

using namespace internal;  // NOLINT: the volume manager's own helpers

// ---- restart reconstruction ----

absl::Status VolumeManager::Reconstruct() {
  BERTH_ASSIGN_OR_RETURN(auto table, options_.mount_table());
  std::set<std::string> mounted;
  for (const auto& m : table) mounted.insert(m.target);
  auto read_record = [&](const fs::path& file) -> std::optional<json> {
    auto text = ReadFile(file.string());
    if (!text.ok()) return std::nullopt;
    json record = json::parse(*text, nullptr, false);
    if (!record.is_object()) {
      spdlog::warn("ignoring unreadable volume record {}", file.string());
      return std::nullopt;
    }
    return record;
  };
  auto volume_of = [&](const json& record) -> std::optional<Volume> {
    Volume v{.driver = Str(record, {"driverName"}),
             .handle = Str(record, {"volumeHandle"}),
             .pv = Str(record, {"specVolID"}),
             .block = Str(record, {"volumeMode"}) == "Block",
             .unique = ""};
    if (!csi::CheckDriverName(v.driver).ok() || v.handle.empty() || !CheckComponent("pv", v.pv).ok())
      return std::nullopt;
    v.unique = client::UniqueVolumeName(v.driver, v.handle);
    return v;
  };
  std::error_code ec;
  int staged = 0, published = 0;
  // Staged volumes: <root>/plugins/kubernetes.io/csi/<dir>/<dir>/vol_data.json.
  for (const auto& a : fs::directory_iterator(options_.root + kCsiPluginDir, ec)) {
    std::error_code ec2;
    for (const auto& b : fs::directory_iterator(a.path(), ec2)) {
      auto record = read_record(b.path() / kVolData);
      if (!record) continue;
      auto v = volume_of(*record);
      const std::string path = Str(*record, {"stagingPath"});
      if (!v || !CheckInsideRoot(path).ok()) continue;
      const bool certain = v->block || mounted.count(path) > 0;
      absl::MutexLock lock(&mu_);
      staged_[v->unique] = Staged{.volume = *v, .path = path, .certain = certain};
      ++staged;
    }
  }
  // Published volumes: <root>/pods/<uid>/volumes/kubernetes.io~csi/<pv>/vol_data.json
  // and <root>/pods/<uid>/volumeDevices/kubernetes.io~csi/<pv>.vol_data.json.
  for (const auto& pod : fs::directory_iterator(options_.root + "/pods", ec)) {
    std::vector<fs::path> records;
    std::error_code ec2;
    for (const auto& d : fs::directory_iterator(pod.path() / "volumes/kubernetes.io~csi", ec2)) {
      records.push_back(d.path() / kVolData);
    }
    for (const auto& d : fs::directory_iterator(pod.path() / "volumeDevices/kubernetes.io~csi", ec2)) {
      if (absl::EndsWith(d.path().filename().string(), std::string(".") + kVolData)) records.push_back(d.path());
    }
    for (const auto& file : records) {
      auto record = read_record(file);
      if (!record) continue;
      auto v = volume_of(*record);
      const std::string target = Str(*record, {"targetPath"}), uid = Str(*record, {"podUID"});
      if (!v || uid != pod.path().filename().string() || !CheckInsideRoot(target).ok()) continue;
      absl::MutexLock lock(&mu_);
      published_[{uid, v->pv}] =
          Published{.volume = *v, .pod_uid = uid, .target = target, .certain = mounted.count(target) > 0};
      ++published;
    }
  }
  if (staged + published > 0) {
    spdlog::info("node {}: found {} staged and {} published volumes from before the restart", options_.node_name,
                 staged, published);
  }
  return absl::OkStatus();
}

}  // namespace berth::node
