#include "controllers/volume/attacher.h"

#include <algorithm>
#include <set>
#include <utility>

#include "api/types/core_node.h"
#include "api/types/core_pod.h"
#include "api/types/storage.h"
#include "client/capability.h"
#include "client/object.h"
#include "client/secrets.h"
#include "client/typed.h"
#include "client/volume_names.h"
#include "client/writes.h"
#include "common/hash.h"
#include "common/status.h"
#include "common/strings.h"
#include "controllers/node_affinity.h"
#include "controllers/taints.h"
#include "csi/driver_client.h"
#include "spdlog/spdlog.h"

namespace berth::controllers {

using namespace ::berth::client;  // the controllers' own client library
namespace {

using nlohmann::json;
using types::PersistentVolume;
using types::Pod;
using types::VolumeAttachment;

const api::KindInfo& Attachments() { return K("volumeattachments", "storage.k8s.io"); }

// Pods informer index: "ns/claim" → the pods whose volumes name that claim.
constexpr char kPodsByClaim[] = "attach-detach/pods-by-claim";

std::string NodeNameOf(const json& o) { return Str(o, {"spec", "nodeName"}); }
std::string SourcePv(const json& attachment) { return Str(attachment, {"spec", "source", "persistentVolumeName"}); }

bool PodFinished(const Pod& pod) { return pod.status.phase == "Succeeded" || pod.status.phase == "Failed"; }

// Kubernetes' IsPodTerminated: finished, or being deleted with no container
// running (a status neither waiting nor terminated counts as running; no
// statuses at all, as without a container runtime: none runs). Its volumes
// are no longer wanted; detach safety below decides when they go.
bool PodTerminated(const Pod& pod) {
  if (PodFinished(pod)) return true;
  if (!pod.metadata.Deleting()) return false;
  for (const auto* statuses : {&pod.status.init_container_statuses, &pod.status.container_statuses,
                               &pod.status.ephemeral_container_statuses}) {
    for (const auto& st : *statuses) {
      if (st.state.terminated.is_null() && st.state.waiting.is_null()) return false;
    }
  }
  return true;
}

// Sets `error` to the status's message, keeping the time of an identical
// one: a repeated failure writes nothing, so the write cannot re-trigger the
// sync and defeat the work queue's backoff.
void SetError(std::optional<types::VolumeError>& error, const absl::Status& st) {
  const std::string message(st.message());
  if (error && error->message == message) return;
  error.emplace();
  error->time = NowRfc3339();
  error->message = message;
}

// Writes the attachment's status through `edit` when it changes it.
absl::Status EditAttachmentStatus(apiserver::Registry& registry, const VolumeAttachment& va,
                                  const std::function<void(types::VolumeAttachmentStatus&)>& edit) {
  return MutateTyped<VolumeAttachment>(registry, Attachments(), "", va.metadata.name, va.metadata.uid,
                                       apiserver::Subresource::kStatus, [&](VolumeAttachment& fresh) {
                                         const types::VolumeAttachmentStatus before = fresh.status;
                                         edit(fresh.status);
                                         return !(fresh.status == before);
                                       });
}

// The PV's CSI source (an empty one for other volume types).
const types::CSIPersistentVolumeSource& CsiOf(const PersistentVolume& pv) {
  static const types::CSIPersistentVolumeSource* const kNone = new types::CSIPersistentVolumeSource();
  return pv.spec.csi ? *pv.spec.csi : *kNone;
}

// external-attacher's shouldEnqueueVAChange: an update that changed
// nothing but the attach or detach error (and the resourceVersion and
// managedFields that come with any write) is this controller's own error
// write; syncing it again would call the driver again at once and defeat
// the retry backoff. A resync (same resourceVersion) and any other change
// are synced.
bool OwnErrorWrite(const json& before, const json& after) {
  if (Str(before, {"metadata", "resourceVersion"}) == Str(after, {"metadata", "resourceVersion"})) return false;
  auto has_error = [](const json& va) {
    const json& status = Field(va, "status");
    return !Field(status, "attachError").is_null() || !Field(status, "detachError").is_null();
  };
  if (!has_error(before) && !has_error(after)) return false;
  auto sanitized = [](json va) {
    if (va.is_object() && va.contains("metadata") && va["metadata"].is_object()) {
      va["metadata"].erase("resourceVersion");
      va["metadata"].erase("managedFields");
    }
    if (va.is_object() && va.contains("status") && va["status"].is_object()) {
      va["status"].erase("attachError");
      va["status"].erase("detachError");
    }
    return va;
  };
  return sanitized(before) == sanitized(after);
}

}  // namespace

std::string AttacherFinalizer(const std::string& driver) {
  std::string sanitized = driver;
  for (char& c : sanitized) {
    const bool keep =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_';
    if (!keep) c = '-';
  }
  return StrCat("external-attacher/", sanitized);
}

// ---------------------------------------------------------------------------
// AttachDetachController

AttachDetachController::AttachDetachController(apiserver::Registry& registry, AttachDetachInformers informers,
                                               Options options)
    : registry_(registry),
      informers_(informers),
      options_(options),
      clock_(options_.clock != nullptr ? *options_.clock : RealClock()),
      events_(registry, "attachdetach-controller"),
      queue_(WorkQueue::Options{.clock = &clock_}) {}

AttachDetachController::~AttachDetachController() { Stop(); }

void AttachDetachController::RegisterHandlers() {
  auto pod_node = [this](const json& pod) {
    if (std::string n = NodeNameOf(pod); !n.empty()) queue_.Add(n);
  };
  informers_.pods.AddHandlers({
      .on_add = pod_node,
      .on_update =
          [pod_node](const json& before, const json& after) {
            pod_node(before);
            pod_node(after);
          },
      .on_delete =
          [this, pod_node](const json& pod) {
            pod_node(pod);
            absl::MutexLock lock(&mu_);
            const std::string prefix = Uid(pod) + "/";
            for (auto it = reported_.lower_bound(prefix); it != reported_.end() && it->first.starts_with(prefix);) {
              it = reported_.erase(it);
            }
          },
  });
  auto attachment_node = [this](const json& va) {
    if (std::string n = NodeNameOf(va); !n.empty()) queue_.Add(n);
  };
  informers_.attachments.AddHandlers({
      .on_add = attachment_node,
      .on_update = [attachment_node](const json&, const json& after) { attachment_node(after); },
      .on_delete = attachment_node,
  });
  informers_.nodes.AddHandlers({
      .on_add = [this](const json& n) { queue_.Add(Name(n)); },
      .on_update =
          [this](const json& before, const json& after) {
            // Heartbeats change nothing here; volumesInUse, annotations,
            // readiness and the out-of-service taint do.
            if (Field(Field(before, "status"), "volumesInUse") != Field(Field(after, "status"), "volumesInUse") ||
                Field(Field(before, "metadata"), "annotations") != Field(Field(after, "metadata"), "annotations") ||
                NodeReadyStatus(before) != NodeReadyStatus(after) ||
                HasTaintKey(before, kTaintNodeOutOfService) != HasTaintKey(after, kTaintNodeOutOfService)) {
              queue_.Add(Name(after));
            }
          },
      .on_delete = [this](const json& n) { queue_.Add(Name(n)); },
  });
  // A claim becoming Bound or its PV appearing changes the desired state of
  // the nodes whose pods use that claim only (found by index: this runs
  // once per provisioned volume, so no scan of every node and attachment).
  informers_.pods.AddIndex(kPodsByClaim, [](const json& pod) {
    std::vector<std::string> claims;
    for (const auto& v : Field(Field(pod, "spec"), "volumes")) {
      if (std::string c = PodVolumeClaim(pod, v); !c.empty()) claims.push_back(Ns(pod) + "/" + c);
    }
    return claims;
  });
  auto claim_nodes = [this](const std::string& claim_key) {
    for (const auto& pod : informers_.pods.ByIndex(kPodsByClaim, claim_key)) {
      if (std::string n = NodeNameOf(pod); !n.empty()) queue_.Add(n);
    }
  };
  informers_.claims.AddHandlers({.on_add = nullptr,
                                 .on_update =
                                     [claim_nodes](const json& before, const json& after) {
                                       if (Str(before, {"status", "phase"}) != Str(after, {"status", "phase"}) ||
                                           Str(before, {"spec", "volumeName"}) != Str(after, {"spec", "volumeName"})) {
                                         claim_nodes(ObjectKey(after));
                                       }
                                     },
                                 .on_delete = nullptr});
  informers_.volumes.AddHandlers({
      .on_add =
          [claim_nodes](const json& pv) {
            const json& ref = Field(Field(pv, "spec"), "claimRef");
            if (!ref.is_null()) claim_nodes(Str(ref, {"namespace"}) + "/" + Str(ref, {"name"}));
          },
      .on_update = nullptr,
      .on_delete = [this](const json&) { EnqueueAllNodes(); },  // rare: every node re-checks
  });
  auto any = [this](const json&) { EnqueueAllNodes(); };
  informers_.csidrivers.AddHandlers(
      {.on_add = any, .on_update = [this](const json&, const json&) { EnqueueAllNodes(); }, .on_delete = any});
}

void AttachDetachController::EnqueueAllNodes() {
  for (const auto& n : informers_.nodes.List()) queue_.Add(Name(n));
  // Attachments can outlive their Node object: those nodes are synced too.
  informers_.attachments.Select([this](const json& va) {
    if (std::string n = NodeNameOf(va); !n.empty()) queue_.Add(n);
    return false;
  });
}

void AttachDetachController::Start() {
  StartWorkers(workers_, options_.workers, queue_, "attach-detach",
               [this](const std::string& node) { return SyncNode(node); });
}

void AttachDetachController::Stop() {
  queue_.ShutDown();
  for (auto& w : workers_) w.join();
  workers_.clear();
}

absl::StatusOr<bool> AttachDetachController::AttachRequired(const std::string& driver) const {
  std::shared_ptr<const json> csidriver = informers_.csidrivers.GetSharedByKey(driver);
  if (!csidriver) return true;  // no CSIDriver object: attach, as Kubernetes does
  BERTH_ASSIGN_OR_RETURN(const types::CSIDriver typed, DecodeAs<types::CSIDriver>(*csidriver));
  return typed.spec.attach_required.value_or(true);
}

absl::StatusOr<std::map<std::string, AttachDetachController::Wanted>> AttachDetachController::DesiredState(
    const types::Node& node) const {
  std::map<std::string, Wanted> out;
  const bool keep_terminated = node.metadata.Annotation(kAnnKeepTerminatedPodVolumes) == "true";
  const std::string& node_name = node.metadata.name;
  for (const auto& pod_json : informers_.pods.Select([&](const json& p) { return NodeNameOf(p) == node_name; })) {
    BERTH_ASSIGN_OR_RETURN(const Pod pod, DecodeAs<Pod>(pod_json));
    if (PodTerminated(pod) && !keep_terminated) continue;
    for (const auto& v : pod.spec.volumes) {
      bool ephemeral = false;
      const std::string claim_name = pod.VolumeClaim(v, &ephemeral);
      if (claim_name.empty()) continue;
      std::shared_ptr<const json> claim_json =
          informers_.claims.GetSharedByKey(pod.metadata.namespace_ + "/" + claim_name);
      if (!claim_json) continue;
      BERTH_ASSIGN_OR_RETURN(const types::PersistentVolumeClaim claim,
                             DecodeAs<types::PersistentVolumeClaim>(*claim_json));
      if (claim.status.phase != "Bound") continue;
      if (ephemeral) {  // someone else's claim of that name is not this pod's volume
        const types::OwnerReference* owner = claim.metadata.Controller();
        if (owner == nullptr || owner->uid != pod.metadata.uid) continue;
      }
      const std::string& pv_name = claim.spec.volume_name;
      std::shared_ptr<const json> pv_json = pv_name.empty() ? nullptr : informers_.volumes.GetSharedByKey(pv_name);
      if (!pv_json) continue;
      BERTH_ASSIGN_OR_RETURN(const PersistentVolume pv, DecodeAs<PersistentVolume>(*pv_json));
      const types::CSIPersistentVolumeSource& csi = CsiOf(pv);
      if (csi.driver.empty() || csi.volume_handle.empty()) continue;
      BERTH_ASSIGN_OR_RETURN(const bool attach, AttachRequired(csi.driver));
      if (!attach) continue;
      Wanted& w = out[AttachmentName(csi.volume_handle, csi.driver, node_name)];
      w.pv = pv_name;
      w.driver = csi.driver;
      w.handle = csi.volume_handle;
      w.pods.push_back(IdentityOf(pod));
    }
  }
  return out;
}

absl::Status AttachDetachController::SyncNode(const std::string& node) {
  std::optional<types::Node> node_obj;
  if (std::shared_ptr<const json> n = informers_.nodes.GetSharedByKey(node)) {
    BERTH_ASSIGN_OR_RETURN(node_obj, DecodeAs<types::Node>(*n));
  }
  std::map<std::string, Wanted> desired;  // attachments only to nodes that exist
  if (node_obj) {
    BERTH_ASSIGN_OR_RETURN(desired, DesiredState(*node_obj));
  }
  std::vector<VolumeAttachment> actual;
  for (const auto& va : informers_.attachments.Select([&](const json& va) { return NodeNameOf(va) == node; })) {
    BERTH_ASSIGN_OR_RETURN(actual.emplace_back(), DecodeAs<VolumeAttachment>(va));
  }
  std::set<std::string> in_use;
  if (node_obj) in_use.insert(node_obj->status.volumes_in_use.begin(), node_obj->status.volumes_in_use.end());
  absl::Status result;
  std::set<std::string> existing;
  for (const auto& va : actual) {
    const std::string& name = va.metadata.name;
    existing.insert(name);
    auto want = desired.find(name);
    if (want != desired.end()) {
      {
        absl::MutexLock lock(&mu_);
        unwanted_since_.erase(name);
      }
      ReportToPods(want->second, va);
      continue;
    }
    if (va.metadata.Deleting()) continue;  // the attacher is detaching it
    // Not wanted: detach once the node agent has unmounted it.
    absl::StatusOr<std::optional<PersistentVolume>> pv = SourceVolume(va);
    if (!pv.ok()) {  // never detach on a volume we cannot read
      result.Update(pv.status());
      continue;
    }
    const std::string unique = *pv ? UniqueVolumeName(CsiOf(**pv).driver, CsiOf(**pv).volume_handle) : "";
    if (node_obj && !unique.empty() && in_use.contains(unique)) {
      // Still mounted there (kcm 1.26+): never detached from a healthy node;
      // from one whose Ready is not True after maxWaitForUnmountDuration;
      // at once from one tainted out-of-service (non-graceful shutdown: the
      // admin says it is off).
      const absl::Time now = clock_.Now();
      absl::Time since;
      {
        absl::MutexLock lock(&mu_);
        since = unwanted_since_.try_emplace(name, now).first->second;
      }
      const absl::Duration waited = now - since;
      const bool out_of_service = std::any_of(node_obj->spec.taints.begin(), node_obj->spec.taints.end(),
                                              [](const types::Taint& t) { return t.key == kTaintNodeOutOfService; });
      const types::NodeCondition* ready = node_obj->Condition("Ready");
      if (out_of_service) {
        spdlog::warn("attach-detach: force-detaching {} from {}: the node has the {} taint", unique, node,
                     kTaintNodeOutOfService);
      } else if (ready != nullptr && ready->status == "True") {
        continue;  // the node's next volumesInUse or readiness change brings it back
      } else if (waited <= options_.max_wait_for_unmount) {
        queue_.AddAfter(node,
                        std::clamp(options_.max_wait_for_unmount - waited, absl::Milliseconds(100), absl::Seconds(5)));
        continue;
      } else {
        spdlog::warn("attach-detach: force-detaching {} from unhealthy node {}: still reported in use after {}", unique,
                     node, absl::FormatDuration(waited));
      }
    }
    auto st = registry_.Delete(
        Attachments(), "", name,
        {.uid = va.metadata.uid, .resource_version = std::nullopt, .grace_period_seconds = std::nullopt});
    if (!st.ok() && st.status().code() != absl::StatusCode::kNotFound) result.Update(st.status());
    absl::MutexLock lock(&mu_);
    unwanted_since_.erase(name);
  }
  for (const auto& [name, want] : desired) {
    if (existing.contains(name)) continue;
    VolumeAttachment va;
    va.api_version = "storage.k8s.io/v1";
    va.kind = "VolumeAttachment";
    va.metadata.name = name;
    va.spec.attacher = want.driver;
    va.spec.node_name = node;
    va.spec.source.persistent_volume_name = want.pv;
    auto created = registry_.Create(Attachments(), "", types::Encode(va));
    if (!created.ok() && created.status().code() != absl::StatusCode::kAlreadyExists) {
      result.Update(created.status());
      for (const auto& pod : want.pods) {
        events_.Record(
            pod, "Warning", "FailedAttachVolume",
            StrCat("AttachVolume.Attach failed for volume \"", want.pv, "\" : ", created.status().message()));
      }
    }
  }
  if (node_obj) result.Update(UpdateNodeVolumesAttached(*node_obj, actual));
  return result;
}

absl::StatusOr<std::optional<PersistentVolume>> AttachDetachController::SourceVolume(const VolumeAttachment& va) const {
  const std::string pv_name = va.spec.source.persistent_volume_name.value_or("");
  std::shared_ptr<const json> pv = pv_name.empty() ? nullptr : informers_.volumes.GetSharedByKey(pv_name);
  if (!pv) return std::nullopt;
  return DecodeAs<PersistentVolume>(*pv);
}

absl::Status AttachDetachController::UpdateNodeVolumesAttached(const types::Node& node,
                                                               const std::vector<VolumeAttachment>& attachments) {
  std::set<std::string> names;
  for (const auto& va : attachments) {
    if (!va.status.attached) continue;
    BERTH_ASSIGN_OR_RETURN(const std::optional<PersistentVolume> pv, SourceVolume(va));
    if (pv) names.insert(UniqueVolumeName(CsiOf(*pv).driver, CsiOf(*pv).volume_handle));
  }
  std::vector<types::AttachedVolume> list;
  for (const auto& n : names) {
    types::AttachedVolume& v = list.emplace_back();
    v.name = n;
  }
  if (node.status.volumes_attached == list) return absl::OkStatus();
  return MutateTyped<types::Node>(registry_, K("nodes"), "", node.metadata.name, node.metadata.uid,
                                  apiserver::Subresource::kStatus, [&](types::Node& fresh) {
                                    if (fresh.status.volumes_attached == list) return false;
                                    fresh.status.volumes_attached = list;
                                    return true;
                                  });
}

void AttachDetachController::ReportToPods(const Wanted& wanted, const VolumeAttachment& attachment) {
  const types::VolumeAttachmentStatus& status = attachment.status;
  const std::string error = status.attach_error ? status.attach_error->message : "";
  std::string outcome;
  if (status.attached) {
    outcome = "attached";
  } else if (!error.empty()) {
    outcome = "error: " + error;
  }
  if (outcome.empty()) return;
  for (const auto& pod : wanted.pods) {
    const std::string key = StrCat(Uid(pod), "/", attachment.metadata.name);
    {
      absl::MutexLock lock(&mu_);
      std::string& last = reported_[key];
      if (last == outcome) continue;
      last = outcome;
    }
    if (outcome == "attached") {
      events_.Record(pod, "Normal", "SuccessfulAttachVolume",
                     StrCat("AttachVolume.Attach succeeded for volume \"", wanted.pv, "\""));
    } else {
      events_.Record(pod, "Warning", "FailedAttachVolume",
                     StrCat("AttachVolume.Attach failed for volume \"", wanted.pv, "\" : rpc error: ", error));
    }
  }
}

// ---------------------------------------------------------------------------
// Attacher

Attacher::Attacher(apiserver::Registry& registry, DriverDirectory& drivers, AttacherInformers informers,
                   Options options)
    : registry_(registry),
      drivers_(drivers),
      informers_(informers),
      options_(std::move(options)),
      own_monitor_(options_.monitor == nullptr ? std::make_unique<DriverMonitor>(drivers) : nullptr),
      monitor_(options_.monitor != nullptr ? *options_.monitor : *own_monitor_),
      finalizer_(AttacherFinalizer(options_.driver)),
      events_(registry, StrCat("csi-attacher ", options_.driver)),
      attachment_queue_(WorkQueue::Options{
          .base_delay = options_.retry_start, .max_delay = options_.retry_max, .clock = options_.clock}),
      volume_queue_(WorkQueue::Options{
          .base_delay = options_.retry_start, .max_delay = options_.retry_max, .clock = options_.clock}) {}

Attacher::~Attacher() { Stop(); }

void Attacher::RegisterHandlers() {
  auto ours = [this](const json& va) { return Str(va, {"spec", "attacher"}) == options_.driver; };
  informers_.attachments.AddHandlers({
      .on_add =
          [this, ours](const json& va) {
            if (ours(va)) attachment_queue_.Add(Name(va));
          },
      .on_update =
          [this, ours](const json& before, const json& va) {
            if (ours(va) && !OwnErrorWrite(before, va)) attachment_queue_.Add(Name(va));
          },
      .on_delete =
          [this, ours](const json& va) {
            if (ours(va) && !SourcePv(va).empty()) volume_queue_.Add(SourcePv(va));
          },
  });
  auto volume = [this](const json& pv) {
    if (HasFinalizer(pv, finalizer_)) volume_queue_.Add(Name(pv));
  };
  informers_.volumes.AddHandlers(
      {.on_add = volume, .on_update = [volume](const json&, const json& pv) { volume(pv); }, .on_delete = nullptr});
  // A node (re-)registering the driver: retry its waiting attachments now.
  auto csinode = [this, ours](const json& n) {
    const std::string node = Name(n);
    informers_.attachments.Select([&](const json& va) {
      if (ours(va) && NodeNameOf(va) == node) attachment_queue_.Add(Name(va));
      return false;
    });
  };
  informers_.csinodes.AddHandlers(
      {.on_add = csinode, .on_update = [csinode](const json&, const json& n) { csinode(n); }, .on_delete = nullptr});
}

void Attacher::Start() {
  const std::string name = StrCat("attacher ", options_.driver);
  StartWorkers(workers_, options_.workers, attachment_queue_, name,
               ParkAware([this](const std::string& k) { return SyncAttachment(k); }));
  StartWorkers(workers_, 1, volume_queue_, name + ": volume", [this](const std::string& k) { return SyncVolume(k); });
}

void Attacher::Stop() {
  attachment_queue_.ShutDown();
  volume_queue_.ShutDown();
  for (auto& w : workers_) w.join();
  workers_.clear();
  monitor_.Unpark(attachment_queue_);
}

absl::Status Attacher::SyncAttachment(const std::string& name) {
  std::shared_ptr<const json> cached = informers_.attachments.GetSharedByKey(name);
  if (!cached || Str(*cached, {"spec", "attacher"}) != options_.driver) return absl::OkStatus();
  // Decide on the stored object: the cache may lag our own last write.
  absl::StatusOr<VolumeAttachment> fresh = GetTyped<VolumeAttachment>(registry_, Attachments(), "", name);
  if (!fresh.ok()) return fresh.status().code() == absl::StatusCode::kNotFound ? absl::OkStatus() : fresh.status();
  return fresh->metadata.Deleting() ? Detach(*fresh) : Attach(*fresh);
}

std::string Attacher::EndpointNode(const PersistentVolume& pv, const VolumeAttachment& attachment) const {
  std::string node = VolumeNode(registry_, pv);
  return node.empty() ? attachment.spec.node_name : node;
}

absl::StatusOr<std::string> Attacher::NodeId(const VolumeAttachment& va, bool annotation_first) const {
  const std::string& recorded = va.metadata.Annotation(kAnnAttachNodeId);
  if (annotation_first && !recorded.empty()) return recorded;
  if (std::shared_ptr<const json> csinode = informers_.csinodes.GetSharedByKey(va.spec.node_name)) {
    BERTH_ASSIGN_OR_RETURN(const types::CSINode typed, DecodeAs<types::CSINode>(*csinode));
    if (const types::CSINodeDriver* d = typed.Driver(options_.driver); d != nullptr && !d->node_id.empty()) {
      return d->node_id;
    }
  }
  return recorded;
}

absl::StatusOr<google::protobuf::Map<std::string, std::string>> Attacher::PublishSecrets(const PersistentVolume& pv) {
  google::protobuf::Map<std::string, std::string> out;
  BERTH_ASSIGN_OR_RETURN(const SecretData secrets,
                         PvSecret(registry_, CsiOf(pv).controller_publish_secret_ref, "controllerPublishSecretRef"));
  for (const auto& [k, v] : secrets) out[k] = v;
  return out;
}

namespace {
// The PV an attachment names, read fresh; a missing one is NOT_FOUND naming it.
absl::StatusOr<PersistentVolume> GetVolume(apiserver::Registry& registry, const std::string& name) {
  absl::StatusOr<PersistentVolume> pv = GetTyped<PersistentVolume>(registry, K("persistentvolumes"), "", name);
  if (pv.status().code() == absl::StatusCode::kNotFound) {
    return absl::NotFoundError(StrCat("persistentvolume \"", name, "\" not found"));
  }
  return pv;
}
}  // namespace

absl::Status Attacher::Attach(const VolumeAttachment& va) {
  // Attached stays attached: nothing below (a driver blip, a lagging cache)
  // may turn a done attachment back into a failed one.
  if (va.status.attached) return absl::OkStatus();
  const std::string& name = va.metadata.name;
  auto fail = [&](const absl::Status& st) {
    events_.Record(IdentityOf(va), "Warning", "AttachFailed", std::string(st.message()));
    absl::Status written = EditAttachmentStatus(registry_, va, [&](types::VolumeAttachmentStatus& s) {
      s.attached = false;
      SetError(s.attach_error, st);
    });
    if (!written.ok()) spdlog::warn("attacher: recording the error on {}: {}", name, written.ToString());
    return st;
  };
  const std::string pv_name = va.spec.source.persistent_volume_name.value_or("");
  if (pv_name.empty()) {
    // Inline (migrated in-tree) volumes carry spec.source.inlineVolumeSpec;
    // berth has no in-tree plugins, so nothing can ever attach them.
    // A final error: recorded, not retried.
    fail(absl::InvalidArgumentError("only persistentVolumeName sources are supported")).IgnoreError();
    return absl::OkStatus();
  }
  absl::StatusOr<PersistentVolume> pv = GetVolume(registry_, pv_name);
  if (!pv.ok()) return fail(pv.status());
  if (pv->metadata.Deleting()) {
    return fail(absl::FailedPreconditionError(StrCat("persistentvolume \"", pv_name, "\" is marked for deletion")));
  }
  const types::CSIPersistentVolumeSource& csi = CsiOf(*pv);
  const std::string endpoint_node = EndpointNode(*pv, va);
  auto can_publish = monitor_.ControllerHasCapability(
      options_.driver, endpoint_node, ::csi::v1::ControllerServiceCapability::RPC::PUBLISH_UNPUBLISH_VOLUME);
  if (!can_publish.ok()) {
    if (IsNotAFailure(can_publish.status())) monitor_.Park(options_.driver, endpoint_node, attachment_queue_, name);
    return fail(can_publish.status());
  }
  if (!*can_publish) {
    // Nothing to call: the attachment is a formality (external-attacher's
    // trivial handler).
    return EditAttachmentStatus(registry_, va, [](types::VolumeAttachmentStatus& s) {
      s.attached = true;
      s.attach_error.reset();
    });
  }
  // The node's ID for this driver: from CSINode, else the one recorded when
  // the attach started.
  const std::string& node = va.spec.node_name;
  absl::StatusOr<std::string> node_id = NodeId(va, /*annotation_first=*/false);
  if (!node_id.ok()) return fail(node_id.status());
  if (node_id->empty()) {
    return fail(absl::FailedPreconditionError(StrCat("CSINode ", node, " does not contain driver ", options_.driver)));
  }
  auto secrets = PublishSecrets(*pv);
  if (!secrets.ok()) return fail(secrets.status());

  // Finalizers first: once ControllerPublish may have run, neither object
  // may vanish before ControllerUnpublish.
  BERTH_RETURN_IF_ERROR(EditFinalizer(registry_, K("persistentvolumes"), IdentityOf(*pv), finalizer_, true));
  BERTH_RETURN_IF_ERROR(
      EditFinalizer(registry_, Attachments(), IdentityOf(va), finalizer_, true, {{kAnnAttachNodeId, *node_id}}));

  ::csi::v1::ControllerPublishVolumeRequest req;
  req.set_volume_id(csi.volume_handle);
  req.set_node_id(*node_id);
  auto modes = monitor_.ControllerSingleNodeModes(options_.driver, endpoint_node);
  if (!modes.ok()) {
    if (IsNotAFailure(modes.status())) monitor_.Park(options_.driver, endpoint_node, attachment_queue_, name);
    return fail(modes.status());
  }
  *req.mutable_volume_capability() = PvVolumeCapability(*pv, *modes);
  req.set_readonly(csi.read_only);
  for (const auto& [k, v] : csi.volume_attributes) (*req.mutable_volume_context())[k] = v;
  ::csi::v1::ControllerPublishVolumeResponse resp;
  absl::Status st = monitor_.Call(options_.driver, endpoint_node, [&](const csi::DriverClient& client) {
    auto published = client.ControllerPublishVolume(
        req, {.timeout = options_.rpc_timeout, .secrets = {secrets->begin(), secrets->end()}});
    if (published.ok()) resp = std::move(*published);
    return published.status();
  });
  if (IsNotAFailure(st)) monitor_.Park(options_.driver, endpoint_node, attachment_queue_, name);
  if (!st.ok()) return fail(st);
  types::StringMap metadata;
  for (const auto& [k, v] : resp.publish_context()) metadata[k] = v;
  spdlog::info("attacher: {} attached to {} ({})", req.volume_id(), node, name);
  return EditAttachmentStatus(registry_, va, [&](types::VolumeAttachmentStatus& s) {
    s.attached = true;
    s.attachment_metadata = metadata;
    s.attach_error.reset();
  });
}

absl::Status Attacher::Detach(const VolumeAttachment& va) {
  if (!va.metadata.HasFinalizer(finalizer_)) return absl::OkStatus();  // never published by us
  const std::string& name = va.metadata.name;
  auto fail = [&](const absl::Status& st) {
    events_.Record(IdentityOf(va), "Warning", "DetachFailed", std::string(st.message()));
    absl::Status written =
        EditAttachmentStatus(registry_, va, [&](types::VolumeAttachmentStatus& s) { SetError(s.detach_error, st); });
    if (!written.ok()) spdlog::warn("attacher: recording the error on {}: {}", name, written.ToString());
    return st;
  };
  const std::string pv_name = va.spec.source.persistent_volume_name.value_or("");
  // Our finalizer keeps the PV while any attachment refers to it; without
  // it there is no volume handle to unpublish.
  absl::StatusOr<PersistentVolume> pv = GetVolume(registry_, pv_name);
  if (!pv.ok()) return fail(pv.status());
  const std::string& node = va.spec.node_name;
  absl::StatusOr<std::string> node_id = NodeId(va, /*annotation_first=*/true);
  if (!node_id.ok()) return fail(node_id.status());
  if (node_id->empty()) {
    return fail(
        absl::FailedPreconditionError(StrCat("the node ID of ", node, " for driver ", options_.driver, " is unknown")));
  }
  auto secrets = PublishSecrets(*pv);
  if (!secrets.ok()) return fail(secrets.status());
  const std::string endpoint_node = EndpointNode(*pv, va);
  ::csi::v1::ControllerUnpublishVolumeRequest req;
  req.set_volume_id(CsiOf(*pv).volume_handle);
  req.set_node_id(*node_id);
  absl::Status st = monitor_.Call(options_.driver, endpoint_node, [&](const csi::DriverClient& client) {
    // NOT_FOUND (the volume or node is gone: nothing is attached) is OK.
    return client.ControllerUnpublishVolume(
        req, {.timeout = options_.rpc_timeout, .secrets = {secrets->begin(), secrets->end()}});
  });
  if (IsNotAFailure(st)) monitor_.Park(options_.driver, endpoint_node, attachment_queue_, name);
  if (!st.ok()) return fail(st);
  spdlog::info("attacher: {} detached from {} ({})", req.volume_id(), node, name);
  BERTH_RETURN_IF_ERROR(EditAttachmentStatus(registry_, va, [](types::VolumeAttachmentStatus& s) {
    s.attached = false;
    s.attachment_metadata.clear();
    s.detach_error.reset();
  }));
  BERTH_RETURN_IF_ERROR(EditFinalizer(registry_, Attachments(), IdentityOf(va), finalizer_, false));
  volume_queue_.Add(pv_name);
  return absl::OkStatus();
}

absl::Status Attacher::SyncVolume(const std::string& name) {
  absl::StatusOr<PersistentVolume> pv = GetTyped<PersistentVolume>(registry_, K("persistentvolumes"), "", name);
  if (!pv.ok()) return pv.status().code() == absl::StatusCode::kNotFound ? absl::OkStatus() : pv.status();
  // Only a PV being deleted gives the finalizer up (as external-attacher):
  // deciding on a live PV races with a new attachment that found the
  // finalizer already there.
  if (!pv->metadata.HasFinalizer(finalizer_) || !pv->metadata.Deleting()) return absl::OkStatus();
  // Ask the store, not the cache: an attachment created a moment ago must
  // keep the finalizer.
  BERTH_ASSIGN_OR_RETURN(auto selector,
                         apiserver::FieldSelector::Parse(StrCat("spec.source.persistentVolumeName=", name)));
  apiserver::ListOptions options;
  options.fields = selector;
  BERTH_ASSIGN_OR_RETURN(apiserver::ListPage page, registry_.List(Attachments(), "", options));
  for (const auto& va_json : page.items) {
    BERTH_ASSIGN_OR_RETURN(const VolumeAttachment va, DecodeAs<VolumeAttachment>(va_json));
    if (va.spec.attacher == options_.driver) return absl::OkStatus();
  }
  return EditFinalizer(registry_, K("persistentvolumes"), IdentityOf(*pv), finalizer_, false);
}

}  // namespace berth::controllers
