#include "node/plugins/csi_plugins.h"

#include <algorithm>

#include "client/object.h"
#include "common/status.h"
#include "common/strings.h"
#include "csi/client.h"
#include "csi/driver_client.h"
#include "csi/registration.h"
#include "spdlog/spdlog.h"

namespace berth::node {
namespace {

using client::Field;
using client::Str;
using nlohmann::json;

using client::K;

}  // namespace

absl::Status UpdateObject(apiserver::Api& registry, const api::KindInfo& kind, const std::string& ns,
                          const std::string& name, apiserver::Subresource sub,
                          const std::function<bool(json&)>& mutate) {
  absl::Status last;
  for (int attempt = 0; attempt < 8; ++attempt) {
    BERTH_ASSIGN_OR_RETURN(json obj, registry.Get(kind, ns, name));
    if (!mutate(obj)) return absl::OkStatus();
    auto updated = registry.Update(kind, ns, name, std::move(obj), sub);
    if (updated.ok()) return absl::OkStatus();
    last = updated.status();
    if (last.code() != absl::StatusCode::kAborted) return last;  // not a conflict
  }
  return last;
}

CsiPlugins::CsiPlugins(apiserver::Api& registry, std::string node_name, client::DriverDirectory& directory,
                       absl::Duration call_timeout)
    : registry_(registry), node_name_(std::move(node_name)), directory_(directory), call_timeout_(call_timeout) {}

absl::Status CsiPlugins::RegisterPlugin(const std::string& name, const std::string& endpoint,
                                        const std::vector<std::string>& versions) {
  BERTH_RETURN_IF_ERROR(csi::CheckDriverName(name));
  BERTH_RETURN_IF_ERROR(CheckCsiVersions(versions));
  csi::ConnectOptions connect;
  connect.timeout = absl::Seconds(5);
  BERTH_ASSIGN_OR_RETURN(auto channel, csi::ConnectUnix(endpoint, connect));
  const csi::DriverClient driver(channel, {.driver = name, .metrics = &csi::CallMetrics::Kubelet()});
  auto info = driver.NodeGetInfo({.timeout = call_timeout_});
  if (!info.ok()) {
    Uninstall(name).IgnoreError();
    return absl::UnavailableError(StrCat("NodeGetInfo of ", name, ": ", info.status().message()));
  }
  if (info->node_id().empty()) {
    Uninstall(name).IgnoreError();
    return absl::InvalidArgumentError(StrCat(name, " reported an empty node ID"));
  }
  auto caps = driver.NodeGetCapabilities({.timeout = call_timeout_});
  if (!caps.ok()) {
    return absl::UnavailableError(StrCat("NodeGetCapabilities of ", name, ": ", caps.status().message()));
  }
  if (absl::Status st = Install(name, *info); !st.ok()) {
    Uninstall(name).IgnoreError();
    return st;
  }
  Driver d{.endpoint = endpoint, .node_id = info->node_id(), .capabilities = {}};
  for (const auto& c : caps->capabilities()) d.capabilities.insert(c.rpc().type());
  directory_.Add(name, node_name_, endpoint);
  {
    absl::MutexLock lock(&mu_);
    drivers_[name] = std::move(d);
  }
  Changed();
  return absl::OkStatus();
}

void CsiPlugins::DeregisterPlugin(const std::string& name) {
  {
    absl::MutexLock lock(&mu_);
    drivers_.erase(name);
  }
  directory_.Remove(name, node_name_);
  if (absl::Status st = Uninstall(name); !st.ok()) {
    spdlog::warn("removing {} from node {}: {}", name, node_name_, st.ToString());
  }
  Changed();
}

std::optional<CsiPlugins::Driver> CsiPlugins::Get(const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto it = drivers_.find(name);
  if (it == drivers_.end()) return std::nullopt;
  return it->second;
}

void CsiPlugins::SetOnChange(std::function<void()> fn) {
  absl::MutexLock lock(&mu_);
  on_change_ = std::move(fn);
}

void CsiPlugins::Changed() {
  std::function<void()> fn;
  {
    absl::MutexLock lock(&mu_);
    fn = on_change_;
  }
  if (fn) fn();
}

absl::Status CsiPlugins::Install(const std::string& name, const ::csi::v1::NodeGetInfoResponse& info) {
  const auto& segments = info.accessible_topology().segments();
  // The Node: annotation and topology labels.
  std::string node_uid;
  absl::Status collision;
  BERTH_RETURN_IF_ERROR(
      UpdateObject(registry_, K("nodes"), "", node_name_, apiserver::Subresource::kMain, [&](json& node) {
        node_uid = client::Uid(node);
        bool changed = false;
        json& meta = node["metadata"];
        json& labels = meta["labels"];
        if (!labels.is_object()) labels = json::object();
        for (const auto& [key, value] : segments) {
          const std::string current = Str(labels, {key});
          if (labels.contains(key) && current != value) {
            collision = absl::FailedPreconditionError(StrCat("topology label ", key, "=", value, " of driver ", name,
                                                             " collides with the node's ", key, "=", current));
            return false;
          }
          if (!labels.contains(key)) {
            labels[key] = value;
            changed = true;
          }
        }
        json ids = json::object();
        const std::string text = client::Annotation(node, kAnnNodeId);
        if (!text.empty()) ids = json::parse(text, nullptr, false);
        if (!ids.is_object()) ids = json::object();
        if (Str(ids, {name}) != info.node_id()) {
          ids[name] = info.node_id();
          meta["annotations"][kAnnNodeId] = ids.dump();
          changed = true;
        }
        return changed;
      }));
  BERTH_RETURN_IF_ERROR(collision);
  // The CSINode entry.
  std::vector<std::string> keys;
  for (const auto& [key, value] : segments) keys.push_back(key);
  std::sort(keys.begin(), keys.end());
  json entry = {{"name", name}, {"nodeID", info.node_id()}, {"topologyKeys", keys}};
  if (info.max_volumes_per_node() > 0) entry["allocatable"] = {{"count", info.max_volumes_per_node()}};
  auto apply = [&](json& csinode) {
    json& drivers = csinode["spec"]["drivers"];
    if (!drivers.is_array()) drivers = json::array();
    for (auto& d : drivers) {
      if (Str(d, {"name"}) == name) {
        if (d == entry) return false;
        d = entry;
        return true;
      }
    }
    drivers.push_back(entry);
    return true;
  };
  absl::Status st =
      UpdateObject(registry_, K("csinodes", "storage.k8s.io"), "", node_name_, apiserver::Subresource::kMain, apply);
  if (st.code() != absl::StatusCode::kNotFound) return st;
  json csinode = {
      {"apiVersion", "storage.k8s.io/v1"},
      {"kind", "CSINode"},
      {"metadata",
       {{"name", node_name_},
        {"ownerReferences",
         json::array({{{"apiVersion", "v1"}, {"kind", "Node"}, {"name", node_name_}, {"uid", node_uid}}})}}},
      {"spec", {{"drivers", json::array()}}}};
  apply(csinode);
  auto created = registry_.Create(K("csinodes", "storage.k8s.io"), "", csinode);
  if (created.ok()) return absl::OkStatus();
  if (created.status().code() != absl::StatusCode::kAlreadyExists) return created.status();
  return UpdateObject(registry_, K("csinodes", "storage.k8s.io"), "", node_name_, apiserver::Subresource::kMain, apply);
}

absl::Status CsiPlugins::Uninstall(const std::string& name) {
  absl::Status st = UpdateObject(registry_, K("nodes"), "", node_name_, apiserver::Subresource::kMain, [&](json& node) {
    const std::string text = client::Annotation(node, kAnnNodeId);
    if (text.empty()) return false;
    json ids = json::parse(text, nullptr, false);
    if (!ids.is_object() || !ids.contains(name)) return false;
    ids.erase(name);
    json& annotations = node["metadata"]["annotations"];
    if (ids.empty()) {
      annotations.erase(kAnnNodeId);
    } else {
      annotations[kAnnNodeId] = ids.dump();
    }
    return true;
  });
  if (!st.ok() && st.code() != absl::StatusCode::kNotFound) return st;
  st = UpdateObject(
      registry_, K("csinodes", "storage.k8s.io"), "", node_name_, apiserver::Subresource::kMain, [&](json& csinode) {
        json& drivers = csinode["spec"]["drivers"];
        if (!drivers.is_array()) return false;
        const size_t before = drivers.size();
        drivers.erase(
            std::remove_if(drivers.begin(), drivers.end(), [&](const json& d) { return Str(d, {"name"}) == name; }),
            drivers.end());
        return drivers.size() != before;
      });
  if (!st.ok() && st.code() != absl::StatusCode::kNotFound) return st;
  return absl::OkStatus();
}

}  // namespace berth::node
