// Reading Kubernetes objects (JSON) in controllers, tolerant of missing and
// ill-typed fields: a missing path reads as null / "".
//
// Thread-safety: stateless; safe to call concurrently.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <initializer_list>
#include <map>
#include <string>
#include <string_view>

#include "absl/strings/escaping.h"
#include "api/kinds.h"
#include "api/types/storage_class_rule.h"
#include "nlohmann/json.hpp"

namespace berth::client {

// The kind behind a resource ("persistentvolumeclaims", group "" = core).
// The names are compiled in: an unknown one is a bug, so it aborts.
inline const api::KindInfo& K(std::string_view resource, std::string_view group = "") {
  const api::KindInfo* kind = api::FindResource(group, resource);
  if (kind == nullptr) std::abort();
  return *kind;
}

// `o[key]`, or a null when `o` is not an object or has no `key`.
inline const nlohmann::json& Field(const nlohmann::json& o, std::string_view key) {
  static const nlohmann::json* const kNull = new nlohmann::json();
  if (!o.is_object()) return *kNull;
  auto it = o.find(key);
  return it == o.end() ? *kNull : *it;
}

// The value at `path`, or a null when any step is missing.
inline const nlohmann::json& FieldAt(const nlohmann::json& o, std::initializer_list<std::string_view> path) {
  const nlohmann::json* cur = &o;
  for (auto k : path) cur = &Field(*cur, k);
  return *cur;
}

// The string at `path`, or "".
inline std::string Str(const nlohmann::json& o, std::initializer_list<std::string_view> path) {
  const nlohmann::json& v = FieldAt(o, path);
  return v.is_string() ? v.get<std::string>() : "";
}

inline std::string Annotation(const nlohmann::json& o, const std::string& key) {
  return Str(o, {"metadata", "annotations", key});
}
inline std::string Uid(const nlohmann::json& o) { return Str(o, {"metadata", "uid"}); }
inline std::string Name(const nlohmann::json& o) { return Str(o, {"metadata", "name"}); }
inline std::string Ns(const nlohmann::json& o) { return Str(o, {"metadata", "namespace"}); }
inline bool Deleting(const nlohmann::json& o) { return !Field(Field(o, "metadata"), "deletionTimestamp").is_null(); }
inline bool HasFinalizer(const nlohmann::json& o, const std::string& f) {
  const nlohmann::json& list = Field(Field(o, "metadata"), "finalizers");
  return list.is_array() && std::find(list.begin(), list.end(), f) != list.end();
}

// The claim a pod volume uses ("" for other volume types): the claim it
// names, or for a generic ephemeral volume `<pod>-<volume>` (which must be
// controlled by the pod: see ControlledByPod). `ephemeral` says which.
inline std::string PodVolumeClaim(const nlohmann::json& pod, const nlohmann::json& volume, bool* ephemeral = nullptr) {
  if (ephemeral != nullptr) *ephemeral = false;
  if (std::string c = Str(volume, {"persistentVolumeClaim", "claimName"}); !c.empty()) return c;
  if (Field(volume, "ephemeral").is_object()) {
    if (ephemeral != nullptr) *ephemeral = true;
    return Str(pod, {"metadata", "name"}) + "-" + Str(volume, {"name"});
  }
  return "";
}

// Whether `claim`'s controlling owner is `pod` (Kubernetes'
// ephemeral.VolumeIsForPod).
inline bool ControlledByPod(const nlohmann::json& claim, const nlohmann::json& pod) {
  const nlohmann::json& refs = Field(Field(claim, "metadata"), "ownerReferences");
  if (!refs.is_array()) return false;
  for (const auto& r : refs) {
    if (r.is_object() && r.value("controller", false)) return Str(r, {"uid"}) == Uid(pod);
  }
  return false;
}

// A claim's or volume's class, by api::types::StorageClassOf's rule
// (the beta annotation, else spec.storageClassName).
inline std::string ClaimClass(const nlohmann::json& claim) { return api::types::StorageClassOf(claim); }
inline std::string VolumeClass(const nlohmann::json& volume) { return api::types::StorageClassOf(volume); }

// A Secret's data, base64-decoded (undecodable entries are skipped).
inline std::map<std::string, std::string> DecodedSecretData(const nlohmann::json& secret) {
  std::map<std::string, std::string> out;
  const auto& data = Field(secret, "data");
  if (!data.is_object()) return out;
  for (const auto& [k, v] : data.items()) {
    std::string decoded;
    if (v.is_string() && absl::Base64Unescape(v.get<std::string>(), &decoded)) out[k] = decoded;
  }
  return out;
}

}  // namespace berth::client
