#include "api/validation.h"

#include <set>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "api/errors.h"
#include "api/names.h"
#include "api/quantity.h"
#include "common/strings.h"

namespace berth::api {
namespace {

using nlohmann::json;

// The member `key` of `v` when both are what they should be, else a null.
const json& Get(const json& v, std::string_view key) {
  static const json* const kNull = new json();
  if (!v.is_object()) return *kNull;
  auto it = v.find(key);
  return it == v.end() ? *kNull : *it;
}

const json& Path(const json& v, std::initializer_list<std::string_view> keys) {
  const json* cur = &v;
  for (auto k : keys) cur = &Get(*cur, k);
  return *cur;
}

std::string String(const json& v) { return v.is_string() ? v.get<std::string>() : ""; }

std::string Quote(std::string_view s) { return StrCat("\"", s, "\""); }

std::string Supported(const std::vector<std::string_view>& values) {
  std::string out = "supported values: ";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i) out += ", ";
    out += Quote(values[i]);
  }
  return out;
}

// Records field errors in Kubernetes' "<field>: <Type>: <detail>" shape.
class Errors {
 public:
  void Required(const std::string& field, std::string_view detail = "") {
    Add(field, detail.empty() ? "Required value" : StrCat("Required value: ", detail));
  }
  void InvalidValue(const std::string& field, const json& value, std::string_view detail) {
    std::string shown = value.is_string() ? Quote(value.get<std::string>()) : value.dump();
    Add(field, StrCat("Invalid value: ", shown, ": ", detail));
  }
  void Unsupported(const std::string& field, const json& value,
                   const std::vector<std::string_view>& values) {
    Add(field, StrCat("Unsupported value: ", value.is_string() ? Quote(String(value)) : value.dump(),
                      ": ", Supported(values)));
  }
  void Forbidden(const std::string& field, std::string_view detail) {
    Add(field, StrCat("Forbidden: ", detail));
  }
  void Duplicate(const std::string& field, const json& value) {
    Add(field, StrCat("Duplicate value: ", value.is_string() ? Quote(String(value)) : value.dump()));
  }
  void NotFound(const std::string& field, const json& value) {
    Add(field, StrCat("Not found: ", value.is_string() ? Quote(String(value)) : value.dump()));
  }
  // A status from names.h: "<field>: <detail>".
  void FromStatus(const absl::Status& st) {
    if (st.ok()) return;
    std::string msg(st.message());
    size_t sep = msg.find(": ");
    if (sep == std::string::npos) {
      list_.push_back({"", msg});
    } else {
      list_.push_back({msg.substr(0, sep), msg.substr(sep + 2)});
    }
  }
  void Add(const std::string& field, std::string detail) {
    list_.push_back({field, std::move(detail)});
  }
  bool empty() const { return list_.empty(); }
  const FieldErrors& list() const { return list_; }

 private:
  FieldErrors list_;
};

void Enum(Errors& errs, const std::string& field, const json& value,
          const std::vector<std::string_view>& allowed, bool required = false) {
  if (value.is_null() || (value.is_string() && value.get<std::string>().empty())) {
    if (required) errs.Required(field);
    return;
  }
  for (auto a : allowed) {
    if (value.is_string() && value.get<std::string>() == a) return;
  }
  errs.Unsupported(field, value, allowed);
}

void RequiredString(Errors& errs, const std::string& field, const json& value) {
  if (String(value).empty()) errs.Required(field);
}

// > 0 quantity; `field` names it in the message.
void PositiveQuantity(Errors& errs, const std::string& field, const json& value) {
  if (value.is_null()) {
    errs.Required(field);
    return;
  }
  auto q = Quantity::Parse(value.is_string() ? value.get<std::string>() : value.dump());
  if (!q.ok()) {
    errs.InvalidValue(field, value, "must be a quantity");
  } else if (q->Value() <= 0) {
    errs.InvalidValue(field, value, "must be greater than zero");
  }
}

void AccessModes(Errors& errs, const std::string& field, const json& modes) {
  if (!modes.is_array() || modes.empty()) {
    errs.Required(field, "at least 1 access mode is required");
    return;
  }
  bool rwop = false;
  for (const auto& m : modes) {
    Enum(errs, field, m, {"ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod"});
    if (m == "ReadWriteOncePod") rwop = true;
  }
  if (rwop && modes.size() > 1) {
    errs.Forbidden(field, "may not use ReadWriteOncePod with other access modes");
  }
}

// Label and annotation keys: [prefix/]name, name ≤ 63 of [A-Za-z0-9._-]
// starting and ending alphanumeric, prefix a DNS subdomain.
bool ValidQualifiedName(std::string_view key) {
  std::string_view name = key;
  if (size_t slash = key.rfind('/'); slash != std::string_view::npos) {
    std::string_view prefix = key.substr(0, slash);
    name = key.substr(slash + 1);
    if (prefix.empty() || !ValidateDns1123Subdomain("", prefix).ok()) return false;
  }
  if (name.empty() || name.size() > 63) return false;
  auto alnum = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
  if (!alnum(name.front()) || !alnum(name.back())) return false;
  for (char c : name) {
    if (!alnum(c) && c != '-' && c != '_' && c != '.') return false;
  }
  return true;
}

bool ValidLabelValue(std::string_view v) {
  if (v.empty()) return true;
  return ValidQualifiedName(v) && v.find('/') == std::string_view::npos;
}

void ValidateMeta(const KindInfo& kind, const json& obj, const json* old, Errors& errs) {
  const json& meta = Get(obj, "metadata");
  const std::string name = String(Get(meta, "name"));
  if (name.empty()) {
    errs.Required("metadata.name", "name or generateName is required");
  } else if (kind.kind == "Namespace") {
    errs.FromStatus(ValidateDns1123Label("metadata.name", name));
  } else {
    errs.FromStatus(ValidateDns1123Subdomain("metadata.name", name));
  }
  if (kind.namespaced) {
    std::string ns = String(Get(meta, "namespace"));
    if (ns.empty()) {
      errs.Required("metadata.namespace");
    } else {
      errs.FromStatus(ValidateDns1123Label("metadata.namespace", ns));
    }
  }
  const json& labels = Get(meta, "labels");
  for (const auto& [k, v] : labels.items()) {  // null: no items
    if (!ValidQualifiedName(k)) {
      errs.InvalidValue("metadata.labels", k,
                        "name part must consist of alphanumeric characters, '-', '_' or '.', "
                        "and must start and end with an alphanumeric character");
    }
    if (!v.is_string() || !ValidLabelValue(v.get<std::string>())) {
      errs.InvalidValue("metadata.labels", v,
                        "a valid label must be an empty string or consist of alphanumeric "
                        "characters, '-', '_' or '.', and must start and end with an "
                        "alphanumeric character");
    }
  }
  const json& ann = Get(meta, "annotations");
  if (ann.is_object()) {
    size_t total = 0;
    for (const auto& [k, v] : ann.items()) {
      if (!ValidQualifiedName(k)) {
        errs.InvalidValue("metadata.annotations", k, "must be a qualified name");
      }
      total += k.size() + (v.is_string() ? v.get<std::string>().size() : 0);
    }
    if (total > 256 * 1024) {
      errs.Add("metadata.annotations", "Too long: must have at most 262144 bytes");
    }
  }
  if (old != nullptr) {
    const json& old_meta = Get(*old, "metadata");
    if (String(Get(meta, "uid")) != "" && String(Get(meta, "uid")) != String(Get(old_meta, "uid"))) {
      errs.InvalidValue("metadata.uid", Get(meta, "uid"), "field is immutable");
    }
  }
}

// ---- PersistentVolumeClaim ----

json ClaimSpecWithoutMutable(const json& spec) {
  json s = spec.is_object() ? spec : json::object();
  if (s.contains("resources") && s["resources"].is_object()) {
    s["resources"].erase("requests");
    if (s["resources"].empty()) s.erase("resources");
  }
  s.erase("volumeAttributesClassName");
  return s;
}

void ValidateClaim(const json& obj, const json* old, Errors& errs) {
  const json& spec = Get(obj, "spec");
  AccessModes(errs, "spec.accessModes", Get(spec, "accessModes"));
  const json& storage = Path(spec, {"resources", "requests", "storage"});
  if (storage.is_null()) {
    errs.Required("spec.resources[storage]");
  } else {
    PositiveQuantity(errs, "spec.resources[storage]", storage);
  }
  Enum(errs, "spec.volumeMode", Get(spec, "volumeMode"), {"Block", "Filesystem"});
  if (std::string sc = String(Get(spec, "storageClassName")); !sc.empty()) {
    errs.FromStatus(ValidateDns1123Subdomain("spec.storageClassName", sc));
  }
  for (const char* ds : {"dataSource", "dataSourceRef"}) {
    const json& src = Get(spec, ds);
    if (src.is_null()) continue;
    RequiredString(errs, StrCat("spec.", ds, ".kind"), Get(src, "kind"));
    RequiredString(errs, StrCat("spec.", ds, ".name"), Get(src, "name"));
    if (String(Get(src, "kind")) != "PersistentVolumeClaim" && String(Get(src, "apiGroup")).empty() &&
        !String(Get(src, "kind")).empty()) {
      errs.Required(StrCat("spec.", ds, ".apiGroup"),
                    "must be set for a data source that is not a PersistentVolumeClaim");
    }
  }
  if (old == nullptr) return;
  const json& old_spec = Get(*old, "spec");
  // The binder sets volumeName on an unbound claim; everything else but the
  // requested size is fixed at creation.
  json now_fixed = ClaimSpecWithoutMutable(spec), old_fixed = ClaimSpecWithoutMutable(old_spec);
  if (String(Get(old_spec, "volumeName")).empty()) {
    now_fixed.erase("volumeName");
    old_fixed.erase("volumeName");
  }
  if (now_fixed != old_fixed) {
    errs.Forbidden("spec",
                   "spec is immutable after creation except resources.requests and "
                   "volumeAttributesClassName for bound claims");
    return;
  }
  const json& old_storage = Path(old_spec, {"resources", "requests", "storage"});
  if (storage != old_storage && !storage.is_null() && !old_storage.is_null()) {
    if (String(Path(*old, {"status", "phase"})) != "Bound") {
      errs.Forbidden("spec.resources.requests.storage",
                     "only dynamically provisioned pvc can be resized and the storageclass "
                     "that provisions the pvc must support resize");
      return;
    }
    auto now = Quantity::Parse(String(storage)), before = Quantity::Parse(String(old_storage));
    if (now.ok() && before.ok() && *now < *before) {
      // RecoverVolumeExpansionFailure (on by default since Kubernetes
      // 1.32): a request may come back down — to recover from an expansion
      // that cannot succeed — but stay above what the volume already has.
      auto capacity = Quantity::Parse(String(Path(*old, {"status", "capacity", "storage"})));
      if (!capacity.ok() || *now <= *capacity) {
        errs.Forbidden("spec.resources.requests.storage", "field can not be less than status.capacity");
      }
    }
  }
}

// ---- PersistentVolume ----

constexpr std::string_view kPvSources[] = {
    "csi", "hostPath", "local", "nfs", "gcePersistentDisk", "awsElasticBlockStore", "glusterfs",
    "rbd", "iscsi", "cinder", "cephfs", "fc", "flocker", "flexVolume", "azureFile",
    "vsphereVolume", "quobyte", "azureDisk", "photonPersistentDisk", "portworxVolume", "scaleIO",
    "storageos"};

json PvSource(const json& spec) {
  json out = json::object();
  for (auto k : kPvSources) {
    if (spec.is_object() && spec.contains(k) && !spec[std::string(k)].is_null()) {
      out[std::string(k)] = spec[std::string(k)];
    }
  }
  return out;
}

void ValidateNodeSelector(Errors& errs, const std::string& field, const json& sel) {
  const json& terms = Get(sel, "nodeSelectorTerms");
  if (!terms.is_array() || terms.empty()) {
    errs.Required(StrCat(field, ".nodeSelectorTerms"), "must have at least one node selector term");
    return;
  }
  for (size_t i = 0; i < terms.size(); ++i) {
    const json& exprs = Get(terms[i], "matchExpressions");
    if (!exprs.is_array()) continue;
    for (size_t j = 0; j < exprs.size(); ++j) {
      std::string f = StrCat(field, ".nodeSelectorTerms[", i, "].matchExpressions[", j, "]");
      RequiredString(errs, StrCat(f, ".key"), Get(exprs[j], "key"));
      const json& op = Get(exprs[j], "operator");
      Enum(errs, StrCat(f, ".operator"), op, {"DoesNotExist", "Exists", "Gt", "In", "Lt", "NotIn"},
           true);
      const json& values = Get(exprs[j], "values");
      size_t n = values.is_array() ? values.size() : 0;
      if ((op == "In" || op == "NotIn") && n == 0) {
        errs.Required(StrCat(f, ".values"), "must be specified when `operator` is 'In' or 'NotIn'");
      }
      if ((op == "Exists" || op == "DoesNotExist") && n > 0) {
        errs.Forbidden(StrCat(f, ".values"),
                       "may not be specified when `operator` is 'Exists' or 'DoesNotExist'");
      }
    }
  }
}

void ValidateVolume(const json& obj, const json* old, Errors& errs) {
  const json& spec = Get(obj, "spec");
  const json& capacity = Get(spec, "capacity");
  if (!capacity.is_object() || !capacity.contains("storage")) {
    errs.Required("spec.capacity");
  } else {
    PositiveQuantity(errs, "spec.capacity[storage]", capacity["storage"]);
  }
  AccessModes(errs, "spec.accessModes", Get(spec, "accessModes"));
  json source = PvSource(spec);
  if (source.empty()) {
    errs.Required("spec", "must specify a volume type");
  } else if (source.size() > 1) {
    errs.Forbidden("spec", "may not specify more than 1 volume type");
  }
  if (const json& csi = Get(spec, "csi"); !csi.is_null()) {
    RequiredString(errs, "spec.csi.driver", Get(csi, "driver"));
    RequiredString(errs, "spec.csi.volumeHandle", Get(csi, "volumeHandle"));
  }
  if (const json& hp = Get(spec, "hostPath"); !hp.is_null()) {
    RequiredString(errs, "spec.hostPath.path", Get(hp, "path"));
  }
  if (const json& local = Get(spec, "local"); !local.is_null()) {
    RequiredString(errs, "spec.local.path", Get(local, "path"));
    if (Get(spec, "nodeAffinity").is_null()) {
      errs.Required("spec.nodeAffinity", "Local volume requires node affinity");
    }
  }
  Enum(errs, "spec.persistentVolumeReclaimPolicy", Get(spec, "persistentVolumeReclaimPolicy"),
       {"Delete", "Recycle", "Retain"});
  Enum(errs, "spec.volumeMode", Get(spec, "volumeMode"), {"Block", "Filesystem"});
  if (std::string sc = String(Get(spec, "storageClassName")); !sc.empty()) {
    errs.FromStatus(ValidateDns1123Subdomain("spec.storageClassName", sc));
  }
  if (const json& req = Path(spec, {"nodeAffinity", "required"}); !req.is_null()) {
    ValidateNodeSelector(errs, "spec.nodeAffinity.required", req);
  }
  Enum(errs, "status.phase", Path(obj, {"status", "phase"}),
       {"Available", "Bound", "Failed", "Pending", "Released"});
  if (old == nullptr) return;
  const json& old_spec = Get(*old, "spec");
  if (PvSource(spec) != PvSource(old_spec)) {
    errs.Forbidden("spec.persistentvolumesource",
                   "spec.persistentvolumesource is immutable after creation");
  }
  if (Get(spec, "volumeMode") != Get(old_spec, "volumeMode")) {
    errs.InvalidValue("spec.volumeMode", Get(spec, "volumeMode"), "field is immutable");
  }
  if (!Get(old_spec, "nodeAffinity").is_null() &&
      Get(spec, "nodeAffinity") != Get(old_spec, "nodeAffinity")) {
    errs.InvalidValue("spec.nodeAffinity", Get(spec, "nodeAffinity"), "field is immutable");
  }
}

// ---- storage.k8s.io ----

void ValidateStorageClass(const json& obj, const json* old, Errors& errs) {
  const json& provisioner = Get(obj, "provisioner");
  if (String(provisioner).empty()) {
    errs.Required("provisioner");
  } else if (!ValidQualifiedName(String(provisioner)) && !ValidateDns1123Subdomain("", String(provisioner)).ok()) {
    errs.InvalidValue("provisioner", provisioner, "must be a qualified name");
  }
  Enum(errs, "reclaimPolicy", Get(obj, "reclaimPolicy"), {"Delete", "Retain"});
  Enum(errs, "volumeBindingMode", Get(obj, "volumeBindingMode"),
       {"Immediate", "WaitForFirstConsumer"});
  if (const json& params = Get(obj, "parameters"); params.is_object() && params.size() > 512) {
    errs.Add("parameters", "Too many: must have at most 512 items");
  }
  const json& topo = Get(obj, "allowedTopologies");
  if (topo.is_array()) {
    for (size_t i = 0; i < topo.size(); ++i) {
      const json& exprs = Get(topo[i], "matchLabelExpressions");
      if (!exprs.is_array() || exprs.empty()) {
        errs.Required(StrCat("allowedTopologies[", i, "].matchLabelExpressions"),
                      "must have at least one label value requirement");
        continue;
      }
      for (size_t j = 0; j < exprs.size(); ++j) {
        std::string f = StrCat("allowedTopologies[", i, "].matchLabelExpressions[", j, "]");
        RequiredString(errs, StrCat(f, ".key"), Get(exprs[j], "key"));
        const json& values = Get(exprs[j], "values");
        if (!values.is_array() || values.empty()) {
          errs.Required(StrCat(f, ".values"), "must specify as least one value");
        }
      }
    }
  }
  if (old == nullptr) return;
  if (Get(obj, "parameters") != Get(*old, "parameters")) {
    errs.Forbidden("parameters", "updates to parameters are forbidden.");
  }
  if (provisioner != Get(*old, "provisioner")) {
    errs.Forbidden("provisioner", "updates to provisioner are forbidden.");
  }
  if (Get(obj, "reclaimPolicy") != Get(*old, "reclaimPolicy")) {
    errs.Forbidden("reclaimPolicy", "updates to reclaimPolicy are forbidden.");
  }
  if (Get(obj, "volumeBindingMode") != Get(*old, "volumeBindingMode")) {
    errs.InvalidValue("volumeBindingMode", Get(obj, "volumeBindingMode"), "field is immutable");
  }
}

void ValidateAttachment(const json& obj, const json* old, Errors& errs) {
  const json& spec = Get(obj, "spec");
  RequiredString(errs, "spec.attacher", Get(spec, "attacher"));
  RequiredString(errs, "spec.nodeName", Get(spec, "nodeName"));
  const json& src = Get(spec, "source");
  bool pv = !String(Get(src, "persistentVolumeName")).empty();
  bool inl = !Get(src, "inlineVolumeSpec").is_null();
  if (pv == inl) {
    errs.Required("spec.source", "must specify exactly one of inlineVolumeSpec and persistentVolumeName");
  }
  if (old != nullptr && spec != Get(*old, "spec")) {
    errs.InvalidValue("spec", spec, "field is immutable");
  }
}

void ValidateCsiDriver(const json& obj, Errors& errs) {
  const json& spec = Get(obj, "spec");
  if (String(Path(obj, {"metadata", "name"})).size() > 63) {
    errs.InvalidValue("metadata.name", Path(obj, {"metadata", "name"}), "must be no more than 63 characters");
  }
  if (const json& modes = Get(spec, "volumeLifecycleModes"); modes.is_array()) {
    for (const auto& m : modes) Enum(errs, "spec.volumeLifecycleModes", m, {"Ephemeral", "Persistent"});
  }
  Enum(errs, "spec.fsGroupPolicy", Get(spec, "fsGroupPolicy"), {"File", "None", "ReadWriteOnceWithFSType"});
}

void ValidateCsiNode(const json& obj, const json* old, Errors& errs) {
  const json& drivers = Path(obj, {"spec", "drivers"});
  std::set<std::string> seen;
  if (drivers.is_array()) {
    for (size_t i = 0; i < drivers.size(); ++i) {
      std::string f = StrCat("spec.drivers[", i, "]");
      const json& name = Get(drivers[i], "name");
      RequiredString(errs, StrCat(f, ".name"), name);
      if (!seen.insert(String(name)).second) errs.Duplicate(StrCat(f, ".name"), name);
      const json& node_id = Get(drivers[i], "nodeID");
      RequiredString(errs, StrCat(f, ".nodeID"), node_id);
      if (String(node_id).size() > 192) errs.Add(StrCat(f, ".nodeID"), "Too long: must have at most 192 bytes");
      const json& count = Path(drivers[i], {"allocatable", "count"});
      if (count.is_number() && count.get<double>() < 0) {
        errs.InvalidValue(StrCat(f, ".allocatable.count"), count, "must be greater than or equal to 0");
      }
      if (old == nullptr) continue;
      const json& old_drivers = Path(*old, {"spec", "drivers"});
      if (!old_drivers.is_array()) continue;
      for (const auto& od : old_drivers) {
        if (Get(od, "name") != name) continue;
        if (Get(od, "nodeID") != node_id) errs.InvalidValue(StrCat(f, ".nodeID"), node_id, "field is immutable");
        if (Get(od, "topologyKeys") != Get(drivers[i], "topologyKeys")) {
          errs.InvalidValue(StrCat(f, ".topologyKeys"), Get(drivers[i], "topologyKeys"), "field is immutable");
        }
      }
    }
  }
}

void ValidateCapacity(const json& obj, const json* old, Errors& errs) {
  const json& sc = Get(obj, "storageClassName");
  if (String(sc).empty()) {
    errs.Required("storageClassName");
  } else {
    errs.FromStatus(ValidateDns1123Subdomain("storageClassName", String(sc)));
  }
  for (const char* f : {"capacity", "maximumVolumeSize"}) {
    const json& q = Get(obj, f);
    if (q.is_null()) continue;
    auto parsed = Quantity::Parse(q.is_string() ? q.get<std::string>() : q.dump());
    if (parsed.ok() && parsed->Value() < 0) errs.InvalidValue(f, q, "must be greater than or equal to 0");
  }
  if (old != nullptr && sc != Get(*old, "storageClassName")) {
    errs.InvalidValue("storageClassName", sc, "field is immutable");
  }
}

// ---- core ----

constexpr std::string_view kPodVolumeSources[] = {
    "persistentVolumeClaim", "csi", "ephemeral", "emptyDir", "hostPath", "configMap", "secret",
    "projected", "downwardAPI", "nfs", "iscsi", "gitRepo", "gcePersistentDisk",
    "awsElasticBlockStore", "glusterfs", "rbd", "flexVolume", "cinder", "cephfs", "flocker", "fc",
    "azureFile", "vsphereVolume", "quobyte", "azureDisk", "photonPersistentDisk", "portworxVolume",
    "scaleIO", "storageos", "image"};

// core/v1 taints and tolerations (Kubernetes' validateNodeTaints and
// ValidateTolerations, the rules the node lifecycle controller, the
// scheduler and taint-based eviction rely on).

void ValidateTaints(const json& taints, Errors& errs) {
  if (!taints.is_array()) return;
  std::set<std::pair<std::string, std::string>> seen;  // (effect, key)
  for (size_t i = 0; i < taints.size(); ++i) {
    const std::string f = StrCat("spec.taints[", i, "]");
    const std::string key = String(Get(taints[i], "key"));
    if (key.empty()) {
      errs.Required(f + ".key");
    } else if (!ValidQualifiedName(key)) {
      errs.InvalidValue(f + ".key", key, "name part must consist of alphanumeric characters, '-', '_' or '.'");
    }
    if (!ValidLabelValue(String(Get(taints[i], "value")))) {
      errs.InvalidValue(f + ".value", Get(taints[i], "value"), "a valid label must be an empty string or consist of "
                        "alphanumeric characters, '-', '_' or '.'");
    }
    Enum(errs, f + ".effect", Get(taints[i], "effect"), {"NoSchedule", "PreferNoSchedule", "NoExecute"}, /*required=*/true);
    if (!seen.emplace(String(Get(taints[i], "effect")), key).second) {
      errs.Add(f, StrCat("Duplicate value: ", taints[i].dump(), ": taints must be unique by key and effect pair"));
    }
  }
}

void ValidateTolerations(const json& tolerations, Errors& errs) {
  if (!tolerations.is_array()) return;
  for (size_t i = 0; i < tolerations.size(); ++i) {
    const json& t = tolerations[i];
    const std::string f = StrCat("spec.tolerations[", i, "]");
    const std::string key = String(Get(t, "key")), op = String(Get(t, "operator"));
    if (!key.empty() && !ValidQualifiedName(key)) {
      errs.InvalidValue(f + ".key", key, "name part must consist of alphanumeric characters, '-', '_' or '.'");
    }
    if (key.empty() && op != "Exists") {
      errs.InvalidValue(f + ".operator", op,
                        "operator must be Exists when `key` is empty, which means \"match all values and all keys\"");
    }
    if (!Get(t, "tolerationSeconds").is_null() && String(Get(t, "effect")) != "NoExecute") {
      errs.InvalidValue(f + ".effect", String(Get(t, "effect")), "effect must be 'NoExecute' when `tolerationSeconds` is set");
    }
    if (op == "Exists" && !String(Get(t, "value")).empty()) {
      errs.InvalidValue(f + ".operator", t, "value must be empty when `operator` is 'Exists'");
    } else if (op != "Exists" && op != "Equal" && !op.empty()) {
      errs.Unsupported(f + ".operator", op, {"Equal", "Exists"});
    }
    Enum(errs, f + ".effect", Get(t, "effect"), {"NoSchedule", "PreferNoSchedule", "NoExecute"});
  }
}

// coordination.k8s.io/v1 Lease (ValidateLeaseSpec).
void ValidateLease(const json& obj, Errors& errs) {
  const json& spec = Get(obj, "spec");
  const json& duration = Get(spec, "leaseDurationSeconds");
  if (duration.is_number() && duration.get<double>() <= 0) {
    errs.InvalidValue("spec.leaseDurationSeconds", duration, "must be greater than 0");
  }
  const json& transitions = Get(spec, "leaseTransitions");
  if (transitions.is_number() && transitions.get<double>() < 0) {
    errs.InvalidValue("spec.leaseTransitions", transitions, "must be greater than or equal to 0");
  }
}

json PodSpecWithoutMutable(const json& spec) {
  json s = spec.is_object() ? spec : json::object();
  for (const char* list : {"containers", "initContainers"}) {
    if (s.contains(list) && s[list].is_array()) {
      for (auto& c : s[list]) {
        if (c.is_object()) c.erase("image");
      }
    }
  }
  s.erase("activeDeadlineSeconds");
  s.erase("tolerations");
  s.erase("terminationGracePeriodSeconds");
  return s;
}

void ValidatePod(const json& obj, const json* old, Errors& errs) {
  const json& spec = Get(obj, "spec");
  std::map<std::string, bool> volumes;  // name → is a claim
  const json& vols = Get(spec, "volumes");
  if (vols.is_array()) {
    for (size_t i = 0; i < vols.size(); ++i) {
      std::string f = StrCat("spec.volumes[", i, "]");
      const json& name = Get(vols[i], "name");
      if (String(name).empty()) {
        errs.Required(StrCat(f, ".name"));
      } else {
        errs.FromStatus(ValidateDns1123Label(StrCat(f, ".name"), String(name)));
      }
      int sources = 0;
      for (auto k : kPodVolumeSources) sources += !Get(vols[i], k).is_null();
      if (sources == 0) errs.Required(f, "must specify a volume type");
      if (sources > 1) errs.Forbidden(f, "may not specify more than 1 volume type");
      const json& claim = Get(vols[i], "persistentVolumeClaim");
      if (!claim.is_null()) RequiredString(errs, StrCat(f, ".persistentVolumeClaim.claimName"), Get(claim, "claimName"));
      if (!volumes.emplace(String(name), !claim.is_null() || !Get(vols[i], "ephemeral").is_null()).second) {
        errs.Duplicate(StrCat(f, ".name"), name);
      }
    }
  }
  const json& containers = Get(spec, "containers");
  if (!containers.is_array() || containers.empty()) errs.Required("spec.containers");
  std::set<std::string> names;
  for (const char* list : {"initContainers", "containers"}) {
    const json& cs = Get(spec, list);
    if (!cs.is_array()) continue;
    for (size_t i = 0; i < cs.size(); ++i) {
      std::string f = StrCat("spec.", list, "[", i, "]");
      const json& name = Get(cs[i], "name");
      if (String(name).empty()) {
        errs.Required(StrCat(f, ".name"));
      } else if (!names.insert(String(name)).second) {
        errs.Duplicate(StrCat(f, ".name"), name);
      }
      RequiredString(errs, StrCat(f, ".image"), Get(cs[i], "image"));
      const json& mounts = Get(cs[i], "volumeMounts");
      std::set<std::string> paths;
      if (mounts.is_array()) {
        for (size_t j = 0; j < mounts.size(); ++j) {
          std::string mf = StrCat(f, ".volumeMounts[", j, "]");
          const json& vname = Get(mounts[j], "name");
          if (!volumes.contains(String(vname))) errs.NotFound(StrCat(mf, ".name"), vname);
          const json& path = Get(mounts[j], "mountPath");
          RequiredString(errs, StrCat(mf, ".mountPath"), path);
          if (!String(path).empty() && !paths.insert(String(path)).second) {
            errs.Add(StrCat(mf, ".mountPath"), StrCat("Invalid value: ", Quote(String(path)), ": must be unique"));
          }
        }
      }
      const json& devices = Get(cs[i], "volumeDevices");
      if (devices.is_array()) {
        for (size_t j = 0; j < devices.size(); ++j) {
          std::string df = StrCat(f, ".volumeDevices[", j, "]");
          const json& vname = Get(devices[j], "name");
          auto it = volumes.find(String(vname));
          if (it == volumes.end()) {
            errs.NotFound(StrCat(df, ".name"), vname);
          } else if (!it->second) {
            errs.InvalidValue(StrCat(df, ".name"), vname,
                              "can only use volume source type of PersistentVolumeClaim or "
                              "Ephemeral for block mode");
          }
          RequiredString(errs, StrCat(df, ".devicePath"), Get(devices[j], "devicePath"));
        }
      }
    }
  }
  Enum(errs, "spec.restartPolicy", Get(spec, "restartPolicy"), {"Always", "Never", "OnFailure"});
  ValidateTolerations(Get(spec, "tolerations"), errs);
  Enum(errs, "status.phase", Path(obj, {"status", "phase"}),
       {"Failed", "Pending", "Running", "Succeeded", "Unknown"});
  if (old != nullptr && PodSpecWithoutMutable(spec) != PodSpecWithoutMutable(Get(*old, "spec"))) {
    errs.Forbidden("spec",
                   "pod updates may not change fields other than `spec.containers[*].image`, "
                   "`spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, "
                   "`spec.tolerations` (only additions to existing tolerations), "
                   "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was "
                   "previously negative)");
  }
}

void ValidateSecret(const json& obj, const json* old, Errors& errs) {
  const json& data = Get(obj, "data");
  size_t total = 0;
  if (data.is_object()) {
    for (const auto& [k, v] : data.items()) {
      bool ok = !k.empty() && k.size() <= 253 && k != "." && k != "..";
      for (char c : k) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.');
      if (!ok) {
        errs.InvalidValue(StrCat("data[", k, "]"), k,
                          "a valid config key must consist of alphanumeric characters, '-', '_' or '.'");
      }
      total += String(v).size();
    }
  }
  if (total > 4 * 1024 * 1024 / 3 + 4) errs.Add("data", "Too long: must have at most 1048576 bytes");
  if (old != nullptr && Get(*old, "immutable") == true) {
    if (Get(obj, "data") != Get(*old, "data")) errs.Forbidden("data", "field is immutable when `immutable` is set");
    if (Get(obj, "immutable") != true) errs.Forbidden("immutable", "field is immutable when `immutable` is set");
  }
  if (old != nullptr && Get(obj, "type") != Get(*old, "type")) {
    errs.InvalidValue("type", Get(obj, "type"), "field is immutable");
  }
}

void ValidateEvent(const json& obj, Errors& errs) {
  const json& involved = Get(obj, "involvedObject");
  std::string ns = String(Path(obj, {"metadata", "namespace"}));
  std::string ins = String(Get(involved, "namespace"));
  if (!ins.empty() && ins != ns) {
    errs.InvalidValue("involvedObject.namespace", Get(involved, "namespace"),
                      "does not match event.namespace");
  }
  Enum(errs, "type", Get(obj, "type"), {"Normal", "Warning"});
}

// ---- snapshot.storage.k8s.io ----

void ValidateSnapshotClass(const json& obj, Errors& errs) {
  RequiredString(errs, "driver", Get(obj, "driver"));
  Enum(errs, "deletionPolicy", Get(obj, "deletionPolicy"), {"Delete", "Retain"}, true);
}

void ValidateSnapshot(const json& obj, const json* old, Errors& errs) {
  const json& src = Path(obj, {"spec", "source"});
  bool pvc = !String(Get(src, "persistentVolumeClaimName")).empty();
  bool content = !String(Get(src, "volumeSnapshotContentName")).empty();
  if (pvc == content) {
    errs.Add("spec.source", "Invalid value: \"object\": exactly one of volumeSnapshotContentName "
                            "and persistentVolumeClaimName must be set");
  }
  if (old == nullptr) return;
  const json& old_src = Path(*old, {"spec", "source"});
  for (const char* f : {"persistentVolumeClaimName", "volumeSnapshotContentName"}) {
    if (Get(src, f) != Get(old_src, f)) {
      errs.Add(StrCat("spec.source.", f), StrCat("Invalid value: \"string\": ", f, " is immutable"));
    }
  }
  const json& cls = Path(obj, {"spec", "volumeSnapshotClassName"});
  const json& old_cls = Path(*old, {"spec", "volumeSnapshotClassName"});
  if (!old_cls.is_null() && cls != old_cls) {
    errs.InvalidValue("spec.volumeSnapshotClassName", cls, "field is immutable");
  }
}

void ValidateSnapshotContent(const json& obj, const json* old, Errors& errs) {
  const json& spec = Get(obj, "spec");
  RequiredString(errs, "spec.driver", Get(spec, "driver"));
  Enum(errs, "spec.deletionPolicy", Get(spec, "deletionPolicy"), {"Delete", "Retain"}, true);
  const json& ref = Get(spec, "volumeSnapshotRef");
  if (String(Get(ref, "name")).empty() || String(Get(ref, "namespace")).empty()) {
    errs.Add("spec.volumeSnapshotRef",
             "Invalid value: \"object\": both spec.volumeSnapshotRef.name and "
             "spec.volumeSnapshotRef.namespace must be set");
  }
  const json& src = Get(spec, "source");
  bool vol = !String(Get(src, "volumeHandle")).empty();
  bool snap = !String(Get(src, "snapshotHandle")).empty();
  if (vol == snap) {
    errs.Add("spec.source",
             "Invalid value: \"object\": exactly one of volumeHandle and snapshotHandle must be set");
  }
  Enum(errs, "spec.sourceVolumeMode", Get(spec, "sourceVolumeMode"), {"Block", "Filesystem"});
  if (old == nullptr) return;
  const json& old_src = Path(*old, {"spec", "source"});
  for (const char* f : {"volumeHandle", "snapshotHandle"}) {
    if (Get(src, f) != Get(old_src, f)) {
      errs.Add(StrCat("spec.source.", f), StrCat("Invalid value: \"string\": ", f, " is immutable"));
    }
  }
  const json& mode = Get(spec, "sourceVolumeMode");
  if (!Path(*old, {"spec", "sourceVolumeMode"}).is_null() && mode != Path(*old, {"spec", "sourceVolumeMode"})) {
    errs.InvalidValue("spec.sourceVolumeMode", mode, "sourceVolumeMode is immutable");
  }
}

void CanonicalQuantities(json& v, const Schema& s) {
  if (v.is_null()) return;
  switch (s.type) {
    case Schema::Type::kQuantity:
      if (auto q = Quantity::Parse(v.is_string() ? v.get<std::string>() : v.dump()); q.ok()) {
        v = q->ToString();
      }
      return;
    case Schema::Type::kObject:
      if (!v.is_object()) return;
      for (auto& [k, child] : v.items()) {
        auto it = s.fields.find(k);
        if (it != s.fields.end()) CanonicalQuantities(child, *it->second);
      }
      return;
    case Schema::Type::kArray:
      if (!v.is_array()) return;
      for (auto& child : v) CanonicalQuantities(child, *s.elem);
      return;
    case Schema::Type::kMap:
      if (!v.is_object()) return;
      for (auto& [k, child] : v.items()) CanonicalQuantities(child, *s.elem);
      return;
    default:
      return;
  }
}

void Default(json& obj, std::initializer_list<std::string_view> path, const json& value) {
  json* cur = &obj;
  for (size_t i = 0; i + 1 < path.size(); ++i) {
    std::string k(*(path.begin() + i));
    if (!cur->is_object()) return;
    if (!cur->contains(k) || (*cur)[k].is_null()) (*cur)[k] = json::object();
    cur = &(*cur)[k];
  }
  std::string last(*(path.end() - 1));
  if (!cur->is_object()) return;
  if (!cur->contains(last) || (*cur)[last].is_null()) (*cur)[last] = value;
}

}  // namespace

void Normalize(const KindInfo& kind, json& object) {
  CanonicalQuantities(object, SchemaFor(kind));
  if (kind.kind == "Secret" && object.contains("stringData")) {
    const json string_data = object["stringData"];
    object.erase("stringData");
    if (string_data.is_object()) {
      if (!object.contains("data") || !object["data"].is_object()) object["data"] = json::object();
      for (const auto& [k, v] : string_data.items()) {
        if (v.is_string()) object["data"][k] = absl::Base64Escape(v.get<std::string>());
      }
    }
  }
}

void ApplyDefaults(const KindInfo& kind, json& o) {
  const std::string_view k = kind.kind;
  if (k == "PersistentVolumeClaim") {
    Default(o, {"spec", "volumeMode"}, "Filesystem");
  } else if (k == "PersistentVolume") {
    Default(o, {"spec", "persistentVolumeReclaimPolicy"}, "Retain");
    Default(o, {"spec", "volumeMode"}, "Filesystem");
  } else if (k == "StorageClass") {
    Default(o, {"reclaimPolicy"}, "Delete");
    Default(o, {"volumeBindingMode"}, "Immediate");
  } else if (k == "CSIDriver") {
    Default(o, {"spec", "attachRequired"}, true);
    Default(o, {"spec", "podInfoOnMount"}, false);
    Default(o, {"spec", "volumeLifecycleModes"}, json::array({"Persistent"}));
    Default(o, {"spec", "storageCapacity"}, false);
    Default(o, {"spec", "fsGroupPolicy"}, "ReadWriteOnceWithFSType");
    Default(o, {"spec", "requiresRepublish"}, false);
    Default(o, {"spec", "seLinuxMount"}, false);
  } else if (k == "Secret") {
    Default(o, {"type"}, "Opaque");
  } else if (k == "Pod") {
    Default(o, {"spec", "restartPolicy"}, "Always");
    Default(o, {"spec", "dnsPolicy"}, "ClusterFirst");
    Default(o, {"spec", "schedulerName"}, "default-scheduler");
    Default(o, {"spec", "terminationGracePeriodSeconds"}, 30);
    Default(o, {"spec", "enableServiceLinks"}, true);
    for (const char* list : {"containers", "initContainers"}) {
      if (!o.contains("spec") || !o["spec"].is_object() || !o["spec"].contains(list) ||
          !o["spec"][list].is_array()) {
        continue;
      }
      for (auto& c : o["spec"][list]) {
        if (!c.is_object()) continue;
        Default(c, {"terminationMessagePath"}, "/dev/termination-log");
        Default(c, {"terminationMessagePolicy"}, "File");
        std::string image = String(Get(c, "image"));
        size_t slash = image.rfind('/');
        std::string last = slash == std::string::npos ? image : image.substr(slash + 1);
        bool latest = last.find(':') == std::string::npos || last.ends_with(":latest");
        if (image.find('@') != std::string::npos) latest = false;
        Default(c, {"imagePullPolicy"}, latest ? "Always" : "IfNotPresent");
      }
    }
    if (o.contains("spec") && o["spec"].is_object() && o["spec"].contains("volumes") &&
        o["spec"]["volumes"].is_array()) {
      for (auto& v : o["spec"]["volumes"]) {
        if (v.is_object() && v.contains("persistentVolumeClaim") && v["persistentVolumeClaim"].is_object()) {
          // Kubernetes keeps readOnly unset; nothing to default.
        }
      }
    }
  } else if (k == "Event") {
    Default(o, {"type"}, "Normal");
  }
}

absl::Status Validate(const KindInfo& kind, const json& object, const json* old) {
  Errors errs;
  ValidateMeta(kind, object, old, errs);
  const std::string_view k = kind.kind;
  if (k == "PersistentVolumeClaim") {
    ValidateClaim(object, old, errs);
  } else if (k == "PersistentVolume") {
    ValidateVolume(object, old, errs);
  } else if (k == "StorageClass") {
    ValidateStorageClass(object, old, errs);
  } else if (k == "VolumeAttachment") {
    ValidateAttachment(object, old, errs);
  } else if (k == "CSIDriver") {
    ValidateCsiDriver(object, errs);
  } else if (k == "CSINode") {
    ValidateCsiNode(object, old, errs);
  } else if (k == "CSIStorageCapacity") {
    ValidateCapacity(object, old, errs);
  } else if (k == "Pod") {
    ValidatePod(object, old, errs);
  } else if (k == "Secret") {
    ValidateSecret(object, old, errs);
  } else if (k == "Event") {
    ValidateEvent(object, errs);
  } else if (k == "Node") {
    ValidateTaints(Path(object, {"spec", "taints"}), errs);
  } else if (k == "Lease") {
    ValidateLease(object, errs);
  } else if (k == "VolumeSnapshotClass") {
    ValidateSnapshotClass(object, errs);
  } else if (k == "VolumeSnapshot") {
    ValidateSnapshot(object, old, errs);
  } else if (k == "VolumeSnapshotContent") {
    ValidateSnapshotContent(object, old, errs);
  }
  if (errs.empty()) return absl::OkStatus();
  return Invalid(kind.kind, String(Path(object, {"metadata", "name"})), errs.list());
}

}  // namespace berth::api
