// Tables of objects with Kubernetes' columns. Core and storage.k8s.io kinds
// follow kubernetes/kubernetes pkg/printers/internalversion/printers.go; the
// snapshot kinds follow the additionalPrinterColumns of the external-snapshotter
// CRDs, with cells computed like apiextensions-apiserver's table convertor
// (a missing field is a null cell, which kubectl prints as <none>).
//
// Every accessor tolerates missing or ill-typed fields: it yields the zero
// value, never an exception.
#include "api/table.h"

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

namespace berth::api {
namespace {

using Json = nlohmann::json;
using Cells = std::vector<Json>;
using FieldPath = std::initializer_list<std::string_view>;

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

// The beta annotation wins over spec.storageClassName, as in Kubernetes.
std::string StorageClassOf(const Json& o) {
  const Json& beta = At(o, {"metadata", "annotations", "volume.beta.kubernetes.io/storage-class"});
  if (beta.is_string()) return beta.get<std::string>();
  return Str(o, {"spec", "storageClassName"});
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
          StorageClassOf(o),
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
          StorageClassOf(o),
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

// The apiserver's default table for kinds without a printer.
Cells DefaultCells(const Json& o, absl::Time) { return {Name(o), Str(o, {"metadata", "creationTimestamp"})}; }

// ---- Columns and dispatch ------------------------------------------------------------

constexpr char kNameDescription[] =
    "Name must be unique within a namespace. Is required when creating resources, although "
    "some resources may allow a client to request the generation of an appropriate name "
    "automatically. Name is primarily intended for creation idempotence and configuration "
    "definition. Cannot be updated. More info: "
    "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";
constexpr char kAgeDescription[] =
    "CreationTimestamp is a timestamp representing the server time when this object was "
    "created. It is not guaranteed to be set in happens-before order across separate "
    "operations. Clients may not set this value. It is represented in RFC3339 form and is in "
    "UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/"
    "api-conventions.md#metadata";

// Descriptions paraphrase Kubernetes' (kubectl never prints them).
TableColumn Col(std::string name, std::string description, std::string type = "string") {
  return TableColumn{std::move(name), std::move(type), "", std::move(description), 0};
}
TableColumn Wide(std::string name, std::string description) {
  TableColumn c = Col(std::move(name), std::move(description));
  c.priority = 1;
  return c;
}
TableColumn NameCol() { return TableColumn{"Name", "string", "name", kNameDescription, 0}; }
TableColumn AgeCol() { return Col("Age", kAgeDescription); }
TableColumn CrdAgeCol() { return Col("Age", "", "date"); }

struct KindTable {
  std::vector<TableColumn> columns;
  Cells (*cells)(const Json& object, absl::Time now);
};

const std::map<std::string_view, KindTable>& KindTables() {
  static const auto* tables = new std::map<std::string_view, KindTable>{
      {"Namespace", {{NameCol(), Col("Status", "The status of the namespace"), AgeCol()}, NamespaceCells}},
      {"Lease", {{NameCol(), Col("Holder", "The identity of the holder of the lease."), AgeCol()}, LeaseCells}},
      {"Node",
       {{NameCol(), Col("Status", "The status of the node"), Col("Roles", "The roles of the node"), AgeCol(),
         Col("Version", "Kubelet Version reported by the node."),
         Wide("Internal-IP", "List of addresses reachable to the node."),
         Wide("External-IP", "List of addresses reachable to the node."),
         Wide("OS-Image", "OS Image reported by the node from /etc/os-release."),
         Wide("Kernel-Version", "Kernel Version reported by the node from 'uname -r'."),
         Wide("Container-Runtime", "ContainerRuntime Version reported by the node.")},
        NodeCells}},
      {"PersistentVolume",
       {{NameCol(), Col("Capacity", "The persistent volume's resources and capacity."),
         Col("Access Modes", "All ways the volume can be mounted."),
         Col("Reclaim Policy", "What happens to the volume when released from its claim."),
         Col("Status", "Whether the volume is available, bound or released."),
         Col("Claim", "The claim bound to this volume, as namespace/name."),
         Col("StorageClass", "StorageClass of the pv"),
         Col("Reason", "A brief CamelCase string that describes any failure."), AgeCol(),
         Wide("VolumeAttributesClass", "VolumeAttributesClass of the pv"),
         Wide("VolumeMode", "Whether the volume holds a filesystem or is a raw block.")},
        PersistentVolumeCells}},
      {"PersistentVolumeClaim",
       {{NameCol(), Col("Status", "The current phase of the PersistentVolumeClaim."),
         Col("Volume", "The PersistentVolume backing this claim."),
         Col("Capacity", "The actual resources of the underlying volume."),
         Col("Access Modes", "The actual access modes of the volume backing the claim."),
         Col("StorageClass", "StorageClass of the pvc"), AgeCol(),
         Wide("VolumeAttributesClass", "VolumeAttributesClass of the pvc"),
         Wide("VolumeMode", "What type of volume is required by the claim.")},
        PersistentVolumeClaimCells}},
      {"Pod",
       {{NameCol(), Col("Ready", "The aggregate readiness state of this pod for accepting traffic."),
         Col("Status", "The aggregate status of the containers in this pod."),
         Col("Restarts", "Container restarts, and when the last one restarted."), AgeCol(),
         Wide("IP", "The IP address allocated to the pod."), Wide("Node", "The node this pod is scheduled to."),
         Wide("Nominated Node", "The node this pod preempted other pods on."),
         Wide("Readiness Gates", "Readiness gates that are true, of all.")},
        PodCells}},
      {"Secret",
       {{NameCol(), Col("Type", "Used to facilitate programmatic handling of secret data."),
         Col("Data", "The number of keys in the secret's data."), AgeCol()},
        SecretCells}},
      {"Event",  // Kubernetes' order: two wide columns sit between Object and Message.
       {{Col("Last Seen", "When the most recent occurrence of this event was recorded."),
         Col("Type", "Type of this event (Normal, Warning)."),
         Col("Reason", "Why the object transitioned into its current status."),
         Col("Object", "The object that this event is about."),
         Wide("Subobject", "The field path of the part of the object concerned."),
         Wide("Source", "The component reporting this event."),
         Col("Message", "A human-readable description of the status of this operation."),
         Wide("First Seen", "When the event was first recorded."),
         Wide("Count", "The number of times this event has occurred."),
         TableColumn{"Name", "string", "name", kNameDescription, 1}},
        EventCells}},
      {"StorageClass",
       {{NameCol(), Col("Provisioner", "The type of the provisioner."),
         Col("ReclaimPolicy", "The reclaim policy of dynamically provisioned volumes."),
         Col("VolumeBindingMode", "How claims are provisioned and bound."),
         Col("AllowVolumeExpansion", "Whether the storage class allows volume expansion."), AgeCol()},
        StorageClassCells}},
      {"VolumeAttachment",
       {{NameCol(),
         // Kubernetes marks Attacher with format "name" too.
         TableColumn{"Attacher", "string", "name", "The volume driver handling this request.", 0},
         Col("PV", "The persistent volume to attach."), Col("Node", "The node the volume should be attached to."),
         Col("Attached", "Whether the volume is successfully attached.", "boolean"), AgeCol()},
        VolumeAttachmentCells}},
      {"CSIDriver",
       {{NameCol(), Col("AttachRequired", "Whether the driver needs an attach step.", "boolean"),
         Col("PodInfoOnMount", "Whether the driver wants pod information on mount.", "boolean"),
         Col("StorageCapacity", "Whether scheduling considers storage capacity.", "boolean"),
         Col("TokenRequests", "Audiences of the service account tokens the driver needs."),
         Col("RequiresRepublish", "Whether NodePublishVolume is called periodically.", "boolean"),
         Col("Modes", "The kinds of volumes the driver supports."), AgeCol()},
        CSIDriverCells}},
      {"CSINode",
       {{NameCol(), Col("Drivers", "Drivers indicates the number of CSI drivers registered on the node", "integer"),
         AgeCol()},
        CSINodeCells}},
      {"CSIStorageCapacity",  // no Age column in Kubernetes either
       {{NameCol(), Col("StorageClassName", "The StorageClass the reported capacity applies to."),
         Col("Capacity", "The capacity reported by the CSI driver.")},
        CSIStorageCapacityCells}},
      {"VolumeSnapshotClass",
       {{NameCol(), Col("Driver", ""),
         Col("DeletionPolicy", "Whether contents are deleted with their bound snapshots."), CrdAgeCol()},
        VolumeSnapshotClassCells}},
      {"VolumeSnapshot",
       {{NameCol(), Col("ReadyToUse", "Indicates if the snapshot is ready to be used to restore a volume.", "boolean"),
         Col("SourcePVC", "The source PVC of the snapshot."),
         Col("SourceSnapshotContent", "The pre-existing VolumeSnapshotContent, if any."),
         Col("RestoreSize", "The minimum size of a volume restored from this snapshot."),
         Col("SnapshotClass", "The VolumeSnapshotClass requested by the VolumeSnapshot."),
         Col("SnapshotContent", "The VolumeSnapshotContent this snapshot intends to bind to."),
         Col("CreationTime", "When the storage system took the snapshot.", "date"), CrdAgeCol()},
        VolumeSnapshotCells}},
      {"VolumeSnapshotContent",
       {{NameCol(), Col("ReadyToUse", "Indicates if the snapshot is ready to be used to restore a volume.", "boolean"),
         Col("RestoreSize", "Represents the complete size of the snapshot in bytes", "integer"),
         Col("DeletionPolicy", "Whether the snapshot is deleted with its VolumeSnapshot."),
         Col("Driver", "The CSI driver that created the snapshot."),
         Col("VolumeSnapshotClass", "The VolumeSnapshotClass of this snapshot."),
         Col("VolumeSnapshot", "The VolumeSnapshot this content is bound to."),
         Col("VolumeSnapshotNamespace", "The namespace of that VolumeSnapshot."), CrdAgeCol()},
        VolumeSnapshotContentCells}},
  };
  return *tables;
}

const KindTable& TableFor(const KindInfo& kind) {
  static const auto* fallback = new KindTable{{NameCol(), Col("Created At", kAgeDescription, "date")}, DefaultCells};
  auto it = KindTables().find(kind.kind);
  return it == KindTables().end() ? *fallback : it->second;
}

// ---- Text rendering ------------------------------------------------------------------

// A cell as kubectl prints it: null as <none>, text cut at the first line
// break (with "..."), terminal escapes defused.
std::string CellText(const Json& cell) {
  if (cell.is_null()) return "<none>";
  if (cell.is_boolean()) return cell.get<bool>() ? "true" : "false";
  if (!cell.is_string()) return Dump(cell);
  std::string text = cell.get<std::string>();
  if (size_t cut = text.find_first_of("\f\n\r"); cut != std::string::npos) {
    text = text.substr(0, cut) + "...";
  }
  // A tab would split the cell in kubectl's tabwriter; keep the layout.
  return absl::StrReplaceAll(text, {{"\x1b", "^["}, {"\t", " "}});
}

// Display width: UTF-8 code points, as Go's tabwriter counts.
size_t TextWidth(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

}  // namespace

// kubectl's tabwriter: minwidth 6, padding 3; the last column is not padded.
std::string Tabulate(const std::vector<std::vector<std::string>>& lines) {
  constexpr size_t kMinWidth = 6;
  constexpr size_t kPadding = 3;
  std::vector<size_t> widths;
  for (const auto& line : lines) {
    if (widths.size() < line.size()) widths.resize(line.size(), kMinWidth);
    for (size_t i = 0; i < line.size(); ++i) {
      widths[i] = std::max(widths[i], TextWidth(line[i]) + kPadding);
    }
  }
  std::string out;
  for (const auto& line : lines) {
    for (size_t i = 0; i < line.size(); ++i) {
      out += line[i];
      if (i + 1 < line.size()) out.append(widths[i] - TextWidth(line[i]), ' ');
    }
    out += '\n';
  }
  return out;
}

std::string HumanDuration(absl::Duration d) {
  // A deviation of up to 2s (excluded) counts as now, for clock skew.
  const int64_t seconds = absl::ToInt64Seconds(d);
  if (seconds < -1) return "<invalid>";
  if (seconds < 0) return "0s";
  if (seconds < 60 * 2) return absl::StrCat(seconds, "s");
  const int64_t minutes = absl::ToInt64Minutes(d);
  if (minutes < 10) {
    const int64_t s = seconds % 60;
    return s == 0 ? absl::StrCat(minutes, "m") : absl::StrCat(minutes, "m", s, "s");
  }
  if (minutes < 60 * 3) return absl::StrCat(minutes, "m");
  const int64_t hours = absl::ToInt64Hours(d);
  if (hours < 8) {
    const int64_t m = minutes % 60;
    return m == 0 ? absl::StrCat(hours, "h") : absl::StrCat(hours, "h", m, "m");
  }
  if (hours < 48) return absl::StrCat(hours, "h");
  if (hours < 24 * 8) {
    const int64_t h = hours % 24;
    return h == 0 ? absl::StrCat(hours / 24, "d") : absl::StrCat(hours / 24, "d", h, "h");
  }
  if (hours < 24 * 365 * 2) return absl::StrCat(hours / 24, "d");
  if (hours < 24 * 365 * 8) {
    const int64_t days = (hours / 24) % 365;
    return days == 0 ? absl::StrCat(hours / 24 / 365, "y") : absl::StrCat(hours / 24 / 365, "y", days, "d");
  }
  return absl::StrCat(hours / 24 / 365, "y");
}

std::vector<TableColumn> TableColumns(const KindInfo& kind) { return TableFor(kind).columns; }

std::vector<nlohmann::json> TableCells(const KindInfo& kind, const nlohmann::json& object, absl::Time now) {
  return TableFor(kind).cells(object, now);
}

nlohmann::json BuildTable(const KindInfo& kind, const std::vector<nlohmann::json>& objects, absl::Time now,
                          const std::string& resource_version) {
  Json columns = Json::array();
  for (const TableColumn& c : TableColumns(kind)) {
    columns.push_back({{"name", c.name},
                       {"type", c.type},
                       {"format", c.format},
                       {"description", c.description},
                       {"priority", c.priority}});
  }
  Json rows = Json::array();
  for (const Json& object : objects) {
    const Json& object_metadata = At(object, {"metadata"});
    Json metadata = object_metadata.is_object() ? object_metadata : Json::object();
    if (auto it = metadata.find("annotations"); kind.kind == "Secret" && it != metadata.end() && it->is_object()) {
      // `kubectl apply` keeps the whole manifest, data included, here.
      it->erase("kubectl.kubernetes.io/last-applied-configuration");
    }
    Json row = {
        {"cells", TableCells(kind, object, now)},
        {"object",
         {{"kind", "PartialObjectMetadata"}, {"apiVersion", "meta.k8s.io/v1"}, {"metadata", std::move(metadata)}}}};
    if (kind.kind == "Pod") {
      const std::string phase = Str(object, {"status", "phase"});
      if (phase == "Succeeded" || phase == "Failed") {
        Json completed = {
            {"type", "Completed"},
            {"status", "True"},
            {"reason", phase},
            {"message", phase == "Succeeded" ? "The pod has completed successfully." : "The pod failed."}};
        row["conditions"] = Json::array({std::move(completed)});
      }
    }
    rows.push_back(std::move(row));
  }
  Json metadata = Json::object();
  if (!resource_version.empty()) metadata["resourceVersion"] = resource_version;
  return {{"kind", "Table"},
          {"apiVersion", "meta.k8s.io/v1"},
          {"metadata", std::move(metadata)},
          {"columnDefinitions", std::move(columns)},
          {"rows", std::move(rows)}};
}

std::string RenderTable(const nlohmann::json& table, bool wide, bool with_namespace, bool with_headers) {
  const Json& rows = Items(table, {"rows"});
  if (rows.empty()) return "";  // kubectl prints no headers for no rows
  const Json& columns = Items(table, {"columnDefinitions"});
  std::vector<size_t> shown;
  for (size_t i = 0; i < columns.size(); ++i) {
    if (wide || AsInt(At(columns[i], {"priority"})) == 0) shown.push_back(i);
  }
  std::vector<std::vector<std::string>> lines;
  if (with_headers) {
    std::vector<std::string>& header = lines.emplace_back();
    if (with_namespace) header.push_back("NAMESPACE");
    for (size_t i : shown) header.push_back(absl::AsciiStrToUpper(Str(columns[i], {"name"})));
  }
  for (const Json& row : rows) {
    std::vector<std::string>& line = lines.emplace_back();
    if (with_namespace) {
      const Json& metadata = At(row, {"object", "metadata"});
      line.push_back(metadata.is_object() ? CellText(Str(metadata, {"namespace"})) : "<none>");
    }
    const Json& cells = Items(row, {"cells"});
    for (size_t i : shown) line.push_back(i < cells.size() ? CellText(cells[i]) : "");
  }
  return Tabulate(lines);
}

}  // namespace berth::api
