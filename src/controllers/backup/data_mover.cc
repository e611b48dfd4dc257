#include "controllers/backup/data_mover.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <utility>

#include "common/fs.h"
#include "common/status.h"
#include "common/strings.h"
#include "csi/grpc_status.h"
#include "csi/v1/csi.grpc.pb.h"
#include "grpcpp/client_context.h"
#include "spdlog/spdlog.h"

namespace berth::controllers {
namespace {

::csi::v1::VolumeCapability BlockCapability() {
  ::csi::v1::VolumeCapability cap;
  cap.mutable_block();
  cap.mutable_access_mode()->set_mode(::csi::v1::VolumeCapability::AccessMode::SINGLE_NODE_WRITER);
  return cap;
}

// How long a stream of changed-block metadata may take.
constexpr absl::Duration kMetadataTimeout = absl::Minutes(5);

template <typename Response>
absl::Status CollectRanges(grpc::ClientReader<Response>& reader, const std::string& driver,
                           std::vector<backup::ByteRange>& out) {
  Response msg;
  while (reader.Read(&msg)) {
    for (const auto& b : msg.block_metadata()) out.push_back({b.byte_offset(), b.size_bytes()});
  }
  grpc::Status st = reader.Finish();
  if (st.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
    return absl::UnimplementedError(StrCat("CSI driver ", driver, " does not serve SnapshotMetadata"));
  }
  if (!st.ok()) {
    absl::Status s = csi::FromGrpcStatus(st);
    return absl::Status(s.code(), StrCat("CSI driver ", driver, ": ", s.message()));
  }
  return absl::OkStatus();
}

}  // namespace

DataMover::DataMover(client::DriverDirectory& directory, Options options)
    : directory_(directory), options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<csi::DriverClient>> DataMover::Client(const std::string& driver,
                                                                     const std::string& node) {
  BERTH_ASSIGN_OR_RETURN(auto channel, directory_.Channel(driver, node));
  return std::make_unique<csi::DriverClient>(channel, csi::DriverClient::Options{.driver = driver});
}

absl::StatusOr<std::pair<std::string, std::string>> DataMover::Paths(const MoverVolume& target) {
  if (!options_.work_dir) return absl::FailedPreconditionError("the data mover has no work directory");
  BERTH_ASSIGN_OR_RETURN(std::string dir, options_.work_dir(target.node));
  // The name is the caller's (deterministic, of berth's own shape), never a
  // user's string, but it becomes a path: check it anyway.
  if (target.name.empty() || target.name.find('/') != std::string::npos || target.name.starts_with(".")) {
    return absl::InvalidArgumentError(StrCat("bad data mover volume name \"", target.name, "\""));
  }
  const std::string base = StrCat(dir, "/", target.name);
  return std::make_pair(StrCat(base, "/staging"), StrCat(base, "/device"));
}

absl::StatusOr<std::string> DataMover::CreateVolume(const csi::DriverClient& csi, const MoverVolume& target,
                                                    const std::string& snapshot_handle, int64_t size_bytes) {
  ::csi::v1::CreateVolumeRequest req;
  req.set_name(target.name);
  req.mutable_capacity_range()->set_required_bytes(size_bytes);
  *req.add_volume_capabilities() = BlockCapability();
  if (snapshot_handle.empty()) {
    BERTH_ASSIGN_OR_RETURN(auto created, csi.CreateVolume(req, {.timeout = options_.rpc_timeout}));
    return created.volume().volume_id();
  }
  req.mutable_volume_content_source()->mutable_snapshot()->set_snapshot_id(snapshot_handle);
  // A block snapshot needs no mode change, and a driver that is not
  // berth-csi may refuse the parameter: ask without it first. A filesystem
  // volume's snapshot is refused as a block volume (INVALID_ARGUMENT), and
  // one made earlier with the parameter differs from this request
  // (ALREADY_EXISTS): then ask with it.
  auto created = csi.CreateVolume(req, {.timeout = options_.rpc_timeout});
  if (created.ok()) return created->volume().volume_id();
  if (!absl::IsInvalidArgument(created.status()) && !absl::IsAlreadyExists(created.status())) {
    return created.status();
  }
  (*req.mutable_parameters())[kAllowModeChangeParameter] = "true";
  auto again = csi.CreateVolume(req, {.timeout = options_.rpc_timeout});
  BERTH_RETURN_IF_ERROR(again.status());
  return again->volume().volume_id();
}

absl::StatusOr<std::unique_ptr<DataMover::Device>> DataMover::Expose(const MoverVolume& target,
                                                                     const std::string& volume_id, int64_t size_bytes,
                                                                     bool read_only) {
  BERTH_ASSIGN_OR_RETURN(auto csi, Client(target.driver, target.node));
  BERTH_ASSIGN_OR_RETURN(auto paths, Paths(target));
  const auto& [staging, publish] = paths;
  BERTH_RETURN_IF_ERROR(MakeDirs(staging, 0750));
  ::csi::v1::NodeStageVolumeRequest stage;
  stage.set_volume_id(volume_id);
  stage.set_staging_target_path(staging);
  *stage.mutable_volume_capability() = BlockCapability();
  if (absl::Status st = csi->NodeStageVolume(stage, {.timeout = options_.rpc_timeout}); !st.ok()) {
    std::error_code ec;
    std::filesystem::remove(staging, ec);
    std::filesystem::remove(std::filesystem::path(staging).parent_path(), ec);
    return st;
  }
  ::csi::v1::NodePublishVolumeRequest pub;
  pub.set_volume_id(volume_id);
  pub.set_staging_target_path(staging);
  pub.set_target_path(publish);
  pub.set_readonly(read_only);
  *pub.mutable_volume_capability() = BlockCapability();
  if (absl::Status st = csi->NodePublishVolume(pub, {.timeout = options_.rpc_timeout}); !st.ok()) {
    (void)Teardown(target, volume_id, /*delete_volume=*/false);
    return st;
  }
  Fd fd(::open(publish.c_str(), (read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC));
  if (fd.get() < 0) {
    absl::Status st = ErrnoStatus(errno, StrCat("open ", publish));
    (void)Teardown(target, volume_id, /*delete_volume=*/false);
    return st;
  }
  return std::unique_ptr<Device>(new Device(*this, target, volume_id, staging, publish, std::move(fd), size_bytes));
}

absl::StatusOr<std::unique_ptr<DataMover::Device>> DataMover::ExposeSnapshot(const MoverVolume& target,
                                                                             const std::string& snapshot_handle,
                                                                             int64_t size_bytes) {
  if (snapshot_handle.empty()) return absl::InvalidArgumentError("no snapshot handle to read");
  BERTH_ASSIGN_OR_RETURN(auto csi, Client(target.driver, target.node));
  BERTH_ASSIGN_OR_RETURN(std::string id, CreateVolume(*csi, target, snapshot_handle, size_bytes));
  auto dev = Expose(target, id, size_bytes, /*read_only=*/true);
  if (!dev.ok()) {
    (void)csi->DeleteVolume([&] {
      ::csi::v1::DeleteVolumeRequest del;
      del.set_volume_id(id);
      return del;
    }());
  }
  return dev;
}

absl::StatusOr<std::unique_ptr<DataMover::Device>> DataMover::CreateEmpty(const MoverVolume& target,
                                                                          int64_t size_bytes) {
  BERTH_RETURN_IF_ERROR(Cleanup(target, "", size_bytes));
  BERTH_ASSIGN_OR_RETURN(auto csi, Client(target.driver, target.node));
  BERTH_ASSIGN_OR_RETURN(std::string id, CreateVolume(*csi, target, "", size_bytes));
  return Expose(target, id, size_bytes, /*read_only=*/false);
}

absl::Status DataMover::Teardown(const MoverVolume& target, const std::string& volume_id, bool delete_volume) {
  BERTH_ASSIGN_OR_RETURN(auto csi, Client(target.driver, target.node));
  BERTH_ASSIGN_OR_RETURN(auto paths, Paths(target));
  const auto& [staging, publish] = paths;
  ::csi::v1::NodeUnpublishVolumeRequest unpub;
  unpub.set_volume_id(volume_id);
  unpub.set_target_path(publish);
  BERTH_RETURN_IF_ERROR(csi->NodeUnpublishVolume(unpub, {.timeout = options_.rpc_timeout}));
  ::csi::v1::NodeUnstageVolumeRequest unstage;
  unstage.set_volume_id(volume_id);
  unstage.set_staging_target_path(staging);
  BERTH_RETURN_IF_ERROR(csi->NodeUnstageVolume(unstage, {.timeout = options_.rpc_timeout}));
  // The driver removes the target it made; the directories are ours.
  std::error_code ec;
  std::filesystem::remove(publish, ec);
  std::filesystem::remove(staging, ec);
  std::filesystem::remove(std::filesystem::path(staging).parent_path(), ec);
  if (!delete_volume) return absl::OkStatus();
  ::csi::v1::DeleteVolumeRequest del;
  del.set_volume_id(volume_id);
  return csi->DeleteVolume(del, {.timeout = options_.rpc_timeout});
}

absl::Status DataMover::Cleanup(const MoverVolume& target, const std::string& snapshot_handle, int64_t size_bytes) {
  BERTH_ASSIGN_OR_RETURN(auto csi, Client(target.driver, target.node));
  // The same request returns the volume if it exists (CreateVolume is
  // idempotent by name); when it did not, this makes it, and it is deleted
  // below all the same. A snapshot that is gone means the volume cannot be
  // found this way: then nothing made from it is left to find either
  // (NOT_FOUND), or it was never made.
  auto id = CreateVolume(*csi, target, snapshot_handle, size_bytes);
  if (!id.ok()) {
    if (absl::IsNotFound(id.status())) return absl::OkStatus();
    return id.status();
  }
  return Teardown(target, *id, /*delete_volume=*/true);
}

absl::Status DataMover::DeleteVolume(const MoverVolume& target, const std::string& volume_id) {
  BERTH_ASSIGN_OR_RETURN(auto csi, Client(target.driver, target.node));
  ::csi::v1::DeleteVolumeRequest del;
  del.set_volume_id(volume_id);
  return csi->DeleteVolume(del, {.timeout = options_.rpc_timeout});
}

absl::StatusOr<std::vector<backup::ByteRange>> DataMover::ChangedRanges(const std::string& driver,
                                                                        const std::string& node,
                                                                        const std::string& base_handle,
                                                                        const std::string& snapshot_handle) {
  BERTH_ASSIGN_OR_RETURN(auto channel, directory_.Channel(driver, node));
  auto stub = ::csi::v1::SnapshotMetadata::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + kMetadataTimeout));
  std::vector<backup::ByteRange> out;
  if (base_handle.empty()) {
    ::csi::v1::GetMetadataAllocatedRequest req;
    req.set_snapshot_id(snapshot_handle);
    auto reader = stub->GetMetadataAllocated(&ctx, req);
    BERTH_RETURN_IF_ERROR(CollectRanges(*reader, driver, out));
  } else {
    ::csi::v1::GetMetadataDeltaRequest req;
    req.set_base_snapshot_id(base_handle);
    req.set_target_snapshot_id(snapshot_handle);
    auto reader = stub->GetMetadataDelta(&ctx, req);
    BERTH_RETURN_IF_ERROR(CollectRanges(*reader, driver, out));
  }
  return out;
}

absl::Duration DataMover::GroupCallTimeout() const {
  // The call layer's default for a snapshot made or removed.
  return options_.rpc_timeout > absl::ZeroDuration() ? options_.rpc_timeout : csi::DefaultTimeout("CreateSnapshot");
}

absl::StatusOr<bool> DataMover::HasGroupSnapshots(const std::string& driver, const std::string& node) {
  BERTH_ASSIGN_OR_RETURN(auto channel, directory_.Channel(driver, node));
  auto stub = ::csi::v1::GroupController::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  ::csi::v1::GroupControllerGetCapabilitiesRequest req;
  ::csi::v1::GroupControllerGetCapabilitiesResponse resp;
  grpc::Status st = stub->GroupControllerGetCapabilities(&ctx, req, &resp);
  if (st.error_code() == grpc::StatusCode::UNIMPLEMENTED) return false;
  if (!st.ok()) return csi::FromGrpcStatus(st);
  for (const auto& c : resp.capabilities()) {
    if (c.rpc().type() == ::csi::v1::GroupControllerServiceCapability::RPC::CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT) {
      return true;
    }
  }
  return false;
}

absl::StatusOr<DataMover::GroupSnapshot> DataMover::CreateGroupSnapshot(const std::string& driver,
                                                                        const std::string& node,
                                                                        const std::string& name,
                                                                        const std::vector<std::string>& volume_ids) {
  BERTH_ASSIGN_OR_RETURN(auto channel, directory_.Channel(driver, node));
  auto stub = ::csi::v1::GroupController::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + GroupCallTimeout()));
  ::csi::v1::CreateVolumeGroupSnapshotRequest req;
  req.set_name(name);
  for (const auto& v : volume_ids) req.add_source_volume_ids(v);
  ::csi::v1::CreateVolumeGroupSnapshotResponse resp;
  grpc::Status st = stub->CreateVolumeGroupSnapshot(&ctx, req, &resp);
  if (!st.ok()) {
    absl::Status s = csi::FromGrpcStatus(st);
    return absl::Status(s.code(), StrCat("CSI driver ", driver, ": group snapshot ", name, ": ", s.message()));
  }
  GroupSnapshot out;
  out.group_snapshot_id = resp.group_snapshot().group_snapshot_id();
  for (const auto& snap : resp.group_snapshot().snapshots()) {
    out.members[snap.source_volume_id()] = {snap.snapshot_id(), snap.size_bytes()};
  }
  for (const auto& v : volume_ids) {
    if (!out.members.contains(v)) {
      return absl::InternalError(
          StrCat("CSI driver ", driver, ": group snapshot ", name, " has no member of volume ", v));
    }
  }
  return out;
}

absl::Status DataMover::DeleteGroupSnapshot(const std::string& driver, const std::string& node,
                                            const std::string& group_id, const std::vector<std::string>& snapshot_ids) {
  BERTH_ASSIGN_OR_RETURN(auto channel, directory_.Channel(driver, node));
  auto stub = ::csi::v1::GroupController::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + GroupCallTimeout()));
  ::csi::v1::DeleteVolumeGroupSnapshotRequest req;
  req.set_group_snapshot_id(group_id);
  for (const auto& s : snapshot_ids) req.add_snapshot_ids(s);
  ::csi::v1::DeleteVolumeGroupSnapshotResponse resp;
  grpc::Status st = stub->DeleteVolumeGroupSnapshot(&ctx, req, &resp);
  if (st.ok() || st.error_code() == grpc::StatusCode::NOT_FOUND) return absl::OkStatus();
  absl::Status s = csi::FromGrpcStatus(st);
  return absl::Status(s.code(), StrCat("CSI driver ", driver, ": delete group snapshot ", group_id, ": ", s.message()));
}

DataMover::Device::Device(DataMover& mover, MoverVolume target, std::string volume_id, std::string staging,
                          std::string publish, Fd fd, int64_t size_bytes)
    : mover_(mover),
      target_(std::move(target)),
      volume_id_(std::move(volume_id)),
      staging_(std::move(staging)),
      publish_(std::move(publish)),
      fd_(std::move(fd)),
      size_bytes_(size_bytes) {}

DataMover::Device::~Device() {
  if (closed_) return;
  if (absl::Status st = Close(); !st.ok()) {
    spdlog::warn("data mover: releasing volume {} ({}) on node {}: {}", target_.name, volume_id_, target_.node,
                 st.ToString());
  }
}

absl::Status DataMover::Device::Close() {
  if (closed_) return absl::OkStatus();
  closed_ = true;
  absl::Status synced = absl::OkStatus();
  if (fd_.get() >= 0 && ::fsync(fd_.get()) != 0) synced = ErrnoStatus(errno, StrCat("fsync ", publish_));
  fd_ = Fd();
  absl::Status torn = mover_.Teardown(target_, volume_id_, /*delete_volume=*/!keep_);
  return synced.ok() ? torn : synced;
}

}  // namespace berth::controllers
