#include "csi/driver_client.h"

#include <type_traits>
#include <utility>

#include "common/strings.h"
#include "csi/call_logger.h"
#include "csi/grpc_status.h"
#include "csi/redact.h"
#include "grpcpp/client_context.h"
#include "spdlog/spdlog.h"

namespace berth::csi {
namespace {

// "/csi.v1.Controller/CreateVolume" -> "CreateVolume".
std::string_view ShortName(std::string_view method) {
  const size_t slash = method.rfind('/');
  return slash == std::string_view::npos ? method : method.substr(slash + 1);
}

template <typename Req>
concept HasSecrets = requires(Req r) {
  r.mutable_secrets();
};

}  // namespace

ErrorClass Classify(const absl::Status& status) {
  if (status.ok()) return ErrorClass::kOk;
  if (status.code() == absl::StatusCode::kUnavailable) return ErrorClass::kDriverUnavailable;
  return IsFinalError(status) ? ErrorClass::kFinal : ErrorClass::kNonFinal;
}

absl::Duration DefaultTimeout(std::string_view method) {
  const std::string_view m = ShortName(method);
  if (m == "Probe" || m == "GetPluginInfo" || m == "GetPluginCapabilities") return absl::Seconds(10);
  if (m == "GetCapacity" || m == "ControllerGetCapabilities" || m == "NodeGetInfo" || m == "NodeGetCapabilities" ||
      m == "NodeGetVolumeStats") {
    return absl::Seconds(30);
  }
  if (m == "ControllerExpandVolume" || m.starts_with("Node")) return absl::Minutes(2);
  return absl::Minutes(1);
}

DriverClient::DriverClient(std::shared_ptr<grpc::Channel> channel, Options options)
    : channel_(std::move(channel)),
      options_(std::move(options)),
      identity_(::csi::v1::Identity::NewStub(channel_)),
      controller_(::csi::v1::Controller::NewStub(channel_)),
      node_(::csi::v1::Node::NewStub(channel_)) {}

template <typename Stub, typename Req, typename Resp>
absl::StatusOr<Resp> DriverClient::Invoke(Stub& stub, const char* method,
                                          grpc::Status (Stub::*rpc)(grpc::ClientContext*, const Req&, Resp*), Req& req,
                                          const CallOptions& o, bool not_found_is_done) const {
  if constexpr (HasSecrets<Req>) {
    for (const auto& [k, v] : o.secrets) (*req.mutable_secrets())[k] = v;
  } else if (!o.secrets.empty()) {
    return absl::InvalidArgumentError(StrCat(method, " carries no secrets, but the call was given some"));
  }
  const absl::Duration timeout = o.timeout > absl::ZeroDuration() ? o.timeout : DefaultTimeout(method);
  auto* logger = spdlog::default_logger_raw();
  const bool debug = logger->should_log(spdlog::level::debug);
  // Rendered once (it costs), and only when some line will show it.
  std::string request;
  if (debug) {
    request = RedactedDebugString(req);
    spdlog::debug("csi call driver={} method={} timeout={} request={}", options_.driver, method,
                  absl::FormatDuration(timeout), request);
  }

  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  Resp resp;
  const absl::Time start = absl::Now();
  const grpc::Status st = (stub.*rpc)(&ctx, req, &resp);
  const absl::Duration took = absl::Now() - start;
  if (options_.metrics != nullptr) options_.metrics->Observe(options_.driver, method, st.error_code(), took);

  if (st.ok() || (not_found_is_done && st.error_code() == grpc::StatusCode::NOT_FOUND)) {
    if (debug) {
      spdlog::debug("csi call driver={} method={} code={} duration={} response={}", options_.driver, method,
                    StatusCodeName(st.error_code()), absl::FormatDuration(took),
                    st.ok() ? RedactedDebugString(resp) : "{} (not found: nothing left to remove)");
    }
    return resp;
  }
  if (request.empty() && logger->should_log(spdlog::level::warn)) request = RedactedDebugString(req);
  spdlog::warn("csi call driver={} method={} code={} duration={} message=\"{}\" request={}", options_.driver, method,
               StatusCodeName(st.error_code()), absl::FormatDuration(took), st.error_message(), request);
  return FromGrpcStatus(st);
}

// Identity

absl::StatusOr<::csi::v1::ProbeResponse> DriverClient::Probe(const CallOptions& o) const {
  ::csi::v1::ProbeRequest req;
  return Invoke(*identity_, "/csi.v1.Identity/Probe", &::csi::v1::Identity::Stub::Probe, req, o);
}

absl::StatusOr<::csi::v1::GetPluginInfoResponse> DriverClient::GetPluginInfo(const CallOptions& o) const {
  ::csi::v1::GetPluginInfoRequest req;
  return Invoke(*identity_, "/csi.v1.Identity/GetPluginInfo", &::csi::v1::Identity::Stub::GetPluginInfo, req, o);
}

absl::StatusOr<::csi::v1::GetPluginCapabilitiesResponse> DriverClient::GetPluginCapabilities(
    const CallOptions& o) const {
  ::csi::v1::GetPluginCapabilitiesRequest req;
  return Invoke(*identity_, "/csi.v1.Identity/GetPluginCapabilities", &::csi::v1::Identity::Stub::GetPluginCapabilities,
                req, o);
}

// Controller

absl::StatusOr<::csi::v1::CreateVolumeResponse> DriverClient::CreateVolume(::csi::v1::CreateVolumeRequest req,
                                                                           const CallOptions& o) const {
  return Invoke(*controller_, "/csi.v1.Controller/CreateVolume", &::csi::v1::Controller::Stub::CreateVolume, req, o);
}

absl::Status DriverClient::DeleteVolume(::csi::v1::DeleteVolumeRequest req, const CallOptions& o) const {
  return Invoke(*controller_, "/csi.v1.Controller/DeleteVolume", &::csi::v1::Controller::Stub::DeleteVolume, req, o,
                /*not_found_is_done=*/true)
      .status();
}

absl::StatusOr<::csi::v1::ControllerPublishVolumeResponse> DriverClient::ControllerPublishVolume(
    ::csi::v1::ControllerPublishVolumeRequest req, const CallOptions& o) const {
  return Invoke(*controller_, "/csi.v1.Controller/ControllerPublishVolume",
                &::csi::v1::Controller::Stub::ControllerPublishVolume, req, o);
}

absl::Status DriverClient::ControllerUnpublishVolume(::csi::v1::ControllerUnpublishVolumeRequest req,
                                                     const CallOptions& o) const {
  // NOT_FOUND: the volume or the node is gone, so nothing is attached.
  return Invoke(*controller_, "/csi.v1.Controller/ControllerUnpublishVolume",
                &::csi::v1::Controller::Stub::ControllerUnpublishVolume, req, o, /*not_found_is_done=*/true)
      .status();
}

absl::StatusOr<::csi::v1::ControllerExpandVolumeResponse> DriverClient::ControllerExpandVolume(
    ::csi::v1::ControllerExpandVolumeRequest req, const CallOptions& o) const {
  return Invoke(*controller_, "/csi.v1.Controller/ControllerExpandVolume",
                &::csi::v1::Controller::Stub::ControllerExpandVolume, req, o);
}

absl::StatusOr<::csi::v1::GetCapacityResponse> DriverClient::GetCapacity(::csi::v1::GetCapacityRequest req,
                                                                         const CallOptions& o) const {
  return Invoke(*controller_, "/csi.v1.Controller/GetCapacity", &::csi::v1::Controller::Stub::GetCapacity, req, o);
}

absl::StatusOr<::csi::v1::ControllerGetCapabilitiesResponse> DriverClient::ControllerGetCapabilities(
    const CallOptions& o) const {
  ::csi::v1::ControllerGetCapabilitiesRequest req;
  return Invoke(*controller_, "/csi.v1.Controller/ControllerGetCapabilities",
                &::csi::v1::Controller::Stub::ControllerGetCapabilities, req, o);
}

absl::StatusOr<::csi::v1::CreateSnapshotResponse> DriverClient::CreateSnapshot(::csi::v1::CreateSnapshotRequest req,
                                                                               const CallOptions& o) const {
  return Invoke(*controller_, "/csi.v1.Controller/CreateSnapshot", &::csi::v1::Controller::Stub::CreateSnapshot, req,
                o);
}

absl::Status DriverClient::DeleteSnapshot(::csi::v1::DeleteSnapshotRequest req, const CallOptions& o) const {
  return Invoke(*controller_, "/csi.v1.Controller/DeleteSnapshot", &::csi::v1::Controller::Stub::DeleteSnapshot, req, o,
                /*not_found_is_done=*/true)
      .status();
}

absl::StatusOr<::csi::v1::ListSnapshotsResponse> DriverClient::ListSnapshots(::csi::v1::ListSnapshotsRequest req,
                                                                             const CallOptions& o) const {
  return Invoke(*controller_, "/csi.v1.Controller/ListSnapshots", &::csi::v1::Controller::Stub::ListSnapshots, req, o);
}

// Node

absl::Status DriverClient::NodeStageVolume(::csi::v1::NodeStageVolumeRequest req, const CallOptions& o) const {
  return Invoke(*node_, "/csi.v1.Node/NodeStageVolume", &::csi::v1::Node::Stub::NodeStageVolume, req, o).status();
}

absl::Status DriverClient::NodeUnstageVolume(::csi::v1::NodeUnstageVolumeRequest req, const CallOptions& o) const {
  return Invoke(*node_, "/csi.v1.Node/NodeUnstageVolume", &::csi::v1::Node::Stub::NodeUnstageVolume, req, o,
                /*not_found_is_done=*/true)
      .status();
}

absl::Status DriverClient::NodePublishVolume(::csi::v1::NodePublishVolumeRequest req, const CallOptions& o) const {
  return Invoke(*node_, "/csi.v1.Node/NodePublishVolume", &::csi::v1::Node::Stub::NodePublishVolume, req, o).status();
}

absl::Status DriverClient::NodeUnpublishVolume(::csi::v1::NodeUnpublishVolumeRequest req, const CallOptions& o) const {
  return Invoke(*node_, "/csi.v1.Node/NodeUnpublishVolume", &::csi::v1::Node::Stub::NodeUnpublishVolume, req, o,
                /*not_found_is_done=*/true)
      .status();
}

absl::StatusOr<::csi::v1::NodeExpandVolumeResponse> DriverClient::NodeExpandVolume(
    ::csi::v1::NodeExpandVolumeRequest req, const CallOptions& o) const {
  return Invoke(*node_, "/csi.v1.Node/NodeExpandVolume", &::csi::v1::Node::Stub::NodeExpandVolume, req, o);
}

absl::StatusOr<::csi::v1::NodeGetVolumeStatsResponse> DriverClient::NodeGetVolumeStats(
    ::csi::v1::NodeGetVolumeStatsRequest req, const CallOptions& o) const {
  return Invoke(*node_, "/csi.v1.Node/NodeGetVolumeStats", &::csi::v1::Node::Stub::NodeGetVolumeStats, req, o);
}

absl::StatusOr<::csi::v1::NodeGetInfoResponse> DriverClient::NodeGetInfo(const CallOptions& o) const {
  ::csi::v1::NodeGetInfoRequest req;
  return Invoke(*node_, "/csi.v1.Node/NodeGetInfo", &::csi::v1::Node::Stub::NodeGetInfo, req, o);
}

absl::StatusOr<::csi::v1::NodeGetCapabilitiesResponse> DriverClient::NodeGetCapabilities(const CallOptions& o) const {
  ::csi::v1::NodeGetCapabilitiesRequest req;
  return Invoke(*node_, "/csi.v1.Node/NodeGetCapabilities", &::csi::v1::Node::Stub::NodeGetCapabilities, req, o);
}

}  // namespace berth::csi
