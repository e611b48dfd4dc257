// core/v1 Node (k8s.io/api/core/v1): the fields the scheduler, the node
// lifecycle controller, the attach-detach controller and the node agent use.
// See fields.h for the rules; everything else stays in `unknown`.
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

struct Taint {
  std::string key;
  std::string value;
  std::string effect;
  std::optional<std::string> time_added;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = Taint;
    return std::tuple{Always("key", &T::key), F("value", &T::value), Always("effect", &T::effect),
                      F("timeAdded", &T::time_added)};
  }
  bool operator==(const Taint&) const = default;
};

struct NodeSpec {
  std::string pod_cidr;  // `podCIDR`
  std::vector<std::string> pod_cidrs;
  std::string provider_id;
  bool unschedulable = false;
  std::vector<Taint> taints;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = NodeSpec;
    return std::tuple{F("podCIDR", &T::pod_cidr), F("podCIDRs", &T::pod_cidrs), F("providerID", &T::provider_id),
                      F("unschedulable", &T::unschedulable), F("taints", &T::taints)};
  }
  bool operator==(const NodeSpec&) const = default;
};

struct NodeCondition {
  std::string type;
  std::string status;
  std::string last_heartbeat_time;
  std::string last_transition_time;
  std::string reason;
  std::string message;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = NodeCondition;
    return std::tuple{Always("type", &T::type),
                      Always("status", &T::status),
                      F("lastHeartbeatTime", &T::last_heartbeat_time),
                      F("lastTransitionTime", &T::last_transition_time),
                      F("reason", &T::reason),
                      F("message", &T::message)};
  }
  bool operator==(const NodeCondition&) const = default;
};

struct AttachedVolume {
  std::string name;
  std::string device_path;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = AttachedVolume;
    return std::tuple{Always("name", &T::name), Always("devicePath", &T::device_path)};
  }
  bool operator==(const AttachedVolume&) const = default;
};

struct NodeStatus {
  ResourceList capacity;
  ResourceList allocatable;
  std::string phase;
  std::vector<NodeCondition> conditions;
  std::vector<std::string> volumes_in_use;
  std::vector<AttachedVolume> volumes_attached;
  Unknown unknown;  // addresses, nodeInfo, images, daemonEndpoints, ...
  static constexpr auto Fields() {
    using T = NodeStatus;
    return std::tuple{F("capacity", &T::capacity),
                      F("allocatable", &T::allocatable),
                      F("phase", &T::phase),
                      F("conditions", &T::conditions),
                      F("volumesInUse", &T::volumes_in_use),
                      F("volumesAttached", &T::volumes_attached)};
  }
  bool operator==(const NodeStatus&) const = default;
};

struct Node {
  static constexpr std::string_view kKind = "Node";
  std::string api_version;
  std::string kind;
  ObjectMeta metadata;
  NodeSpec spec;
  NodeStatus status;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = Node;
    return std::tuple_cat(ObjectFields<T>(), std::tuple{F("spec", &T::spec), F("status", &T::status)});
  }
  bool operator==(const Node&) const = default;

  // The condition of `type` ("Ready"), or null.
  const NodeCondition* Condition(std::string_view type) const {
    for (const auto& c : status.conditions) {
      if (c.type == type) return &c;
    }
    return nullptr;
  }
};

extern template absl::StatusOr<Node> Decode<Node>(const Json&);
extern template Json Encode<Node>(const Node&);

}  // namespace berth::api::types
