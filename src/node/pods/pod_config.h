// A pod's and its containers' CRI configuration, as kubelet generates it
// (kuberuntime_sandbox.go generatePodSandboxConfig, kuberuntime_container.go
// generateContainerConfig, labels.go):
//
//   sandbox    metadata (name, uid, namespace, attempt), hostname, log
//              directory <log_root>/<namespace>_<name>_<uid>, labels (the
//              pod's + io.kubernetes.pod.{name,namespace,uid} + berth.io/node),
//              annotations, namespaces (hostNetwork/hostPID/hostIPC,
//              shareProcessNamespace), pod security context, sysctls
//   container  command/args with $(VAR) expansion, env (value and the
//              downward API's fieldRef), workingDir, volume mounts (read-only,
//              subPath, mount propagation), block devices (volumeDevices),
//              resources (limits → cgroup CPU quota and memory limit,
//              requests → CPU shares, QoS → OOM score), security context
//              (runAsUser/Group/NonRoot, readOnlyRootFilesystem, privileged,
//              capabilities, allowPrivilegeEscalation), log path
//              <name>/<restartCount>.log
//
// Errors are what kubelet reports as CreateContainerConfigError.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "cri/runtime.h"
#include "nlohmann/json.hpp"

namespace berth::node::pods {

// Where a pod volume is on the node (from the volume manager, or an
// emptyDir directory).
struct VolumePath {
  std::string path{};
  bool block = false;
  bool read_only = false;
};

// The pod's log directory: <log_root>/<namespace>_<name>_<uid>.
std::string PodLogDirectory(const std::string& log_root, const nlohmann::json& pod);

cri::v1::PodSandboxConfig SandboxConfig(const nlohmann::json& pod, uint32_t attempt, const std::string& node,
                                        const std::string& log_root);

struct ContainerInputs {
  const nlohmann::json* pod = nullptr;
  const nlohmann::json* container = nullptr;
  bool init = false;
  int restart_count = 0;
  std::string node{};
  std::string image_ref{};                      // the image as the runtime resolved it (its ID)
  std::map<std::string, VolumePath> volumes{};  // spec.volumes[].name →
  std::string pod_ip{};
  std::string host_ip{};
  int64_t node_memory_bytes = 0;  // for Burstable OOM scores
  // The image's user (ImageStatus), for runAsNonRoot: uid or -1, username.
  int64_t image_uid = -1;
  std::string image_user{};
};

absl::StatusOr<cri::v1::ContainerConfig> ContainerConfig(const ContainerInputs& in);

// Kubernetes' $(VAR) expansion of command and args ($$ is a literal $,
// undefined references stay as written).
std::string ExpandVars(const std::string& in, const std::map<std::string, std::string>& vars);

}  // namespace berth::node::pods
