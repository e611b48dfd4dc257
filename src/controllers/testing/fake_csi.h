// Test double: a CSI controller (Identity + Controller) kept in memory and
// served over a real unix socket, with injected failures and delays, so
// controller tests exercise the same gRPC path as real drivers.
#pragma once

#include <map>
#include <memory>
#include <string>

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
    auto server = csi::CsiServer::Start({.endpoint = socket_path, .socket_mode = 0600},
                                        {static_cast<::csi::v1::Identity::Service*>(this),
                                         static_cast<::csi::v1::Controller::Service*>(this)});
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
  grpc::Status Probe(grpc::ServerContext*, const ::csi::v1::ProbeRequest*, ::csi::v1::ProbeResponse*) override {
    return grpc::Status::OK;
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
    if (req->has_volume_content_source()) *out->mutable_volume()->mutable_content_source() = req->volume_content_source();
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
    out->add_capabilities()->mutable_rpc()->set_type(::csi::v1::ControllerServiceCapability::RPC::CREATE_DELETE_VOLUME);
    out->add_capabilities()->mutable_rpc()->set_type(::csi::v1::ControllerServiceCapability::RPC::EXPAND_VOLUME);
    return grpc::Status::OK;
  }
  grpc::Status ControllerExpandVolume(grpc::ServerContext*, const ::csi::v1::ControllerExpandVolumeRequest* req,
                                      ::csi::v1::ControllerExpandVolumeResponse* out) override {
    absl::MutexLock l(&mu_);
    ++expand_calls_;
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
  bool node_expansion_required_ ABSL_GUARDED_BY(mu_) = true;
  grpc::StatusCode expand_fail_ ABSL_GUARDED_BY(mu_) = grpc::StatusCode::OK;
  std::optional<::csi::v1::CreateVolumeRequest> last_request_ ABSL_GUARDED_BY(mu_);
};

}  // namespace berth::controllers::testing
