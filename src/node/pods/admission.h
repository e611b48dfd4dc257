// What of a Pod spec berth's node agent cannot run (kubelet's admission, for
// berth's own limits). A pod that asks for one of these is not started: it
// fails at once with reason UnsupportedPodSpec and a message naming every
// field, and a Warning event — never silently run without it. The API server
// accepts such pods (they are valid Kubernetes, and a node without a runtime
// only mounts their volumes).
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace berth::node::pods {

// Each unsupported field as "spec.containers[0].livenessProbe (probes)";
// empty when the node can run the pod.
std::vector<std::string> UnsupportedPodFields(const nlohmann::json& pod);

}  // namespace berth::node::pods
