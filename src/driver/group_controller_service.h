// The CSI GroupController service of berth-csi: crash-consistent snapshots
// of several volumes at once. Every member volume that is mounted on this
// node is frozen, all are cloned, then all are thawed, so the group shows
// one instant across volumes (seed 002's consistent snapshot groups).
//
// Thread-safety: thread-safe.
#pragma once

#include "absl/status/status.h"
#include "csi/v1/csi.grpc.pb.h"
#include "driver/context.h"

namespace berth::driver {

class GroupControllerService final : public ::csi::v1::GroupController::Service {
 public:
  explicit GroupControllerService(DriverContext& ctx) : ctx_(ctx) {}

  // ::csi::v1::GroupController::Service
  grpc::Status GroupControllerGetCapabilities(grpc::ServerContext*,
                                              const ::csi::v1::GroupControllerGetCapabilitiesRequest* req,
                                              ::csi::v1::GroupControllerGetCapabilitiesResponse* resp) override;
  grpc::Status CreateVolumeGroupSnapshot(grpc::ServerContext*, const ::csi::v1::CreateVolumeGroupSnapshotRequest* req,
                                         ::csi::v1::CreateVolumeGroupSnapshotResponse* resp) override;
  grpc::Status DeleteVolumeGroupSnapshot(grpc::ServerContext*, const ::csi::v1::DeleteVolumeGroupSnapshotRequest* req,
                                         ::csi::v1::DeleteVolumeGroupSnapshotResponse* resp) override;
  grpc::Status GetVolumeGroupSnapshot(grpc::ServerContext*, const ::csi::v1::GetVolumeGroupSnapshotRequest* req,
                                      ::csi::v1::GetVolumeGroupSnapshotResponse* resp) override;

  absl::Status DoCreate(const ::csi::v1::CreateVolumeGroupSnapshotRequest& req,
                        ::csi::v1::CreateVolumeGroupSnapshotResponse* resp);
  absl::Status DoDelete(const ::csi::v1::DeleteVolumeGroupSnapshotRequest& req);
  absl::Status DoGet(const ::csi::v1::GetVolumeGroupSnapshotRequest& req,
                     ::csi::v1::GetVolumeGroupSnapshotResponse* resp);

 private:
  void Fill(const GroupSnapshotRecord& g, ::csi::v1::VolumeGroupSnapshot* out);
  DriverContext& ctx_;
};

}  // namespace berth::driver
