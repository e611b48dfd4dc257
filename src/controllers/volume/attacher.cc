#include "controllers/volume/attacher.h"

#include <algorithm>
#include <set>
#include <utility>

#include "client/capability.h"
#include "client/object.h"
#include "client/secrets.h"
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

const api::KindInfo& Attachments() { return K("volumeattachments", "storage.k8s.io"); }

// Pods informer index: "ns/claim" → the pods whose volumes name that claim.
constexpr char kPodsByClaim[] = "attach-detach/pods-by-claim";

std::string NodeNameOf(const json& o) { return Str(o, {"spec", "nodeName"}); }
std::string SourcePv(const json& attachment) { return Str(attachment, {"spec", "source", "persistentVolumeName"}); }

bool PodFinished(const json& pod) {
  const std::string phase = Str(pod, {"status", "phase"});
  return phase == "Succeeded" || phase == "Failed";
}

// Kubernetes' IsPodTerminated: finished, or being deleted with no container
// running (a status neither waiting nor terminated counts as running; no
// statuses at all, as without a container runtime: none runs). Its volumes
// are no longer wanted; detach safety below decides when they go.
bool PodTerminated(const json& pod) {
  if (PodFinished(pod)) return true;
  if (!Deleting(pod)) return false;
  for (const char* list : {"initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses"}) {
    const json& statuses = Field(Field(pod, "status"), list);
    for (const auto& st : statuses.is_array() ? statuses : json::array()) {
      const json& state = Field(st, "state");
      if (Field(state, "terminated").is_null() && Field(state, "waiting").is_null()) return false;
    }
  }
  return true;
}

// Sets status[field] to the error, keeping the time of an identical one: a
// repeated failure writes nothing, so the write cannot re-trigger the sync
// and defeat the work queue's backoff.
void SetError(json& status, const char* field, const absl::Status& st) {
  const std::string message(st.message());
  if (Str(status, {field, "message"}) == message) return;
  status[field] = {{"time", NowRfc3339()}, {"message", message}};
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
  for (int i = 0; i < options_.workers; ++i) {
    workers_.emplace_back(
        [this] { RunWorker(queue_, "attach-detach", [this](const std::string& node) { return SyncNode(node); }); });
  }
}

void AttachDetachController::Stop() {
  queue_.ShutDown();
  for (auto& w : workers_) w.join();
  workers_.clear();
}

bool AttachDetachController::AttachRequired(const std::string& driver) const {
  std::optional<json> csidriver = informers_.csidrivers.Get("", driver);
  if (!csidriver) return true;  // no CSIDriver object: attach, as Kubernetes does
  const json& required = Field(Field(*csidriver, "spec"), "attachRequired");
  return !required.is_boolean() || required.get<bool>();
}

std::map<std::string, AttachDetachController::Wanted> AttachDetachController::DesiredState(
    const std::string& node) const {
  std::map<std::string, Wanted> out;
  std::optional<json> node_obj = informers_.nodes.Get("", node);
  if (!node_obj) return out;  // attachments only to nodes that exist
  const bool keep_terminated = Annotation(*node_obj, kAnnKeepTerminatedPodVolumes) == "true";
  std::vector<json> pods = informers_.pods.Select([&](const json& p) { return NodeNameOf(p) == node; });
  for (const auto& pod : pods) {
    if (PodTerminated(pod) && !keep_terminated) continue;
    const json& volumes = Field(Field(pod, "spec"), "volumes");
    if (!volumes.is_array()) continue;
    for (const auto& v : volumes) {
      bool ephemeral = false;
      const std::string claim_name = PodVolumeClaim(pod, v, &ephemeral);
      if (claim_name.empty()) continue;
      std::optional<json> claim = informers_.claims.Get(Ns(pod), claim_name);
      if (!claim || Str(*claim, {"status", "phase"}) != "Bound") continue;
      if (ephemeral && !ControlledByPod(*claim, pod)) continue;  // someone else's claim of that name
      const std::string pv_name = Str(*claim, {"spec", "volumeName"});
      std::optional<json> pv = pv_name.empty() ? std::nullopt : informers_.volumes.Get("", pv_name);
      if (!pv) continue;
      const std::string driver = Str(*pv, {"spec", "csi", "driver"});
      const std::string handle = Str(*pv, {"spec", "csi", "volumeHandle"});
      if (driver.empty() || handle.empty() || !AttachRequired(driver)) continue;
      Wanted& w = out[AttachmentName(handle, driver, node)];
      w.pv = pv_name;
      w.driver = driver;
      w.handle = handle;
      w.pods.push_back(pod);
    }
  }
  return out;
}

absl::Status AttachDetachController::SyncNode(const std::string& node) {
  std::map<std::string, Wanted> desired = DesiredState(node);
  std::vector<json> actual = informers_.attachments.Select([&](const json& va) { return NodeNameOf(va) == node; });
  std::optional<json> node_obj = informers_.nodes.Get("", node);
  std::set<std::string> in_use;
  if (node_obj) {
    for (const auto& v : Field(Field(*node_obj, "status"), "volumesInUse")) {
      if (v.is_string()) in_use.insert(v.get<std::string>());
    }
  }
  absl::Status result;
  std::set<std::string> existing;
  for (const auto& va : actual) {
    const std::string name = Name(va);
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
    if (Deleting(va)) continue;  // the attacher is detaching it
    // Not wanted: detach once the node agent has unmounted it.
    std::optional<json> pv = informers_.volumes.Get("", SourcePv(va));
    const std::string unique =
        pv ? UniqueVolumeName(Str(*pv, {"spec", "csi", "driver"}), Str(*pv, {"spec", "csi", "volumeHandle"})) : "";
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
      if (HasTaintKey(*node_obj, kTaintNodeOutOfService)) {
        spdlog::warn("attach-detach: force-detaching {} from {}: the node has the {} taint", unique, node,
                     kTaintNodeOutOfService);
      } else if (NodeReadyStatus(*node_obj) == "True") {
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
    auto st =
        registry_.Delete(Attachments(), "", name,
                         {.uid = Uid(va), .resource_version = std::nullopt, .grace_period_seconds = std::nullopt});
    if (!st.ok() && st.status().code() != absl::StatusCode::kNotFound) result.Update(st.status());
    absl::MutexLock lock(&mu_);
    unwanted_since_.erase(name);
  }
  for (const auto& [name, want] : desired) {
    if (existing.contains(name)) continue;
    json va = {
        {"apiVersion", "storage.k8s.io/v1"},
        {"kind", "VolumeAttachment"},
        {"metadata", {{"name", name}}},
        {"spec", {{"attacher", want.driver}, {"nodeName", node}, {"source", {{"persistentVolumeName", want.pv}}}}}};
    auto created = registry_.Create(Attachments(), "", va);
    if (!created.ok() && created.status().code() != absl::StatusCode::kAlreadyExists) {
      result.Update(created.status());
      for (const auto& pod : want.pods) {
        events_.Record(
            pod, "Warning", "FailedAttachVolume",
            StrCat("AttachVolume.Attach failed for volume \"", want.pv, "\" : ", created.status().message()));
      }
    }
  }
  if (node_obj) result.Update(UpdateNodeVolumesAttached(node, actual));
  return result;
}

absl::Status AttachDetachController::UpdateNodeVolumesAttached(const std::string& node,
                                                               const std::vector<json>& attachments) {
  std::set<std::string> names;
  for (const auto& va : attachments) {
    const json& attached = Field(Field(va, "status"), "attached");
    if (!attached.is_boolean() || !attached.get<bool>()) continue;
    std::optional<json> pv = informers_.volumes.Get("", SourcePv(va));
    if (!pv) continue;
    names.insert(UniqueVolumeName(Str(*pv, {"spec", "csi", "driver"}), Str(*pv, {"spec", "csi", "volumeHandle"})));
  }
  json list = json::array();
  for (const auto& n : names) list.push_back({{"name", n}, {"devicePath", ""}});
  std::optional<json> node_obj = informers_.nodes.Get("", node);
  if (!node_obj) return absl::OkStatus();
  const json& current = Field(Field(*node_obj, "status"), "volumesAttached");
  if (current == list || (list.empty() && current.is_null())) return absl::OkStatus();
  return EditStatus(registry_, K("nodes"), *node_obj, [&](json& status) {
    if (list.empty()) {
      status.erase("volumesAttached");
    } else {
      status["volumesAttached"] = list;
    }
  });
}

void AttachDetachController::ReportToPods(const Wanted& wanted, const json& attachment) {
  const json& status = Field(attachment, "status");
  const json& attached = Field(status, "attached");
  std::string outcome;
  if (attached.is_boolean() && attached.get<bool>()) {
    outcome = "attached";
  } else if (std::string message = Str(status, {"attachError", "message"}); !message.empty()) {
    outcome = "error: " + message;
  }
  if (outcome.empty()) return;
  for (const auto& pod : wanted.pods) {
    const std::string key = StrCat(Uid(pod), "/", Name(attachment));
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
                     StrCat("AttachVolume.Attach failed for volume \"", wanted.pv,
                            "\" : rpc error: ", Str(status, {"attachError", "message"})));
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
          [this, ours](const json&, const json& va) {
            if (ours(va)) attachment_queue_.Add(Name(va));
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
  for (int i = 0; i < options_.workers; ++i) {
    workers_.emplace_back([this, name] {
      RunWorker(attachment_queue_, name, ParkAware([this](const std::string& k) { return SyncAttachment(k); }));
    });
  }
  workers_.emplace_back([this, name] {
    RunWorker(volume_queue_, name + ": volume", [this](const std::string& k) { return SyncVolume(k); });
  });
}

void Attacher::Stop() {
  attachment_queue_.ShutDown();
  volume_queue_.ShutDown();
  for (auto& w : workers_) w.join();
  workers_.clear();
  monitor_.Unpark(attachment_queue_);
}

absl::Status Attacher::SyncAttachment(const std::string& name) {
  std::optional<json> cached = informers_.attachments.Get("", name);
  if (!cached || Str(*cached, {"spec", "attacher"}) != options_.driver) return absl::OkStatus();
  // Decide on the stored object: the cache may lag our own last write.
  auto fresh = registry_.Get(Attachments(), "", name);
  if (!fresh.ok()) return fresh.status().code() == absl::StatusCode::kNotFound ? absl::OkStatus() : fresh.status();
  return Deleting(*fresh) ? Detach(*fresh) : Attach(*fresh);
}

std::string Attacher::EndpointNode(const json& pv, const json& attachment) const {
  std::string node = VolumeNode(registry_, pv);
  return node.empty() ? NodeNameOf(attachment) : node;
}

absl::StatusOr<google::protobuf::Map<std::string, std::string>> Attacher::PublishSecrets(const json& pv) {
  google::protobuf::Map<std::string, std::string> out;
  BERTH_ASSIGN_OR_RETURN(const SecretData secrets, PvSecret(registry_, pv, "controllerPublishSecretRef"));
  for (const auto& [k, v] : secrets) out[k] = v;
  return out;
}

absl::Status Attacher::Attach(const json& va) {
  // Attached stays attached: nothing below (a driver blip, a lagging cache)
  // may turn a done attachment back into a failed one.
  if (const json& done = Field(Field(va, "status"), "attached"); done.is_boolean() && done.get<bool>()) {
    return absl::OkStatus();
  }
  auto fail = [&](const absl::Status& st) {
    events_.Record(va, "Warning", "AttachFailed", std::string(st.message()));
    absl::Status written = EditStatus(registry_, Attachments(), va, [&](json& s) {
      s["attached"] = false;
      SetError(s, "attachError", st);
    });
    if (!written.ok()) spdlog::warn("attacher: recording the error on {}: {}", Name(va), written.ToString());
    return st;
  };
  const std::string pv_name = SourcePv(va);
  if (pv_name.empty()) {
    // Inline (migrated in-tree) volumes carry spec.source.inlineVolumeSpec;
    // berth has no in-tree plugins, so nothing can ever attach them.
    // A final error: recorded, not retried.
    fail(absl::InvalidArgumentError("only persistentVolumeName sources are supported")).IgnoreError();
    return absl::OkStatus();
  }
  auto pv = registry_.Get(K("persistentvolumes"), "", pv_name);
  if (!pv.ok()) {
    return fail(pv.status().code() == absl::StatusCode::kNotFound
                    ? absl::NotFoundError(StrCat("persistentvolume \"", pv_name, "\" not found"))
                    : pv.status());
  }
  if (Deleting(*pv)) {
    return fail(absl::FailedPreconditionError(StrCat("persistentvolume \"", pv_name, "\" is marked for deletion")));
  }
  const std::string endpoint_node = EndpointNode(*pv, va);
  auto can_publish = monitor_.ControllerHasCapability(
      options_.driver, endpoint_node, ::csi::v1::ControllerServiceCapability::RPC::PUBLISH_UNPUBLISH_VOLUME);
  if (!can_publish.ok()) {
    if (IsNotAFailure(can_publish.status())) monitor_.Park(options_.driver, endpoint_node, attachment_queue_, Name(va));
    return fail(can_publish.status());
  }
  if (!*can_publish) {
    // Nothing to call: the attachment is a formality (external-attacher's
    // trivial handler).
    return EditStatus(registry_, Attachments(), va, [](json& s) {
      s["attached"] = true;
      s.erase("attachError");
    });
  }
  // The node's ID for this driver: from CSINode, else the one recorded when
  // the attach started.
  const std::string node = NodeNameOf(va);
  std::string node_id;
  if (std::optional<json> csinode = informers_.csinodes.Get("", node)) {
    for (const auto& d : Field(Field(*csinode, "spec"), "drivers")) {
      if (Str(d, {"name"}) == options_.driver) node_id = Str(d, {"nodeID"});
    }
  }
  if (node_id.empty()) node_id = Annotation(va, kAnnAttachNodeId);
  if (node_id.empty()) {
    return fail(absl::FailedPreconditionError(StrCat("CSINode ", node, " does not contain driver ", options_.driver)));
  }
  auto secrets = PublishSecrets(*pv);
  if (!secrets.ok()) return fail(secrets.status());

  // Finalizers first: once ControllerPublish may have run, neither object
  // may vanish before ControllerUnpublish.
  BERTH_RETURN_IF_ERROR(EditFinalizer(registry_, K("persistentvolumes"), *pv, finalizer_, true));
  BERTH_RETURN_IF_ERROR(EditFinalizer(registry_, Attachments(), va, finalizer_, true, {{kAnnAttachNodeId, node_id}}));

  ::csi::v1::ControllerPublishVolumeRequest req;
  req.set_volume_id(Str(*pv, {"spec", "csi", "volumeHandle"}));
  req.set_node_id(node_id);
  auto modes = monitor_.ControllerSingleNodeModes(options_.driver, endpoint_node);
  if (!modes.ok()) {
    if (IsNotAFailure(modes.status())) monitor_.Park(options_.driver, endpoint_node, attachment_queue_, Name(va));
    return fail(modes.status());
  }
  *req.mutable_volume_capability() = PvVolumeCapability(*pv, *modes);
  const json& read_only = Field(Field(Field(*pv, "spec"), "csi"), "readOnly");
  req.set_readonly(read_only.is_boolean() && read_only.get<bool>());
  const json& attributes = Field(Field(Field(*pv, "spec"), "csi"), "volumeAttributes");
  if (attributes.is_object()) {
    for (const auto& [k, v] : attributes.items()) {
      if (v.is_string()) (*req.mutable_volume_context())[k] = v.get<std::string>();
    }
  }
  ::csi::v1::ControllerPublishVolumeResponse resp;
  absl::Status st = monitor_.Call(options_.driver, endpoint_node, [&](const csi::DriverClient& csi) {
    auto published = csi.ControllerPublishVolume(
        req, {.timeout = options_.rpc_timeout, .secrets = {secrets->begin(), secrets->end()}});
    if (published.ok()) resp = std::move(*published);
    return published.status();
  });
  if (IsNotAFailure(st)) monitor_.Park(options_.driver, endpoint_node, attachment_queue_, Name(va));
  if (!st.ok()) return fail(st);
  json metadata = json::object();
  for (const auto& [k, v] : resp.publish_context()) metadata[k] = v;
  spdlog::info("attacher: {} attached to {} ({})", req.volume_id(), node, Name(va));
  return EditStatus(registry_, Attachments(), va, [&](json& s) {
    s["attached"] = true;
    s["attachmentMetadata"] = metadata;
    s.erase("attachError");
  });
}

absl::Status Attacher::Detach(const json& va) {
  if (!HasFinalizer(va, finalizer_)) return absl::OkStatus();  // never published by us
  auto fail = [&](const absl::Status& st) {
    events_.Record(va, "Warning", "DetachFailed", std::string(st.message()));
    absl::Status written = EditStatus(registry_, Attachments(), va, [&](json& s) { SetError(s, "detachError", st); });
    if (!written.ok()) spdlog::warn("attacher: recording the error on {}: {}", Name(va), written.ToString());
    return st;
  };
  const std::string pv_name = SourcePv(va);
  auto pv = registry_.Get(K("persistentvolumes"), "", pv_name);
  if (!pv.ok()) {
    // Our finalizer keeps the PV while any attachment refers to it; without
    // it there is no volume handle to unpublish.
    return fail(pv.status().code() == absl::StatusCode::kNotFound
                    ? absl::NotFoundError(StrCat("persistentvolume \"", pv_name, "\" not found"))
                    : pv.status());
  }
  const std::string node = NodeNameOf(va);
  std::string node_id = Annotation(va, kAnnAttachNodeId);
  if (node_id.empty()) {
    if (std::optional<json> csinode = informers_.csinodes.Get("", node)) {
      for (const auto& d : Field(Field(*csinode, "spec"), "drivers")) {
        if (Str(d, {"name"}) == options_.driver) node_id = Str(d, {"nodeID"});
      }
    }
  }
  if (node_id.empty()) {
    return fail(
        absl::FailedPreconditionError(StrCat("the node ID of ", node, " for driver ", options_.driver, " is unknown")));
  }
  auto secrets = PublishSecrets(*pv);
  if (!secrets.ok()) return fail(secrets.status());
  const std::string endpoint_node = EndpointNode(*pv, va);
  ::csi::v1::ControllerUnpublishVolumeRequest req;
  req.set_volume_id(Str(*pv, {"spec", "csi", "volumeHandle"}));
  req.set_node_id(node_id);
  absl::Status st = monitor_.Call(options_.driver, endpoint_node, [&](const csi::DriverClient& csi) {
    // NOT_FOUND (the volume or node is gone: nothing is attached) is OK.
    return csi.ControllerUnpublishVolume(
        req, {.timeout = options_.rpc_timeout, .secrets = {secrets->begin(), secrets->end()}});
  });
  if (IsNotAFailure(st)) monitor_.Park(options_.driver, endpoint_node, attachment_queue_, Name(va));
  if (!st.ok()) return fail(st);
  spdlog::info("attacher: {} detached from {} ({})", req.volume_id(), node, Name(va));
  BERTH_RETURN_IF_ERROR(EditStatus(registry_, Attachments(), va, [](json& s) {
    s["attached"] = false;
    s.erase("attachmentMetadata");
    s.erase("detachError");
  }));
  BERTH_RETURN_IF_ERROR(EditFinalizer(registry_, Attachments(), va, finalizer_, false));
  volume_queue_.Add(pv_name);
  return absl::OkStatus();
}

absl::Status Attacher::SyncVolume(const std::string& name) {
  auto pv = registry_.Get(K("persistentvolumes"), "", name);
  if (!pv.ok()) return pv.status().code() == absl::StatusCode::kNotFound ? absl::OkStatus() : pv.status();
  // Only a PV being deleted gives the finalizer up (as external-attacher):
  // deciding on a live PV races with a new attachment that found the
  // finalizer already there.
  if (!HasFinalizer(*pv, finalizer_) || !Deleting(*pv)) return absl::OkStatus();
  // Ask the store, not the cache: an attachment created a moment ago must
  // keep the finalizer.
  BERTH_ASSIGN_OR_RETURN(auto selector,
                         apiserver::FieldSelector::Parse(StrCat("spec.source.persistentVolumeName=", name)));
  apiserver::ListOptions options;
  options.fields = selector;
  BERTH_ASSIGN_OR_RETURN(apiserver::ListPage page, registry_.List(Attachments(), "", options));
  for (const auto& va : page.items) {
    if (Str(va, {"spec", "attacher"}) == options_.driver) return absl::OkStatus();
  }
  return EditFinalizer(registry_, K("persistentvolumes"), *pv, finalizer_, false);
}

}  // namespace berth::controllers
