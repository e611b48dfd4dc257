// core/v1 (k8s.io/api/core/v1): PersistentVolume, PersistentVolumeClaim and
// the references and selectors they share with other kinds. Pod and Node are
// in core_pod.h and core_node.h. Only the fields berth reads or writes have
// members; every other key is kept in `unknown` (fields.h).
//
//   BERTH_ASSIGN_OR_RETURN(PersistentVolumeClaim claim, Decode<PersistentVolumeClaim>(json));
//   if (claim.spec.volume_name.empty()) ...
//
// Thread-safety: value types.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "api/quantity.h"
#include "api/types/fields.h"
#include "api/types/meta.h"
#include "api/types/storage_class_rule.h"

namespace berth::api::types {

// ResourceList: resource name ("storage") → quantity.
using ResourceList = std::map<std::string, Quantity>;

struct ObjectReference {
  std::string kind;
  std::string namespace_;
  std::string name;
  std::string uid;
  std::string api_version;
  std::string resource_version;
  std::string field_path;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = ObjectReference;
    return std::tuple{F("kind", &T::kind),
                      F("namespace", &T::namespace_),
                      F("name", &T::name),
                      F("uid", &T::uid),
                      F("apiVersion", &T::api_version),
                      F("resourceVersion", &T::resource_version),
                      F("fieldPath", &T::field_path)};
  }
  bool operator==(const ObjectReference&) const = default;
};

struct SecretReference {
  std::string name;
  std::string namespace_;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = SecretReference;
    return std::tuple{F("name", &T::name), F("namespace", &T::namespace_)};
  }
  bool operator==(const SecretReference&) const = default;
};

struct TypedLocalObjectReference {
  std::optional<std::string> api_group;
  std::string kind;
  std::string name;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = TypedLocalObjectReference;
    return std::tuple{F("apiGroup", &T::api_group), Always("kind", &T::kind), Always("name", &T::name)};
  }
  bool operator==(const TypedLocalObjectReference&) const = default;
};

struct TypedObjectReference {
  std::optional<std::string> api_group;
  std::string kind;
  std::string name;
  std::optional<std::string> namespace_;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = TypedObjectReference;
    return std::tuple{F("apiGroup", &T::api_group), Always("kind", &T::kind), Always("name", &T::name),
                      F("namespace", &T::namespace_)};
  }
  bool operator==(const TypedObjectReference&) const = default;
};

struct NodeSelectorRequirement {
  std::string key;
  std::string operator_;  // `operator`
  std::vector<std::string> values;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = NodeSelectorRequirement;
    return std::tuple{Always("key", &T::key), Always("operator", &T::operator_), F("values", &T::values)};
  }
  bool operator==(const NodeSelectorRequirement&) const = default;
};

struct NodeSelectorTerm {
  std::vector<NodeSelectorRequirement> match_expressions;
  std::vector<NodeSelectorRequirement> match_fields;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = NodeSelectorTerm;
    return std::tuple{F("matchExpressions", &T::match_expressions), F("matchFields", &T::match_fields)};
  }
  bool operator==(const NodeSelectorTerm&) const = default;
};

struct NodeSelector {
  std::vector<NodeSelectorTerm> node_selector_terms;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = NodeSelector;
    return std::tuple{Always("nodeSelectorTerms", &T::node_selector_terms)};
  }
  bool operator==(const NodeSelector&) const = default;
};

struct VolumeNodeAffinity {
  std::optional<NodeSelector> required;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = VolumeNodeAffinity;
    return std::tuple{F("required", &T::required)};
  }
  bool operator==(const VolumeNodeAffinity&) const = default;
};

struct CSIPersistentVolumeSource {
  std::string driver;
  std::string volume_handle;
  bool read_only = false;
  std::string fs_type;
  StringMap volume_attributes;
  std::optional<SecretReference> controller_publish_secret_ref;
  std::optional<SecretReference> node_stage_secret_ref;
  std::optional<SecretReference> node_publish_secret_ref;
  std::optional<SecretReference> controller_expand_secret_ref;
  std::optional<SecretReference> node_expand_secret_ref;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = CSIPersistentVolumeSource;
    return std::tuple{Always("driver", &T::driver),
                      Always("volumeHandle", &T::volume_handle),
                      F("readOnly", &T::read_only),
                      F("fsType", &T::fs_type),
                      F("volumeAttributes", &T::volume_attributes),
                      F("controllerPublishSecretRef", &T::controller_publish_secret_ref),
                      F("nodeStageSecretRef", &T::node_stage_secret_ref),
                      F("nodePublishSecretRef", &T::node_publish_secret_ref),
                      F("controllerExpandSecretRef", &T::controller_expand_secret_ref),
                      F("nodeExpandSecretRef", &T::node_expand_secret_ref)};
  }
  bool operator==(const CSIPersistentVolumeSource&) const = default;
};

struct PersistentVolumeSpec {
  ResourceList capacity;
  std::optional<CSIPersistentVolumeSource> csi;  // other volume sources stay in `unknown`
  std::vector<std::string> access_modes;
  std::optional<ObjectReference> claim_ref;
  std::string persistent_volume_reclaim_policy;
  std::string storage_class_name;  // a plain string on PVs (a pointer on claims)
  std::vector<std::string> mount_options;
  std::optional<std::string> volume_mode;
  std::optional<VolumeNodeAffinity> node_affinity;
  std::optional<std::string> volume_attributes_class_name;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = PersistentVolumeSpec;
    return std::tuple{F("capacity", &T::capacity),
                      F("csi", &T::csi),
                      F("accessModes", &T::access_modes),
                      F("claimRef", &T::claim_ref),
                      F("persistentVolumeReclaimPolicy", &T::persistent_volume_reclaim_policy),
                      F("storageClassName", &T::storage_class_name),
                      F("mountOptions", &T::mount_options),
                      F("volumeMode", &T::volume_mode),
                      F("nodeAffinity", &T::node_affinity),
                      F("volumeAttributesClassName", &T::volume_attributes_class_name)};
  }
  bool operator==(const PersistentVolumeSpec&) const = default;
};

struct PersistentVolumeStatus {
  std::string phase;
  std::string message;
  std::string reason;
  std::optional<std::string> last_phase_transition_time;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = PersistentVolumeStatus;
    return std::tuple{F("phase", &T::phase), F("message", &T::message), F("reason", &T::reason),
                      F("lastPhaseTransitionTime", &T::last_phase_transition_time)};
  }
  bool operator==(const PersistentVolumeStatus&) const = default;
};

struct PersistentVolume {
  static constexpr std::string_view kKind = "PersistentVolume";
  std::string api_version;
  std::string kind;
  ObjectMeta metadata;
  PersistentVolumeSpec spec;
  PersistentVolumeStatus status;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = PersistentVolume;
    return std::tuple_cat(ObjectFields<T>(), std::tuple{F("spec", &T::spec), F("status", &T::status)});
  }
  bool operator==(const PersistentVolume&) const = default;
};

struct VolumeResourceRequirements {
  ResourceList limits;
  ResourceList requests;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = VolumeResourceRequirements;
    return std::tuple{F("limits", &T::limits), F("requests", &T::requests)};
  }
  bool operator==(const VolumeResourceRequirements&) const = default;
};

struct PersistentVolumeClaimSpec {
  std::vector<std::string> access_modes;
  std::optional<LabelSelector> selector;
  VolumeResourceRequirements resources;
  std::string volume_name;
  std::optional<std::string> storage_class_name;  // "" (no class) differs from absent (default class)
  std::optional<std::string> volume_mode;
  std::optional<TypedLocalObjectReference> data_source;
  std::optional<TypedObjectReference> data_source_ref;
  std::optional<std::string> volume_attributes_class_name;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = PersistentVolumeClaimSpec;
    return std::tuple{F("accessModes", &T::access_modes),
                      F("selector", &T::selector),
                      F("resources", &T::resources),
                      F("volumeName", &T::volume_name),
                      F("storageClassName", &T::storage_class_name),
                      F("volumeMode", &T::volume_mode),
                      F("dataSource", &T::data_source),
                      F("dataSourceRef", &T::data_source_ref),
                      F("volumeAttributesClassName", &T::volume_attributes_class_name)};
  }
  bool operator==(const PersistentVolumeClaimSpec&) const = default;
};

struct PersistentVolumeClaimCondition {
  std::string type;
  std::string status;
  std::string last_probe_time;
  std::string last_transition_time;
  std::string reason;
  std::string message;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = PersistentVolumeClaimCondition;
    return std::tuple{Always("type", &T::type),
                      Always("status", &T::status),
                      F("lastProbeTime", &T::last_probe_time),
                      F("lastTransitionTime", &T::last_transition_time),
                      F("reason", &T::reason),
                      F("message", &T::message)};
  }
  bool operator==(const PersistentVolumeClaimCondition&) const = default;
};

struct PersistentVolumeClaimStatus {
  std::string phase;
  std::vector<std::string> access_modes;
  ResourceList capacity;
  std::vector<PersistentVolumeClaimCondition> conditions;
  ResourceList allocated_resources;
  StringMap allocated_resource_statuses;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = PersistentVolumeClaimStatus;
    return std::tuple{F("phase", &T::phase),
                      F("accessModes", &T::access_modes),
                      F("capacity", &T::capacity),
                      F("conditions", &T::conditions),
                      F("allocatedResources", &T::allocated_resources),
                      F("allocatedResourceStatuses", &T::allocated_resource_statuses)};
  }
  bool operator==(const PersistentVolumeClaimStatus&) const = default;
};

struct PersistentVolumeClaim {
  static constexpr std::string_view kKind = "PersistentVolumeClaim";
  std::string api_version;
  std::string kind;
  ObjectMeta metadata;
  PersistentVolumeClaimSpec spec;
  PersistentVolumeClaimStatus status;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = PersistentVolumeClaim;
    return std::tuple_cat(ObjectFields<T>(), std::tuple{F("spec", &T::spec), F("status", &T::status)});
  }
  bool operator==(const PersistentVolumeClaim&) const = default;
};

// Classes as upstream's GetPersistentVolume{,Claim}Class read them: the beta
// annotation volume.beta.kubernetes.io/storage-class when present, else the
// spec's field. StorageClassOf (storage_class_rule.h) is the same rule on
// JSON.
std::string ClaimClass(const PersistentVolumeClaim& claim);
std::string VolumeClass(const PersistentVolume& volume);
// spec.volumeMode with the default "Filesystem".
std::string VolumeModeOf(const std::optional<std::string>& mode);

extern template absl::StatusOr<PersistentVolume> Decode<PersistentVolume>(const Json&);
extern template absl::StatusOr<PersistentVolumeClaim> Decode<PersistentVolumeClaim>(const Json&);
extern template Json Encode<PersistentVolume>(const PersistentVolume&);
extern template Json Encode<PersistentVolumeClaim>(const PersistentVolumeClaim&);

}  // namespace berth::api::types
