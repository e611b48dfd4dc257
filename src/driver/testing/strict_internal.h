// Internal to the strict driver's .cc files: small helpers they share, and
// the gRPC faces of the driver — each RPC goes through StrictDriver::Serve,
// which checks the envelope and runs the driver's body for it.
#pragma once

#include <algorithm>
#include <cctype>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "common/strings.h"
#include "driver/testing/strict_driver.h"
#include "google/protobuf/util/message_differencer.h"

namespace berth::driver::testing {

namespace strict_internal {

// The volume_context key CreateVolume returns, and the publish_context key
// ControllerPublishVolume returns.
inline constexpr char kContextKey[] = "strict.csi.berth.io/name";
inline constexpr char kAttachmentKey[] = "strict.csi.berth.io/attachment";

// "vol-" + 32 lower-case hex digits (see StrictVolumeId).
inline bool WellFormedId(const std::string& id) {
  if (id.size() != 36 || id.rfind("vol-", 0) != 0) return false;
  return std::all_of(id.begin() + 4, id.end(),
                     [](char c) { return std::isdigit(static_cast<unsigned char>(c)) || (c >= 'a' && c <= 'f'); });
}
inline bool SameCap(const ::csi::v1::VolumeCapability& a, const ::csi::v1::VolumeCapability& b) {
  return google::protobuf::util::MessageDifferencer::Equals(a, b);
}
inline std::string Describe(const std::map<std::string, std::string>& m) {
  std::vector<std::string> parts;
  for (const auto& [k, v] : m) parts.push_back(StrCat(k, "=", v));
  return "{" + absl::StrJoin(parts, ", ") + "}";
}
inline std::map<std::string, std::string> ToMap(const google::protobuf::Map<std::string, std::string>& m) {
  return {m.begin(), m.end()};
}

}  // namespace strict_internal

using grpc::ServerContext;
namespace v1 = ::csi::v1;

class StrictDriver::IdentityImpl final : public v1::Identity::Service {
 public:
  explicit IdentityImpl(StrictDriver& d) : d_(d) {}

  // v1::Identity::Service
  grpc::Status GetPluginInfo(ServerContext*, const v1::GetPluginInfoRequest*,
                             v1::GetPluginInfoResponse* resp) override {
    resp->set_name(d_.options_.name);
    resp->set_vendor_version("1.0.0");
    return grpc::Status::OK;
  }
  grpc::Status GetPluginCapabilities(ServerContext*, const v1::GetPluginCapabilitiesRequest*,
                                     v1::GetPluginCapabilitiesResponse* resp) override {
    for (const auto& c : d_.PluginCapabilities()) *resp->add_capabilities() = c;
    return grpc::Status::OK;
  }
  grpc::Status Probe(ServerContext*, const v1::ProbeRequest*, v1::ProbeResponse* resp) override {
    resp->mutable_ready()->set_value(true);
    return grpc::Status::OK;
  }

 private:
  StrictDriver& d_;
};

class StrictDriver::ControllerImpl final : public v1::Controller::Service {
 public:
  explicit ControllerImpl(StrictDriver& d) : d_(d) {}

  // v1::Controller::Service
  grpc::Status CreateVolume(ServerContext*, const v1::CreateVolumeRequest* req,
                            v1::CreateVolumeResponse* resp) override {
    return d_.Serve("CreateVolume", StrictOp::kCreate, req->name().empty() ? "" : StrictVolumeId(req->name()),
                    [&](Call& c) { return d_.CreateVolume(c, *req, resp); });
  }
  grpc::Status DeleteVolume(ServerContext*, const v1::DeleteVolumeRequest* req, v1::DeleteVolumeResponse*) override {
    return d_.Serve("DeleteVolume", StrictOp::kDelete, req->volume_id(),
                    [&](Call& c) { return d_.DeleteVolume(c, *req); });
  }
  grpc::Status ControllerPublishVolume(ServerContext*, const v1::ControllerPublishVolumeRequest* req,
                                       v1::ControllerPublishVolumeResponse* resp) override {
    return d_.Serve("ControllerPublishVolume", StrictOp::kControllerPublish, req->volume_id(),
                    [&](Call& c) { return d_.ControllerPublish(c, *req, resp); });
  }
  grpc::Status ControllerUnpublishVolume(ServerContext*, const v1::ControllerUnpublishVolumeRequest* req,
                                         v1::ControllerUnpublishVolumeResponse*) override {
    return d_.Serve("ControllerUnpublishVolume", StrictOp::kControllerUnpublish, req->volume_id(),
                    [&](Call& c) { return d_.ControllerUnpublish(c, *req); });
  }
  grpc::Status ValidateVolumeCapabilities(ServerContext*, const v1::ValidateVolumeCapabilitiesRequest* req,
                                          v1::ValidateVolumeCapabilitiesResponse* resp) override {
    return d_.Serve("ValidateVolumeCapabilities", StrictOp::kOther, req->volume_id(),
                    [&](Call& c) { return d_.ValidateCapabilities(c, *req, resp); });
  }
  grpc::Status ListVolumes(ServerContext*, const v1::ListVolumesRequest* req, v1::ListVolumesResponse* resp) override {
    return d_.Serve("ListVolumes", StrictOp::kOther, "", [&](Call& c) { return d_.ListVolumes(c, *req, resp); });
  }
  grpc::Status GetCapacity(ServerContext*, const v1::GetCapacityRequest* req, v1::GetCapacityResponse* resp) override {
    return d_.Serve("GetCapacity", StrictOp::kOther, "", [&](Call& c) { return d_.GetCapacity(c, *req, resp); });
  }
  grpc::Status ControllerGetCapabilities(ServerContext*, const v1::ControllerGetCapabilitiesRequest*,
                                         v1::ControllerGetCapabilitiesResponse* resp) override {
    for (const auto& c : d_.ControllerCapabilities()) *resp->add_capabilities() = c;
    return grpc::Status::OK;
  }
  grpc::Status ControllerExpandVolume(ServerContext*, const v1::ControllerExpandVolumeRequest* req,
                                      v1::ControllerExpandVolumeResponse* resp) override {
    return d_.Serve("ControllerExpandVolume", StrictOp::kControllerExpand, req->volume_id(),
                    [&](Call& c) { return d_.ControllerExpand(c, *req, resp); });
  }
  // Never advertised: every call is a violation.
  grpc::Status CreateSnapshot(ServerContext*, const v1::CreateSnapshotRequest*, v1::CreateSnapshotResponse*) override {
    return d_.Unadvertised("CreateSnapshot", "CREATE_DELETE_SNAPSHOT");
  }
  grpc::Status DeleteSnapshot(ServerContext*, const v1::DeleteSnapshotRequest*, v1::DeleteSnapshotResponse*) override {
    return d_.Unadvertised("DeleteSnapshot", "CREATE_DELETE_SNAPSHOT");
  }
  grpc::Status ListSnapshots(ServerContext*, const v1::ListSnapshotsRequest*, v1::ListSnapshotsResponse*) override {
    return d_.Unadvertised("ListSnapshots", "LIST_SNAPSHOTS");
  }
  grpc::Status GetSnapshot(ServerContext*, const v1::GetSnapshotRequest*, v1::GetSnapshotResponse*) override {
    return d_.Unadvertised("GetSnapshot", "CREATE_DELETE_SNAPSHOT");
  }
  grpc::Status ControllerGetVolume(ServerContext*, const v1::ControllerGetVolumeRequest*,
                                   v1::ControllerGetVolumeResponse*) override {
    return d_.Unadvertised("ControllerGetVolume", "GET_VOLUME");
  }
  grpc::Status ControllerModifyVolume(ServerContext*, const v1::ControllerModifyVolumeRequest*,
                                      v1::ControllerModifyVolumeResponse*) override {
    return d_.Unadvertised("ControllerModifyVolume", "MODIFY_VOLUME");
  }

 private:
  StrictDriver& d_;
};

class StrictDriver::NodeImpl final : public v1::Node::Service {
 public:
  explicit NodeImpl(StrictDriver& d) : d_(d) {}

  // v1::Node::Service
  grpc::Status NodeStageVolume(ServerContext*, const v1::NodeStageVolumeRequest* req,
                               v1::NodeStageVolumeResponse*) override {
    return d_.Serve("NodeStageVolume", StrictOp::kStage, req->volume_id(), [&](Call& c) { return d_.Stage(c, *req); });
  }
  grpc::Status NodeUnstageVolume(ServerContext*, const v1::NodeUnstageVolumeRequest* req,
                                 v1::NodeUnstageVolumeResponse*) override {
    return d_.Serve("NodeUnstageVolume", StrictOp::kUnstage, req->volume_id(),
                    [&](Call& c) { return d_.Unstage(c, *req); });
  }
  grpc::Status NodePublishVolume(ServerContext*, const v1::NodePublishVolumeRequest* req,
                                 v1::NodePublishVolumeResponse*) override {
    return d_.Serve("NodePublishVolume", StrictOp::kPublish, req->volume_id(),
                    [&](Call& c) { return d_.Publish(c, *req); });
  }
  grpc::Status NodeUnpublishVolume(ServerContext*, const v1::NodeUnpublishVolumeRequest* req,
                                   v1::NodeUnpublishVolumeResponse*) override {
    return d_.Serve("NodeUnpublishVolume", StrictOp::kUnpublish, req->volume_id(),
                    [&](Call& c) { return d_.Unpublish(c, *req); });
  }
  grpc::Status NodeGetVolumeStats(ServerContext*, const v1::NodeGetVolumeStatsRequest* req,
                                  v1::NodeGetVolumeStatsResponse* resp) override {
    return d_.Serve("NodeGetVolumeStats", StrictOp::kStats, req->volume_id(),
                    [&](Call& c) { return d_.Stats(c, *req, resp); });
  }
  grpc::Status NodeExpandVolume(ServerContext*, const v1::NodeExpandVolumeRequest* req,
                                v1::NodeExpandVolumeResponse* resp) override {
    return d_.Serve("NodeExpandVolume", StrictOp::kNodeExpand, req->volume_id(),
                    [&](Call& c) { return d_.NodeExpand(c, *req, resp); });
  }
  grpc::Status NodeGetCapabilities(ServerContext*, const v1::NodeGetCapabilitiesRequest*,
                                   v1::NodeGetCapabilitiesResponse* resp) override {
    for (const auto& c : d_.NodeCapabilities()) *resp->add_capabilities() = c;
    return grpc::Status::OK;
  }
  grpc::Status NodeGetInfo(ServerContext*, const v1::NodeGetInfoRequest*, v1::NodeGetInfoResponse* resp) override {
    resp->set_node_id(d_.options_.node_id);
    if (d_.options_.topology) {
      (*resp->mutable_accessible_topology()->mutable_segments())[d_.TopologyKey()] = d_.options_.node_id;
    }
    return grpc::Status::OK;
  }

 private:
  StrictDriver& d_;
};

}  // namespace berth::driver::testing
