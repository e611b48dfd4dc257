#include "api/validation.h"

#include <set>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "api/errors.h"
#include "api/names.h"
#include "api/quantity.h"
#include "api/validation_internal.h"
#include "common/strings.h"

namespace berth::api {
namespace validation_internal {

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

void Enum(Errors& errs, const std::string& field, const json& value, const std::vector<std::string_view>& allowed,
          bool required) {
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

}  // namespace validation_internal

namespace {

using namespace validation_internal;

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
      if (!o.contains("spec") || !o["spec"].is_object() || !o["spec"].contains(list) || !o["spec"][list].is_array()) {
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
  } else if (k == "BackupStorageLocation") {
    Default(o, {"spec", "accessMode"}, "ReadWrite");
  } else if (k == "Backup") {
    // Velero's default time to live. Only a Backup's: a Schedule's template
    // stays as written, and each backup it creates gets the default here.
    Default(o, {"spec", "ttl"}, "720h0m0s");
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
  } else if (k == "BackupStorageLocation") {
    ValidateBackupStorageLocation(object, errs);
  } else if (k == "Backup") {
    ValidateBackup(object, errs);
  } else if (k == "Restore") {
    ValidateRestore(object, errs);
  } else if (k == "Schedule") {
    ValidateSchedule(object, errs);
  }
  if (errs.empty()) return absl::OkStatus();
  return Invalid(kind.kind, String(Path(object, {"metadata", "name"})), errs.list());
}

}  // namespace berth::api
