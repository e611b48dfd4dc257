// Admission plugins of the API server that change objects as they are
// written (the mutating half of kube-apiserver's admission chain), used by
// Registry for every writer. The storage ones (DefaultStorageClass,
// StorageObjectInUseProtection, PersistentVolumeClaimResize) live in
// registry.cc beside the state they read; this file holds the stateless ones.
//
// Thread-safety: stateless.
#pragma once

#include <cstdint>

#include "nlohmann/json.hpp"

namespace berth::apiserver {

// kube-apiserver's --default-not-ready-toleration-seconds and
// --default-unreachable-toleration-seconds.
inline constexpr int64_t kDefaultTolerationSeconds = 300;

// Kubernetes' DefaultTolerationSeconds admission, on pod creates and
// updates: a pod with no toleration covering node.kubernetes.io/not-ready
// (resp. .../unreachable) with effect NoExecute — a toleration whose key is
// that one or empty and whose effect is NoExecute or empty — gets
//   {key: node.kubernetes.io/not-ready, operator: Exists, effect: NoExecute, tolerationSeconds: 300}
// (resp. unreachable) appended, so taint-based eviction waits five minutes
// before evicting it from a failed node. Anything but a pod object with a
// spec is left alone.
void AddDefaultTolerations(nlohmann::json& pod);

}  // namespace berth::apiserver
