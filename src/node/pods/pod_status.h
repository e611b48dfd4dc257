// A pod's status as kubelet reports it (kubelet_pods.go generateAPIPodStatus,
// status/generate.go), from the pod, its runtime state and why containers
// that should run do not:
//
//   phase        Pending / Running / Succeeded / Failed (kubelet's getPhase;
//                never out of a terminal phase)
//   conditions   PodReadyToStartContainers, Initialized, ContainersReady,
//                Ready, PodScheduled (others — set by the scheduler or by
//                someone else — are kept)
//   containerStatuses / initContainerStatuses
//                state waiting {reason, message} | running {startedAt} |
//                terminated {exitCode, reason, message, startedAt,
//                finishedAt, containerID}; lastState; ready; started;
//                restartCount; image; imageID; containerID
//   podIP(s), hostIP(s), startTime, qosClass
//
// Thread-safety: pure functions.
#pragma once

#include <map>
#include <string>

#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "node/pods/runtime_pod.h"

namespace berth::node::pods {

// Why a container that should run is waiting (kubelet's reason cache).
struct Waiting {
  std::string reason{};  // CrashLoopBackOff, ErrImagePull, ImagePullBackOff, CreateContainerConfigError, ...
  std::string message{};
};

// pod.spec[field] ("containers", "initContainers", "volumes"), or an empty
// array when it is absent.
const nlohmann::json& SpecList(const nlohmann::json& pod, const char* field);

struct StatusInputs {
  const nlohmann::json* pod = nullptr;
  const RuntimePod* runtime = nullptr;
  std::map<std::string, Waiting> waiting{};  // container name →
  std::string runtime_name = "containerd";   // containerID = <runtime_name>://<id>
  // The pod was deleted and its containers are stopped: the phase becomes
  // terminal (Succeeded if every container exited 0, else Failed).
  bool terminal = false;
  std::string host_ip{};
  absl::Time now{};
};

nlohmann::json GeneratePodStatus(const StatusInputs& in);

// kubelet's getPhase.
std::string PodPhase(const nlohmann::json& pod, const nlohmann::json& container_statuses,
                     const nlohmann::json& init_statuses, bool terminal);

// Guaranteed, Burstable or BestEffort (v1qos.GetPodQOS).
std::string QosClass(const nlohmann::json& pod);

// RFC 3339 in UTC with seconds, as Kubernetes' metav1.Time marshals.
std::string ApiTime(absl::Time t);

}  // namespace berth::node::pods
