// The cells of each kind's row in a table (see table.cc for the columns):
// core and storage.k8s.io kinds as kubernetes/kubernetes
// pkg/printers/internalversion/printers.go prints them, the snapshot kinds as
// the external-snapshotter CRDs' additionalPrinterColumns. Every accessor
// tolerates missing or ill-typed fields: it yields the zero value, never an
// exception.
#include "api/table_internal.h"
#include "api/types/core.h"

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "api/table.h"
#include "common/strings.h"
#include "common/units.h"

namespace berth::api::table_internal {

// ---- JSON access -------------------------------------------------------------

const Json& Null() {
  static const Json* const kNull = new Json();
  return *kNull;
}

const Json& EmptyArray() {
  static const Json* const kEmpty = new Json(Json::array());
  return *kEmpty;
}

// j[path[0]][path[1]]...; null when a step is missing or not an object.
const Json& At(const Json& j, FieldPath path) {
  const Json* cur = &j;
  for (std::string_view key : path) {
    if (!cur->is_object()) return Null();
    auto it = cur->find(key);
    if (it == cur->end()) return Null();
    cur = &*it;
  }
  return *cur;
}

// The array at `path`, or an empty one.
const Json& Items(const Json& j, FieldPath path) {
  const Json& v = At(j, path);
  return v.is_array() ? v : EmptyArray();
}

std::string AsString(const Json& v) { return v.is_string() ? v.get<std::string>() : ""; }
std::string Str(const Json& j, FieldPath path) { return AsString(At(j, path)); }

int64_t AsInt(const Json& v) {
  if (v.is_number_integer()) return v.get<int64_t>();
  if (!v.is_number_float()) return 0;
  const double d = v.get<double>();
  return d > -9.2e18 && d < 9.2e18 ? static_cast<int64_t>(d) : 0;  // NaN and overflow: 0
}

// Serialized JSON that never throws, even for invalid UTF-8.
std::string Dump(const Json& v) { return v.dump(-1, ' ', false, Json::error_handler_t::replace); }

bool Bool(const Json& j, FieldPath path, bool fallback) {
  const Json& v = At(j, path);
  return v.is_boolean() ? v.get<bool>() : fallback;
}

bool Has(const Json& j, FieldPath path) { return !At(j, path).is_null(); }

std::string Name(const Json& o) { return Str(o, {"metadata", "name"}); }

// A quantity as stored ("5Gi"); Kubernetes prints a missing one as "0".
std::string QuantityText(const Json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number()) return Dump(v);
  return "0";
}

// ---- Time ----------------------------------------------------------------------

std::optional<absl::Time> ParseTimestamp(const Json& v) {
  if (!v.is_string()) return std::nullopt;
  absl::Time t;
  std::string err;
  if (!absl::ParseTime(absl::RFC3339_full, v.get<std::string>(), &t, &err)) return std::nullopt;
  return t;
}

// translateTimestampSince: "<unknown>" for an unset timestamp.
std::string Since(const Json& v, absl::Time now) {
  if (std::optional<absl::Time> t = ParseTimestamp(v)) return HumanDuration(now - *t);
  return v.is_string() && !v.get<std::string>().empty() ? "<invalid>" : "<unknown>";
}

std::string Age(const Json& o, absl::Time now) { return Since(At(o, {"metadata", "creationTimestamp"}), now); }

// ---- Shared formatting -----------------------------------------------------------

// helper.GetAccessModesAsString: deduplicated, always in RWO,ROX,RWX,RWOP order.
std::string AccessModes(const Json& modes) {
  static constexpr std::pair<std::string_view, std::string_view> kShort[] = {
      {"ReadWriteOnce", "RWO"},
      {"ReadOnlyMany", "ROX"},
      {"ReadWriteMany", "RWX"},
      {"ReadWriteOncePod", "RWOP"},
  };
  std::vector<std::string> out;
  for (const auto& [mode, abbreviation] : kShort) {
    for (const Json& m : modes.is_array() ? modes : EmptyArray()) {
      if (m.is_string() && m.get<std::string>() == mode) {
        out.emplace_back(abbreviation);
        break;
      }
    }
  }
  return absl::StrJoin(out, ",");
}

std::string StringOr(const Json& v, std::string_view fallback) {
  return v.is_string() ? v.get<std::string>() : std::string(fallback);
}

// A cell of a CRD additionalPrinterColumn of `type` (cellForJSONValue).
Json CrdCell(std::string_view type, const Json& v, absl::Time now) {
  if (v.is_null()) return nullptr;
  if (type == "string") return v.is_string() ? v : Json(Dump(v));
  if (type == "integer") return v.is_number() ? Json(AsInt(v)) : Json(nullptr);
  if (type == "boolean") return v.is_boolean() ? v : Json(nullptr);
  if (type == "date") {
    if (!v.is_string()) return nullptr;
    std::optional<absl::Time> t = ParseTimestamp(v);
    return t ? HumanDuration(now - *t) : "<invalid>";
  }
  return nullptr;
}

// ---- Per-kind cells ----------------------------------------------------------------

Cells NamespaceCells(const Json& o, absl::Time now) { return {Name(o), Str(o, {"status", "phase"}), Age(o, now)}; }

// coordination.k8s.io Lease: printLease (an unset holder is an empty cell).
Cells LeaseCells(const Json& o, absl::Time now) { return {Name(o), Str(o, {"spec", "holderIdentity"}), Age(o, now)}; }

std::string NodeAddress(const Json& node, std::string_view type) {
  for (const Json& a : Items(node, {"status", "addresses"})) {
    if (Str(a, {"type"}) == type) return Str(a, {"address"});
  }
  return "<none>";
}

Cells NodeCells(const Json& o, absl::Time now) {
  std::vector<std::string> status;
  const Json* ready = nullptr;  // only NodeReady counts; the last one wins
  for (const Json& c : Items(o, {"status", "conditions"})) {
    if (Str(c, {"type"}) == "Ready") ready = &c;
  }
  if (ready == nullptr) {
    status.push_back("Unknown");
  } else {
    status.push_back(Str(*ready, {"status"}) == "True" ? "Ready" : "NotReady");
  }
  if (Bool(o, {"spec", "unschedulable"}, false)) status.push_back("SchedulingDisabled");

  std::set<std::string> roles;
  const Json& labels = At(o, {"metadata", "labels"});
  if (labels.is_object()) {
    for (const auto& [key, value] : labels.items()) {
      constexpr std::string_view kRolePrefix = "node-role.kubernetes.io/";
      if (key.starts_with(kRolePrefix) && key.size() > kRolePrefix.size()) {
        roles.insert(key.substr(kRolePrefix.size()));
      } else if (key == "kubernetes.io/role" && !AsString(value).empty()) {
        roles.insert(AsString(value));
      }
    }
  }
  const Json& info = At(o, {"status", "nodeInfo"});
  auto unknown_if_empty = [&info](std::string_view field) {
    std::string s = Str(info, {field});
    return s.empty() ? std::string("<unknown>") : s;
  };
  return {Name(o),
          absl::StrJoin(status, ","),
          roles.empty() ? std::string("<none>") : absl::StrJoin(roles, ","),
          Age(o, now),
          Str(info, {"kubeletVersion"}),
          NodeAddress(o, "InternalIP"),
          NodeAddress(o, "ExternalIP"),
          unknown_if_empty("osImage"),
          unknown_if_empty("kernelVersion"),
          unknown_if_empty("containerRuntimeVersion")};
}

// Status of an object being deleted, as Kubernetes prints PVs and PVCs.
std::string PhaseOrTerminating(const Json& o) {
  return Has(o, {"metadata", "deletionTimestamp"}) ? "Terminating" : Str(o, {"status", "phase"});
}

Cells PersistentVolumeCells(const Json& o, absl::Time now) {
  std::string claim;
  if (const Json& ref = At(o, {"spec", "claimRef"}); ref.is_object()) {
    claim = absl::StrCat(Str(ref, {"namespace"}), "/", Str(ref, {"name"}));
  }
  return {Name(o),
          QuantityText(At(o, {"spec", "capacity", "storage"})),
          AccessModes(At(o, {"spec", "accessModes"})),
          Str(o, {"spec", "persistentVolumeReclaimPolicy"}),
          PhaseOrTerminating(o),
          claim,
          types::StorageClassOf(o),
          Str(o, {"status", "reason"}),
          Age(o, now),
          StringOr(At(o, {"spec", "volumeAttributesClassName"}), "<unset>"),
          StringOr(At(o, {"spec", "volumeMode"}), "<unset>")};
}

Cells PersistentVolumeClaimCells(const Json& o, absl::Time now) {
  const std::string volume = Str(o, {"spec", "volumeName"});
  std::string capacity;
  std::string access_modes;
  if (!volume.empty()) {  // an unbound claim shows neither
    capacity = QuantityText(At(o, {"status", "capacity", "storage"}));
    access_modes = AccessModes(At(o, {"status", "accessModes"}));
  }
  return {Name(o),
          PhaseOrTerminating(o),
          volume,
          capacity,
          access_modes,
          types::StorageClassOf(o),
          Age(o, now),
          StringOr(At(o, {"spec", "volumeAttributesClassName"}), "<unset>"),
          StringOr(At(o, {"spec", "volumeMode"}), "<unset>")};
}

// A terminated container's reason, else "Signal:N" or "ExitCode:N".
std::string TerminationReason(const Json& terminated) {
  std::string reason = Str(terminated, {"reason"});
  if (!reason.empty()) return reason;
  if (int64_t signal = AsInt(At(terminated, {"signal"})); signal != 0) {
    return absl::StrCat("Signal:", signal);
  }
  return absl::StrCat("ExitCode:", AsInt(At(terminated, {"exitCode"})));
}

// Keeps the latest lastState.terminated.finishedAt of a container status.
void NoteRestart(const Json& container_status, std::optional<absl::Time>& latest) {
  std::optional<absl::Time> t = ParseTimestamp(At(container_status, {"lastState", "terminated", "finishedAt"}));
  if (t && (!latest || *t > *latest)) latest = t;
}

// The status of the first condition of `type` is True.
bool ConditionTrue(const Json& status, std::string_view type) {
  for (const Json& c : Items(status, {"conditions"})) {
    if (Str(c, {"type"}) == type) return Str(c, {"status"}) == "True";
  }
  return false;
}

Cells PodCells(const Json& o, absl::Time now) {
  const Json& spec = At(o, {"spec"});
  const Json& status = At(o, {"status"});
  const std::string phase = Str(status, {"phase"});
  std::string reason = Str(status, {"reason"});
  if (reason.empty()) reason = phase;
  for (const Json& c : Items(status, {"conditions"})) {
    if (Str(c, {"type"}) == "PodScheduled" && Str(c, {"reason"}) == "SchedulingGated") {
      reason = "SchedulingGated";
    }
  }

  // Restartable init containers (sidecars) count as containers.
  int64_t total = static_cast<int64_t>(Items(spec, {"containers"}).size());
  std::set<std::string> sidecars;
  for (const Json& c : Items(spec, {"initContainers"})) {
    if (Str(c, {"restartPolicy"}) == "Always") {
      sidecars.insert(Str(c, {"name"}));
      ++total;
    }
  }

  int64_t ready = 0;
  int64_t restarts = 0;
  int64_t sidecar_restarts = 0;
  std::optional<absl::Time> last_restart;
  std::optional<absl::Time> sidecar_last_restart;
  bool initializing = false;
  const Json& init_statuses = Items(status, {"initContainerStatuses"});
  const size_t init_count = Items(spec, {"initContainers"}).size();
  for (size_t i = 0; i < init_statuses.size(); ++i) {
    const Json& cs = init_statuses[i];
    const bool sidecar = sidecars.count(Str(cs, {"name"})) > 0;
    restarts += AsInt(At(cs, {"restartCount"}));
    NoteRestart(cs, last_restart);
    if (sidecar) {
      sidecar_restarts += AsInt(At(cs, {"restartCount"}));
      NoteRestart(cs, sidecar_last_restart);
    }
    const Json& terminated = At(cs, {"state", "terminated"});
    const std::string waiting = Str(cs, {"state", "waiting", "reason"});
    if (terminated.is_object() && AsInt(At(terminated, {"exitCode"})) == 0) continue;
    if (sidecar && Bool(cs, {"started"}, false)) {
      if (Bool(cs, {"ready"}, false)) ++ready;
      continue;
    }
    if (terminated.is_object()) {
      reason = "Init:" + TerminationReason(terminated);
    } else if (!waiting.empty() && waiting != "PodInitializing") {
      reason = "Init:" + waiting;
    } else {
      reason = absl::StrCat("Init:", i, "/", init_count);
    }
    initializing = true;
    break;
  }

  if (!initializing || ConditionTrue(status, "Initialized")) {
    restarts = sidecar_restarts;
    last_restart = sidecar_last_restart;
    bool has_running = false;
    const Json& statuses = Items(status, {"containerStatuses"});
    for (size_t i = statuses.size(); i-- > 0;) {
      const Json& cs = statuses[i];
      restarts += AsInt(At(cs, {"restartCount"}));
      NoteRestart(cs, last_restart);
      const Json& terminated = At(cs, {"state", "terminated"});
      if (std::string waiting = Str(cs, {"state", "waiting", "reason"}); !waiting.empty()) {
        reason = waiting;
      } else if (terminated.is_object()) {
        reason = TerminationReason(terminated);
      } else if (Bool(cs, {"ready"}, false) && At(cs, {"state", "running"}).is_object()) {
        has_running = true;
        ++ready;
      }
    }
    if (reason == "Completed" && has_running) {
      reason = ConditionTrue(status, "Ready") ? "Running" : "NotReady";
    }
  }

  if (Has(o, {"metadata", "deletionTimestamp"})) {
    if (Str(status, {"reason"}) == "NodeLost") {
      reason = "Unknown";
    } else if (phase != "Succeeded" && phase != "Failed") {
      reason = "Terminating";
    }
  }

  std::string restarts_text = absl::StrCat(restarts);
  if (restarts != 0 && last_restart) {
    absl::StrAppend(&restarts_text, " (", HumanDuration(now - *last_restart), " ago)");
  }

  std::string ip;
  if (const Json& ips = Items(status, {"podIPs"}); !ips.empty()) ip = Str(ips[0], {"ip"});
  if (ip.empty()) ip = Str(status, {"podIP"});
  std::string readiness_gates = "<none>";
  if (const Json& gates = Items(spec, {"readinessGates"}); !gates.empty()) {
    int64_t true_gates = 0;
    for (const Json& gate : gates) {
      const std::string type = Str(gate, {"conditionType"});
      for (const Json& c : Items(status, {"conditions"})) {
        if (Str(c, {"type"}) != type) continue;
        if (Str(c, {"status"}) == "True") ++true_gates;
        break;
      }
    }
    readiness_gates = absl::StrCat(true_gates, "/", gates.size());
  }
  auto none_if_empty = [](std::string s) { return s.empty() ? std::string("<none>") : s; };
  return {Name(o),
          absl::StrCat(ready, "/", total),
          reason,
          restarts_text,
          Age(o, now),
          none_if_empty(ip),
          none_if_empty(Str(spec, {"nodeName"})),
          none_if_empty(Str(status, {"nominatedNodeName"})),
          readiness_gates};
}

Cells SecretCells(const Json& o, absl::Time now) {
  // Counts keys only; stringData merges into data on write, so count both.
  std::set<std::string> keys;
  for (std::string_view field : {"data", "stringData"}) {
    if (const Json& m = At(o, {field}); m.is_object()) {
      for (const auto& item : m.items()) keys.insert(item.key());
    }
  }
  return {Name(o), StringOr(At(o, {"type"}), "Opaque"), static_cast<int64_t>(keys.size()), Age(o, now)};
}

Cells EventCells(const Json& o, absl::Time now) {
  // An unset (or unreadable) timestamp falls back as Kubernetes' zero time does.
  const Json& first = At(o, {"firstTimestamp"});
  const Json& last = At(o, {"lastTimestamp"});
  std::string first_seen = ParseTimestamp(first) ? Since(first, now) : Since(At(o, {"eventTime"}), now);
  std::string last_seen = ParseTimestamp(last) ? Since(last, now) : first_seen;
  int64_t count = AsInt(At(o, {"count"}));
  if (const Json& series = At(o, {"series"}); series.is_object()) {
    last_seen = Since(At(series, {"lastObservedTime"}), now);
    count = AsInt(At(series, {"count"}));
  } else if (count == 0) {
    count = 1;  // singleton events from the new API carry no count
  }
  std::string target = absl::AsciiStrToLower(Str(o, {"involvedObject", "kind"}));
  if (std::string name = Str(o, {"involvedObject", "name"}); !name.empty()) {
    absl::StrAppend(&target, "/", name);
  }
  std::string component = Str(o, {"source", "component"});
  if (component.empty()) component = Str(o, {"reportingComponent"});
  std::string host = Str(o, {"source", "host"});
  if (host.empty()) host = Str(o, {"reportingInstance"});
  std::string source = host.empty() ? component : absl::StrCat(component, ", ", host);
  return {last_seen,
          Str(o, {"type"}),
          Str(o, {"reason"}),
          target,
          Str(o, {"involvedObject", "fieldPath"}),
          source,
          std::string(absl::StripAsciiWhitespace(Str(o, {"message"}))),
          first_seen,
          count,
          Name(o)};
}

Cells StorageClassCells(const Json& o, absl::Time now) {
  std::string name = Name(o);
  for (std::string_view annotation :
       {"storageclass.kubernetes.io/is-default-class", "storageclass.beta.kubernetes.io/is-default-class"}) {
    if (Str(o, {"metadata", "annotations", annotation}) == "true") {
      name += " (default)";
      break;
    }
  }
  return {name,
          Str(o, {"provisioner"}),
          StringOr(At(o, {"reclaimPolicy"}), "Delete"),
          StringOr(At(o, {"volumeBindingMode"}), "Immediate"),
          Bool(o, {"allowVolumeExpansion"}, false),
          Age(o, now)};
}

Cells VolumeAttachmentCells(const Json& o, absl::Time now) {
  return {Name(o),
          Str(o, {"spec", "attacher"}),
          Str(o, {"spec", "source", "persistentVolumeName"}),
          Str(o, {"spec", "nodeName"}),
          Bool(o, {"status", "attached"}, false),
          Age(o, now)};
}

Cells CSIDriverCells(const Json& o, absl::Time now) {
  std::string token_requests = "<unset>";
  if (const Json& requests = At(o, {"spec", "tokenRequests"}); requests.is_array()) {
    std::vector<std::string> audiences;
    for (const Json& r : requests) audiences.push_back(Str(r, {"audience"}));
    token_requests = absl::StrJoin(audiences, ",");
  }
  std::vector<std::string> modes;
  for (const Json& m : Items(o, {"spec", "volumeLifecycleModes"})) modes.push_back(AsString(m));
  return {Name(o),
          Bool(o, {"spec", "attachRequired"}, true),
          Bool(o, {"spec", "podInfoOnMount"}, false),
          Bool(o, {"spec", "storageCapacity"}, false),
          token_requests,
          Bool(o, {"spec", "requiresRepublish"}, false),
          modes.empty() ? std::string("<none>") : absl::StrJoin(modes, ","),
          Age(o, now)};
}

Cells CSINodeCells(const Json& o, absl::Time now) {
  return {Name(o), static_cast<int64_t>(Items(o, {"spec", "drivers"}).size()), Age(o, now)};
}

Cells CSIStorageCapacityCells(const Json& o, absl::Time) {
  const Json& capacity = At(o, {"capacity"});
  return {Name(o), Str(o, {"storageClassName"}), capacity.is_null() ? std::string("<unset>") : QuantityText(capacity)};
}

Cells VolumeSnapshotClassCells(const Json& o, absl::Time now) {
  return {Name(o), CrdCell("string", At(o, {"driver"}), now), CrdCell("string", At(o, {"deletionPolicy"}), now),
          CrdCell("date", At(o, {"metadata", "creationTimestamp"}), now)};
}

Cells VolumeSnapshotCells(const Json& o, absl::Time now) {
  return {Name(o),
          CrdCell("boolean", At(o, {"status", "readyToUse"}), now),
          CrdCell("string", At(o, {"spec", "source", "persistentVolumeClaimName"}), now),
          CrdCell("string", At(o, {"spec", "source", "volumeSnapshotContentName"}), now),
          CrdCell("string", At(o, {"status", "restoreSize"}), now),
          CrdCell("string", At(o, {"spec", "volumeSnapshotClassName"}), now),
          CrdCell("string", At(o, {"status", "boundVolumeSnapshotContentName"}), now),
          CrdCell("date", At(o, {"status", "creationTime"}), now),
          CrdCell("date", At(o, {"metadata", "creationTimestamp"}), now)};
}

Cells VolumeSnapshotContentCells(const Json& o, absl::Time now) {
  return {Name(o),
          CrdCell("boolean", At(o, {"status", "readyToUse"}), now),
          CrdCell("integer", At(o, {"status", "restoreSize"}), now),
          CrdCell("string", At(o, {"spec", "deletionPolicy"}), now),
          CrdCell("string", At(o, {"spec", "driver"}), now),
          CrdCell("string", At(o, {"spec", "volumeSnapshotClassName"}), now),
          CrdCell("string", At(o, {"spec", "volumeSnapshotRef", "name"}), now),
          CrdCell("string", At(o, {"spec", "volumeSnapshotRef", "namespace"}), now),
          CrdCell("date", At(o, {"metadata", "creationTimestamp"}), now)};
}

// ---- backup.berth.io ------------------------------------------------------------

Cells BackupStorageLocationCells(const Json& o, absl::Time now) {
  return {Name(o), CrdCell("string", At(o, {"status", "phase"}), now),
          CrdCell("date", At(o, {"status", "lastValidationTime"}), now), Age(o, now),
          Bool(o, {"spec", "default"}, false)};
}

// "1.2Gi/4Gi" from bytesDone/totalBytes; null (<none>) before the total is
// known.
Json BytesProgress(const Json& o) {
  const Json& total = At(o, {"status", "progress", "totalBytes"});
  if (!total.is_number()) return nullptr;
  return StrCat(FormatByteSizeApprox(AsInt(At(o, {"status", "progress", "bytesDone"}))), "/",
                FormatByteSizeApprox(AsInt(total)));
}

Cells BackupCells(const Json& o, absl::Time now) {
  Json expires = nullptr;
  if (std::optional<absl::Time> t = ParseTimestamp(At(o, {"status", "expiration"}))) {
    expires = *t > now ? HumanDuration(*t - now) : "expired";
  }
  return {Name(o),
          CrdCell("string", At(o, {"status", "phase"}), now),
          AsInt(At(o, {"status", "errors"})),
          AsInt(At(o, {"status", "warnings"})),
          BytesProgress(o),
          CrdCell("string", At(o, {"spec", "storageLocation"}), now),
          expires,
          Age(o, now)};
}

Cells RestoreCells(const Json& o, absl::Time now) {
  return {Name(o),
          CrdCell("string", At(o, {"spec", "backupName"}), now),
          CrdCell("string", At(o, {"status", "phase"}), now),
          CrdCell("date", At(o, {"status", "startTimestamp"}), now),
          CrdCell("date", At(o, {"status", "completionTimestamp"}), now),
          AsInt(At(o, {"status", "errors"})),
          AsInt(At(o, {"status", "warnings"})),
          Age(o, now)};
}

Cells ScheduleCells(const Json& o, absl::Time now) {
  return {Name(o),
          CrdCell("string", At(o, {"status", "phase"}), now),
          CrdCell("string", At(o, {"spec", "schedule"}), now),
          CrdCell("date", At(o, {"status", "lastBackup"}), now),
          Age(o, now),
          Bool(o, {"spec", "paused"}, false)};
}

// The apiserver's default table for kinds without a printer.
Cells DefaultCells(const Json& o, absl::Time) { return {Name(o), Str(o, {"metadata", "creationTimestamp"})}; }

}  // namespace berth::api::table_internal
