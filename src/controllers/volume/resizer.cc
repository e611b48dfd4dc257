#include "controllers/volume/resizer.h"

#include <algorithm>

#include "api/quantity.h"
#include "api/types/core.h"
#include "client/capability.h"
#include "client/object.h"
#include "client/secrets.h"
#include "client/typed.h"
#include "client/writes.h"
#include "common/status.h"
#include "common/strings.h"
#include "controllers/node_affinity.h"
#include "csi/driver_client.h"
#include "csi/grpc_status.h"
#include "spdlog/spdlog.h"

namespace berth::controllers {

using namespace ::berth::client;  // the controllers' own client library
namespace {

using nlohmann::json;
using types::PersistentVolume;
using types::PersistentVolumeClaim;
using types::PersistentVolumeClaimStatus;

// The "storage" entry of a resource list.
std::optional<api::Quantity> Storage(const types::ResourceList& resources) {
  auto it = resources.find("storage");
  if (it == resources.end()) return std::nullopt;
  return it->second;
}

// Sets (or with status "" removes) a claim condition of `type`.
void SetCondition(PersistentVolumeClaimStatus& status, const std::string& type, const std::string& value,
                  const std::string& message = "") {
  std::vector<types::PersistentVolumeClaimCondition> conditions;
  std::optional<types::PersistentVolumeClaimCondition> same;  // of `type` with status `value`
  for (const auto& c : status.conditions) {
    if (c.type != type) {
      conditions.push_back(c);
    } else if (c.status == value) {
      same = c;
    }
  }
  if (!value.empty()) {
    // An unchanged condition keeps its timestamps: rewriting them would turn
    // every retry into a write and a watch event (a hot loop).
    types::PersistentVolumeClaimCondition c;
    if (same) {
      c = *same;
    } else {
      c.type = type;
      c.status = value;
      c.last_transition_time = NowRfc3339();
    }
    if (!message.empty()) c.message = message;
    conditions.push_back(std::move(c));
  }
  status.conditions = std::move(conditions);
}

bool HasCondition(const PersistentVolumeClaim& claim, const std::string& type) {
  return std::any_of(
      claim.status.conditions.begin(), claim.status.conditions.end(),
      [&](const types::PersistentVolumeClaimCondition& c) { return c.type == type && c.status == "True"; });
}

constexpr char kResizePendingMessage[] =
    "Waiting for user to (re-)start a pod to finish file system resize of volume on node.";

// The claim's resize conditions, for a new step: `keep` keeps the others.
void ClearResizeConditions(PersistentVolumeClaimStatus& status) {
  for (const char* type : {"Resizing", "FileSystemResizePending", "ControllerResizeError", "NodeResizeError"}) {
    SetCondition(status, type, "");
  }
}

void SetResizeStatus(PersistentVolumeClaimStatus& status, const std::string& value) {
  if (value.empty()) {
    status.allocated_resource_statuses.erase("storage");
  } else {
    status.allocated_resource_statuses["storage"] = value;
  }
}

// Writes the claim's status through `edit` when it changes it.
absl::Status EditClaimStatus(apiserver::Registry& registry, const PersistentVolumeClaim& claim,
                             const std::function<void(PersistentVolumeClaimStatus&)>& edit) {
  return MutateTyped<PersistentVolumeClaim>(registry, K("persistentvolumeclaims"), claim.metadata.namespace_,
                                            claim.metadata.name, claim.metadata.uid, apiserver::Subresource::kStatus,
                                            [&](PersistentVolumeClaim& fresh) {
                                              const PersistentVolumeClaimStatus before = fresh.status;
                                              edit(fresh.status);
                                              return !(fresh.status == before);
                                            });
}

}  // namespace

Resizer::Resizer(apiserver::Registry& registry, DriverDirectory& drivers, Informer& claims, Informer& volumes,
                 Options options)
    : registry_(registry),
      drivers_(drivers),
      claims_(claims),
      volumes_(volumes),
      options_(std::move(options)),
      own_monitor_(options_.monitor == nullptr ? std::make_unique<DriverMonitor>(drivers) : nullptr),
      monitor_(options_.monitor != nullptr ? *options_.monitor : *own_monitor_),
      clock_(options_.clock != nullptr ? *options_.clock : RealClock()),
      events_(registry, StrCat(options_.driver, "_berth-resizer")),
      // external-resizer's --retry-interval-start / --retry-interval-max.
      queue_(WorkQueue::Options{.base_delay = absl::Seconds(1), .max_delay = absl::Minutes(5)}) {}

Resizer::~Resizer() { Stop(); }

bool ClaimChangeConcernsResize(const json& before, const json& after) {
  if (Str(before, {"metadata", "resourceVersion"}) == Str(after, {"metadata", "resourceVersion"})) return true;
  const json &spec_before = Field(before, "spec"), &spec_after = Field(after, "spec");
  const json &status_before = Field(before, "status"), &status_after = Field(after, "status");
  return FieldAt(spec_before, {"resources", "requests", "storage"}) !=
             FieldAt(spec_after, {"resources", "requests", "storage"}) ||
         Field(spec_before, "volumeName") != Field(spec_after, "volumeName") ||
         Field(status_before, "phase") != Field(status_after, "phase") ||
         FieldAt(status_before, {"capacity", "storage"}) != FieldAt(status_after, {"capacity", "storage"}) ||
         Field(status_before, "allocatedResources") != Field(status_after, "allocatedResources") ||
         Field(status_before, "allocatedResourceStatuses") != Field(status_after, "allocatedResourceStatuses");
}

void Resizer::RegisterHandlers() {
  claims_.AddHandlers({
      // Only a Bound claim asking more than its capacity is queued (one
      // bound later comes back as an update: its phase changes); every
      // claim binds asking no more, and berth up runs a resizer per driver.
      .on_add =
          [this](const json& o) {
            if (std::string key = ObjectKey(o); ClaimNeedsSync(o, key)) queue_.Add(key);
          },
      .on_update =
          [this](const json& before, const json& after) {
            if (!ClaimChangeConcernsResize(before, after)) return;
            if (std::string key = ObjectKey(after); ClaimNeedsSync(after, key)) queue_.Add(key);
          },
      // What was remembered of a deleted claim goes with it.
      .on_delete =
          [this](const json& o) {
            const std::string key = ObjectKey(o);
            queue_.Forget(key);
            absl::MutexLock lock(&mu_);
            infeasible_since_.erase(key);
            final_error_.erase(key);
          },
  });
}

void Resizer::Start() {
  StartWorkers(workers_, options_.workers, queue_, StrCat("resizer ", options_.driver, ": claim"),
               ParkAware([this](const std::string& k) { return SyncClaim(k); }));
}

void Resizer::Stop() {
  queue_.ShutDown();
  for (auto& w : workers_) w.join();
  workers_.clear();
  monitor_.Unpark(queue_);
}

absl::Status Resizer::Expand(const PersistentVolume& pv, const std::string& key, int64_t bytes, int64_t* new_bytes,
                             bool* node_expansion) {
  const std::string node = VolumeNode(registry_, pv);
  *new_bytes = bytes;
  *node_expansion = true;
  auto can_expand = monitor_.ControllerHasCapability(options_.driver, node,
                                                     ::csi::v1::ControllerServiceCapability::RPC::EXPAND_VOLUME);
  if (!can_expand.ok()) {
    if (IsNotAFailure(can_expand.status())) monitor_.Park(options_.driver, node, queue_, key);
    return can_expand.status();
  }
  if (!*can_expand) return absl::OkStatus();  // the node grows it
  ::csi::v1::ControllerExpandVolumeRequest req;
  req.set_volume_id(pv.spec.csi->volume_handle);
  req.mutable_capacity_range()->set_required_bytes(bytes);
  auto modes = monitor_.ControllerSingleNodeModes(options_.driver, node);
  if (!modes.ok()) {
    if (IsNotAFailure(modes.status())) monitor_.Park(options_.driver, node, queue_, key);
    return modes.status();
  }
  *req.mutable_volume_capability() = PvVolumeCapability(pv, *modes);
  // A secret the PV names but that cannot be read stops the call (it was
  // once skipped, and the driver called without its credentials).
  BERTH_ASSIGN_OR_RETURN(SecretData secrets,
                         PvSecret(registry_, pv.spec.csi->controller_expand_secret_ref, "controllerExpandSecretRef"));
  ::csi::v1::ControllerExpandVolumeResponse resp;
  absl::Status st = monitor_.Call(options_.driver, node, [&](const csi::DriverClient& csi) {
    auto expanded = csi.ControllerExpandVolume(req, {.timeout = options_.rpc_timeout, .secrets = secrets});
    if (expanded.ok()) resp = std::move(*expanded);
    return expanded.status();
  });
  if (IsNotAFailure(st)) monitor_.Park(options_.driver, node, queue_, key);
  if (!st.ok()) return st;
  *new_bytes = std::max<int64_t>(resp.capacity_bytes(), bytes);
  *node_expansion = resp.node_expansion_required();
  return absl::OkStatus();
}

bool Resizer::ClaimNeedsSync(const json& claim, const std::string& key) {
  if (Str(claim, {"status", "phase"}) != "Bound") return false;
  // Nothing asked — the request within the capacity the status reports —
  // is told from the raw claim, without the fresh reads of SyncClaim: a
  // request made since comes back with the claim's update.
  auto size = [&](std::initializer_list<std::string_view> path) -> std::optional<api::Quantity> {
    auto q = api::Quantity::Parse(Str(claim, path));
    return q.ok() ? std::optional<api::Quantity>(*q) : std::nullopt;
  };
  const std::optional<api::Quantity> asked = size({"spec", "resources", "requests", "storage"});
  const std::optional<api::Quantity> has = size({"status", "capacity", "storage"});
  if (asked && has && *has >= *asked) {
    absl::MutexLock lock(&mu_);
    infeasible_since_.erase(key);
    final_error_.erase(key);
    return false;
  }
  return true;
}

absl::Status Resizer::SyncClaim(const std::string& key) {
  std::shared_ptr<const json> cached = claims_.GetSharedByKey(key);
  if (!cached || !ClaimNeedsSync(*cached, key)) return absl::OkStatus();
  // Decide on fresh copies: the claim and volume caches may lag each other
  // (a volume already grown next to a claim not yet marked pending).
  auto [ns, name] = SplitKey(key);
  absl::StatusOr<PersistentVolumeClaim> fresh_claim =
      GetTyped<PersistentVolumeClaim>(registry_, K("persistentvolumeclaims"), ns, name);
  if (!fresh_claim.ok()) {
    return fresh_claim.status().code() == absl::StatusCode::kNotFound ? absl::OkStatus() : fresh_claim.status();
  }
  const PersistentVolumeClaim& claim = *fresh_claim;
  const std::string& pv_name = claim.spec.volume_name;
  if (pv_name.empty() || !volumes_.GetSharedByKey(pv_name)) return absl::OkStatus();
  absl::StatusOr<PersistentVolume> fresh_pv =
      GetTyped<PersistentVolume>(registry_, K("persistentvolumes"), "", pv_name);
  if (fresh_pv.status().code() == absl::StatusCode::kNotFound) return absl::OkStatus();
  if (!fresh_pv.ok()) return fresh_pv.status();
  const PersistentVolume& pv = *fresh_pv;
  if (!pv.spec.csi || pv.spec.csi->driver != options_.driver) return absl::OkStatus();
  // Only the volume that is really this claim's (not one that names it by
  // name only, or an older claim of the same name).
  if (!pv.spec.claim_ref || pv.spec.claim_ref->uid != claim.metadata.uid) return absl::OkStatus();
  const std::optional<api::Quantity> spec_size = Storage(claim.spec.resources.requests);
  const std::optional<api::Quantity> status_size = Storage(claim.status.capacity);
  const std::optional<api::Quantity> pv_size = Storage(pv.spec.capacity);
  if (!spec_size || !pv_size) return absl::OkStatus();
  if (status_size && *status_size >= *spec_size) {
    // Nothing asked (or no more: an infeasible request the user took back).
    {
      absl::MutexLock lock(&mu_);
      infeasible_since_.erase(key);
      final_error_.erase(key);
    }
    return absl::OkStatus();
  }
  auto resize_it = claim.status.allocated_resource_statuses.find("storage");
  const std::string resize_status =
      resize_it == claim.status.allocated_resource_statuses.end() ? "" : resize_it->second;
  const std::optional<api::Quantity> allocated = Storage(claim.status.allocated_resources);
  bool had_final_error, in_slow_set;
  absl::Duration slow_remaining = absl::ZeroDuration();
  {
    absl::MutexLock lock(&mu_);
    had_final_error = final_error_.contains(key);
    auto it = infeasible_since_.find(key);
    if (it != infeasible_since_.end() && clock_.Now() - it->second >= options_.infeasible_retry) {
      infeasible_since_.erase(it);  // waited long enough: one more try
      it = infeasible_since_.end();
    }
    // (After a restart the set is empty: the recorded size is tried once
    // more, as upstream.)
    in_slow_set = it != infeasible_since_.end();
    if (in_slow_set) slow_remaining = it->second + options_.infeasible_retry - clock_.Now();
  }
  // Which size to ask for (external-resizer's expandAndRecover).
  api::Quantity new_size = *spec_size;
  if (*pv_size < *spec_size) {
    if (resize_status == "NodeResizeInfeasible" || resize_status == "NodeResizePending" ||
        resize_status == "NodeResizeInProgress") {
      if (allocated) new_size = *allocated;
      // Let a node expansion that is under way finish first.
      if (resize_status != "NodeResizeInfeasible" && *pv_size >= new_size) return absl::OkStatus();
    } else if (resize_status == "ControllerResizeInProgress") {
      // Outcome unknown: the same size again, unless it failed for good.
      if (!had_final_error && allocated) new_size = *allocated;
    }
  } else {
    if (resize_status == "NodeResizePending" || resize_status == "NodeResizeInProgress") {
      return absl::OkStatus();  // the node's turn
    }
    if (resize_status == "NodeResizeInfeasible" || resize_status == "ControllerResizeInProgress" ||
        resize_status == "ControllerResizeInfeasible") {
      if (allocated) new_size = *allocated;
    } else if (allocated) {
      new_size = *allocated;
    } else if (HasCondition(claim, "FileSystemResizePending")) {
      return absl::OkStatus();
    }
  }
  const bool same_size = allocated && *allocated == new_size;
  if (same_size && in_slow_set) {
    // Infeasible at this size: not again before the slow retry.
    queue_.AddAfter(key, slow_remaining);
    return absl::OkStatus();
  }
  BERTH_RETURN_IF_ERROR(EditClaimStatus(registry_, claim, [&](PersistentVolumeClaimStatus& s) {
    if (!same_size) ClearResizeConditions(s);  // a new size: earlier errors are over
    SetCondition(s, "Resizing", "True");
    s.allocated_resources["storage"] = new_size;
    SetResizeStatus(s, "ControllerResizeInProgress");
  }));
  const json claim_ref = IdentityOf(claim);  // names the claim in events
  events_.Record(claim_ref, "Normal", "Resizing", StrCat("External resizer is resizing volume ", pv_name));
  int64_t new_bytes = 0;
  bool node_expansion = true;
  absl::Status st = Expand(pv, key, new_size.Value(), &new_bytes, &node_expansion);
  if (IsNotAFailure(st)) return st;  // waits for the driver; the status says in progress
  if (!st.ok()) {
    events_.Record(
        claim_ref, "Warning", "VolumeResizeFailed",
        StrCat("resize volume \"", pv_name, "\" by resizer \"", options_.driver, "\" failed: ", st.message()));
    const bool infeasible = csi::IsInfeasibleError(st);
    {
      absl::MutexLock lock(&mu_);
      if (csi::IsFinalError(st) || infeasible) final_error_.insert(key);
      if (infeasible) {
        infeasible_since_[key] = clock_.Now();
      } else {
        infeasible_since_.erase(key);
        if (!csi::IsFinalError(st)) final_error_.erase(key);
      }
    }
    if (csi::IsFinalError(st) || infeasible) {
      absl::Status written = EditClaimStatus(registry_, claim, [&](PersistentVolumeClaimStatus& s) {
        SetCondition(s, "Resizing", "");
        SetCondition(s, "ControllerResizeError", "True", StrCat("failed to expand pvc with ", st.message()));
        if (infeasible) SetResizeStatus(s, "ControllerResizeInfeasible");
      });
      if (!written.ok()) return written;
      if (infeasible) {
        // Not a failure to back off: the slow retry decides when it is
        // tried again (or the user lowers the request).
        queue_.AddAfter(key, options_.infeasible_retry);
        return absl::OkStatus();
      }
    }
    return st;
  }
  {
    absl::MutexLock lock(&mu_);
    final_error_.erase(key);
    infeasible_since_.erase(key);
  }
  const api::Quantity grown = api::Quantity::FromBytes(new_bytes);
  BERTH_RETURN_IF_ERROR(MutateTyped<PersistentVolume>(registry_, K("persistentvolumes"), "", pv_name, pv.metadata.uid,
                                                      apiserver::Subresource::kMain, [&](PersistentVolume& o) {
                                                        auto have = Storage(o.spec.capacity);
                                                        if (have && *have >= grown) return false;
                                                        o.spec.capacity["storage"] = grown;
                                                        return true;
                                                      }));
  if (node_expansion) {
    events_.Record(claim_ref, "Normal", "FileSystemResizeRequired", "Require file system resize of volume on node");
    return EditClaimStatus(registry_, claim, [&](PersistentVolumeClaimStatus& s) {
      ClearResizeConditions(s);
      SetCondition(s, "FileSystemResizePending", "True", kResizePendingMessage);
      SetResizeStatus(s, "NodeResizePending");
    });
  }
  events_.Record(claim_ref, "Normal", "VolumeResizeSuccessful", "Resize volume succeeded");
  return EditClaimStatus(registry_, claim, [&](PersistentVolumeClaimStatus& s) {
    ClearResizeConditions(s);
    s.capacity["storage"] = grown;
    SetResizeStatus(s, "");
  });
}

}  // namespace berth::controllers
