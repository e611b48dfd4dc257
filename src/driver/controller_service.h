// The CSI Controller service of berth-csi: volume and snapshot life cycle on
// the local pool. Every RPC validates its request completely before looking
// anything up, takes the operation locks of the objects it touches (ABORTED
// if another operation holds them), and is idempotent.
//
// Thread-safety: thread-safe.
#pragma once

#include "absl/status/status.h"
#include "csi/v1/csi.grpc.pb.h"
#include "driver/context.h"

namespace berth::driver {

class ControllerService final : public ::csi::v1::Controller::Service {
 public:
  explicit ControllerService(DriverContext& ctx) : ctx_(ctx) {}

  // ::csi::v1::Controller::Service
  grpc::Status CreateVolume(grpc::ServerContext*, const ::csi::v1::CreateVolumeRequest* req,
                            ::csi::v1::CreateVolumeResponse* resp) override;
  grpc::Status DeleteVolume(grpc::ServerContext*, const ::csi::v1::DeleteVolumeRequest* req,
                            ::csi::v1::DeleteVolumeResponse* resp) override;
  grpc::Status ControllerPublishVolume(grpc::ServerContext*, const ::csi::v1::ControllerPublishVolumeRequest* req,
                                       ::csi::v1::ControllerPublishVolumeResponse* resp) override;
  grpc::Status ControllerUnpublishVolume(grpc::ServerContext*, const ::csi::v1::ControllerUnpublishVolumeRequest* req,
                                         ::csi::v1::ControllerUnpublishVolumeResponse* resp) override;
  grpc::Status ValidateVolumeCapabilities(grpc::ServerContext*, const ::csi::v1::ValidateVolumeCapabilitiesRequest* req,
                                          ::csi::v1::ValidateVolumeCapabilitiesResponse* resp) override;
  grpc::Status ListVolumes(grpc::ServerContext*, const ::csi::v1::ListVolumesRequest* req,
                           ::csi::v1::ListVolumesResponse* resp) override;
  grpc::Status ControllerGetVolume(grpc::ServerContext*, const ::csi::v1::ControllerGetVolumeRequest* req,
                                   ::csi::v1::ControllerGetVolumeResponse* resp) override;
  grpc::Status GetCapacity(grpc::ServerContext*, const ::csi::v1::GetCapacityRequest* req,
                           ::csi::v1::GetCapacityResponse* resp) override;
  grpc::Status ControllerGetCapabilities(grpc::ServerContext*, const ::csi::v1::ControllerGetCapabilitiesRequest* req,
                                         ::csi::v1::ControllerGetCapabilitiesResponse* resp) override;
  grpc::Status CreateSnapshot(grpc::ServerContext*, const ::csi::v1::CreateSnapshotRequest* req,
                              ::csi::v1::CreateSnapshotResponse* resp) override;
  grpc::Status DeleteSnapshot(grpc::ServerContext*, const ::csi::v1::DeleteSnapshotRequest* req,
                              ::csi::v1::DeleteSnapshotResponse* resp) override;
  grpc::Status ListSnapshots(grpc::ServerContext*, const ::csi::v1::ListSnapshotsRequest* req,
                             ::csi::v1::ListSnapshotsResponse* resp) override;
  grpc::Status GetSnapshot(grpc::ServerContext*, const ::csi::v1::GetSnapshotRequest* req,
                           ::csi::v1::GetSnapshotResponse* resp) override;
  grpc::Status ControllerExpandVolume(grpc::ServerContext*, const ::csi::v1::ControllerExpandVolumeRequest* req,
                                      ::csi::v1::ControllerExpandVolumeResponse* resp) override;

  // The same operations with absl::Status, for callers inside berth-csi.
  absl::Status DoCreateVolume(const ::csi::v1::CreateVolumeRequest& req, ::csi::v1::CreateVolumeResponse* resp);
  absl::Status DoDeleteVolume(const ::csi::v1::DeleteVolumeRequest& req);
  absl::Status DoPublish(const ::csi::v1::ControllerPublishVolumeRequest& req,
                         ::csi::v1::ControllerPublishVolumeResponse* resp);
  absl::Status DoUnpublish(const ::csi::v1::ControllerUnpublishVolumeRequest& req);
  absl::Status DoValidate(const ::csi::v1::ValidateVolumeCapabilitiesRequest& req,
                          ::csi::v1::ValidateVolumeCapabilitiesResponse* resp);
  absl::Status DoListVolumes(const ::csi::v1::ListVolumesRequest& req, ::csi::v1::ListVolumesResponse* resp);
  absl::Status DoGetVolume(const ::csi::v1::ControllerGetVolumeRequest& req,
                           ::csi::v1::ControllerGetVolumeResponse* resp);
  absl::Status DoGetCapacity(const ::csi::v1::GetCapacityRequest& req, ::csi::v1::GetCapacityResponse* resp);
  absl::Status DoCreateSnapshot(const ::csi::v1::CreateSnapshotRequest& req, ::csi::v1::CreateSnapshotResponse* resp);
  absl::Status DoDeleteSnapshot(const ::csi::v1::DeleteSnapshotRequest& req);
  absl::Status DoListSnapshots(const ::csi::v1::ListSnapshotsRequest& req, ::csi::v1::ListSnapshotsResponse* resp);
  absl::Status DoGetSnapshot(const ::csi::v1::GetSnapshotRequest& req, ::csi::v1::GetSnapshotResponse* resp);
  absl::Status DoExpand(const ::csi::v1::ControllerExpandVolumeRequest& req,
                        ::csi::v1::ControllerExpandVolumeResponse* resp);

 private:
  ::csi::v1::VolumeCondition Condition(const VolumeRecord& r) const;

  DriverContext& ctx_;
};

// Default size of a volume whose request names no capacity.
inline constexpr int64_t kDefaultVolumeSize = int64_t{1} << 30;

// The smallest volume berth-csi makes for a filesystem type ("" = block).
int64_t MinimumVolumeSize(const std::string& fs_type, bool block);

}  // namespace berth::driver
