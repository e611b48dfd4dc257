#include "node/status/node_status.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "absl/strings/str_join.h"
#include "api/quantity.h"
#include "berth/version.h"
#include "client/object.h"
#include "client/writes.h"
#include "common/status.h"
#include "common/thread_name.h"
#include "node/plugins/csi_plugins.h"
#include "spdlog/spdlog.h"

namespace berth::node {
namespace {

using nlohmann::json;

const api::KindInfo& Nodes() { return client::K("nodes"); }
const api::KindInfo& Leases() { return client::K("leases", "coordination.k8s.io"); }

// kubelet's Ready condition (pkg/kubelet/nodestatus ReadyCondition).
constexpr char kReadyReason[] = "KubeletReady";
constexpr char kReadyMessage[] = "kubelet is posting ready status";
constexpr char kNotReadyReason[] = "KubeletNotReady";

// metav1.MicroTime: RFC 3339 with microseconds.
std::string MicroTime(absl::Time t) { return absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", t, absl::UTCTimeZone()); }

// `status` without the heartbeat times: what decides whether kubelet writes.
json WithoutHeartbeats(json status) {
  if (status.is_object() && status.contains("conditions") && status["conditions"].is_array()) {
    for (auto& c : status["conditions"]) {
      if (c.is_object()) c.erase("lastHeartbeatTime");
    }
  }
  return status;
}

}  // namespace

NodeStatus::NodeStatus(apiserver::Api& registry, Options options)
    : registry_(registry),
      options_(std::move(options)),
      clock_(options_.clock != nullptr ? *options_.clock : RealClock()),
      events_(registry, "kubelet") {}

NodeStatus::~NodeStatus() { Stop(); }

absl::Status NodeStatus::Start() {
  const std::string& name = options_.node_name;
  std::map<std::string, std::string> labels = options_.labels;
  labels.emplace("kubernetes.io/hostname", name);
  labels.emplace("kubernetes.io/os", "linux");
  json node = {{"apiVersion", "v1"},
               {"kind", "Node"},
               {"metadata", {{"name", name}, {"labels", labels}}},
               {"spec", json::object()}};
  auto created = registry_.Create(Nodes(), "", node);
  if (!created.ok() && created.status().code() != absl::StatusCode::kAlreadyExists) return created.status();
  if (!created.ok()) {
    BERTH_RETURN_IF_ERROR(UpdateObject(registry_, Nodes(), "", name, apiserver::Subresource::kMain, [&](json& n) {
      bool changed = false;
      for (const auto& [k, v] : labels) {
        if (client::Str(n, {"metadata", "labels", k}) != v) {
          n["metadata"]["labels"][k] = v;
          changed = true;
        }
      }
      return changed;
    }));
  }
  BERTH_RETURN_IF_ERROR(SyncStatus());
  if (absl::Status st = RenewLease(); !st.ok()) {
    spdlog::warn("node {}: lease: {} (retrying)", name, st.ToString());
  }
  {
    absl::MutexLock lock(&mu_);
    stop_ = false;
  }
  lease_thread_ = NamedThread("node lease", [this] { LeaseLoop(); });
  status_thread_ = NamedThread("node status", [this] { StatusLoop(); });
  return absl::OkStatus();
}

void NodeStatus::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (lease_thread_.joinable()) lease_thread_.join();
  if (status_thread_.joinable()) status_thread_.join();
}

void NodeStatus::LeaseLoop() {
  // kubelet's lease controller: renew every interval; after a failure retry
  // sooner, 200 ms doubling to 7 s (never later than the next renewal).
  absl::Duration backoff = absl::ZeroDuration();
  for (;;) {
    const absl::Duration wait = backoff > absl::ZeroDuration() ? std::min(backoff, options_.lease_renew_interval)
                                                               : options_.lease_renew_interval;
    {
      absl::MutexLock lock(&mu_);
      if (clock_.AwaitWithTimeout(mu_, absl::Condition(&stop_), wait)) return;
    }
    if (Paused()) continue;
    if (absl::Status st = RenewLease(); !st.ok()) {
      backoff = backoff == absl::ZeroDuration() ? absl::Milliseconds(200) : std::min(backoff * 2, absl::Seconds(7));
      spdlog::warn("node {}: renewing lease: {} (retry in {})", options_.node_name, st.ToString(),
                   absl::FormatDuration(backoff));
    } else {
      backoff = absl::ZeroDuration();
    }
  }
}

void NodeStatus::StatusLoop() {
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (clock_.AwaitWithTimeout(mu_, absl::Condition(&stop_), options_.status_update_frequency)) return;
    }
    if (Paused()) continue;
    if (absl::Status st = SyncStatus(); !st.ok()) {
      spdlog::warn("node {}: posting status: {}", options_.node_name, st.ToString());
    }
  }
}

absl::Status NodeStatus::RenewLease() {
  const std::string& name = options_.node_name;
  // The owner reference needs the Node's uid (kubelet's SetNodeOwnerFunc:
  // set once the Node is readable, and again if it was lost).
  std::string node_uid;
  if (auto node = registry_.GetShared(Nodes(), "", name); node.ok()) node_uid = client::Uid(**node);
  auto renew = [&](json& lease) {
    lease["spec"]["holderIdentity"] = name;
    lease["spec"]["leaseDurationSeconds"] = options_.lease_duration_seconds;
    lease["spec"]["renewTime"] = MicroTime(clock_.Now());
    json& refs = lease["metadata"]["ownerReferences"];
    if (!node_uid.empty() && (!refs.is_array() || refs.empty())) {
      refs = json::array({{{"apiVersion", "v1"}, {"kind", "Node"}, {"name", name}, {"uid", node_uid}}});
    }
    return true;
  };
  absl::Status st = UpdateObject(registry_, Leases(), kNodeLeaseNamespace, name, apiserver::Subresource::kMain, renew);
  if (st.code() != absl::StatusCode::kNotFound) return st;
  json lease = {{"apiVersion", "coordination.k8s.io/v1"},
                {"kind", "Lease"},
                {"metadata", {{"name", name}, {"namespace", kNodeLeaseNamespace}}},
                {"spec", json::object()}};
  renew(lease);
  auto created = registry_.Create(Leases(), kNodeLeaseNamespace, lease);
  // Created meanwhile by an earlier attempt: renewed at the next tick.
  if (!created.ok() && created.status().code() != absl::StatusCode::kAlreadyExists) return created.status();
  return absl::OkStatus();
}

json NodeStatus::Capacity() const {
  json capacity = json::object();
  const unsigned cpus = std::max(1u, std::thread::hardware_concurrency());
  capacity["cpu"] = api::Quantity::FromBytes(cpus, /*binary=*/false).ToString();
  const long pages = ::sysconf(_SC_PHYS_PAGES), page_size = ::sysconf(_SC_PAGESIZE);
  if (pages > 0 && page_size > 0) {
    capacity["memory"] = api::Quantity::FromBytes(int64_t{pages} * page_size / 1024 * 1024).ToString();
  }
  struct statvfs fs {};
  if (!options_.kubelet_root.empty() && ::statvfs(options_.kubelet_root.c_str(), &fs) == 0) {
    capacity["ephemeral-storage"] =
        api::Quantity::FromBytes(static_cast<int64_t>(fs.f_blocks) * static_cast<int64_t>(fs.f_frsize) / 1024 * 1024)
            .ToString();
  }
  capacity["pods"] = "110";  // kubelet's default --max-pods
  return capacity;
}

bool NodeStatus::ComputeStatus(json& node, absl::Time now) const {
  json& status = node["status"];
  if (!status.is_object()) status = json::object();
  const json before = WithoutHeartbeats(status);
  const std::string now_text = client::Rfc3339(now);

  std::vector<std::string> errors;
  if (options_.readiness_errors) errors = options_.readiness_errors();
  json ready = {{"type", "Ready"},
                {"status", errors.empty() ? "True" : "False"},
                {"reason", errors.empty() ? kReadyReason : kNotReadyReason},
                {"message", errors.empty() ? std::string(kReadyMessage) : absl::StrJoin(errors, ", ")},
                {"lastHeartbeatTime", now_text},
                {"lastTransitionTime", now_text}};
  json& conditions = status["conditions"];
  if (!conditions.is_array()) conditions = json::array();
  auto it = std::find_if(conditions.begin(), conditions.end(),
                         [](const json& c) { return client::Str(c, {"type"}) == "Ready"; });
  if (it == conditions.end()) {
    conditions.push_back(ready);
  } else {
    if (client::Str(*it, {"status"}) == client::Str(ready, {"status"})) {
      ready["lastTransitionTime"] = it->value("lastTransitionTime", now_text);
    }
    *it = ready;
  }
  const json capacity = Capacity();
  status["capacity"] = capacity;
  status["allocatable"] = capacity;  // berth reserves nothing for the system
  status["nodeInfo"] = {{"kubeletVersion", std::string("berth-") + std::string(kVersion)},
                        {"operatingSystem", "linux"},
                        {"architecture", "amd64"}};
  status["addresses"] = json::array({{{"type", "Hostname"}, {"address", options_.node_name}}});
  return WithoutHeartbeats(status) != before;
}

absl::Status NodeStatus::SyncStatus() {
  const absl::Time now = clock_.Now();
  bool report_due;
  {
    absl::MutexLock lock(&mu_);
    report_due = now - last_report_ >= options_.status_report_frequency;
  }
  auto ready_status = [](const json& node) {
    for (const auto& c : client::Field(client::Field(node, "status"), "conditions")) {
      if (client::Str(c, {"type"}) == "Ready") return client::Str(c, {"status"});
    }
    return std::string();
  };
  std::string was, is;  // Ready before and after, for kubelet's events
  json written;
  bool wrote = false;
  BERTH_RETURN_IF_ERROR(
      UpdateObject(registry_, Nodes(), "", options_.node_name, apiserver::Subresource::kStatus, [&](json& node) {
        was = ready_status(node);
        const bool changed = ComputeStatus(node, now);
        is = ready_status(node);
        written = node;
        wrote = changed || report_due;
        return wrote;
      }));
  if (!wrote) return absl::OkStatus();
  {
    absl::MutexLock lock(&mu_);
    last_report_ = now;
  }
  if (!was.empty() && was != is) {
    const std::string event = is == "True" ? "NodeReady" : "NodeNotReady";
    events_.Record(written, "Normal", event, "Node " + options_.node_name + " status is now: " + event);
  }
  return absl::OkStatus();
}

absl::Status NodeStatus::SetVolumesInUse(std::vector<std::string> volumes) {
  std::sort(volumes.begin(), volumes.end());
  volumes.erase(std::unique(volumes.begin(), volumes.end()), volumes.end());
  absl::MutexLock lock(&mu_);
  if (in_use_ && *in_use_ == volumes) return absl::OkStatus();
  BERTH_RETURN_IF_ERROR(
      UpdateObject(registry_, Nodes(), "", options_.node_name, apiserver::Subresource::kStatus, [&](json& n) {
        json list = json(volumes);
        json& status = n["status"];
        if (volumes.empty()) {
          if (!status.is_object() || !status.contains("volumesInUse")) return false;
          status.erase("volumesInUse");
          return true;
        }
        if (status.is_object() && status.value("volumesInUse", json()) == list) {
          return false;
        }
        status["volumesInUse"] = list;
        return true;
      }));
  in_use_ = volumes;
  return absl::OkStatus();
}

}  // namespace berth::node
