// The scheduler's work queue and event handlers, its assume cache, and one
// scheduling attempt (upstream's schedulingCycle): PreFilter, Filter on every
// node, Score, then Reserve/Bind. The filters are in scheduler_filters.cc,
// the scores in scheduler_scores.cc, the writes in scheduler_binding.cc.
#include "controllers/scheduling/scheduler.h"

#include "client/writes.h"
#include "controllers/node_affinity.h"

#include <algorithm>
#include <functional>
#include <set>
#include <tuple>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "api/quantity.h"
#include "api/selector.h"
#include "client/object.h"
#include "common/status.h"
#include "common/strings.h"
#include "controllers/scheduling/scheduler_internal.h"
#include "controllers/taints.h"
#include "controllers/volume/pv_binder.h"
#include "spdlog/spdlog.h"

namespace berth::controllers {

using namespace ::berth::client;  // the controllers' own client library
using namespace scheduler_internal;
using nlohmann::json;

namespace scheduler_internal {

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

int64_t StorageOf(const types::ResourceList& resources) {
  auto it = resources.find("storage");
  return it == resources.end() ? 0 : it->second.Value();
}

bool Terminal(const json& pod) {
  const std::string phase = Str(pod, {"status", "phase"});
  return phase == "Succeeded" || phase == "Failed";
}

bool Terminal(const types::Pod& pod) { return pod.status.phase == "Succeeded" || pod.status.phase == "Failed"; }

json PodScheduledCondition(const json& pod) {
  const json& conditions = Field(Field(pod, "status"), "conditions");
  if (conditions.is_array()) {
    for (const auto& c : conditions) {
      if (Str(c, {"type"}) == "PodScheduled") return c;
    }
  }
  return json();
}

std::map<std::string, json> ByName(std::vector<json> objects) {
  std::map<std::string, json> out;
  for (auto& o : objects) {
    std::string name = Name(o);
    out.emplace(std::move(name), std::move(o));
  }
  return out;
}

}  // namespace scheduler_internal

// ---- Scheduler ----

Scheduler::Scheduler(apiserver::Registry& registry, SchedulerInformers informers, Options options)
    : registry_(registry),
      informers_(informers),
      options_(std::move(options)),
      pending_index_(StrCat("scheduler ", options_.scheduler_name, ": pending pods")),
      events_(registry, options_.scheduler_name),
      queue_(WorkQueue::Options{
          .base_delay = options_.initial_backoff, .max_delay = options_.max_backoff, .clock = options_.clock}),
      rng_(options_.random_seed.value_or(0)) {}

Scheduler::~Scheduler() { Stop(); }

bool Scheduler::Pending(const json& pod) const {
  if (Deleting(pod) || Terminal(pod) || !Str(pod, {"spec", "nodeName"}).empty()) return false;
  const std::string name = Str(pod, {"spec", "schedulerName"});
  return name.empty() || name == options_.scheduler_name;
}

void Scheduler::RegisterHandlers() {
  informers_.pods.AddIndex(pending_index_, [this](const json& pod) {
    std::vector<std::string> keys;
    if (!Pending(pod)) return keys;
    keys.push_back(kAnyPending);
    const std::string ns = Ns(pod);
    for (const auto& v : Field(Field(pod, "spec"), "volumes")) {
      if (std::string claim = PodVolumeClaim(pod, v); !claim.empty()) keys.push_back(StrCat(ns, "/", claim));
    }
    return keys;
  });
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
              RequeueAllIfAnyPending();
            }
          },
      .on_delete =
          [this](const json& o) {
            queue_.Add(ObjectKey(o));  // forgets what we kept about it
            if (!Str(o, {"spec", "nodeName"}).empty()) RequeueAllIfAnyPending();
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
        .on_add = [this](const json&) { RequeueAllIfAnyPending(); },
        .on_update =
            [this](const json& before, const json& after) {
              if (ResourceVersion(before) != ResourceVersion(after)) RequeueAllIfAnyPending();
            },
        .on_delete = [this](const json&) { RequeueAllIfAnyPending(); },
    });
  }
}

void Scheduler::Start() {
  StartWorkers(workers_, options_.workers, queue_, "scheduler: pod",
               [this](const std::string& key) { return SyncPod(key); });
}

void Scheduler::Stop() {
  queue_.ShutDown();
  for (auto& w : workers_) w.join();
  workers_.clear();
}

void Scheduler::RequeuePending() {
  for (const std::string& key : informers_.pods.KeysByIndex(pending_index_, kAnyPending)) queue_.Add(key);
}

void Scheduler::RequeueAllIfAnyPending() {
  if (informers_.pods.CountByIndex(pending_index_, kAnyPending) > 0) queue_.Add(kRequeueAll);
}

void Scheduler::RequeuePodsUsing(const json& claim) {
  for (const std::string& key : informers_.pods.KeysByIndex(pending_index_, StrCat(Ns(claim), "/", Name(claim)))) {
    queue_.Add(key);
  }
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

// ---- Placements ----

void Scheduler::AssumePlacement(const std::string& uid, Placement placement) {
  absl::MutexLock lock(&mu_);
  placements_[uid] = std::move(placement);
}

void Scheduler::ForgetPlacement(const std::string& uid) {
  absl::MutexLock lock(&mu_);
  placements_.erase(uid);
}

void Scheduler::ForgetPlacements(const std::string& pod_key) {
  absl::MutexLock lock(&mu_);
  std::erase_if(placements_, [&](const auto& entry) { return entry.second.pod == pod_key; });
}

void Scheduler::CountPlacements(Snapshot& snap) {
  const absl::Time now = (options_.clock != nullptr ? *options_.clock : RealClock()).Now();
  std::map<std::string, const NodeInfo*> nodes;
  for (const auto& n : snap.nodes) nodes.emplace(n.name, &n);
  // Each capacity object's class, version and node selector, parsed once.
  struct CapacityView {
    std::string storage_class;
    int64_t version = 0;
    std::optional<api::LabelSelector> selector;  // none: reaches no node
    bool Reaches(const NodeInfo* node) const { return node != nullptr && selector && selector->Matches(node->labels); }
  };
  std::vector<CapacityView> capacities;
  for (const auto& cap : snap.capacities) {
    CapacityView view;
    view.storage_class = Str(cap, {"storageClassName"});
    view.version = ResourceVersion(cap);
    if (const json& topology = Field(cap, "nodeTopology"); !topology.is_null()) {
      if (auto selector = api::LabelSelector::FromJson(topology); selector.ok()) view.selector = std::move(*selector);
    }
    capacities.push_back(std::move(view));
  }
  auto node_of = [&](const std::string& name) -> const NodeInfo* {
    auto it = nodes.find(name);
    return it == nodes.end() ? nullptr : it->second;
  };

  // Claims that name a node and have no volume yet but that we did not
  // place: sent there before a restart (or by someone else). Their space is
  // as much in flight as ours. Not those whose PV exists: the binder is
  // about to bind them, and the PV counts already.
  std::map<std::string, Placement> adopted;
  for (const auto& c : informers_.claims.Select([](const json& c) {
         return !Annotation(c, kAnnSelectedNode).empty() && Str(c, {"spec", "volumeName"}).empty() && !Deleting(c);
       })) {
    const std::string uid = Uid(c);
    if (informers_.volumes.GetSharedByKey(StrCat("pvc-", uid)) != nullptr) continue;
    const std::string cls = ClaimClass(c);
    auto sc = snap.classes.find(cls);
    Placement p;
    p.claim = ObjectKey(c);
    p.node = Annotation(c, kAnnSelectedNode);
    p.storage_class = cls;
    p.driver = sc == snap.classes.end() ? "" : Str(sc->second, {"provisioner"});
    p.bytes = Bytes(Field(Field(Field(Field(c, "spec"), "resources"), "requests"), "storage")).value_or(0);
    p.claim_version = ResourceVersion(c);
    adopted.emplace(uid, std::move(p));
  }
  std::map<std::string, Placement> placements;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [uid, p] : adopted) placements_.try_emplace(uid, std::move(p));
    placements = placements_;
  }

  std::vector<std::string> forget;
  std::map<std::string, std::pair<int64_t, absl::Time>> volumes_seen;  // uid → the PV's version, when
  for (auto& entry : placements) {
    // (named: a [&] lambda below reads them; clang 14 cannot capture a binding)
    const std::string& uid = entry.first;
    Placement& p = entry.second;
    std::shared_ptr<const json> claim = informers_.claims.GetSharedByKey(p.claim);
    if (claim == nullptr) {  // deleted (the cache held it when we placed it)
      forget.push_back(uid);
      continue;
    }
    std::string volume_name;
    if (ResourceVersion(*claim) >= p.claim_version) {  // else the cache has not seen our write yet
      if (Uid(*claim) != uid || Deleting(*claim) || Annotation(*claim, kAnnSelectedNode) != p.node) {
        forget.push_back(uid);  // gone, or the provisioner gave up on the node
        continue;
      }
      volume_name = Str(*claim, {"spec", "volumeName"});
    }
    if (p.volume_version == 0) {
      std::shared_ptr<const json> pv =
          informers_.volumes.GetSharedByKey(volume_name.empty() ? StrCat("pvc-", uid) : volume_name);
      if (pv != nullptr && Str(*pv, {"spec", "claimRef", "uid"}) == uid) {
        p.volume_version = ResourceVersion(*pv);
        p.volume_seen = now;
        volumes_seen[uid] = {p.volume_version, now};
      }
    }
    if (p.volume_version != 0) {
      // Provisioned: counted against capacity only while some object of
      // its class on its node predates the volume.
      const NodeInfo* node = node_of(p.node);
      const bool lagging =
          now - p.volume_seen < options_.capacity_catch_up &&
          std::any_of(capacities.begin(), capacities.end(), [&](const CapacityView& cap) {
            return cap.storage_class == p.storage_class && cap.version <= p.volume_version && cap.Reaches(node);
          });
      if (!lagging) {
        forget.push_back(uid);
        continue;
      }
    }
    snap.in_flight[uid] = {.node = p.node,
                           .storage_class = p.storage_class,
                           .driver = p.driver,
                           .bytes = p.bytes,
                           .provisioned = p.volume_version != 0,
                           .volume_version = p.volume_version};
  }
  if (!forget.empty() || !volumes_seen.empty()) {
    absl::MutexLock lock(&mu_);
    for (const auto& uid : forget) placements_.erase(uid);
    for (const auto& [uid, seen] : volumes_seen) {
      if (auto it = placements_.find(uid); it != placements_.end() && it->second.volume_version == 0) {
        std::tie(it->second.volume_version, it->second.volume_seen) = seen;
      }
    }
  }

  snap.capacity_in_flight.assign(snap.capacities.size(), 0);
  for (size_t i = 0; i < capacities.size(); ++i) {
    for (const auto& [uid, f] : snap.in_flight) {
      if (f.storage_class != capacities[i].storage_class) continue;
      if (f.provisioned && capacities[i].version > f.volume_version) continue;  // written since: reflects it
      if (capacities[i].Reaches(node_of(f.node))) snap.capacity_in_flight[i] += f.bytes;
    }
  }
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
          ForgetPlacements(key);  // upstream's RevertAssumedPodVolumes; claims still sent count again as adopted
          return Unschedulable(pod, "SchedulerError",
                               StrCat("running PreBind plugin \"VolumeBinding\": binding volumes: provisioning "
                                      "failed for PVC \"",
                                      c.claim.metadata.name, "\""));
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

// ---- PreFilter: the pod's claims and the state the filters read ----

std::string Scheduler::CollectClaims(const json& pod, std::vector<ClaimRef>& claims) {
  const std::string ns = Ns(pod);
  std::set<std::string> seen;
  const json& pod_volumes = Field(Field(pod, "spec"), "volumes");
  if (pod_volumes.is_array()) {
    for (const auto& v : pod_volumes) {
      bool ephemeral = false;
      const std::string claim_name = PodVolumeClaim(pod, v, &ephemeral);
      if (claim_name.empty() || !seen.insert(claim_name).second) continue;
      std::optional<json> claim_json =
          Current(informers_.claims, "persistentvolumeclaims", StrCat(ns, "/", claim_name));
      if (!claim_json) return StrCat("persistentvolumeclaim \"", claim_name, "\" not found");
      if (ephemeral && !ControlledByPod(*claim_json, pod)) {
        return StrCat("PVC ", ns, "/", claim_name, " was not created for pod ", ns, "/", Name(pod),
                      " (pod is not owner)");
      }
      absl::StatusOr<types::PersistentVolumeClaim> claim = DecodeAs<types::PersistentVolumeClaim>(*claim_json);
      if (!claim.ok()) return std::string(claim.status().message());
      if (claim->metadata.Deleting()) return StrCat("persistentvolumeclaim \"", claim_name, "\" is being deleted");
      ClaimRef ref;
      ref.request = StorageOf(claim->spec.resources.requests);
      ref.selected_node = claim->metadata.Annotation(kAnnSelectedNode);
      const std::string cls = types::ClaimClass(*claim), volume_name = claim->spec.volume_name;
      if (std::shared_ptr<const json> sc = cls.empty() ? nullptr : informers_.classes.GetSharedByKey(cls)) {
        absl::StatusOr<types::StorageClass> typed = DecodeAs<types::StorageClass>(*sc);
        if (!typed.ok()) return std::string(typed.status().message());
        ref.storage_class = std::move(*typed);
      }
      const bool delayed = ref.storage_class && ref.storage_class->WaitForFirstConsumer();
      if (!volume_name.empty() && !claim->metadata.Annotation(kAnnBindCompleted).empty()) {
        ref.state = ClaimRef::State::kBound;
        if (std::optional<json> pv = Current(informers_.volumes, "persistentvolumes", volume_name)) {
          absl::StatusOr<types::PersistentVolume> typed = DecodeAs<types::PersistentVolume>(*pv);
          if (!typed.ok()) return std::string(typed.status().message());
          ref.pv = std::move(*typed);
        }
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
  // Placements weigh only where a claim is still to place: a pod whose
  // claims are sent already goes where they name (three attempts of four in
  // a burst).
  if (std::any_of(claims.begin(), claims.end(),
                  [](const ClaimRef& c) { return c.state == ClaimRef::State::kDelayed && c.selected_node.empty(); })) {
    CountPlacements(snap);
  }
  std::set<std::string> delayed_classes, delayed_claims;
  for (const auto& c : claims) {
    if (c.state != ClaimRef::State::kDelayed) continue;
    delayed_classes.insert(types::ClaimClass(c.claim));
    delayed_claims.insert(c.claim.metadata.name);
  }
  if (!delayed_classes.empty()) {
    std::vector<json> candidates = SelectCurrent(informers_.volumes, "persistentvolumes", [&](const json& pv) {
      if (!delayed_classes.contains(client::VolumeClass(pv))) return false;
      const json& ref = Field(Field(pv, "spec"), "claimRef");
      return ref.is_null() || (Str(ref, {"namespace"}) == ns && delayed_claims.contains(Str(ref, {"name"})));
    });
    for (const auto& pv : candidates) {
      absl::StatusOr<types::PersistentVolume> typed = DecodeAs<types::PersistentVolume>(pv);
      if (typed.ok()) {
        snap.static_candidates.push_back(std::move(*typed));
      } else {
        spdlog::warn("scheduler: skipping a volume: {}", typed.status().ToString());
      }
    }
  }
  // Volume counts for CSINode limits (upstream's NodeVolumeLimits).
  auto volume_ids = [&](const types::PersistentVolumeClaim& claim, const types::PersistentVolume* pv,
                        std::map<std::string, std::set<std::string>>& out) {
    if (pv != nullptr) {
      if (pv->spec.csi && !pv->spec.csi->driver.empty()) out[pv->spec.csi->driver].insert(pv->spec.csi->volume_handle);
      return;
    }
    auto sc = snap.classes.find(types::ClaimClass(claim));
    if (sc == snap.classes.end()) return;
    const std::string driver = Str(sc->second, {"provisioner"});
    if (!driver.empty()) out[driver].insert(StrCat("claim:", KeyOf(claim.metadata)));
  };
  for (const auto& c : claims) {
    volume_ids(c.claim, c.state == ClaimRef::State::kBound && c.pv ? &*c.pv : nullptr, snap.new_volumes);
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
        std::optional<json> claim_json =
            Current(informers_.claims, "persistentvolumeclaims", StrCat(Ns(other), "/", claim_name));
        if (!claim_json) continue;
        absl::StatusOr<types::PersistentVolumeClaim> claim = DecodeAs<types::PersistentVolumeClaim>(*claim_json);
        if (!claim.ok()) continue;
        const std::string& volume_name = claim->spec.volume_name;
        std::optional<json> pv_json =
            volume_name.empty() ? std::nullopt : Current(informers_.volumes, "persistentvolumes", volume_name);
        std::optional<types::PersistentVolume> pv;
        if (pv_json) {
          absl::StatusOr<types::PersistentVolume> typed = DecodeAs<types::PersistentVolume>(*pv_json);
          if (!typed.ok()) continue;
          pv = std::move(*typed);
        }
        volume_ids(*claim, pv ? &*pv : nullptr, used);
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

}  // namespace berth::controllers
