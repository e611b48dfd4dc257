// A spec-strict CSI driver for the test suite: it checks the CO's half of
// the CSI spec (container-storage-interface/spec, spec.md) on every call and
// fails loudly on each violation, while doing the real work a node-local
// driver does.
//
// The driver serves Identity, Controller and Node for one node. A volume is
// a directory (a sparse file for block volumes) under --state-dir; NodeStage
// bind-mounts it at the staging path, NodePublish bind-mounts the staging
// path (or the volume itself when STAGE_UNSTAGE_VOLUME is switched off) at
// the target, and the reverse calls unmount. Its state (volumes, where they
// are attached, staged and published) is kept in <state-dir>/state.json,
// written atomically after every change, so it survives its own restarts.
//
// A CO violation — a call the spec forbids the CO to make at that moment or
// in that shape — is answered with "CO violation: <what>" (FAILED_PRECONDITION;
// INVALID_ARGUMENT for a missing required field and ABORTED for a second
// call in flight on one volume, the codes the spec names for those), and is
// recorded: kept in memory (Violations()) and appended as one line to the
// violations file. A test passes only when that file stays empty. The rules
// are listed in docs/failure-semantics.md ("The CO's half of the CSI spec").
//
// Faults ("stage:DEADLINE_EXCEEDED:1:after"): the next N calls of one RPC are
// answered with the code, either before doing anything or after doing the
// real work (a timeout after a real mount).
//
//   StrictDriver::Options options{.node_id = "node-1", .state_dir = "/tmp/s"};
//   driver::LinuxMounter mounter;
//   auto driver = StrictDriver::Open(options, mounter);
//   auto server = CsiServer::Start({.endpoint = "unix:///tmp/s/csi.sock"}, (*driver)->services());
//
// Thread-safety: thread-safe (gRPC calls arrive concurrently).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "csi/v1/csi.grpc.pb.h"
#include "driver/mount/mounter.h"

namespace berth::driver::testing {

// The RPCs faults can name: "create", "delete", "controller-publish",
// "controller-unpublish", "controller-expand", "stage", "unstage",
// "publish", "unpublish", "stats", "node-expand".
enum class StrictOp {
  kCreate,
  kDelete,
  kControllerPublish,
  kControllerUnpublish,
  kControllerExpand,
  kStage,
  kUnstage,
  kPublish,
  kUnpublish,
  kStats,
  kNodeExpand,
  kOther,  // everything else (capabilities, info, listing)
};

struct StrictFault {
  StrictOp op = StrictOp::kOther;
  absl::StatusCode code = absl::StatusCode::kUnavailable;
  int count = 1;       // how many calls get it
  bool after = false;  // after the real work (else instead of it)
};

// Parses "op:CODE[:count[:before|after]]" (count 1, before by default);
// CODE is a gRPC code name such as DEADLINE_EXCEEDED. INVALID_ARGUMENT
// naming the bad part.
absl::StatusOr<StrictFault> ParseStrictFault(std::string_view text);

// The ID the strict driver gives the volume CreateVolume names `name`.
std::string StrictVolumeId(const std::string& name);

class StrictDriver {
 public:
  struct Options {
    std::string name = "strict.csi.berth.io";
    std::string node_id;
    std::string state_dir;        // canonical absolute; created 0700
    std::string violations_file;  // "" = kept in memory only
    // Capabilities (switches of the strict-csi-driver binary).
    bool stage_unstage = true;                   // node STAGE_UNSTAGE_VOLUME
    bool publish_unpublish = true;               // controller PUBLISH_UNPUBLISH_VOLUME
    bool volume_stats = true;                    // node GET_VOLUME_STATS
    bool expand = true;                          // controller EXPAND_VOLUME + online expansion
    bool node_expand = true;                     // node EXPAND_VOLUME
    bool topology = true;                        // VOLUME_ACCESSIBILITY_CONSTRAINTS
    int64_t capacity_bytes = int64_t{10} << 30;  // what GetCapacity offers in all
    std::vector<StrictFault> faults;
    // Test hook: runs inside each volume RPC once it counts as in flight,
    // before any work (tests hold a call there to send a second one).
    std::function<void(std::string_view rpc)> in_flight_hook;
  };

  // Loads <state_dir>/state.json if present. `mounter` is not owned and
  // must outlive the driver.
  static absl::StatusOr<std::unique_ptr<StrictDriver>> Open(Options options, driver::Mounter& mounter);
  ~StrictDriver();

  // Identity, Controller and Node, to serve on one socket.
  std::vector<grpc::Service*> services();

  // Every violation so far, in order ("<RPC> <volume>: <what>").
  std::vector<std::string> Violations() const ABSL_LOCKS_EXCLUDED(violations_mu_);

  // What the driver holds, for tests.
  struct VolumeView {
    std::string id, name, path;  // path: the directory or image file
    bool block = false;
    int64_t capacity = 0;
    std::set<std::string> attached_nodes;  // ControllerPublished to
    std::string staged_at;                 // "" = not staged on this node
    std::set<std::string> published_at;    // targets on this node
  };
  std::vector<VolumeView> Volumes() const ABSL_LOCKS_EXCLUDED(mu_);
  // How many calls of `rpc` ("NodeStageVolume") ended with `code`.
  int Calls(const std::string& rpc, absl::StatusCode code) const ABSL_LOCKS_EXCLUDED(violations_mu_);

  const Options& options() const { return options_; }
  std::vector<::csi::v1::ControllerServiceCapability> ControllerCapabilities() const;
  std::vector<::csi::v1::NodeServiceCapability> NodeCapabilities() const;
  std::vector<::csi::v1::PluginCapability> PluginCapabilities() const;
  std::string TopologyKey() const;

 private:
  // `confirmed`: the last call that set the entry up told the CO it
  // succeeded (a fault after the work leaves the work done but unconfirmed,
  // as a timed-out call that happened does).
  struct Attachment {
    std::map<std::string, std::string> publish_context;
    bool readonly = false;
    ::csi::v1::VolumeCapability capability;
    bool confirmed = false;
  };
  struct Staging {
    std::string path;
    ::csi::v1::VolumeCapability capability;
    bool confirmed = false;
  };
  struct Target {
    std::string staging;  // as passed (may be "")
    bool readonly = false;
    ::csi::v1::VolumeCapability capability;
    bool confirmed = false;
  };
  struct Volume {
    std::string id, name;
    int64_t capacity = 0;       // the controller's size
    int64_t node_capacity = 0;  // the size the node last expanded to
    bool block = false;
    std::map<std::string, std::string> parameters, context;
    std::vector<::csi::v1::VolumeCapability> capabilities;
    std::map<std::string, Attachment> attached;  // node id → attachment
    std::optional<Staging> staged;               // on this node
    std::map<std::string, Target> targets;       // target path → publish
  };

  StrictDriver(Options options, driver::Mounter& mounter);
  // What one call leaves for the envelope: the key of the state entry it
  // confirmed (an attachment's node, a staging path, a target), so a fault
  // injected after the work can mark it unconfirmed again.
  struct Call {
    std::string confirmed;
  };
  // The envelope of every call: the capability behind `op` must be
  // advertised, no other call may be in flight on `volume_id` (stats
  // excepted), faults apply, then `body` runs.
  grpc::Status Serve(const char* rpc, StrictOp op, const std::string& volume_id,
                     const std::function<absl::Status(Call&)>& body);
  // Records a violation of an RPC that is never advertised (snapshots, ...).
  grpc::Status Unadvertised(const char* rpc, const std::string& capability);

  class IdentityImpl;
  class ControllerImpl;
  class NodeImpl;

  // The RPCs. Each checks the CO's side first (recording violations), then
  // acts; the gRPC services call these through Serve().
  absl::Status CreateVolume(Call& call, const ::csi::v1::CreateVolumeRequest& req,
                            ::csi::v1::CreateVolumeResponse* resp);
  absl::Status DeleteVolume(Call& call, const ::csi::v1::DeleteVolumeRequest& req);
  absl::Status ControllerPublish(Call& call, const ::csi::v1::ControllerPublishVolumeRequest& req,
                                 ::csi::v1::ControllerPublishVolumeResponse* resp);
  absl::Status ControllerUnpublish(Call& call, const ::csi::v1::ControllerUnpublishVolumeRequest& req);
  absl::Status ControllerExpand(Call& call, const ::csi::v1::ControllerExpandVolumeRequest& req,
                                ::csi::v1::ControllerExpandVolumeResponse* resp);
  absl::Status ValidateCapabilities(Call& call, const ::csi::v1::ValidateVolumeCapabilitiesRequest& req,
                                    ::csi::v1::ValidateVolumeCapabilitiesResponse* resp);
  absl::Status ListVolumes(Call& call, const ::csi::v1::ListVolumesRequest& req, ::csi::v1::ListVolumesResponse* resp);
  absl::Status GetCapacity(Call& call, const ::csi::v1::GetCapacityRequest& req, ::csi::v1::GetCapacityResponse* resp);
  absl::Status Stage(Call& call, const ::csi::v1::NodeStageVolumeRequest& req);
  absl::Status Unstage(Call& call, const ::csi::v1::NodeUnstageVolumeRequest& req);
  absl::Status Publish(Call& call, const ::csi::v1::NodePublishVolumeRequest& req);
  absl::Status Unpublish(Call& call, const ::csi::v1::NodeUnpublishVolumeRequest& req);
  absl::Status Stats(Call& call, const ::csi::v1::NodeGetVolumeStatsRequest& req,
                     ::csi::v1::NodeGetVolumeStatsResponse* resp);
  absl::Status NodeExpand(Call& call, const ::csi::v1::NodeExpandVolumeRequest& req,
                          ::csi::v1::NodeExpandVolumeResponse* resp);

  // Records "CO violation: <what>" for `rpc` and returns it with `code`.
  absl::Status Violation(std::string_view rpc, std::string_view volume, std::string_view what,
                         absl::StatusCode code = absl::StatusCode::kFailedPrecondition)
      ABSL_LOCKS_EXCLUDED(violations_mu_);
  std::optional<std::string> MissingCapability(StrictOp op) const;
  std::optional<StrictFault> TakeFault(StrictOp op, bool after) ABSL_LOCKS_EXCLUDED(violations_mu_);

  absl::Status Load() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Save() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string VolumePath(const Volume& v) const;
  // The volume for a request's id: NOT_FOUND for an unknown or malformed id.
  absl::StatusOr<Volume*> Find(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // The CO-side checks shared by several RPCs.
  // `cap` null: the REQUIRED field is missing. `v` null: no volume yet
  // (CreateVolume).
  absl::Status CheckCapability(std::string_view rpc, const std::string& volume, const Volume* v,
                               const ::csi::v1::VolumeCapability* cap);
  absl::Status CheckPublishContext(std::string_view rpc, const Volume& v,
                                   const google::protobuf::Map<std::string, std::string>& got)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckVolumeContext(std::string_view rpc, const Volume& v,
                                  const google::protobuf::Map<std::string, std::string>& got)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A REQUIRED string field that is empty (INVALID_ARGUMENT violation).
  absl::Status CheckSet(std::string_view rpc, const std::string& volume, const char* field, const std::string& value);
  absl::Status CheckAbsolute(std::string_view rpc, const std::string& volume, const char* field,
                             const std::string& path);
  // After a fault injected after the work: the entry `call.confirmed` of
  // `op` on `volume` is done but the CO was told otherwise.
  void Unconfirm(StrictOp op, const std::string& volume, const std::string& key) ABSL_LOCKS_EXCLUDED(mu_);

  // Node-side effects.
  absl::Status MountStaging(const Volume& v, const std::string& staging) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status UnmountStaging(const Volume& v, const std::string& staging) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status MountTarget(const Volume& v, const std::string& source, const std::string& target, bool readonly)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status UnmountTarget(const Volume& v, const std::string& target) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<bool> IsMountPoint(const std::string& path);

  // Immutable after construction.
  const Options options_;
  driver::Mounter& mounter_;
  std::unique_ptr<IdentityImpl> identity_;
  std::unique_ptr<ControllerImpl> controller_;
  std::unique_ptr<NodeImpl> node_;

  // The volumes; held for the whole body of a call.
  mutable absl::Mutex mu_ ABSL_ACQUIRED_BEFORE(violations_mu_);
  std::map<std::string, Volume> volumes_ ABSL_GUARDED_BY(mu_);
  uint64_t attach_seq_ ABSL_GUARDED_BY(mu_) = 0;

  // Calls in flight per volume (taken without mu_, so an overlap is seen).
  absl::Mutex flight_mu_;
  std::map<std::string, std::string> in_flight_ ABSL_GUARDED_BY(flight_mu_);  // volume → RPC

  mutable absl::Mutex violations_mu_;
  std::vector<std::string> violations_ ABSL_GUARDED_BY(violations_mu_);
  std::vector<StrictFault> faults_ ABSL_GUARDED_BY(violations_mu_);
  std::map<std::pair<std::string, absl::StatusCode>, int> calls_ ABSL_GUARDED_BY(violations_mu_);
};

}  // namespace berth::driver::testing
