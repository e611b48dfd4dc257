#include "node/volume_manager.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <system_error>

#include "absl/strings/match.h"
#include "api/quantity.h"
#include "common/fs.h"
#include "common/hash.h"
#include "common/status.h"
#include "common/strings.h"
#include "client/volume_names.h"
#include "client/capability.h"
#include "client/object.h"
#include "client/workqueue.h"
#include "client/writes.h"
#include "csi/grpc_status.h"
#include "csi/registration.h"
#include "csi/v1/csi.grpc.pb.h"
#include "grpcpp/client_context.h"
#include "metrics/prometheus.h"
#include "spdlog/spdlog.h"

namespace berth::node {
namespace {

namespace fs = std::filesystem;
using client::Field;
using client::Name;
using client::Ns;
using client::Str;
using client::Uid;
using nlohmann::json;
using NodeCap = ::csi::v1::NodeServiceCapability::RPC;

const api::KindInfo& K(std::string_view resource, std::string_view group = "") {
  return *api::FindResource(group, resource);
}

constexpr char kCsiPluginDir[] = "/plugins/kubernetes.io/csi";
constexpr char kVolData[] = "vol_data.json";

// A name from an object that becomes one path component.
absl::Status CheckComponent(const std::string& what, const std::string& s) {
  if (s.empty() || s == "." || s == ".." || s.size() > 253 || s.find('/') != std::string::npos ||
      s.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(StrCat(what, " \"", s, "\" cannot be used in a path"));
  }
  return absl::OkStatus();
}

std::string Parent(const std::string& path) { return fs::path(path).parent_path().string(); }

// Removes an empty directory or a file; missing is fine; a non-empty
// directory or a mount point stays (rmdir refuses both).
void RemoveIfEmpty(const std::string& path) {
  if (::rmdir(path.c_str()) != 0 && errno == ENOTDIR) ::unlink(path.c_str());
}

bool ResizePending(const json& claim) {
  const json& status = Field(claim, "status");
  if (Str(status, {"allocatedResourceStatuses", "storage"}) == "NodeResizePending") return true;
  for (const auto& c : Field(status, "conditions")) {
    if (Str(c, {"type"}) == "FileSystemResizePending" && Str(c, {"status"}) == "True") return true;
  }
  return false;
}

int64_t Bytes(const json& q) {
  if (!q.is_string()) return 0;
  auto parsed = api::Quantity::Parse(q.get<std::string>());
  return parsed.ok() ? parsed->Value() : 0;
}

void SetMap(google::protobuf::Map<std::string, std::string>* out, const std::map<std::string, std::string>& in) {
  for (const auto& [k, v] : in) (*out)[k] = v;
}

// Not a failure of the operation: it waits for the driver, and the driver's
// registration wakes the reconciler (no backoff builds up meanwhile).
absl::Status DriverNotRegistered(const std::string& driver) {
  return client::NotAFailure(StrCat("driver ", driver, " is not registered"));
}

absl::Status FromGrpc(const std::string& rpc, const grpc::Status& st) {
  if (st.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(st.error_code()), StrCat(rpc, ": ", st.error_message()));
}

// One call to the driver's Node service on this node, with a deadline.
template <typename Req, typename Resp>
absl::Status CallNode(client::DriverDirectory& directory, const std::string& driver, const std::string& node,
                      absl::Duration timeout, const char* rpc,
                      grpc::Status (::csi::v1::Node::Stub::*method)(grpc::ClientContext*, const Req&, Resp*),
                      const Req& req) {
  BERTH_ASSIGN_OR_RETURN(auto channel, directory.Channel(driver, node));
  auto stub = ::csi::v1::Node::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  Resp resp;
  return FromGrpc(rpc, ((*stub).*method)(&ctx, req, &resp));
}

}  // namespace

VolumeManager::VolumeManager(apiserver::Registry& registry, CsiPlugins& plugins,
                             client::DriverDirectory& directory, NodeStatus& node_status, Options options)
    : registry_(registry),
      clock_(options.clock != nullptr ? *options.clock : RealClock()),
      plugins_(plugins),
      directory_(directory),
      node_status_(node_status),
      options_(std::move(options)),
      events_(registry, "kubelet"),
      // kubelet's exponentialbackoff: 500 ms doubling, at most 2 min 2 s.
      backoff_({.base = absl::Milliseconds(500), .max = absl::Seconds(122), .jitter = 0}) {}

VolumeManager::~VolumeManager() { Stop(); }

std::string VolumeManager::StagingPath(const std::string& driver, const std::string& handle, const std::string& pv,
                                       bool block) const {
  if (block) return StrCat(options_.root, kCsiPluginDir, "/volumeDevices/staging/", pv);
  return StrCat(options_.root, kCsiPluginDir, "/", driver, "/", Sha256Hex(handle), "/globalmount");
}

std::string VolumeManager::TargetPath(const std::string& pod_uid, const std::string& pv, bool block) const {
  if (block) return StrCat(options_.root, "/pods/", pod_uid, "/volumeDevices/kubernetes.io~csi/", pv);
  return StrCat(options_.root, "/pods/", pod_uid, "/volumes/kubernetes.io~csi/", pv, "/mount");
}

namespace {
// Where the record of a staged / published volume lives.
std::string StagedRecord(const std::string& root, const std::string& staging, const std::string& pv, bool block) {
  if (block) return StrCat(root, kCsiPluginDir, "/volumeDevices/", pv, "/", kVolData);
  return StrCat(Parent(staging), "/", kVolData);
}
std::string PublishedRecord(const std::string& target, bool block) {
  return block ? target + "." + kVolData : StrCat(Parent(target), "/", kVolData);
}
}  // namespace

absl::Status VolumeManager::CheckInsideRoot(const std::string& path) const {
  return CheckPathInside(options_.root, path);
}

absl::Status VolumeManager::Start() {
  BERTH_RETURN_IF_ERROR(MakeDirs(options_.root + "/pods", 0750));
  BERTH_RETURN_IF_ERROR(MakeDirs(options_.root + kCsiPluginDir, 0750));
  BERTH_RETURN_IF_ERROR(Reconstruct());
  for (auto [resource, group] : std::vector<std::pair<const char*, const char*>>{
           {"pods", ""}, {"persistentvolumeclaims", ""}, {"persistentvolumes", ""},
           {"volumeattachments", "storage.k8s.io"}, {"csidrivers", "storage.k8s.io"}}) {
    auto informer = std::make_unique<client::Informer>(registry_, K(resource, group));
    informer->AddHandlers({.on_add = [this](const json&) { Wake(); },
                           .on_update = [this](const json&, const json&) { Wake(); },
                           .on_delete = [this](const json&) { Wake(); }});
    informers_[resource] = std::move(informer);
  }
  for (auto& [r, informer] : informers_) informer->Start();
  plugins_.SetOnChange([this] { Wake(); });
  {
    absl::MutexLock lock(&mu_);
    stop_ = false;
  }
  for (int i = 0; i < std::max(1, options_.workers); ++i) workers_.emplace_back([this] { WorkerLoop(); });
  reconciler_ = std::thread([this] { ReconcileLoop(); });
  if (options_.stats_period > absl::ZeroDuration()) {
    stats_thread_ = std::thread([this] {
      for (;;) {
        {
          absl::MutexLock lock(&mu_);
          auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_; };
          if (clock_.AwaitWithTimeout(mu_, absl::Condition(&stopping), options_.stats_period)) return;
        }
        CollectStats();
      }
    });
  }
  return absl::OkStatus();
}

void VolumeManager::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stop_ && !reconciler_.joinable()) return;
    stop_ = true;
  }
  plugins_.SetOnChange(nullptr);
  if (reconciler_.joinable()) reconciler_.join();
  if (stats_thread_.joinable()) stats_thread_.join();
  for (auto& w : workers_) w.join();
  workers_.clear();
  for (auto& [r, informer] : informers_) informer->Stop();
  informers_.clear();
}

void VolumeManager::CollectStats() {
  struct Target {
    Volume volume;
    std::string path, staging;
  };
  std::map<std::string, Target> targets;  // unique → one publish path
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [key, p] : published_) {
      if (!p.certain || targets.contains(p.volume.unique)) continue;
      auto st = staged_.find(p.volume.unique);
      targets[p.volume.unique] = {p.volume, p.target, st != staged_.end() && st->second.certain ? st->second.path : ""};
    }
  }
  std::vector<VolumeStat> out;
  for (const auto& [unique, t] : targets) {
    auto driver = plugins_.Get(t.volume.driver);
    if (!driver || !driver->Has(NodeCap::GET_VOLUME_STATS)) continue;
    auto pv = registry_.Get(K("persistentvolumes"), "", t.volume.pv);
    if (!pv.ok()) continue;
    const json ref = Field(Field(*pv, "spec"), "claimRef");
    if (Str(ref, {"name"}).empty()) continue;
    ::csi::v1::NodeGetVolumeStatsRequest req;
    req.set_volume_id(t.volume.handle);
    req.set_volume_path(t.path);
    if (!t.staging.empty()) req.set_staging_target_path(t.staging);
    ::csi::v1::NodeGetVolumeStatsResponse resp;
    absl::Status st = [&]() -> absl::Status {
      BERTH_ASSIGN_OR_RETURN(auto channel, directory_.Channel(t.volume.driver, options_.node_name));
      auto stub = ::csi::v1::Node::NewStub(channel);
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + std::min(options_.call_timeout, absl::Seconds(30))));
      return FromGrpc("NodeGetVolumeStats", stub->NodeGetVolumeStats(&ctx, req, &resp));
    }();
    if (!st.ok()) {
      spdlog::warn("node {}: volume stats of {}: {}", options_.node_name, t.volume.pv, std::string(st.message()));
      continue;
    }
    VolumeStat v;
    v.ns = Str(ref, {"namespace"});
    v.claim = Str(ref, {"name"});
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
    }
    out.push_back(std::move(v));
  }
  absl::MutexLock lock(&stats_mu_);
  stats_ = std::move(out);
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
      if (f.has(v)) metrics::WriteSample(out, f.name, {{"namespace", v.ns}, {"persistentvolumeclaim", v.claim}}, f.value(v));
    }
  }
}

void VolumeManager::Wake() {
  absl::MutexLock lock(&mu_);
  dirty_ = true;
}

std::set<std::string> VolumeManager::StagedVolumes() const {
  absl::MutexLock lock(&mu_);
  std::set<std::string> out;
  for (const auto& [unique, s] : staged_) {
    if (s.certain) out.insert(unique);
  }
  return out;
}

std::set<std::string> VolumeManager::PublishedVolumes() const {
  absl::MutexLock lock(&mu_);
  std::set<std::string> out;
  for (const auto& [key, p] : published_) {
    if (p.certain) out.insert(key.first + "/" + key.second);
  }
  return out;
}

std::set<std::string> VolumeManager::UncertainStagedVolumes() const {
  absl::MutexLock lock(&mu_);
  std::set<std::string> out;
  for (const auto& [unique, s] : staged_) {
    if (!s.certain) out.insert(unique);
  }
  return out;
}

std::set<std::string> VolumeManager::UncertainPublishedVolumes() const {
  absl::MutexLock lock(&mu_);
  std::set<std::string> out;
  for (const auto& [key, p] : published_) {
    if (!p.certain) out.insert(key.first + "/" + key.second);
  }
  return out;
}

bool VolumeManager::PodVolumesReady(const std::string& pod_uid) const {
  absl::MutexLock lock(&mu_);
  return ready_pods_.contains(pod_uid);
}

std::map<std::string, VolumeManager::PodVolume> VolumeManager::PodVolumePaths(const std::string& pod_uid) const {
  absl::MutexLock lock(&mu_);
  std::map<std::string, PodVolume> out;
  auto vols = pod_volumes_.find(pod_uid);
  if (vols == pod_volumes_.end()) return out;
  for (const auto& [name, pv_ro] : vols->second) {
    auto p = published_.find({pod_uid, pv_ro.first});
    if (p == published_.end() || !p->second.certain) continue;
    out[name] = PodVolume{.path = p->second.target, .block = p->second.volume.block, .read_only = pv_ro.second};
  }
  return out;
}

bool VolumeManager::ContainersMayRun(const std::string& pod_uid) const {
  return options_.containers_may_run && options_.containers_may_run(pod_uid);
}

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
    if (!csi::CheckDriverName(v.driver).ok() || v.handle.empty() || !CheckComponent("pv", v.pv).ok()) return std::nullopt;
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

// ---- desired state ----

std::vector<VolumeManager::Wanted> VolumeManager::Desired(std::map<std::string, std::string>* waiting,
                                                          PodsSeen* pods) {
  std::vector<Wanted> out;
  const std::string node = options_.node_name;
  auto on_node = informers_.at("pods")->Select([&](const json& p) { return Str(p, {"spec", "nodeName"}) == node; });
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
      auto claim = claims.Get(Ns(pod), claim_name);
      if (!claim) {
        wait(StrCat("persistentvolumeclaim \"", claim_name, "\" not found"));
        continue;
      }
      if (ephemeral) {
        bool owned = false;
        for (const auto& ref : Field(Field(*claim, "metadata"), "ownerReferences")) owned |= Str(ref, {"uid"}) == uid;
        if (!owned) {
          wait(StrCat("persistentvolumeclaim \"", claim_name, "\" was not created for this pod"));
          continue;
        }
      }
      const std::string pv_name = Str(*claim, {"spec", "volumeName"});
      if (Str(*claim, {"status", "phase"}) != "Bound" || pv_name.empty()) {
        wait(StrCat("persistentvolumeclaim \"", claim_name, "\" is not bound"));
        continue;
      }
      auto pv = volumes.Get("", pv_name);
      if (!pv) {
        wait(StrCat("persistentvolume \"", pv_name, "\" not found"));
        continue;
      }
      const json& csi = Field(Field(*pv, "spec"), "csi");
      if (!csi.is_object()) {
        wait(StrCat("persistentvolume \"", pv_name, "\" is not a CSI volume; berth mounts CSI volumes only"));
        continue;
      }
      Volume v{.driver = Str(csi, {"driver"}),
               .handle = Str(csi, {"volumeHandle"}),
               .pv = pv_name,
               .block = Str(*pv, {"spec", "volumeMode"}) == "Block",
               .unique = ""};
      if (!csi::CheckDriverName(v.driver).ok() || v.handle.empty() || !CheckComponent("pv", v.pv).ok()) {
        wait(StrCat("persistentvolume \"", pv_name, "\" has an unusable driver or volume handle"));
        continue;
      }
      v.unique = client::UniqueVolumeName(v.driver, v.handle);
      out.push_back(Wanted{.pod = pod,
                           .claim = *claim,
                           .pv = *pv,
                           .volume = v,
                           .pod_uid = uid,
                           .volume_name = Str(vol, {"name"}),
                           .read_only = read_only || Field(csi, "readOnly") == true});
    }
    pods->active[uid] = std::move(pod);
  }
  return out;
}

// ---- the reconciler ----

void VolumeManager::ReconcileLoop() {
  // Nothing is torn down before every informer has its first list: an
  // empty cache would look like "no pod wants anything".
  for (auto& [r, informer] : informers_) {
    while (!informer->WaitForSync(absl::Milliseconds(200))) {
      absl::MutexLock lock(&mu_);
      if (stop_) return;
    }
  }
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || dirty_; };
      // Wake for the resync, or as soon as a failed operation may be retried.
      const absl::Time now = clock_.Now();
      absl::Time next = now + options_.resync;
      for (const auto& [id, at] : retry_at_) {
        if (at > now && at < next) next = at;
      }
      clock_.AwaitWithDeadline(mu_, absl::Condition(&ready), next);
      if (stop_) return;
      dirty_ = false;
    }
    Reconcile();
  }
}

void VolumeManager::Reconcile() {
  std::map<std::string, std::string> waiting;
  PodsSeen seen;
  std::vector<Wanted> wanted = Desired(&waiting, &seen);

  std::map<std::string, Staged> staged;
  std::map<std::pair<std::string, std::string>, Published> published;
  {
    absl::MutexLock lock(&mu_);
    staged = staged_;
    published = published_;
    snapshot_seq_ = done_seq_;
    done_at_.clear();  // only ops ending after this snapshot make it stale
  }
  // volumesInUse first: nothing is staged before the node says it uses it.
  std::vector<std::string> in_use;
  for (const auto& w : wanted) in_use.push_back(w.volume.unique);
  for (const auto& [unique, s] : staged) in_use.push_back(unique);
  for (const auto& [key, p] : published) in_use.push_back(p.volume.unique);
  const bool in_use_reported = node_status_.SetVolumesInUse(in_use).ok();

  std::set<std::string> wanted_unique;
  std::set<std::pair<std::string, std::string>> wanted_pub;
  for (const auto& w : wanted) {
    wanted_unique.insert(w.volume.unique);
    wanted_pub.insert({w.pod_uid, w.volume.pv});
  }
  // Tear down what no pod here wants any more: unpublish first; a pod that
  // still runs keeps its volumes (a pod's volumes never change), and so does
  // a deleting or finished one whose containers may still run.
  std::set<std::string> still_published;
  for (const auto& [key, p] : published) {
    still_published.insert(p.volume.unique);  // unstaged only after this is unpublished
    if (wanted_pub.count(key) || seen.active.count(p.pod_uid) || seen.holding.count(p.pod_uid)) continue;
    Dispatch(Op{.lock_key = p.volume.unique,
                .id = StrCat("unpublish/", key.first, "/", key.second),
                .run = [this, p] { return Unpublish(p); },
                .pod = json(),
                .what = StrCat("UnmountVolume.TearDown failed for volume \"", p.volume.pv, "\"")});
  }
  for (const auto& [unique, s] : staged) {
    if (wanted_unique.count(unique) || still_published.count(unique)) continue;
    Dispatch(Op{.lock_key = unique,
                .id = StrCat("unstage/", unique),
                .run = [this, s] { return Unstage(s); },
                .pod = json(),
                .what = StrCat("UnmountDevice failed for volume \"", s.volume.pv, "\"")});
  }
  // Set up what is wanted.
  std::set<std::string> pods_pending;
  for (const auto& w : wanted) {
    auto pub = published.find({w.pod_uid, w.volume.pv});
    const bool is_published = pub != published.end() && pub->second.certain;
    auto driver = plugins_.Get(w.volume.driver);
    if (!driver) {
      if (!is_published) {
        waiting.emplace(w.pod_uid, StrCat("driver ", w.volume.driver, " is not registered on node ", options_.node_name));
        pods_pending.insert(w.pod_uid);
      }
      continue;
    }
    auto st = staged.find(w.volume.unique);
    const bool stages = driver->Has(NodeCap::STAGE_UNSTAGE_VOLUME);
    const std::string staging = stages ? StagingPath(w.volume.driver, w.volume.handle, w.volume.pv, w.volume.block) : "";
    if (is_published) {
      if (ResizePending(w.claim) && Bytes(Field(Field(Field(w.pv, "spec"), "capacity"), "storage")) > 0) {
        Dispatch(Op{.lock_key = w.volume.unique,
                    .id = StrCat("expand/", w.volume.unique),
                    .run = [this, w, target = pub->second.target, staging] { return Expand(w, target, staging); },
                    .pod = w.pod,
                    .what = StrCat("MountVolume.NodeExpandVolume failed for volume \"", w.volume.pv, "\"")});
      }
      continue;
    }
    pods_pending.insert(w.pod_uid);
    if (auto ctx = PublishContext(w.volume); !ctx.ok()) {
      waiting.emplace(w.pod_uid, std::string(ctx.status().message()));
      continue;
    }
    if (stages && (st == staged.end() || !st->second.certain)) {
      if (!in_use_reported) continue;
      Dispatch(Op{.lock_key = w.volume.unique,
                  .id = StrCat("stage/", w.volume.unique),
                  .run = [this, w] { return Stage(w); },
                  .pod = w.pod,
                  .what = StrCat("MountVolume.MountDevice failed for volume \"", w.volume.pv, "\"")});
      continue;
    }
    Dispatch(Op{.lock_key = w.volume.unique,
                .id = StrCat("publish/", w.pod_uid, "/", w.volume.pv),
                .run = [this, w, staging] { return Publish(w, staging); },
                .pod = w.pod,
                .what = StrCat("MountVolume.SetUp failed for volume \"", w.volume.pv, "\"")});
  }
  // What the pod workers read: which pods have every volume, and where.
  std::map<std::string, std::string> errors;
  {
    absl::MutexLock lock(&mu_);
    errors = errors_;
    ready_pods_.clear();
    pod_volumes_.clear();
    for (const auto& [uid, pod] : seen.active) {
      if (!pods_pending.count(uid) && !waiting.count(uid)) ready_pods_.insert(uid);
    }
    for (const auto& w : wanted) pod_volumes_[w.pod_uid][w.volume_name] = {w.volume.pv, w.read_only};
  }
  FinishDeletedPods(seen.deleting);
  if (options_.runtime_owns_pod_status) return;
  // Without a runtime, pod status is the volumes': Running once every volume
  // is published.
  for (const auto& [uid, pod] : seen.active) {
    if (!pods_pending.count(uid) && !waiting.count(uid)) {
      UpdatePodStatus(pod, true, "", "");
    } else if (auto e = errors.find(uid); e != errors.end()) {
      UpdatePodStatus(pod, false, "FailedMount", e->second);
    } else {
      auto wt = waiting.find(uid);
      UpdatePodStatus(pod, false, "ContainerCreating",
                      wt == waiting.end() ? "mounting volumes" : StrCat("waiting for volumes: ", wt->second));
    }
  }
}

void VolumeManager::FinishDeletedPods(const std::map<std::string, json>& deleting) {
  for (const auto& [uid, pod] : deleting) {
    if (ContainersMayRun(uid)) continue;
    {
      absl::MutexLock lock(&mu_);
      if (auto n = pod_ops_.find(uid); n != pod_ops_.end() && n->second > 0) continue;
      auto it = published_.lower_bound({uid, ""});
      if (it != published_.end() && it->first.first == uid) continue;  // mounted or uncertain
    }
    apiserver::DeleteOptions opts;
    opts.uid = uid;
    opts.grace_period_seconds = 0;
    auto st = registry_.Delete(K("pods"), Ns(pod), Name(pod), opts);
    if (st.ok()) {
      spdlog::info("node {}: pod {}/{} stopped and its volumes torn down: deleted", options_.node_name, Ns(pod),
                   Name(pod));
    } else if (st.status().code() != absl::StatusCode::kNotFound && st.status().code() != absl::StatusCode::kAborted) {
      spdlog::warn("node {}: deleting pod {}/{}: {}", options_.node_name, Ns(pod), Name(pod), st.status().ToString());
      Wake();
    }
  }
}

void VolumeManager::UpdatePodStatus(const json& pod, bool ready, const std::string& reason,
                                    const std::string& message) {
  const std::string now = client::NowRfc3339();
  auto edit = [&](json& status) {
    if (ready) {
      status["phase"] = "Running";
      if (!status.contains("startTime")) status["startTime"] = now;
    } else if (!status.contains("phase")) {
      status["phase"] = "Pending";
    }
    json& conditions = status["conditions"];
    if (!conditions.is_array()) conditions = json::array();
    for (const char* type : {"PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready"}) {
      const bool on = ready || std::string_view(type) == "Initialized";
      json c = {{"type", type}, {"status", on ? "True" : "False"}, {"lastProbeTime", nullptr}};
      if (!on && std::string_view(type) != "PodReadyToStartContainers") {
        c["reason"] = reason;
        c["message"] = message;
      }
      auto it = std::find_if(conditions.begin(), conditions.end(), [&](const json& x) { return Str(x, {"type"}) == type; });
      if (it != conditions.end()) {
        c["lastTransitionTime"] = Str(*it, {"status"}) == Str(c, {"status"}) ? it->value("lastTransitionTime", now) : now;
        *it = c;
      } else {
        c["lastTransitionTime"] = now;
        conditions.push_back(c);
      }
    }
  };
  // Compare on the cached copy first: most passes change nothing.
  json status = pod.value("status", json::object());
  const json before = status;
  edit(status);
  if (status == before) return;
  absl::Status st = client::EditStatus(registry_, K("pods"), pod, edit);
  if (!st.ok() && st.code() != absl::StatusCode::kAborted) {
    spdlog::warn("pod {}/{} status: {}", Ns(pod), Name(pod), st.ToString());
  }
  if (!st.ok()) Wake();
}

void VolumeManager::Dispatch(Op op) {
  absl::MutexLock lock(&mu_);
  if (locked_.count(op.lock_key)) return;
  // An op on this volume ended after the snapshot this op was decided on
  // (a stage that just finished would otherwise be staged again).
  if (auto d = done_at_.find(op.lock_key); d != done_at_.end() && d->second > snapshot_seq_) return;
  if (auto r = retry_at_.find(op.id); r != retry_at_.end() && r->second > clock_.Now()) return;
  locked_.insert(op.lock_key);
  if (!op.pod.is_null()) ++pod_ops_[Uid(op.pod)];
  queue_.push_back(std::move(op));
}

void VolumeManager::WorkerLoop() {
  for (;;) {
    Op op;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || !queue_.empty(); };
      mu_.Await(absl::Condition(&ready));
      if (stop_) return;
      op = std::move(queue_.front());
      queue_.pop_front();
    }
    absl::Status st = op.run();
    const std::string uid = op.pod.is_null() ? "" : Uid(op.pod);
    if (!st.ok()) {
      spdlog::warn("node {}: {}: {}", options_.node_name, op.what, std::string(st.message()));
      if (!op.pod.is_null()) events_.Record(op.pod, "Warning", "FailedMount", StrCat(op.what, " : ", st.message()));
    }
    const bool waits = client::IsNotAFailure(st);  // for the driver: no backoff
    if (st.ok()) backoff_.Forget(op.id);
    const absl::Time retry_at = st.ok() || waits ? absl::InfinitePast() : clock_.Now() + backoff_.When(op.id);
    absl::MutexLock lock(&mu_);
    locked_.erase(op.lock_key);
    done_at_[op.lock_key] = ++done_seq_;
    dirty_ = true;
    if (!uid.empty() && --pod_ops_[uid] <= 0) pod_ops_.erase(uid);
    if (st.ok()) {
      retry_at_.erase(op.id);
      if (!uid.empty()) errors_.erase(uid);
      continue;
    }
    if (waits) {
      retry_at_.erase(op.id);
    } else {
      retry_at_[op.id] = retry_at;
    }
    if (!uid.empty()) errors_[uid] = StrCat(op.what, " : ", st.message());
  }
}

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
    return absl::UnavailableError(StrCat("waiting for volume ", v.pv, " to be attached",
                                         err.empty() ? "" : StrCat(" (", err, ")")));
  }
  std::map<std::string, std::string> out;
  for (const auto& [k, val] : Field(status, "attachmentMetadata").items()) {
    if (val.is_string()) out[k] = val.get<std::string>();
  }
  return out;
}

absl::StatusOr<std::map<std::string, std::string>> VolumeManager::SecretsOf(const json& pv, const char* ref) {
  const json& r = Field(Field(Field(pv, "spec"), "csi"), ref);
  if (!r.is_object()) return std::map<std::string, std::string>{};
  const std::string ns = Str(r, {"namespace"}), name = Str(r, {"name"});
  auto secret = registry_.Get(K("secrets"), ns, name);
  if (!secret.ok()) {
    return absl::FailedPreconditionError(StrCat("secret ", ns, "/", name, " (", ref, "): ", secret.status().message()));
  }
  return client::DecodedSecretData(*secret);
}

std::map<std::string, std::string> VolumeManager::VolumeContext(const Wanted& w) {
  std::map<std::string, std::string> out;
  for (const auto& [k, v] : Field(Field(Field(w.pv, "spec"), "csi"), "volumeAttributes").items()) {
    if (v.is_string()) out[k] = v.get<std::string>();
  }
  auto driver_obj = informers_.at("csidrivers")->Get("", w.volume.driver);
  if (driver_obj && Field(Field(*driver_obj, "spec"), "podInfoOnMount") == true) {
    out["csi.storage.k8s.io/pod.name"] = Name(w.pod);
    out["csi.storage.k8s.io/pod.namespace"] = Ns(w.pod);
    out["csi.storage.k8s.io/pod.uid"] = w.pod_uid;
    const std::string sa = Str(w.pod, {"spec", "serviceAccountName"});
    out["csi.storage.k8s.io/serviceAccount.name"] = sa.empty() ? "default" : sa;
    out["csi.storage.k8s.io/ephemeral"] = "false";
  }
  return out;
}

// ---- the operations ----

absl::Status VolumeManager::Stage(const Wanted& w) {
  const Volume& v = w.volume;
  const std::string path = StagingPath(v.driver, v.handle, v.pv, v.block);
  BERTH_RETURN_IF_ERROR(CheckInsideRoot(path));
  BERTH_ASSIGN_OR_RETURN(auto publish_context, PublishContext(v));
  BERTH_ASSIGN_OR_RETURN(auto secrets, SecretsOf(w.pv, "nodeStageSecretRef"));
  const std::string record = StagedRecord(options_.root, path, v.pv, v.block);
  BERTH_RETURN_IF_ERROR(MakeDirs(Parent(record), 0750));
  // The CO creates the staging directory itself (kubelet's MkdirAll; the
  // spec: "the CO SHALL ensure that the path exists").
  BERTH_RETURN_IF_ERROR(MakeDirs(path, 0750));
  // The record goes first: a crash during the call leaves something the
  // next start can clean up.
  json data = {{"driverName", v.driver}, {"volumeHandle", v.handle}, {"specVolID", v.pv},
               {"volumeMode", v.block ? "Block" : "Filesystem"}, {"stagingPath", path},
               {"nodeName", options_.node_name}};
  BERTH_RETURN_IF_ERROR(WriteFileAtomic(record, data.dump(), 0600));
  ::csi::v1::NodeStageVolumeRequest req;
  req.set_volume_id(v.handle);
  req.set_staging_target_path(path);
  *req.mutable_volume_capability() = client::PvVolumeCapability(w.pv);
  SetMap(req.mutable_publish_context(), publish_context);
  SetMap(req.mutable_secrets(), secrets);
  SetMap(req.mutable_volume_context(), VolumeContext(w));
  absl::Status call = CallNode(directory_, v.driver, options_.node_name, options_.call_timeout, "NodeStageVolume",
                                &::csi::v1::Node::Stub::NodeStageVolume, req);
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
  // NOT_FOUND: the driver no longer has the volume, so nothing is staged.
  if (absl::Status st = CallNode(directory_, v.driver, options_.node_name, options_.call_timeout, "NodeUnstageVolume",
                                 &::csi::v1::Node::Stub::NodeUnstageVolume, req);
      !st.ok() && st.code() != absl::StatusCode::kNotFound) {
    return st;
  }
  const std::string record = StagedRecord(options_.root, s.path, v.pv, v.block);
  RemoveIfEmpty(s.path);
  absl::Status removed = RemoveFileDurably(record);
  if (!removed.ok() && removed.code() != absl::StatusCode::kNotFound) return removed;
  RemoveIfEmpty(Parent(record));
  spdlog::info("node {}: unstaged {} from {}", options_.node_name, v.pv, s.path);
  absl::MutexLock lock(&mu_);
  staged_.erase(v.unique);
  return absl::OkStatus();
}

absl::Status VolumeManager::Publish(const Wanted& w, const std::string& staging) {
  const Volume& v = w.volume;
  const std::string target = TargetPath(w.pod_uid, v.pv, v.block);
  BERTH_RETURN_IF_ERROR(CheckInsideRoot(target));
  BERTH_ASSIGN_OR_RETURN(auto publish_context, PublishContext(v));
  BERTH_ASSIGN_OR_RETURN(auto secrets, SecretsOf(w.pv, "nodePublishSecretRef"));
  const std::string record = PublishedRecord(target, v.block);
  BERTH_RETURN_IF_ERROR(MakeDirs(Parent(target), 0750));
  json data = {{"driverName", v.driver}, {"volumeHandle", v.handle}, {"specVolID", v.pv},
               {"volumeMode", v.block ? "Block" : "Filesystem"}, {"targetPath", target},
               {"stagingPath", staging}, {"podUID", w.pod_uid}, {"nodeName", options_.node_name}};
  BERTH_RETURN_IF_ERROR(WriteFileAtomic(record, data.dump(), 0600));
  ::csi::v1::NodePublishVolumeRequest req;
  req.set_volume_id(v.handle);
  req.set_staging_target_path(staging);
  req.set_target_path(target);
  req.set_readonly(w.read_only);
  *req.mutable_volume_capability() = client::PvVolumeCapability(w.pv);
  SetMap(req.mutable_publish_context(), publish_context);
  SetMap(req.mutable_secrets(), secrets);
  SetMap(req.mutable_volume_context(), VolumeContext(w));
  absl::Status call = CallNode(directory_, v.driver, options_.node_name, options_.call_timeout, "NodePublishVolume",
                                &::csi::v1::Node::Stub::NodePublishVolume, req);
  if (call.ok()) {
    spdlog::info("node {}: published {} for pod {}/{} at {}", options_.node_name, v.pv, Ns(w.pod), Name(w.pod), target);
  } else if (csi::IsFinalError(call)) {
    absl::Status removed = RemoveFileDurably(record);
    if (!removed.ok() && removed.code() != absl::StatusCode::kNotFound) return removed;
  } else {
    spdlog::warn("node {}: publishing {} for pod {}/{} may or may not have happened ({}): the volume is uncertain",
                 options_.node_name, v.pv, Ns(w.pod), Name(w.pod), std::string(call.message()));
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
  // NOT_FOUND: the driver no longer has the volume; the mount check below
  // still makes sure nothing is left mounted at the target.
  if (absl::Status st = CallNode(directory_, v.driver, options_.node_name, options_.call_timeout, "NodeUnpublishVolume",
                                 &::csi::v1::Node::Stub::NodeUnpublishVolume, req);
      !st.ok() && st.code() != absl::StatusCode::kNotFound) {
    return st;
  }
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
  RemoveIfEmpty(dir);          // .../kubernetes.io~csi
  RemoveIfEmpty(Parent(dir));  // .../volumes or volumeDevices
  RemoveIfEmpty(Parent(Parent(dir)));  // <root>/pods/<uid>
  spdlog::info("node {}: unpublished {} from {}", options_.node_name, v.pv, p.target);
  absl::MutexLock lock(&mu_);
  published_.erase({p.pod_uid, v.pv});
  return absl::OkStatus();
}

absl::Status VolumeManager::Expand(const Wanted& w, const std::string& target, const std::string& staging) {
  const Volume& v = w.volume;
  const json& capacity = Field(Field(Field(w.pv, "spec"), "capacity"), "storage");
  const int64_t size = Bytes(capacity);
  auto driver = plugins_.Get(v.driver);
  if (!driver) return DriverNotRegistered(v.driver);
  if (driver->Has(NodeCap::EXPAND_VOLUME)) {
    BERTH_ASSIGN_OR_RETURN(auto secrets, SecretsOf(w.pv, "nodeExpandSecretRef"));
    ::csi::v1::NodeExpandVolumeRequest req;
    req.set_volume_id(v.handle);
    req.set_volume_path(target);
    req.set_staging_target_path(staging);
    req.mutable_capacity_range()->set_required_bytes(size);
    *req.mutable_volume_capability() = client::PvVolumeCapability(w.pv);
    SetMap(req.mutable_secrets(), secrets);
    BERTH_RETURN_IF_ERROR(CallNode(directory_, v.driver, options_.node_name, options_.call_timeout, "NodeExpandVolume",
                                 &::csi::v1::Node::Stub::NodeExpandVolume, req));
  }
  // The node's part is done: the claim shows the new size.
  BERTH_RETURN_IF_ERROR(client::EditStatus(registry_, K("persistentvolumeclaims"), w.claim, [&](json& status) {
    status["capacity"]["storage"] = capacity;
    if (json& conditions = status["conditions"]; conditions.is_array()) {
      conditions.erase(std::remove_if(conditions.begin(), conditions.end(),
                                      [](const json& c) {
                                        const std::string t = Str(c, {"type"});
                                        return t == "FileSystemResizePending" || t == "Resizing";
                                      }),
                       conditions.end());
      if (conditions.empty()) status.erase("conditions");
    } else {
      status.erase("conditions");
    }
    if (json& allocated = status["allocatedResourceStatuses"]; allocated.is_object()) {
      allocated.erase("storage");
      if (allocated.empty()) status.erase("allocatedResourceStatuses");
    } else {
      status.erase("allocatedResourceStatuses");
    }
  }));
  spdlog::info("node {}: expanded {} to {}", options_.node_name, v.pv, capacity.dump());
  return absl::OkStatus();
}

}  // namespace berth::node
