// The provisioner's volumes (provisioner.h, the part after the claim is
// bound): which PVs are ours, their finalizer, and reclaiming their storage
// (DeleteVolume) once Released or deleted.
#include <string>

#include "api/types/core.h"
#include "api/types/storage.h"
#include "client/object.h"
#include "client/secrets.h"
#include "client/typed.h"
#include "client/writes.h"
#include "common/status.h"
#include "common/strings.h"
#include "controllers/node_affinity.h"
#include "controllers/volume/provisioner.h"
#include "controllers/volume/provisioner_internal.h"

namespace berth::controllers {

using namespace ::berth::client;  // the controllers' own client library
using nlohmann::json;
using provisioner_internal::Expand;
using provisioner_internal::ReservedParameter;
using types::PersistentVolume;
using types::StorageClass;

bool Provisioner::OwnsVolume(const json& pv) const {
  if (const std::string by = Annotation(pv, kAnnProvisionedBy); !by.empty()) return by == options_.driver;
  // Statically provisioned: a CSI volume of our driver (upstream's
  // isProvisionerForVolume).
  return Str(pv, {"spec", "csi", "driver"}) == options_.driver;
}

bool Provisioner::VolumeNeedsSync(const json& pv) const {
  // Another driver's volume, and the common case of ours — provisioned,
  // reclaimed by Delete, holding our finalizer, not deleting, not Released —
  // need nothing, told from the raw object.
  if (!OwnsVolume(pv)) return false;
  return Deleting(pv) || !HasFinalizer(pv, kProvisionerFinalizer) ||
         Str(pv, {"spec", "persistentVolumeReclaimPolicy"}) != "Delete" || Str(pv, {"status", "phase"}) == "Released";
}

absl::StatusOr<google::protobuf::Map<std::string, std::string>> Provisioner::DeletionSecrets(
    const PersistentVolume& pv) {
  google::protobuf::Map<std::string, std::string> secrets;
  std::string name = pv.metadata.Annotation("volume.kubernetes.io/provisioner-deletion-secret-name");
  std::string ns = pv.metadata.Annotation("volume.kubernetes.io/provisioner-deletion-secret-namespace");
  if (name.empty() && pv.metadata.Annotation(kAnnProvisionedBy).empty()) {
    // A static volume: the class's provisioner secret, for its claim.
    std::shared_ptr<const json> sc_json = informers_.classes.GetSharedByKey(pv.spec.storage_class_name);
    if (sc_json && pv.spec.claim_ref) {
      BERTH_ASSIGN_OR_RETURN(const StorageClass sc, DecodeAs<StorageClass>(*sc_json));
      types::ObjectMeta claim;
      claim.name = pv.spec.claim_ref->name;
      claim.namespace_ = pv.spec.claim_ref->namespace_;
      name = Expand(ReservedParameter(sc, "provisioner-secret-name"), claim, pv.metadata.name);
      ns = Expand(ReservedParameter(sc, "provisioner-secret-namespace"), claim, pv.metadata.name);
    }
  }
  BERTH_ASSIGN_OR_RETURN(const SecretData data, CsiSecret(registry_, ns, name, "provisioner deletion secret"));
  for (const auto& [k, v] : data) secrets[k] = v;
  return secrets;
}

absl::Status Provisioner::CheckNotAttached(const PersistentVolume& pv) {
  BERTH_ASSIGN_OR_RETURN(
      auto selector, apiserver::FieldSelector::Parse(StrCat("spec.source.persistentVolumeName=", pv.metadata.name)));
  apiserver::ListOptions options;
  options.fields = selector;
  BERTH_ASSIGN_OR_RETURN(apiserver::ListPage page,
                         registry_.List(K("volumeattachments", "storage.k8s.io"), "", options));
  if (page.items.empty()) return absl::OkStatus();
  BERTH_ASSIGN_OR_RETURN(const types::VolumeAttachment va, DecodeAs<types::VolumeAttachment>(page.items.front()));
  return absl::FailedPreconditionError(
      StrCat("persistentvolume ", pv.metadata.name, " is still attached to node ", va.spec.node_name));
}

absl::Status Provisioner::SyncVolume(const std::string& name) {
  std::shared_ptr<const json> cached = informers_.volumes.GetSharedByKey(name);
  if (!cached) return absl::OkStatus();
  // Any change of it comes back through the queue, so a stale copy only
  // defers the decision.
  if (!VolumeNeedsSync(*cached)) return absl::OkStatus();
  // Decide on the stored object: deleting storage on a stale view loses data.
  auto fresh = registry_.GetShared(K("persistentvolumes"), "", name);
  if (!fresh.ok()) return fresh.status().code() == absl::StatusCode::kNotFound ? absl::OkStatus() : fresh.status();
  if (!OwnsVolume(**fresh)) return absl::OkStatus();
  BERTH_ASSIGN_OR_RETURN(const PersistentVolume pv, DecodeAs<PersistentVolume>(**fresh));
  const json pv_ref = IdentityOf(pv);  // names the PV to finalizer edits and events
  const bool provisioned = !pv.metadata.Annotation(kAnnProvisionedBy).empty();
  const bool deleting = pv.metadata.Deleting();
  const bool finalizer = pv.metadata.HasFinalizer(kProvisionerFinalizer);
  const std::string& phase = pv.status.phase;
  const std::string claim_uid = pv.spec.claim_ref ? pv.spec.claim_ref->uid : "";
  if (pv.spec.persistent_volume_reclaim_policy != "Delete") {
    // Retain (possibly changed after provisioning): the storage stays.
    return finalizer ? EditFinalizer(registry_, K("persistentvolumes"), pv_ref, kProvisionerFinalizer, false)
                     : absl::OkStatus();
  }
  if (!deleting && !finalizer) {
    // Provisioned ones are created with it (or it was removed by hand);
    // static ones get it once Bound, as upstream.
    if (phase == "Bound" || (provisioned && phase != "Released")) {
      return EditFinalizer(registry_, K("persistentvolumes"), pv_ref, kProvisionerFinalizer, true);
    }
  }
  // Deleted without our finalizer: the storage was never ours to delete
  // (or is deleted already).
  if (deleting && !finalizer) return absl::OkStatus();
  bool reclaim = phase == "Released";
  if (deleting && phase != "Bound" && phase != "Released") {
    if (provisioned) {
      reclaim = true;  // made for a claim: deleted before it was ever bound
    } else if (claim_uid.empty()) {
      // A static volume deleted while unbound: its storage is the
      // administrator's; only our finalizer goes.
      return EditFinalizer(registry_, K("persistentvolumes"), pv_ref, kProvisionerFinalizer, false);
    } else {
      reclaim = true;  // bound before, its claim gone (confirmed below)
    }
  }
  if (!reclaim) return absl::OkStatus();
  // Released means its claim is gone: make sure against the store (a claim
  // with the referenced uid still holding it means the phase is stale).
  if (!claim_uid.empty()) {
    auto claim = registry_.Get(K("persistentvolumeclaims"), pv.spec.claim_ref->namespace_, pv.spec.claim_ref->name);
    if (claim.ok() && Uid(*claim) == claim_uid) return absl::OkStatus();
    if (!claim.ok() && claim.status().code() != absl::StatusCode::kNotFound) return claim.status();
  }
  auto fail = [&](absl::Status st) {
    events_.Record(pv_ref, "Warning", "VolumeFailedDelete", std::string(st.message()));
    return st;
  };
  if (absl::Status attached = CheckNotAttached(pv); !attached.ok()) return fail(attached);
  auto secrets = DeletionSecrets(pv);
  if (!secrets.ok()) return fail(secrets.status());
  // A node-local volume is deleted where it lives.
  absl::Status st = DeleteVolume(pv.spec.csi ? pv.spec.csi->volume_handle : "", VolumeNode(registry_, pv), *secrets,
                                 volume_queue_, name);
  if (!st.ok()) return fail(st);
  if (!deleting) {
    auto deleted = registry_.Delete(K("persistentvolumes"), "", name,
                                    {.uid = pv.metadata.uid,
                                     .resource_version = pv.metadata.resource_version,
                                     .grace_period_seconds = std::nullopt});
    if (!deleted.ok() && deleted.status().code() != absl::StatusCode::kNotFound) return deleted.status();
  }
  return EditFinalizer(registry_, K("persistentvolumes"), pv_ref, kProvisionerFinalizer, false);
}

}  // namespace berth::controllers
