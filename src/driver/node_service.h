// The CSI Node service of berth-csi: attaching volume images as loop
// devices, formatting blank ones, mounting them at the staging path, and bind
// mounting them into workloads' target paths.
//
// Paths from requests must be canonical and inside --kubelet-root, with no
// symlink below it. Nothing is ever mounted over a non-empty directory berth
// did not fill, and a volume that holds a filesystem is never formatted.
//
// Thread-safety: thread-safe.
#pragma once

#include "absl/status/status.h"
#include "csi/v1/csi.grpc.pb.h"
#include "driver/context.h"

namespace berth::driver {

class NodeService final : public ::csi::v1::Node::Service {
 public:
  explicit NodeService(DriverContext& ctx) : ctx_(ctx) {}

  // ::csi::v1::Node::Service
  grpc::Status NodeStageVolume(grpc::ServerContext*, const ::csi::v1::NodeStageVolumeRequest* req,
                               ::csi::v1::NodeStageVolumeResponse* resp) override;
  grpc::Status NodeUnstageVolume(grpc::ServerContext*, const ::csi::v1::NodeUnstageVolumeRequest* req,
                                 ::csi::v1::NodeUnstageVolumeResponse* resp) override;
  grpc::Status NodePublishVolume(grpc::ServerContext*, const ::csi::v1::NodePublishVolumeRequest* req,
                                 ::csi::v1::NodePublishVolumeResponse* resp) override;
  grpc::Status NodeUnpublishVolume(grpc::ServerContext*, const ::csi::v1::NodeUnpublishVolumeRequest* req,
                                   ::csi::v1::NodeUnpublishVolumeResponse* resp) override;
  grpc::Status NodeGetVolumeStats(grpc::ServerContext*, const ::csi::v1::NodeGetVolumeStatsRequest* req,
                                  ::csi::v1::NodeGetVolumeStatsResponse* resp) override;
  grpc::Status NodeExpandVolume(grpc::ServerContext*, const ::csi::v1::NodeExpandVolumeRequest* req,
                                ::csi::v1::NodeExpandVolumeResponse* resp) override;
  grpc::Status NodeGetCapabilities(grpc::ServerContext*, const ::csi::v1::NodeGetCapabilitiesRequest* req,
                                   ::csi::v1::NodeGetCapabilitiesResponse* resp) override;
  grpc::Status NodeGetInfo(grpc::ServerContext*, const ::csi::v1::NodeGetInfoRequest* req,
                           ::csi::v1::NodeGetInfoResponse* resp) override;

  absl::Status DoStage(const ::csi::v1::NodeStageVolumeRequest& req);
  absl::Status DoUnstage(const ::csi::v1::NodeUnstageVolumeRequest& req);
  absl::Status DoPublish(const ::csi::v1::NodePublishVolumeRequest& req);
  absl::Status DoUnpublish(const ::csi::v1::NodeUnpublishVolumeRequest& req);
  absl::Status DoStats(const ::csi::v1::NodeGetVolumeStatsRequest& req, ::csi::v1::NodeGetVolumeStatsResponse* resp);
  absl::Status DoExpand(const ::csi::v1::NodeExpandVolumeRequest& req, ::csi::v1::NodeExpandVolumeResponse* resp);

 private:
  absl::Status StageFilesystem(const ::csi::v1::NodeStageVolumeRequest& req, VolumeRecord& r);
  absl::Status StageBlock(const ::csi::v1::NodeStageVolumeRequest& req, VolumeRecord& r);
  // The loop device backing the mount at `path` if that mount is of volume
  // `r`'s image; "" otherwise.
  absl::StatusOr<std::string> OurDeviceAt(const MountEntry& m, const VolumeRecord& r);
  // NodeGetVolumeStats' and NodeExpandVolume's checks of volume_id and
  // volume_path: the volume.
  absl::StatusOr<VolumeRecord> StagedOrPublishedAt(const std::string& id, const std::string& path);

  DriverContext& ctx_;
};

}  // namespace berth::driver
