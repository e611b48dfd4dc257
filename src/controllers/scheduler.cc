#include "controllers/scheduler.h"

#include "controllers/node_affinity.h"
#include "client/writes.h"

#include <algorithm>
#include <functional>
#include <set>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "api/quantity.h"
#include "api/selector.h"
#include "common/status.h"
#include "common/strings.h"
#include "client/object.h"
#include "controllers/pv_binder.h"
#include "controllers/taints.h"
#include "spdlog/spdlog.h"

namespace berth::controllers {

using namespace ::berth::client;  // the controllers' own client library
namespace {

using nlohmann::json;

// kube-scheduler's reason strings (the filter plugins' and VolumeBinding's).
constexpr char kReasonUnschedulable[] = "node(s) were unschedulable";
constexpr char kReasonNodeAffinity[] = "node(s) didn't match Pod's node affinity/selector";
constexpr char kReasonMaxVolumeCount[] = "node(s) exceed max volume count";
constexpr char kReasonBindConflict[] = "node(s) didn't find available persistent volumes to bind";
constexpr char kReasonNodeConflict[] = "node(s) had volume node affinity conflict";
constexpr char kReasonNotEnoughSpace[] = "node(s) did not have enough free storage";
constexpr char kReasonPvNotExist[] = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)";
constexpr char kUnboundImmediate[] = "pod has unbound immediate PersistentVolumeClaims";
constexpr char kNoNodes[] = "no nodes available to schedule pods";

constexpr char kNoProvisioner[] = "kubernetes.io/no-provisioner";

// A queue key that is no pod: "look at every pending pod again". Bursts of
// cluster changes (thousands of PV updates) collapse into one such key.
constexpr char kRequeueAll[] = "\x01requeue-all";


int64_t ResourceVersion(const json& o) {
  int64_t rv = 0;
  return absl::SimpleAtoi(Str(o, {"metadata", "resourceVersion"}), &rv) ? rv : 0;
}

std::optional<int64_t> Bytes(const json& q) {
  if (!q.is_string()) return std::nullopt;
  auto parsed = api::Quantity::Parse(q.get<std::string>());
  if (!parsed.ok()) return std::nullopt;
  return parsed->Value();
}

int64_t ClaimRequest(const json& claim) {
  return Bytes(Field(Field(Field(Field(claim, "spec"), "resources"), "requests"), "storage")).value_or(0);
}

// A PV's required nodeAffinity against a node (no affinity: any node).
bool VolumeFitsNode(const json& pv, const std::map<std::string, std::string>& labels, const std::string& node_name) {
  const json& required = Field(Field(Field(pv, "spec"), "nodeAffinity"), "required");
  return required.is_null() || NodeSelectorMatchesLabels(required, labels, node_name);
}

// StorageClass allowedTopologies (TopologySelectorTerms, ORed; an empty
// list allows every node, an empty term selects nothing).
bool TopologyAllows(const json& allowed, const std::map<std::string, std::string>& labels) {
  if (!allowed.is_array() || allowed.empty()) return true;
  for (const auto& term : allowed) {
    const json& exprs = Field(term, "matchLabelExpressions");
    if (!exprs.is_array() || exprs.empty()) continue;
    bool all = true;
    for (const auto& e : exprs) {
      auto it = labels.find(Str(e, {"key"}));
      all = all && it != labels.end() && ContainsString(StringList(Field(e, "values")), it->second);
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

bool Terminal(const json& pod) {
  const std::string phase = Str(pod, {"status", "phase"});
  return phase == "Succeeded" || phase == "Failed";
}

json PodScheduledCondition(const json& pod) {
  const json& conditions = Field(Field(pod, "status"), "conditions");
  if (conditions.is_array()) {
    for (const auto& c : conditions) {
      if (Str(c, {"type"}) == "PodScheduled") return c;
    }
  }
  return json();
}

// Reads the object fresh, applies `mutate` (false: nothing to do) and
// writes it back conditionally (a conflict comes back ABORTED). Returns the
// stored result, or nullopt when nothing was written.
absl::StatusOr<std::optional<json>> Mutate(apiserver::Registry& registry, const api::KindInfo& kind,
                                           const std::string& ns, const std::string& name, apiserver::Subresource sub,
                                           const std::function<bool(json&)>& mutate) {
  auto current = registry.Get(kind, ns, name);
  if (!current.ok()) return current.status();
  json obj = *current;
  if (!mutate(obj)) return std::optional<json>();
  auto updated = registry.Update(kind, ns, name, std::move(obj), sub);
  if (!updated.ok()) return updated.status();
  return std::optional<json>(*updated);
}

std::map<std::string, json> ByName(std::vector<json> objects) {
  std::map<std::string, json> out;
  for (auto& o : objects) {
    std::string name = Name(o);
    out.emplace(std::move(name), std::move(o));
  }
  return out;
}


}  // namespace

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

bool PodFitsNodeAffinity(const json& pod, const json& node) { return PodFitsLabels(pod, NodeLabels(node), Name(node)); }

// ---- Scheduler ----

struct Scheduler::NodeInfo {
  std::string name;
  json object;
  std::map<std::string, std::string> labels;
  json labels_json;  // the same, for PvBinder::FindBestMatch
};

struct Scheduler::ClaimRef {
  enum class State {
    kBound,      // volumeName + bind-completed
    kDelayed,    // WaitForFirstConsumer, no volume yet: the scheduler's to place
    kBinding,    // WaitForFirstConsumer, sent to a node, the binder is finishing
    kImmediate,  // anything else unbound: the binder's, the pod waits
  };
  json claim;
  State state = State::kImmediate;
  std::optional<json> pv;  // kBound: its volume, if it exists
  std::optional<json> storage_class;
  int64_t request = 0;
  std::string selected_node;
};

struct Scheduler::Snapshot {
  std::vector<NodeInfo> nodes;  // by name
  std::map<std::string, json> csinodes, classes, csidrivers;
  std::vector<json> capacities;
  // Available volumes and volumes pre-bound to the pod's claims, of the
  // classes of its WaitForFirstConsumer claims.
  std::vector<json> static_candidates;
  // The pod's volumes per driver (volume handle, or "claim:ns/name" for a
  // claim without a volume yet).
  std::map<std::string, std::set<std::string>> new_volumes;
  // The same for the pods already on each node, for nodes whose CSINode
  // limits one of those drivers.
  std::map<std::string, std::map<std::string, std::set<std::string>>> used;
};

struct Scheduler::NodeFit {
  std::string node;
  std::vector<std::string> reasons;                      // empty: the pod fits
  std::vector<std::pair<size_t, json>> static_bindings;  // claim index → PV to pre-bind
  std::vector<size_t> provisions;                        // claim indexes to provision here
};

Scheduler::Scheduler(apiserver::Registry& registry, SchedulerInformers informers, Options options)
    : registry_(registry),
      informers_(informers),
      options_(std::move(options)),
      events_(registry, options_.scheduler_name),
      queue_(WorkQueue::Options{.base_delay = options_.initial_backoff, .max_delay = options_.max_backoff}),
      rng_(options_.random_seed.value_or(0)) {}

Scheduler::~Scheduler() { Stop(); }

bool Scheduler::Pending(const json& pod) const {
  if (Deleting(pod) || Terminal(pod) || !Str(pod, {"spec", "nodeName"}).empty()) return false;
  const std::string name = Str(pod, {"spec", "schedulerName"});
  return name.empty() || name == options_.scheduler_name;
}

void Scheduler::RegisterHandlers() {
  informers_.pods.AddHandlers({
      .on_add = [this](const json& o) { queue_.Add(ObjectKey(o)); },
      .on_update =
          [this](const json& before, const json& after) {
            if (ResourceVersion(before) == ResourceVersion(after)) {  // resync: retry pending pods
              if (Pending(after)) queue_.Add(ObjectKey(after));
              return;
            }
            // Our own condition writes change nothing about where it fits.
            if (Pending(before) && Pending(after) && Field(before, "spec") == Field(after, "spec")) return;
            queue_.Add(ObjectKey(after));
            // A pod leaving its node frees volume slots there.
            if (!Str(before, {"spec", "nodeName"}).empty() && !Terminal(before) && Terminal(after)) {
              queue_.Add(kRequeueAll);
            }
          },
      .on_delete =
          [this](const json& o) {
            queue_.Add(ObjectKey(o));  // forgets what we kept about it
            if (!Str(o, {"spec", "nodeName"}).empty()) queue_.Add(kRequeueAll);
          },
  });
  informers_.claims.AddHandlers({
      .on_add = [this](const json& o) { RequeuePodsUsing(o); },
      .on_update = [this](const json&, const json& o) { RequeuePodsUsing(o); },
      .on_delete = [this](const json& o) { RequeuePodsUsing(o); },
  });
  // Anything else that changes where pods fit: look at every pending pod.
  for (Informer* informer : {&informers_.nodes, &informers_.volumes, &informers_.classes, &informers_.csinodes,
                             &informers_.csidrivers, &informers_.capacities}) {
    informer->AddHandlers({
        .on_add = [this](const json&) { queue_.Add(kRequeueAll); },
        .on_update =
            [this](const json& before, const json& after) {
              if (ResourceVersion(before) != ResourceVersion(after)) queue_.Add(kRequeueAll);
            },
        .on_delete = [this](const json&) { queue_.Add(kRequeueAll); },
    });
  }
}

void Scheduler::Start() {
  for (int i = 0; i < options_.workers; ++i) {
    workers_.emplace_back(
        [this] { RunWorker(queue_, "scheduler: pod", [this](const std::string& key) { return SyncPod(key); }); });
  }
}

void Scheduler::Stop() {
  queue_.ShutDown();
  for (auto& w : workers_) w.join();
  workers_.clear();
}

void Scheduler::RequeuePending() {
  for (const auto& pod : informers_.pods.Select([this](const json& p) { return Pending(p); })) {
    queue_.Add(ObjectKey(pod));
  }
}

void Scheduler::RequeuePodsUsing(const json& claim) {
  const std::string ns = Ns(claim), name = Name(claim);
  auto uses = [&](const json& pod) {
    if (Ns(pod) != ns || !Pending(pod)) return false;
    const json& volumes = Field(Field(pod, "spec"), "volumes");
    if (!volumes.is_array()) return false;
    for (const auto& v : volumes) {
      bool ephemeral = false;
      if (PodVolumeClaim(pod, v, &ephemeral) == name) return true;
    }
    return false;
  };
  for (const auto& pod : informers_.pods.Select(uses)) queue_.Add(ObjectKey(pod));
}

// ---- The assume cache ----

void Scheduler::Assume(const std::string& kind, const json& object) {
  absl::MutexLock lock(&mu_);
  assumed_[kind][ObjectKey(object)] = object;
}

std::optional<json> Scheduler::Current(Informer& informer, const std::string& kind, const std::string& key) {
  std::optional<json> cached = informer.GetByKey(key);
  absl::MutexLock lock(&mu_);
  auto& assumed = assumed_[kind];
  auto it = assumed.find(key);
  if (it == assumed.end()) return cached;
  // We only assume objects that exist: gone from the cache means deleted.
  if (!cached || ResourceVersion(*cached) >= ResourceVersion(it->second)) {
    assumed.erase(it);
    return cached;
  }
  return it->second;
}

std::vector<json> Scheduler::SelectCurrent(Informer& informer, const std::string& kind,
                                           const std::function<bool(const json&)>& pred) {
  std::map<std::string, json> assumed;
  {
    absl::MutexLock lock(&mu_);
    assumed = assumed_[kind];
  }
  std::vector<json> out = informer.Select(pred);
  if (assumed.empty()) return out;
  std::set<std::string> superseded;
  std::vector<json> extra;
  for (const auto& [key, obj] : assumed) {
    std::optional<json> current = Current(informer, kind, key);  // prunes what the cache caught up with
    if (!current || ResourceVersion(*current) != ResourceVersion(obj)) continue;
    superseded.insert(key);
    if (pred(obj)) extra.push_back(obj);
  }
  if (superseded.empty()) return out;
  std::erase_if(out, [&](const json& o) { return superseded.contains(ObjectKey(o)); });
  for (auto& o : extra) out.push_back(std::move(o));
  return out;
}

// ---- One attempt ----

absl::Status Scheduler::SyncPod(const std::string& key) {
  if (key == kRequeueAll) {
    RequeuePending();
    return absl::OkStatus();
  }
  std::optional<json> found = Current(informers_.pods, "pods", key);
  if (!found || !Pending(*found)) {
    {
      absl::MutexLock lock(&mu_);
      binding_.erase(key);
    }
    if (!found || Deleting(*found) || Str(*found, {"spec", "nodeName"}).empty()) return absl::OkStatus();
    // Bound, but our PodScheduled=True was not written (a crash after the
    // binding): finish it. Pods others placed are left to the kubelet.
    const json cond = PodScheduledCondition(*found);
    const std::string name = Str(*found, {"spec", "schedulerName"});
    if ((name.empty() || name == options_.scheduler_name) && !cond.is_null() && Str(cond, {"status"}) != "True") {
      return SetScheduledCondition(*found, "True", "", "");
    }
    return absl::OkStatus();
  }
  const json pod = *found;
  Snapshot snap;
  for (auto& n : informers_.nodes.List()) {
    NodeInfo info;
    info.name = Name(n);
    info.labels = NodeLabels(n);
    info.labels_json = json(info.labels);
    info.object = std::move(n);
    snap.nodes.push_back(std::move(info));
  }
  auto prefilter_fail = [&](const std::string& message) {
    return Unschedulable(pod, "Unschedulable",
                         snap.nodes.empty() ? std::string(kNoNodes)
                                            : StrCat("0/", snap.nodes.size(), " nodes are available: ", message, "."));
  };
  std::vector<ClaimRef> claims;
  if (std::string problem = CollectClaims(pod, claims); !problem.empty()) return prefilter_fail(problem);

  // Did a provisioner give up on the node we sent the claims to? It clears
  // selected-node; upstream's BindPodVolumes then fails and the pod backs off.
  {
    std::string sent_to;
    {
      absl::MutexLock lock(&mu_);
      if (auto it = binding_.find(key); it != binding_.end()) sent_to = it->second;
    }
    if (!sent_to.empty()) {
      for (const auto& c : claims) {
        if (c.state == ClaimRef::State::kDelayed && c.selected_node != sent_to) {
          {
            absl::MutexLock lock(&mu_);
            binding_.erase(key);
          }
          return Unschedulable(pod, "SchedulerError",
                               StrCat("running PreBind plugin \"VolumeBinding\": binding volumes: provisioning "
                                      "failed for PVC \"",
                                      Name(c.claim), "\""));
        }
      }
    }
  }
  for (const auto& c : claims) {
    if (c.state == ClaimRef::State::kImmediate) return prefilter_fail(kUnboundImmediate);
  }
  for (const auto& c : claims) {
    // The binder is completing a binding we asked for: wait for the claim.
    if (c.state == ClaimRef::State::kBinding) return absl::OkStatus();
  }

  // What the filters read.
  if (snap.nodes.empty()) return Unschedulable(pod, "Unschedulable", kNoNodes);
  FillSnapshot(key, pod, claims, snap);

  // Filter every node (upstream's Filter plugins).
  std::vector<NodeFit> fits;
  std::map<std::string, int> histogram;
  for (const auto& node : snap.nodes) {
    NodeFit fit = Filter(pod, claims, node, snap);
    if (fit.reasons.empty()) {
      fits.push_back(std::move(fit));
    } else {
      for (const auto& r : fit.reasons) ++histogram[r];
    }
  }
  if (fits.empty()) {
    std::vector<std::string> parts;
    for (const auto& [reason, count] : histogram) parts.push_back(StrCat(count, " ", reason));
    std::sort(parts.begin(), parts.end());  // as upstream: by the printed string
    std::string joined;
    for (const auto& p : parts) joined += (joined.empty() ? "" : ", ") + p;
    return Unschedulable(pod, "Unschedulable", StrCat("0/", snap.nodes.size(), " nodes are available: ", joined, "."));
  }

  const NodeFit& chosen = PickNode(claims, fits, snap);

  // Claims still to place: send them there and wait for the binder (the
  // claims' updates bring the pod back). Otherwise bind the pod.
  const bool all_bound =
      std::all_of(claims.begin(), claims.end(), [](const ClaimRef& c) { return c.state == ClaimRef::State::kBound; });
  if (!all_bound) return AssumeVolumes(pod, claims, chosen);
  return Bind(pod, chosen.node);
}

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
  const json* storage_class = nullptr;
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
    auto parsed = ParseNodeWeighting(Str(*storage_class, {"parameters", kNodeWeightingParameter}));
    if (parsed.ok()) {
      weighting = *parsed;
    } else {
      spdlog::warn("scheduler: storage class {}: {}; using SpaceWeighted", Name(*storage_class),
                   std::string(parsed.status().message()));
    }
    const std::string cls = Name(*storage_class), driver = Str(*storage_class, {"provisioner"});
    std::map<std::string, NodeCandidate*> by_name;
    std::vector<const NodeInfo*> infos;
    for (auto& c : candidates) {
      by_name[c.name] = &c;
      for (const auto& n : snap.nodes) {
        if (n.name == c.name) infos.push_back(&n);
      }
    }
    // Free space: the roomiest CSIStorageCapacity of the class the node reaches.
    for (const NodeInfo* n : infos) {
      NodeCandidate& c = *by_name[n->name];
      for (const auto& cap : snap.capacities) {
        if (Str(cap, {"storageClassName"}) != cls || !CapacityReaches(cap, n->labels)) continue;
        if (auto bytes = Bytes(Field(cap, "capacity"))) c.free_bytes = std::max(c.free_bytes, *bytes);
      }
    }
    // Claims already sent to a node whose volumes do not exist yet count
    // there too, so a burst of pods spreads.
    std::map<std::string, std::pair<std::string, int64_t>> inflight;  // uid → (node, request)
    for (const auto& claim : SelectCurrent(informers_.claims, "persistentvolumeclaims", [&](const json& c) {
           if (Annotation(c, kAnnSelectedNode).empty() || !Str(c, {"spec", "volumeName"}).empty() || Deleting(c)) {
             return false;
           }
           auto sc = snap.classes.find(ClaimClass(c));
           return sc != snap.classes.end() && Str(sc->second, {"provisioner"}) == driver;
         })) {
      inflight[Uid(claim)] = {Annotation(claim, kAnnSelectedNode), ClaimRequest(claim)};
    }
    // The driver's volumes on each node, counted in place (no copies: there
    // may be thousands).
    (void)informers_.volumes.Select([&](const json& pv) {
      if (Str(pv, {"spec", "csi", "driver"}) != driver || Deleting(pv)) return false;
      inflight.erase(Str(pv, {"spec", "claimRef", "uid"}));  // provisioned: counted as a volume
      const int64_t size = Bytes(Field(Field(Field(pv, "spec"), "capacity"), "storage")).value_or(0);
      const std::string on = NodeOfVolume(pv);
      if (!on.empty()) {
        if (auto it = by_name.find(on); it != by_name.end()) {
          ++it->second->volumes;
          it->second->allocated_bytes += size;
        }
        return false;
      }
      if (Field(Field(Field(pv, "spec"), "nodeAffinity"), "required").is_null()) return false;  // not node-local
      for (const NodeInfo* n : infos) {
        if (!VolumeFitsNode(pv, n->labels, n->name)) continue;
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
    auto count = [&](const json& p, int delta) {
      if (Terminal(p)) return;
      if (auto it = by_name.find(Str(p, {"spec", "nodeName"})); it != by_name.end()) it->second->volumes += delta;
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

std::string Scheduler::CollectClaims(const json& pod, std::vector<ClaimRef>& claims) {
  const std::string ns = Ns(pod);
  std::set<std::string> seen;
  const json& pod_volumes = Field(Field(pod, "spec"), "volumes");
  if (pod_volumes.is_array()) {
    for (const auto& v : pod_volumes) {
      bool ephemeral = false;
      const std::string claim_name = PodVolumeClaim(pod, v, &ephemeral);
      if (claim_name.empty() || !seen.insert(claim_name).second) continue;
      std::optional<json> claim = Current(informers_.claims, "persistentvolumeclaims", StrCat(ns, "/", claim_name));
      if (!claim) return StrCat("persistentvolumeclaim \"", claim_name, "\" not found");
      if (ephemeral && !ControlledByPod(*claim, pod)) {
        return StrCat("PVC ", ns, "/", claim_name, " was not created for pod ", ns, "/", Name(pod),
                      " (pod is not owner)");
      }
      if (Deleting(*claim)) return StrCat("persistentvolumeclaim \"", claim_name, "\" is being deleted");
      ClaimRef ref;
      ref.request = ClaimRequest(*claim);
      ref.selected_node = Annotation(*claim, kAnnSelectedNode);
      const std::string cls = ClaimClass(*claim), volume_name = Str(*claim, {"spec", "volumeName"});
      if (!cls.empty()) ref.storage_class = informers_.classes.Get("", cls);
      const bool delayed =
          ref.storage_class && Str(*ref.storage_class, {"volumeBindingMode"}) == "WaitForFirstConsumer";
      if (!volume_name.empty() && !Annotation(*claim, kAnnBindCompleted).empty()) {
        ref.state = ClaimRef::State::kBound;
        ref.pv = Current(informers_.volumes, "persistentvolumes", volume_name);
      } else if (delayed && volume_name.empty()) {
        ref.state = ClaimRef::State::kDelayed;
      } else if (delayed && !ref.selected_node.empty()) {
        ref.state = ClaimRef::State::kBinding;
      } else {
        ref.state = ClaimRef::State::kImmediate;
      }
      ref.claim = std::move(*claim);
      claims.push_back(std::move(ref));
    }
  }
  return "";
}

void Scheduler::FillSnapshot(const std::string& key, const json& pod, const std::vector<ClaimRef>& claims,
                             Snapshot& snap) {
  const std::string ns = Ns(pod);
  snap.csinodes = ByName(informers_.csinodes.List());
  snap.classes = ByName(informers_.classes.List());
  snap.csidrivers = ByName(informers_.csidrivers.List());
  snap.capacities = informers_.capacities.List();
  std::set<std::string> delayed_classes, delayed_claims;
  for (const auto& c : claims) {
    if (c.state != ClaimRef::State::kDelayed) continue;
    delayed_classes.insert(ClaimClass(c.claim));
    delayed_claims.insert(Name(c.claim));
  }
  if (!delayed_classes.empty()) {
    snap.static_candidates = SelectCurrent(informers_.volumes, "persistentvolumes", [&](const json& pv) {
      std::string cls = Str(pv, {"spec", "storageClassName"});
      if (cls.empty()) cls = Annotation(pv, "volume.beta.kubernetes.io/storage-class");
      if (!delayed_classes.contains(cls)) return false;
      const json& ref = Field(Field(pv, "spec"), "claimRef");
      return ref.is_null() || (Str(ref, {"namespace"}) == ns && delayed_claims.contains(Str(ref, {"name"})));
    });
  }
  // Volume counts for CSINode limits (upstream's NodeVolumeLimits).
  auto volume_ids = [&](const json& claim, const std::optional<json>& pv,
                        std::map<std::string, std::set<std::string>>& out) {
    if (pv) {
      const std::string driver = Str(*pv, {"spec", "csi", "driver"});
      if (!driver.empty()) out[driver].insert(Str(*pv, {"spec", "csi", "volumeHandle"}));
      return;
    }
    auto sc = snap.classes.find(ClaimClass(claim));
    if (sc == snap.classes.end()) return;
    const std::string driver = Str(sc->second, {"provisioner"});
    if (!driver.empty()) out[driver].insert(StrCat("claim:", ObjectKey(claim)));
  };
  for (const auto& c : claims) {
    volume_ids(c.claim, c.state == ClaimRef::State::kBound ? c.pv : std::nullopt, snap.new_volumes);
  }
  std::set<std::string> limited_nodes;
  for (const auto& [name, csinode] : snap.csinodes) {
    const json& drivers = Field(Field(csinode, "spec"), "drivers");
    if (!drivers.is_array()) continue;
    for (const auto& d : drivers) {
      if (Field(Field(d, "allocatable"), "count").is_number() && snap.new_volumes.contains(Str(d, {"name"}))) {
        limited_nodes.insert(name);
      }
    }
  }
  if (!limited_nodes.empty()) {
    auto count_pod = [&](const json& other, const std::string& node) {
      auto& used = snap.used[node];
      const json& vols = Field(Field(other, "spec"), "volumes");
      if (!vols.is_array()) return;
      for (const auto& v : vols) {
        bool ephemeral = false;
        const std::string claim_name = PodVolumeClaim(other, v, &ephemeral);
        if (claim_name.empty()) continue;
        std::optional<json> claim =
            Current(informers_.claims, "persistentvolumeclaims", StrCat(Ns(other), "/", claim_name));
        if (!claim) continue;
        const std::string volume_name = Str(*claim, {"spec", "volumeName"});
        std::optional<json> pv =
            volume_name.empty() ? std::nullopt : Current(informers_.volumes, "persistentvolumes", volume_name);
        volume_ids(*claim, pv, used);
      }
    };
    for (const auto& other : SelectCurrent(informers_.pods, "pods", [&](const json& p) {
           return limited_nodes.contains(Str(p, {"spec", "nodeName"})) && !Terminal(p) && Uid(p) != Uid(pod);
         })) {
      count_pod(other, Str(other, {"spec", "nodeName"}));
    }
    // Pods whose claims we sent to a node hold their slots there already
    // (upstream's assumed pods).
    std::map<std::string, std::string> assumed_pods;
    {
      absl::MutexLock lock(&mu_);
      assumed_pods = binding_;
    }
    for (const auto& [other_key, node] : assumed_pods) {
      if (other_key == key || !limited_nodes.contains(node)) continue;
      std::optional<json> other = Current(informers_.pods, "pods", other_key);
      if (other && Pending(*other)) count_pod(*other, node);
    }
  }
}

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
  for (size_t i : to_place) {
    std::vector<json> candidates;
    for (const auto& pv : snap.static_candidates) {
      if (!chosen.contains(Name(pv))) candidates.push_back(pv);
    }
    if (const json* pv = PvBinder::FindBestMatch(claims[i].claim, candidates, &node.labels_json)) {
      chosen.insert(Name(*pv));
      fit.static_bindings.emplace_back(i, *pv);
    } else {
      to_provision.push_back(i);
    }
  }
  for (size_t i : to_provision) {
    const ClaimRef& c = claims[i];
    const std::string provisioner = c.storage_class ? Str(*c.storage_class, {"provisioner"}) : "";
    if (provisioner.empty() || provisioner == kNoProvisioner ||
        !TopologyAllows(Field(*c.storage_class, "allowedTopologies"), node.labels)) {
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
      for (const auto& cap : snap.capacities) {
        if (Str(cap, {"storageClassName"}) != Name(*c.storage_class) || !CapacityReaches(cap, node.labels)) continue;
        reported = true;
        const json& max_size = Field(cap, "maximumVolumeSize");
        std::optional<int64_t> limit = Bytes(max_size.is_null() ? Field(cap, "capacity") : max_size);
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
    fit.provisions.push_back(i);
  }
  finish();
}

absl::Status Scheduler::AssumeVolumes(const json& pod, const std::vector<ClaimRef>& claims, const NodeFit& fit) {
  const std::string key = ObjectKey(pod);
  // 1. Static matches: the volume points at the claim (the PV binder
  //    finishes the binding), as upstream's bindAPIUpdate.
  for (const auto& [i, pv] : fit.static_bindings) {
    const json& claim = claims[i].claim;
    if (Str(pv, {"spec", "claimRef", "uid"}) == Uid(claim)) continue;
    auto written = Mutate(registry_, K("persistentvolumes"), "", Name(pv), apiserver::Subresource::kMain, [&](json& o) {
      const json& ref = Field(o["spec"], "claimRef");
      if (!ref.is_null()) return false;  // checked below
      o["spec"]["claimRef"] = {{"kind", "PersistentVolumeClaim"},
                               {"namespace", Ns(claim)},
                               {"name", Name(claim)},
                               {"uid", Uid(claim)},
                               {"apiVersion", "v1"},
                               {"resourceVersion", Str(claim, {"metadata", "resourceVersion"})}};
      o["metadata"]["annotations"][kAnnBoundByController] = "yes";
      return true;
    });
    if (!written.ok()) return written.status();
    if (*written) {
      Assume("persistentvolumes", **written);
    } else {
      auto current = registry_.Get(K("persistentvolumes"), "", Name(pv));
      if (!current.ok()) return current.status();
      const std::string ref_uid = Str(*current, {"spec", "claimRef", "uid"});
      const std::string ref_name = Str(*current, {"spec", "claimRef", "name"});
      if (ref_uid != Uid(claim) && !(ref_uid.empty() && ref_name == Name(claim))) {
        return absl::AbortedError(StrCat("volume ", Name(pv), " was taken by another claim meanwhile"));
      }
    }
  }
  // 2. Every claim to place names the node: the provisioner creates its
  //    volume there; our binder binds static matches once it is set.
  std::vector<size_t> to_annotate = fit.provisions;
  for (const auto& [i, pv] : fit.static_bindings) to_annotate.push_back(i);
  for (size_t i : to_annotate) {
    const json& claim = claims[i].claim;
    if (claims[i].selected_node == fit.node) continue;
    auto written = Mutate(registry_, K("persistentvolumeclaims"), Ns(claim), Name(claim), apiserver::Subresource::kMain,
                          [&](json& o) {
                            if (Uid(o) != Uid(claim) || Deleting(o)) return false;
                            if (Annotation(o, kAnnSelectedNode) == fit.node) return false;
                            o["metadata"]["annotations"][kAnnSelectedNode] = fit.node;
                            return true;
                          });
    if (!written.ok()) return written.status();
    if (*written) Assume("persistentvolumeclaims", **written);
  }
  absl::MutexLock lock(&mu_);
  binding_[key] = fit.node;
  return absl::OkStatus();
}

absl::Status Scheduler::Bind(const json& pod, const std::string& node) {
  auto bound = registry_.BindPod(Ns(pod), Name(pod), node);
  if (!bound.ok()) {
    // Someone else placed it, or it is going away: nothing left to do.
    auto current = registry_.Get(K("pods"), Ns(pod), Name(pod));
    if (current.status().code() == absl::StatusCode::kNotFound) return absl::OkStatus();
    if (current.ok() && (Deleting(*current) || !Str(*current, {"spec", "nodeName"}).empty())) return absl::OkStatus();
    return bound.status();
  }
  Assume("pods", *bound);
  {
    absl::MutexLock lock(&mu_);
    binding_.erase(ObjectKey(pod));
  }
  events_.Record(pod, "Normal", "Scheduled", StrCat("Successfully assigned ", Ns(pod), "/", Name(pod), " to ", node));
  return SetScheduledCondition(*bound, "True", "", "");
}

absl::Status Scheduler::Unschedulable(const json& pod, const std::string& reason, const std::string& message) {
  const json before = PodScheduledCondition(pod);
  const bool changed =
      Str(before, {"status"}) != "False" || Str(before, {"reason"}) != reason || Str(before, {"message"}) != message;
  if (changed) {
    BERTH_RETURN_IF_ERROR(SetScheduledCondition(pod, "False", reason, message));
    events_.Record(pod, "Warning", "FailedScheduling", message);
  }
  return absl::FailedPreconditionError(message);
}

absl::Status Scheduler::SetScheduledCondition(const json& pod, const std::string& status, const std::string& reason,
                                              const std::string& message) {
  auto written = Mutate(registry_, K("pods"), Ns(pod), Name(pod), apiserver::Subresource::kStatus, [&](json& o) {
    if (Uid(o) != Uid(pod)) return false;
    json& conditions = o["status"]["conditions"];
    if (!conditions.is_array()) conditions = json::array();
    auto it = std::find_if(conditions.begin(), conditions.end(),
                           [](const json& c) { return Str(c, {"type"}) == "PodScheduled"; });
    json cond = it == conditions.end() ? json{{"type", "PodScheduled"}} : *it;
    const json before = cond;
    if (Str(cond, {"status"}) != status) cond["lastTransitionTime"] = NowRfc3339();
    cond["status"] = status;
    if (reason.empty()) {
      cond.erase("reason");
    } else {
      cond["reason"] = reason;
    }
    if (message.empty()) {
      cond.erase("message");
    } else {
      cond["message"] = message;
    }
    if (cond == before) return false;
    if (it == conditions.end()) {
      conditions.push_back(std::move(cond));
    } else {
      *it = std::move(cond);
    }
    return true;
  });
  if (!written.ok()) {
    // The pod went away meanwhile: nothing to report on.
    return written.status().code() == absl::StatusCode::kNotFound ? absl::OkStatus() : written.status();
  }
  if (*written) Assume("pods", **written);
  return absl::OkStatus();
}

}  // namespace berth::controllers
