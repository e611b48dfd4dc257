// Validation of the core group's kinds (PersistentVolumeClaim,
// PersistentVolume, Pod, Secret, Event, Node taints) and of Lease, as
// Kubernetes' pkg/apis/core/validation and coordination/validation.
#include "api/validation.h"

#include <set>
#include <string>
#include <vector>

#include "api/names.h"
#include "api/quantity.h"

#include "api/validation_internal.h"
#include "api/volume_sources.h"

namespace berth::api::validation_internal {

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
  // Most updates leave the spec as it was: then nothing is copied.
  if (spec != old_spec) {
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

// How many volume sources the spec sets (null is unset).
int PvSourceCount(const json& spec) {
  int n = 0;
  ForEachPvSource([&](std::string_view k) { n += Get(spec, k).is_null() ? 0 : 1; });
  return n;
}

// Whether two specs set the same volume sources to the same values,
// compared in place (a null source is an unset one).
bool SamePvSource(const json& a, const json& b) {
  bool same = true;
  ForEachPvSource([&](std::string_view k) { same = same && Get(a, k) == Get(b, k); });
  return same;
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
      Enum(errs, StrCat(f, ".operator"), op, {"DoesNotExist", "Exists", "Gt", "In", "Lt", "NotIn"}, true);
      const json& values = Get(exprs[j], "values");
      size_t n = values.is_array() ? values.size() : 0;
      if ((op == "In" || op == "NotIn") && n == 0) {
        errs.Required(StrCat(f, ".values"), "must be specified when `operator` is 'In' or 'NotIn'");
      }
      if ((op == "Exists" || op == "DoesNotExist") && n > 0) {
        errs.Forbidden(StrCat(f, ".values"), "may not be specified when `operator` is 'Exists' or 'DoesNotExist'");
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
  if (const int sources = PvSourceCount(spec); sources == 0) {
    errs.Required("spec", "must specify a volume type");
  } else if (sources > 1) {
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
  Enum(errs, "status.phase", Path(obj, {"status", "phase"}), {"Available", "Bound", "Failed", "Pending", "Released"});
  if (old == nullptr) return;
  const json& old_spec = Get(*old, "spec");
  if (!SamePvSource(spec, old_spec)) {
    errs.Forbidden("spec.persistentvolumesource", "spec.persistentvolumesource is immutable after creation");
  }
  if (Get(spec, "volumeMode") != Get(old_spec, "volumeMode")) {
    errs.InvalidValue("spec.volumeMode", Get(spec, "volumeMode"), "field is immutable");
  }
  if (!Get(old_spec, "nodeAffinity").is_null() && Get(spec, "nodeAffinity") != Get(old_spec, "nodeAffinity")) {
    errs.InvalidValue("spec.nodeAffinity", Get(spec, "nodeAffinity"), "field is immutable");
  }
}

// ---- core ----

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
      errs.InvalidValue(f + ".value", Get(taints[i], "value"),
                        "a valid label must be an empty string or consist of "
                        "alphanumeric characters, '-', '_' or '.'");
    }
    Enum(errs, f + ".effect", Get(taints[i], "effect"), {"NoSchedule", "PreferNoSchedule", "NoExecute"},
         /*required=*/true);
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
      errs.InvalidValue(f + ".effect", String(Get(t, "effect")),
                        "effect must be 'NoExecute' when `tolerationSeconds` is set");
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
      ForEachPodVolumeSource([&](std::string_view k) { sources += !Get(vols[i], k).is_null(); });
      if (sources == 0) errs.Required(f, "must specify a volume type");
      if (sources > 1) errs.Forbidden(f, "may not specify more than 1 volume type");
      const json& claim = Get(vols[i], "persistentVolumeClaim");
      if (!claim.is_null())
        RequiredString(errs, StrCat(f, ".persistentVolumeClaim.claimName"), Get(claim, "claimName"));
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
  Enum(errs, "status.phase", Path(obj, {"status", "phase"}), {"Failed", "Pending", "Running", "Succeeded", "Unknown"});
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
    errs.InvalidValue("involvedObject.namespace", Get(involved, "namespace"), "does not match event.namespace");
  }
  Enum(errs, "type", Get(obj, "type"), {"Normal", "Warning"});
}

}  // namespace berth::api::validation_internal
