#include "cri/runtime.h"

#include <utility>

#include "common/status.h"
#include "common/strings.h"
#include "csi/client.h"
#include "csi/endpoint.h"
#include "csi/grpc_status.h"
#include "grpcpp/client_context.h"

namespace berth::cri {

GrpcRuntime::GrpcRuntime(std::string endpoint, Options options, std::shared_ptr<grpc::Channel> channel)
    : endpoint_(std::move(endpoint)),
      options_(options),
      clock_(options.clock != nullptr ? *options.clock : RealClock()),
      channel_(std::move(channel)),
      runtime_(v1::RuntimeService::NewStub(channel_)),
      images_(v1::ImageService::NewStub(channel_)) {}

absl::StatusOr<std::unique_ptr<GrpcRuntime>> GrpcRuntime::Connect(const std::string& endpoint, Options options) {
  auto path = csi::ParseUnixEndpoint(endpoint);
  if (!path.ok()) {
    return absl::InvalidArgumentError(StrCat("container runtime endpoint: ", path.status().message()));
  }
  auto channel = csi::UnixChannel(*path, options.backoff);
  return std::unique_ptr<GrpcRuntime>(new GrpcRuntime(endpoint, options, std::move(channel)));
}

template <typename Response, typename Request, typename Rpc>
absl::StatusOr<Response> GrpcRuntime::Call(const char* method, Rpc rpc, const Request& request,
                                           absl::Duration timeout) {
  Backoff backoff(options_.backoff);
  const absl::Time give_up = clock_.Now() + options_.retry_for;
  for (;;) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    Response response;
    const grpc::Status st = rpc(&ctx, request, &response);
    if (st.ok()) return response;
    if (st.error_code() == grpc::StatusCode::UNAVAILABLE) {
      const absl::Duration wait = backoff.Next();
      if (clock_.Now() + wait < give_up) {
        clock_.SleepFor(wait);
        continue;
      }
    }
    const absl::Status converted = csi::FromGrpcStatus(st);
    return absl::Status(converted.code(), StrCat(method, ": ", converted.message()));
  }
}

// The stubs' methods, bound for Call.
#define BERTH_CRI_RPC(stub, name)                                                                        \
  [this](grpc::ClientContext* rpc_ctx, const v1::name##Request& rpc_req, v1::name##Response* rpc_resp) { \
    return stub->name(rpc_ctx, rpc_req, rpc_resp);                                                       \
  }

absl::StatusOr<v1::VersionResponse> GrpcRuntime::Version() {
  v1::VersionRequest req;
  req.set_version("v1");
  return Call<v1::VersionResponse>("Version", BERTH_CRI_RPC(runtime_, Version), req, options_.request_timeout);
}

absl::StatusOr<v1::RuntimeStatus> GrpcRuntime::Status() {
  BERTH_ASSIGN_OR_RETURN(auto resp, Call<v1::StatusResponse>("Status", BERTH_CRI_RPC(runtime_, Status),
                                                             v1::StatusRequest(), options_.request_timeout));
  return resp.status();
}

absl::StatusOr<std::string> GrpcRuntime::RunPodSandbox(const v1::PodSandboxConfig& config,
                                                       const std::string& runtime_handler) {
  v1::RunPodSandboxRequest req;
  *req.mutable_config() = config;
  req.set_runtime_handler(runtime_handler);
  BERTH_ASSIGN_OR_RETURN(auto resp,
                         Call<v1::RunPodSandboxResponse>("RunPodSandbox", BERTH_CRI_RPC(runtime_, RunPodSandbox), req,
                                                         options_.request_timeout));
  return resp.pod_sandbox_id();
}

absl::Status GrpcRuntime::StopPodSandbox(const std::string& id) {
  v1::StopPodSandboxRequest req;
  req.set_pod_sandbox_id(id);
  return Call<v1::StopPodSandboxResponse>("StopPodSandbox", BERTH_CRI_RPC(runtime_, StopPodSandbox), req,
                                          options_.request_timeout)
      .status();
}

absl::Status GrpcRuntime::RemovePodSandbox(const std::string& id) {
  v1::RemovePodSandboxRequest req;
  req.set_pod_sandbox_id(id);
  return Call<v1::RemovePodSandboxResponse>("RemovePodSandbox", BERTH_CRI_RPC(runtime_, RemovePodSandbox), req,
                                            options_.request_timeout)
      .status();
}

absl::StatusOr<v1::PodSandboxStatus> GrpcRuntime::PodSandboxStatus(const std::string& id) {
  v1::PodSandboxStatusRequest req;
  req.set_pod_sandbox_id(id);
  BERTH_ASSIGN_OR_RETURN(
      auto resp, Call<v1::PodSandboxStatusResponse>("PodSandboxStatus", BERTH_CRI_RPC(runtime_, PodSandboxStatus), req,
                                                    options_.request_timeout));
  return resp.status();
}

absl::StatusOr<std::vector<v1::PodSandbox>> GrpcRuntime::ListPodSandbox(const v1::PodSandboxFilter& filter) {
  v1::ListPodSandboxRequest req;
  *req.mutable_filter() = filter;
  BERTH_ASSIGN_OR_RETURN(
      auto resp, Call<v1::ListPodSandboxResponse>("ListPodSandbox", BERTH_CRI_RPC(runtime_, ListPodSandbox), req,
                                                  options_.request_timeout));
  return std::vector<v1::PodSandbox>(resp.items().begin(), resp.items().end());
}

absl::StatusOr<std::string> GrpcRuntime::CreateContainer(const std::string& sandbox_id,
                                                         const v1::ContainerConfig& config,
                                                         const v1::PodSandboxConfig& sandbox_config) {
  v1::CreateContainerRequest req;
  req.set_pod_sandbox_id(sandbox_id);
  *req.mutable_config() = config;
  *req.mutable_sandbox_config() = sandbox_config;
  BERTH_ASSIGN_OR_RETURN(
      auto resp, Call<v1::CreateContainerResponse>("CreateContainer", BERTH_CRI_RPC(runtime_, CreateContainer), req,
                                                   options_.request_timeout));
  return resp.container_id();
}

absl::Status GrpcRuntime::StartContainer(const std::string& id) {
  v1::StartContainerRequest req;
  req.set_container_id(id);
  return Call<v1::StartContainerResponse>("StartContainer", BERTH_CRI_RPC(runtime_, StartContainer), req,
                                          options_.request_timeout)
      .status();
}

absl::Status GrpcRuntime::StopContainer(const std::string& id, absl::Duration grace) {
  v1::StopContainerRequest req;
  req.set_container_id(id);
  const int64_t seconds = std::max<int64_t>(0, absl::ToInt64Seconds(grace));
  req.set_timeout(seconds);
  // kubelet: the grace period plus the request timeout.
  return Call<v1::StopContainerResponse>("StopContainer", BERTH_CRI_RPC(runtime_, StopContainer), req,
                                         absl::Seconds(seconds) + options_.request_timeout)
      .status();
}

absl::Status GrpcRuntime::RemoveContainer(const std::string& id) {
  v1::RemoveContainerRequest req;
  req.set_container_id(id);
  return Call<v1::RemoveContainerResponse>("RemoveContainer", BERTH_CRI_RPC(runtime_, RemoveContainer), req,
                                           options_.request_timeout)
      .status();
}

absl::StatusOr<std::vector<v1::Container>> GrpcRuntime::ListContainers(const v1::ContainerFilter& filter) {
  v1::ListContainersRequest req;
  *req.mutable_filter() = filter;
  BERTH_ASSIGN_OR_RETURN(
      auto resp, Call<v1::ListContainersResponse>("ListContainers", BERTH_CRI_RPC(runtime_, ListContainers), req,
                                                  options_.request_timeout));
  return std::vector<v1::Container>(resp.containers().begin(), resp.containers().end());
}

absl::StatusOr<v1::ContainerStatus> GrpcRuntime::ContainerStatus(const std::string& id) {
  v1::ContainerStatusRequest req;
  req.set_container_id(id);
  BERTH_ASSIGN_OR_RETURN(
      auto resp, Call<v1::ContainerStatusResponse>("ContainerStatus", BERTH_CRI_RPC(runtime_, ContainerStatus), req,
                                                   options_.request_timeout));
  return resp.status();
}

absl::Status GrpcRuntime::ReopenContainerLog(const std::string& id) {
  v1::ReopenContainerLogRequest req;
  req.set_container_id(id);
  return Call<v1::ReopenContainerLogResponse>("ReopenContainerLog", BERTH_CRI_RPC(runtime_, ReopenContainerLog), req,
                                              options_.request_timeout)
      .status();
}

absl::StatusOr<v1::ExecSyncResponse> GrpcRuntime::ExecSync(const std::string& id, const std::vector<std::string>& cmd,
                                                           absl::Duration timeout) {
  v1::ExecSyncRequest req;
  req.set_container_id(id);
  for (const auto& c : cmd) req.add_cmd(c);
  const int64_t seconds = std::max<int64_t>(0, absl::ToInt64Seconds(absl::Ceil(timeout, absl::Seconds(1))));
  req.set_timeout(seconds);
  return Call<v1::ExecSyncResponse>("ExecSync", BERTH_CRI_RPC(runtime_, ExecSync), req,
                                    absl::Seconds(seconds) + options_.request_timeout);
}

absl::StatusOr<std::string> GrpcRuntime::Exec(const v1::ExecRequest& request) {
  BERTH_ASSIGN_OR_RETURN(
      auto resp, Call<v1::ExecResponse>("Exec", BERTH_CRI_RPC(runtime_, Exec), request, options_.request_timeout));
  return resp.url();
}

absl::StatusOr<std::string> GrpcRuntime::Attach(const v1::AttachRequest& request) {
  BERTH_ASSIGN_OR_RETURN(auto resp, Call<v1::AttachResponse>("Attach", BERTH_CRI_RPC(runtime_, Attach), request,
                                                             options_.request_timeout));
  return resp.url();
}

absl::StatusOr<std::vector<v1::Image>> GrpcRuntime::ListImages() {
  BERTH_ASSIGN_OR_RETURN(auto resp, Call<v1::ListImagesResponse>("ListImages", BERTH_CRI_RPC(images_, ListImages),
                                                                 v1::ListImagesRequest(), options_.request_timeout));
  return std::vector<v1::Image>(resp.images().begin(), resp.images().end());
}

absl::StatusOr<v1::Image> GrpcRuntime::ImageStatus(const std::string& image) {
  v1::ImageStatusRequest req;
  req.mutable_image()->set_image(image);
  BERTH_ASSIGN_OR_RETURN(auto resp, Call<v1::ImageStatusResponse>("ImageStatus", BERTH_CRI_RPC(images_, ImageStatus),
                                                                  req, options_.request_timeout));
  return resp.image();
}

absl::StatusOr<std::string> GrpcRuntime::PullImage(const std::string& image,
                                                   const v1::PodSandboxConfig& sandbox_config) {
  v1::PullImageRequest req;
  req.mutable_image()->set_image(image);
  *req.mutable_sandbox_config() = sandbox_config;
  BERTH_ASSIGN_OR_RETURN(auto resp, Call<v1::PullImageResponse>("PullImage", BERTH_CRI_RPC(images_, PullImage), req,
                                                                options_.pull_timeout));
  return resp.image_ref();
}

absl::Status GrpcRuntime::RemoveImage(const std::string& image) {
  v1::RemoveImageRequest req;
  req.mutable_image()->set_image(image);
  return Call<v1::RemoveImageResponse>("RemoveImage", BERTH_CRI_RPC(images_, RemoveImage), req,
                                       options_.request_timeout)
      .status();
}

#undef BERTH_CRI_RPC

}  // namespace berth::cri
