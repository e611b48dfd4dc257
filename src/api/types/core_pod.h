// core/v1 Pod (k8s.io/api/core/v1): the fields the scheduler, the binder,
// the attach-detach and node lifecycle controllers and the volume manager
// use. Containers are modeled only as far as their volumes; their other keys
// (env, probes, resources, ...) stay in each container's `unknown`, so they
// survive a read-modify-write element by element. See fields.h.
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

struct VolumeMount {
  std::string name;
  bool read_only = false;
  std::string mount_path;
  std::string sub_path;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = VolumeMount;
    return std::tuple{Always("name", &T::name), F("readOnly", &T::read_only), Always("mountPath", &T::mount_path),
                      F("subPath", &T::sub_path)};
  }
  bool operator==(const VolumeMount&) const = default;
};

struct VolumeDevice {
  std::string name;
  std::string device_path;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = VolumeDevice;
    return std::tuple{Always("name", &T::name), Always("devicePath", &T::device_path)};
  }
  bool operator==(const VolumeDevice&) const = default;
};

struct Container {
  std::string name;
  std::string image;
  std::vector<std::string> command;
  std::vector<std::string> args;
  std::vector<VolumeMount> volume_mounts;
  std::vector<VolumeDevice> volume_devices;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = Container;
    return std::tuple{Always("name", &T::name),
                      F("image", &T::image),
                      F("command", &T::command),
                      F("args", &T::args),
                      F("volumeMounts", &T::volume_mounts),
                      F("volumeDevices", &T::volume_devices)};
  }
  bool operator==(const Container&) const = default;
};

struct PersistentVolumeClaimVolumeSource {
  std::string claim_name;
  bool read_only = false;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = PersistentVolumeClaimVolumeSource;
    return std::tuple{Always("claimName", &T::claim_name), F("readOnly", &T::read_only)};
  }
  bool operator==(const PersistentVolumeClaimVolumeSource&) const = default;
};

struct PersistentVolumeClaimTemplate {
  ObjectMeta metadata;
  PersistentVolumeClaimSpec spec;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = PersistentVolumeClaimTemplate;
    return std::tuple{F("metadata", &T::metadata), Always("spec", &T::spec)};
  }
  bool operator==(const PersistentVolumeClaimTemplate&) const = default;
};

struct EphemeralVolumeSource {
  std::optional<PersistentVolumeClaimTemplate> volume_claim_template;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = EphemeralVolumeSource;
    return std::tuple{F("volumeClaimTemplate", &T::volume_claim_template)};
  }
  bool operator==(const EphemeralVolumeSource&) const = default;
};

struct Volume {
  std::string name;
  // The volume sources berth serves; every other source stays in `unknown`.
  std::optional<PersistentVolumeClaimVolumeSource> persistent_volume_claim;
  std::optional<EphemeralVolumeSource> ephemeral;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = Volume;
    return std::tuple{Always("name", &T::name), F("persistentVolumeClaim", &T::persistent_volume_claim),
                      F("ephemeral", &T::ephemeral)};
  }
  bool operator==(const Volume&) const = default;
};

struct Toleration {
  std::string key;
  std::string operator_;  // `operator`
  std::string value;
  std::string effect;
  std::optional<int64_t> toleration_seconds;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = Toleration;
    return std::tuple{F("key", &T::key), F("operator", &T::operator_), F("value", &T::value), F("effect", &T::effect),
                      F("tolerationSeconds", &T::toleration_seconds)};
  }
  bool operator==(const Toleration&) const = default;
};

struct NodeAffinity {
  std::optional<NodeSelector> required_during_scheduling_ignored_during_execution;
  Unknown unknown;  // preferredDuringSchedulingIgnoredDuringExecution
  static constexpr auto Fields() {
    using T = NodeAffinity;
    return std::tuple{
        F("requiredDuringSchedulingIgnoredDuringExecution", &T::required_during_scheduling_ignored_during_execution)};
  }
  bool operator==(const NodeAffinity&) const = default;
};

struct Affinity {
  std::optional<NodeAffinity> node_affinity;
  Unknown unknown;  // podAffinity, podAntiAffinity
  static constexpr auto Fields() {
    using T = Affinity;
    return std::tuple{F("nodeAffinity", &T::node_affinity)};
  }
  bool operator==(const Affinity&) const = default;
};

struct PodSpec {
  std::vector<Volume> volumes;
  std::vector<Container> init_containers;
  std::vector<Container> containers;
  std::string restart_policy;
  std::optional<int64_t> termination_grace_period_seconds;
  StringMap node_selector;
  std::string service_account_name;
  std::string node_name;
  std::string hostname;
  std::optional<Affinity> affinity;
  std::string scheduler_name;
  std::vector<Toleration> tolerations;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = PodSpec;
    return std::tuple{F("volumes", &T::volumes),
                      F("initContainers", &T::init_containers),
                      Always("containers", &T::containers),
                      F("restartPolicy", &T::restart_policy),
                      F("terminationGracePeriodSeconds", &T::termination_grace_period_seconds),
                      F("nodeSelector", &T::node_selector),
                      F("serviceAccountName", &T::service_account_name),
                      F("nodeName", &T::node_name),
                      F("hostname", &T::hostname),
                      F("affinity", &T::affinity),
                      F("schedulerName", &T::scheduler_name),
                      F("tolerations", &T::tolerations)};
  }
  bool operator==(const PodSpec&) const = default;
};

// The fields of PersistentVolumeClaimCondition (core.h) again: Kubernetes
// keeps them as two API types that may diverge, and so does berth. Each
// struct's Fields() is its declaration, not logic.
struct PodCondition {
  std::string type;
  std::string status;
  std::string last_probe_time;
  std::string last_transition_time;
  std::string reason;
  std::string message;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = PodCondition;
    return std::tuple{Always("type", &T::type),
                      Always("status", &T::status),
                      F("lastProbeTime", &T::last_probe_time),
                      F("lastTransitionTime", &T::last_transition_time),
                      F("reason", &T::reason),
                      F("message", &T::message)};
  }
  bool operator==(const PodCondition&) const = default;
};

// Which of its states a container is in: only whether each is set is read
// (their contents stay as JSON).
struct ContainerState {
  Json waiting;
  Json running;
  Json terminated;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = ContainerState;
    return std::tuple{F("waiting", &T::waiting), F("running", &T::running), F("terminated", &T::terminated)};
  }
  bool operator==(const ContainerState&) const = default;
};

struct ContainerStatus {
  std::string name;
  ContainerState state;
  Unknown unknown;  // ready, restartCount, image, imageID, containerID, ...
  static constexpr auto Fields() {
    using T = ContainerStatus;
    return std::tuple{Always("name", &T::name), F("state", &T::state)};
  }
  bool operator==(const ContainerStatus&) const = default;
};

struct PodStatus {
  std::string phase;
  std::vector<PodCondition> conditions;
  std::string message;
  std::string reason;
  std::string nominated_node_name;
  std::vector<ContainerStatus> init_container_statuses;
  std::vector<ContainerStatus> container_statuses;
  std::vector<ContainerStatus> ephemeral_container_statuses;
  Unknown unknown;  // hostIP, podIP(s), startTime, qosClass, ...
  static constexpr auto Fields() {
    using T = PodStatus;
    return std::tuple{F("phase", &T::phase),
                      F("conditions", &T::conditions),
                      F("message", &T::message),
                      F("reason", &T::reason),
                      F("nominatedNodeName", &T::nominated_node_name),
                      F("initContainerStatuses", &T::init_container_statuses),
                      F("containerStatuses", &T::container_statuses),
                      F("ephemeralContainerStatuses", &T::ephemeral_container_statuses)};
  }
  bool operator==(const PodStatus&) const = default;
};

struct Pod {
  static constexpr std::string_view kKind = "Pod";
  std::string api_version;
  std::string kind;
  ObjectMeta metadata;
  PodSpec spec;
  PodStatus status;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = Pod;
    return std::tuple_cat(ObjectFields<T>(), std::tuple{F("spec", &T::spec), F("status", &T::status)});
  }
  bool operator==(const Pod&) const = default;

  // The condition of `type`, or null.
  const PodCondition* Condition(std::string_view type) const {
    for (const auto& c : status.conditions) {
      if (c.type == type) return &c;
    }
    return nullptr;
  }
  // The claim a volume uses ("" for other volume types): the claim it names,
  // or for a generic ephemeral volume `<pod>-<volume>` (which must be
  // controlled by the pod). `ephemeral` says which.
  std::string VolumeClaim(const Volume& volume, bool* ephemeral = nullptr) const {
    if (ephemeral != nullptr) *ephemeral = false;
    if (volume.persistent_volume_claim && !volume.persistent_volume_claim->claim_name.empty()) {
      return volume.persistent_volume_claim->claim_name;
    }
    if (volume.ephemeral) {
      if (ephemeral != nullptr) *ephemeral = true;
      return metadata.name + "-" + volume.name;
    }
    return "";
  }
};

extern template absl::StatusOr<Pod> Decode<Pod>(const Json&);
extern template Json Encode<Pod>(const Pod&);

}  // namespace berth::api::types
