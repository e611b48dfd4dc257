#include "controllers/volume/ephemeral.h"

#include <optional>

#include "client/object.h"
#include "common/strings.h"

namespace berth::controllers {

using namespace ::berth::client;  // the controllers' own client library
namespace {

bool HasEphemeralVolume(const json& pod) {
  const json& volumes = Field(Field(pod, "spec"), "volumes");
  if (!volumes.is_array()) return false;
  for (const auto& v : volumes) {
    if (Field(v, "ephemeral").is_object()) return true;
  }
  return false;
}

}  // namespace

EphemeralController::EphemeralController(apiserver::Registry& registry, Informer& pods, Informer& claims,
                                         Options options)
    : registry_(registry), pods_(pods), claims_(claims), options_(options), events_(registry, "ephemeral_volume") {}

EphemeralController::~EphemeralController() { Stop(); }

void EphemeralController::RegisterHandlers() {
  auto pod_changed = [this](const json& pod) {
    if (HasEphemeralVolume(pod)) queue_.Add(ObjectKey(pod));
  };
  pods_.AddHandlers({.on_add = pod_changed,
                     .on_update = [pod_changed](const json&, const json& pod) { pod_changed(pod); },
                     .on_delete = nullptr});
  // A claim deleted by hand is made again while its pod lives.
  claims_.AddHandlers({.on_add = nullptr, .on_update = nullptr, .on_delete = [this](const json& claim) {
                         const json& refs = Field(Field(claim, "metadata"), "ownerReferences");
                         if (!refs.is_array()) return;
                         for (const auto& r : refs) {
                           if (r.value("controller", false) && Str(r, {"kind"}) == "Pod") {
                             queue_.Add(StrCat(Ns(claim), "/", Str(r, {"name"})));
                           }
                         }
                       }});
}

void EphemeralController::Start() {
  StartWorkers(workers_, options_.workers, queue_, "ephemeral volumes: pod",
               [this](const std::string& k) { return SyncPod(k); });
}

void EphemeralController::Stop() {
  queue_.ShutDown();
  for (auto& w : workers_) w.join();
  workers_.clear();
}

absl::Status EphemeralController::SyncPod(const std::string& key) {
  std::shared_ptr<const json> pod = pods_.GetSharedByKey(key);
  // A pod being deleted gets no new claims (its own are garbage-collected).
  if (!pod || Deleting(*pod)) return absl::OkStatus();
  const json volumes = Field(Field(*pod, "spec"), "volumes");
  if (!volumes.is_array()) return absl::OkStatus();
  absl::Status result;
  for (const auto& v : volumes) {
    const json& eph = Field(v, "ephemeral");
    if (!eph.is_object()) continue;
    const json& tmpl = Field(eph, "volumeClaimTemplate");
    const std::string name = StrCat(Name(*pod), "-", Str(v, {"name"}));
    std::optional<json> existing = claims_.Get(Ns(*pod), name);
    if (!existing) {
      json claim = {{"apiVersion", "v1"},
                    {"kind", "PersistentVolumeClaim"},
                    {"metadata",
                     {{"name", name},
                      {"namespace", Ns(*pod)},
                      {"ownerReferences",
                       {{{"apiVersion", "v1"},
                         {"kind", "Pod"},
                         {"name", Name(*pod)},
                         {"uid", Uid(*pod)},
                         {"controller", true},
                         {"blockOwnerDeletion", true}}}}}},
                    {"spec", Field(tmpl, "spec").is_object() ? Field(tmpl, "spec") : json::object()}};
      const json& meta = Field(tmpl, "metadata");
      for (const char* f : {"labels", "annotations"}) {
        if (Field(meta, f).is_object() && !Field(meta, f).empty()) claim["metadata"][f] = Field(meta, f);
      }
      auto created = registry_.Create(K("persistentvolumeclaims"), Ns(*pod), claim);
      if (created.ok()) continue;
      if (created.status().code() != absl::StatusCode::kAlreadyExists) {
        events_.Record(*pod, "Warning", "FailedBinding", StrCat("PVC creation failed: ", created.status().message()));
        result.Update(created.status());
        continue;
      }
      // Made meanwhile (by us on another worker, or by someone else).
      auto stored = registry_.Get(K("persistentvolumeclaims"), Ns(*pod), name);
      if (!stored.ok()) {
        result.Update(stored.status());
        continue;
      }
      existing = std::move(*stored);
    }
    if (!ControlledByPod(*existing, *pod)) {
      const std::string message = StrCat("PVC ", Ns(*pod), "/", name, " was not created for pod ", Ns(*pod), "/",
                                         Name(*pod), " (pod is not owner)");
      events_.Record(*pod, "Warning", "FailedBinding", message);
      result.Update(absl::FailedPreconditionError(message));
    }
  }
  return result;
}

}  // namespace berth::controllers
