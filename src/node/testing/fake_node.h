// A CSI driver's node side for node agent tests: Identity + Node over a real
// unix socket, plus its plugin registration socket (as node-driver-registrar
// would serve it). It makes the target directories (or files, for block) a
// real driver would, without mounting anything, and keeps a fake mount
// table that tests hand to the volume manager.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/mountinfo.h"
#include "csi/registration.h"
#include "csi/server.h"
#include "csi/v1/csi.grpc.pb.h"

namespace berth::node::testing {

class FakeNodeDriver : public ::csi::v1::Identity::Service, public ::csi::v1::Node::Service {
 public:
  FakeNodeDriver(std::string name, std::string node_id) : name_(std::move(name)), node_id_(std::move(node_id)) {}
  ~FakeNodeDriver() override { Shutdown(); }

  // Serves CSI on `csi_socket` and, if `registration_dir` is set, plugin
  // registration there.
  absl::Status Serve(const std::string& csi_socket, const std::string& registration_dir = "") {
    csi_socket_ = csi_socket;
    auto server = csi::CsiServer::Start({.endpoint = csi_socket}, {static_cast<::csi::v1::Identity::Service*>(this),
                                                                   static_cast<::csi::v1::Node::Service*>(this)});
    if (!server.ok()) return server.status();
    server_ = std::move(*server);
    if (!registration_dir.empty()) return ServeRegistration(registration_dir);
    return absl::OkStatus();
  }
  absl::Status ServeRegistration(const std::string& dir, std::vector<std::string> versions = {"1.0.0"}) {
    registration_ = std::make_unique<csi::RegistrationService>(
        csi::RegistrationService::Info{.name = name_, .endpoint = csi_socket_, .versions = std::move(versions)});
    auto reg = csi::CsiServer::Start({.endpoint = csi::RegistrationSocketPath(dir, name_)}, {registration_.get()});
    if (!reg.ok()) return reg.status();
    registration_server_ = std::move(*reg);
    return absl::OkStatus();
  }
  void StopRegistration() {
    if (registration_server_) registration_server_->Shutdown(absl::ZeroDuration());
    registration_server_.reset();
  }
  void Shutdown() {
    StopRegistration();
    if (server_) server_->Shutdown(absl::ZeroDuration());
    server_.reset();
  }
  csi::RegistrationService* registration() { return registration_.get(); }

  // Test knobs.
  void SetTopology(std::map<std::string, std::string> t) {
    absl::MutexLock lock(&mu_);
    topology_ = std::move(t);
  }
  void SetMaxVolumes(int64_t n) {
    absl::MutexLock lock(&mu_);
    max_volumes_ = n;
  }
  // GET_VOLUME_STATS (with VOLUME_CONDITION) offered, and what
  // NodeGetVolumeStats answers for a published volume: bytes and inodes as
  // total/available/used, and whether the volume is abnormal.
  void SetStats(bool offered, int64_t bytes = 0, int64_t bytes_used = 0, int64_t inodes = 0, int64_t inodes_used = 0,
                bool abnormal = false) {
    absl::MutexLock lock(&mu_);
    stats_offered_ = offered;
    stats_ = {bytes, bytes_used, inodes, inodes_used};
    abnormal_ = abnormal;
  }
  std::vector<::csi::v1::NodeGetVolumeStatsRequest> StatsRequests() const {
    absl::MutexLock lock(&mu_);
    return stats_requests_;
  }
  // The next `n` calls of `method` ("stage", "publish", "unpublish", "unstage", "expand", "info", "stats") fail.
  void Fail(const std::string& method, int n, grpc::StatusCode code = grpc::StatusCode::INTERNAL,
            std::string message = "injected failure") {
    absl::MutexLock lock(&mu_);
    failures_[method] = {n, code, std::move(message), false};
  }
  // The next `n` calls of `method` ("stage", "publish", "unpublish",
  // "unstage") do their work, then answer `code` (a timeout after a mount).
  void FailAfter(const std::string& method, int n, grpc::StatusCode code = grpc::StatusCode::DEADLINE_EXCEEDED,
                 std::string message = "injected failure after the work was done") {
    absl::MutexLock lock(&mu_);
    failures_[method] = {n, code, std::move(message), true};
  }
  int Calls(const std::string& method) const {
    absl::MutexLock lock(&mu_);
    auto it = calls_.find(method);
    return it == calls_.end() ? 0 : it->second;
  }
  std::map<std::string, std::string> Staged() const {  // volume id → staging path
    absl::MutexLock lock(&mu_);
    return staged_;
  }
  std::map<std::string, std::string> Published() const {  // target → volume id
    absl::MutexLock lock(&mu_);
    return published_;
  }
  std::vector<::csi::v1::NodePublishVolumeRequest> PublishRequests() const {
    absl::MutexLock lock(&mu_);
    return publish_requests_;
  }
  std::map<std::string, int64_t> Expanded() const {
    absl::MutexLock lock(&mu_);
    return expanded_;
  }
  // The "mount table": staging paths and targets.
  absl::StatusOr<std::vector<MountEntry>> MountTable() const {
    absl::MutexLock lock(&mu_);
    std::vector<MountEntry> out;
    for (const auto& [id, path] : staged_)
      out.push_back(MountEntry{
          .source = id, .target = path, .fs_type = "fake", .root = "/", .options = "rw", .major = 0, .minor = 0});
    for (const auto& [target, id] : published_)
      out.push_back(MountEntry{
          .source = id, .target = target, .fs_type = "fake", .root = "/", .options = "rw", .major = 0, .minor = 0});
    return out;
  }
  // Forgets everything mounted (a machine reboot).
  void Reboot() {
    absl::MutexLock lock(&mu_);
    staged_.clear();
    published_.clear();
  }

  // Identity
  grpc::Status GetPluginInfo(grpc::ServerContext*, const ::csi::v1::GetPluginInfoRequest*,
                             ::csi::v1::GetPluginInfoResponse* resp) override {
    resp->set_name(name_);
    resp->set_vendor_version("0.0.1");
    return grpc::Status::OK;
  }
  grpc::Status GetPluginCapabilities(grpc::ServerContext*, const ::csi::v1::GetPluginCapabilitiesRequest*,
                                     ::csi::v1::GetPluginCapabilitiesResponse*) override {
    return grpc::Status::OK;
  }
  grpc::Status Probe(grpc::ServerContext*, const ::csi::v1::ProbeRequest*, ::csi::v1::ProbeResponse* resp) override {
    resp->mutable_ready()->set_value(true);
    return grpc::Status::OK;
  }

  // Node
  grpc::Status NodeGetInfo(grpc::ServerContext*, const ::csi::v1::NodeGetInfoRequest*,
                           ::csi::v1::NodeGetInfoResponse* resp) override {
    absl::MutexLock lock(&mu_);
    if (auto st = Injected("info"); !st.ok()) return st;
    resp->set_node_id(node_id_);
    resp->set_max_volumes_per_node(max_volumes_);
    for (const auto& [k, v] : topology_) (*resp->mutable_accessible_topology()->mutable_segments())[k] = v;
    return grpc::Status::OK;
  }
  grpc::Status NodeGetCapabilities(grpc::ServerContext*, const ::csi::v1::NodeGetCapabilitiesRequest*,
                                   ::csi::v1::NodeGetCapabilitiesResponse* resp) override {
    using Rpc = ::csi::v1::NodeServiceCapability::RPC;
    for (auto t : {Rpc::STAGE_UNSTAGE_VOLUME, Rpc::EXPAND_VOLUME}) resp->add_capabilities()->mutable_rpc()->set_type(t);
    absl::MutexLock lock(&mu_);
    if (stats_offered_) {
      for (auto t : {Rpc::GET_VOLUME_STATS, Rpc::VOLUME_CONDITION})
        resp->add_capabilities()->mutable_rpc()->set_type(t);
    }
    return grpc::Status::OK;
  }
  grpc::Status NodeGetVolumeStats(grpc::ServerContext*, const ::csi::v1::NodeGetVolumeStatsRequest* req,
                                  ::csi::v1::NodeGetVolumeStatsResponse* resp) override {
    absl::MutexLock lock(&mu_);
    stats_requests_.push_back(*req);
    if (auto st = Injected("stats"); !st.ok()) return st;
    auto it = published_.find(req->volume_path());
    if (it == published_.end() || it->second != req->volume_id()) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "not published there");
    }
    auto* bytes = resp->add_usage();
    bytes->set_unit(::csi::v1::VolumeUsage::BYTES);
    bytes->set_total(stats_[0]);
    bytes->set_used(stats_[1]);
    bytes->set_available(stats_[0] - stats_[1]);
    auto* inodes = resp->add_usage();
    inodes->set_unit(::csi::v1::VolumeUsage::INODES);
    inodes->set_total(stats_[2]);
    inodes->set_used(stats_[3]);
    inodes->set_available(stats_[2] - stats_[3]);
    resp->mutable_volume_condition()->set_abnormal(abnormal_);
    resp->mutable_volume_condition()->set_message(abnormal_ ? "the disk is failing" : "healthy");
    return grpc::Status::OK;
  }
  grpc::Status NodeStageVolume(grpc::ServerContext*, const ::csi::v1::NodeStageVolumeRequest* req,
                               ::csi::v1::NodeStageVolumeResponse*) override {
    absl::MutexLock lock(&mu_);
    if (auto st = Injected("stage"); !st.ok()) return st;
    auto it = staged_.find(req->volume_id());
    if (it != staged_.end() && it->second != req->staging_target_path()) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "staged elsewhere");
    }
    // The CO creates the staging directory (CSI spec: "The CO SHALL ensure
    // that the path exists").
    struct stat st {};
    if (::stat(req->staging_target_path().c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "staging target path does not exist");
    }
    staged_[req->volume_id()] = req->staging_target_path();
    return InjectedAfter("stage");
  }
  grpc::Status NodeUnstageVolume(grpc::ServerContext*, const ::csi::v1::NodeUnstageVolumeRequest* req,
                                 ::csi::v1::NodeUnstageVolumeResponse*) override {
    absl::MutexLock lock(&mu_);
    if (auto st = Injected("unstage"); !st.ok()) return st;
    for (const auto& [target, id] : published_) {
      if (id == req->volume_id()) return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "still published");
    }
    staged_.erase(req->volume_id());
    return InjectedAfter("unstage");
  }
  grpc::Status NodePublishVolume(grpc::ServerContext*, const ::csi::v1::NodePublishVolumeRequest* req,
                                 ::csi::v1::NodePublishVolumeResponse*) override {
    absl::MutexLock lock(&mu_);
    if (auto st = Injected("publish"); !st.ok()) return st;
    if (staged_.count(req->volume_id()) == 0 || staged_[req->volume_id()] != req->staging_target_path()) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "not staged there");
    }
    const std::string& target = req->target_path();
    if (::access(std::filesystem::path(target).parent_path().c_str(), F_OK) != 0) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "the parent of the target path does not exist");
    }
    if (req->volume_capability().has_block()) {
      FILE* f = ::fopen(target.c_str(), "a");
      if (f) ::fclose(f);
    } else {
      ::mkdir(target.c_str(), 0750);
    }
    published_[target] = req->volume_id();
    publish_requests_.push_back(*req);
    return InjectedAfter("publish");
  }
  grpc::Status NodeUnpublishVolume(grpc::ServerContext*, const ::csi::v1::NodeUnpublishVolumeRequest* req,
                                   ::csi::v1::NodeUnpublishVolumeResponse*) override {
    absl::MutexLock lock(&mu_);
    if (auto st = Injected("unpublish"); !st.ok()) return st;
    published_.erase(req->target_path());
    std::error_code ec;
    std::filesystem::remove(req->target_path(), ec);
    return InjectedAfter("unpublish");
  }
  grpc::Status NodeExpandVolume(grpc::ServerContext*, const ::csi::v1::NodeExpandVolumeRequest* req,
                                ::csi::v1::NodeExpandVolumeResponse* resp) override {
    absl::MutexLock lock(&mu_);
    if (auto st = Injected("expand"); !st.ok()) return st;
    if (published_.count(req->volume_path()) == 0) return grpc::Status(grpc::StatusCode::NOT_FOUND, "not published");
    expanded_[req->volume_id()] = req->capacity_range().required_bytes();
    resp->set_capacity_bytes(req->capacity_range().required_bytes());
    return grpc::Status::OK;
  }

 private:
  struct Failure {
    int n = 0;
    grpc::StatusCode code = grpc::StatusCode::OK;
    std::string message;
    bool after = false;  // after the work is done
  };
  grpc::Status Injected(const std::string& method) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ++calls_[method];
    return Take(method, false);
  }
  grpc::Status InjectedAfter(const std::string& method) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return Take(method, true);
  }
  grpc::Status Take(const std::string& method, bool after) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = failures_.find(method);
    if (it == failures_.end() || it->second.n <= 0 || it->second.after != after) return grpc::Status::OK;
    --it->second.n;
    return grpc::Status(it->second.code, it->second.message);
  }

  const std::string name_;
  const std::string node_id_;
  std::string csi_socket_;
  std::unique_ptr<csi::CsiServer> server_;
  std::unique_ptr<csi::RegistrationService> registration_;
  std::unique_ptr<csi::CsiServer> registration_server_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::string> topology_ ABSL_GUARDED_BY(mu_);
  int64_t max_volumes_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, Failure> failures_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> calls_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> staged_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> published_ ABSL_GUARDED_BY(mu_);
  std::vector<::csi::v1::NodePublishVolumeRequest> publish_requests_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> expanded_ ABSL_GUARDED_BY(mu_);
  bool stats_offered_ ABSL_GUARDED_BY(mu_) = false;
  std::array<int64_t, 4> stats_ ABSL_GUARDED_BY(mu_) = {};
  bool abnormal_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<::csi::v1::NodeGetVolumeStatsRequest> stats_requests_ ABSL_GUARDED_BY(mu_);
};

}  // namespace berth::node::testing
