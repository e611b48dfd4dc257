// A pod as the container runtime sees it (kubelet's kubecontainer.PodStatus):
// its sandboxes and containers, newest first, built from the runtime's lists
// and container statuses. The pod workers decide on it (pod_actions.h) and
// report it (pod_status.h).
//
// The labels and annotations that tie runtime objects to pods are kubelet's
// (io.kubernetes.*), plus berth.io/node: a runtime shared with something else
// (kubelet, another berth) only ever has berth's own sandboxes touched.
//
// Thread-safety: value types.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "cri/runtime.h"

namespace berth::node::pods {

inline constexpr char kPodUidLabel[] = "io.kubernetes.pod.uid";
inline constexpr char kPodNameLabel[] = "io.kubernetes.pod.name";
inline constexpr char kPodNamespaceLabel[] = "io.kubernetes.pod.namespace";
inline constexpr char kContainerNameLabel[] = "io.kubernetes.container.name";
inline constexpr char kNodeLabel[] = "berth.io/node";
inline constexpr char kContainerHashAnnotation[] = "io.kubernetes.container.hash";
inline constexpr char kRestartCountAnnotation[] = "io.kubernetes.container.restartCount";
inline constexpr char kGracePeriodAnnotation[] = "io.kubernetes.pod.terminationGracePeriod";
inline constexpr char kTerminationMessagePathAnnotation[] = "io.kubernetes.container.terminationMessagePath";
inline constexpr char kTerminationMessagePolicyAnnotation[] = "io.kubernetes.container.terminationMessagePolicy";

struct SandboxState {
  std::string id{};
  uint32_t attempt = 0;
  bool ready = false;
  absl::Time created_at = absl::InfinitePast();
  std::vector<std::string> ips{};  // primary first; empty until the network is set up
};

// One container instance (kubecontainer.Status).
struct ContainerState {
  std::string id{};
  std::string name{};
  std::string sandbox_id{};
  cri::v1::ContainerState state = cri::v1::CONTAINER_UNKNOWN;
  absl::Time created_at = absl::InfinitePast();
  absl::Time started_at = absl::InfinitePast();
  absl::Time finished_at = absl::InfinitePast();
  int exit_code = 0;
  std::string reason{};  // "Completed", "Error", "OOMKilled" once exited
  std::string message{};
  std::string image{};      // the image as the runtime reports it
  std::string image_ref{};  // its digest reference (status imageID)
  int restart_count = 0;
  std::string hash{};  // of the spec it was created from

  bool running() const { return state == cri::v1::CONTAINER_RUNNING; }
  bool exited() const { return state == cri::v1::CONTAINER_EXITED; }
};

struct RuntimePod {
  std::string uid{};
  std::string ns{}, name{};                  // from the sandboxes' labels (pods gone from the API)
  std::vector<SandboxState> sandboxes{};     // newest first
  std::vector<ContainerState> containers{};  // newest first

  // The newest instance of the container called `name` (null: never ran).
  const ContainerState* Find(const std::string& container) const {
    for (const auto& c : containers) {
      if (c.name == container) return &c;
    }
    return nullptr;
  }
  bool AnyRunning() const {
    for (const auto& c : containers) {
      if (c.running() || c.state == cri::v1::CONTAINER_UNKNOWN) return true;
    }
    for (const auto& s : sandboxes) {
      if (s.ready) return true;
    }
    return false;
  }
  bool empty() const { return sandboxes.empty() && containers.empty(); }
};

// Runtime timestamps (nanoseconds since the epoch, 0: never) as times.
inline absl::Time FromUnixNanos(int64_t ns) { return ns == 0 ? absl::InfinitePast() : absl::FromUnixNanos(ns); }

}  // namespace berth::node::pods
