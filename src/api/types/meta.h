// meta/v1 (k8s.io/apimachinery/pkg/apis/meta/v1): the object metadata
// every kind carries, owner references and label selectors. Members are the
// Go fields in snake_case, keys the Go JSON tags; see fields.h for the rules.
//
// Thread-safety: value types.
#pragma once

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "api/types/fields.h"

namespace berth::api::types {

using StringMap = std::map<std::string, std::string>;

struct OwnerReference {
  std::string api_version;
  std::string kind;
  std::string name;
  std::string uid;
  std::optional<bool> controller;
  std::optional<bool> block_owner_deletion;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = OwnerReference;
    return std::tuple{Always("apiVersion", &T::api_version),
                      Always("kind", &T::kind),
                      Always("name", &T::name),
                      Always("uid", &T::uid),
                      F("controller", &T::controller),
                      F("blockOwnerDeletion", &T::block_owner_deletion)};
  }
  bool operator==(const OwnerReference&) const = default;
};

struct ObjectMeta {
  std::string name;
  std::string generate_name;
  std::string namespace_;  // `namespace`
  std::string uid;
  std::string resource_version;
  int64_t generation = 0;
  std::string creation_timestamp;                 // RFC 3339
  std::optional<std::string> deletion_timestamp;  // RFC 3339
  std::optional<int64_t> deletion_grace_period_seconds;
  StringMap labels;
  StringMap annotations;
  std::vector<OwnerReference> owner_references;
  std::vector<std::string> finalizers;
  Unknown unknown;  // managedFields, selfLink, ...
  static constexpr auto Fields() {
    using T = ObjectMeta;
    return std::tuple{F("name", &T::name),
                      F("generateName", &T::generate_name),
                      F("namespace", &T::namespace_),
                      F("uid", &T::uid),
                      F("resourceVersion", &T::resource_version),
                      F("generation", &T::generation),
                      F("creationTimestamp", &T::creation_timestamp),
                      F("deletionTimestamp", &T::deletion_timestamp),
                      F("deletionGracePeriodSeconds", &T::deletion_grace_period_seconds),
                      F("labels", &T::labels),
                      F("annotations", &T::annotations),
                      F("ownerReferences", &T::owner_references),
                      F("finalizers", &T::finalizers)};
  }
  bool operator==(const ObjectMeta&) const = default;

  // The annotation's value, "" when absent.
  const std::string& Annotation(const std::string& key) const {
    static const std::string* const kEmpty = new std::string();
    auto it = annotations.find(key);
    return it == annotations.end() ? *kEmpty : it->second;
  }
  bool Deleting() const { return deletion_timestamp.has_value(); }
  bool HasFinalizer(const std::string& f) const {
    return std::find(finalizers.begin(), finalizers.end(), f) != finalizers.end();
  }
  // Adds or removes a finalizer; true if the list changed.
  bool SetFinalizer(const std::string& f, bool present) {
    auto it = std::find(finalizers.begin(), finalizers.end(), f);
    if (present == (it != finalizers.end())) return false;
    if (present) {
      finalizers.push_back(f);
    } else {
      finalizers.erase(it);
    }
    return true;
  }
  // The owner reference with controller: true, if any.
  const OwnerReference* Controller() const {
    for (const auto& r : owner_references) {
      if (r.controller.value_or(false)) return &r;
    }
    return nullptr;
  }
};

struct LabelSelectorRequirement {
  std::string key;
  std::string operator_;  // `operator`
  std::vector<std::string> values;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = LabelSelectorRequirement;
    return std::tuple{Always("key", &T::key), Always("operator", &T::operator_), F("values", &T::values)};
  }
  bool operator==(const LabelSelectorRequirement&) const = default;
};

struct LabelSelector {
  StringMap match_labels;
  std::vector<LabelSelectorRequirement> match_expressions;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = LabelSelector;
    return std::tuple{F("matchLabels", &T::match_labels), F("matchExpressions", &T::match_expressions)};
  }
  bool operator==(const LabelSelector&) const = default;
};

// TypeMeta and metadata, which every top-level kind starts with:
//   return std::tuple_cat(ObjectFields<T>(), std::tuple{F("spec", &T::spec), ...});
template <typename T>
constexpr auto ObjectFields() {
  return std::tuple{F("apiVersion", &T::api_version), F("kind", &T::kind), F("metadata", &T::metadata)};
}

}  // namespace berth::api::types
