// The common snapshot controller (upstream's snapshot-controller): the
// VolumeSnapshot side of snapshotting. It binds snapshots to contents,
// creates the content of a dynamic snapshot, mirrors the content's status
// into the snapshot, protects source claims, and handles deletion. The
// content side, which calls the driver, is the Snapshotter (snapshotter.cc).
#include "controllers/snapshot/snapshotter.h"

#include <algorithm>
#include <functional>
#include <utility>

#include "api/quantity.h"
#include "api/types/core.h"
#include "client/capability.h"
#include "client/object.h"
#include "client/secrets.h"
#include "client/typed.h"
#include "client/writes.h"
#include "common/status.h"
#include "common/strings.h"
#include "controllers/node_affinity.h"
#include "controllers/snapshot/snapshot_util.h"
#include "csi/grpc_status.h"
#include "grpcpp/client_context.h"

namespace berth::controllers {

using namespace ::berth::client;  // the controllers' own client library
using namespace snapshot_util;
namespace {

using nlohmann::json;
using types::PersistentVolume;
using types::PersistentVolumeClaim;

constexpr char kApiVersion[] = "snapshot.storage.k8s.io/v1";

const api::KindInfo& CoreKind(std::string_view resource) { return *api::FindResource("", resource); }

// What the event handlers read (before any sync, on JSON).
std::string ClaimSourceOf(const json& s) { return Str(s, {"spec", "source", "persistentVolumeClaimName"}); }
std::string ContentSourceOf(const json& s) { return Str(s, {"spec", "source", "volumeSnapshotContentName"}); }
bool ReadyJson(const json& s) { return Field(Field(s, "status"), "readyToUse") == true; }

std::string ClaimSource(const VolumeSnapshot& s) { return s.spec.source.persistent_volume_claim_name.value_or(""); }
std::string ContentSource(const VolumeSnapshot& s) { return s.spec.source.volume_snapshot_content_name.value_or(""); }
std::string ClassName(const VolumeSnapshot& s) { return s.spec.volume_snapshot_class_name.value_or(""); }
// Upstream's fixed name of a dynamic snapshot's content.
std::string DynamicContentName(const VolumeSnapshot& snapshot) { return StrCat("snapcontent-", snapshot.metadata.uid); }

// Whether the content's volumeSnapshotRef names `snapshot`; an empty ref uid
// (a pre-provisioned content not bound yet) counts only with `allow_unbound`.
bool RefersTo(const VolumeSnapshotContent& content, const VolumeSnapshot& snapshot, bool allow_unbound) {
  const types::ObjectReference& ref = content.spec.volume_snapshot_ref;
  if (ref.name != snapshot.metadata.name || ref.namespace_ != snapshot.metadata.namespace_) return false;
  return ref.uid == snapshot.metadata.uid || (allow_unbound && ref.uid.empty());
}

// The content a snapshot is (or will be) bound to.
std::string ContentNameFor(const VolumeSnapshot& snapshot) {
  if (snapshot.status) {
    if (std::string bound = snapshot.status->bound_volume_snapshot_content_name.value_or(""); !bound.empty()) {
      return bound;
    }
  }
  if (std::string pre = ContentSource(snapshot); !pre.empty()) return pre;
  return DynamicContentName(snapshot);
}

// Whether a claim restores from the snapshot `name` (its dataSource or
// dataSourceRef).
bool RestoresFrom(const PersistentVolumeClaim& claim, const std::string& name) {
  const auto& ref = claim.spec.data_source_ref;
  const auto& local = claim.spec.data_source;
  return (ref && ref->kind == "VolumeSnapshot" && ref->api_group.value_or("") == kGroup && ref->name == name) ||
         (local && local->kind == "VolumeSnapshot" && local->api_group.value_or("") == kGroup && local->name == name);
}

}  // namespace

SnapshotController::SnapshotController(apiserver::Registry& registry, SnapshotInformers informers, Options options)
    : registry_(registry), informers_(informers), options_(options), events_(registry, "snapshot-controller") {}

SnapshotController::~SnapshotController() { Stop(); }

void SnapshotController::RegisterHandlers() {
  informers_.snapshots.AddHandlers({
      .on_add = [this](const json& o) { snapshot_queue_.Add(ObjectKey(o)); },
      .on_update = [this](const json&, const json& o) { snapshot_queue_.Add(ObjectKey(o)); },
      .on_delete =
          [this](const json& o) {
            if (std::string claim = ClaimSourceOf(o); !claim.empty()) claim_queue_.Add(StrCat(Ns(o), "/", claim));
          },
  });
  // A content change concerns the snapshot it names, and (when it appears
  // or goes) pre-provisioned snapshots that name it — maybe wrongly.
  auto content_changed = [this](const json& o, bool appeared_or_gone) {
    const json& ref = Field(Field(o, "spec"), "volumeSnapshotRef");
    if (!Str(ref, {"name"}).empty()) snapshot_queue_.Add(StrCat(Str(ref, {"namespace"}), "/", Str(ref, {"name"})));
    if (!appeared_or_gone) return;
    const std::string name = Name(o);
    for (const auto& s : informers_.snapshots.Select([&](const json& s) { return ContentSourceOf(s) == name; })) {
      snapshot_queue_.Add(ObjectKey(s));
    }
  };
  informers_.contents.AddHandlers({
      .on_add =
          [this, content_changed](const json& o) {
            content_queue_.Add(Name(o));
            content_changed(o, true);
          },
      .on_update =
          [this, content_changed](const json&, const json& o) {
            content_queue_.Add(Name(o));
            content_changed(o, false);
          },
      .on_delete = [content_changed](const json& o) { content_changed(o, true); },
  });
  // Claims: a source claim becoming Bound lets its snapshots proceed; a
  // restored claim leaving Pending lets its source snapshot be deleted; a
  // claim with our finalizer is checked for release.
  auto claim_changed = [this](const json& o, bool changed) {
    if (HasFinalizer(o, kPvcAsSourceFinalizer)) claim_queue_.Add(ObjectKey(o));
    if (!changed) return;
    const std::string ns = Ns(o), name = Name(o);
    for (const auto& s : informers_.snapshots.Select(
             [&](const json& s) { return Ns(s) == ns && ClaimSourceOf(s) == name && !ReadyJson(s); })) {
      snapshot_queue_.Add(ObjectKey(s));
    }
    for (const char* field : {"dataSource", "dataSourceRef"}) {
      const json& ds = Field(Field(o, "spec"), field);
      if (Str(ds, {"kind"}) == "VolumeSnapshot" && !Str(ds, {"name"}).empty()) {
        snapshot_queue_.Add(StrCat(ns, "/", Str(ds, {"name"})));
      }
    }
  };
  informers_.claims.AddHandlers({
      .on_add = [claim_changed](const json& o) { claim_changed(o, true); },
      // A resync repeats the same version: compared by resourceVersion, not
      // by walking both claims.
      .on_update =
          [claim_changed](const json& before, const json& after) {
            claim_changed(after,
                          Str(before, {"metadata", "resourceVersion"}) != Str(after, {"metadata", "resourceVersion"}));
          },
      .on_delete = nullptr,
  });
}

void SnapshotController::Start() {
  StartWorkers(workers_, options_.workers, snapshot_queue_, "snapshot-controller: snapshot",
               [this](const std::string& k) { return SyncSnapshot(k); });
  StartWorkers(workers_, 1, content_queue_, "snapshot-controller: content",
               [this](const std::string& k) { return SyncContent(k); });
  StartWorkers(workers_, 1, claim_queue_, "snapshot-controller: claim",
               [this](const std::string& k) { return SyncClaim(k); });
}

void SnapshotController::Stop() {
  snapshot_queue_.ShutDown();
  content_queue_.ShutDown();
  claim_queue_.ShutDown();
  for (auto& w : workers_) w.join();
  workers_.clear();
}

absl::StatusOr<std::optional<VolumeSnapshotContent>> SnapshotController::GetContent(const std::string& name) {
  std::shared_ptr<const json> content = informers_.contents.GetSharedByKey(name);
  if (!content) {
    auto got = registry_.GetShared(ContentsKind(), "", name);
    if (!got.ok()) return std::nullopt;
    content = *std::move(got);
  }
  BERTH_ASSIGN_OR_RETURN(VolumeSnapshotContent typed, DecodeAs<VolumeSnapshotContent>(*content));
  return typed;
}

absl::Status SnapshotController::Fail(const VolumeSnapshot& snapshot, const std::string& reason,
                                      const std::string& message) {
  bool changed = false;
  absl::Status st = MutateTyped<VolumeSnapshot>(
      registry_, SnapshotsKind(), snapshot.metadata.namespace_, snapshot.metadata.name, snapshot.metadata.uid,
      apiserver::Subresource::kStatus, [&](VolumeSnapshot& s) { return changed = SetError(s.status, message); });
  if (changed) events_.Record(IdentityOf(snapshot), "Warning", reason, message);
  if (!st.ok()) return st;
  return absl::FailedPreconditionError(message);
}

absl::Status SnapshotController::SyncSnapshot(const std::string& key) {
  std::shared_ptr<const json> cached = informers_.snapshots.GetSharedByKey(key);
  if (!cached) return absl::OkStatus();
  BERTH_ASSIGN_OR_RETURN(const VolumeSnapshot snapshot, DecodeAs<VolumeSnapshot>(*cached));
  const types::ObjectMeta& meta = snapshot.metadata;
  // Whatever happens to a snapshot may release its source claim.
  if (std::string claim = ClaimSource(snapshot); !claim.empty()) claim_queue_.Add(StrCat(meta.namespace_, "/", claim));
  if (meta.Deleting()) return ProcessDeletion(snapshot);
  if (ClaimSource(snapshot).empty() == ContentSource(snapshot).empty()) {
    return Fail(snapshot, "SnapshotValidationError",
                "Exactly one of PersistentVolumeClaimName and VolumeSnapshotContentName should be specified");
  }
  // as-source protection first, before a content can exist: a snapshot
  // deleted at any later moment is held until ProcessDeletion has seen it
  // (and its content).
  if (!meta.HasFinalizer(kSnapshotAsSourceFinalizer)) {
    BERTH_ASSIGN_OR_RETURN(std::optional<VolumeSnapshot> fresh,
                           Edit<VolumeSnapshot>(registry_, SnapshotsKind(), meta.namespace_, meta.name, meta.uid,
                                                apiserver::Subresource::kMain, [](VolumeSnapshot& s) {
                                                  return !s.metadata.Deleting() &&
                                                         s.metadata.SetFinalizer(kSnapshotAsSourceFinalizer, true);
                                                }));
    // Deleted meanwhile, before it could be protected: nothing may be made
    // for it (its own update brings it back if anything is left to do).
    if (!fresh || !fresh->metadata.HasFinalizer(kSnapshotAsSourceFinalizer)) return absl::OkStatus();
  }
  BERTH_ASSIGN_OR_RETURN(VolumeSnapshotContent content, BoundContent(snapshot));
  BERTH_RETURN_IF_ERROR(EnsureFinalizers(snapshot, content));
  return UpdateStatus(snapshot, content);
}

absl::StatusOr<VolumeSnapshotContent> SnapshotController::BoundContent(const VolumeSnapshot& snapshot) {
  const std::string bound = snapshot.status ? snapshot.status->bound_volume_snapshot_content_name.value_or("") : "";
  if (const std::string wanted = ContentSource(snapshot); !wanted.empty()) {
    // Pre-provisioned: the content must name this snapshot back.
    BERTH_ASSIGN_OR_RETURN(std::optional<VolumeSnapshotContent> content, GetContent(wanted));
    if (!content) {
      return Fail(snapshot, "SnapshotContentMissing", StrCat("VolumeSnapshotContent ", wanted, " is missing"));
    }
    if (content->spec.source.snapshot_handle.value_or("").empty()) {
      return Fail(snapshot, "SnapshotContentMismatch",
                  StrCat("VolumeSnapshotContent ", wanted,
                         " is dynamically provisioned while expecting a pre-provisioned one"));
    }
    if (!RefersTo(*content, snapshot, /*allow_unbound=*/true)) {
      return Fail(snapshot, "SnapshotContentMisbound",
                  StrCat("VolumeSnapshotContent ", wanted, " is bound to a different snapshot"));
    }
    const std::string cls = ClassName(snapshot);
    if (!RefersTo(*content, snapshot, false) ||
        (!cls.empty() && content->spec.volume_snapshot_class_name.value_or("").empty())) {
      // Bind the content's side: its ref gets our uid (and our class), and
      // from then on its protection.
      BERTH_ASSIGN_OR_RETURN(
          std::optional<VolumeSnapshotContent> edited,
          Edit<VolumeSnapshotContent>(registry_, ContentsKind(), "", wanted, content->metadata.uid,
                                      apiserver::Subresource::kMain, [&](VolumeSnapshotContent& c) {
                                        if (!RefersTo(c, snapshot, true)) return false;
                                        bool changed = false;
                                        if (c.spec.volume_snapshot_ref.uid.empty()) {
                                          c.spec.volume_snapshot_ref.uid = snapshot.metadata.uid;
                                          if (!c.metadata.Deleting()) {
                                            c.metadata.SetFinalizer(kContentBoundFinalizer, true);
                                          }
                                          changed = true;
                                        }
                                        if (!cls.empty() && c.spec.volume_snapshot_class_name.value_or("").empty()) {
                                          c.spec.volume_snapshot_class_name = cls;
                                          changed = true;
                                        }
                                        return changed;
                                      }));
      if (!edited || !RefersTo(*edited, snapshot, false)) {
        return absl::AbortedError(StrCat("VolumeSnapshotContent ", wanted, " changed while binding"));
      }
      content = std::move(edited);
    }
    return *std::move(content);
  }
  // Dynamic.
  const std::string name = bound.empty() ? DynamicContentName(snapshot) : bound;
  BERTH_ASSIGN_OR_RETURN(std::optional<VolumeSnapshotContent> content, GetContent(name));
  if (content) {
    if (content->spec.source.volume_handle.value_or("").empty()) {
      return Fail(
          snapshot, "SnapshotContentMismatch",
          StrCat("VolumeSnapshotContent ", name, " is pre-provisioned while expecting a dynamically provisioned one"));
    }
    if (!RefersTo(*content, snapshot, false)) {
      return Fail(snapshot, "SnapshotContentMisbound",
                  StrCat("VolumeSnapshotContent ", name, " is bound to a different snapshot"));
    }
    return *std::move(content);
  }
  // A snapshot that was bound never gets a new content: the old one (and
  // maybe its storage snapshot) is what went missing.
  if (!bound.empty()) {
    return Fail(snapshot, "SnapshotContentMissing", StrCat("VolumeSnapshotContent ", bound, " is missing"));
  }
  return CreateContent(snapshot);
}

absl::StatusOr<VolumeSnapshotClass> SnapshotController::SnapshotClass(const VolumeSnapshot& snapshot,
                                                                      const std::string& driver) {
  if (std::string name = ClassName(snapshot); !name.empty()) {
    BERTH_ASSIGN_OR_RETURN(std::optional<VolumeSnapshotClass> cls, GetClass(registry_, informers_.classes, name));
    if (!cls) return absl::NotFoundError(StrCat("volumesnapshotclass ", name, " not found"));
    return *std::move(cls);
  }
  std::vector<VolumeSnapshotClass> defaults;
  for (const auto& c : informers_.classes.List()) {
    BERTH_ASSIGN_OR_RETURN(VolumeSnapshotClass cls, DecodeAs<VolumeSnapshotClass>(c));
    if (cls.metadata.Annotation(kAnnDefaultSnapshotClass) == "true" && cls.driver == driver) {
      defaults.push_back(std::move(cls));
    }
  }
  if (defaults.empty()) {
    return absl::FailedPreconditionError(StrCat("cannot find default snapshot class for driver ", driver));
  }
  if (defaults.size() > 1) {
    return absl::FailedPreconditionError(
        StrCat(defaults.size(), " default snapshot classes were found for driver ", driver));
  }
  // Record the choice, as upstream does: the class is then fixed (immutable).
  const std::string& chosen = defaults[0].metadata.name;
  const types::ObjectMeta& meta = snapshot.metadata;
  BERTH_ASSIGN_OR_RETURN(std::optional<VolumeSnapshot> fresh,
                         Edit<VolumeSnapshot>(registry_, SnapshotsKind(), meta.namespace_, meta.name, meta.uid,
                                              apiserver::Subresource::kMain, [&](VolumeSnapshot& s) {
                                                if (!ClassName(s).empty()) return false;
                                                s.spec.volume_snapshot_class_name = chosen;
                                                return true;
                                              }));
  if (!fresh || ClassName(*fresh) != chosen) {
    return absl::AbortedError(StrCat("volumesnapshot ", KeyOf(meta), " changed while choosing its class"));
  }
  return defaults[0];
}

absl::StatusOr<VolumeSnapshotContent> SnapshotController::CreateContent(const VolumeSnapshot& snapshot) {
  const std::string ns = snapshot.metadata.namespace_, claim_name = ClaimSource(snapshot);
  auto fail = [&](const absl::Status& st) -> absl::Status {
    if (st.code() == absl::StatusCode::kAborted) return st;  // a write conflict: just retry
    return Fail(snapshot, "SnapshotContentCreationFailed",
                StrCat("Failed to create snapshot content with error ", st.message()));
  };
  auto claim = GetTyped<PersistentVolumeClaim>(registry_, CoreKind("persistentvolumeclaims"), ns, claim_name);
  if (!claim.ok()) return fail(claim.status());
  if (claim->status.phase != "Bound" || claim->spec.volume_name.empty()) {
    return fail(absl::FailedPreconditionError(
        StrCat("the PVC ", claim_name, " is not yet bound to a PV, will not attempt to take a snapshot")));
  }
  const std::string pv_name = claim->spec.volume_name;
  auto pv = GetTyped<PersistentVolume>(registry_, CoreKind("persistentvolumes"), "", pv_name);
  if (!pv.ok()) return fail(pv.status());
  const types::ObjectReference ref = pv->spec.claim_ref.value_or(types::ObjectReference{});
  if (ref.name != claim_name || ref.namespace_ != ns || (!ref.uid.empty() && ref.uid != claim->metadata.uid)) {
    return fail(absl::FailedPreconditionError(
        StrCat("the binding between PV ", pv_name, " and PVC ", claim_name, " is broken")));
  }
  const std::string handle = pv->spec.csi ? pv->spec.csi->volume_handle : "";
  const std::string driver = pv->spec.csi ? pv->spec.csi->driver : "";
  if (handle.empty() || driver.empty()) {
    return fail(absl::FailedPreconditionError(StrCat("cannot find CSI PersistentVolumeSource for volume ", pv_name)));
  }
  auto cls = SnapshotClass(snapshot, driver);
  if (!cls.ok()) return fail(cls.status());
  if (cls->driver != driver) {
    return fail(absl::FailedPreconditionError(StrCat("volumesnapshotclass ", cls->metadata.name, " is for driver ",
                                                     cls->driver, " but volume ", pv_name, " is served by ", driver)));
  }
  const std::string content_name = DynamicContentName(snapshot);
  auto secret = ClassSecret(*cls, "snapshotter", content_name, &snapshot);
  if (!secret.ok()) return fail(secret.status());
  // Protect the source before anything can be cut from it; decided on the
  // stored claim under its lock (see ClaimLock).
  absl::MutexLock claim_lock(&ClaimLock(ns, claim_name));
  const std::string checked_uid = claim->metadata.uid;
  claim = GetTyped<PersistentVolumeClaim>(registry_, CoreKind("persistentvolumeclaims"), ns, claim_name);
  if (!claim.ok()) return fail(claim.status());
  if (claim->metadata.uid != checked_uid) {
    return absl::AbortedError(StrCat("claim ", ns, "/", claim_name, " was replaced while its snapshot was prepared"));
  }
  if (!claim->metadata.HasFinalizer(kPvcAsSourceFinalizer)) {
    if (claim->metadata.Deleting()) {
      return fail(absl::FailedPreconditionError(
          StrCat("cannot add finalizer on claim ", claim_name, " because it is being deleted")));
    }
    BERTH_ASSIGN_OR_RETURN(std::optional<PersistentVolumeClaim> protected_claim,
                           Edit<PersistentVolumeClaim>(
                               registry_, CoreKind("persistentvolumeclaims"), ns, claim_name, claim->metadata.uid,
                               apiserver::Subresource::kMain, [](PersistentVolumeClaim& c) {
                                 return !c.metadata.Deleting() && c.metadata.SetFinalizer(kPvcAsSourceFinalizer, true);
                               }));
    if (!protected_claim || !protected_claim->metadata.HasFinalizer(kPvcAsSourceFinalizer)) {
      return fail(absl::FailedPreconditionError(
          StrCat("cannot add finalizer on claim ", claim_name, " because it is being deleted")));
    }
  }
  VolumeSnapshotContent content;
  content.api_version = kApiVersion;
  content.kind = "VolumeSnapshotContent";
  content.metadata.name = content_name;
  // Created with its finalizer: there is no moment without protection.
  content.metadata.finalizers = {kContentBoundFinalizer};
  types::ObjectReference& snapshot_ref = content.spec.volume_snapshot_ref;
  snapshot_ref.kind = "VolumeSnapshot";
  snapshot_ref.api_version = kApiVersion;
  snapshot_ref.namespace_ = ns;
  snapshot_ref.name = snapshot.metadata.name;
  snapshot_ref.uid = snapshot.metadata.uid;
  content.spec.source.volume_handle = handle;
  content.spec.volume_snapshot_class_name = cls->metadata.name;
  content.spec.deletion_policy = cls->deletion_policy.empty() ? "Delete" : cls->deletion_policy;
  content.spec.driver = driver;
  content.spec.source_volume_mode = types::VolumeModeOf(pv->spec.volume_mode) == "Block" ? "Block" : "Filesystem";
  if (!secret->name.empty()) {
    content.metadata.annotations[kAnnDeletionSecretName] = secret->name;
    content.metadata.annotations[kAnnDeletionSecretNamespace] = secret->ns;
  }
  if (std::string node = VolumeNode(registry_, *pv); !node.empty())
    content.metadata.annotations[kAnnSnapshotNode] = node;
  auto created = registry_.Create(ContentsKind(), "", types::Encode(content));
  if (!created.ok()) {
    if (created.status().code() != absl::StatusCode::kAlreadyExists) return fail(created.status());
    // Made by an earlier attempt whose answer we lost.
    BERTH_ASSIGN_OR_RETURN(VolumeSnapshotContent existing,
                           GetTyped<VolumeSnapshotContent>(registry_, ContentsKind(), "", content_name));
    if (!RefersTo(existing, snapshot, false)) {
      return Fail(snapshot, "SnapshotContentMisbound",
                  StrCat("VolumeSnapshotContent ", content_name, " is bound to a different snapshot"));
    }
    return existing;
  }
  events_.Record(IdentityOf(snapshot), "Normal", "CreatingSnapshot",
                 StrCat("Waiting for a snapshot ", KeyOf(snapshot.metadata), " to be created by the CSI driver."));
  return DecodeAs<VolumeSnapshotContent>(*created);
}

absl::Status SnapshotController::EnsureFinalizers(const VolumeSnapshot& snapshot,
                                                  const VolumeSnapshotContent& content) {
  const bool bound = content.spec.deletion_policy == "Delete";
  const types::ObjectMeta& meta = snapshot.metadata;
  if (meta.HasFinalizer(kSnapshotAsSourceFinalizer) && (!bound || meta.HasFinalizer(kSnapshotBoundFinalizer))) {
    return absl::OkStatus();
  }
  return MutateTyped<VolumeSnapshot>(registry_, SnapshotsKind(), meta.namespace_, meta.name, meta.uid,
                                     apiserver::Subresource::kMain, [&](VolumeSnapshot& s) {
                                       if (s.metadata.Deleting()) return false;  // no new finalizers on the way out
                                       bool changed = s.metadata.SetFinalizer(kSnapshotAsSourceFinalizer, true);
                                       if (bound)
                                         changed = s.metadata.SetFinalizer(kSnapshotBoundFinalizer, true) || changed;
                                       return changed;
                                     });
}

absl::Status SnapshotController::UpdateStatus(const VolumeSnapshot& snapshot, const VolumeSnapshotContent& content) {
  const types::VolumeSnapshotContentStatus cs = content.status.value_or(types::VolumeSnapshotContentStatus{});
  bool created = false, became_ready = false;
  std::string new_error;
  const types::ObjectMeta& meta = snapshot.metadata;
  BERTH_RETURN_IF_ERROR(MutateTyped<VolumeSnapshot>(
      registry_, SnapshotsKind(), meta.namespace_, meta.name, meta.uid, apiserver::Subresource::kStatus,
      [&](VolumeSnapshot& s) {
        const std::optional<types::VolumeSnapshotStatus> before = s.status;
        types::VolumeSnapshotStatus& status = s.status ? *s.status : s.status.emplace();
        status.bound_volume_snapshot_content_name = content.metadata.name;
        if (cs.creation_time && !status.creation_time) {
          status.creation_time = Rfc3339(absl::FromUnixNanos(*cs.creation_time));
          created = true;
        }
        const bool ready = cs.ready_to_use.value_or(false);
        became_ready = ready && !(before && before->ready_to_use.value_or(false));
        status.ready_to_use = ready;
        if (cs.restore_size && *cs.restore_size > 0 && (!status.restore_size || status.restore_size->Value() == 0)) {
          status.restore_size = api::Quantity::FromBytes(*cs.restore_size);
        }
        // The error is the content's current one: problems from before the
        // binding are over once a content exists.
        if (cs.error) {
          const std::string message = cs.error->message.value_or("");
          if ((status.error ? status.error->message.value_or("") : "") != message) new_error = message;
          status.error = cs.error;
        } else {
          status.error.reset();
        }
        return s.status != before;
      }));
  const std::string key = KeyOf(meta);
  const json snapshot_ref = IdentityOf(snapshot);  // names the snapshot in events
  if (!new_error.empty()) {
    const bool dynamic = !content.spec.source.volume_handle.value_or("").empty();
    events_.Record(snapshot_ref, "Warning", dynamic ? "SnapshotCreationFailed" : "SnapshotContentCheckandUpdateFailed",
                   new_error);
  }
  if (created) {
    events_.Record(snapshot_ref, "Normal", "SnapshotCreated",
                   StrCat("Snapshot ", key, " was successfully created by the CSI driver."));
  }
  if (became_ready)
    events_.Record(snapshot_ref, "Normal", "SnapshotReady", StrCat("Snapshot ", key, " is ready to use."));
  return absl::OkStatus();
}

bool SnapshotController::RestoreInProgress(const VolumeSnapshot& snapshot) const {
  const std::string& ns = snapshot.metadata.namespace_;
  const std::string& name = snapshot.metadata.name;
  // A claim restoring from it that is not bound yet (Pending, or so new it
  // has no phase).
  auto restoring = [&](const json& c) {
    if (Ns(c) != ns) return false;
    absl::StatusOr<PersistentVolumeClaim> claim = DecodeAs<PersistentVolumeClaim>(c);
    if (!claim.ok()) return true;  // unknown: keep protecting
    const std::string& phase = claim->status.phase;
    return (phase == "Pending" || phase.empty()) && RestoresFrom(*claim, name);
  };
  if (!informers_.claims.Select(restoring).empty()) return true;
  // The cache may not have a claim created a moment ago: confirm with the
  // store before the snapshot's data may go.
  auto live = registry_.List(CoreKind("persistentvolumeclaims"), ns, {});
  if (!live.ok()) return true;  // unknown: keep protecting
  return std::any_of(live->items.begin(), live->items.end(), restoring);
}

absl::Status SnapshotController::ProcessDeletion(const VolumeSnapshot& snapshot) {
  // Only a content that names this snapshot back is touched: never delete
  // data on a one-sided reference.
  const std::string content_name = ContentNameFor(snapshot);
  std::optional<VolumeSnapshotContent> content;
  if (auto got = GetTyped<VolumeSnapshotContent>(registry_, ContentsKind(), "", content_name); got.ok()) {
    if (RefersTo(*got, snapshot, false)) content = *std::move(got);
  } else if (got.status().code() != absl::StatusCode::kNotFound) {
    return got.status();
  }
  const bool delete_content = content && content->spec.deletion_policy == "Delete";
  const json snapshot_ref = IdentityOf(snapshot);  // names the snapshot in events
  if (content && RestoreInProgress(snapshot)) {
    events_.Record(snapshot_ref, "Warning", "SnapshotDeletePending", "Snapshot is being used to restore a PVC");
    snapshot_queue_.AddAfter(KeyOf(snapshot.metadata), options_.restore_wait);
    return absl::OkStatus();
  }
  if (content) {
    // Tells the snapshotter the content may go (with Delete: the storage
    // snapshot too) once no CreateSnapshot is outstanding.
    BERTH_RETURN_IF_ERROR(MutateTyped<VolumeSnapshotContent>(
        registry_, ContentsKind(), "", content_name, content->metadata.uid, apiserver::Subresource::kMain,
        [](VolumeSnapshotContent& c) { return SetAnnotation(c.metadata, kAnnSnapshotBeingDeleted, "yes"); }));
    if (delete_content && !content->metadata.Deleting()) {
      auto deleted = registry_.Delete(
          ContentsKind(), "", content_name,
          {.uid = content->metadata.uid, .resource_version = std::nullopt, .grace_period_seconds = std::nullopt});
      if (!deleted.ok() && deleted.status().code() != absl::StatusCode::kNotFound) {
        events_.Record(snapshot_ref, "Warning", "SnapshotContentObjectDeleteError",
                       "Failed to delete snapshot content API object");
        return deleted.status();
      }
    }
  }
  // The bound finalizer stays while a content with Delete is on its way out;
  // its deletion event brings the snapshot back here.
  const types::ObjectMeta& meta = snapshot.metadata;
  return MutateTyped<VolumeSnapshot>(registry_, SnapshotsKind(), meta.namespace_, meta.name, meta.uid,
                                     apiserver::Subresource::kMain, [&](VolumeSnapshot& s) {
                                       bool changed = s.metadata.SetFinalizer(kSnapshotAsSourceFinalizer, false);
                                       if (!delete_content) {
                                         changed = s.metadata.SetFinalizer(kSnapshotBoundFinalizer, false) || changed;
                                       }
                                       return changed;
                                     });
}

absl::Status SnapshotController::SyncContent(const std::string& name) {
  std::shared_ptr<const json> cached = informers_.contents.GetSharedByKey(name);
  if (!cached) return absl::OkStatus();
  BERTH_ASSIGN_OR_RETURN(const VolumeSnapshotContent content, DecodeAs<VolumeSnapshotContent>(*cached));
  if (content.metadata.Deleting() || content.metadata.HasFinalizer(kContentBoundFinalizer)) return absl::OkStatus();
  // A pre-provisioned content not bound yet needs no protection.
  if (content.spec.volume_snapshot_ref.uid.empty()) return absl::OkStatus();
  return MutateTyped<VolumeSnapshotContent>(registry_, ContentsKind(), "", name, content.metadata.uid,
                                            apiserver::Subresource::kMain, [](VolumeSnapshotContent& c) {
                                              return !c.metadata.Deleting() &&
                                                     c.metadata.SetFinalizer(kContentBoundFinalizer, true);
                                            });
}

bool SnapshotController::ClaimInUse(const PersistentVolumeClaim& claim) const {
  const std::string& ns = claim.metadata.namespace_;
  const std::string& name = claim.metadata.name;
  // A snapshot of the claim is being cut while it is not ready — unless it
  // is being deleted and no CreateSnapshot of it is outstanding.
  auto cutting = [&](const json& s_json) {
    if (Ns(s_json) != ns || ClaimSourceOf(s_json) != name) return false;
    absl::StatusOr<VolumeSnapshot> s = DecodeAs<VolumeSnapshot>(s_json);
    if (!s.ok()) return true;  // unknown: keep protecting
    if (Ready(*s)) return false;
    if (!s->metadata.Deleting()) return true;
    std::shared_ptr<const json> content_json = informers_.contents.GetSharedByKey(ContentNameFor(*s));
    if (!content_json) return false;
    absl::StatusOr<VolumeSnapshotContent> content = DecodeAs<VolumeSnapshotContent>(*content_json);
    if (!content.ok()) return true;
    return RefersTo(*content, *s, false) && !content->metadata.Annotation(kAnnSnapshotBeingCreated).empty();
  };
  if (!informers_.snapshots.Select(cutting).empty()) return true;
  // The cache may not have a snapshot created a moment ago: confirm with
  // the store before the claim loses its protection.
  auto live = registry_.List(SnapshotsKind(), ns, {});
  if (!live.ok()) return true;  // unknown: keep protecting
  return std::any_of(live->items.begin(), live->items.end(), cutting);
}

absl::Mutex& SnapshotController::ClaimLock(const std::string& ns, const std::string& name) {
  return claim_locks_[std::hash<std::string>{}(StrCat(ns, "/", name)) % claim_locks_.size()];
}

absl::Status SnapshotController::SyncClaim(const std::string& key) {
  std::shared_ptr<const json> cached = informers_.claims.GetSharedByKey(key);
  if (!cached) return absl::OkStatus();
  BERTH_ASSIGN_OR_RETURN(const PersistentVolumeClaim claim, DecodeAs<PersistentVolumeClaim>(*cached));
  const types::ObjectMeta& meta = claim.metadata;
  if (!meta.HasFinalizer(kPvcAsSourceFinalizer)) return absl::OkStatus();
  // No snapshot may start relying on the finalizer between the check that
  // none is being cut and its removal.
  absl::MutexLock claim_lock(&ClaimLock(meta.namespace_, meta.name));
  if (ClaimInUse(claim)) return absl::OkStatus();
  return MutateTyped<PersistentVolumeClaim>(registry_, CoreKind("persistentvolumeclaims"), meta.namespace_, meta.name,
                                            meta.uid, apiserver::Subresource::kMain, [](PersistentVolumeClaim& c) {
                                              return c.metadata.SetFinalizer(kPvcAsSourceFinalizer, false);
                                            });
}

}  // namespace berth::controllers
