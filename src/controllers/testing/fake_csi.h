// Test double: a CSI controller (Identity + Controller) kept in memory and
// served over a real unix socket, with injected failures and delays, so
// controller tests exercise the same gRPC path as real drivers. Volumes,
// ControllerPublish pairs, snapshots and per-segment capacity are modelled.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "csi/server.h"
#include "csi/v1/csi.grpc.pb.h"

namespace berth::controllers::testing {

class FakeCsiDriver : public ::csi::v1::Identity::Service, public ::csi::v1::Controller::Service {
 public:
  struct Volume {
    int64_t bytes = 0;
    ::csi::v1::CreateVolumeRequest request;
  };

  explicit FakeCsiDriver(std::string name) : name_(std::move(name)) {}
  ~FakeCsiDriver() override {
    if (server_) server_->Shutdown(absl::ZeroDuration());
  }

  absl::Status Serve(const std::string& socket_path) {
    auto server = csi::CsiServer::Start(
        {.endpoint = socket_path, .socket_mode = 0600},
        {static_cast<::csi::v1::Identity::Service*>(this), static_cast<::csi::v1::Controller::Service*>(this)});
    if (!server.ok()) return server.status();
    server_ = std::move(*server);
    return absl::OkStatus();
  }
  // Kills the server (a crashed driver); Serve() again to restart.
  void Crash() {
    server_->Shutdown(absl::ZeroDuration());
    server_.reset();
  }

  // The next `count` CreateVolume calls fail with `code` (after doing the
  // work when `after_create`: the driver created it but the answer is lost).
  void FailCreates(grpc::StatusCode code, int count, bool after_create = false) {
    absl::MutexLock l(&mu_);
    fail_code_ = code;
    fail_count_ = count;
    fail_after_create_ = after_create;
  }
  void SetCreateDelay(absl::Duration d) {
    absl::MutexLock l(&mu_);
    create_delay_ = d;
  }
  std::map<std::string, Volume> volumes() const {
    absl::MutexLock l(&mu_);
    return volumes_;
  }
  int create_calls() const {
    absl::MutexLock l(&mu_);
    return create_calls_;
  }
  std::optional<::csi::v1::CreateVolumeRequest> last_request() const {
    absl::MutexLock l(&mu_);
    return last_request_;
  }

  // Identity
  grpc::Status GetPluginInfo(grpc::ServerContext*, const ::csi::v1::GetPluginInfoRequest*,
                             ::csi::v1::GetPluginInfoResponse* out) override {
    out->set_name(name_);
    out->set_vendor_version("0.0.0-fake");
    return grpc::Status::OK;
  }
  grpc::Status GetPluginCapabilities(grpc::ServerContext*, const ::csi::v1::GetPluginCapabilitiesRequest*,
                                     ::csi::v1::GetPluginCapabilitiesResponse* out) override {
    out->add_capabilities()->mutable_service()->set_type(::csi::v1::PluginCapability::Service::CONTROLLER_SERVICE);
    return grpc::Status::OK;
  }
  grpc::Status Probe(grpc::ServerContext*, const ::csi::v1::ProbeRequest*, ::csi::v1::ProbeResponse* out) override {
    absl::MutexLock l(&mu_);
    ++probe_calls_;
    if (!probe_ready_) out->mutable_ready()->set_value(false);
    return grpc::Status::OK;
  }
  int probe_calls() const {
    absl::MutexLock l(&mu_);
    return probe_calls_;
  }
  // Whether Probe reports ready (false: "not ready yet").
  void SetProbeReady(bool ready) {
    absl::MutexLock l(&mu_);
    probe_ready_ = ready;
  }

  // Controller
  grpc::Status CreateVolume(grpc::ServerContext*, const ::csi::v1::CreateVolumeRequest* req,
                            ::csi::v1::CreateVolumeResponse* out) override {
    absl::Duration delay;
    {
      absl::MutexLock l(&mu_);
      ++create_calls_;
      last_request_ = *req;
      delay = create_delay_;
    }
    absl::SleepFor(delay);
    absl::MutexLock l(&mu_);
    if (fail_count_ > 0 && !fail_after_create_) {
      --fail_count_;
      return grpc::Status(fail_code_, "injected failure");
    }
    if (req->name().empty()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "name is required");
    Volume& v = volumes_[req->name()];
    v.bytes = std::max<int64_t>(req->capacity_range().required_bytes(), 1);
    v.request = *req;
    if (fail_count_ > 0) {
      --fail_count_;
      return grpc::Status(fail_code_, "injected failure after create");
    }
    out->mutable_volume()->set_volume_id("fake-" + req->name());
    out->mutable_volume()->set_capacity_bytes(v.bytes);
    (*out->mutable_volume()->mutable_volume_context())["fake"] = "yes";
    if (req->has_accessibility_requirements()) {
      const auto& ar = req->accessibility_requirements();
      const auto& pick = ar.preferred_size() > 0 ? ar.preferred(0) : ar.requisite(0);
      *out->mutable_volume()->add_accessible_topology() = pick;
    }
    if (req->has_volume_content_source())
      *out->mutable_volume()->mutable_content_source() = req->volume_content_source();
    return grpc::Status::OK;
  }
  grpc::Status DeleteVolume(grpc::ServerContext*, const ::csi::v1::DeleteVolumeRequest* req,
                            ::csi::v1::DeleteVolumeResponse*) override {
    absl::MutexLock l(&mu_);
    const std::string prefix = "fake-";
    if (req->volume_id().rfind(prefix, 0) == 0) volumes_.erase(req->volume_id().substr(prefix.size()));
    return grpc::Status::OK;
  }
  grpc::Status ControllerGetCapabilities(grpc::ServerContext*, const ::csi::v1::ControllerGetCapabilitiesRequest*,
                                         ::csi::v1::ControllerGetCapabilitiesResponse* out) override {
    using Rpc = ::csi::v1::ControllerServiceCapability::RPC;
    absl::MutexLock l(&mu_);
    for (auto t : {Rpc::CREATE_DELETE_VOLUME, Rpc::EXPAND_VOLUME, Rpc::CREATE_DELETE_SNAPSHOT, Rpc::LIST_SNAPSHOTS,
                   Rpc::GET_CAPACITY, Rpc::PUBLISH_UNPUBLISH_VOLUME, Rpc::CLONE_VOLUME}) {
      if (t == Rpc::PUBLISH_UNPUBLISH_VOLUME && !publish_capability_) continue;
      out->add_capabilities()->mutable_rpc()->set_type(t);
    }
    return grpc::Status::OK;
  }

  // --- ControllerPublish / Unpublish: (volume id, node id) pairs.
  grpc::Status ControllerPublishVolume(grpc::ServerContext*, const ::csi::v1::ControllerPublishVolumeRequest* req,
                                       ::csi::v1::ControllerPublishVolumeResponse* out) override {
    absl::MutexLock l(&mu_);
    ++publish_calls_;
    last_publish_ = *req;
    if (publish_fail_count_ > 0) {
      --publish_fail_count_;
      return grpc::Status(publish_fail_code_, "injected publish failure");
    }
    if (req->volume_id().empty() || req->node_id().empty() || !req->has_volume_capability()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "volume_id, node_id and volume_capability are required");
    }
    published_.insert({req->volume_id(), req->node_id()});
    (*out->mutable_publish_context())["devicePath"] = "/dev/fake/" + req->volume_id();
    return grpc::Status::OK;
  }
  grpc::Status ControllerUnpublishVolume(grpc::ServerContext*, const ::csi::v1::ControllerUnpublishVolumeRequest* req,
                                         ::csi::v1::ControllerUnpublishVolumeResponse*) override {
    absl::MutexLock l(&mu_);
    ++unpublish_calls_;
    if (unpublish_fail_count_ > 0) {
      --unpublish_fail_count_;
      return grpc::Status(publish_fail_code_, "injected unpublish failure");
    }
    published_.erase({req->volume_id(), req->node_id()});
    return grpc::Status::OK;
  }
  // Whether ControllerGetCapabilities reports PUBLISH_UNPUBLISH_VOLUME.
  void SetPublishCapability(bool on) {
    absl::MutexLock l(&mu_);
    publish_capability_ = on;
  }
  void FailPublishes(grpc::StatusCode code, int publishes, int unpublishes) {
    absl::MutexLock l(&mu_);
    publish_fail_code_ = code;
    publish_fail_count_ = publishes;
    unpublish_fail_count_ = unpublishes;
  }
  std::set<std::pair<std::string, std::string>> published() const {
    absl::MutexLock l(&mu_);
    return published_;
  }
  int publish_calls() const {
    absl::MutexLock l(&mu_);
    return publish_calls_;
  }
  int unpublish_calls() const {
    absl::MutexLock l(&mu_);
    return unpublish_calls_;
  }
  std::optional<::csi::v1::ControllerPublishVolumeRequest> last_publish() const {
    absl::MutexLock l(&mu_);
    return last_publish_;
  }

  // --- Snapshots: id "snap-" + name; idempotent by name.
  struct Snapshot {
    std::string source_volume_id;
    int64_t bytes = 0;
    ::csi::v1::CreateSnapshotRequest request;
    google::protobuf::Timestamp created;
  };
  grpc::Status CreateSnapshot(grpc::ServerContext*, const ::csi::v1::CreateSnapshotRequest* req,
                              ::csi::v1::CreateSnapshotResponse* out) override {
    absl::Duration delay;
    std::function<void(const ::csi::v1::CreateSnapshotRequest&)> hook;
    {
      absl::MutexLock l(&mu_);
      ++snapshot_calls_;
      delay = create_delay_;
      hook = on_create_snapshot_;
    }
    if (hook) hook(*req);
    absl::SleepFor(delay);
    absl::MutexLock l(&mu_);
    if (snapshot_fail_count_ > 0) {
      --snapshot_fail_count_;
      return grpc::Status(snapshot_fail_code_, "injected snapshot failure");
    }
    if (req->name().empty() || req->source_volume_id().empty()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "name and source_volume_id are required");
    }
    auto it = snapshots_.find(req->name());
    if (it != snapshots_.end() && it->second.source_volume_id != req->source_volume_id()) {
      return grpc::Status(grpc::StatusCode::ALREADY_EXISTS, "snapshot name taken by another source");
    }
    if (it == snapshots_.end()) {
      Snapshot s;
      s.source_volume_id = req->source_volume_id();
      const std::string prefix = "fake-";
      auto v = volumes_.find(req->source_volume_id().substr(std::min(prefix.size(), req->source_volume_id().size())));
      s.bytes = v == volumes_.end() ? 1 << 20 : v->second.bytes;
      s.request = *req;
      s.created.set_seconds(absl::ToUnixSeconds(absl::Now()));
      it = snapshots_.emplace(req->name(), s).first;
    }
    auto* snap = out->mutable_snapshot();
    snap->set_snapshot_id("snap-" + req->name());
    snap->set_source_volume_id(it->second.source_volume_id);
    snap->set_size_bytes(it->second.bytes);
    *snap->mutable_creation_time() = it->second.created;
    snap->set_ready_to_use(snapshots_ready_);
    return grpc::Status::OK;
  }
  grpc::Status DeleteSnapshot(grpc::ServerContext*, const ::csi::v1::DeleteSnapshotRequest* req,
                              ::csi::v1::DeleteSnapshotResponse*) override {
    absl::MutexLock l(&mu_);
    ++delete_snapshot_calls_;
    const std::string prefix = "snap-";
    if (req->snapshot_id().rfind(prefix, 0) == 0) snapshots_.erase(req->snapshot_id().substr(prefix.size()));
    return grpc::Status::OK;
  }
  grpc::Status ListSnapshots(grpc::ServerContext*, const ::csi::v1::ListSnapshotsRequest* req,
                             ::csi::v1::ListSnapshotsResponse* out) override {
    absl::MutexLock l(&mu_);
    for (const auto& [name, s] : snapshots_) {
      const std::string id = "snap-" + name;
      if (!req->snapshot_id().empty() && req->snapshot_id() != id) continue;
      if (!req->source_volume_id().empty() && req->source_volume_id() != s.source_volume_id) continue;
      auto* snap = out->add_entries()->mutable_snapshot();
      snap->set_snapshot_id(id);
      snap->set_source_volume_id(s.source_volume_id);
      snap->set_size_bytes(s.bytes);
      *snap->mutable_creation_time() = s.created;
      snap->set_ready_to_use(snapshots_ready_);
    }
    return grpc::Status::OK;
  }
  void FailSnapshots(grpc::StatusCode code, int count) {
    absl::MutexLock l(&mu_);
    snapshot_fail_code_ = code;
    snapshot_fail_count_ = count;
  }
  // Runs at the start of every CreateSnapshot (outside the fake's lock).
  void OnCreateSnapshot(std::function<void(const ::csi::v1::CreateSnapshotRequest&)> fn) {
    absl::MutexLock l(&mu_);
    on_create_snapshot_ = std::move(fn);
  }
  // Whether snapshots report ready_to_use (false: still being cut).
  void SetSnapshotsReady(bool ready) {
    absl::MutexLock l(&mu_);
    snapshots_ready_ = ready;
  }
  std::map<std::string, Snapshot> snapshots() const {
    absl::MutexLock l(&mu_);
    return snapshots_;
  }
  int snapshot_calls() const {
    absl::MutexLock l(&mu_);
    return snapshot_calls_;
  }
  int delete_snapshot_calls() const {
    absl::MutexLock l(&mu_);
    return delete_snapshot_calls_;
  }

  // --- GetCapacity: available bytes per topology segment value of
  // `capacity_key` (absent segment or key → default_capacity).
  grpc::Status GetCapacity(grpc::ServerContext*, const ::csi::v1::GetCapacityRequest* req,
                           ::csi::v1::GetCapacityResponse* out) override {
    absl::MutexLock l(&mu_);
    ++capacity_calls_;
    last_capacity_request_ = *req;
    int64_t bytes = default_capacity_;
    if (req->has_accessible_topology()) {
      const auto& seg = req->accessible_topology().segments();
      if (auto it = seg.find(capacity_key_); it != seg.end()) {
        if (auto c = capacity_.find(it->second); c != capacity_.end()) bytes = c->second;
      }
    }
    out->set_available_capacity(bytes);
    return grpc::Status::OK;
  }
  void SetCapacity(const std::string& key, const std::string& value, int64_t bytes) {
    absl::MutexLock l(&mu_);
    capacity_key_ = key;
    capacity_[value] = bytes;
  }
  int capacity_calls() const {
    absl::MutexLock l(&mu_);
    return capacity_calls_;
  }
  std::optional<::csi::v1::GetCapacityRequest> last_capacity_request() const {
    absl::MutexLock l(&mu_);
    return last_capacity_request_;
  }
  grpc::Status ControllerExpandVolume(grpc::ServerContext*, const ::csi::v1::ControllerExpandVolumeRequest* req,
                                      ::csi::v1::ControllerExpandVolumeResponse* out) override {
    absl::MutexLock l(&mu_);
    ++expand_calls_;
    last_expand_bytes_ = req->capacity_range().required_bytes();
    last_expand_secrets_ = {req->secrets().begin(), req->secrets().end()};
    if (expand_fail_ != grpc::StatusCode::OK) return grpc::Status(expand_fail_, "injected expand failure");
    const std::string prefix = "fake-";
    auto it = volumes_.find(req->volume_id().substr(std::min(prefix.size(), req->volume_id().size())));
    if (it == volumes_.end()) return grpc::Status(grpc::StatusCode::NOT_FOUND, "no such volume");
    it->second.bytes = std::max(it->second.bytes, req->capacity_range().required_bytes());
    out->set_capacity_bytes(it->second.bytes);
    out->set_node_expansion_required(node_expansion_required_);
    return grpc::Status::OK;
  }
  void SetExpand(bool node_expansion_required, grpc::StatusCode fail = grpc::StatusCode::OK) {
    absl::MutexLock l(&mu_);
    node_expansion_required_ = node_expansion_required;
    expand_fail_ = fail;
  }
  int expand_calls() const {
    absl::MutexLock l(&mu_);
    return expand_calls_;
  }
  int64_t last_expand_bytes() const {
    absl::MutexLock l(&mu_);
    return last_expand_bytes_;
  }
  std::map<std::string, std::string> last_expand_secrets() const {
    absl::MutexLock l(&mu_);
    return last_expand_secrets_;
  }

 private:
  const std::string name_;
  std::unique_ptr<csi::CsiServer> server_;
  mutable absl::Mutex mu_;
  std::map<std::string, Volume> volumes_ ABSL_GUARDED_BY(mu_);
  grpc::StatusCode fail_code_ ABSL_GUARDED_BY(mu_) = grpc::StatusCode::OK;
  int fail_count_ ABSL_GUARDED_BY(mu_) = 0;
  bool fail_after_create_ ABSL_GUARDED_BY(mu_) = false;
  absl::Duration create_delay_ ABSL_GUARDED_BY(mu_);
  int create_calls_ ABSL_GUARDED_BY(mu_) = 0;
  int expand_calls_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t last_expand_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, std::string> last_expand_secrets_ ABSL_GUARDED_BY(mu_);
  int probe_calls_ ABSL_GUARDED_BY(mu_) = 0;
  bool probe_ready_ ABSL_GUARDED_BY(mu_) = true;
  bool node_expansion_required_ ABSL_GUARDED_BY(mu_) = true;
  grpc::StatusCode expand_fail_ ABSL_GUARDED_BY(mu_) = grpc::StatusCode::OK;
  std::optional<::csi::v1::CreateVolumeRequest> last_request_ ABSL_GUARDED_BY(mu_);
  // publish
  bool publish_capability_ ABSL_GUARDED_BY(mu_) = true;
  std::set<std::pair<std::string, std::string>> published_ ABSL_GUARDED_BY(mu_);
  grpc::StatusCode publish_fail_code_ ABSL_GUARDED_BY(mu_) = grpc::StatusCode::OK;
  int publish_fail_count_ ABSL_GUARDED_BY(mu_) = 0;
  int unpublish_fail_count_ ABSL_GUARDED_BY(mu_) = 0;
  int publish_calls_ ABSL_GUARDED_BY(mu_) = 0;
  int unpublish_calls_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<::csi::v1::ControllerPublishVolumeRequest> last_publish_ ABSL_GUARDED_BY(mu_);
  // snapshots
  std::map<std::string, Snapshot> snapshots_ ABSL_GUARDED_BY(mu_);
  grpc::StatusCode snapshot_fail_code_ ABSL_GUARDED_BY(mu_) = grpc::StatusCode::OK;
  int snapshot_fail_count_ ABSL_GUARDED_BY(mu_) = 0;
  bool snapshots_ready_ ABSL_GUARDED_BY(mu_) = true;
  int snapshot_calls_ ABSL_GUARDED_BY(mu_) = 0;
  std::function<void(const ::csi::v1::CreateSnapshotRequest&)> on_create_snapshot_ ABSL_GUARDED_BY(mu_);
  int delete_snapshot_calls_ ABSL_GUARDED_BY(mu_) = 0;
  // capacity
  std::string capacity_key_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> capacity_ ABSL_GUARDED_BY(mu_);
  int64_t default_capacity_ ABSL_GUARDED_BY(mu_) = 100LL << 30;
  int capacity_calls_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<::csi::v1::GetCapacityRequest> last_capacity_request_ ABSL_GUARDED_BY(mu_);
};

}  // namespace berth::controllers::testing
