// Validation of storage.k8s.io's kinds (StorageClass, VolumeAttachment,
// CSIDriver, CSINode, CSIStorageCapacity) and snapshot.storage.k8s.io's
// (VolumeSnapshotClass, VolumeSnapshot, VolumeSnapshotContent), as
// Kubernetes' pkg/apis/storage/validation and external-snapshotter's webhook.
#include "api/validation.h"

#include <set>
#include <string>
#include <vector>

#include "api/names.h"
#include "api/quantity.h"

#include "api/validation_internal.h"

namespace berth::api::validation_internal {

// ---- storage.k8s.io ----

void ValidateStorageClass(const json& obj, const json* old, Errors& errs) {
  const json& provisioner = Get(obj, "provisioner");
  if (String(provisioner).empty()) {
    errs.Required("provisioner");
  } else if (!ValidQualifiedName(String(provisioner)) && !ValidateDns1123Subdomain("", String(provisioner)).ok()) {
    errs.InvalidValue("provisioner", provisioner, "must be a qualified name");
  }
  Enum(errs, "reclaimPolicy", Get(obj, "reclaimPolicy"), {"Delete", "Retain"});
  Enum(errs, "volumeBindingMode", Get(obj, "volumeBindingMode"), {"Immediate", "WaitForFirstConsumer"});
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
    errs.Add("spec.source",
             "Invalid value: \"object\": exactly one of volumeSnapshotContentName "
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
    errs.Add("spec.source", "Invalid value: \"object\": exactly one of volumeHandle and snapshotHandle must be set");
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

}  // namespace berth::api::validation_internal
