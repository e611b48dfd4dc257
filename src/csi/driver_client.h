// The one way berth calls a CSI driver as a client (the controllers doing
// the sidecars' work, the node agent doing kubelet's, the driver monitor's
// probes). Every call goes through DriverClient, which in one place:
//
//   - gives the call a deadline: CallOptions::timeout, or the method's
//     default (DefaultTimeout) when that is zero;
//   - puts CallOptions::secrets into the request's `secrets` field (the
//     caller resolves them with client/secrets.h); they are never logged;
//   - logs the call like the kubernetes-csi sidecars' connection logging
//     (method, request and response with every csi_secret field redacted)
//     at debug level, and a failed call at warning;
//   - counts it in a CallMetrics histogram (driver, method, gRPC code);
//   - returns absl::Status with the driver's code and message; Classify()
//     sorts it (final, not final, driver unavailable) by the rules in
//     csi/grpc_status.h. A NOT_FOUND answer to a call that removes something
//     (DeleteVolume, ControllerUnpublishVolume, DeleteSnapshot,
//     NodeUnstageVolume, NodeUnpublishVolume) is success: what was asked
//     for is so (the sidecars and kubelet treat it alike).
//
//   DriverClient driver(channel, {.driver = "local.csi.berth.io"});
//   auto created = driver.CreateVolume(request, {.secrets = *secrets});
//   if (!created.ok() && Classify(created.status()) == ErrorClass::kFinal) ...
//
// Thread-safety: thread-safe; one DriverClient may serve many threads.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "csi/call_metrics.h"
#include "csi/v1/csi.grpc.pb.h"
#include "grpcpp/channel.h"

namespace berth::csi {

// How a failed call is to be taken.
enum class ErrorClass {
  kOk,
  // The driver is not doing, and will not do, what was asked (IsFinalError).
  kFinal,
  // The outcome is unknown (a timeout, ABORTED, RESOURCE_EXHAUSTED, ...):
  // it may have happened or may still be running.
  kNonFinal,
  // UNAVAILABLE: the driver, or the connection to it, is not there. Also not
  // final; callers may wait for the driver instead of counting a failure.
  kDriverUnavailable,
};
ErrorClass Classify(const absl::Status& status);

// The deadline a call of `method` ("CreateVolume", "NodeStageVolume", ...)
// gets when the caller names none: the values berth's call sites have used —
// 10 s for Identity calls, 30 s for the quick reads (GetCapacity,
// ControllerGetCapabilities, NodeGetInfo, NodeGetCapabilities,
// NodeGetVolumeStats), 2 min for ControllerExpandVolume and the node
// operations (kubelet's operation timeout), 1 min for the other controller
// calls (a volume or snapshot made or removed).
absl::Duration DefaultTimeout(std::string_view method);

struct CallOptions {
  // The call's deadline from its start; zero: DefaultTimeout(method).
  absl::Duration timeout = absl::ZeroDuration();
  // Copied into the request's `secrets` field (requests without one must
  // not be given any). Redacted from every log line.
  std::map<std::string, std::string> secrets = {};
};

class DriverClient {
 public:
  struct Options {
    std::string driver;  // the driver_name of logs and metrics
    // Where calls are counted; null: not counted.
    CallMetrics* metrics = &CallMetrics::Sidecar();
  };

  DriverClient(std::shared_ptr<grpc::Channel> channel, Options options);

  const std::string& driver() const { return options_.driver; }
  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }

  // Identity
  absl::StatusOr<::csi::v1::ProbeResponse> Probe(const CallOptions& o = {}) const;
  absl::StatusOr<::csi::v1::GetPluginInfoResponse> GetPluginInfo(const CallOptions& o = {}) const;
  absl::StatusOr<::csi::v1::GetPluginCapabilitiesResponse> GetPluginCapabilities(const CallOptions& o = {}) const;

  // Controller
  absl::StatusOr<::csi::v1::CreateVolumeResponse> CreateVolume(::csi::v1::CreateVolumeRequest req,
                                                               const CallOptions& o = {}) const;
  absl::Status DeleteVolume(::csi::v1::DeleteVolumeRequest req, const CallOptions& o = {}) const;
  absl::StatusOr<::csi::v1::ControllerPublishVolumeResponse> ControllerPublishVolume(
      ::csi::v1::ControllerPublishVolumeRequest req, const CallOptions& o = {}) const;
  absl::Status ControllerUnpublishVolume(::csi::v1::ControllerUnpublishVolumeRequest req,
                                         const CallOptions& o = {}) const;
  absl::StatusOr<::csi::v1::ControllerExpandVolumeResponse> ControllerExpandVolume(
      ::csi::v1::ControllerExpandVolumeRequest req, const CallOptions& o = {}) const;
  absl::StatusOr<::csi::v1::GetCapacityResponse> GetCapacity(::csi::v1::GetCapacityRequest req,
                                                             const CallOptions& o = {}) const;
  absl::StatusOr<::csi::v1::ControllerGetCapabilitiesResponse> ControllerGetCapabilities(
      const CallOptions& o = {}) const;
  absl::StatusOr<::csi::v1::CreateSnapshotResponse> CreateSnapshot(::csi::v1::CreateSnapshotRequest req,
                                                                   const CallOptions& o = {}) const;
  absl::Status DeleteSnapshot(::csi::v1::DeleteSnapshotRequest req, const CallOptions& o = {}) const;
  absl::StatusOr<::csi::v1::ListSnapshotsResponse> ListSnapshots(::csi::v1::ListSnapshotsRequest req,
                                                                 const CallOptions& o = {}) const;

  // Node
  absl::Status NodeStageVolume(::csi::v1::NodeStageVolumeRequest req, const CallOptions& o = {}) const;
  absl::Status NodeUnstageVolume(::csi::v1::NodeUnstageVolumeRequest req, const CallOptions& o = {}) const;
  absl::Status NodePublishVolume(::csi::v1::NodePublishVolumeRequest req, const CallOptions& o = {}) const;
  absl::Status NodeUnpublishVolume(::csi::v1::NodeUnpublishVolumeRequest req, const CallOptions& o = {}) const;
  absl::StatusOr<::csi::v1::NodeExpandVolumeResponse> NodeExpandVolume(::csi::v1::NodeExpandVolumeRequest req,
                                                                       const CallOptions& o = {}) const;
  absl::StatusOr<::csi::v1::NodeGetVolumeStatsResponse> NodeGetVolumeStats(::csi::v1::NodeGetVolumeStatsRequest req,
                                                                           const CallOptions& o = {}) const;
  absl::StatusOr<::csi::v1::NodeGetInfoResponse> NodeGetInfo(const CallOptions& o = {}) const;
  absl::StatusOr<::csi::v1::NodeGetCapabilitiesResponse> NodeGetCapabilities(const CallOptions& o = {}) const;

 private:
  // Runs one unary call: deadline, secrets, logging, metrics, status.
  template <typename Stub, typename Req, typename Resp>
  absl::StatusOr<Resp> Invoke(Stub& stub, const char* method,
                              grpc::Status (Stub::*rpc)(grpc::ClientContext*, const Req&, Resp*), Req& req,
                              const CallOptions& o, bool not_found_is_done = false) const;

  // Immutable after construction (not const: a DriverClient moves).
  std::shared_ptr<grpc::Channel> channel_;
  Options options_;
  std::unique_ptr<::csi::v1::Identity::Stub> identity_;
  std::unique_ptr<::csi::v1::Controller::Stub> controller_;
  std::unique_ptr<::csi::v1::Node::Stub> node_;
};

}  // namespace berth::csi
