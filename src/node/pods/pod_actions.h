// What to do to make the runtime match a pod (kubelet's computePodActions,
// kuberuntime_manager.go): kill the pod, (re)create its sandbox, start the
// next init container, start or restart containers — by restartPolicy, in
// kubelet's order: sandbox → init containers one at a time, in order →
// containers. Pure functions over the pod and its runtime state; the pod
// worker carries them out (and applies the crash-loop backoff).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "nlohmann/json.hpp"
#include "node/pods/runtime_pod.h"

namespace berth::node::pods {

struct PodActions {
  // Stop every container and sandbox of the pod (before a new sandbox, or
  // because nothing is left to run).
  bool kill_pod = false;
  bool create_sandbox = false;
  std::string sandbox_id{};  // the current (newest) sandbox, if any
  uint32_t attempt = 0;      // the sandbox attempt to create
  int next_init = -1;        // index in spec.initContainers to start, -1: none
  std::vector<int> start{};  // indexes in spec.containers to (re)start
  // Containers to stop before anything starts: (id, why).
  std::vector<std::pair<std::string, std::string>> kill{};
};

PodActions ComputePodActions(const nlohmann::json& pod, const RuntimePod& runtime);

// kubelet's ShouldContainerBeRestarted: never for a deleted pod; a container
// that never ran or is only created starts; an exited one by restartPolicy
// (Never: no; OnFailure: only after a non-zero exit; Always: yes).
bool ShouldContainerBeRestarted(const nlohmann::json& container, const nlohmann::json& pod, const RuntimePod& runtime);

// spec.restartPolicy, "Always" when unset.
std::string RestartPolicy(const nlohmann::json& pod);

// Whether the newest sandbox cannot be used and a new one is needed (none,
// not ready, no IP, or several ready): kubelet's PodSandboxChanged.
bool SandboxChanged(const nlohmann::json& pod, const RuntimePod& runtime, uint32_t* attempt, std::string* sandbox_id);

// A stable digest of a container's spec (the hash annotation): a container
// whose spec changed is restarted.
std::string ContainerHash(const nlohmann::json& container);

}  // namespace berth::node::pods
