#include "controllers/nodelifecycle/node_lifecycle.h"

#include <algorithm>
#include <utility>

#include "api/types/coordination.h"
#include "api/types/core_node.h"
#include "api/types/core_pod.h"
#include "client/object.h"
#include "client/typed.h"
#include "client/writes.h"
#include "common/status.h"
#include "common/strings.h"
#include "common/thread_name.h"
#include "controllers/taints.h"
#include "spdlog/spdlog.h"

namespace berth::controllers {
namespace {

using client::K;
using client::Name;
using client::Str;
using nlohmann::json;
namespace types = ::berth::api::types;

// Conditions the controller turns Unknown when the node goes silent (not
// NetworkUnavailable: the network plugin owns it). Only Ready is added when
// missing: berth's agents report no pressure conditions, and ones added
// here would stay Unknown after the node came back.
constexpr const char* kSilencedConditions[] = {"Ready", "MemoryPressure", "DiskPressure", "PIDPressure"};

// TaintNodesByCondition: (condition, status) → NoSchedule taint key.
struct ConditionTaint {
  const char* condition;
  const char* status;
  const char* key;
};
constexpr ConditionTaint kConditionTaints[] = {
    {"Ready", "False", kTaintNodeNotReady},
    {"Ready", "Unknown", kTaintNodeUnreachable},
    {"MemoryPressure", "True", "node.kubernetes.io/memory-pressure"},
    {"DiskPressure", "True", "node.kubernetes.io/disk-pressure"},
    {"NetworkUnavailable", "True", "node.kubernetes.io/network-unavailable"},
    {"PIDPressure", "True", "node.kubernetes.io/pid-pressure"},
};

// nodetopology.GetZoneKey on the stable labels: "" when neither is set.
std::string ZoneKey(const types::Node& node) {
  auto label = [&](const char* key) {
    auto it = node.metadata.labels.find(key);
    return it == node.metadata.labels.end() ? std::string() : it->second;
  };
  const std::string region = label("topology.kubernetes.io/region"), zone = label("topology.kubernetes.io/zone");
  if (region.empty() && zone.empty()) return "";
  return region + std::string(":\0:", 3) + zone;
}

types::Taint NodeTaint(const std::string& key, const std::string& effect, const std::string& now) {
  types::Taint t;
  t.key = key;
  t.effect = effect;
  if (!now.empty()) t.time_added = now;
  return t;
}

bool SameTaint(const types::Taint& a, const types::Taint& b) { return a.key == b.key && a.effect == b.effect; }

bool HasNodeTaint(const types::Node& node, const std::string& key, const std::string& effect) {
  return std::any_of(node.spec.taints.begin(), node.spec.taints.end(),
                     [&](const types::Taint& t) { return t.key == key && t.effect == effect; });
}

// A lease's renewTime (none when absent, unparsable or not a Lease).
std::optional<absl::Time> LeaseRenewTime(const json& lease) {
  absl::StatusOr<types::Lease> typed = client::DecodeAs<types::Lease>(lease);
  if (!typed.ok() || !typed->spec.renew_time) return std::nullopt;
  return client::ParseRfc3339(*typed->spec.renew_time);
}

}  // namespace

void IndexPodsByNode(client::Informer& pods) {
  pods.AddIndex(kPodsByNode, [](const json& pod) {
    const std::string node = Str(pod, {"spec", "nodeName"});
    return node.empty() ? std::vector<std::string>{} : std::vector<std::string>{node};
  });
}

NodeLifecycleController::NodeLifecycleController(apiserver::Registry& registry, NodeLifecycleInformers informers,
                                                 Options options)
    : registry_(registry),
      informers_(informers),
      options_(options),
      clock_(options_.clock != nullptr ? *options_.clock : RealClock()),
      events_(registry, "node-controller") {}

NodeLifecycleController::~NodeLifecycleController() { Stop(); }

void NodeLifecycleController::RegisterHandlers() {
  IndexPodsByNode(informers_.pods);
  informers_.nodes.AddHandlers({
      .on_add = [this](const json& n) { node_queue_.Add(Name(n)); },
      .on_update = [this](const json&, const json& n) { node_queue_.Add(Name(n)); },
      .on_delete = nullptr,
  });
  informers_.pods.AddHandlers({
      .on_add =
          [this](const json& p) {
            if (!Str(p, {"spec", "nodeName"}).empty()) pod_queue_.Add(client::ObjectKey(p));
          },
      .on_update =
          [this](const json& before, const json& after) {
            const std::string node = Str(after, {"spec", "nodeName"});
            if (!node.empty() && node != Str(before, {"spec", "nodeName"})) pod_queue_.Add(client::ObjectKey(after));
          },
      .on_delete = nullptr,
  });
}

void NodeLifecycleController::Start() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = false;
  }
  threads_.emplace_back(NamedThread("node monitor", [this] { MonitorLoop(); }));
  client::StartWorkers(threads_, 1, node_queue_, "node lifecycle: taints",
                       [this](const std::string& n) { return SyncNoScheduleTaints(n); });
  client::StartWorkers(threads_, 1, pod_queue_, "node lifecycle: pod",
                       [this](const std::string& k) { return SyncPod(k); });
}

void NodeLifecycleController::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  node_queue_.ShutDown();
  pod_queue_.ShutDown();
  for (auto& t : threads_) t.join();
  threads_.clear();
}

void NodeLifecycleController::MonitorLoop() {
  for (;;) {
    const absl::Time next = clock_.Now() + options_.monitor_period;
    if (absl::Status st = MonitorNodeHealth(); !st.ok()) {
      spdlog::warn("node lifecycle: monitoring node health: {}", st.ToString());
    }
    absl::MutexLock lock(&mu_);
    if (clock_.AwaitWithDeadline(mu_, absl::Condition(&stop_), next)) return;
  }
}

absl::Status NodeLifecycleController::MonitorNodeHealth() {
  const std::vector<json> nodes = informers_.nodes.List();
  std::vector<json> added;
  {
    std::set<std::string> names;
    for (const auto& n : nodes) names.insert(Name(n));
    absl::MutexLock lock(&mu_);
    for (const auto& n : nodes) {
      if (!known_.contains(Name(n))) added.push_back(n);
    }
    for (const auto& k : known_) {
      if (!names.contains(k)) {
        spdlog::info("node lifecycle: node {} was deleted", k);
        health_.erase(k);
      }
    }
    known_ = std::move(names);
  }
  for (const auto& n : added) {
    events_.Record(n, "Normal", "RegisteredNode", StrCat("Registered Node ", Name(n), " in Controller"));
  }

  absl::Status result;
  std::vector<std::pair<types::Node, Observed>> seen;
  for (const auto& node_json : nodes) {
    absl::StatusOr<types::Node> node = client::DecodeAs<types::Node>(node_json);
    if (!node.ok()) {
      result.Update(node.status());
      continue;
    }
    auto observed = UpdateNodeHealth(*node);
    if (!observed.ok()) {
      result.Update(observed.status());
      continue;
    }
    seen.emplace_back(std::move(*node), *observed);
  }

  // Master disruption: no zone has a Ready node.
  std::map<std::string, bool> zone_ready;
  for (const auto& [node, o] : seen) {
    if (node.metadata.labels.contains(kLabelExcludeDisruption)) continue;
    zone_ready[ZoneKey(node)] |= o.after == "True";
  }
  const bool disrupted =
      !zone_ready.empty() && std::none_of(zone_ready.begin(), zone_ready.end(), [](const auto& z) { return z.second; });
  {
    absl::MutexLock lock(&mu_);
    if (disrupted && !fully_disrupted_) {
      spdlog::warn("node lifecycle: no node is Ready; assuming the fault is ours: no taint-based evictions");
    }
    if (!disrupted && fully_disrupted_) {
      // Every node gets a fresh grace period (upstream: exiting master
      // disruption mode updates all probe timestamps).
      spdlog::info("node lifecycle: some nodes are Ready again; taint-based evictions resume");
      const absl::Time now = clock_.Now();
      for (auto& [name, h] : health_) {
        h.probe = now;
        h.ready_transition = now;
      }
    }
    fully_disrupted_ = disrupted;
  }

  for (const auto& [node, o] : seen) {
    if (o.after.empty()) continue;  // still within its startup grace period
    result.Update(SetNoExecuteTaints(node, disrupted ? "True" : o.after));
    const std::string& name = node.metadata.name;
    bool retry;
    {
      absl::MutexLock lock(&mu_);
      retry = health_[name].retry_pods;
    }
    if (o.after == "True" || (o.before != "True" && !retry)) continue;
    if (o.before == "True") {
      events_.Record(client::IdentityOf(node), "Normal", "NodeNotReady",
                     StrCat("Node ", name, " status is now: NodeNotReady"));
    }
    absl::Status st = MarkPodsNotReady(name);
    {
      absl::MutexLock lock(&mu_);
      health_[name].retry_pods = !st.ok();
    }
    result.Update(st);
  }
  return result;
}

absl::StatusOr<NodeLifecycleController::Observed> NodeLifecycleController::UpdateNodeHealth(const types::Node& node) {
  const std::string& name = node.metadata.name;
  const absl::Time now = clock_.Now();
  const absl::Time created = client::ParseRfc3339(node.metadata.creation_timestamp).value_or(now);
  const types::NodeCondition* ready = node.Condition("Ready");
  const bool has_ready = ready != nullptr;
  const types::NodeCondition no_condition;
  const types::NodeCondition& r = has_ready ? *ready : no_condition;
  const absl::Duration grace = has_ready ? options_.grace_period : options_.startup_grace_period;

  Observed observed;
  Health h;
  {
    absl::MutexLock lock(&mu_);
    auto it = health_.find(name);
    if (it == health_.end()) {
      // First sight (or a restart of the controller): the grace period
      // starts now — or at the node's creation when it never reported.
      h.probe = has_ready ? now : created;
      h.ready_transition = h.probe;
    } else {
      h = it->second;
      observed.before = h.status;
      if (h.has_ready != has_ready) {
        h.probe = now;
        h.ready_transition = now;
      } else if (has_ready && h.heartbeat != r.last_heartbeat_time) {
        h.probe = now;
        if (h.transition != r.last_transition_time) h.ready_transition = now;
      }
    }
  }
  h.has_ready = has_ready;
  h.heartbeat = r.last_heartbeat_time;
  h.transition = r.last_transition_time;
  h.status = r.status;
  // A renewed lease is a probe too (the agent may post status only once a
  // minute).
  auto newer_lease = [&](std::optional<absl::Time> renew) {
    if (!renew || (h.lease_renew && *renew <= *h.lease_renew)) return false;
    h.lease_renew = renew;
    h.probe = now;
    return true;
  };
  if (auto lease = informers_.leases.Get(kNodeLeaseNamespace, name)) newer_lease(LeaseRenewTime(*lease));

  absl::Status result;
  if (now > h.probe + grace) {
    // The cache may be behind: look at the stored lease before declaring
    // the node silent.
    auto stored = registry_.Get(K("leases", "coordination.k8s.io"), kNodeLeaseNamespace, name);
    if (!(stored.ok() && newer_lease(LeaseRenewTime(*stored)))) {
      const std::string now_text = client::Rfc3339(now);
      std::optional<types::NodeCondition> written;  // the Ready condition written
      result = client::MutateTyped<types::Node>(
          registry_, K("nodes"), "", name, node.metadata.uid, apiserver::Subresource::kStatus, [&](types::Node& fresh) {
            // The node posted its status since we looked: decide next pass.
            const types::NodeCondition* fresh_ready = fresh.Condition("Ready");
            if ((fresh_ready != nullptr ? fresh_ready->last_heartbeat_time : "") != h.heartbeat) return false;
            std::vector<types::NodeCondition>& conditions = fresh.status.conditions;
            bool changed = false;
            for (const char* type : kSilencedConditions) {
              auto c = std::find_if(conditions.begin(), conditions.end(),
                                    [&](const types::NodeCondition& x) { return x.type == type; });
              if (c == conditions.end()) {
                if (std::string_view(type) != "Ready") continue;
                types::NodeCondition added;
                added.type = type;
                added.status = "Unknown";
                added.reason = "NodeStatusNeverUpdated";
                added.message = "Kubelet never posted node status.";
                added.last_heartbeat_time = node.metadata.creation_timestamp;
                added.last_transition_time = now_text;
                conditions.push_back(std::move(added));
                changed = true;
              } else if (c->status != "Unknown") {
                c->status = "Unknown";
                c->reason = "NodeStatusUnknown";
                c->message = "Kubelet stopped posting node status.";
                c->last_transition_time = now_text;
                changed = true;
              }
            }
            if (changed && fresh.Condition("Ready") != nullptr) written = *fresh.Condition("Ready");
            return changed;
          });
      if (result.ok() && written) {
        spdlog::warn("node lifecycle: node {} stopped posting status and renewing its lease ({} without a signal)",
                     name, absl::FormatDuration(now - h.probe));
        h.has_ready = true;
        h.heartbeat = written->last_heartbeat_time;
        h.transition = written->last_transition_time;
        h.status = written->status;
        h.ready_transition = now;
      }
    }
  }
  observed.after = h.has_ready ? h.status : "";
  {
    absl::MutexLock lock(&mu_);
    health_[name] = h;
  }
  if (!result.ok()) return result;
  return observed;
}

absl::Status NodeLifecycleController::SetNoExecuteTaints(const types::Node& node, const std::string& ready) {
  const char* want = ready == "False" ? kTaintNodeNotReady : ready == "Unknown" ? kTaintNodeUnreachable : nullptr;
  std::vector<types::Taint> add, remove;
  for (const char* key : {kTaintNodeNotReady, kTaintNodeUnreachable}) {
    if (want != nullptr && std::string_view(key) == want) {
      if (!HasNodeTaint(node, key, kNoExecute)) {
        add.push_back(NodeTaint(key, kNoExecute, client::Rfc3339(clock_.Now())));
      }
    } else if (HasNodeTaint(node, key, kNoExecute)) {
      remove.push_back(NodeTaint(key, kNoExecute, ""));
    }
  }
  if (add.empty() && remove.empty()) return absl::OkStatus();
  if (!add.empty()) {
    spdlog::info("node lifecycle: node {} is {}: tainting it {}:NoExecute", node.metadata.name, ready, want);
  }
  return SwapTaints(node.metadata.name, add, remove);
}

absl::Status NodeLifecycleController::SwapTaints(const std::string& name, const std::vector<types::Taint>& add,
                                                 const std::vector<types::Taint>& remove) {
  std::shared_ptr<const json> node = informers_.nodes.GetSharedByKey(name);
  if (!node) return absl::OkStatus();
  const std::string uid = client::Uid(*node);
  // The monitor pass and the NoSchedule worker both write taints, and the
  // agent writes the node too: a conflict is routine, so try again on a
  // fresh copy (as upstream's SwapNodeControllerTaint does).
  absl::Status st;
  for (int attempt = 0; attempt < 5; ++attempt) {
    st = client::MutateTyped<types::Node>(
        registry_, K("nodes"), "", name, uid, apiserver::Subresource::kMain, [&](types::Node& fresh) {
          std::vector<types::Taint>& taints = fresh.spec.taints;
          const size_t before = taints.size();
          for (const auto& r : remove) {
            taints.erase(
                std::remove_if(taints.begin(), taints.end(), [&](const types::Taint& t) { return SameTaint(t, r); }),
                taints.end());
          }
          bool changed = taints.size() != before;
          for (const auto& a : add) {
            if (std::none_of(taints.begin(), taints.end(), [&](const types::Taint& t) { return SameTaint(t, a); })) {
              taints.push_back(a);
              changed = true;
            }
          }
          return changed;
        });
    if (st.code() != absl::StatusCode::kAborted) return st;
  }
  return st;
}

absl::Status NodeLifecycleController::SyncNoScheduleTaints(const std::string& name) {
  std::shared_ptr<const json> node_json = informers_.nodes.GetSharedByKey(name);
  if (!node_json) return absl::OkStatus();
  BERTH_ASSIGN_OR_RETURN(const types::Node node, client::DecodeAs<types::Node>(*node_json));
  std::set<std::string> want;
  for (const auto& c : node.status.conditions) {
    for (const auto& ct : kConditionTaints) {
      if (c.type == ct.condition && c.status == ct.status) want.insert(ct.key);
    }
  }
  if (node.spec.unschedulable) want.insert(kTaintNodeUnschedulable);
  std::set<std::string> have;
  for (const auto& t : node.spec.taints) {
    if (t.effect != kNoSchedule) continue;
    const bool ours =
        t.key == kTaintNodeUnschedulable || std::any_of(std::begin(kConditionTaints), std::end(kConditionTaints),
                                                        [&](const ConditionTaint& ct) { return t.key == ct.key; });
    if (ours) have.insert(t.key);
  }
  std::vector<types::Taint> add, remove;
  const std::string now = client::Rfc3339(clock_.Now());
  for (const auto& k : want) {
    if (!have.contains(k)) add.push_back(NodeTaint(k, kNoSchedule, now));
  }
  for (const auto& k : have) {
    if (!want.contains(k)) remove.push_back(NodeTaint(k, kNoSchedule, ""));
  }
  if (add.empty() && remove.empty()) return absl::OkStatus();
  return SwapTaints(name, add, remove);
}

namespace {

// controllerutil.MarkPodsNotReady for one pod: its Ready condition (if it
// has one) becomes False; false when there was nothing to change.
bool MarkPodNotReady(types::PodStatus& status, const std::string& now) {
  for (auto& c : status.conditions) {
    if (c.type != "Ready") continue;
    if (c.status == "False") return false;
    c.status = "False";
    c.last_transition_time = now;
    return true;
  }
  return false;
}

}  // namespace

absl::Status NodeLifecycleController::MarkPodsNotReady(const std::string& node) {
  absl::Status result;
  for (const auto& pod : informers_.pods.ByIndex(kPodsByNode, node)) {
    result.Update(SyncPod(client::ObjectKey(pod)));
  }
  return result;
}

absl::Status NodeLifecycleController::SyncPod(const std::string& key) {
  std::shared_ptr<const json> pod_json = informers_.pods.GetSharedByKey(key);
  if (!pod_json) return absl::OkStatus();
  BERTH_ASSIGN_OR_RETURN(types::Pod pod, client::DecodeAs<types::Pod>(*pod_json));
  const std::string& node = pod.spec.node_name;
  {
    absl::MutexLock lock(&mu_);
    auto h = health_.find(node);
    // Unknown nodes (not seen yet) and Ready ones: nothing to do.
    if (node.empty() || h == health_.end() || !h->second.has_ready || h->second.status == "True") {
      return absl::OkStatus();
    }
  }
  const std::string now = client::Rfc3339(clock_.Now());
  if (!MarkPodNotReady(pod.status, now)) return absl::OkStatus();
  bool changed = false;
  BERTH_RETURN_IF_ERROR(
      client::MutateTyped<types::Pod>(registry_, K("pods"), pod.metadata.namespace_, pod.metadata.name,
                                      pod.metadata.uid, apiserver::Subresource::kStatus,
                                      [&](types::Pod& fresh) { return changed = MarkPodNotReady(fresh.status, now); }));
  if (changed) events_.Record(*pod_json, "Warning", "NodeNotReady", "Node is not ready");
  return absl::OkStatus();
}

}  // namespace berth::controllers
