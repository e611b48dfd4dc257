#include "controllers/volume/provisioner.h"

#include <algorithm>
#include <functional>
#include <set>

#include "api/quantity.h"
#include "api/types/core.h"
#include "api/types/core_node.h"
#include "api/types/storage.h"
#include "client/capability.h"
#include "client/object.h"
#include "client/typed.h"
#include "client/writes.h"
#include "common/status.h"
#include "common/strings.h"
#include "controllers/node_affinity.h"
#include "controllers/taints.h"
#include "controllers/volume/data_source.h"
#include "controllers/volume/provisioner_internal.h"
#include "controllers/volume/pv_binder.h"
#include "csi/driver_client.h"
#include "csi/grpc_status.h"
#include "spdlog/spdlog.h"

namespace berth::controllers {

using namespace ::berth::client;  // the controllers' own client library
namespace {

using nlohmann::json;
using provisioner_internal::Expand;
using provisioner_internal::ReservedParameter;
using types::PersistentVolume;
using types::PersistentVolumeClaim;
using types::StorageClass;

// The driver a claim was handed to (the binder's annotation), read from
// the raw object: most callers decide on it before decoding anything.
std::string ClaimProvisioner(const json& claim) {
  std::string p = Annotation(claim, kAnnStorageProvisioner);
  return p.empty() ? Annotation(claim, kAnnBetaStorageProvisioner) : p;
}
// The same of a decoded claim.
std::string ClaimProvisioner(const PersistentVolumeClaim& claim) {
  const std::string& p = claim.metadata.Annotation(kAnnStorageProvisioner);
  return p.empty() ? claim.metadata.Annotation(kAnnBetaStorageProvisioner) : p;
}

const api::KindInfo& Claims() { return K("persistentvolumeclaims"); }

// A final error: the driver is not working on the volume any more, so
// nothing can exist for this attempt. external-provisioner's checkError
// differs from the other sidecars in one code: RESOURCE_EXHAUSTED is final
// for CreateVolume (the pool is full; nothing was made).
bool FinalError(const absl::Status& st) {
  return csi::IsFinalError(st) || st.code() == absl::StatusCode::kResourceExhausted;
}

}  // namespace

Provisioner::Provisioner(apiserver::Registry& registry, DriverDirectory& drivers, ProvisionerInformers informers,
                         Options options)
    : registry_(registry),
      drivers_(drivers),
      informers_(informers),
      options_(std::move(options)),
      own_monitor_(options_.monitor == nullptr ? std::make_unique<DriverMonitor>(drivers) : nullptr),
      monitor_(options_.monitor != nullptr ? *options_.monitor : *own_monitor_),
      events_(registry, StrCat(options_.driver, "_berth-provisioner")),
      // external-provisioner's --retry-interval-start / --retry-interval-max.
      claim_queue_(WorkQueue::Options{.base_delay = absl::Seconds(1), .max_delay = absl::Minutes(5)}),
      volume_queue_(WorkQueue::Options{.base_delay = absl::Seconds(1), .max_delay = absl::Minutes(5)}),
      source_queue_(WorkQueue::Options{.base_delay = absl::Seconds(1), .max_delay = absl::Minutes(5)}) {}

Provisioner::~Provisioner() { Stop(); }

absl::Status Provisioner::ClearSelectedNode(const PersistentVolumeClaim& claim, const std::string& node) {
  return MutateTyped<PersistentVolumeClaim>(registry_, Claims(), claim.metadata.namespace_, claim.metadata.name,
                                            claim.metadata.uid, apiserver::Subresource::kMain,
                                            [&](PersistentVolumeClaim& obj) {
                                              if (obj.metadata.Annotation(kAnnSelectedNode) != node) return false;
                                              obj.metadata.annotations.erase(kAnnSelectedNode);
                                              return true;
                                            });
}

void Provisioner::RegisterHandlers() {
  // A claim that clones another: when it leaves Pending (or goes), its
  // source may lose cloning-protection.
  auto source_of = [this](const json& o) {
    // Most claims clone nothing and protect nothing: decided on the raw
    // object, on the informer's thread, before any decode.
    const json& spec = Field(o, "spec");
    if (Field(spec, "dataSource").is_null() && Field(spec, "dataSourceRef").is_null() &&
        !HasFinalizer(o, kCloningProtectionFinalizer)) {
      return;
    }
    absl::StatusOr<PersistentVolumeClaim> claim = DecodeAs<PersistentVolumeClaim>(o);
    if (!claim.ok()) return;  // its own sync reports it
    std::optional<DataSourceRef> ds = ClaimDataSource(*claim);
    if (ds && ds->kind == "PersistentVolumeClaim") source_queue_.Add(StrCat(claim->metadata.namespace_, "/", ds->name));
    if (claim->metadata.HasFinalizer(kCloningProtectionFinalizer)) source_queue_.Add(KeyOf(claim->metadata));
  };
  // Claims SyncClaimOnce would leave as they are, told from the raw object,
  // are not queued at all (berth up runs a provisioner per driver, and
  // every claim changes several times on its way to Bound): one not handed
  // to this driver, and one bound to its volume that keeps no finalizer of
  // ours, is not being deleted and clones nothing (no population to
  // release) — the bind itself, later label changes, every resync.
  // A claim taken over (TakeOver) is forgotten here once it shows
  // annotated (by our finalizer's write, or handed to another driver as its
  // class changed) or bound (to a volume the binder found first); a
  // deleted one below.
  auto ours = [this](const json& o) {
    const bool mine = Mine(o);
    const json& spec = Field(o, "spec");
    const bool settled = !Str(spec, {"volumeName"}).empty() && !HasFinalizer(o, kProvisioningFinalizer) &&
                         !Deleting(o) && Field(spec, "dataSource").is_null() && Field(spec, "dataSourceRef").is_null();
    if (settled || !ClaimProvisioner(o).empty()) ForgetTaken(ObjectKey(o), Str(o, {"metadata", "uid"}));
    return mine && !settled;
  };
  informers_.claims.AddHandlers({
      .on_add =
          [this, source_of, ours](const json& o) {
            if (ours(o)) claim_queue_.Add(ObjectKey(o));
            source_of(o);
          },
      .on_update =
          [this, source_of, ours](const json&, const json& o) {
            if (ours(o)) claim_queue_.Add(ObjectKey(o));
            source_of(o);
          },
      .on_delete =
          [this, source_of](const json& o) {
            ForgetTaken(ObjectKey(o), Str(o, {"metadata", "uid"}));
            source_of(o);
          },
  });
  // A node that stops being Ready hands its unprovisioned claims back.
  informers_.nodes.AddHandlers({
      .on_add = nullptr,
      .on_update =
          [this](const json& before, const json& after) {
            const std::string ready = NodeReadyStatus(after);
            if (ready.empty() || ready == "True" || ready == NodeReadyStatus(before)) return;
            informers_.claims.Select([&](const json& c) {
              if (Annotation(c, kAnnSelectedNode) == Name(after) && Str(c, {"spec", "volumeName"}).empty()) {
                claim_queue_.Add(ObjectKey(c));
              }
              return false;
            });
          },
      .on_delete = nullptr,
  });
  informers_.volumes.AddHandlers({
      // Nor are volumes SyncVolume would leave as they are (every PV of
      // either driver changes two or three times on its way to Bound).
      .on_add =
          [this](const json& o) {
            if (VolumeNeedsSync(o)) volume_queue_.Add(Name(o));
          },
      .on_update =
          [this](const json&, const json& o) {
            if (VolumeNeedsSync(o)) volume_queue_.Add(Name(o));
          },
      .on_delete = nullptr,
  });
  if (informers_.attachments != nullptr) {
    // An attachment gone: its volume's storage may be deleted now.
    informers_.attachments->AddHandlers({
        .on_add = nullptr,
        .on_update = nullptr,
        .on_delete =
            [this](const json& va) {
              if (std::string pv = Str(va, {"spec", "source", "persistentVolumeName"}); !pv.empty()) {
                volume_queue_.Add(pv);
              }
            },
    });
  }
}

void Provisioner::Start() {
  const std::string name = StrCat("provisioner ", options_.driver);
  StartWorkers(workers_, options_.workers, claim_queue_, name + ": claim",
               ParkAware([this](const std::string& k) { return SyncClaim(k); }));
  // As many for volumes as for claims (external-provisioner runs as many
  // workers on both queues): deleting many volumes at once is as common as
  // creating them.
  StartWorkers(workers_, options_.workers, volume_queue_, name + ": volume",
               ParkAware([this](const std::string& k) { return SyncVolume(k); }));
  StartWorkers(workers_, 1, source_queue_, name + ": clone source",
               [this](const std::string& k) { return SyncCloneSource(k); });
}

void Provisioner::Stop() {
  claim_queue_.ShutDown();
  volume_queue_.ShutDown();
  source_queue_.ShutDown();
  for (auto& w : workers_) w.join();
  workers_.clear();
  monitor_.Unpark(claim_queue_);
  monitor_.Unpark(volume_queue_);
}

void Provisioner::TakeOver(const std::string& key, const std::string& uid) {
  {
    absl::MutexLock lock(&taken_mu_);
    auto [it, inserted] = taken_.try_emplace(key, uid);
    if (!inserted && it->second == uid) return;  // queued when taken
    it->second = uid;
  }
  claim_queue_.Add(key);
}

size_t Provisioner::TakenOverCount() const {
  absl::MutexLock lock(&taken_mu_);
  return taken_.size();
}

bool Provisioner::Mine(const json& claim) const {
  const std::string handed_to = ClaimProvisioner(claim);
  if (!handed_to.empty()) return handed_to == options_.driver;
  absl::MutexLock lock(&taken_mu_);
  if (taken_.empty()) return false;
  auto it = taken_.find(ObjectKey(claim));
  return it != taken_.end() && it->second == Str(claim, {"metadata", "uid"});
}

void Provisioner::ForgetTaken(const std::string& key, const std::string& uid) {
  absl::MutexLock lock(&taken_mu_);
  if (auto it = taken_.find(key); it != taken_.end() && it->second == uid) taken_.erase(it);
}

absl::StatusOr<std::shared_ptr<const StorageClass>> Provisioner::ClassOf(const PersistentVolumeClaim& claim) const {
  const std::string cls = types::ClaimClass(claim);
  if (cls.empty()) return nullptr;
  std::shared_ptr<const json> sc = informers_.classes.GetSharedByKey(cls);
  if (!sc) return nullptr;
  BERTH_ASSIGN_OR_RETURN(std::shared_ptr<const StorageClass> typed, informers_.classes.Decoded<StorageClass>(sc));
  if (typed->provisioner != options_.driver) return nullptr;
  return typed;
}

absl::StatusOr<::csi::v1::CreateVolumeResponse> Provisioner::CreateVolume(const ::csi::v1::CreateVolumeRequest& request,
                                                                          const std::string& node, WorkQueue& queue,
                                                                          const std::string& key) {
  ::csi::v1::CreateVolumeResponse response;
  absl::Status st = monitor_.Call(options_.driver, node, [&](const csi::DriverClient& csi) {
    auto created = csi.CreateVolume(request, {.timeout = options_.rpc_timeout});
    if (created.ok()) response = std::move(*created);
    return created.status();
  });
  if (IsNotAFailure(st)) monitor_.Park(options_.driver, node, queue, key);
  if (!st.ok()) return st;
  if (options_.on_capacity_change) options_.on_capacity_change(node);
  return response;
}

absl::Status Provisioner::DeleteVolume(const std::string& handle, const std::string& node,
                                       const google::protobuf::Map<std::string, std::string>& secrets, WorkQueue& queue,
                                       const std::string& key) {
  ::csi::v1::DeleteVolumeRequest req;
  req.set_volume_id(handle);
  absl::Status st = monitor_.Call(options_.driver, node, [&](const csi::DriverClient& csi) {
    return csi.DeleteVolume(req, {.timeout = options_.rpc_timeout, .secrets = {secrets.begin(), secrets.end()}});
  });
  if (IsNotAFailure(st)) monitor_.Park(options_.driver, node, queue, key);
  if (st.ok() && options_.on_capacity_change) options_.on_capacity_change(node);
  return st;
}

absl::Status Provisioner::SetFinalizer(const PersistentVolumeClaim& claim, bool present, const std::string& node) {
  const types::ObjectMeta& meta = claim.metadata;
  // The node goes with the finalizer: a retry after a crash, or the clean-up
  // of a claim deleted mid-flight, must ask the same node's driver.
  auto edit = [&](PersistentVolumeClaim& obj) {
    if (present && obj.metadata.Deleting()) return false;
    bool changed = obj.metadata.SetFinalizer(kProvisioningFinalizer, present);
    // A claim taken over from the binder (TakeOver) gets its hand-over
    // annotations here, with the finalizer: stored, it reads as handed to
    // us before anything is asked of the driver.
    if (present && ClaimProvisioner(obj).empty()) {
      obj.metadata.annotations[kAnnStorageProvisioner] = options_.driver;
      obj.metadata.annotations[kAnnBetaStorageProvisioner] = options_.driver;
      changed = true;
    }
    const std::string want_node = present ? node : "";
    if (obj.metadata.Annotation(kAnnProvisioningNode) != want_node) {
      if (want_node.empty()) {
        obj.metadata.annotations.erase(kAnnProvisioningNode);
      } else {
        obj.metadata.annotations[kAnnProvisioningNode] = want_node;
      }
      changed = true;
    }
    return changed;
  };
  if (!present) {
    return MutateTyped<PersistentVolumeClaim>(registry_, Claims(), meta.namespace_, meta.name, meta.uid,
                                              apiserver::Subresource::kMain, edit);
  }
  // CreateVolume may only run under the finalizer, on the claim it names: OK
  // only when the stored claim holds it, FAILED_PRECONDITION for a claim
  // being deleted, replaced or gone. Written from the caller's copy (the
  // informer's, decoded already), conditionally on its resourceVersion; a
  // stale copy, once, from a fresh read; a second conflict is ABORTED (the
  // queue retries).
  auto write_from = [&](const PersistentVolumeClaim& from) -> absl::Status {
    if (from.metadata.uid != meta.uid || from.metadata.Deleting()) {
      return absl::FailedPreconditionError(StrCat("claim ", meta.namespace_, "/", meta.name, " is being deleted"));
    }
    // Handed to another driver meanwhile (its class changed): not ours to
    // provision, whether it came by the annotations or in memory.
    if (const std::string handed_to = ClaimProvisioner(from); !handed_to.empty() && handed_to != options_.driver) {
      return absl::FailedPreconditionError(
          StrCat("claim ", meta.namespace_, "/", meta.name, " was handed to provisioner ", handed_to));
    }
    PersistentVolumeClaim obj = from;
    if (!edit(obj)) return absl::OkStatus();  // holds it already
    absl::Status written =
        registry_.UpdateShared(Claims(), meta.namespace_, meta.name, types::Encode(obj), apiserver::Subresource::kMain)
            .status();
    if (written.code() == absl::StatusCode::kNotFound) {
      return absl::FailedPreconditionError(StrCat("claim ", meta.namespace_, "/", meta.name, " is gone"));
    }
    return written;
  };
  if (absl::Status st = write_from(claim); st.code() != absl::StatusCode::kAborted) return st;
  BERTH_ASSIGN_OR_RETURN(const PersistentVolumeClaim current,
                         GetTyped<PersistentVolumeClaim>(registry_, Claims(), meta.namespace_, meta.name));
  return write_from(current);
}

bool Provisioner::Populated(const PersistentVolumeClaim& claim) const {
  if (options_.populator == nullptr || !claim.spec.data_source_ref) return false;
  std::optional<DataSourceRef> ds = ClaimDataSource(claim);
  return ds && options_.populator->Serves(*ds);
}

PopulationRequest Provisioner::MakePopulationRequest(const PersistentVolumeClaim& claim, const StorageClass& sc,
                                                     const std::string& node) const {
  auto request = claim.spec.resources.requests.find("storage");
  return PopulationRequest{
      .claim = claim,
      .storage_class = sc,
      .driver = options_.driver,
      .node = node,
      .size_bytes = request == claim.spec.resources.requests.end() ? 0 : request->second.Value(),
  };
}

absl::Status Provisioner::RecordPopulatedVolume(const PersistentVolumeClaim& claim, const std::string& volume_id) {
  return MutateTyped<PersistentVolumeClaim>(registry_, Claims(), claim.metadata.namespace_, claim.metadata.name,
                                            claim.metadata.uid, apiserver::Subresource::kMain,
                                            [&](PersistentVolumeClaim& obj) {
                                              if (obj.metadata.Annotation(kAnnPopulatedVolume) == volume_id) {
                                                return false;
                                              }
                                              if (volume_id.empty()) {
                                                obj.metadata.annotations.erase(kAnnPopulatedVolume);
                                              } else {
                                                obj.metadata.annotations[kAnnPopulatedVolume] = volume_id;
                                              }
                                              return true;
                                            });
}

absl::Status Provisioner::ReleasePopulation(const PersistentVolumeClaim& claim, const StorageClass* sc,
                                            const std::string& node) {
  const StorageClass none;
  absl::Status released = options_.populator->Release(MakePopulationRequest(claim, sc ? *sc : none, node));
  if (!released.ok()) {
    events_.Record(IdentityOf(claim), "Warning", "PopulationCleanupFailed",
                   StrCat("removing the volume populated for the claim: ", released.message()));
    return released;
  }
  return RecordPopulatedVolume(claim, "");
}

absl::Status Provisioner::CreatePersistentVolume(const PersistentVolumeClaim& claim, const StorageClass& sc,
                                                 const ::csi::v1::CreateVolumeRequest& request,
                                                 const ::csi::v1::CreateVolumeResponse& response) {
  const auto& vol = response.volume();
  int64_t bytes = vol.capacity_bytes() > 0 ? vol.capacity_bytes() : request.capacity_range().required_bytes();
  PersistentVolume pv;
  pv.api_version = "v1";
  pv.kind = "PersistentVolume";
  pv.metadata.name = request.name();
  pv.metadata.annotations[kAnnProvisionedBy] = options_.driver;
  types::PersistentVolumeSpec& spec = pv.spec;
  spec.capacity["storage"] = api::Quantity::FromBytes(bytes);
  spec.access_modes = claim.spec.access_modes;
  spec.persistent_volume_reclaim_policy = sc.reclaim_policy.value_or("").empty() ? "Delete" : *sc.reclaim_policy;
  spec.storage_class_name = sc.metadata.name;
  spec.volume_mode = types::VolumeModeOf(claim.spec.volume_mode);
  types::ObjectReference& ref = spec.claim_ref.emplace();
  ref.kind = "PersistentVolumeClaim";
  ref.api_version = "v1";
  ref.namespace_ = claim.metadata.namespace_;
  ref.name = claim.metadata.name;
  ref.uid = claim.metadata.uid;
  ref.resource_version = claim.metadata.resource_version;
  spec.mount_options = sc.mount_options;
  types::CSIPersistentVolumeSource& csi = spec.csi.emplace();
  csi.driver = options_.driver;
  csi.volume_handle = vol.volume_id();
  for (const auto& [k, v] : vol.volume_context()) csi.volume_attributes[k] = v;
  auto param = [&](const std::string& key) { return Expand(ReservedParameter(sc, key), claim.metadata); };
  if (types::VolumeModeOf(claim.spec.volume_mode) != "Block") csi.fs_type = param("fstype");
  using SecretRef = std::optional<types::SecretReference> types::CSIPersistentVolumeSource::*;
  static constexpr std::pair<const char*, SecretRef> kSecretRefs[] = {
      {"controller-publish", &types::CSIPersistentVolumeSource::controller_publish_secret_ref},
      {"node-stage", &types::CSIPersistentVolumeSource::node_stage_secret_ref},
      {"node-publish", &types::CSIPersistentVolumeSource::node_publish_secret_ref},
      {"controller-expand", &types::CSIPersistentVolumeSource::controller_expand_secret_ref},
      {"node-expand", &types::CSIPersistentVolumeSource::node_expand_secret_ref}};
  for (const auto& [prefix, field] : kSecretRefs) {
    std::string name = param(StrCat(prefix, "-secret-name"));
    if (name.empty()) continue;
    types::SecretReference& secret = (csi.*field).emplace();
    secret.name = std::move(name);
    secret.namespace_ = param(StrCat(prefix, "-secret-namespace"));
  }
  if (std::string name = param("provisioner-secret-name"); !name.empty()) {
    pv.metadata.annotations["volume.kubernetes.io/provisioner-deletion-secret-name"] = name;
    pv.metadata.annotations["volume.kubernetes.io/provisioner-deletion-secret-namespace"] =
        param("provisioner-secret-namespace");
  }
  if (vol.accessible_topology_size() > 0) {
    types::NodeSelector& required = spec.node_affinity.emplace().required.emplace();
    for (const auto& topo : vol.accessible_topology()) {
      types::NodeSelectorTerm& term = required.node_selector_terms.emplace_back();
      std::map<std::string, std::string> sorted(topo.segments().begin(), topo.segments().end());
      for (const auto& [k, v] : sorted) {
        types::NodeSelectorRequirement& e = term.match_expressions.emplace_back();
        e.key = k;
        e.operator_ = "In";
        e.values = {v};
      }
    }
  }
  if (spec.persistent_volume_reclaim_policy == "Delete") pv.metadata.finalizers = {kProvisionerFinalizer};
  // Created Bound (its claimRef holds the claim's uid): through the API it
  // would start Pending and take the binder a write; a Bound volume that its
  // claim does not name yet is a state Kubernetes' binding passes through.
  pv.status.phase = "Bound";
  pv.status.last_phase_transition_time = NowRfc3339();
  auto created = registry_.CreateSharedWithStatus(K("persistentvolumes"), "", types::Encode(pv));
  if (!created.ok() && created.status().code() != absl::StatusCode::kAlreadyExists) return created.status();
  return absl::OkStatus();
}

absl::Status Provisioner::SyncClaim(const std::string& key) {
  absl::Status st = SyncClaimOnce(key);
  if (IsNotAFailure(st)) {
    // The key is parked; tell the user once what it waits for.
    if (std::shared_ptr<const json> claim = informers_.claims.GetSharedByKey(key)) {
      events_.Record(*claim, "Warning", "ProvisioningFailed", std::string(st.message()));
    }
  }
  return st;
}

absl::Status Provisioner::SyncDeletedClaim(const PersistentVolumeClaim& claim, const std::string& key,
                                           const std::shared_ptr<const StorageClass>& sc, bool pv_exists) {
  if (!claim.metadata.HasFinalizer(kProvisioningFinalizer)) return absl::OkStatus();
  if (pv_exists) return SetFinalizer(claim, false);  // the PV is released and reclaimed as usual
  const std::string pv_name = StrCat("pvc-", claim.metadata.uid);
  const json claim_ref = IdentityOf(claim);  // names the claim in events
  if (!sc) {
    // The request cannot be rebuilt (the class is gone or changed), so
    // whether a volume exists is unknown: keep the claim rather than leak.
    absl::Status blocked = absl::FailedPreconditionError(
        StrCat("the claim was deleted while its volume was being created and StorageClass \"", types::ClaimClass(claim),
               "\" of provisioner ", options_.driver,
               " is gone: recreate the class so the volume can be cleaned up, or remove finalizer ",
               kProvisioningFinalizer, " if no volume ", pv_name, " exists"));
    events_.Record(claim_ref, "Warning", "ProvisioningCleanupBlocked", std::string(blocked.message()));
    return blocked;
  }
  // CreateVolume may have succeeded before we lost track: ask again
  // (idempotent by name, on the same node) and delete what exists.
  const std::string node = NodeForClaim(claim);
  const bool populated = Populated(claim);
  if (populated && claim.metadata.Annotation(kAnnPopulatedVolume).empty()) {
    // The populated source is recorded before the driver is asked for the
    // claim's volume: nothing was asked, only what population left goes.
    BERTH_RETURN_IF_ERROR(ReleasePopulation(claim, &*sc, node));
    return SetFinalizer(claim, false);
  }
  auto req = BuildRequest(claim, *sc, node);
  if (!req.ok() && IsNotAFailure(req.status())) {
    monitor_.Park(options_.driver, node, claim_queue_, key);
    return req.status();
  }
  if (!req.ok()) {
    events_.Record(claim_ref, "Warning", "ProvisioningCleanupBlocked",
                   StrCat("cannot rebuild the request to clean up volume ", pv_name, ": ", req.status().message()));
    return req.status();  // e.g. a secret is missing: retried, the finalizer stays
  }
  auto resp = CreateVolume(*req, node, claim_queue_, key);
  if (resp.ok()) {
    BERTH_RETURN_IF_ERROR(DeleteVolume(resp->volume().volume_id(), node, req->secrets(), claim_queue_, key));
    events_.Record(claim_ref, "Normal", "ProvisioningCancelled",
                   StrCat("the claim was deleted while volume ", pv_name, " was being created; deleted it"));
  } else if (!FinalError(resp.status())) {
    return resp.status();  // outcome unknown (or the driver is down): keep the finalizer
  }
  if (populated) BERTH_RETURN_IF_ERROR(ReleasePopulation(claim, &*sc, node));
  return SetFinalizer(claim, false);
}

absl::Status Provisioner::SyncClaimOnce(const std::string& key) {
  std::shared_ptr<const json> claim_json = informers_.claims.GetSharedByKey(key);
  if (!claim_json) return absl::OkStatus();  // (one taken over is forgotten as it goes: on_delete)
  // Another driver's claim (or nobody's yet): never touched, finalizers
  // included. Told from the raw object, before the decode.
  if (!Mine(*claim_json)) return absl::OkStatus();
  BERTH_ASSIGN_OR_RETURN(const PersistentVolumeClaim claim, DecodeAs<PersistentVolumeClaim>(*claim_json));
  BERTH_ASSIGN_OR_RETURN(const std::shared_ptr<const StorageClass> sc, ClassOf(claim));
  const bool pending_finalizer = claim.metadata.HasFinalizer(kProvisioningFinalizer);
  const std::string pv_name = StrCat("pvc-", claim.metadata.uid);
  // Whether the informer's copy is behind the stored claim (our own last
  // write, say): read from the store once, when first asked.
  std::optional<bool> behind;
  const auto copy_is_behind = [&] {
    if (!behind) {
      auto stored = registry_.GetShared(Claims(), claim.metadata.namespace_, claim.metadata.name);
      behind = !stored.ok() || Str(**stored, {"metadata", "resourceVersion"}) != claim.metadata.resource_version;
    }
    return *behind;
  };
  // The informer may not have seen a PV made moments ago; the store has. Our
  // PV is only ever made under the provisioning finalizer, which goes only
  // as the claim binds (volumeName set) or is deleted: a claim with none of
  // these has no PV of ours, and the store is not asked (a miss there is a
  // database read per new claim) — if the cached claim is the stored one:
  // one older than our own last write (the finalizer, then the PV) says
  // nothing.
  const bool may_have_pv =
      pending_finalizer || claim.metadata.Deleting() || !claim.spec.volume_name.empty() || copy_is_behind();
  const bool pv_exists = informers_.volumes.GetSharedByKey(pv_name) != nullptr ||
                         (may_have_pv && registry_.GetShared(K("persistentvolumes"), "", pv_name).ok());
  if (claim.metadata.Deleting()) return SyncDeletedClaim(claim, key, sc, pv_exists);
  if ((!claim.spec.volume_name.empty() || pv_exists) && Populated(claim) &&
      !claim.metadata.Annotation(kAnnPopulatedVolume).empty()) {
    // The claim's volume exists: the volume it was cloned from has served
    // (a crash came between the PV and the release, or the release failed).
    std::string node;
    const std::string name = claim.spec.volume_name.empty() ? pv_name : claim.spec.volume_name;
    if (auto pv = GetTyped<PersistentVolume>(registry_, K("persistentvolumes"), "", name); pv.ok()) {
      node = VolumeNode(registry_, *pv);
    }
    if (node.empty()) node = NodeForClaim(claim);
    BERTH_RETURN_IF_ERROR(ReleasePopulation(claim, sc ? &*sc : nullptr, node));
  }
  if (!claim.spec.volume_name.empty()) {
    return pending_finalizer ? SetFinalizer(claim, false) : absl::OkStatus();
  }
  // The PV holds the claim: the binder drops the finalizer as it binds.
  if (pv_exists) return absl::OkStatus();
  const json claim_ref = IdentityOf(claim);  // names the claim in events
  if (!sc) {
    // Handed to us, but its class is gone or names another driver now.
    // With a CreateVolume outcome pending the finalizer stays (a deletion
    // then reports what blocks it); otherwise there is nothing to do until
    // the class is back.
    if (!pending_finalizer) return absl::OkStatus();
    absl::Status st = absl::FailedPreconditionError(StrCat("storageclass.storage.k8s.io \"", types::ClaimClass(claim),
                                                           "\" of provisioner ", options_.driver,
                                                           " not found while volume ", pv_name, " was being created"));
    events_.Record(claim_ref, "Warning", "ProvisioningFailed", std::string(st.message()));
    return st;
  }
  const bool wait_for_consumer = sc->WaitForFirstConsumer();
  const std::string selected = claim.metadata.Annotation(kAnnSelectedNode);
  if (wait_for_consumer && selected.empty() && claim.metadata.Annotation(kAnnProvisioningNode).empty()) {
    return absl::OkStatus();
  }
  if (wait_for_consumer && !selected.empty() && !pending_finalizer) {
    // The chosen node is gone (external-provisioner reschedules then too) or
    // not Ready (berth also does: the pod could not start there): let the
    // scheduler choose again. Not while a request may be in flight
    // (pending_finalizer): its outcome decides.
    std::optional<types::Node> node;
    if (std::shared_ptr<const json> cached = informers_.nodes.GetSharedByKey(selected)) {
      BERTH_ASSIGN_OR_RETURN(node, DecodeAs<types::Node>(*cached));
    } else if (auto stored = GetTyped<types::Node>(registry_, K("nodes"), "", selected); stored.ok()) {
      node = *std::move(stored);
    } else if (stored.status().code() != absl::StatusCode::kNotFound) {
      return stored.status();
    }
    const types::NodeCondition* ready_condition = node ? node->Condition("Ready") : nullptr;
    const std::string ready = ready_condition != nullptr ? ready_condition->status : "";
    if (!node || (!ready.empty() && ready != "True")) {
      events_.Record(claim_ref, "Warning", "ProvisioningFailed",
                     node
                         ? StrCat("the selected node \"", selected, "\" is not ready (Ready=", ready, "); rescheduling")
                         : StrCat("the selected node \"", selected, "\" does not exist; rescheduling"));
      return ClearSelectedNode(claim, selected);
    }
  }
  const std::string node = NodeForClaim(claim);
  auto req = BuildRequest(claim, *sc, node);
  if (!req.ok() && IsNotAFailure(req.status())) {
    monitor_.Park(options_.driver, node, claim_queue_, key);  // the driver is down: waits for it
    return req.status();
  }
  const std::string& class_name = sc->metadata.name;
  if (!req.ok()) {
    events_.Record(
        claim_ref, "Warning", "ProvisioningFailed",
        StrCat("failed to provision volume with StorageClass \"", class_name, "\": ", req.status().message()));
    return req.status();
  }
  // A populated claim's source must be there before anything is made.
  const bool populated = Populated(claim);
  if (populated && claim.metadata.Annotation(kAnnPopulatedVolume).empty()) {
    // A retry soon after our own record of a fill (a CreateVolume answer
    // lost after it) may read a copy from before the record: filling again
    // would fill a second volume and lose the first. The stored claim
    // decides; a copy behind it waits for its informer.
    if (copy_is_behind()) {
      return absl::AbortedError(StrCat("claim ", key, " changed since the informer's copy; looked at again"));
    }
    if (absl::Status checked = options_.populator->Check(MakePopulationRequest(claim, *sc, node)); !checked.ok()) {
      events_.Record(claim_ref, "Warning", "ProvisioningFailed",
                     StrCat("failed to provision volume with StorageClass \"", class_name, "\": ", checked.message()));
      return checked;
    }
  }
  // A cloned claim's source may not go while we copy it.
  if (std::optional<DataSourceRef> ds = ClaimDataSource(claim); ds && ds->kind == "PersistentVolumeClaim") {
    BERTH_ASSIGN_OR_RETURN(const PersistentVolumeClaim source,
                           GetTyped<PersistentVolumeClaim>(registry_, Claims(), claim.metadata.namespace_, ds->name));
    absl::Status protected_source =
        EditFinalizer(registry_, Claims(), IdentityOf(source), kCloningProtectionFinalizer, true);
    if (!protected_source.ok()) {
      events_.Record(
          claim_ref, "Warning", "ProvisioningFailed",
          StrCat("failed to provision volume with StorageClass \"", class_name, "\": ", protected_source.message()));
      return protected_source;
    }
  }
  if (!pending_finalizer || claim.metadata.Annotation(kAnnProvisioningNode) != node) {
    BERTH_RETURN_IF_ERROR(SetFinalizer(claim, true, node));
  }
  if (populated && claim.metadata.Annotation(kAnnPopulatedVolume).empty()) {
    // Under the finalizer: a claim deleted while being filled has what was
    // made released (SyncDeletedClaim). A worker waits for the copy.
    const DataSourceRef ds = *ClaimDataSource(claim);
    events_.Record(claim_ref, "Normal", "Populating",
                   StrCat("Filling the volume for claim \"", key, "\" from ", ds.kind, " ", ds.name));
    auto source = options_.populator->Populate(MakePopulationRequest(claim, *sc, node));
    if (source.ok() && !source->has_volume()) {
      source = absl::InternalError("the volume populator returned a content source that is not a volume");
    }
    if (!source.ok()) {
      events_.Record(claim_ref, "Warning", "ProvisioningFailed",
                     StrCat("failed to populate volume with StorageClass \"", class_name, "\" from ", ds.kind, " ",
                            ds.name, ": ", source.status().message()));
      return source.status();
    }
    // Recorded before the driver clones it: a retry, or the clean-up of a
    // claim deleted meanwhile, repeats this very request.
    BERTH_RETURN_IF_ERROR(RecordPopulatedVolume(claim, source->volume().volume_id()));
    *req->mutable_volume_content_source() = *source;
  }
  events_.Record(claim_ref, "Normal", "Provisioning",
                 StrCat("External provisioner is provisioning volume for claim \"", key, "\""));
  auto resp = CreateVolume(*req, node, claim_queue_, key);
  if (!resp.ok()) {
    if (IsNotAFailure(resp.status())) return resp.status();  // waits for the driver (SyncClaim reports it)
    events_.Record(
        claim_ref, "Warning", "ProvisioningFailed",
        StrCat("failed to provision volume with StorageClass \"", class_name, "\": ", resp.status().message()));
    // A final error (RESOURCE_EXHAUSTED as external-provisioner, and any
    // other: nothing exists for this attempt) on a request tied to the
    // node's topology: let the scheduler choose another node.
    if (FinalError(resp.status()) && wait_for_consumer && req->has_accessibility_requirements() && !selected.empty()) {
      absl::Status cleared = ClearSelectedNode(claim, selected);
      if (!cleared.ok()) spdlog::warn("provisioner: clearing selected-node of {}: {}", key, cleared.ToString());
    }
    if (FinalError(resp.status())) {
      // Nothing exists for this attempt: the claim is free to go (or to be
      // tried again elsewhere), and a populated volume is filled afresh
      // (e.g. it was lost: the clone's source is NOT_FOUND).
      if (populated) {
        absl::Status released = ReleasePopulation(claim, &*sc, node);
        if (!released.ok())
          spdlog::warn("provisioner: releasing the populated volume of {}: {}", key, released.ToString());
      }
      absl::Status released = SetFinalizer(claim, false);
      if (!released.ok()) spdlog::warn("provisioner: releasing {}: {}", key, released.ToString());
    }
    return resp.status();
  }
  BERTH_RETURN_IF_ERROR(CreatePersistentVolume(claim, *sc, *req, *resp));
  events_.Record(claim_ref, "Normal", "ProvisioningSucceeded", StrCat("Successfully provisioned volume ", pv_name));
  if (populated) BERTH_RETURN_IF_ERROR(ReleasePopulation(claim, &*sc, node));
  // The finalizer stays until the binder binds the claim to the PV (one
  // write fewer); a claim deleted meanwhile has it dropped above.
  return absl::OkStatus();
}

absl::Status Provisioner::SyncCloneSource(const std::string& key) {
  std::shared_ptr<const json> source_json = informers_.claims.GetSharedByKey(key);
  if (!source_json) return absl::OkStatus();
  BERTH_ASSIGN_OR_RETURN(const PersistentVolumeClaim source, DecodeAs<PersistentVolumeClaim>(*source_json));
  if (!source.metadata.HasFinalizer(kCloningProtectionFinalizer)) return absl::OkStatus();
  // Only the provisioner of the source's driver (the one that protected it,
  // since a clone is of the same driver) looks after it.
  const std::string& pv_name = source.spec.volume_name;
  std::shared_ptr<const json> pv_json = pv_name.empty() ? nullptr : informers_.volumes.GetSharedByKey(pv_name);
  std::string driver = Mine(*source_json) ? options_.driver : ClaimProvisioner(*source_json);
  if (pv_json) {
    BERTH_ASSIGN_OR_RETURN(const PersistentVolume pv, DecodeAs<PersistentVolume>(*pv_json));
    driver = pv.spec.csi ? pv.spec.csi->driver : "";
  }
  if (driver != options_.driver) return absl::OkStatus();
  const std::string& ns = source.metadata.namespace_;
  auto cloning = [&](const json& c) {
    if (Ns(c) != ns) return false;
    absl::StatusOr<PersistentVolumeClaim> claim = DecodeAs<PersistentVolumeClaim>(c);
    // One that does not decode may be a clone: keep the protection.
    return !claim.ok() || ClonesFrom(*claim, ns, source.metadata.name);
  };
  if (!informers_.claims.Select(cloning).empty()) return absl::OkStatus();  // re-queued when they bind or go
  // The cache may not have a clone created a moment ago: confirm with the
  // store before the source loses its protection.
  auto live = registry_.List(Claims(), ns, {});
  if (!live.ok()) return live.status();
  if (std::any_of(live->items.begin(), live->items.end(), cloning)) return absl::OkStatus();
  return EditFinalizer(registry_, Claims(), IdentityOf(source), kCloningProtectionFinalizer, false);
}

}  // namespace berth::controllers
