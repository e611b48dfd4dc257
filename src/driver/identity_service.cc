#include "driver/identity_service.h"

#include <utility>

namespace berth::driver {

IdentityService::IdentityService(std::string driver_name, std::string version,
                                 std::vector<::csi::v1::PluginCapability> capabilities, ReadinessCheck ready)
    : driver_name_(std::move(driver_name)),
      version_(std::move(version)),
      capabilities_(std::move(capabilities)),
      ready_(std::move(ready)) {}

grpc::Status IdentityService::GetPluginInfo(grpc::ServerContext*, const ::csi::v1::GetPluginInfoRequest*,
                                            ::csi::v1::GetPluginInfoResponse* response) {
  response->set_name(driver_name_);
  response->set_vendor_version(version_);
  return grpc::Status::OK;
}

grpc::Status IdentityService::GetPluginCapabilities(grpc::ServerContext*,
                                                    const ::csi::v1::GetPluginCapabilitiesRequest*,
                                                    ::csi::v1::GetPluginCapabilitiesResponse* response) {
  for (const auto& cap : capabilities_) *response->add_capabilities() = cap;
  return grpc::Status::OK;
}

grpc::Status IdentityService::Probe(grpc::ServerContext*, const ::csi::v1::ProbeRequest*,
                                    ::csi::v1::ProbeResponse* response) {
  absl::StatusOr<bool> ready = ready_();
  if (!ready.ok()) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, std::string(ready.status().message()));
  }
  response->mutable_ready()->set_value(*ready);
  return grpc::Status::OK;
}

::csi::v1::PluginCapability ServiceCapability(::csi::v1::PluginCapability::Service::Type type) {
  ::csi::v1::PluginCapability cap;
  cap.mutable_service()->set_type(type);
  return cap;
}

::csi::v1::PluginCapability ExpansionCapability(::csi::v1::PluginCapability::VolumeExpansion::Type type) {
  ::csi::v1::PluginCapability cap;
  cap.mutable_volume_expansion()->set_type(type);
  return cap;
}

}  // namespace berth::driver
