// storage.k8s.io/v1 (k8s.io/api/storage/v1): StorageClass,
// VolumeAttachment, CSIDriver, CSINode and CSIStorageCapacity. Only the
// fields berth reads or writes have members; every other key is kept in
// `unknown` (fields.h).
//
// Thread-safety: value types.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "api/types/core.h"
#include "api/types/fields.h"
#include "api/types/meta.h"

namespace berth::api::types {

struct TopologySelectorLabelRequirement {
  std::string key;
  std::vector<std::string> values;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = TopologySelectorLabelRequirement;
    return std::tuple{Always("key", &T::key), Always("values", &T::values)};
  }
  bool operator==(const TopologySelectorLabelRequirement&) const = default;
};

struct TopologySelectorTerm {
  std::vector<TopologySelectorLabelRequirement> match_label_expressions;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = TopologySelectorTerm;
    return std::tuple{F("matchLabelExpressions", &T::match_label_expressions)};
  }
  bool operator==(const TopologySelectorTerm&) const = default;
};

struct StorageClass {
  static constexpr std::string_view kKind = "StorageClass";
  std::string api_version;
  std::string kind;
  ObjectMeta metadata;
  std::string provisioner;
  StringMap parameters;
  std::optional<std::string> reclaim_policy;
  std::vector<std::string> mount_options;
  std::optional<bool> allow_volume_expansion;
  std::optional<std::string> volume_binding_mode;
  std::vector<TopologySelectorTerm> allowed_topologies;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = StorageClass;
    return std::tuple_cat(
        ObjectFields<T>(),
        std::tuple{Always("provisioner", &T::provisioner), F("parameters", &T::parameters),
                   F("reclaimPolicy", &T::reclaim_policy), F("mountOptions", &T::mount_options),
                   F("allowVolumeExpansion", &T::allow_volume_expansion),
                   F("volumeBindingMode", &T::volume_binding_mode), F("allowedTopologies", &T::allowed_topologies)});
  }
  bool operator==(const StorageClass&) const = default;

  bool WaitForFirstConsumer() const { return volume_binding_mode.value_or("") == "WaitForFirstConsumer"; }
};

struct VolumeAttachmentSource {
  std::optional<std::string> persistent_volume_name;
  Json inline_volume_spec;  // a PersistentVolumeSpec (CSI migration); berth serves none
  Unknown unknown;
  static constexpr auto Fields() {
    using T = VolumeAttachmentSource;
    return std::tuple{F("persistentVolumeName", &T::persistent_volume_name),
                      F("inlineVolumeSpec", &T::inline_volume_spec)};
  }
  bool operator==(const VolumeAttachmentSource&) const = default;
};

struct VolumeAttachmentSpec {
  std::string attacher;
  VolumeAttachmentSource source;
  std::string node_name;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = VolumeAttachmentSpec;
    return std::tuple{Always("attacher", &T::attacher), Always("source", &T::source),
                      Always("nodeName", &T::node_name)};
  }
  bool operator==(const VolumeAttachmentSpec&) const = default;
};

struct VolumeError {
  std::string time;
  std::string message;
  std::optional<int32_t> error_code;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = VolumeError;
    return std::tuple{F("time", &T::time), F("message", &T::message), F("errorCode", &T::error_code)};
  }
  bool operator==(const VolumeError&) const = default;
};

struct VolumeAttachmentStatus {
  bool attached = false;
  StringMap attachment_metadata;
  std::optional<VolumeError> attach_error;
  std::optional<VolumeError> detach_error;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = VolumeAttachmentStatus;
    return std::tuple{Always("attached", &T::attached), F("attachmentMetadata", &T::attachment_metadata),
                      F("attachError", &T::attach_error), F("detachError", &T::detach_error)};
  }
  bool operator==(const VolumeAttachmentStatus&) const = default;
};

struct VolumeAttachment {
  static constexpr std::string_view kKind = "VolumeAttachment";
  std::string api_version;
  std::string kind;
  ObjectMeta metadata;
  VolumeAttachmentSpec spec;
  VolumeAttachmentStatus status;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = VolumeAttachment;
    return std::tuple_cat(ObjectFields<T>(), std::tuple{F("spec", &T::spec), F("status", &T::status)});
  }
  bool operator==(const VolumeAttachment&) const = default;
};

struct TokenRequest {
  std::string audience;
  std::optional<int64_t> expiration_seconds;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = TokenRequest;
    return std::tuple{Always("audience", &T::audience), F("expirationSeconds", &T::expiration_seconds)};
  }
  bool operator==(const TokenRequest&) const = default;
};

struct CSIDriverSpec {
  std::optional<bool> attach_required;
  std::optional<bool> pod_info_on_mount;
  std::vector<std::string> volume_lifecycle_modes;
  std::optional<bool> storage_capacity;
  std::optional<std::string> fs_group_policy;
  std::vector<TokenRequest> token_requests;
  std::optional<bool> requires_republish;
  std::optional<bool> se_linux_mount;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = CSIDriverSpec;
    return std::tuple{F("attachRequired", &T::attach_required),
                      F("podInfoOnMount", &T::pod_info_on_mount),
                      F("volumeLifecycleModes", &T::volume_lifecycle_modes),
                      F("storageCapacity", &T::storage_capacity),
                      F("fsGroupPolicy", &T::fs_group_policy),
                      F("tokenRequests", &T::token_requests),
                      F("requiresRepublish", &T::requires_republish),
                      F("seLinuxMount", &T::se_linux_mount)};
  }
  bool operator==(const CSIDriverSpec&) const = default;
};

struct CSIDriver {
  static constexpr std::string_view kKind = "CSIDriver";
  std::string api_version;
  std::string kind;
  ObjectMeta metadata;
  CSIDriverSpec spec;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = CSIDriver;
    return std::tuple_cat(ObjectFields<T>(), std::tuple{Always("spec", &T::spec)});
  }
  bool operator==(const CSIDriver&) const = default;
};

struct VolumeNodeResources {
  std::optional<int32_t> count;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = VolumeNodeResources;
    return std::tuple{F("count", &T::count)};
  }
  bool operator==(const VolumeNodeResources&) const = default;
};

struct CSINodeDriver {
  std::string name;
  std::string node_id;  // `nodeID`
  std::vector<std::string> topology_keys;
  std::optional<VolumeNodeResources> allocatable;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = CSINodeDriver;
    return std::tuple{Always("name", &T::name), Always("nodeID", &T::node_id),
                      Always("topologyKeys", &T::topology_keys), F("allocatable", &T::allocatable)};
  }
  bool operator==(const CSINodeDriver&) const = default;
};

struct CSINodeSpec {
  std::vector<CSINodeDriver> drivers;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = CSINodeSpec;
    return std::tuple{Always("drivers", &T::drivers)};
  }
  bool operator==(const CSINodeSpec&) const = default;
};

struct CSINode {
  static constexpr std::string_view kKind = "CSINode";
  std::string api_version;
  std::string kind;
  ObjectMeta metadata;
  CSINodeSpec spec;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = CSINode;
    return std::tuple_cat(ObjectFields<T>(), std::tuple{F("spec", &T::spec)});
  }
  bool operator==(const CSINode&) const = default;

  // The entry of `driver`, or null.
  const CSINodeDriver* Driver(std::string_view driver) const {
    for (const auto& d : spec.drivers) {
      if (d.name == driver) return &d;
    }
    return nullptr;
  }
};

struct CSIStorageCapacity {
  static constexpr std::string_view kKind = "CSIStorageCapacity";
  std::string api_version;
  std::string kind;
  ObjectMeta metadata;
  std::optional<LabelSelector> node_topology;
  std::string storage_class_name;
  std::optional<Quantity> capacity;
  std::optional<Quantity> maximum_volume_size;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = CSIStorageCapacity;
    return std::tuple_cat(
        ObjectFields<T>(),
        std::tuple{F("nodeTopology", &T::node_topology), Always("storageClassName", &T::storage_class_name),
                   F("capacity", &T::capacity), F("maximumVolumeSize", &T::maximum_volume_size)});
  }
  bool operator==(const CSIStorageCapacity&) const = default;
};

extern template absl::StatusOr<StorageClass> Decode<StorageClass>(const Json&);
extern template absl::StatusOr<VolumeAttachment> Decode<VolumeAttachment>(const Json&);
extern template absl::StatusOr<CSIDriver> Decode<CSIDriver>(const Json&);
extern template absl::StatusOr<CSINode> Decode<CSINode>(const Json&);
extern template absl::StatusOr<CSIStorageCapacity> Decode<CSIStorageCapacity>(const Json&);
extern template Json Encode<StorageClass>(const StorageClass&);
extern template Json Encode<VolumeAttachment>(const VolumeAttachment&);
extern template Json Encode<CSIDriver>(const CSIDriver&);
extern template Json Encode<CSINode>(const CSINode&);
extern template Json Encode<CSIStorageCapacity>(const CSIStorageCapacity&);

}  // namespace berth::api::types
