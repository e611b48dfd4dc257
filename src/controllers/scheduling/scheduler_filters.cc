// The scheduler's Filter plugins, as kube-scheduler names them:
// NodeUnschedulable, TaintToleration, NodeAffinity, NodeVolumeLimits and
// VolumeBinding (static matches, provisioning topology and capacity).
#include "controllers/scheduling/scheduler.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>

#include "api/selector.h"
#include "client/object.h"
#include "common/strings.h"
#include "controllers/node_affinity.h"
#include "controllers/scheduling/scheduler_internal.h"
#include "controllers/taints.h"
#include "controllers/volume/pv_binder.h"

namespace berth::controllers {

using namespace ::berth::client;  // the controllers' own client library
using namespace scheduler_internal;
using nlohmann::json;

namespace scheduler_internal {

// A PV's required nodeAffinity against a node (no affinity: any node).
bool VolumeFitsNode(const json& pv, const std::map<std::string, std::string>& labels, const std::string& node_name) {
  const json& required = Field(Field(Field(pv, "spec"), "nodeAffinity"), "required");
  return required.is_null() || NodeSelectorMatchesLabels(required, labels, node_name);
}

bool VolumeFitsNode(const types::PersistentVolume& pv, const std::map<std::string, std::string>& labels,
                    const std::string& node_name) {
  if (!pv.spec.node_affinity || !pv.spec.node_affinity->required) return true;
  return NodeSelectorMatchesLabels(*pv.spec.node_affinity->required, labels, node_name);
}

// StorageClass allowedTopologies (TopologySelectorTerms, ORed; an empty
// list allows every node, an empty term selects nothing).
bool TopologyAllows(const std::vector<types::TopologySelectorTerm>& allowed,
                    const std::map<std::string, std::string>& labels) {
  if (allowed.empty()) return true;
  for (const auto& term : allowed) {
    if (term.match_label_expressions.empty()) continue;
    bool all = true;
    for (const auto& e : term.match_label_expressions) {
      auto it = labels.find(e.key);
      all = all && it != labels.end() && ContainsString(e.values, it->second);
    }
    if (all) return true;
  }
  return false;
}

// The node's NoSchedule/NoExecute taints (TaintToleration filter; the
// PreferNoSchedule ones only score), plus the NoSchedule taint the node
// lifecycle controller puts on a node whose Ready condition is False or
// Unknown, for the moment before it has.
std::vector<Taint> SchedulingTaints(const json& node) {
  std::vector<Taint> out;
  for (auto& taint : NodeTaints(node)) {
    if (taint.effect == kNoSchedule || taint.effect == kNoExecute) out.push_back(std::move(taint));
  }
  // Until the node lifecycle controller has tainted it (one monitor period).
  const std::string ready = NodeReadyStatus(node);
  const char* implied = ready == "False" ? kTaintNodeNotReady : ready == "Unknown" ? kTaintNodeUnreachable : nullptr;
  if (implied != nullptr && !HasTaint(node, implied, kNoSchedule)) out.push_back({implied, "", kNoSchedule, ""});
  return out;
}

bool PodFitsLabels(const json& pod, const std::map<std::string, std::string>& labels, const std::string& node_name) {
  const json& spec = Field(pod, "spec");
  const json& selector = Field(spec, "nodeSelector");
  if (selector.is_object()) {
    for (const auto& [k, v] : selector.items()) {
      auto it = labels.find(k);
      if (it == labels.end() || !v.is_string() || it->second != v.get<std::string>()) return false;
    }
  }
  const json& required =
      Field(Field(Field(spec, "affinity"), "nodeAffinity"), "requiredDuringSchedulingIgnoredDuringExecution");
  return required.is_null() || NodeSelectorMatchesLabels(required, labels, node_name);
}

// Does a CSIStorageCapacity apply to a node? Only label selection is
// supported, and an object without nodeTopology applies nowhere (upstream).
bool CapacityReaches(const json& capacity, const std::map<std::string, std::string>& labels) {
  const json& topology = Field(capacity, "nodeTopology");
  if (topology.is_null()) return false;
  auto selector = api::LabelSelector::FromJson(topology);
  return selector.ok() && selector->Matches(labels);
}

bool CapacityReaches(const types::CSIStorageCapacity& capacity, const std::map<std::string, std::string>& labels) {
  if (!capacity.node_topology) return false;
  auto selector = api::LabelSelector::FromJson(types::EncodeValue(*capacity.node_topology));
  return selector.ok() && selector->Matches(labels);
}

}  // namespace scheduler_internal

bool PodFitsNodeAffinity(const json& pod, const json& node) { return PodFitsLabels(pod, NodeLabels(node), Name(node)); }

// ---- Filter plugins ----

Scheduler::NodeFit Scheduler::Filter(const json& pod, const std::vector<ClaimRef>& claims, const NodeInfo& node,
                                     const Snapshot& snap) {
  NodeFit fit;
  fit.node = node.name;
  const json& tolerations = Field(Field(pod, "spec"), "tolerations");
  // NodeUnschedulable.
  const json& unschedulable = Field(Field(node.object, "spec"), "unschedulable");
  if (unschedulable.is_boolean() && unschedulable.get<bool>() &&
      !Tolerates(tolerations, {kTaintNodeUnschedulable, "", kNoSchedule, ""})) {
    fit.reasons.push_back(kReasonUnschedulable);
    return fit;
  }
  // TaintToleration.
  for (const auto& taint : SchedulingTaints(node.object)) {
    if (!Tolerates(tolerations, taint)) {
      fit.reasons.push_back(StrCat("node(s) had untolerated taint {", taint.key, ": ", taint.value, "}"));
      return fit;
    }
  }
  // NodeAffinity.
  if (!PodFitsLabels(pod, node.labels, node.name)) {
    fit.reasons.push_back(kReasonNodeAffinity);
    return fit;
  }
  // NodeVolumeLimits.
  if (auto csinode = snap.csinodes.find(node.name); csinode != snap.csinodes.end() && !snap.new_volumes.empty()) {
    const json& drivers = Field(Field(csinode->second, "spec"), "drivers");
    auto used = snap.used.find(node.name);
    for (const auto& d : drivers.is_array() ? drivers : json::array()) {
      const json& count = Field(Field(d, "allocatable"), "count");
      auto mine = snap.new_volumes.find(Str(d, {"name"}));
      if (!count.is_number_integer() || mine == snap.new_volumes.end()) continue;
      std::set<std::string> all = mine->second;
      if (used != snap.used.end()) {
        if (auto there = used->second.find(mine->first); there != used->second.end()) {
          all.insert(there->second.begin(), there->second.end());
        }
      }
      if (static_cast<int64_t>(all.size()) > count.get<int64_t>()) {
        fit.reasons.push_back(kReasonMaxVolumeCount);
        return fit;
      }
    }
  }
  // VolumeBinding.
  FilterVolumes(claims, node, snap, fit);
  return fit;
}

void Scheduler::FilterVolumes(const std::vector<ClaimRef>& claims, const NodeInfo& node, const Snapshot& snap,
                              NodeFit& fit) {
  bool bound_ok = true, pvs_found = true, unbound_ok = true, space_ok = true;
  auto finish = [&] {
    if (!bound_ok) fit.reasons.push_back(kReasonNodeConflict);
    if (!unbound_ok) fit.reasons.push_back(kReasonBindConflict);
    if (!space_ok) fit.reasons.push_back(kReasonNotEnoughSpace);
    if (!pvs_found) fit.reasons.push_back(kReasonPvNotExist);
  };
  // Bound claims: their volumes must be reachable from the node.
  for (const auto& c : claims) {
    if (c.state != ClaimRef::State::kBound) continue;
    if (!c.pv) {
      pvs_found = false;
      break;
    }
    if (!VolumeFitsNode(*c.pv, node.labels, node.name)) {
      bound_ok = false;
      break;
    }
  }
  // Unbound WaitForFirstConsumer claims: a claim already sent to a node
  // fits only there.
  std::vector<size_t> to_place;
  for (size_t i = 0; i < claims.size(); ++i) {
    if (claims[i].state != ClaimRef::State::kDelayed) continue;
    if (!claims[i].selected_node.empty() && claims[i].selected_node != node.name) {
      unbound_ok = false;
      finish();
      return;
    }
    to_place.push_back(i);
  }
  // Smallest claims first get the smallest volumes (upstream's byPVCSize).
  std::stable_sort(to_place.begin(), to_place.end(),
                   [&](size_t a, size_t b) { return claims[a].request < claims[b].request; });
  std::set<std::string> chosen;
  std::vector<size_t> to_provision;
  std::map<std::string, int64_t> planned;  // class → bytes of this pod's claims provisioned here so far
  for (size_t i : to_place) {
    std::vector<types::PersistentVolume> candidates;
    for (const auto& pv : snap.static_candidates) {
      if (!chosen.contains(pv.metadata.name)) candidates.push_back(pv);
    }
    if (const types::PersistentVolume* pv = PvBinder::FindBestMatch(claims[i].claim, candidates, &node.labels)) {
      chosen.insert(pv->metadata.name);
      fit.static_bindings.emplace_back(i, *pv);
    } else {
      to_provision.push_back(i);
    }
  }
  for (size_t i : to_provision) {
    const ClaimRef& c = claims[i];
    const std::string provisioner = c.storage_class ? c.storage_class->provisioner : "";
    if (provisioner.empty() || provisioner == kNoProvisioner ||
        !TopologyAllows(c.storage_class->allowed_topologies, node.labels)) {
      unbound_ok = false;
      break;
    }
    // The driver must run on the node to provision there.
    bool driver_here = false;
    if (auto csinode = snap.csinodes.find(node.name); csinode != snap.csinodes.end()) {
      const json& drivers = Field(Field(csinode->second, "spec"), "drivers");
      for (const auto& d : drivers.is_array() ? drivers : json::array()) driver_here |= Str(d, {"name"}) == provisioner;
    }
    if (!driver_here) {
      unbound_ok = false;
      break;
    }
    // Capacity was checked when the claim was sent here; the volume being
    // created may already have used it up.
    if (c.selected_node != node.name && c.request > 0) {
      auto driver = snap.csidrivers.find(provisioner);
      const json& tracked =
          driver == snap.csidrivers.end() ? json() : Field(Field(driver->second, "spec"), "storageCapacity");
      const bool required = tracked.is_boolean() && tracked.get<bool>();
      bool reported = false, enough = false;
      const std::string& cls = c.storage_class->metadata.name;
      for (size_t k = 0; k < snap.capacities.size(); ++k) {
        const json& cap = snap.capacities[k];
        if (Str(cap, {"storageClassName"}) != cls || !CapacityReaches(cap, node.labels)) continue;
        reported = true;
        const json& max_size = Field(cap, "maximumVolumeSize");
        std::optional<int64_t> limit = Bytes(max_size.is_null() ? Field(cap, "capacity") : max_size);
        // Placements the object does not reflect yet, and this pod's own
        // claims before this one, take from what it offers: a burst must
        // not over-commit a node whose object lags.
        const int64_t taken = (k < snap.capacity_in_flight.size() ? snap.capacity_in_flight[k] : 0) + planned[cls];
        if (std::optional<int64_t> room = Bytes(Field(cap, "capacity")); taken > 0 && room) {
          limit = std::min(limit.value_or(INT64_MAX), *room - taken);
        }
        if (limit && *limit >= c.request) {
          enough = true;
          break;
        }
      }
      if (!enough && (required || reported)) {
        space_ok = false;
        break;
      }
    }
    if (c.selected_node != node.name) planned[c.storage_class->metadata.name] += c.request;
    fit.provisions.push_back(i);
  }
  finish();
}

}  // namespace berth::controllers
