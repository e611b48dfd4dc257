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
#include "client/capability.h"
#include "client/object.h"
#include "client/secrets.h"
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

constexpr char kApiVersion[] = "snapshot.storage.k8s.io/v1";

const api::KindInfo& SnapshotsKind() { return *api::FindResource(kGroup, "volumesnapshots"); }
const api::KindInfo& CoreKind(std::string_view resource) { return *api::FindResource("", resource); }

std::string ClaimSource(const json& s) { return Str(s, {"spec", "source", "persistentVolumeClaimName"}); }
std::string ContentSource(const json& s) { return Str(s, {"spec", "source", "volumeSnapshotContentName"}); }
// Upstream's fixed name of a dynamic snapshot's content.
std::string DynamicContentName(const json& snapshot) { return StrCat("snapcontent-", Uid(snapshot)); }
std::string SnapshotKey(const json& s) { return StrCat(Ns(s), "/", Name(s)); }

// Whether the content's volumeSnapshotRef names `snapshot`; an empty ref uid
// (a pre-provisioned content not bound yet) counts only with `allow_unbound`.
bool RefersTo(const json& content, const json& snapshot, bool allow_unbound) {
  const json& ref = Field(Field(content, "spec"), "volumeSnapshotRef");
  if (Str(ref, {"name"}) != Name(snapshot) || Str(ref, {"namespace"}) != Ns(snapshot)) return false;
  const std::string uid = Str(ref, {"uid"});
  return uid == Uid(snapshot) || (allow_unbound && uid.empty());
}

// The content a snapshot is (or will be) bound to.
std::string ContentNameFor(const json& snapshot) {
  if (std::string bound = Str(snapshot, {"status", "boundVolumeSnapshotContentName"}); !bound.empty()) return bound;
  if (std::string pre = ContentSource(snapshot); !pre.empty()) return pre;
  return DynamicContentName(snapshot);
}

bool AddFinalizer(json& o, const std::string& f) {
  if (HasFinalizer(o, f)) return false;
  o["metadata"]["finalizers"].push_back(f);
  return true;
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
            if (std::string claim = ClaimSource(o); !claim.empty()) claim_queue_.Add(StrCat(Ns(o), "/", claim));
          },
  });
  // A content change concerns the snapshot it names, and (when it appears
  // or goes) pre-provisioned snapshots that name it — maybe wrongly.
  auto content_changed = [this](const json& o, bool appeared_or_gone) {
    const json& ref = Field(Field(o, "spec"), "volumeSnapshotRef");
    if (!Str(ref, {"name"}).empty()) snapshot_queue_.Add(StrCat(Str(ref, {"namespace"}), "/", Str(ref, {"name"})));
    if (!appeared_or_gone) return;
    const std::string name = Name(o);
    for (const auto& s : informers_.snapshots.Select([&](const json& s) { return ContentSource(s) == name; })) {
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
             [&](const json& s) { return Ns(s) == ns && ClaimSource(s) == name && !Ready(s); })) {
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
      .on_update = [claim_changed](const json& before, const json& after) { claim_changed(after, before != after); },
      .on_delete = nullptr,
  });
}

void SnapshotController::Start() {
  for (int i = 0; i < options_.workers; ++i) {
    workers_.emplace_back([this] {
      RunWorker(snapshot_queue_, "snapshot-controller: snapshot",
                [this](const std::string& k) { return SyncSnapshot(k); });
    });
  }
  workers_.emplace_back([this] {
    RunWorker(content_queue_, "snapshot-controller: content", [this](const std::string& k) { return SyncContent(k); });
  });
  workers_.emplace_back([this] {
    RunWorker(claim_queue_, "snapshot-controller: claim", [this](const std::string& k) { return SyncClaim(k); });
  });
}

void SnapshotController::Stop() {
  snapshot_queue_.ShutDown();
  content_queue_.ShutDown();
  claim_queue_.ShutDown();
  for (auto& w : workers_) w.join();
  workers_.clear();
}

std::optional<json> SnapshotController::GetContent(const std::string& name) {
  if (auto cached = informers_.contents.Get("", name)) return cached;
  auto got = registry_.Get(ContentsKind(), "", name);
  if (!got.ok()) return std::nullopt;
  return *got;
}

absl::Status SnapshotController::Fail(const json& snapshot, const std::string& reason, const std::string& message) {
  bool changed = false;
  absl::Status st = MutateObject(registry_, SnapshotsKind(), snapshot, apiserver::Subresource::kStatus,
                                 [&](json& s) { return changed = SetError(s, message); });
  if (changed) events_.Record(snapshot, "Warning", reason, message);
  if (!st.ok()) return st;
  return absl::FailedPreconditionError(message);
}

absl::Status SnapshotController::SyncSnapshot(const std::string& key) {
  std::optional<json> cached = informers_.snapshots.GetByKey(key);
  if (!cached) return absl::OkStatus();
  const json& snapshot = *cached;
  // Whatever happens to a snapshot may release its source claim.
  if (std::string claim = ClaimSource(snapshot); !claim.empty()) claim_queue_.Add(StrCat(Ns(snapshot), "/", claim));
  if (Deleting(snapshot)) return ProcessDeletion(snapshot);
  if (ClaimSource(snapshot).empty() == ContentSource(snapshot).empty()) {
    return Fail(snapshot, "SnapshotValidationError",
                "Exactly one of PersistentVolumeClaimName and VolumeSnapshotContentName should be specified");
  }
  // as-source protection first, before a content can exist: a snapshot
  // deleted at any later moment is held until ProcessDeletion has seen it
  // (and its content).
  if (!HasFinalizer(snapshot, kSnapshotAsSourceFinalizer)) {
    BERTH_ASSIGN_OR_RETURN(
        std::optional<json> fresh,
        Edit(registry_, SnapshotsKind(), Ns(snapshot), Name(snapshot), Uid(snapshot), apiserver::Subresource::kMain,
             [](json& s) { return !Deleting(s) && AddFinalizer(s, kSnapshotAsSourceFinalizer); }));
    // Deleted meanwhile, before it could be protected: nothing may be made
    // for it (its own update brings it back if anything is left to do).
    if (!fresh || !HasFinalizer(*fresh, kSnapshotAsSourceFinalizer)) return absl::OkStatus();
  }
  BERTH_ASSIGN_OR_RETURN(json content, BoundContent(snapshot));
  BERTH_RETURN_IF_ERROR(EnsureFinalizers(snapshot, content));
  return UpdateStatus(snapshot, content);
}

absl::StatusOr<json> SnapshotController::BoundContent(const json& snapshot) {
  const std::string bound = Str(snapshot, {"status", "boundVolumeSnapshotContentName"});
  if (const std::string wanted = ContentSource(snapshot); !wanted.empty()) {
    // Pre-provisioned: the content must name this snapshot back.
    std::optional<json> content = GetContent(wanted);
    if (!content)
      return Fail(snapshot, "SnapshotContentMissing", StrCat("VolumeSnapshotContent ", wanted, " is missing"));
    if (Str(*content, {"spec", "source", "snapshotHandle"}).empty()) {
      return Fail(snapshot, "SnapshotContentMismatch",
                  StrCat("VolumeSnapshotContent ", wanted,
                         " is dynamically provisioned while expecting a pre-provisioned one"));
    }
    if (!RefersTo(*content, snapshot, /*allow_unbound=*/true)) {
      return Fail(snapshot, "SnapshotContentMisbound",
                  StrCat("VolumeSnapshotContent ", wanted, " is bound to a different snapshot"));
    }
    const std::string cls = Str(snapshot, {"spec", "volumeSnapshotClassName"});
    if (!RefersTo(*content, snapshot, false) ||
        (!cls.empty() && Str(*content, {"spec", "volumeSnapshotClassName"}).empty())) {
      // Bind the content's side: its ref gets our uid (and our class), and
      // from then on its protection.
      BERTH_ASSIGN_OR_RETURN(
          std::optional<json> edited,
          Edit(registry_, ContentsKind(), "", wanted, Uid(*content), apiserver::Subresource::kMain, [&](json& c) {
            if (!RefersTo(c, snapshot, true)) return false;
            bool changed = false;
            if (Str(c, {"spec", "volumeSnapshotRef", "uid"}).empty()) {
              c["spec"]["volumeSnapshotRef"]["uid"] = Uid(snapshot);
              if (!Deleting(c)) AddFinalizer(c, kContentBoundFinalizer);
              changed = true;
            }
            if (!cls.empty() && Str(c, {"spec", "volumeSnapshotClassName"}).empty()) {
              c["spec"]["volumeSnapshotClassName"] = cls;
              changed = true;
            }
            return changed;
          }));
      if (!edited || !RefersTo(*edited, snapshot, false)) {
        return absl::AbortedError(StrCat("VolumeSnapshotContent ", wanted, " changed while binding"));
      }
      content = std::move(edited);
    }
    return *content;
  }
  // Dynamic.
  const std::string name = bound.empty() ? DynamicContentName(snapshot) : bound;
  if (std::optional<json> content = GetContent(name)) {
    if (Str(*content, {"spec", "source", "volumeHandle"}).empty()) {
      return Fail(
          snapshot, "SnapshotContentMismatch",
          StrCat("VolumeSnapshotContent ", name, " is pre-provisioned while expecting a dynamically provisioned one"));
    }
    if (!RefersTo(*content, snapshot, false)) {
      return Fail(snapshot, "SnapshotContentMisbound",
                  StrCat("VolumeSnapshotContent ", name, " is bound to a different snapshot"));
    }
    return *content;
  }
  // A snapshot that was bound never gets a new content: the old one (and
  // maybe its storage snapshot) is what went missing.
  if (!bound.empty())
    return Fail(snapshot, "SnapshotContentMissing", StrCat("VolumeSnapshotContent ", bound, " is missing"));
  return CreateContent(snapshot);
}

absl::StatusOr<json> SnapshotController::SnapshotClass(const json& snapshot, const std::string& driver) {
  if (std::string name = Str(snapshot, {"spec", "volumeSnapshotClassName"}); !name.empty()) {
    std::optional<json> cls = GetClass(registry_, informers_.classes, name);
    if (!cls) return absl::NotFoundError(StrCat("volumesnapshotclass ", name, " not found"));
    return *cls;
  }
  std::vector<json> defaults = informers_.classes.Select(
      [&](const json& c) { return Annotation(c, kAnnDefaultSnapshotClass) == "true" && Str(c, {"driver"}) == driver; });
  if (defaults.empty())
    return absl::FailedPreconditionError(StrCat("cannot find default snapshot class for driver ", driver));
  if (defaults.size() > 1) {
    return absl::FailedPreconditionError(
        StrCat(defaults.size(), " default snapshot classes were found for driver ", driver));
  }
  // Record the choice, as upstream does: the class is then fixed (immutable).
  BERTH_ASSIGN_OR_RETURN(std::optional<json> fresh, Edit(registry_, SnapshotsKind(), Ns(snapshot), Name(snapshot),
                                                         Uid(snapshot), apiserver::Subresource::kMain, [&](json& s) {
                                                           if (!Str(s, {"spec", "volumeSnapshotClassName"}).empty())
                                                             return false;
                                                           s["spec"]["volumeSnapshotClassName"] = Name(defaults[0]);
                                                           return true;
                                                         }));
  if (!fresh || Str(*fresh, {"spec", "volumeSnapshotClassName"}) != Name(defaults[0])) {
    return absl::AbortedError(StrCat("volumesnapshot ", SnapshotKey(snapshot), " changed while choosing its class"));
  }
  return defaults[0];
}

absl::StatusOr<json> SnapshotController::CreateContent(const json& snapshot) {
  const std::string ns = Ns(snapshot), claim_name = ClaimSource(snapshot);
  auto fail = [&](const absl::Status& st) -> absl::Status {
    if (st.code() == absl::StatusCode::kAborted) return st;  // a write conflict: just retry
    return Fail(snapshot, "SnapshotContentCreationFailed",
                StrCat("Failed to create snapshot content with error ", st.message()));
  };
  auto claim = registry_.Get(CoreKind("persistentvolumeclaims"), ns, claim_name);
  if (!claim.ok()) return fail(claim.status());
  if (Str(*claim, {"status", "phase"}) != "Bound" || Str(*claim, {"spec", "volumeName"}).empty()) {
    return fail(absl::FailedPreconditionError(
        StrCat("the PVC ", claim_name, " is not yet bound to a PV, will not attempt to take a snapshot")));
  }
  const std::string pv_name = Str(*claim, {"spec", "volumeName"});
  auto pv = registry_.Get(CoreKind("persistentvolumes"), "", pv_name);
  if (!pv.ok()) return fail(pv.status());
  const json& ref = Field(Field(*pv, "spec"), "claimRef");
  if (Str(ref, {"name"}) != claim_name || Str(ref, {"namespace"}) != ns ||
      (!Str(ref, {"uid"}).empty() && Str(ref, {"uid"}) != Uid(*claim))) {
    return fail(absl::FailedPreconditionError(
        StrCat("the binding between PV ", pv_name, " and PVC ", claim_name, " is broken")));
  }
  const std::string handle = Str(*pv, {"spec", "csi", "volumeHandle"});
  const std::string driver = Str(*pv, {"spec", "csi", "driver"});
  if (handle.empty() || driver.empty()) {
    return fail(absl::FailedPreconditionError(StrCat("cannot find CSI PersistentVolumeSource for volume ", pv_name)));
  }
  auto cls = SnapshotClass(snapshot, driver);
  if (!cls.ok()) return fail(cls.status());
  if (Str(*cls, {"driver"}) != driver) {
    return fail(absl::FailedPreconditionError(StrCat("volumesnapshotclass ", Name(*cls), " is for driver ",
                                                     Str(*cls, {"driver"}), " but volume ", pv_name, " is served by ",
                                                     driver)));
  }
  const std::string content_name = DynamicContentName(snapshot);
  auto secret = ClassSecret(*cls, "snapshotter", content_name, &snapshot);
  if (!secret.ok()) return fail(secret.status());
  // Protect the source before anything can be cut from it; decided on the
  // stored claim under its lock (see ClaimLock).
  absl::MutexLock claim_lock(&ClaimLock(ns, claim_name));
  const std::string checked_uid = Uid(*claim);
  claim = registry_.Get(CoreKind("persistentvolumeclaims"), ns, claim_name);
  if (!claim.ok()) return fail(claim.status());
  if (Uid(*claim) != checked_uid) {
    return absl::AbortedError(StrCat("claim ", ns, "/", claim_name, " was replaced while its snapshot was prepared"));
  }
  if (!HasFinalizer(*claim, kPvcAsSourceFinalizer)) {
    if (Deleting(*claim)) {
      return fail(absl::FailedPreconditionError(
          StrCat("cannot add finalizer on claim ", claim_name, " because it is being deleted")));
    }
    BERTH_ASSIGN_OR_RETURN(
        std::optional<json> protected_claim,
        Edit(registry_, CoreKind("persistentvolumeclaims"), ns, claim_name, Uid(*claim), apiserver::Subresource::kMain,
             [](json& c) { return !Deleting(c) && AddFinalizer(c, kPvcAsSourceFinalizer); }));
    if (!protected_claim || !HasFinalizer(*protected_claim, kPvcAsSourceFinalizer)) {
      return fail(absl::FailedPreconditionError(
          StrCat("cannot add finalizer on claim ", claim_name, " because it is being deleted")));
    }
  }
  json content = {
      {"apiVersion", kApiVersion},
      {"kind", "VolumeSnapshotContent"},
      // Created with its finalizer: there is no moment without protection.
      {"metadata", {{"name", content_name}, {"finalizers", {kContentBoundFinalizer}}}},
      {"spec",
       {{"volumeSnapshotRef",
         {{"kind", "VolumeSnapshot"},
          {"apiVersion", kApiVersion},
          {"namespace", ns},
          {"name", Name(snapshot)},
          {"uid", Uid(snapshot)}}},
        {"source", {{"volumeHandle", handle}}},
        {"volumeSnapshotClassName", Name(*cls)},
        {"deletionPolicy", Str(*cls, {"deletionPolicy"}).empty() ? "Delete" : Str(*cls, {"deletionPolicy"})},
        {"driver", driver},
        {"sourceVolumeMode", Str(*pv, {"spec", "volumeMode"}) == "Block" ? "Block" : "Filesystem"}}}};
  if (!secret->name.empty()) {
    content["metadata"]["annotations"][kAnnDeletionSecretName] = secret->name;
    content["metadata"]["annotations"][kAnnDeletionSecretNamespace] = secret->ns;
  }
  if (std::string node = VolumeNode(registry_, *pv); !node.empty())
    content["metadata"]["annotations"][kAnnSnapshotNode] = node;
  auto created = registry_.Create(ContentsKind(), "", content);
  if (!created.ok()) {
    if (created.status().code() != absl::StatusCode::kAlreadyExists) return fail(created.status());
    // Made by an earlier attempt whose answer we lost.
    auto existing = registry_.Get(ContentsKind(), "", content_name);
    if (!existing.ok()) return existing.status();
    if (!RefersTo(*existing, snapshot, false)) {
      return Fail(snapshot, "SnapshotContentMisbound",
                  StrCat("VolumeSnapshotContent ", content_name, " is bound to a different snapshot"));
    }
    return *existing;
  }
  events_.Record(snapshot, "Normal", "CreatingSnapshot",
                 StrCat("Waiting for a snapshot ", SnapshotKey(snapshot), " to be created by the CSI driver."));
  return *created;
}

absl::Status SnapshotController::EnsureFinalizers(const json& snapshot, const json& content) {
  const bool bound = Str(content, {"spec", "deletionPolicy"}) == "Delete";
  if (HasFinalizer(snapshot, kSnapshotAsSourceFinalizer) &&
      (!bound || HasFinalizer(snapshot, kSnapshotBoundFinalizer))) {
    return absl::OkStatus();
  }
  return MutateObject(registry_, SnapshotsKind(), snapshot, apiserver::Subresource::kMain, [&](json& s) {
    if (Deleting(s)) return false;  // no new finalizers on the way out
    bool changed = AddFinalizer(s, kSnapshotAsSourceFinalizer);
    if (bound) changed = AddFinalizer(s, kSnapshotBoundFinalizer) || changed;
    return changed;
  });
}

absl::Status SnapshotController::UpdateStatus(const json& snapshot, const json& content) {
  const json& cs = Field(content, "status");
  bool created = false, became_ready = false;
  std::string new_error;
  BERTH_RETURN_IF_ERROR(
      MutateObject(registry_, SnapshotsKind(), snapshot, apiserver::Subresource::kStatus, [&](json& s) {
        json status = Field(s, "status").is_object() ? s["status"] : json::object();
        const json before = status;
        status["boundVolumeSnapshotContentName"] = Name(content);
        if (const json& t = Field(cs, "creationTime"); t.is_number() && !status.contains("creationTime")) {
          status["creationTime"] = Rfc3339(absl::FromUnixNanos(t.get<int64_t>()));
          created = true;
        }
        const bool ready = Field(cs, "readyToUse") == true;
        became_ready = ready && Field(before, "readyToUse") != true;
        status["readyToUse"] = ready;
        if (const json& size = Field(cs, "restoreSize"); size.is_number() && size.get<int64_t>() > 0) {
          auto have = api::Quantity::Parse(Str(status, {"restoreSize"}));
          if (!have.ok() || have->Value() == 0) {
            status["restoreSize"] = api::Quantity::FromBytes(size.get<int64_t>()).ToString();
          }
        }
        // The error is the content's current one: problems from before the
        // binding are over once a content exists.
        if (const json& err = Field(cs, "error"); err.is_object()) {
          if (Str(status, {"error", "message"}) != Str(err, {"message"})) new_error = Str(err, {"message"});
          status["error"] = err;
        } else {
          status.erase("error");
        }
        if (status == before) return false;
        s["status"] = status;
        return true;
      }));
  const std::string key = SnapshotKey(snapshot);
  if (!new_error.empty()) {
    const bool dynamic = !Str(content, {"spec", "source", "volumeHandle"}).empty();
    events_.Record(snapshot, "Warning", dynamic ? "SnapshotCreationFailed" : "SnapshotContentCheckandUpdateFailed",
                   new_error);
  }
  if (created) {
    events_.Record(snapshot, "Normal", "SnapshotCreated",
                   StrCat("Snapshot ", key, " was successfully created by the CSI driver."));
  }
  if (became_ready) events_.Record(snapshot, "Normal", "SnapshotReady", StrCat("Snapshot ", key, " is ready to use."));
  return absl::OkStatus();
}

bool SnapshotController::RestoreInProgress(const json& snapshot) const {
  const std::string ns = Ns(snapshot), name = Name(snapshot);
  // A claim restoring from it that is not bound yet (Pending, or so new it
  // has no phase).
  auto restoring = [&](const json& c) {
    const std::string phase = Str(c, {"status", "phase"});
    if (Ns(c) != ns || (phase != "Pending" && !phase.empty())) return false;
    for (const char* field : {"dataSource", "dataSourceRef"}) {
      const json& ds = Field(Field(c, "spec"), field);
      if (Str(ds, {"kind"}) == "VolumeSnapshot" && Str(ds, {"apiGroup"}) == kGroup && Str(ds, {"name"}) == name) {
        return true;
      }
    }
    return false;
  };
  if (!informers_.claims.Select(restoring).empty()) return true;
  // The cache may not have a claim created a moment ago: confirm with the
  // store before the snapshot's data may go.
  auto live = registry_.List(CoreKind("persistentvolumeclaims"), ns, {});
  if (!live.ok()) return true;  // unknown: keep protecting
  return std::any_of(live->items.begin(), live->items.end(), restoring);
}

absl::Status SnapshotController::ProcessDeletion(const json& snapshot) {
  // Only a content that names this snapshot back is touched: never delete
  // data on a one-sided reference.
  const std::string content_name = ContentNameFor(snapshot);
  std::optional<json> content;
  if (auto got = registry_.Get(ContentsKind(), "", content_name); got.ok()) {
    if (RefersTo(*got, snapshot, false)) content = *got;
  } else if (got.status().code() != absl::StatusCode::kNotFound) {
    return got.status();
  }
  const bool delete_content = content && Str(*content, {"spec", "deletionPolicy"}) == "Delete";
  if (content && RestoreInProgress(snapshot)) {
    events_.Record(snapshot, "Warning", "SnapshotDeletePending", "Snapshot is being used to restore a PVC");
    snapshot_queue_.AddAfter(SnapshotKey(snapshot), options_.restore_wait);
    return absl::OkStatus();
  }
  if (content) {
    // Tells the snapshotter the content may go (with Delete: the storage
    // snapshot too) once no CreateSnapshot is outstanding.
    BERTH_RETURN_IF_ERROR(MutateObject(registry_, ContentsKind(), *content, apiserver::Subresource::kMain,
                                       [](json& c) { return SetAnnotation(c, kAnnSnapshotBeingDeleted, "yes"); }));
    if (delete_content && !Deleting(*content)) {
      auto deleted = registry_.Delete(
          ContentsKind(), "", content_name,
          {.uid = Uid(*content), .resource_version = std::nullopt, .grace_period_seconds = std::nullopt});
      if (!deleted.ok() && deleted.status().code() != absl::StatusCode::kNotFound) {
        events_.Record(snapshot, "Warning", "SnapshotContentObjectDeleteError",
                       "Failed to delete snapshot content API object");
        return deleted.status();
      }
    }
  }
  // The bound finalizer stays while a content with Delete is on its way out;
  // its deletion event brings the snapshot back here.
  return MutateObject(registry_, SnapshotsKind(), snapshot, apiserver::Subresource::kMain, [&](json& s) {
    bool changed = RemoveFinalizer(s, kSnapshotAsSourceFinalizer);
    if (!delete_content) changed = RemoveFinalizer(s, kSnapshotBoundFinalizer) || changed;
    return changed;
  });
}

absl::Status SnapshotController::SyncContent(const std::string& name) {
  std::optional<json> content = informers_.contents.Get("", name);
  if (!content || Deleting(*content) || HasFinalizer(*content, kContentBoundFinalizer)) return absl::OkStatus();
  // A pre-provisioned content not bound yet needs no protection.
  if (Str(*content, {"spec", "volumeSnapshotRef", "uid"}).empty()) return absl::OkStatus();
  return MutateObject(registry_, ContentsKind(), *content, apiserver::Subresource::kMain,
                      [](json& c) { return !Deleting(c) && AddFinalizer(c, kContentBoundFinalizer); });
}

bool SnapshotController::ClaimInUse(const json& claim) const {
  const std::string ns = Ns(claim), name = Name(claim);
  // A snapshot of the claim is being cut while it is not ready — unless it
  // is being deleted and no CreateSnapshot of it is outstanding.
  auto cutting = [&](const json& s) {
    if (Ns(s) != ns || ClaimSource(s) != name || Ready(s)) return false;
    if (!Deleting(s)) return true;
    std::optional<json> content = informers_.contents.Get("", ContentNameFor(s));
    return content && RefersTo(*content, s, false) && !Annotation(*content, kAnnSnapshotBeingCreated).empty();
  };
  if (!informers_.snapshots.Select(cutting).empty()) return true;
  // The cache may not have a snapshot created a moment ago: confirm with
  // the store before the claim loses its protection.
  auto live = registry_.List(*api::FindResource(kGroup, "volumesnapshots"), ns, {});
  if (!live.ok()) return true;  // unknown: keep protecting
  std::vector<json> snapshots = std::move(live->items);
  return std::any_of(snapshots.begin(), snapshots.end(), cutting);
}

absl::Mutex& SnapshotController::ClaimLock(const std::string& ns, const std::string& name) {
  return claim_locks_[std::hash<std::string>{}(StrCat(ns, "/", name)) % claim_locks_.size()];
}

absl::Status SnapshotController::SyncClaim(const std::string& key) {
  std::optional<json> claim = informers_.claims.GetByKey(key);
  if (!claim || !HasFinalizer(*claim, kPvcAsSourceFinalizer)) return absl::OkStatus();
  // No snapshot may start relying on the finalizer between the check that
  // none is being cut and its removal.
  absl::MutexLock claim_lock(&ClaimLock(Ns(*claim), Name(*claim)));
  if (ClaimInUse(*claim)) return absl::OkStatus();
  return MutateObject(registry_, CoreKind("persistentvolumeclaims"), *claim, apiserver::Subresource::kMain,
                      [](json& c) { return RemoveFinalizer(c, kPvcAsSourceFinalizer); });
}

}  // namespace berth::controllers
