#include "node/node_status.h"

#include <algorithm>

#include "berth/version.h"
#include "common/status.h"
#include "client/object.h"
#include "client/writes.h"
#include "node/csi_plugins.h"
#include "spdlog/spdlog.h"

namespace berth::node {
namespace {

using nlohmann::json;

const api::KindInfo& Nodes() { return *api::FindResource("", "nodes"); }

// Sets the Ready condition to True, keeping lastTransitionTime when it was
// True already; false when nothing but the heartbeat would change and the
// last heartbeat is recent.
void MarkReady(json& status, const std::string& now) {
  json& conditions = status["conditions"];
  if (!conditions.is_array()) conditions = json::array();
  json ready = {{"type", "Ready"},
                {"status", "True"},
                {"reason", "KubeletReady"},
                {"message", "berth node agent is posting ready status"},
                {"lastHeartbeatTime", now},
                {"lastTransitionTime", now}};
  for (auto& c : conditions) {
    if (client::Str(c, {"type"}) != "Ready") continue;
    if (client::Str(c, {"status"}) == "True") ready["lastTransitionTime"] = c.value("lastTransitionTime", now);
    c = ready;
    return;
  }
  conditions.push_back(ready);
}

}  // namespace

NodeStatus::NodeStatus(apiserver::Registry& registry, std::string node_name, std::map<std::string, std::string> labels,
                       absl::Duration heartbeat)
    : registry_(registry), node_name_(std::move(node_name)), labels_(std::move(labels)), heartbeat_(heartbeat) {}

NodeStatus::~NodeStatus() { Stop(); }

absl::Status NodeStatus::Start() {
  std::map<std::string, std::string> labels = labels_;
  labels.emplace("kubernetes.io/hostname", node_name_);
  labels.emplace("kubernetes.io/os", "linux");
  json node = {{"apiVersion", "v1"},
               {"kind", "Node"},
               {"metadata", {{"name", node_name_}, {"labels", labels}}},
               {"spec", json::object()}};
  auto created = registry_.Create(Nodes(), "", node);
  if (!created.ok() && created.status().code() != absl::StatusCode::kAlreadyExists) return created.status();
  if (!created.ok()) {
    BERTH_RETURN_IF_ERROR(UpdateObject(registry_, Nodes(), "", node_name_, apiserver::Subresource::kMain, [&](json& n) {
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
  BERTH_RETURN_IF_ERROR(Heartbeat());
  {
    absl::MutexLock lock(&mu_);
    stop_ = false;
  }
  thread_ = std::thread([this] {
    for (;;) {
      {
        absl::MutexLock lock(&mu_);
        auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_; };
        if (mu_.AwaitWithTimeout(absl::Condition(&stopping), heartbeat_)) return;
      }
      if (absl::Status st = Heartbeat(); !st.ok()) spdlog::warn("node {} heartbeat: {}", node_name_, st.ToString());
    }
  });
  return absl::OkStatus();
}

void NodeStatus::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

absl::Status NodeStatus::Heartbeat() {
  const std::string now = client::NowRfc3339();
  return UpdateObject(registry_, Nodes(), "", node_name_, apiserver::Subresource::kStatus, [&](json& n) {
    json& status = n["status"];
    if (!status.is_object()) status = json::object();
    MarkReady(status, now);
    status["nodeInfo"] = {{"kubeletVersion", std::string("berth-") + std::string(kVersion)},
                          {"operatingSystem", "linux"},
                          {"architecture", "amd64"}};
    status["addresses"] = json::array({{{"type", "Hostname"}, {"address", node_name_}}});
    return true;
  });
}

absl::Status NodeStatus::SetVolumesInUse(std::vector<std::string> volumes) {
  std::sort(volumes.begin(), volumes.end());
  volumes.erase(std::unique(volumes.begin(), volumes.end()), volumes.end());
  absl::MutexLock lock(&mu_);
  if (in_use_ && *in_use_ == volumes) return absl::OkStatus();
  BERTH_RETURN_IF_ERROR(UpdateObject(registry_, Nodes(), "", node_name_, apiserver::Subresource::kStatus, [&](json& n) {
    json list = json(volumes);
    json& status = n["status"];
    if (volumes.empty()) {
      if (!status.is_object() || !status.contains("volumesInUse")) return false;
      status.erase("volumesInUse");
      return true;
    }
    if (status.is_object() && status.value("volumesInUse", json()) == list) return false;
    status["volumesInUse"] = list;
    return true;
  }));
  in_use_ = volumes;
  return absl::OkStatus();
}

}  // namespace berth::node
