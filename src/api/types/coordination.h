// coordination.k8s.io/v1 (k8s.io/api/coordination/v1): Lease, the node
// heartbeat kubelet renews in kube-node-lease. See fields.h for the rules.
//
// Thread-safety: value types.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "api/types/fields.h"
#include "api/types/meta.h"

namespace berth::api::types {

struct LeaseSpec {
  std::optional<std::string> holder_identity;
  std::optional<int32_t> lease_duration_seconds;
  std::optional<std::string> acquire_time;  // MicroTime, RFC 3339 with microseconds
  std::optional<std::string> renew_time;    // MicroTime
  std::optional<int32_t> lease_transitions;
  Unknown unknown;  // strategy, preferredHolder
  static constexpr auto Fields() {
    using T = LeaseSpec;
    return std::tuple{F("holderIdentity", &T::holder_identity), F("leaseDurationSeconds", &T::lease_duration_seconds),
                      F("acquireTime", &T::acquire_time), F("renewTime", &T::renew_time),
                      F("leaseTransitions", &T::lease_transitions)};
  }
  bool operator==(const LeaseSpec&) const = default;
};

struct Lease {
  static constexpr std::string_view kKind = "Lease";
  std::string api_version;
  std::string kind;
  ObjectMeta metadata;
  LeaseSpec spec;
  Unknown unknown;
  static constexpr auto Fields() {
    using T = Lease;
    return std::tuple_cat(ObjectFields<T>(), std::tuple{F("spec", &T::spec)});
  }
  bool operator==(const Lease&) const = default;
};

extern template absl::StatusOr<Lease> Decode<Lease>(const Json&);
extern template Json Encode<Lease>(const Lease&);

}  // namespace berth::api::types
