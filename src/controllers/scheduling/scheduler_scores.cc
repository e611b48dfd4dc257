// Scoring: choosing one node among those that fit, weighted by free space,
// allocated bytes or volume count (the class's berth.io/node-weighting), or
// spread by pod count when the pod has no storage to weigh.
#include "controllers/scheduling/scheduler.h"

#include <algorithm>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "api/types/core_pod.h"
#include "api/types/storage.h"
#include "client/object.h"
#include "client/typed.h"
#include "common/strings.h"
#include "controllers/node_affinity.h"
#include "controllers/scheduling/scheduler_internal.h"
#include "controllers/volume/pv_binder.h"
#include "spdlog/spdlog.h"

namespace berth::controllers {

using namespace ::berth::client;  // the controllers' own client library
using namespace scheduler_internal;
using nlohmann::json;

// ---- Pure parts ----

absl::StatusOr<NodeWeighting> ParseNodeWeighting(std::string_view value) {
  if (value.empty() || value == "SpaceWeighted") return NodeWeighting::kSpaceWeighted;
  if (value == "CapacityWeighted") return NodeWeighting::kCapacityWeighted;
  if (value == "VolumeWeighted") return NodeWeighting::kVolumeWeighted;
  return absl::InvalidArgumentError(StrCat("unknown ", kNodeWeightingParameter, " \"", value,
                                           "\": want SpaceWeighted, CapacityWeighted or VolumeWeighted"));
}

std::string ChooseNode(const std::vector<NodeCandidate>& candidates, NodeWeighting weighting, std::mt19937_64* rng) {
  if (candidates.empty()) return "";
  // A weight where smaller is better, as seed 001's node maps: free space
  // is inverted; allocation and volume counts are taken as they are (a node
  // that holds none sorts first, like lib-csi's "unoccupied nodes first").
  auto weight = [weighting](const NodeCandidate& c) -> int64_t {
    switch (weighting) {
      case NodeWeighting::kSpaceWeighted:
        return c.free_bytes < 0 ? INT64_MAX : INT64_MAX - 1 - c.free_bytes;
      case NodeWeighting::kCapacityWeighted:
        return c.allocated_bytes;
      case NodeWeighting::kVolumeWeighted:
        return c.volumes;
    }
    return 0;
  };
  int64_t best = INT64_MAX;
  std::vector<const NodeCandidate*> tied;
  for (const auto& c : candidates) {
    const int64_t w = weight(c);
    if (tied.empty() || w < best) {
      best = w;
      tied.assign(1, &c);
    } else if (w == best) {
      tied.push_back(&c);
    }
  }
  if (rng != nullptr) {
    // Sort first so the outcome depends on the seed only, not on the order
    // the candidates came in.
    std::sort(tied.begin(), tied.end(), [](const auto* a, const auto* b) { return a->name < b->name; });
    std::uniform_int_distribution<size_t> pick(0, tied.size() - 1);
    return tied[pick(*rng)]->name;
  }
  return (*std::min_element(tied.begin(), tied.end(), [](const auto* a, const auto* b) { return a->name < b->name; }))
      ->name;
}

// ---- Score: one node of those that fit ----

namespace {

// Scoring reads every volume (or pod) in the cache. One that does not decode
// is left out of the counts, with a warning, instead of failing the attempt:
// the counts only weigh the choice among nodes that all fit, so one bad
// object skews it at most by one, while failing would let a single
// malformed object (which the API server's validation refuses anyway) stop
// every pod from being scheduled. The filters, which decide whether a pod
// fits, fail on the pod's own objects instead (CollectClaims).
template <typename T>
std::optional<T> DecodeForScore(const json& object) {
  absl::StatusOr<T> typed = DecodeAs<T>(object);
  if (!typed.ok()) {
    spdlog::warn("scheduler: scoring skips an object that does not decode: {}", typed.status().ToString());
    return std::nullopt;
  }
  return std::move(*typed);
}

}  // namespace

const Scheduler::NodeFit& Scheduler::PickNode(const std::vector<ClaimRef>& claims, const std::vector<NodeFit>& fits,
                                              const Snapshot& snap) {
  // A node the pod's claims were already sent to wins while it fits (a
  // restart between selected-node and the binding, or volumes provisioned
  // there for this pod).
  for (const auto& c : claims) {
    if (c.selected_node.empty()) continue;
    for (const auto& f : fits) {
      if (f.node == c.selected_node) return f;
    }
  }
  if (fits.size() == 1) return fits[0];
  const types::StorageClass* storage_class = nullptr;
  for (const auto& c : claims) {
    if (c.state == ClaimRef::State::kDelayed && c.storage_class) {
      storage_class = &*c.storage_class;
      break;
    }
  }
  for (const auto& c : claims) {
    if (storage_class == nullptr && c.storage_class) storage_class = &*c.storage_class;
  }
  NodeWeighting weighting = NodeWeighting::kSpaceWeighted;
  std::vector<NodeCandidate> candidates;
  for (const auto& f : fits) candidates.push_back({.name = f.node});
  if (storage_class != nullptr) {
    auto param = storage_class->parameters.find(kNodeWeightingParameter);
    auto parsed = ParseNodeWeighting(param == storage_class->parameters.end() ? "" : param->second);
    if (parsed.ok()) {
      weighting = *parsed;
    } else {
      spdlog::warn("scheduler: storage class {}: {}; using SpaceWeighted", storage_class->metadata.name,
                   std::string(parsed.status().message()));
    }
    const std::string cls = storage_class->metadata.name, driver = storage_class->provisioner;
    std::map<std::string, NodeCandidate*> by_name;
    std::vector<const NodeInfo*> infos;
    for (auto& c : candidates) {
      by_name[c.name] = &c;
      for (const auto& n : snap.nodes) {
        if (n.name == c.name) infos.push_back(&n);
      }
    }
    // Free space: the roomiest CSIStorageCapacity of the class the node
    // reaches, less the placements it does not reflect yet (so a burst
    // spreads instead of going where the objects still show most room).
    for (size_t i = 0; i < snap.capacities.size(); ++i) {
      std::optional<types::CSIStorageCapacity> cap = DecodeForScore<types::CSIStorageCapacity>(snap.capacities[i]);
      if (!cap || cap->storage_class_name != cls || !cap->capacity) continue;
      const int64_t free = std::max<int64_t>(
          0, cap->capacity->Value() - (i < snap.capacity_in_flight.size() ? snap.capacity_in_flight[i] : 0));
      for (const NodeInfo* n : infos) {
        NodeCandidate& c = *by_name[n->name];
        if (CapacityReaches(*cap, n->labels)) c.free_bytes = std::max(c.free_bytes, free);
      }
    }
    // Claims of the driver sent to a node whose volumes are not in the cache
    // yet count there too (the placements), so a burst of pods spreads.
    std::map<std::string, std::pair<std::string, int64_t>> inflight;  // uid → (node, request)
    for (const auto& [uid, f] : snap.in_flight) {
      if (!f.provisioned && f.driver == driver) inflight[uid] = {f.node, f.bytes};
    }
    // The driver's volumes on each node, counted in place (no copies: there
    // may be thousands).
    (void)informers_.volumes.Select([&](const json& object) {
      std::optional<types::PersistentVolume> pv = DecodeForScore<types::PersistentVolume>(object);
      if (!pv || !pv->spec.csi || pv->spec.csi->driver != driver || pv->metadata.Deleting()) return false;
      if (pv->spec.claim_ref) inflight.erase(pv->spec.claim_ref->uid);  // provisioned: counted as a volume
      const int64_t size = StorageOf(pv->spec.capacity);
      const std::string on = HostnameOfVolume(*pv);
      if (!on.empty()) {
        if (auto it = by_name.find(on); it != by_name.end()) {
          ++it->second->volumes;
          it->second->allocated_bytes += size;
        }
        return false;
      }
      if (!pv->spec.node_affinity || !pv->spec.node_affinity->required) return false;  // not node-local
      for (const NodeInfo* n : infos) {
        if (!VolumeFitsNode(*pv, n->labels, n->name)) continue;
        ++by_name[n->name]->volumes;
        by_name[n->name]->allocated_bytes += size;
      }
      return false;
    });
    for (const auto& [uid, where] : inflight) {
      if (auto it = by_name.find(where.first); it != by_name.end()) {
        ++it->second->volumes;
        it->second->allocated_bytes += where.second;
      }
    }
  }
  if (storage_class == nullptr) {
    // No storage to weigh: spread by the number of pods on each node (fewest
    // first), so pods without volumes do not all land on one node.
    weighting = NodeWeighting::kVolumeWeighted;
    std::map<std::string, NodeCandidate*> by_name;
    for (auto& c : candidates) by_name[c.name] = &c;
    auto count = [&](const json& object, int delta) {
      std::optional<types::Pod> p = DecodeForScore<types::Pod>(object);
      if (!p || Terminal(*p)) return;
      if (auto it = by_name.find(p->spec.node_name); it != by_name.end()) it->second->volumes += delta;
    };
    (void)informers_.pods.Select([&](const json& p) {
      count(p, 1);
      return false;
    });
    // Pods we bound that the cache does not show bound yet.
    std::map<std::string, json> assumed;
    {
      absl::MutexLock lock(&mu_);
      assumed = assumed_["pods"];
    }
    for (const auto& [key, obj] : assumed) {
      std::optional<json> cached = informers_.pods.GetByKey(key);
      std::optional<json> current = Current(informers_.pods, "pods", key);  // prunes what the cache caught up with
      if (!cached || !current || ResourceVersion(*current) != ResourceVersion(obj)) continue;
      count(*cached, -1);
      count(obj, 1);
    }
  }
  std::string name;
  if (options_.random_seed) {
    absl::MutexLock lock(&mu_);
    name = ChooseNode(candidates, weighting, &rng_);
  } else {
    name = ChooseNode(candidates, weighting);
  }
  for (const auto& f : fits) {
    if (f.node == name) return f;
  }
  return fits[0];
}

}  // namespace berth::controllers
