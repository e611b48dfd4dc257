// The backup hooks' runner of berth up (controllers/backup/hooks.h): CRI
// ExecSync in the pod's container on the runtime of the pod's node, as
// `berth exec` does. It lives here, not beside the hooks, because only this
// layer knows the nodes' runtimes (the controllers may not include cri/).
//
//   auto runner = CriHookRunner::ForEndpoints([&runtimes](const std::string& node) {
//     return runtimes.Endpoint(node);  // NodeRuntimes (runtime_setup.h)
//   });
//   absl::Status st = RunHooks(*runner, pods, HookPhase::kPre, &warnings, &reached);
//
// Thread-safety: thread-safe (as long as `runtime_of` is).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "api/types/core_pod.h"
#include "controllers/backup/hooks.h"
#include "cri/runtime.h"

namespace berth::cli {

class CriHookRunner final : public controllers::HookRunner {
 public:
  // The runtime of a node (not owned; outlives the call), or why there is
  // none.
  using RuntimeOf = std::function<absl::StatusOr<cri::Runtime*>(const std::string& node)>;
  explicit CriHookRunner(RuntimeOf runtime_of) : runtime_of_(std::move(runtime_of)) {}

  // The CRI endpoint of a node ("unix:///..."), "" for a node without a
  // runtime.
  using EndpointOf = std::function<std::string(const std::string& node)>;
  // Each node's runtime at its endpoint (asked at each call; one connection
  // per endpoint, made on first use and kept). FAILED_PRECONDITION for a
  // node without one (berth up --runtime=none, or not a node).
  static std::unique_ptr<CriHookRunner> ForEndpoints(EndpointOf endpoint_of);

  // controllers::HookRunner. The container's ID is read from the pod's
  // status.containerStatuses[].containerID ("containerd://<id>"); nothing
  // runs and FAILED_PRECONDITION when the pod is not Running, the container
  // is not running or has no ID, or its runtime no longer knows it.
  // DEADLINE_EXCEEDED naming the hook, the pod and the timeout when the
  // command ran past hook.timeout (the runtime kills it; whole seconds, as
  // CRI's ExecSync counts). ABORTED with the exit code and the last KiB of
  // its stderr and stdout when it exited non-zero. The runtime's other
  // errors keep their code, prefixed with the hook and the pod.
  absl::Status Run(const api::types::Pod& pod, const controllers::Hook& hook) override;

 private:
  const RuntimeOf runtime_of_;
};

// The runtime's ID of a container ID as Kubernetes writes it
// ("containerd://abc" -> "abc"; without a scheme: as is).
std::string RuntimeContainerId(const std::string& container_id);

// The end of a command's output for a message: stderr's last bytes, then
// stdout's, at most `limit` bytes together, trimmed, never starting inside a
// UTF-8 sequence.
std::string OutputTail(const std::string& stdout_text, const std::string& stderr_text, size_t limit = 1024);

}  // namespace berth::cli
