#include "controllers/volume/pv_binder.h"

#include <algorithm>

#include "absl/cleanup/cleanup.h"
#include "api/quantity.h"
#include "api/selector.h"
#include "api/types/core_node.h"
#include "api/types/storage.h"
#include "client/object.h"
#include "client/typed.h"
#include "client/writes.h"
#include "common/status.h"
#include "common/strings.h"
#include "controllers/node_affinity.h"
#include "spdlog/spdlog.h"

namespace berth::controllers {

using namespace ::berth::client;  // the controllers' own client library
namespace {

using nlohmann::json;
using types::PersistentVolume;
using types::PersistentVolumeClaim;

const api::KindInfo& ClaimsKind() { return *api::FindResource("", "persistentvolumeclaims"); }
const api::KindInfo& VolumesKind() { return *api::FindResource("", "persistentvolumes"); }

// Reads the object fresh, applies `mutate` (returns false: nothing to do)
// and writes it back conditionally; a conflict is returned (the caller's
// work queue retries with backoff). An object that is gone needs nothing;
// with `uid`, neither does one replaced by another of that name.
absl::Status MutateClaim(apiserver::Registry& registry, const std::string& ns, const std::string& name,
                         const std::string& uid, apiserver::Subresource sub,
                         const std::function<bool(PersistentVolumeClaim&)>& mutate) {
  return MutateTyped<PersistentVolumeClaim>(registry, ClaimsKind(), ns, name, uid, sub, mutate);
}
absl::Status MutateVolume(apiserver::Registry& registry, const std::string& name, apiserver::Subresource sub,
                          const std::function<bool(PersistentVolume&)>& mutate) {
  return MutateTyped<PersistentVolume>(registry, VolumesKind(), "", name, "", sub, mutate);
}
// The same from the informer's copy (client/typed.h, MutateFrom): a sync
// that finds nothing to change reads nothing.
absl::Status MutateClaimFrom(apiserver::Registry& registry, const PersistentVolumeClaim& claim,
                             apiserver::Subresource sub, const std::function<bool(PersistentVolumeClaim&)>& mutate) {
  return MutateFrom<PersistentVolumeClaim>(registry, ClaimsKind(), claim, sub, mutate);
}
absl::Status MutateVolumeFrom(apiserver::Registry& registry, const PersistentVolume& volume, apiserver::Subresource sub,
                              const std::function<bool(PersistentVolume&)>& mutate) {
  return MutateFrom<PersistentVolume>(registry, VolumesKind(), volume, sub, mutate);
}

// Sets the claim's status for `phase` (capacity and access modes from the
// volume when it becomes Bound); false when nothing changes.
bool EditClaimStatus(PersistentVolumeClaim& claim, const std::string& phase, const PersistentVolume* volume) {
  types::PersistentVolumeClaimStatus status = claim.status;
  const types::PersistentVolumeClaimStatus& before = claim.status;
  // Capacity only when the claim becomes Bound (as Kubernetes does): later
  // a smaller claim capacity than the volume's means a resize in progress.
  if (volume != nullptr && phase == "Bound" && (before.phase != "Bound" || before.capacity.empty())) {
    status.capacity = volume->spec.capacity;
    status.access_modes = volume->spec.access_modes;
  }
  if (volume == nullptr) {
    // Without a volume the claim has neither (Kubernetes resets both).
    status.capacity.clear();
    status.access_modes.clear();
  }
  status.phase = phase;
  if (status == before) return false;
  claim.status = std::move(status);
  return true;
}

// Whether `pv`'s required nodeAffinity admits a node with `node_labels`.
bool AffinityAdmits(const PersistentVolume& pv, const std::map<std::string, std::string>& node_labels) {
  if (!pv.spec.node_affinity || !pv.spec.node_affinity->required) return true;
  auto host = node_labels.find(kHostnameLabel);
  return NodeSelectorMatchesLabels(*pv.spec.node_affinity->required, node_labels,
                                   host == node_labels.end() ? "" : host->second);
}

// Whether `ref` names `claim`: by uid, or (pre-bound by name) by namespace
// and name with no uid yet.
bool RefersTo(const types::ObjectReference& ref, const PersistentVolumeClaim& claim) {
  if (!ref.uid.empty()) return ref.uid == claim.metadata.uid;
  return ref.name == claim.metadata.name && ref.namespace_ == claim.metadata.namespace_;
}

}  // namespace

PvBinder::PvBinder(apiserver::Registry& registry, BinderInformers informers, Options options)
    : registry_(registry),
      informers_(informers),
      options_(std::move(options)),
      events_(registry, "persistentvolume-controller") {}

PvBinder::~PvBinder() { Stop(); }

namespace {
// Volume indexes: free volumes by class, and volumes by the claim
// ("ns/name") their claimRef names — what a claim's sync looks at, without
// scanning every volume.
constexpr char kFreeByClass[] = "binder/free-by-class";
constexpr char kByClaim[] = "binder/by-claim";
// Claims not bound to a volume yet (nor being deleted), by class: the ones a
// new class, a changed class or a new free volume may serve.
constexpr char kUnboundByClass[] = "binder/unbound-by-class";
}  // namespace

bool VolumeChangeIsOnlyItsBinding(const json& before, const json& after) {
  const std::string was = Str(before, {"status", "phase"});
  // Released or Failed becoming Bound is no binding of Bind's (a retry of
  // SetVolumePhase after a conflict can write it over a claim's deletion):
  // the volume's sync looks again at once.
  if (Str(after, {"status", "phase"}) != "Bound" || was == "Bound" || was == "Released" || was == "Failed") {
    return false;
  }
  const json &md_before = Field(before, "metadata"), &md_after = Field(after, "metadata");
  return Field(before, "spec") == Field(after, "spec") && Field(md_before, "deletionTimestamp").is_null() &&
         Field(md_after, "deletionTimestamp").is_null() &&
         Field(md_before, "finalizers") == Field(md_after, "finalizers");
}

void PvBinder::RegisterHandlers() {
  informers_.volumes.AddIndex(kFreeByClass, [](const json& pv) -> std::vector<std::string> {
    if (!Field(Field(pv, "spec"), "claimRef").is_null()) return {};
    return {VolumeClass(pv)};
  });
  informers_.volumes.AddIndex(kByClaim, [](const json& pv) -> std::vector<std::string> {
    const json& ref = Field(Field(pv, "spec"), "claimRef");
    if (ref.is_null()) return {};
    return {StrCat(Str(ref, {"namespace"}), "/", Str(ref, {"name"}))};
  });
  informers_.claims.AddIndex(kUnboundByClass, [](const json& c) -> std::vector<std::string> {
    if (!Str(c, {"spec", "volumeName"}).empty() || Deleting(c)) return {};
    return {ClaimClass(c)};
  });
  informers_.claims.AddHandlers({
      .on_add = [this](const json& o) { claim_queue_.Add(ObjectKey(o)); },
      .on_update = [this](const json&, const json& o) { claim_queue_.Add(ObjectKey(o)); },
      .on_delete =
          [this](const json& o) {
            // Its volume is released: the one it names, or one that points
            // at it without the claim knowing yet (provisioned meanwhile).
            if (std::string v = Str(o, {"spec", "volumeName"}); !v.empty()) {
              volume_queue_.Add(v);
              return;
            }
            const std::string uid = Uid(o);
            for (const auto& pv : informers_.volumes.ByIndexShared(kByClaim, ObjectKey(o))) {
              if (Str(*pv, {"spec", "claimRef", "uid"}) == uid) volume_queue_.Add(Name(*pv));
            }
          },
  });
  // The claims of class `cls` not bound yet, queued. By index: a scan would
  // parse every claim a compact informer holds.
  auto queue_unbound_of = [this](const std::string& cls) {
    for (const auto& key : informers_.claims.KeysByIndex(kUnboundByClass, cls)) claim_queue_.Add(key);
  };
  // A free volume appearing may satisfy claims waiting for one.
  auto offer = [queue_unbound_of](const json& pv) {
    if (!Field(Field(pv, "spec"), "claimRef").is_null() || Deleting(pv)) return;
    queue_unbound_of(VolumeClass(pv));
  };
  // A class created or changed after its claims (applied in any order, or
  // its allowedTopologies edited): its waiting claims are looked at now,
  // not at the next resync (which offers the same object again: skipped).
  informers_.classes.AddHandlers({
      .on_add = [queue_unbound_of](const json& sc) { queue_unbound_of(Name(sc)); },
      .on_update =
          [queue_unbound_of](const json& before, const json& after) {
            if (Str(before, {"metadata", "resourceVersion"}) != Str(after, {"metadata", "resourceVersion"})) {
              queue_unbound_of(Name(after));
            }
          },
      .on_delete = nullptr,
  });
  informers_.volumes.AddHandlers({
      .on_add =
          [this, offer](const json& o) {
            volume_queue_.Add(Name(o));
            offer(o);
          },
      .on_update =
          [this, offer](const json& before, const json& o) {
            if (VolumeChangeIsOnlyItsBinding(before, o)) return;
            volume_queue_.Add(Name(o));
            if (Str(before, {"status", "phase"}) != "Available" && Str(o, {"status", "phase"}) == "Available") offer(o);
            // A volume that became Available may satisfy a waiting claim;
            // one naming a claim lets that claim finish binding.
            if (std::string c = Str(o, {"spec", "claimRef", "name"}); !c.empty()) {
              claim_queue_.Add(StrCat(Str(o, {"spec", "claimRef", "namespace"}), "/", c));
            }
          },
      .on_delete =
          [this](const json& o) {
            if (std::string c = Str(o, {"spec", "claimRef", "name"}); !c.empty()) {
              claim_queue_.Add(StrCat(Str(o, {"spec", "claimRef", "namespace"}), "/", c));
            }
          },
  });
  // Pods going away may release a deleted claim's protection.
  informers_.pods.AddHandlers({
      .on_add = nullptr,
      .on_update = nullptr,
      .on_delete =
          [this](const json& pod) {
            const json& vols = Field(Field(pod, "spec"), "volumes");
            if (!vols.is_array()) return;
            for (const auto& v : vols) {
              if (std::string c = PodVolumeClaim(pod, v); !c.empty()) {
                claim_queue_.Add(StrCat(Ns(pod), "/", c));
              }
            }
          },
  });
}

void PvBinder::Start() {
  StartWorkers(workers_, options_.workers, claim_queue_, "pv binder: claim",
               [this](const std::string& k) { return SyncClaim(k); });
  StartWorkers(workers_, options_.workers, volume_queue_, "pv binder: volume",
               [this](const std::string& k) { return SyncVolume(k); });
}

void PvBinder::Stop() {
  claim_queue_.ShutDown();
  volume_queue_.ShutDown();
  for (auto& w : workers_) w.join();
  workers_.clear();
}

absl::Status PvBinder::CheckVolumeSatisfyClaim(const PersistentVolume& volume, const PersistentVolumeClaim& claim) {
  // kube-controller-manager's checkVolumeSatisfyClaim, with its messages.
  if (volume.metadata.Deleting()) {
    return absl::FailedPreconditionError(StrCat("the volume is marked for deletion \"", volume.metadata.name, "\""));
  }
  auto request = claim.spec.resources.requests.find("storage");
  auto capacity = volume.spec.capacity.find("storage");
  if (capacity == volume.spec.capacity.end() ||
      (request != claim.spec.resources.requests.end() && capacity->second < request->second)) {
    return absl::FailedPreconditionError("requested PV is too small");
  }
  if (types::VolumeClass(volume) != types::ClaimClass(claim)) {
    return absl::FailedPreconditionError("storageClassName does not match");
  }
  if (types::VolumeModeOf(volume.spec.volume_mode) != types::VolumeModeOf(claim.spec.volume_mode)) {
    return absl::FailedPreconditionError("incompatible volumeMode");
  }
  const std::vector<std::string>& have = volume.spec.access_modes;
  bool modes_ok = !claim.spec.access_modes.empty() && !have.empty();
  for (const auto& m : claim.spec.access_modes) modes_ok = modes_ok && ContainsString(have, m);
  if (!modes_ok) return absl::FailedPreconditionError("incompatible accessMode");
  return absl::OkStatus();
}

absl::Status PvBinder::CheckVolumeSatisfyClaim(const json& volume, const json& claim) {
  BERTH_ASSIGN_OR_RETURN(PersistentVolume pv, DecodeAs<PersistentVolume>(volume));
  BERTH_ASSIGN_OR_RETURN(PersistentVolumeClaim pvc, DecodeAs<PersistentVolumeClaim>(claim));
  return CheckVolumeSatisfyClaim(pv, pvc);
}

const PersistentVolume* PvBinder::FindBestMatch(const PersistentVolumeClaim& claim,
                                                const std::vector<PersistentVolume>& volumes,
                                                const std::map<std::string, std::string>* node_labels) {
  if (!claim.spec.resources.requests.contains("storage")) return nullptr;
  absl::StatusOr<api::LabelSelector> selector = api::LabelSelector();
  if (claim.spec.selector) selector = api::LabelSelector::FromJson(types::EncodeValue(*claim.spec.selector));
  if (!selector.ok()) return nullptr;
  const PersistentVolume* best = nullptr;
  for (const auto& pv : volumes) {
    if (pv.spec.claim_ref) {
      // Pre-bound to this claim: take it if it fits at all.
      const types::ObjectReference& ref = *pv.spec.claim_ref;
      const bool ours = ref.namespace_ == claim.metadata.namespace_ && ref.name == claim.metadata.name &&
                        (ref.uid.empty() || ref.uid == claim.metadata.uid);
      if (!ours) continue;
    } else if (pv.status.phase == "Released" || pv.status.phase == "Failed") {
      continue;
    }
    if (!CheckVolumeSatisfyClaim(pv, claim).ok()) continue;
    if (!selector->empty() && !selector->Matches(pv.metadata.labels)) continue;
    if (node_labels != nullptr && !AffinityAdmits(pv, *node_labels)) continue;
    if (pv.spec.claim_ref) return &pv;  // pre-bound wins
    if (best == nullptr || pv.spec.capacity.at("storage") < best->spec.capacity.at("storage")) best = &pv;
  }
  return best;
}

const json* PvBinder::FindBestMatch(const json& claim, const std::vector<json>& volumes, const json* node_labels) {
  absl::StatusOr<PersistentVolumeClaim> pvc = DecodeAs<PersistentVolumeClaim>(claim);
  if (!pvc.ok()) return nullptr;
  std::vector<PersistentVolume> typed;
  std::vector<size_t> index;  // typed[i] is volumes[index[i]]
  for (size_t i = 0; i < volumes.size(); ++i) {
    if (auto pv = DecodeAs<PersistentVolume>(volumes[i]); pv.ok()) {
      typed.push_back(std::move(*pv));
      index.push_back(i);
    }
  }
  std::map<std::string, std::string> labels;
  if (node_labels != nullptr && node_labels->is_object()) {
    for (const auto& [k, v] : node_labels->items()) {
      if (v.is_string()) labels[k] = v.get<std::string>();
    }
  }
  const PersistentVolume* best = FindBestMatch(*pvc, typed, node_labels != nullptr ? &labels : nullptr);
  return best == nullptr ? nullptr : &volumes[index[best - typed.data()]];
}

std::string PvBinder::ConsumerNode(const PersistentVolumeClaim& claim) const {
  if (const std::string& selected = claim.metadata.Annotation(kAnnSelectedNode); !selected.empty()) return selected;
  std::string node;
  informers_.pods.Select([&](const json& pod) {
    if (Ns(pod) != claim.metadata.namespace_ || Str(pod, {"spec", "nodeName"}).empty() || !node.empty()) return false;
    for (const auto& v : Field(Field(pod, "spec"), "volumes")) {
      if (PodVolumeClaim(pod, v) == claim.metadata.name) node = Str(pod, {"spec", "nodeName"});
    }
    return false;
  });
  return node;
}

std::map<std::string, std::string> PvBinder::NodeLabelsOf(const std::string& node) const {
  std::map<std::string, std::string> labels;
  if (std::shared_ptr<const json> n = informers_.nodes.GetSharedByKey(node)) {
    if (auto typed = DecodeAs<types::Node>(*n); typed.ok()) labels = std::move(typed->metadata.labels);
  }
  labels.emplace(kHostnameLabel, node);
  return labels;
}

absl::Status PvBinder::SyncClaim(const std::string& key) {
  std::shared_ptr<const json> obj = informers_.claims.GetSharedByKey(key);
  if (!obj) return absl::OkStatus();
  BERTH_ASSIGN_OR_RETURN(const PersistentVolumeClaim claim, DecodeAs<PersistentVolumeClaim>(*obj));
  if (claim.metadata.Deleting()) return ProtectClaim(claim);
  if (!claim.metadata.HasFinalizer(kPvcProtection)) {
    BERTH_RETURN_IF_ERROR(
        MutateClaimFrom(registry_, claim, apiserver::Subresource::kMain, [](PersistentVolumeClaim& o) {
          return !o.metadata.Deleting() && o.metadata.SetFinalizer(kPvcProtection, true);
        }));
    return absl::OkStatus();  // the update brings the claim back through the queue
  }
  if (claim.metadata.Annotation(kAnnBindCompleted).empty()) return SyncUnboundClaim(claim);
  return SyncBoundClaim(claim);
}

absl::Status PvBinder::SyncUnboundClaim(const PersistentVolumeClaim& claim) {
  // Built only for an event: most syncs record none.
  const auto subject = [&] { return IdentityOf(claim); };
  const std::string& volume_name = claim.spec.volume_name;
  if (!volume_name.empty()) {
    // Pre-bound by the user (or by us before a crash).
    std::shared_ptr<const json> pv_json = informers_.volumes.GetSharedByKey(volume_name);
    if (!pv_json) {
      events_.Record(subject(), "Warning", "FailedBinding", StrCat("volume \"", volume_name, "\" not found"));
      return SetClaimPhase(claim, "Pending", nullptr);
    }
    BERTH_ASSIGN_OR_RETURN(const PersistentVolume pv, DecodeAs<PersistentVolume>(*pv_json));
    if (pv.spec.claim_ref && !RefersTo(*pv.spec.claim_ref, claim)) {
      events_.Record(subject(), "Warning", "FailedBinding",
                     StrCat("volume \"", volume_name, "\" already bound to a different claim."));
      return SetClaimPhase(claim, "Pending", nullptr);
    }
    if (!pv.spec.claim_ref) {
      // The user asked for a volume nobody claims: it must fit (a volume
      // that names this claim too was paired on purpose, as upstream).
      absl::Status fits = CheckVolumeSatisfyClaim(pv, claim);
      if (fits.ok()) {
        // The node a consumer of the claim is (to be) on must be one the
        // volume can be used from.
        if (std::string node = ConsumerNode(claim); !node.empty() && !AffinityAdmits(pv, NodeLabelsOf(node))) {
          fits = absl::FailedPreconditionError(
              StrCat("its node affinity does not admit node \"", node, "\", where the claim is used"));
        }
      }
      if (!fits.ok()) {
        events_.Record(subject(), "Warning", "VolumeMismatch",
                       StrCat("Cannot bind to requested volume \"", volume_name, "\": ", fits.message()));
        return SetClaimPhase(claim, "Pending", nullptr);
      }
    }
    return Bind(claim, pv);
  }
  // Which node, for WaitForFirstConsumer classes.
  const std::string cls = types::ClaimClass(claim);
  std::shared_ptr<const types::StorageClass> sc;
  if (std::shared_ptr<const json> sc_json = cls.empty() ? nullptr : informers_.classes.GetSharedByKey(cls)) {
    BERTH_ASSIGN_OR_RETURN(sc, informers_.classes.Decoded<types::StorageClass>(sc_json));
  }
  const bool wait_for_consumer = sc && sc->WaitForFirstConsumer();
  const std::string& selected = claim.metadata.Annotation(kAnnSelectedNode);
  if (wait_for_consumer && selected.empty()) {
    // A volume pre-bound to this claim needs no node choice (Kubernetes
    // binds it at once too).
    std::vector<PersistentVolume> prebound =
        DecodeAll(informers_.volumes.ByIndexShared(kByClaim, KeyOf(claim.metadata)));
    if (const PersistentVolume* pv = FindBestMatch(claim, prebound, nullptr); pv != nullptr && pv->spec.claim_ref) {
      return Bind(claim, *pv);
    }
    events_.Record(subject(), "Normal", "WaitForFirstConsumer",
                   "waiting for first consumer to be created before binding");
    return SetClaimPhase(claim, "Pending", nullptr);
  }
  std::optional<std::map<std::string, std::string>> node_labels;
  if (wait_for_consumer) node_labels = NodeLabelsOf(selected);
  // Only volumes that could be this claim's: same class, and free or
  // pointing at this claim (copying every volume per sync is O(n²)).
  std::vector<PersistentVolume> volumes = DecodeAll(informers_.volumes.ByIndexShared(kFreeByClass, cls));
  for (auto& pv : DecodeAll(informers_.volumes.ByIndexShared(kByClaim, KeyOf(claim.metadata)))) {
    if (types::VolumeClass(pv) == cls) volumes.push_back(std::move(pv));
  }
  if (const PersistentVolume* pv = FindBestMatch(claim, volumes, node_labels ? &*node_labels : nullptr)) {
    return Bind(claim, *pv);
  }
  if (sc && !sc->provisioner.empty()) {
    const std::string& provisioner = sc->provisioner;
    // Handed over once: while a provisioner's CreateVolume may be in
    // flight (its finalizer is on the claim) the claim stays that
    // driver's, even if the class now names another.
    const std::string& handed_to = claim.metadata.Annotation(kAnnStorageProvisioner);
    // A provisioner of this process takes a claim not handed to anyone yet
    // without this write (Options::hand_over); a claim being deleted is
    // handed to no one.
    const bool taken = handed_to.empty() && !claim.metadata.Deleting() && options_.hand_over &&
                       options_.hand_over(provisioner, KeyOf(claim.metadata), claim.metadata.uid);
    if (!taken && handed_to != provisioner &&
        (handed_to.empty() || !claim.metadata.HasFinalizer(kProvisioningFinalizer))) {
      BERTH_RETURN_IF_ERROR(
          MutateClaimFrom(registry_, claim, apiserver::Subresource::kMain, [&](PersistentVolumeClaim& o) {
            if (o.metadata.Deleting()) return false;
            o.metadata.annotations[kAnnStorageProvisioner] = provisioner;
            o.metadata.annotations[kAnnBetaStorageProvisioner] = provisioner;
            return true;
          }));
    }
    if (!options_.provisioner_runs_here || !options_.provisioner_runs_here(provisioner)) {
      events_.Record(subject(), "Normal", "ExternalProvisioning",
                     StrCat("Waiting for a volume to be created either by the external provisioner '", provisioner,
                            "' or manually by the system administrator. If volume creation is delayed, please "
                            "verify that the provisioner is running and correctly registered."));
    }
    return SetClaimPhase(claim, "Pending", nullptr);
  }
  if (!cls.empty() && !sc) {
    events_.Record(subject(), "Warning", "ProvisioningFailed",
                   StrCat("storageclass.storage.k8s.io \"", cls, "\" not found"));
  } else {
    events_.Record(subject(), "Normal", "FailedBinding",
                   "no persistent volumes available for this claim and no storage class is set");
  }
  return SetClaimPhase(claim, "Pending", nullptr);
}

absl::Status PvBinder::Bind(const PersistentVolumeClaim& claim, const PersistentVolume& volume) {
  const std::string& pv_name = volume.metadata.name;
  // 1. The volume points at the claim.
  BERTH_RETURN_IF_ERROR(MutateVolumeFrom(registry_, volume, apiserver::Subresource::kMain, [&](PersistentVolume& pv) {
    const std::optional<types::ObjectReference>& ref = pv.spec.claim_ref;
    // Already ours; someone else's (by uid, or pre-bound by name to another
    // claim): the check below sees it.
    if (ref && (!ref->uid.empty() || !RefersTo(*ref, claim))) return false;
    if (!ref) pv.metadata.annotations[kAnnBoundByController] = "yes";
    types::ObjectReference bound;
    bound.kind = "PersistentVolumeClaim";
    bound.namespace_ = claim.metadata.namespace_;
    bound.name = claim.metadata.name;
    bound.uid = claim.metadata.uid;
    bound.api_version = "v1";
    bound.resource_version = claim.metadata.resource_version;
    pv.spec.claim_ref = std::move(bound);
    return true;
  }));
  // The volume as stored now; decoded only when the informer's copy is not
  // it (berth's provisioner creates its volumes pointing at the claim and
  // Bound, so for those nothing was written above and nothing is below).
  BERTH_ASSIGN_OR_RETURN(const std::shared_ptr<const json> stored, registry_.GetShared(VolumesKind(), "", pv_name));
  std::optional<PersistentVolume> decoded;
  if (Str(*stored, {"metadata", "resourceVersion"}) != volume.metadata.resource_version) {
    BERTH_ASSIGN_OR_RETURN(decoded, DecodeAs<PersistentVolume>(*stored));
  }
  const PersistentVolume& fresh_pv = decoded ? *decoded : volume;
  if (!fresh_pv.spec.claim_ref || fresh_pv.spec.claim_ref->uid != claim.metadata.uid) {
    return absl::AbortedError(StrCat("volume ", pv_name, " was bound to another claim meanwhile"));
  }
  // 2. Its status.
  BERTH_RETURN_IF_ERROR(SetVolumePhase(fresh_pv, "Bound"));
  // 3. The claim points at the volume and is Bound, in one write
  // (Kubernetes takes two: the object, then /status). The provisioner's
  // finalizer goes with it: the PV now holds the claim. The phase just
  // written queued neither side (VolumeChangeIsOnlyItsBinding): unless the
  // claim ends up naming the volume, the volume's sync must look again.
  bool named = false;
  absl::Cleanup look_again = [&] {
    if (!named) volume_queue_.Add(pv_name);
  };
  BERTH_RETURN_IF_ERROR(
      MutateClaimFrom(registry_, claim, apiserver::Subresource::kMainAndStatus, [&](PersistentVolumeClaim& pvc) {
        // Never complete a binding to a volume the claim does not name.
        if (!pvc.spec.volume_name.empty() && pvc.spec.volume_name != pv_name) return false;
        bool changed = false;
        if (pvc.spec.volume_name.empty()) {
          pvc.spec.volume_name = pv_name;
          pvc.metadata.annotations[kAnnBoundByController] = "yes";
          changed = true;
        }
        if (pvc.metadata.Annotation(kAnnBindCompleted) != "yes") {
          pvc.metadata.annotations[kAnnBindCompleted] = "yes";
          changed = true;
        }
        if (pvc.metadata.SetFinalizer(kProvisioningFinalizer, false)) {
          pvc.metadata.annotations.erase(kAnnProvisioningNode);
          changed = true;
        }
        return EditClaimStatus(pvc, "Bound", &fresh_pv) || changed;
      }));
  if (auto fresh_claim = registry_.GetShared(ClaimsKind(), claim.metadata.namespace_, claim.metadata.name);
      fresh_claim.ok()) {
    if (std::string other = Str(**fresh_claim, {"spec", "volumeName"}); other != pv_name) {
      return absl::AbortedError(StrCat("claim ", KeyOf(claim.metadata), " names volume ", other, ", not ", pv_name));
    }
    named = Uid(**fresh_claim) == claim.metadata.uid;
  }
  // No event: the claim's phase says it (Kubernetes' PV controller records
  // none on a successful bind either), and it would be one write in ten.
  return absl::OkStatus();
}

absl::Status PvBinder::SyncBoundClaim(const PersistentVolumeClaim& claim) {
  const std::string& volume_name = claim.spec.volume_name;
  std::shared_ptr<const json> pv_json = volume_name.empty() ? nullptr : informers_.volumes.GetSharedByKey(volume_name);
  if (!pv_json && !volume_name.empty()) {
    // Let the cache catch up before declaring loss: read the store.
    auto stored = registry_.GetShared(VolumesKind(), "", volume_name);
    if (stored.ok()) {
      pv_json = *stored;
    } else if (stored.status().code() != absl::StatusCode::kNotFound) {
      return stored.status();
    }
  }
  if (!pv_json) {
    if (claim.status.phase != "Lost") {
      events_.Record(IdentityOf(claim), "Warning", "ClaimLost",
                     "Bound claim has lost its PersistentVolume. Data on the volume is lost!");
    }
    return SetClaimPhase(claim, "Lost", nullptr);
  }
  BERTH_ASSIGN_OR_RETURN(const PersistentVolume pv, DecodeAs<PersistentVolume>(*pv_json));
  if (!pv.spec.claim_ref || pv.spec.claim_ref->uid.empty()) return Bind(claim, pv);
  if (pv.spec.claim_ref->uid != claim.metadata.uid) {
    events_.Record(IdentityOf(claim), "Warning", "ClaimMisbound",
                   "Two claims are bound to the same volume, this one is bound incorrectly");
    return SetClaimPhase(claim, "Lost", nullptr);
  }
  if (pv.status.phase != "Bound") BERTH_RETURN_IF_ERROR(SetVolumePhase(pv, "Bound"));
  return SetClaimPhase(claim, "Bound", &pv);
}

absl::Status PvBinder::SyncVolume(const std::string& name) {
  std::shared_ptr<const json> obj = informers_.volumes.GetSharedByKey(name);
  if (!obj) return absl::OkStatus();
  BERTH_ASSIGN_OR_RETURN(const PersistentVolume pv, DecodeAs<PersistentVolume>(*obj));
  if (pv.metadata.Deleting()) {
    // A deleted volume keeps its phase current (its claim may go meanwhile:
    // Released lets the provisioner reclaim it), and loses pv-protection
    // once it is not Bound.
    BERTH_RETURN_IF_ERROR(ProtectVolume(pv));
  } else if (!pv.metadata.HasFinalizer(kPvProtection)) {
    return MutateVolume(registry_, name, apiserver::Subresource::kMain, [](PersistentVolume& o) {
      return !o.metadata.Deleting() && o.metadata.SetFinalizer(kPvProtection, true);
    });
  }
  const std::string& phase = pv.status.phase;
  if (!pv.spec.claim_ref) {
    return phase == "Available" ? absl::OkStatus() : SetVolumePhase(pv, "Available");
  }
  const types::ObjectReference& ref = *pv.spec.claim_ref;
  if (ref.uid.empty()) {
    // Pre-bound to a claim by name: the claim's sync binds it.
    claim_queue_.Add(StrCat(ref.namespace_, "/", ref.name));
    return phase == "Available" ? absl::OkStatus() : SetVolumePhase(pv, "Available");
  }
  const std::string claim_key = StrCat(ref.namespace_, "/", ref.name);
  std::shared_ptr<const json> claim_json = informers_.claims.GetSharedByKey(claim_key);
  if (!claim_json || Uid(*claim_json) != ref.uid) {
    // The cache may lag: confirm with the store before releasing.
    auto stored = registry_.GetShared(ClaimsKind(), ref.namespace_, ref.name);
    if (stored.ok() && Uid(**stored) == ref.uid) {
      claim_json = *stored;
    } else if (!stored.ok() && stored.status().code() != absl::StatusCode::kNotFound) {
      return stored.status();
    } else {
      return ReleaseOrUnbind(pv);
    }
  }
  // Two fields of the claim decide: read raw, not decoded.
  const std::string claim_volume = Str(*claim_json, {"spec", "volumeName"});
  if (claim_volume.empty()) {
    claim_queue_.Add(claim_key);  // binding in progress
    return absl::OkStatus();
  }
  if (claim_volume == name) {
    return phase == "Bound" ? absl::OkStatus() : SetVolumePhase(pv, "Bound");
  }
  // The claim is bound to another volume. A volume provisioned for it with
  // reclaim Delete is released (the provisioner deletes it: nothing leaks);
  // one we bound is unbound; one the user bound is left alone.
  if (!pv.metadata.Annotation(kAnnProvisionedBy).empty() && pv.spec.persistent_volume_reclaim_policy == "Delete") {
    return phase == "Released" ? absl::OkStatus() : SetVolumePhase(pv, "Released");
  }
  if (pv.metadata.Annotation(kAnnBoundByController) == "yes") {
    return MutateVolume(registry_, name, apiserver::Subresource::kMain, [&](PersistentVolume& o) {
      if (!o.spec.claim_ref || o.spec.claim_ref->uid != ref.uid) return false;
      o.spec.claim_ref.reset();
      o.metadata.annotations.erase(kAnnBoundByController);
      return true;
    });
  }
  return absl::OkStatus();
}

absl::Status PvBinder::ReleaseOrUnbind(const PersistentVolume& pv) {
  const std::string& phase = pv.status.phase;
  const std::string& policy = pv.spec.persistent_volume_reclaim_policy;
  if (policy == "Recycle") {
    if (phase != "Failed") {
      events_.Record(IdentityOf(pv), "Warning", "VolumeFailedRecycle",
                     "Recycle is not supported; use Delete or Retain");
      return SetVolumePhase(pv, "Failed", "Recycle is not supported");
    }
    return absl::OkStatus();
  }
  if (phase != "Released" && phase != "Failed") {
    BERTH_RETURN_IF_ERROR(SetVolumePhase(pv, "Released"));
    if (policy == "Retain") {
      events_.Record(IdentityOf(pv), "Normal", "VolumeReleased",
                     "claim is gone; the volume is retained (reclaim policy Retain)");
    }
  }
  return absl::OkStatus();  // Delete: the provisioner that made the volume deletes it
}

bool PvBinder::ClaimInUse(const PersistentVolumeClaim& claim) const {
  // Kubernetes' rule (pvc-protection controller): any pod scheduled to a
  // node that references the claim uses it, whatever its phase — kubelet
  // may still be tearing its volumes down.
  auto uses = [&](const json& pod) {
    if (Str(pod, {"spec", "nodeName"}).empty()) return false;
    const json& vols = Field(Field(pod, "spec"), "volumes");
    if (!vols.is_array()) return false;
    for (const auto& v : vols) {
      if (PodVolumeClaim(pod, v) == claim.metadata.name) return true;
    }
    return false;
  };
  const std::string& ns = claim.metadata.namespace_;
  if (!informers_.pods.Select([&](const json& pod) { return Ns(pod) == ns && uses(pod); }).empty()) return true;
  // The cache may not have a just-created pod yet: confirm with the store
  // before letting the claim go.
  auto live = registry_.List(*api::FindResource("", "pods"), ns, {});
  if (!live.ok()) return true;  // unknown: keep protecting
  std::vector<json> pods = std::move(live->items);
  return std::any_of(pods.begin(), pods.end(), uses);
}

absl::Status PvBinder::ProtectClaim(const PersistentVolumeClaim& claim) {
  if (!claim.metadata.HasFinalizer(kPvcProtection) || ClaimInUse(claim)) return absl::OkStatus();
  return MutateClaim(registry_, claim.metadata.namespace_, claim.metadata.name, claim.metadata.uid,
                     apiserver::Subresource::kMain,
                     [](PersistentVolumeClaim& o) { return o.metadata.SetFinalizer(kPvcProtection, false); });
}

absl::Status PvBinder::ProtectVolume(const PersistentVolume& pv) {
  if (!pv.metadata.HasFinalizer(kPvProtection) || pv.status.phase == "Bound") return absl::OkStatus();
  return MutateVolume(registry_, pv.metadata.name, apiserver::Subresource::kMain, [](PersistentVolume& o) {
    return o.status.phase != "Bound" && o.metadata.SetFinalizer(kPvProtection, false);
  });
}

absl::Status PvBinder::SetClaimPhase(const PersistentVolumeClaim& claim, const std::string& phase,
                                     const PersistentVolume* volume) {
  return MutateClaimFrom(registry_, claim, apiserver::Subresource::kStatus,
                         [&](PersistentVolumeClaim& o) { return EditClaimStatus(o, phase, volume); });
}

absl::Status PvBinder::SetVolumePhase(const PersistentVolume& volume, const std::string& phase,
                                      const std::string& message) {
  return MutateVolumeFrom(registry_, volume, apiserver::Subresource::kStatus, [&](PersistentVolume& o) {
    if (o.status.phase == phase && o.status.message == message) return false;
    o.status.phase = phase;
    o.status.message = message;
    o.status.last_phase_transition_time = NowRfc3339();
    return true;
  });
}

std::vector<PersistentVolume> PvBinder::DecodeAll(const std::vector<std::shared_ptr<const json>>& volumes) {
  std::vector<PersistentVolume> out;
  out.reserve(volumes.size());
  for (const auto& v : volumes) {
    absl::StatusOr<PersistentVolume> pv = DecodeAs<PersistentVolume>(*v);
    if (pv.ok()) {
      out.push_back(std::move(*pv));
    } else {
      spdlog::warn("pv binder: skipping a volume: {}", pv.status().ToString());
    }
  }
  return out;
}

}  // namespace berth::controllers
