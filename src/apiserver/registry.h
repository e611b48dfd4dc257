// The API's semantics over the store: for every kind, what Kubernetes'
// registry does between a request and etcd — strict decoding, defaults,
// validation, immutable fields, status subresources, namespaces, generated
// names, patches with conflict retry, pod binding.
//
// The HTTP layer (handler.h) and in-process callers (controllers, the node
// agent) both go through a Registry, so the rules hold whoever writes.
//
//   Registry registry(*store);
//   auto pvc = registry.Create(*api::FindResource("", "persistentvolumeclaims"),
//                              "default", manifest);
//
// Thread-safety: thread-safe (the store serialises writes).
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "api/kinds.h"
#include "api/selector.h"
#include "apiserver/api.h"
#include "apiserver/patch.h"
#include "nlohmann/json.hpp"
#include "store/store.h"

namespace berth::apiserver {

using nlohmann::json;

class Registry : public Api {
 public:
  explicit Registry(store::Store& store) : store_(store) {}

  // Creates the namespaces every cluster has (default, kube-system) if absent.
  absl::Status Bootstrap();

  // `ns` is the request's namespace ("" for cluster-scoped kinds).
  absl::StatusOr<json> Create(const api::KindInfo& kind, const std::string& ns, json object) override;
  // Create and Update without a copy: the stored object, shared.
  absl::StatusOr<std::shared_ptr<const json>> CreateShared(const api::KindInfo& kind, const std::string& ns,
                                                           json object) override;
  // And the stored object's JSON text in `text` (Store::CreateShared's):
  // the bytes of the API's response, not serialized again.
  absl::StatusOr<std::shared_ptr<const json>> CreateShared(const api::KindInfo& kind, const std::string& ns,
                                                           json object, std::shared_ptr<const std::string>* text);
  absl::StatusOr<std::shared_ptr<const json>> UpdateShared(const api::KindInfo& kind, const std::string& ns,
                                                           const std::string& name, json object,
                                                           Subresource sub) override;
  // Create for in-process controllers that know the status too (as
  // Subresource::kMainAndStatus is for updates; no URL reaches it): the
  // status given is kept and validated with the object instead of reset —
  // e.g. the provisioner's volume, created Bound to the claim it was made
  // for. Without a status, the kind's initial one, as Create.
  absl::StatusOr<std::shared_ptr<const json>> CreateSharedWithStatus(const api::KindInfo& kind, const std::string& ns,
                                                                     json object);
  // Creates each (namespace, object) as Create does, each succeeding or
  // failing on its own, in one group commit; one result per object.
  std::vector<absl::StatusOr<json>> CreateAll(const api::KindInfo& kind,
                                              std::vector<std::pair<std::string, json>> objects) override;
  absl::StatusOr<json> Get(const api::KindInfo& kind, const std::string& ns, const std::string& name) override;
  // Get without a copy: the stored object, immutable and shared.
  absl::StatusOr<std::shared_ptr<const json>> GetShared(const api::KindInfo& kind, const std::string& ns,
                                                        const std::string& name) override;
  absl::StatusOr<ListPage> List(const api::KindInfo& kind, const std::string& ns, const ListOptions& options) override;
  // PUT. Without metadata.resourceVersion the update is unconditional.
  absl::StatusOr<json> Update(const api::KindInfo& kind, const std::string& ns, const std::string& name, json object,
                              Subresource sub) override;
  absl::StatusOr<json> Patch(const api::KindInfo& kind, const std::string& ns, const std::string& name,
                             std::string_view patch, PatchType type, Subresource sub) override;
  // Returns the object's last state (with deletionTimestamp if finalizers
  // keep it). Deleting a namespace deletes what is in it. Pods are deleted
  // gracefully, as in Kubernetes: a pod bound to a node that has not
  // finished only gets deletionTimestamp (now + grace period) and stays
  // Terminating until its node agent has stopped it and torn its volumes
  // down and deletes it with grace period 0; an unscheduled or finished pod,
  // or gracePeriodSeconds 0 (`--grace-period=0 --force`), goes at once.
  absl::StatusOr<json> Delete(const api::KindInfo& kind, const std::string& ns, const std::string& name,
                              const DeleteOptions& options = {}) override;
  // dryRun=All: the request goes through every step of the write it names
  // — decoding, defaults, admission, validation, immutability, conflicts
  // and preconditions — with the same errors, and returns what would be
  // stored, but nothing is stored and no watcher hears of it.
  absl::StatusOr<json> DryRunCreate(const api::KindInfo& kind, const std::string& ns, json object);
  absl::StatusOr<json> DryRunUpdate(const api::KindInfo& kind, const std::string& ns, const std::string& name,
                                    json object, Subresource sub);
  absl::StatusOr<json> DryRunPatch(const api::KindInfo& kind, const std::string& ns, const std::string& name,
                                   std::string_view patch, PatchType type, Subresource sub);
  // The object as it is (it must exist and meet the preconditions).
  absl::StatusOr<json> DryRunDelete(const api::KindInfo& kind, const std::string& ns, const std::string& name,
                                    const DeleteOptions& options = {});

  // pods/binding: sets spec.nodeName of an unscheduled pod.
  absl::StatusOr<json> BindPod(const std::string& ns, const std::string& name, const std::string& node_name);

  absl::StatusOr<WatchStream> Watch(const api::KindInfo& kind, const std::string& ns,
                                    const std::string& resource_version, const api::LabelSelector& labels) override;

  store::Store& store() { return store_; }

  // Kubernetes' StorageObjectInUseProtection admission: new claims and
  // volumes get kubernetes.io/pvc-protection / pv-protection at create.
  // Only sensible while the PV binder (which removes them) runs, so off
  // by default; the controller manager turns it on.
  void EnableStorageProtectionAdmission(bool on) { storage_protection_admission_ = on; }

 private:
  absl::StatusOr<std::shared_ptr<const json>> UpdateImpl(const api::KindInfo& kind, const std::string& ns,
                                                         const std::string& name, json object, Subresource sub,
                                                         bool dry_run);
  absl::StatusOr<json> PatchImpl(const api::KindInfo& kind, const std::string& ns, const std::string& name,
                                 std::string_view patch, PatchType type, Subresource sub, bool dry_run);
  // With `dry_run`, returns what it would store instead of storing it.
  absl::StatusOr<std::shared_ptr<const json>> UpdateOnce(const api::KindInfo& kind, const std::string& ns,
                                                         const std::string& name, json object, Subresource sub,
                                                         bool* unconditional, bool dry_run = false);
  absl::Status CheckNamespace(const api::KindInfo& kind, const std::string& ns);
  // Create's admission: checks, defaults and validates `obj` in place. With
  // `keep_status` (CreateSharedWithStatus), a status given is not reset.
  absl::Status PrepareCreate(const api::KindInfo& kind, const std::string& ns, json& obj, bool keep_status = false);
  // PrepareCreate, then the store's create.
  absl::StatusOr<std::shared_ptr<const json>> CreateAdmitted(const api::KindInfo& kind, const std::string& ns, json obj,
                                                             bool keep_status,
                                                             std::shared_ptr<const std::string>* text = nullptr);
  // `created`, or the API's AlreadyExists error for the store's.
  template <typename T>
  static absl::StatusOr<T> CreatedOrExists(const api::KindInfo& kind, const std::string& name,
                                           absl::StatusOr<T> created) {
    if (!created.ok() && created.status().code() == absl::StatusCode::kAlreadyExists) return ExistsError(kind, name);
    return created;
  }
  static absl::Status ExistsError(const api::KindInfo& kind, const std::string& name);
  absl::Status CheckClaimResize(const json& old, const json& updated);
  void SetDefaultStorageClass(json& claim);
  // INVALID_ARGUMENT when `location` is a default BackupStorageLocation and
  // another one is the default already.
  absl::Status CheckDefaultLocation(const json& location);

  store::Store& store_;
  std::atomic<bool> storage_protection_admission_{false};
};

}  // namespace berth::apiserver
