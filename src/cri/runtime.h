// The Container Runtime Interface as the node agent uses it: kubelet's
// RuntimeService + ImageService (runtime.v1) behind one interface, so the pod
// workers run against a real runtime (containerd, CRI-O) over its unix socket
// or against an in-memory fake in unit tests.
//
//   auto runtime = cri::GrpcRuntime::Connect("unix:///var/lib/berth/containerd/n1/containerd.sock", {});
//   BERTH_ASSIGN_OR_RETURN(std::string id, (*runtime)->RunPodSandbox(config, ""));
//
// Every call of GrpcRuntime has a deadline (per method, as kubelet's
// --runtime-request-timeout: 2 min; StopContainer: its grace period + 2 min;
// ExecSync: its timeout + 2 min; image pulls: 15 min) and is retried with
// berth's jittered backoff while the runtime answers UNAVAILABLE (restarting),
// for up to `Options::retry_for`. Errors are absl::Status with the runtime's
// gRPC code (NOT_FOUND for a missing sandbox or container, ...).
//
// Thread-safety: implementations are thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/backoff.h"
#include "common/clock.h"
#include "cri/runtime/v1/api.grpc.pb.h"

namespace berth::cri {

namespace v1 = ::runtime::v1;

class Runtime {
 public:
  virtual ~Runtime() = default;

  virtual absl::StatusOr<v1::VersionResponse> Version() = 0;
  // RuntimeReady and NetworkReady.
  virtual absl::StatusOr<v1::RuntimeStatus> Status() = 0;

  // The new sandbox's ID.
  virtual absl::StatusOr<std::string> RunPodSandbox(const v1::PodSandboxConfig& config,
                                                    const std::string& runtime_handler) = 0;
  virtual absl::Status StopPodSandbox(const std::string& id) = 0;
  virtual absl::Status RemovePodSandbox(const std::string& id) = 0;
  virtual absl::StatusOr<v1::PodSandboxStatus> PodSandboxStatus(const std::string& id) = 0;
  virtual absl::StatusOr<std::vector<v1::PodSandbox>> ListPodSandbox(const v1::PodSandboxFilter& filter) = 0;

  // The new container's ID.
  virtual absl::StatusOr<std::string> CreateContainer(const std::string& sandbox_id, const v1::ContainerConfig& config,
                                                      const v1::PodSandboxConfig& sandbox_config) = 0;
  virtual absl::Status StartContainer(const std::string& id) = 0;
  // Stop signal, then SIGKILL after `grace` (whole seconds, at least 0).
  virtual absl::Status StopContainer(const std::string& id, absl::Duration grace) = 0;
  virtual absl::Status RemoveContainer(const std::string& id) = 0;
  virtual absl::StatusOr<std::vector<v1::Container>> ListContainers(const v1::ContainerFilter& filter) = 0;
  virtual absl::StatusOr<v1::ContainerStatus> ContainerStatus(const std::string& id) = 0;
  virtual absl::Status ReopenContainerLog(const std::string& id) = 0;
  // Runs `cmd` in the container; a non-zero exit is a result, not an error.
  // DEADLINE_EXCEEDED when it ran past `timeout`.
  virtual absl::StatusOr<v1::ExecSyncResponse> ExecSync(const std::string& id, const std::vector<std::string>& cmd,
                                                        absl::Duration timeout) = 0;
  // The URL on the runtime's streaming server where one exec (attach)
  // session of `request` is served, as kubelet proxies pods/exec
  // (pods/attach) to it. Nothing runs until a client connects there.
  virtual absl::StatusOr<std::string> Exec(const v1::ExecRequest& request) = 0;
  virtual absl::StatusOr<std::string> Attach(const v1::AttachRequest& request) = 0;

  virtual absl::StatusOr<std::vector<v1::Image>> ListImages() = 0;
  // nullopt-like: an Image with an empty id when the image is not present.
  virtual absl::StatusOr<v1::Image> ImageStatus(const std::string& image) = 0;
  // The pulled image's reference.
  virtual absl::StatusOr<std::string> PullImage(const std::string& image,
                                                const v1::PodSandboxConfig& sandbox_config) = 0;
  virtual absl::Status RemoveImage(const std::string& image) = 0;
};

// The runtime behind a CRI socket.
class GrpcRuntime final : public Runtime {
 public:
  struct Options {
    // kubelet's --runtime-request-timeout.
    absl::Duration request_timeout = absl::Minutes(2);
    absl::Duration pull_timeout = absl::Minutes(15);
    // How long a call keeps being retried while the runtime is UNAVAILABLE.
    absl::Duration retry_for = absl::Seconds(30);
    Backoff::Options backoff = {.initial = absl::Milliseconds(50), .max = absl::Seconds(2)};
    // Time for the retry waits (the per-attempt gRPC deadlines are real time).
    Clock* clock = nullptr;  // nullptr: RealClock()
  };
  // Does not wait for the runtime: the channel connects on the first call
  // (retried while UNAVAILABLE). INVALID_ARGUMENT for a bad endpoint.
  static absl::StatusOr<std::unique_ptr<GrpcRuntime>> Connect(const std::string& endpoint, Options options);

  const std::string& endpoint() const { return endpoint_; }

  // Runtime
  absl::StatusOr<v1::VersionResponse> Version() override;
  absl::StatusOr<v1::RuntimeStatus> Status() override;
  absl::StatusOr<std::string> RunPodSandbox(const v1::PodSandboxConfig& config,
                                            const std::string& runtime_handler) override;
  absl::Status StopPodSandbox(const std::string& id) override;
  absl::Status RemovePodSandbox(const std::string& id) override;
  absl::StatusOr<v1::PodSandboxStatus> PodSandboxStatus(const std::string& id) override;
  absl::StatusOr<std::vector<v1::PodSandbox>> ListPodSandbox(const v1::PodSandboxFilter& filter) override;
  absl::StatusOr<std::string> CreateContainer(const std::string& sandbox_id, const v1::ContainerConfig& config,
                                              const v1::PodSandboxConfig& sandbox_config) override;
  absl::Status StartContainer(const std::string& id) override;
  absl::Status StopContainer(const std::string& id, absl::Duration grace) override;
  absl::Status RemoveContainer(const std::string& id) override;
  absl::StatusOr<std::vector<v1::Container>> ListContainers(const v1::ContainerFilter& filter) override;
  absl::StatusOr<v1::ContainerStatus> ContainerStatus(const std::string& id) override;
  absl::Status ReopenContainerLog(const std::string& id) override;
  absl::StatusOr<v1::ExecSyncResponse> ExecSync(const std::string& id, const std::vector<std::string>& cmd,
                                                absl::Duration timeout) override;
  absl::StatusOr<std::string> Exec(const v1::ExecRequest& request) override;
  absl::StatusOr<std::string> Attach(const v1::AttachRequest& request) override;
  absl::StatusOr<std::vector<v1::Image>> ListImages() override;
  absl::StatusOr<v1::Image> ImageStatus(const std::string& image) override;
  absl::StatusOr<std::string> PullImage(const std::string& image, const v1::PodSandboxConfig& sandbox_config) override;
  absl::Status RemoveImage(const std::string& image) override;

 private:
  GrpcRuntime(std::string endpoint, Options options, std::shared_ptr<grpc::Channel> channel);

  // The one call layer: a deadline per attempt, retries while UNAVAILABLE,
  // the status converted and prefixed with the method name.
  template <typename Response, typename Request, typename Rpc>
  absl::StatusOr<Response> Call(const char* method, Rpc rpc, const Request& request, absl::Duration timeout);

  const std::string endpoint_;
  const Options options_;
  Clock& clock_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::RuntimeService::Stub> runtime_;
  std::unique_ptr<v1::ImageService::Stub> images_;
};

}  // namespace berth::cri
