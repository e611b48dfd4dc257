// The CSI snapshotter sidecar (upstream's csi-snapshotter): the
// VolumeSnapshotContent side of snapshotting. For its driver's contents it
// calls CreateSnapshot, checks pre-provisioned snapshots, polls until ready,
// and calls DeleteSnapshot. The VolumeSnapshot side is the
// SnapshotController (snapshot_controller.cc).
#include "controllers/snapshot/snapshotter.h"

#include <algorithm>
#include <functional>
#include <utility>

#include "api/quantity.h"
#include "api/types/snapshot.h"
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

namespace berth::controllers {

using namespace ::berth::client;  // the controllers' own client library
using namespace snapshot_util;
namespace {

using nlohmann::json;

// Drops the being-created marker (after the outcome of CreateSnapshot is
// known).
absl::Status Unmark(apiserver::Registry& registry, const VolumeSnapshotContent& content) {
  return MutateTyped<VolumeSnapshotContent>(
      registry, ContentsKind(), "", content.metadata.name, content.metadata.uid, apiserver::Subresource::kMain,
      [](VolumeSnapshotContent& c) { return c.metadata.annotations.erase(kAnnSnapshotBeingCreated) > 0; });
}

}  // namespace

Snapshotter::Snapshotter(apiserver::Registry& registry, DriverDirectory& drivers, Informer& contents, Informer& classes,
                         Options options)
    : registry_(registry),
      drivers_(drivers),
      contents_(contents),
      classes_(classes),
      options_(std::move(options)),
      own_monitor_(options_.monitor == nullptr ? std::make_unique<DriverMonitor>(drivers) : nullptr),
      monitor_(options_.monitor != nullptr ? *options_.monitor : *own_monitor_),
      events_(registry, StrCat(options_.driver, "_berth-snapshotter")),
      queue_(WorkQueue::Options{
          .base_delay = options_.retry_start, .max_delay = options_.retry_max, .clock = options_.clock}) {}

Snapshotter::~Snapshotter() { Stop(); }

void Snapshotter::RegisterHandlers() {
  auto changed = [this](const json& o) {
    if (Str(o, {"spec", "driver"}) == options_.driver) queue_.Add(Name(o));
  };
  contents_.AddHandlers({
      .on_add = changed,
      .on_update = [changed](const json&, const json& o) { changed(o); },
      .on_delete = [this](const json& o) { ResetPoll(Name(o)); },
  });
}

void Snapshotter::Start() {
  StartWorkers(workers_, options_.workers, queue_, StrCat("snapshotter ", options_.driver, ": content"),
               ParkAware([this](const std::string& k) { return SyncContent(k); }));
}

void Snapshotter::Stop() {
  queue_.ShutDown();
  for (auto& w : workers_) w.join();
  workers_.clear();
  monitor_.Unpark(queue_);
}

void Snapshotter::SchedulePoll(const std::string& name) {
  absl::Duration delay = options_.poll_initial;
  {
    absl::MutexLock lock(&mu_);
    for (int n = polls_[name]++; n > 0 && delay < options_.poll_max; --n) delay *= 2;
  }
  queue_.AddAfter(name, std::min(delay, options_.poll_max));
}

void Snapshotter::ResetPoll(const std::string& name) {
  absl::MutexLock lock(&mu_);
  polls_.erase(name);
}

absl::StatusOr<std::map<std::string, std::string>> Snapshotter::Secrets(const std::string& ns,
                                                                        const std::string& name) {
  if (ns.empty() && name.empty()) return std::map<std::string, std::string>();
  if (name.empty()) return absl::InvalidArgumentError("secret name or namespace not specified");
  return CsiSecret(registry_, ns, name, "snapshotter secret");
}

std::string Snapshotter::CallNode(const VolumeSnapshotContent& content) const {
  std::string node = content.metadata.Annotation(kAnnSnapshotNode);
  if (node.empty() && drivers_.Endpoint(options_.driver, "").empty()) {
    // A node-local driver and a content that names no node (pre-provisioned):
    // only unambiguous with one node.
    std::vector<std::string> nodes = drivers_.Nodes(options_.driver);
    if (nodes.size() == 1) node = nodes[0];
  }
  return node;
}

absl::Status Snapshotter::Call(const VolumeSnapshotContent& content,
                               const std::function<absl::Status(const csi::DriverClient&)>& fn) {
  const std::string node = CallNode(content);
  absl::Status st = monitor_.Call(options_.driver, node, fn);
  if (IsNotAFailure(st)) monitor_.Park(options_.driver, node, queue_, content.metadata.name);
  return st;
}

absl::StatusOr<bool> Snapshotter::CanListSnapshots(const VolumeSnapshotContent& content) {
  {
    absl::MutexLock lock(&mu_);
    if (can_list_) return *can_list_;
  }
  ::csi::v1::ControllerGetCapabilitiesResponse resp;
  BERTH_RETURN_IF_ERROR(Call(content, [&](const csi::DriverClient& csi) {
    auto caps = csi.ControllerGetCapabilities({.timeout = options_.rpc_timeout});
    if (caps.ok()) resp = std::move(*caps);
    return caps.status();
  }));
  bool can = false;
  for (const auto& c : resp.capabilities()) {
    can = can || c.rpc().type() == ::csi::v1::ControllerServiceCapability::RPC::LIST_SNAPSHOTS;
  }
  absl::MutexLock lock(&mu_);
  can_list_ = can;
  return can;
}

absl::Status Snapshotter::Fail(const VolumeSnapshotContent& content, const std::string& reason,
                               const std::string& message, absl::Status st) {
  bool changed = false;
  absl::Status written = MutateTyped<VolumeSnapshotContent>(
      registry_, ContentsKind(), "", content.metadata.name, content.metadata.uid, apiserver::Subresource::kStatus,
      [&](VolumeSnapshotContent& c) { return changed = SetError(c.status, message); });
  if (changed) events_.Record(IdentityOf(content), "Warning", reason, message);
  return st.ok() ? written : st;
}

absl::Status Snapshotter::RecordSnapshot(const VolumeSnapshotContent& content, const ::csi::v1::Snapshot& snapshot) {
  const int64_t created = snapshot.has_creation_time()
                              ? snapshot.creation_time().seconds() * 1'000'000'000 + snapshot.creation_time().nanos()
                              : absl::ToUnixNanos(absl::Now());
  return MutateTyped<VolumeSnapshotContent>(registry_, ContentsKind(), "", content.metadata.name, content.metadata.uid,
                                            apiserver::Subresource::kStatus, [&](VolumeSnapshotContent& c) {
                                              const std::optional<types::VolumeSnapshotContentStatus> before = c.status;
                                              types::VolumeSnapshotContentStatus& status =
                                                  c.status ? *c.status : c.status.emplace();
                                              if (status.snapshot_handle.value_or("").empty())
                                                status.snapshot_handle = snapshot.snapshot_id();
                                              status.ready_to_use = snapshot.ready_to_use();
                                              if (!status.creation_time) status.creation_time = created;
                                              if (!status.restore_size && snapshot.size_bytes() > 0)
                                                status.restore_size = snapshot.size_bytes();
                                              status.error.reset();  // the driver answered: no error now
                                              return c.status != before;
                                            });
}

absl::Status Snapshotter::SyncContent(const std::string& name) {
  std::shared_ptr<const json> cached = contents_.GetSharedByKey(name);
  if (!cached || Str(*cached, {"spec", "driver"}) != options_.driver) {
    ResetPoll(name);
    return absl::OkStatus();
  }
  BERTH_ASSIGN_OR_RETURN(const VolumeSnapshotContent content, DecodeAs<VolumeSnapshotContent>(*cached));
  const bool dynamic = !content.spec.source.volume_handle.value_or("").empty();
  const bool being_created = !content.metadata.Annotation(kAnnSnapshotBeingCreated).empty();
  if (content.metadata.Deleting()) {
    const bool unbound = !dynamic && content.spec.volume_snapshot_ref.uid.empty();
    if (unbound || (!being_created && !content.metadata.Annotation(kAnnSnapshotBeingDeleted).empty())) {
      ResetPoll(name);
      return DeleteContent(content);
    }
    // Either its snapshot's deletion has not reached it yet, or a
    // CreateSnapshot's outcome is unknown: that one is finished first, so
    // whatever it made is known (and deleted) before the content goes.
    if (!dynamic || !being_created) return absl::OkStatus();
  }
  if (Ready(content)) {
    ResetPoll(name);
    if (!being_created) return absl::OkStatus();
    return Unmark(registry_, content);
  }
  return dynamic ? CreateSnapshot(content) : CheckPreprovisioned(content);
}

absl::Status Snapshotter::CreateSnapshot(const VolumeSnapshotContent& content) {
  const std::string& name = content.metadata.name;
  const std::string& uid = content.spec.volume_snapshot_ref.uid;
  const std::string handle = content.spec.source.volume_handle.value_or("");
  auto fail = [&](absl::Status st) {
    return Fail(content, "SnapshotCreationFailed", StrCat("Failed to create snapshot: ", st.message()), st);
  };
  if (uid.empty()) return fail(absl::InvalidArgumentError("the content's volumeSnapshotRef has no uid"));
  const std::string class_name = content.spec.volume_snapshot_class_name.value_or("");
  if (class_name.empty()) {
    return fail(absl::InvalidArgumentError(StrCat("failed to take snapshot ", name, " without a snapshot class")));
  }
  absl::StatusOr<std::optional<VolumeSnapshotClass>> cls = GetClass(registry_, classes_, class_name);
  if (!cls.ok()) return fail(cls.status());
  if (!*cls) return fail(absl::NotFoundError(StrCat("volumesnapshotclass ", class_name, " not found")));
  auto secrets = Secrets(content.metadata.Annotation(kAnnDeletionSecretNamespace),
                         content.metadata.Annotation(kAnnDeletionSecretName));
  if (!secrets.ok()) return fail(secrets.status());

  // Mark the call before making it: until its outcome is known the content
  // must not go, or a snapshot it made would be left behind. A content
  // whose snapshot is known (its handle recorded) is only asked again for
  // readiness: nothing to mark (marking and unmarking it on every poll wrote
  // it twice a poll, and each write woke it again at once).
  const std::string recorded_handle = content.status ? content.status->snapshot_handle.value_or("") : "";
  if (content.metadata.Annotation(kAnnSnapshotBeingCreated).empty() && recorded_handle.empty()) {
    BERTH_ASSIGN_OR_RETURN(std::optional<VolumeSnapshotContent> marked,
                           Edit<VolumeSnapshotContent>(registry_, ContentsKind(), "", name, content.metadata.uid,
                                                       apiserver::Subresource::kMain, [](VolumeSnapshotContent& c) {
                                                         return !c.metadata.Deleting() &&
                                                                SetAnnotation(c.metadata, kAnnSnapshotBeingCreated,
                                                                              "yes");
                                                       }));
    if (!marked || marked->metadata.Annotation(kAnnSnapshotBeingCreated).empty()) {
      return absl::AbortedError(StrCat("VolumeSnapshotContent ", name, " is gone or being deleted"));
    }
  }

  ::csi::v1::CreateSnapshotRequest req;
  // Deterministic: repeating the call (a lost answer, a restart) is
  // idempotent in the driver and never makes a second snapshot.
  req.set_name(StrCat("snapshot-", uid));
  req.set_source_volume_id(handle);
  SplitClassParameters((*cls)->parameters, req.mutable_parameters(), nullptr);

  ::csi::v1::CreateSnapshotResponse resp;
  absl::Status st = Call(content, [&](const csi::DriverClient& csi) {
    auto created = csi.CreateSnapshot(req, {.timeout = options_.rpc_timeout, .secrets = *secrets});
    if (created.ok()) resp = std::move(*created);
    return created.status();
  });
  if (!st.ok()) {
    if (csi::IsFinalError(st)) {
      // The driver is not working on it: nothing was made by this call.
      BERTH_RETURN_IF_ERROR(Unmark(registry_, content));
    }
    return fail(absl::Status(st.code(), StrCat("failed to take snapshot of the volume ", handle, ": ", st.message())));
  }
  // Status first, then the marker: a crash in between repeats a harmless call.
  BERTH_RETURN_IF_ERROR(RecordSnapshot(content, resp.snapshot()));
  BERTH_RETURN_IF_ERROR(Unmark(registry_, content));
  if (resp.snapshot().ready_to_use()) {
    ResetPoll(name);
  } else {
    SchedulePoll(name);  // asked again (CreateSnapshot is idempotent) until ready
  }
  return absl::OkStatus();
}

absl::Status Snapshotter::CheckPreprovisioned(const VolumeSnapshotContent& content) {
  const std::string& name = content.metadata.name;
  const std::string handle = content.spec.source.snapshot_handle.value_or("");
  auto fail = [&](absl::Status st) {
    return Fail(content, "SnapshotContentCheckandUpdateFailed",
                StrCat("Failed to check and update snapshot content: ", st.message()), st);
  };
  std::map<std::string, std::string> secrets;
  if (std::string class_name = content.spec.volume_snapshot_class_name.value_or(""); !class_name.empty()) {
    absl::StatusOr<std::optional<VolumeSnapshotClass>> cls = GetClass(registry_, classes_, class_name);
    if (!cls.ok()) return fail(cls.status());
    if (!*cls) return fail(absl::NotFoundError(StrCat("volumesnapshotclass ", class_name, " not found")));
    auto ref = ClassSecret(**cls, "snapshotter-list", name, nullptr);
    if (!ref.ok()) return fail(ref.status());
    auto got = Secrets(ref->ns, ref->name);
    if (!got.ok()) return fail(got.status());
    secrets = std::move(*got);
  }
  auto can_list = CanListSnapshots(content);
  if (!can_list.ok()) return fail(can_list.status());
  if (!*can_list) {
    // Nothing to ask: the handle is taken as ready (upstream does the same).
    ::csi::v1::Snapshot assumed;
    assumed.set_snapshot_id(handle);
    assumed.set_ready_to_use(true);
    return RecordSnapshot(content, assumed);
  }
  ::csi::v1::ListSnapshotsRequest req;
  req.set_snapshot_id(handle);
  ::csi::v1::ListSnapshotsResponse resp;
  absl::Status listed = Call(content, [&](const csi::DriverClient& csi) {
    auto got = csi.ListSnapshots(req, {.timeout = options_.rpc_timeout, .secrets = secrets});
    if (got.ok()) resp = std::move(*got);
    return got.status();
  });
  if (!listed.ok()) return fail(listed);
  const ::csi::v1::ListSnapshotsResponse::Entry* entry = nullptr;
  for (const auto& e : resp.entries()) {
    if (e.snapshot().snapshot_id() == handle) entry = &e;
  }
  if (entry == nullptr) return fail(absl::NotFoundError(StrCat("snapshot ", handle, " not found by the driver")));
  BERTH_RETURN_IF_ERROR(RecordSnapshot(content, entry->snapshot()));
  if (entry->snapshot().ready_to_use()) {
    ResetPoll(name);
  } else {
    SchedulePoll(name);
  }
  return absl::OkStatus();
}

absl::Status Snapshotter::DeleteContent(const VolumeSnapshotContent& content) {
  const json content_ref = IdentityOf(content);  // names the content in events
  if (content.spec.deletion_policy == "Delete") {
    std::string handle = content.status ? content.status->snapshot_handle.value_or("") : "";
    if (handle.empty()) handle = content.spec.source.snapshot_handle.value_or("");
    if (!handle.empty()) {
      auto secrets = Secrets(content.metadata.Annotation(kAnnDeletionSecretNamespace),
                             content.metadata.Annotation(kAnnDeletionSecretName));
      if (!secrets.ok()) {
        events_.Record(content_ref, "Warning", "SnapshotDeleteError",
                       StrCat("Failed to get snapshot credentials: ", secrets.status().message()));
        return secrets.status();
      }
      ::csi::v1::DeleteSnapshotRequest req;
      req.set_snapshot_id(handle);
      // NOT_FOUND (already gone) is OK.
      absl::Status st = Call(content, [&](const csi::DriverClient& csi) {
        return csi.DeleteSnapshot(req, {.timeout = options_.rpc_timeout, .secrets = *secrets});
      });
      if (!st.ok()) {
        events_.Record(content_ref, "Warning", "SnapshotDeleteError",
                       StrCat("Failed to delete snapshot: ", st.message()));
        return st;
      }
    }
  }
  // DeleteSnapshot is idempotent, so a crash before this write only repeats it.
  return MutateTyped<VolumeSnapshotContent>(
      registry_, ContentsKind(), "", content.metadata.name, content.metadata.uid, apiserver::Subresource::kMain,
      [](VolumeSnapshotContent& c) { return c.metadata.SetFinalizer(kContentBoundFinalizer, false); });
}

}  // namespace berth::controllers
