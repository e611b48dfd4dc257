#include "controllers/volume/pv_binder.h"

#include <algorithm>

#include "api/quantity.h"
#include "api/selector.h"
#include "client/object.h"
#include "client/writes.h"
#include "common/status.h"
#include "common/strings.h"
#include "controllers/node_affinity.h"
#include "spdlog/spdlog.h"

namespace berth::controllers {

using namespace ::berth::client;  // the controllers' own client library
namespace {

using nlohmann::json;

std::string VolumeClass(const json& pv) {
  if (const json& c = Field(Field(pv, "spec"), "storageClassName"); c.is_string()) return c.get<std::string>();
  return Annotation(pv, "volume.beta.kubernetes.io/storage-class");
}

std::optional<api::Quantity> Size(const json& q) {
  if (!q.is_string()) return std::nullopt;
  auto parsed = api::Quantity::Parse(q.get<std::string>());
  if (!parsed.ok()) return std::nullopt;
  return *parsed;
}

std::string VolumeMode(const json& o) {
  std::string m = Str(o, {"spec", "volumeMode"});
  return m.empty() ? "Filesystem" : m;
}

const api::KindInfo& ClaimsKind() { return *api::FindResource("", "persistentvolumeclaims"); }
const api::KindInfo& VolumesKind() { return *api::FindResource("", "persistentvolumes"); }

// Reads the object fresh, applies `mutate` (returns false: nothing to do)
// and writes it back conditionally; a conflict is returned (the caller's
// work queue retries with backoff). An object that is gone needs nothing.
absl::Status Mutate(apiserver::Registry& registry, const api::KindInfo& kind, const std::string& ns,
                    const std::string& name, apiserver::Subresource sub, const std::function<bool(json&)>& mutate) {
  auto current = registry.Get(kind, ns, name);
  if (!current.ok())
    return current.status().code() == absl::StatusCode::kNotFound ? absl::OkStatus() : current.status();
  json obj = std::move(*current);
  if (!mutate(obj)) return absl::OkStatus();
  return registry.Update(kind, ns, name, std::move(obj), sub).status();
}

// Sets the claim's status for `phase` (capacity and access modes from the
// volume when it becomes Bound); false when nothing changes.
bool EditClaimStatus(json& claim, const std::string& phase, const json* volume) {
  json status = claim.value("status", json::object());
  const json before = status;
  // Capacity only when the claim becomes Bound (as Kubernetes does): later
  // a smaller claim capacity than the volume's means a resize in progress.
  if (volume != nullptr && phase == "Bound" && (before.value("phase", "") != "Bound" || !before.contains("capacity"))) {
    status["capacity"] = Field(Field(*volume, "spec"), "capacity");
    status["accessModes"] = Field(Field(*volume, "spec"), "accessModes");
  }
  if (volume == nullptr) {
    // Without a volume the claim has neither (Kubernetes resets both).
    status.erase("capacity");
    status.erase("accessModes");
  }
  status["phase"] = phase;
  if (status == before) return false;
  claim["status"] = std::move(status);
  return true;
}

}  // namespace

PvBinder::PvBinder(apiserver::Registry& registry, BinderInformers informers, Options options)
    : registry_(registry), informers_(informers), options_(options), events_(registry, "persistentvolume-controller") {}

PvBinder::~PvBinder() { Stop(); }

namespace {
// Volume indexes: free volumes by class, and volumes by the claim
// ("ns/name") their claimRef names — what a claim's sync looks at, without
// scanning every volume.
constexpr char kFreeByClass[] = "binder/free-by-class";
constexpr char kByClaim[] = "binder/by-claim";
}  // namespace

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
            for (const auto& pv : informers_.volumes.ByIndex(kByClaim, ObjectKey(o))) {
              if (Str(pv, {"spec", "claimRef", "uid"}) == uid) volume_queue_.Add(Name(pv));
            }
          },
  });
  // A free volume appearing may satisfy claims waiting for one.
  auto offer = [this](const json& pv) {
    if (!Field(Field(pv, "spec"), "claimRef").is_null() || Deleting(pv)) return;
    const std::string cls = VolumeClass(pv);
    informers_.claims.Select([&](const json& c) {
      if (Str(c, {"spec", "volumeName"}).empty() && ClaimClass(c) == cls && !Deleting(c)) {
        claim_queue_.Add(ObjectKey(c));
      }
      return false;
    });
  };
  informers_.volumes.AddHandlers({
      .on_add =
          [this, offer](const json& o) {
            volume_queue_.Add(Name(o));
            offer(o);
          },
      .on_update =
          [this, offer](const json& before, const json& o) {
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
  for (int i = 0; i < options_.workers; ++i) {
    workers_.emplace_back(
        [this] { RunWorker(claim_queue_, "pv binder: claim", [this](const std::string& k) { return SyncClaim(k); }); });
    workers_.emplace_back([this] {
      RunWorker(volume_queue_, "pv binder: volume", [this](const std::string& k) { return SyncVolume(k); });
    });
  }
}

void PvBinder::Stop() {
  claim_queue_.ShutDown();
  volume_queue_.ShutDown();
  for (auto& w : workers_) w.join();
  workers_.clear();
}

absl::Status PvBinder::CheckVolumeSatisfyClaim(const json& volume, const json& claim) {
  // kube-controller-manager's checkVolumeSatisfyClaim, with its messages.
  if (Deleting(volume))
    return absl::FailedPreconditionError(StrCat("the volume is marked for deletion \"", Name(volume), "\""));
  auto request = Size(Field(Field(Field(Field(claim, "spec"), "resources"), "requests"), "storage"));
  auto capacity = Size(Field(Field(Field(volume, "spec"), "capacity"), "storage"));
  if (!capacity || (request && *capacity < *request)) return absl::FailedPreconditionError("requested PV is too small");
  if (VolumeClass(volume) != ClaimClass(claim)) return absl::FailedPreconditionError("storageClassName does not match");
  if (VolumeMode(volume) != VolumeMode(claim)) return absl::FailedPreconditionError("incompatible volumeMode");
  const json& want_modes = Field(Field(claim, "spec"), "accessModes");
  const json& have_modes = Field(Field(volume, "spec"), "accessModes");
  bool modes_ok = want_modes.is_array() && have_modes.is_array();
  if (modes_ok) {
    for (const auto& m : want_modes) {
      modes_ok = modes_ok && std::find(have_modes.begin(), have_modes.end(), m) != have_modes.end();
    }
  }
  if (!modes_ok) return absl::FailedPreconditionError("incompatible accessMode");
  return absl::OkStatus();
}

namespace {

// Whether `pv`'s required nodeAffinity admits a node with `node_labels`.
bool AffinityAdmits(const json& pv, const json& node_labels) {
  const json& required = Field(Field(Field(pv, "spec"), "nodeAffinity"), "required");
  if (required.is_null()) return true;
  std::map<std::string, std::string> labels;
  for (const auto& [k, v] : node_labels.items()) {
    if (v.is_string()) labels[k] = v.get<std::string>();
  }
  const std::string host = labels.count(kHostnameLabel) ? labels[kHostnameLabel] : "";
  return NodeSelectorMatchesLabels(required, labels, host);
}

}  // namespace

const json* PvBinder::FindBestMatch(const json& claim, const std::vector<json>& volumes, const json* node_labels) {
  auto request = Size(Field(Field(Field(Field(claim, "spec"), "resources"), "requests"), "storage"));
  if (!request) return nullptr;
  auto selector = api::LabelSelector::FromJson(Field(Field(claim, "spec"), "selector"));
  const json* best = nullptr;
  std::optional<api::Quantity> best_size;
  for (const auto& pv : volumes) {
    const json& ref = Field(Field(pv, "spec"), "claimRef");
    if (!ref.is_null()) {
      // Pre-bound to this claim: take it if it fits at all.
      const bool ours = Str(ref, {"namespace"}) == Ns(claim) && Str(ref, {"name"}) == Name(claim) &&
                        (Str(ref, {"uid"}).empty() || Str(ref, {"uid"}) == Uid(claim));
      if (!ours) continue;
    } else {
      const std::string phase = Str(pv, {"status", "phase"});
      if (phase == "Released" || phase == "Failed") continue;
    }
    if (!CheckVolumeSatisfyClaim(pv, claim).ok()) continue;
    if (selector.ok() && !selector->empty()) {
      std::map<std::string, std::string> labels;
      const json& l = Field(Field(pv, "metadata"), "labels");
      if (l.is_object()) {
        for (const auto& [k, v] : l.items()) labels[k] = v.is_string() ? v.get<std::string>() : "";
      }
      if (!selector->Matches(labels)) continue;
    } else if (!selector.ok()) {
      continue;
    }
    if (node_labels != nullptr && !AffinityAdmits(pv, *node_labels)) continue;
    if (!ref.is_null()) return &pv;  // pre-bound wins
    auto capacity = Size(Field(Field(Field(pv, "spec"), "capacity"), "storage"));
    if (best == nullptr || *capacity < *best_size) {
      best = &pv;
      best_size = capacity;
    }
  }
  return best;
}

std::string PvBinder::ConsumerNode(const json& claim) const {
  if (std::string selected = Annotation(claim, kAnnSelectedNode); !selected.empty()) return selected;
  std::string node;
  informers_.pods.Select([&](const json& pod) {
    if (Ns(pod) != Ns(claim) || Str(pod, {"spec", "nodeName"}).empty() || !node.empty()) return false;
    for (const auto& v : Field(Field(pod, "spec"), "volumes")) {
      if (PodVolumeClaim(pod, v) == Name(claim)) node = Str(pod, {"spec", "nodeName"});
    }
    return false;
  });
  return node;
}

json PvBinder::NodeLabelsOf(const std::string& node) const {
  std::optional<json> n = informers_.nodes.Get("", node);
  json labels = n ? Field(Field(*n, "metadata"), "labels") : json::object();
  if (!labels.is_object()) labels = json::object();
  if (!labels.contains(kHostnameLabel)) labels[kHostnameLabel] = node;
  return labels;
}

absl::Status PvBinder::SyncClaim(const std::string& key) {
  std::shared_ptr<const json> claim = informers_.claims.GetSharedByKey(key);
  if (!claim) return absl::OkStatus();
  if (Deleting(*claim)) return ProtectClaim(*claim);
  if (!HasFinalizer(*claim, kPvcProtection)) {
    BERTH_RETURN_IF_ERROR(
        Mutate(registry_, ClaimsKind(), Ns(*claim), Name(*claim), apiserver::Subresource::kMain, [](json& o) {
          if (Deleting(o) || HasFinalizer(o, kPvcProtection)) return false;
          o["metadata"]["finalizers"].push_back(kPvcProtection);
          return true;
        }));
    return absl::OkStatus();  // the update brings the claim back through the queue
  }
  if (Annotation(*claim, kAnnBindCompleted).empty()) return SyncUnboundClaim(*claim);
  return SyncBoundClaim(*claim);
}

absl::Status PvBinder::SyncUnboundClaim(const json& claim) {
  const std::string volume_name = Str(claim, {"spec", "volumeName"});
  if (!volume_name.empty()) {
    // Pre-bound by the user (or by us before a crash).
    std::optional<json> pv = informers_.volumes.Get("", volume_name);
    if (!pv) {
      events_.Record(claim, "Warning", "FailedBinding", StrCat("volume \"", volume_name, "\" not found"));
      return SetClaimPhase(claim, "Pending", nullptr);
    }
    const json& ref = Field(Field(*pv, "spec"), "claimRef");
    if (!ref.is_null() &&
        !(Str(ref, {"uid"}) == Uid(claim) ||
          (Str(ref, {"uid"}).empty() && Str(ref, {"name"}) == Name(claim) && Str(ref, {"namespace"}) == Ns(claim)))) {
      events_.Record(claim, "Warning", "FailedBinding",
                     StrCat("volume \"", volume_name, "\" already bound to a different claim."));
      return SetClaimPhase(claim, "Pending", nullptr);
    }
    if (ref.is_null()) {
      // The user asked for a volume nobody claims: it must fit (a volume
      // that names this claim too was paired on purpose, as upstream).
      absl::Status fits = CheckVolumeSatisfyClaim(*pv, claim);
      if (fits.ok()) {
        // The node a consumer of the claim is (to be) on must be one the
        // volume can be used from.
        if (std::string node = ConsumerNode(claim); !node.empty() && !AffinityAdmits(*pv, NodeLabelsOf(node))) {
          fits = absl::FailedPreconditionError(
              StrCat("its node affinity does not admit node \"", node, "\", where the claim is used"));
        }
      }
      if (!fits.ok()) {
        events_.Record(claim, "Warning", "VolumeMismatch",
                       StrCat("Cannot bind to requested volume \"", volume_name, "\": ", fits.message()));
        return SetClaimPhase(claim, "Pending", nullptr);
      }
    }
    return Bind(claim, *pv);
  }
  // Which node, for WaitForFirstConsumer classes.
  const std::string cls = ClaimClass(claim);
  std::shared_ptr<const json> sc = cls.empty() ? nullptr : informers_.classes.GetSharedByKey(cls);
  const bool wait_for_consumer = sc && Str(*sc, {"volumeBindingMode"}) == "WaitForFirstConsumer";
  const std::string selected = Annotation(claim, kAnnSelectedNode);
  if (wait_for_consumer && selected.empty()) {
    // A volume pre-bound to this claim needs no node choice (Kubernetes
    // binds it at once too).
    std::vector<json> prebound = informers_.volumes.ByIndex(kByClaim, ObjectKey(claim));
    if (const json* pv = FindBestMatch(claim, prebound, nullptr);
        pv != nullptr && !Field(Field(*pv, "spec"), "claimRef").is_null()) {
      return Bind(claim, *pv);
    }
    events_.Record(claim, "Normal", "WaitForFirstConsumer", "waiting for first consumer to be created before binding");
    return SetClaimPhase(claim, "Pending", nullptr);
  }
  std::optional<json> node_labels;
  if (wait_for_consumer) node_labels = NodeLabelsOf(selected);
  // Only volumes that could be this claim's: same class, and free or
  // pointing at this claim (copying every volume per sync is O(n²)).
  std::vector<json> volumes = informers_.volumes.ByIndex(kFreeByClass, cls);
  for (auto& pv : informers_.volumes.ByIndex(kByClaim, ObjectKey(claim))) {
    if (VolumeClass(pv) == cls) volumes.push_back(std::move(pv));
  }
  if (const json* pv = FindBestMatch(claim, volumes, node_labels ? &*node_labels : nullptr)) {
    return Bind(claim, *pv);
  }
  if (sc && !Str(*sc, {"provisioner"}).empty()) {
    const std::string provisioner = Str(*sc, {"provisioner"});
    // Handed over once: while a provisioner's CreateVolume may be in
    // flight (its finalizer is on the claim) the claim stays that
    // driver's, even if the class now names another.
    const std::string handed_to = Annotation(claim, kAnnStorageProvisioner);
    if (handed_to != provisioner && (handed_to.empty() || !HasFinalizer(claim, kProvisioningFinalizer))) {
      BERTH_RETURN_IF_ERROR(
          Mutate(registry_, ClaimsKind(), Ns(claim), Name(claim), apiserver::Subresource::kMain, [&](json& o) {
            if (Deleting(o)) return false;
            o["metadata"]["annotations"][kAnnStorageProvisioner] = provisioner;
            o["metadata"]["annotations"][kAnnBetaStorageProvisioner] = provisioner;
            return true;
          }));
    }
    events_.Record(claim, "Normal", "ExternalProvisioning",
                   StrCat("Waiting for a volume to be created either by the external provisioner '", provisioner,
                          "' or manually by the system administrator. If volume creation is delayed, please "
                          "verify that the provisioner is running and correctly registered."));
    return SetClaimPhase(claim, "Pending", nullptr);
  }
  if (!cls.empty() && !sc) {
    events_.Record(claim, "Warning", "ProvisioningFailed",
                   StrCat("storageclass.storage.k8s.io \"", cls, "\" not found"));
  } else {
    events_.Record(claim, "Normal", "FailedBinding",
                   "no persistent volumes available for this claim and no storage class is set");
  }
  return SetClaimPhase(claim, "Pending", nullptr);
}

absl::Status PvBinder::Bind(const json& claim, const json& volume) {
  const std::string pv_name = Name(volume);
  // 1. The volume points at the claim.
  BERTH_RETURN_IF_ERROR(Mutate(registry_, VolumesKind(), "", pv_name, apiserver::Subresource::kMain, [&](json& pv) {
    const json& ref = Field(pv["spec"], "claimRef");
    if (!ref.is_null() && Str(ref, {"uid"}) == Uid(claim)) return false;
    // Someone else's (by uid, or pre-bound by name to another claim): the
    // check below sees it.
    if (!ref.is_null() && !Str(ref, {"uid"}).empty()) return false;
    if (!ref.is_null() && (Str(ref, {"name"}) != Name(claim) || Str(ref, {"namespace"}) != Ns(claim))) return false;
    pv["spec"]["claimRef"] = {{"kind", "PersistentVolumeClaim"},
                              {"namespace", Ns(claim)},
                              {"name", Name(claim)},
                              {"uid", Uid(claim)},
                              {"apiVersion", "v1"},
                              {"resourceVersion", Str(claim, {"metadata", "resourceVersion"})}};
    if (ref.is_null()) pv["metadata"]["annotations"][kAnnBoundByController] = "yes";
    return true;
  }));
  auto fresh_pv = registry_.Get(VolumesKind(), "", pv_name);
  if (!fresh_pv.ok()) return fresh_pv.status();
  if (Str(*fresh_pv, {"spec", "claimRef", "uid"}) != Uid(claim)) {
    return absl::AbortedError(StrCat("volume ", pv_name, " was bound to another claim meanwhile"));
  }
  // 2. Its status.
  BERTH_RETURN_IF_ERROR(SetVolumePhase(*fresh_pv, "Bound"));
  // 3. The claim points at the volume and is Bound, in one write
  // (Kubernetes takes two: the object, then /status). The provisioner's
  // finalizer goes with it: the PV now holds the claim.
  BERTH_RETURN_IF_ERROR(
      Mutate(registry_, ClaimsKind(), Ns(claim), Name(claim), apiserver::Subresource::kMainAndStatus, [&](json& pvc) {
        if (Uid(pvc) != Uid(claim)) return false;
        // Never complete a binding to a volume the
        // claim does not name.
        if (const std::string named = Str(pvc, {"spec", "volumeName"}); !named.empty() && named != pv_name) {
          return false;
        }
        bool changed = false;
        if (Str(pvc, {"spec", "volumeName"}).empty()) {
          pvc["spec"]["volumeName"] = pv_name;
          pvc["metadata"]["annotations"][kAnnBoundByController] = "yes";
          changed = true;
        }
        if (Annotation(pvc, kAnnBindCompleted) != "yes") {
          pvc["metadata"]["annotations"][kAnnBindCompleted] = "yes";
          changed = true;
        }
        if (HasFinalizer(pvc, kProvisioningFinalizer)) {
          json& f = pvc["metadata"]["finalizers"];
          f.erase(std::remove(f.begin(), f.end(), json(kProvisioningFinalizer)), f.end());
          pvc["metadata"]["annotations"].erase(kAnnProvisioningNode);
          changed = true;
        }
        return EditClaimStatus(pvc, "Bound", &*fresh_pv) || changed;
      }));
  if (auto fresh_claim = registry_.Get(ClaimsKind(), Ns(claim), Name(claim));
      fresh_claim.ok() && Str(*fresh_claim, {"spec", "volumeName"}) != pv_name) {
    return absl::AbortedError(StrCat("claim ", ObjectKey(claim), " names volume ",
                                     Str(*fresh_claim, {"spec", "volumeName"}), ", not ", pv_name));
  }
  events_.Record(claim, "Normal", "Bound", StrCat("bound to volume \"", pv_name, "\""));
  return absl::OkStatus();
}

absl::Status PvBinder::SyncBoundClaim(const json& claim) {
  const std::string volume_name = Str(claim, {"spec", "volumeName"});
  std::optional<json> pv = volume_name.empty() ? std::nullopt : informers_.volumes.Get("", volume_name);
  if (!pv) {
    // Let the cache catch up before declaring loss: read the store.
    auto stored = volume_name.empty() ? absl::StatusOr<json>(absl::NotFoundError(""))
                                      : registry_.Get(VolumesKind(), "", volume_name);
    if (stored.ok()) {
      pv = *stored;
    } else {
      if (Str(claim, {"status", "phase"}) != "Lost") {
        events_.Record(claim, "Warning", "ClaimLost",
                       "Bound claim has lost its PersistentVolume. Data on the volume is lost!");
      }
      return SetClaimPhase(claim, "Lost", nullptr);
    }
  }
  const std::string ref_uid = Str(*pv, {"spec", "claimRef", "uid"});
  if (Field(Field(*pv, "spec"), "claimRef").is_null() || ref_uid.empty()) return Bind(claim, *pv);
  if (ref_uid != Uid(claim)) {
    events_.Record(claim, "Warning", "ClaimMisbound",
                   "Two claims are bound to the same volume, this one is bound incorrectly");
    return SetClaimPhase(claim, "Lost", nullptr);
  }
  if (Str(*pv, {"status", "phase"}) != "Bound") BERTH_RETURN_IF_ERROR(SetVolumePhase(*pv, "Bound"));
  return SetClaimPhase(claim, "Bound", &*pv);
}

absl::Status PvBinder::SyncVolume(const std::string& name) {
  std::shared_ptr<const json> pv = informers_.volumes.GetSharedByKey(name);
  if (!pv) return absl::OkStatus();
  if (Deleting(*pv)) {
    // A deleted volume keeps its phase current (its claim may go meanwhile:
    // Released lets the provisioner reclaim it), and loses pv-protection
    // once it is not Bound.
    BERTH_RETURN_IF_ERROR(ProtectVolume(*pv));
  } else if (!HasFinalizer(*pv, kPvProtection)) {
    return Mutate(registry_, VolumesKind(), "", name, apiserver::Subresource::kMain, [](json& o) {
      if (Deleting(o) || HasFinalizer(o, kPvProtection)) return false;
      o["metadata"]["finalizers"].push_back(kPvProtection);
      return true;
    });
  }
  const json& ref = Field(Field(*pv, "spec"), "claimRef");
  const std::string phase = Str(*pv, {"status", "phase"});
  if (ref.is_null()) {
    return phase == "Available" ? absl::OkStatus() : SetVolumePhase(*pv, "Available");
  }
  if (Str(ref, {"uid"}).empty()) {
    // Pre-bound to a claim by name: the claim's sync binds it.
    claim_queue_.Add(StrCat(Str(ref, {"namespace"}), "/", Str(ref, {"name"})));
    return phase == "Available" ? absl::OkStatus() : SetVolumePhase(*pv, "Available");
  }
  std::optional<json> claim = informers_.claims.Get(Str(ref, {"namespace"}), Str(ref, {"name"}));
  if (!claim || Uid(*claim) != Str(ref, {"uid"})) {
    // The cache may lag: confirm with the store before releasing.
    auto stored = registry_.Get(ClaimsKind(), Str(ref, {"namespace"}), Str(ref, {"name"}));
    if (stored.ok() && Uid(*stored) == Str(ref, {"uid"})) {
      claim = *stored;
    } else if (!stored.ok() && stored.status().code() != absl::StatusCode::kNotFound) {
      return stored.status();
    } else {
      return ReleaseOrUnbind(*pv);
    }
  }
  const std::string claim_volume = Str(*claim, {"spec", "volumeName"});
  if (claim_volume.empty()) {
    claim_queue_.Add(ObjectKey(*claim));  // binding in progress
    return absl::OkStatus();
  }
  if (claim_volume == name) {
    return phase == "Bound" ? absl::OkStatus() : SetVolumePhase(*pv, "Bound");
  }
  // The claim is bound to another volume. A volume provisioned for it with
  // reclaim Delete is released (the provisioner deletes it: nothing leaks);
  // one we bound is unbound; one the user bound is left alone.
  if (!Annotation(*pv, kAnnProvisionedBy).empty() && Str(*pv, {"spec", "persistentVolumeReclaimPolicy"}) == "Delete") {
    return phase == "Released" ? absl::OkStatus() : SetVolumePhase(*pv, "Released");
  }
  if (Annotation(*pv, kAnnBoundByController) == "yes") {
    return Mutate(registry_, VolumesKind(), "", name, apiserver::Subresource::kMain, [&](json& o) {
      if (Str(o, {"spec", "claimRef", "uid"}) != Uid(*claim)) return false;
      o["spec"].erase("claimRef");
      o["metadata"]["annotations"].erase(kAnnBoundByController);
      return true;
    });
  }
  return absl::OkStatus();
}

absl::Status PvBinder::ReleaseOrUnbind(const json& pv) {
  const std::string phase = Str(pv, {"status", "phase"});
  const std::string policy = Str(pv, {"spec", "persistentVolumeReclaimPolicy"});
  if (policy == "Recycle") {
    if (phase != "Failed") {
      events_.Record(pv, "Warning", "VolumeFailedRecycle", "Recycle is not supported; use Delete or Retain");
      return SetVolumePhase(pv, "Failed", "Recycle is not supported");
    }
    return absl::OkStatus();
  }
  if (phase != "Released" && phase != "Failed") {
    BERTH_RETURN_IF_ERROR(SetVolumePhase(pv, "Released"));
    if (policy == "Retain") {
      events_.Record(pv, "Normal", "VolumeReleased", "claim is gone; the volume is retained (reclaim policy Retain)");
    }
  }
  return absl::OkStatus();  // Delete: the provisioner that made the volume deletes it
}

bool PvBinder::ClaimInUse(const json& claim) const {
  // Kubernetes' rule (pvc-protection controller): any pod scheduled to a
  // node that references the claim uses it, whatever its phase — kubelet
  // may still be tearing its volumes down.
  auto uses = [&](const json& pod) {
    if (Str(pod, {"spec", "nodeName"}).empty()) return false;
    const json& vols = Field(Field(pod, "spec"), "volumes");
    if (!vols.is_array()) return false;
    for (const auto& v : vols) {
      if (PodVolumeClaim(pod, v) == Name(claim)) return true;
    }
    return false;
  };
  const std::string ns = Ns(claim);
  if (!informers_.pods.Select([&](const json& pod) { return Ns(pod) == ns && uses(pod); }).empty()) return true;
  // The cache may not have a just-created pod yet: confirm with the store
  // before letting the claim go.
  auto live = registry_.List(*api::FindResource("", "pods"), ns, {});
  if (!live.ok()) return true;  // unknown: keep protecting
  std::vector<json> pods = std::move(live->items);
  return std::any_of(pods.begin(), pods.end(), uses);
}

absl::Status PvBinder::ProtectClaim(const json& claim) {
  if (!HasFinalizer(claim, kPvcProtection) || ClaimInUse(claim)) return absl::OkStatus();
  return Mutate(registry_, ClaimsKind(), Ns(claim), Name(claim), apiserver::Subresource::kMain, [&](json& o) {
    if (Uid(o) != Uid(claim) || !HasFinalizer(o, kPvcProtection)) return false;
    json& f = o["metadata"]["finalizers"];
    f.erase(std::remove(f.begin(), f.end(), json(kPvcProtection)), f.end());
    return true;
  });
}

absl::Status PvBinder::ProtectVolume(const json& pv) {
  if (!HasFinalizer(pv, kPvProtection) || Str(pv, {"status", "phase"}) == "Bound") return absl::OkStatus();
  return Mutate(registry_, VolumesKind(), "", Name(pv), apiserver::Subresource::kMain, [&](json& o) {
    if (!HasFinalizer(o, kPvProtection) || Str(o, {"status", "phase"}) == "Bound") return false;
    json& f = o["metadata"]["finalizers"];
    f.erase(std::remove(f.begin(), f.end(), json(kPvProtection)), f.end());
    return true;
  });
}

absl::Status PvBinder::SetClaimPhase(const json& claim, const std::string& phase, const json* volume) {
  return Mutate(registry_, ClaimsKind(), Ns(claim), Name(claim), apiserver::Subresource::kStatus, [&](json& o) {
    if (Uid(o) != Uid(claim)) return false;
    return EditClaimStatus(o, phase, volume);
  });
}

absl::Status PvBinder::SetVolumePhase(const json& volume, const std::string& phase, const std::string& message) {
  return Mutate(registry_, VolumesKind(), "", Name(volume), apiserver::Subresource::kStatus, [&](json& o) {
    json status = o.value("status", json::object());
    if (status.value("phase", "") == phase && status.value("message", "") == message) return false;
    status["phase"] = phase;
    if (message.empty()) {
      status.erase("message");
    } else {
      status["message"] = message;
    }
    status["lastPhaseTransitionTime"] = NowRfc3339();
    o["status"] = status;
    return true;
  });
}

}  // namespace berth::controllers
