// Node taints, pod tolerations and node readiness as Kubernetes defines them
// (k8s.io/api core/v1 helpers, component-helpers' scheduling/corev1 and the
// taint utilities of kube-controller-manager) — one home for the scheduler,
// the node lifecycle controller, taint-based eviction and attach-detach.
//
//   for (const Taint& t : NodeTaints(node)) {
//     if (t.effect == kNoExecute && !Tolerates(Field(pod["spec"], "tolerations"), t)) ...
//   }
//
// Thread-safety: stateless.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace berth::controllers {

// Taint keys the node lifecycle controller and kubelet use (core/v1).
inline constexpr char kTaintNodeNotReady[] = "node.kubernetes.io/not-ready";
inline constexpr char kTaintNodeUnreachable[] = "node.kubernetes.io/unreachable";
inline constexpr char kTaintNodeUnschedulable[] = "node.kubernetes.io/unschedulable";
inline constexpr char kTaintNodeOutOfService[] = "node.kubernetes.io/out-of-service";
inline constexpr char kNoSchedule[] = "NoSchedule";
inline constexpr char kPreferNoSchedule[] = "PreferNoSchedule";
inline constexpr char kNoExecute[] = "NoExecute";

struct Taint {
  std::string key;
  std::string value;
  std::string effect;
  std::string time_added;  // RFC 3339, "" when unset

  // Same key and effect (Kubernetes' Taint.MatchTaint: a node holds at most
  // one taint per pair).
  bool Matches(const Taint& other) const { return key == other.key && effect == other.effect; }
  nlohmann::json ToJson() const;
};

// The node's spec.taints (ill-typed entries skipped).
std::vector<Taint> NodeTaints(const nlohmann::json& node);
// Those with `effect`.
std::vector<Taint> NodeTaints(const nlohmann::json& node, const std::string& effect);
bool HasTaint(const nlohmann::json& node, const std::string& key, const std::string& effect);
bool HasTaintKey(const nlohmann::json& node, const std::string& key);

// Toleration.ToleratesTaint: an empty effect matches every effect, an empty
// key (operator Exists) every key; Exists ignores the value, Equal (or no
// operator) compares it.
bool ToleratesTaint(const nlohmann::json& toleration, const Taint& taint);
// Does any of `tolerations` (a pod's spec.tolerations) tolerate `taint`?
bool Tolerates(const nlohmann::json& tolerations, const Taint& taint);

// GetMatchingTolerations + getMinTolerationTime of taint-based eviction:
// whether every one of `taints` is tolerated, and if so for how long — the
// smallest tolerationSeconds among the first toleration matching each
// taint (≤ 0 counts as 0), or nullopt for "forever" (none of them sets
// tolerationSeconds). No taints: tolerated forever.
struct TolerationVerdict {
  bool tolerated = true;
  std::optional<absl::Duration> for_how_long;  // nullopt: forever
};
TolerationVerdict MatchTolerations(const nlohmann::json& tolerations, const std::vector<Taint>& taints);

// The node's Ready condition status: "True", "False", "Unknown", or "" when
// the node has none (never reported).
std::string NodeReadyStatus(const nlohmann::json& node);
// The Ready condition object (null when absent).
const nlohmann::json& NodeReadyCondition(const nlohmann::json& node);

}  // namespace berth::controllers
