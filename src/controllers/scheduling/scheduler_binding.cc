// The writes of a scheduling decision: the VolumeBinding plugin's
// Reserve/PreBind (pre-binding static volumes, naming the selected node on
// claims to provision), the pod's binding, and its PodScheduled condition.
#include "controllers/scheduling/scheduler.h"

#include <algorithm>
#include <functional>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "client/object.h"
#include "client/writes.h"
#include "common/status.h"
#include "common/strings.h"
#include "controllers/scheduling/scheduler_internal.h"
#include "controllers/volume/pv_binder.h"

namespace berth::controllers {

using namespace ::berth::client;  // the controllers' own client library
using namespace scheduler_internal;
using nlohmann::json;

namespace scheduler_internal {

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

}  // namespace scheduler_internal

// ---- Reserve and Bind: the writes of a placement ----

absl::Status Scheduler::AssumeVolumes(const json& pod, const std::vector<ClaimRef>& claims, const NodeFit& fit) {
  const std::string key = ObjectKey(pod);
  // 1. Static matches: the volume points at the claim (the PV binder
  //    finishes the binding), as upstream's bindAPIUpdate.
  for (const auto& [i, pv] : fit.static_bindings) {
    const types::ObjectMeta& claim = claims[i].claim.metadata;
    if (pv.spec.claim_ref && pv.spec.claim_ref->uid == claim.uid) continue;
    const std::string& pv_name = pv.metadata.name;
    auto written = Mutate(registry_, K("persistentvolumes"), "", pv_name, apiserver::Subresource::kMain, [&](json& o) {
      const json& ref = Field(o["spec"], "claimRef");
      if (!ref.is_null()) return false;  // checked below
      o["spec"]["claimRef"] = {{"kind", "PersistentVolumeClaim"},
                               {"namespace", claim.namespace_},
                               {"name", claim.name},
                               {"uid", claim.uid},
                               {"apiVersion", "v1"},
                               {"resourceVersion", claim.resource_version}};
      o["metadata"]["annotations"][kAnnBoundByController] = "yes";
      return true;
    });
    if (!written.ok()) return written.status();
    if (*written) {
      Assume("persistentvolumes", **written);
    } else {
      auto current = registry_.Get(K("persistentvolumes"), "", pv_name);
      if (!current.ok()) return current.status();
      const std::string ref_uid = Str(*current, {"spec", "claimRef", "uid"});
      const std::string ref_name = Str(*current, {"spec", "claimRef", "name"});
      if (ref_uid != claim.uid && !(ref_uid.empty() && ref_name == claim.name)) {
        return absl::AbortedError(StrCat("volume ", pv_name, " was taken by another claim meanwhile"));
      }
    }
  }
  // 2. Every claim to place names the node: the provisioner creates its
  //    volume there; our binder binds static matches once it is set.
  std::vector<size_t> to_annotate = fit.provisions;
  for (const auto& [i, pv] : fit.static_bindings) to_annotate.push_back(i);
  for (size_t i : to_annotate) {
    const types::ObjectMeta& claim = claims[i].claim.metadata;
    if (claims[i].selected_node == fit.node) continue;
    // A claim to provision counts on the node from now on (upstream's
    // AssumePodVolumes before BindPodVolumes), so the next pod's attempt
    // sees it whatever the informers show.
    const bool provision = std::find(fit.provisions.begin(), fit.provisions.end(), i) != fit.provisions.end();
    if (provision) {
      const std::optional<types::StorageClass>& sc = claims[i].storage_class;
      Placement placement;
      placement.claim = KeyOf(claim);
      placement.pod = key;
      placement.node = fit.node;
      placement.storage_class = sc ? sc->metadata.name : "";
      placement.driver = sc ? sc->provisioner : "";
      placement.bytes = claims[i].request;
      AssumePlacement(claim.uid, std::move(placement));
    }
    auto written = Mutate(registry_, K("persistentvolumeclaims"), claim.namespace_, claim.name,
                          apiserver::Subresource::kMain, [&](json& o) {
                            if (Uid(o) != claim.uid || Deleting(o)) return false;
                            if (Annotation(o, kAnnSelectedNode) == fit.node) return false;
                            o["metadata"]["annotations"][kAnnSelectedNode] = fit.node;
                            return true;
                          });
    if (!written.ok()) {
      // Not sent: forgotten, and the pod is retried (claims written before
      // this one name the node and stay counted).
      if (provision) ForgetPlacement(claim.uid);
      return written.status();
    }
    if (*written) {
      Assume("persistentvolumeclaims", **written);
      absl::MutexLock lock(&mu_);
      if (auto it = placements_.find(claim.uid); it != placements_.end()) {
        it->second.claim_version = ResourceVersion(**written);
      }
    }
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
