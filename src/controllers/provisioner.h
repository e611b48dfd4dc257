// Dynamic provisioning for one CSI driver (external-provisioner semantics,
// seeds 000 and 003), in process.
//
// A claim is ours when the binder handed it over (annotation
// volume.kubernetes.io/storage-provisioner = our driver) and its class names
// our driver. WaitForFirstConsumer claims wait for the scheduler's
// volume.kubernetes.io/selected-node. Then:
//   1. finalizer volume.berth.io/provisioning on the claim (leak protection),
//   2. CreateVolume: name pvc-<claim uid>, capacity range from the claim,
//      capabilities from accessModes/volumeMode and csi.storage.k8s.io/fstype,
//      class parameters without the reserved csi.storage.k8s.io/* keys,
//      provisioner secrets resolved from Secret objects, topology (requisite
//      from allowedTopologies or the CSINode segments of all nodes; the
//      selected node's segment first), content source from a VolumeSnapshot
//      or another claim,
//   3. the PV: pvc-<uid>, claimRef to the claim (the binder completes the
//      binding), nodeAffinity from accessible_topology, secrets refs,
//      pv.kubernetes.io/provisioned-by,
//   4. the finalizer comes off.
// The finalizer carries the node the request went to
// (volume.berth.io/provisioning-node), so a retry after a crash asks the same
// node. A claim deleted while CreateVolume is in flight keeps its finalizer
// until the outcome is known: the provisioner repeats the (idempotent)
// CreateVolume and deletes what it returns; if the request cannot be rebuilt
// (its StorageClass is gone) the finalizer stays, with a warning event.
// Under WaitForFirstConsumer, selected-node is cleared so the scheduler
// picks again when the node is gone or not Ready (and no request is in
// flight), or when CreateVolume on its topology ended in a final error.
//
// Provisioned PVs with reclaim policy Delete carry
// external-provisioner.volume.kubernetes.io/finalizer: once Released (its
// claim gone, confirmed against the store), or deleted while not Bound, the
// storage is deleted (DeleteVolume on the volume's node), then the PV object
// (with uid and resourceVersion preconditions), then the finalizer.
//
// Thread-safety: thread-safe; Start/Stop from one thread.
#pragma once

#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "apiserver/registry.h"
#include "client/drivers.h"
#include "client/events.h"
#include "client/informer.h"
#include "controllers/pv_binder.h"  // kProvisioningFinalizer, kAnnProvisioningNode
#include "client/workqueue.h"
#include "csi/v1/csi.grpc.pb.h"

namespace berth::controllers {

using namespace ::berth::client;  // the controllers' own client library

// On provisioned PVs with reclaim policy Delete: the storage is deleted
// before the PV object may go (external-provisioner's finalizer).
inline constexpr char kProvisionerFinalizer[] = "external-provisioner.volume.kubernetes.io/finalizer";

struct ProvisionerInformers {
  Informer& claims;
  Informer& volumes;
  Informer& classes;
  Informer& nodes;
  Informer& csinodes;
};

class Provisioner {
 public:
  struct Options {
    std::string driver;  // the CSI driver name (StorageClass provisioner)
    int workers = 4;
    absl::Duration rpc_timeout = absl::Minutes(1);
  };
  Provisioner(apiserver::Registry& registry, DriverDirectory& drivers, ProvisionerInformers informers,
              Options options);
  ~Provisioner();

  void RegisterHandlers();
  void Start();
  void Stop();

  absl::Status SyncClaim(const std::string& key);
  absl::Status SyncVolume(const std::string& name);

  // The CreateVolume request for `claim` of `storage_class` (public for
  // tests). `node` is the selected node ("" for none).
  absl::StatusOr<::csi::v1::CreateVolumeRequest> BuildRequest(const nlohmann::json& claim,
                                                             const nlohmann::json& storage_class,
                                                             const std::string& node);

 private:
  bool Ours(const nlohmann::json& claim, nlohmann::json* storage_class) const;
  absl::StatusOr<::csi::v1::CreateVolumeResponse> CreateVolume(const ::csi::v1::CreateVolumeRequest& request,
                                                             const std::string& node);
  absl::Status DeleteVolume(const std::string& handle, const std::string& node,
                            const google::protobuf::Map<std::string, std::string>& secrets);
  absl::Status CreatePersistentVolume(const nlohmann::json& claim, const nlohmann::json& storage_class,
                                      const ::csi::v1::CreateVolumeRequest& request,
                                      const ::csi::v1::CreateVolumeResponse& response);
  absl::Status SetFinalizer(const nlohmann::json& claim, bool present, const std::string& node = "");
  // The topology segment of `node` for our driver ({} if none).
  std::map<std::string, std::string> Segment(const std::string& node) const;
  std::string NodeForClaim(const nlohmann::json& claim) const;
  // Removes volume.kubernetes.io/selected-node if it still names `node`.
  absl::Status ClearSelectedNode(const nlohmann::json& claim, const std::string& node);

  apiserver::Registry& registry_;
  DriverDirectory& drivers_;
  ProvisionerInformers informers_;
  const Options options_;
  EventRecorder events_;
  WorkQueue claim_queue_;
  WorkQueue volume_queue_;
  std::vector<std::thread> workers_;
};

}  // namespace berth::controllers
