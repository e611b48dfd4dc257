// The CSI Identity service of berth-csi.
//
// Answers who the driver is (name, version), what it offers (capabilities
// given at construction) and whether it is ready: Probe runs the readiness
// check on every call, so readiness follows the pool (unmounted, read-only,
// gone) without a restart.
//
// Thread-safety: thread-safe; the readiness check must be too.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "csi/v1/csi.grpc.pb.h"

namespace berth::driver {

class IdentityService final : public ::csi::v1::Identity::Service {
 public:
  // `ready` returns true when the driver can serve volumes, false while it
  // cannot yet (Probe answers ready=false), or an error when it is broken
  // (Probe fails with FAILED_PRECONDITION and the error's message).
  using ReadinessCheck = std::function<absl::StatusOr<bool>()>;

  IdentityService(std::string driver_name, std::string version, std::vector<::csi::v1::PluginCapability> capabilities,
                  ReadinessCheck ready);

  // ::csi::v1::Identity::Service
  grpc::Status GetPluginInfo(grpc::ServerContext* context, const ::csi::v1::GetPluginInfoRequest* request,
                             ::csi::v1::GetPluginInfoResponse* response) override;
  grpc::Status GetPluginCapabilities(grpc::ServerContext* context,
                                     const ::csi::v1::GetPluginCapabilitiesRequest* request,
                                     ::csi::v1::GetPluginCapabilitiesResponse* response) override;
  grpc::Status Probe(grpc::ServerContext* context, const ::csi::v1::ProbeRequest* request,
                     ::csi::v1::ProbeResponse* response) override;

 private:
  const std::string driver_name_;
  const std::string version_;
  const std::vector<::csi::v1::PluginCapability> capabilities_;
  const ReadinessCheck ready_;
};

// A plugin capability naming a service (CONTROLLER_SERVICE, ...).
::csi::v1::PluginCapability ServiceCapability(::csi::v1::PluginCapability::Service::Type type);
// A plugin capability naming a volume expansion mode (ONLINE, OFFLINE).
::csi::v1::PluginCapability ExpansionCapability(::csi::v1::PluginCapability::VolumeExpansion::Type type);

}  // namespace berth::driver
