#include "controllers/volume/resizer.h"

#include <algorithm>

#include "api/quantity.h"
#include "client/capability.h"
#include "client/object.h"
#include "client/secrets.h"
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

std::optional<api::Quantity> Size(const std::string& text) {
  auto q = api::Quantity::Parse(text);
  if (!q.ok()) return std::nullopt;
  return *q;
}

// Sets (or with status "" removes) a claim condition of `type`.
void SetCondition(json& status, const std::string& type, const std::string& value, const std::string& message = "") {
  json conditions = json::array();
  if (status.contains("conditions") && status["conditions"].is_array()) {
    for (const auto& c : status["conditions"]) {
      if (Str(c, {"type"}) != type) conditions.push_back(c);
    }
  }
  if (!value.empty()) {
    // An unchanged condition keeps its timestamps: rewriting them would turn
    // every retry into a write and a watch event (a hot loop).
    json c = {{"type", type}, {"status", value}, {"lastTransitionTime", NowRfc3339()}, {"lastProbeTime", nullptr}};
    if (status.contains("conditions") && status["conditions"].is_array()) {
      for (const auto& old : status["conditions"]) {
        if (Str(old, {"type"}) == type && Str(old, {"status"}) == value) c = old;
      }
    }
    if (!message.empty()) c["message"] = message;
    conditions.push_back(c);
  }
  if (conditions.empty()) {
    status.erase("conditions");
  } else {
    status["conditions"] = conditions;
  }
}

bool HasCondition(const json& claim, const std::string& type) {
  const json& conditions = Field(Field(claim, "status"), "conditions");
  if (!conditions.is_array()) return false;
  for (const auto& c : conditions) {
    if (Str(c, {"type"}) == type && Str(c, {"status"}) == "True") return true;
  }
  return false;
}

constexpr char kResizePendingMessage[] =
    "Waiting for user to (re-)start a pod to finish file system resize of volume on node.";

// The claim's resize conditions, for a new step: `keep` keeps the others.
void ClearResizeConditions(json& status) {
  for (const char* type : {"Resizing", "FileSystemResizePending", "ControllerResizeError", "NodeResizeError"}) {
    SetCondition(status, type, "");
  }
}

void SetResizeStatus(json& status, const std::string& value) {
  if (value.empty()) {
    if (status.contains("allocatedResourceStatuses")) status["allocatedResourceStatuses"].erase("storage");
    if (status.contains("allocatedResourceStatuses") && status["allocatedResourceStatuses"].empty()) {
      status.erase("allocatedResourceStatuses");
    }
  } else {
    status["allocatedResourceStatuses"]["storage"] = value;
  }
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

void Resizer::RegisterHandlers() {
  claims_.AddHandlers({
      .on_add = [this](const json& o) { queue_.Add(ObjectKey(o)); },
      .on_update = [this](const json&, const json& o) { queue_.Add(ObjectKey(o)); },
      .on_delete = nullptr,
  });
}

void Resizer::Start() {
  for (int i = 0; i < options_.workers; ++i) {
    workers_.emplace_back([this] {
      RunWorker(queue_, StrCat("resizer ", options_.driver, ": claim"),
                ParkAware([this](const std::string& k) { return SyncClaim(k); }));
    });
  }
}

void Resizer::Stop() {
  queue_.ShutDown();
  for (auto& w : workers_) w.join();
  workers_.clear();
  monitor_.Unpark(queue_);
}

absl::Status Resizer::Expand(const json& pv, const std::string& key, int64_t bytes, int64_t* new_bytes,
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
  req.set_volume_id(Str(pv, {"spec", "csi", "volumeHandle"}));
  req.mutable_capacity_range()->set_required_bytes(bytes);
  auto modes = monitor_.ControllerSingleNodeModes(options_.driver, node);
  if (!modes.ok()) {
    if (IsNotAFailure(modes.status())) monitor_.Park(options_.driver, node, queue_, key);
    return modes.status();
  }
  *req.mutable_volume_capability() = PvVolumeCapability(pv, *modes);
  // A secret the PV names but that cannot be read stops the call (it was
  // once skipped, and the driver called without its credentials).
  BERTH_ASSIGN_OR_RETURN(SecretData secrets, PvSecret(registry_, pv, "controllerExpandSecretRef"));
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

absl::Status Resizer::SyncClaim(const std::string& key) {
  std::optional<json> cached = claims_.GetByKey(key);
  if (!cached || Str(*cached, {"status", "phase"}) != "Bound") return absl::OkStatus();
  // Decide on fresh copies: the claim and volume caches may lag each other
  // (a volume already grown next to a claim not yet marked pending).
  auto [ns, name] = SplitKey(key);
  auto fresh_claim = registry_.Get(K("persistentvolumeclaims"), ns, name);
  if (!fresh_claim.ok()) {
    return fresh_claim.status().code() == absl::StatusCode::kNotFound ? absl::OkStatus() : fresh_claim.status();
  }
  const json claim = *fresh_claim;
  const std::string pv_name = Str(claim, {"spec", "volumeName"});
  if (pv_name.empty() || !volumes_.Get("", pv_name)) return absl::OkStatus();
  auto fresh_pv = registry_.Get(K("persistentvolumes"), "", pv_name);
  if (!fresh_pv.ok()) return absl::OkStatus();
  const json pv = *fresh_pv;
  if (Str(pv, {"spec", "csi", "driver"}) != options_.driver) return absl::OkStatus();
  // Only the volume that is really this claim's (not one that names it by
  // name only, or an older claim of the same name).
  if (Str(pv, {"spec", "claimRef", "uid"}) != Uid(claim)) return absl::OkStatus();
  auto spec_size = Size(Str(claim, {"spec", "resources", "requests", "storage"}));
  auto status_size = Size(Str(claim, {"status", "capacity", "storage"}));
  auto pv_size = Size(Str(pv, {"spec", "capacity", "storage"}));
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
  const std::string resize_status = Str(claim, {"status", "allocatedResourceStatuses", "storage"});
  const std::optional<api::Quantity> allocated = Size(Str(claim, {"status", "allocatedResources", "storage"}));
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
  BERTH_RETURN_IF_ERROR(EditStatus(registry_, K("persistentvolumeclaims"), claim, [&](json& s) {
    if (!same_size) ClearResizeConditions(s);  // a new size: earlier errors are over
    SetCondition(s, "Resizing", "True");
    s["allocatedResources"]["storage"] = new_size.ToString();
    SetResizeStatus(s, "ControllerResizeInProgress");
  }));
  events_.Record(claim, "Normal", "Resizing", StrCat("External resizer is resizing volume ", pv_name));
  int64_t new_bytes = 0;
  bool node_expansion = true;
  absl::Status st = Expand(pv, key, new_size.Value(), &new_bytes, &node_expansion);
  if (IsNotAFailure(st)) return st;  // waits for the driver; the status says in progress
  if (!st.ok()) {
    events_.Record(
        claim, "Warning", "VolumeResizeFailed",
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
      absl::Status written = EditStatus(registry_, K("persistentvolumeclaims"), claim, [&](json& s) {
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
  const std::string grown = api::Quantity::FromBytes(new_bytes).ToString();
  BERTH_RETURN_IF_ERROR(
      MutateObject(registry_, K("persistentvolumes"), pv, apiserver::Subresource::kMain, [&](json& o) {
        auto have = Size(Str(o, {"spec", "capacity", "storage"}));
        if (have && *have >= api::Quantity::FromBytes(new_bytes)) return false;
        o["spec"]["capacity"]["storage"] = grown;
        return true;
      }));
  if (node_expansion) {
    events_.Record(claim, "Normal", "FileSystemResizeRequired", "Require file system resize of volume on node");
    return EditStatus(registry_, K("persistentvolumeclaims"), claim, [&](json& s) {
      ClearResizeConditions(s);
      SetCondition(s, "FileSystemResizePending", "True", kResizePendingMessage);
      SetResizeStatus(s, "NodeResizePending");
    });
  }
  events_.Record(claim, "Normal", "VolumeResizeSuccessful", "Resize volume succeeded");
  return EditStatus(registry_, K("persistentvolumeclaims"), claim, [&](json& s) {
    ClearResizeConditions(s);
    s["capacity"]["storage"] = grown;
    SetResizeStatus(s, "");
  });
}

}  // namespace berth::controllers
