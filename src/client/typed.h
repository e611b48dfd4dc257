// Typed reads and writes for controllers and the node agent: objects
// decoded once at the top of a sync (api/types/), edited as structs and
// written back through the typed encoder, which keeps every field berth does
// not model (docs/architecture.md, "Typed objects").
//
//   BERTH_ASSIGN_OR_RETURN(auto claim, DecodeAs<types::PersistentVolumeClaim>(*json));
//   BERTH_RETURN_IF_ERROR(MutateTyped<types::PersistentVolume>(
//       api, K("persistentvolumes"), "", name, claim.metadata.uid ... ,
//       apiserver::Subresource::kStatus, [&](types::PersistentVolume& pv) {
//         if (pv.status.phase == "Bound") return false;  // nothing to write
//         pv.status.phase = "Bound";
//         return true;
//       }));
//
// Thread-safety: stateless.
#pragma once

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "api/kinds.h"
#include "api/types/fields.h"
#include "api/types/meta.h"
#include "apiserver/api.h"
#include "nlohmann/json.hpp"

namespace berth::client {

namespace types = ::berth::api::types;

template <typename T>
absl::StatusOr<T> DecodeAs(const nlohmann::json& object) {
  return types::Decode<T>(object);
}

// "namespace/name", or "name" for cluster-scoped objects (ObjectKey's).
inline std::string KeyOf(const types::ObjectMeta& meta) {
  return meta.namespace_.empty() ? meta.name : meta.namespace_ + "/" + meta.name;
}

// What names the object to an event or a log: apiVersion, kind and the
// metadata's name, namespace, uid and resourceVersion, as JSON
// (EventRecorder::Record's `object`).
template <typename T>
nlohmann::json IdentityOf(const T& obj) {
  nlohmann::json meta = {{"name", obj.metadata.name}, {"uid", obj.metadata.uid}};
  if (!obj.metadata.namespace_.empty()) meta["namespace"] = obj.metadata.namespace_;
  if (!obj.metadata.resource_version.empty()) meta["resourceVersion"] = obj.metadata.resource_version;
  return {{"apiVersion", obj.api_version}, {"kind", obj.kind}, {"metadata", std::move(meta)}};
}

// Reads the stored object `ns/name` fresh, decodes it, applies `mutate`
// (false: nothing to do) and writes it back conditionally on its
// resourceVersion (a conflict is ABORTED: the caller's work queue retries).
// A gone object, or one whose uid is not `uid` (when `uid` is not empty),
// needs nothing: OK. A stored object that does not decode is its
// INVALID_ARGUMENT.
template <typename T>
absl::Status MutateTyped(apiserver::Api& api, const api::KindInfo& kind, const std::string& ns, const std::string& name,
                         const std::string& uid, apiserver::Subresource sub, const std::function<bool(T&)>& mutate) {
  auto current = api.GetShared(kind, ns, name);
  if (!current.ok()) {
    return current.status().code() == absl::StatusCode::kNotFound ? absl::OkStatus() : current.status();
  }
  absl::StatusOr<T> obj = types::Decode<T>(**current);
  if (!obj.ok()) return obj.status();
  if (!uid.empty() && obj->metadata.uid != uid) return absl::OkStatus();
  if (!mutate(*obj)) return absl::OkStatus();
  return api.UpdateShared(kind, ns, name, types::Encode(*obj), sub).status();
}

// MutateTyped from the caller's copy of the object (`known`, e.g. its
// informer's, decoded already) instead of a fresh read: `mutate` edits a
// copy of it, and when there is nothing to do nothing is read or written
// (a copy that is behind comes back through the caller's queue once its
// informer catches up). The write is conditional on known's
// resourceVersion; when that is stale (ABORTED), MutateTyped reads the
// object fresh and tries once more, for known's uid only.
template <typename T>
absl::Status MutateFrom(apiserver::Api& api, const api::KindInfo& kind, const T& known, apiserver::Subresource sub,
                        const std::function<bool(T&)>& mutate) {
  T obj = known;
  if (!mutate(obj)) return absl::OkStatus();
  const types::ObjectMeta& meta = known.metadata;
  auto written = api.UpdateShared(kind, meta.namespace_, meta.name, types::Encode(obj), sub);
  if (written.ok()) return absl::OkStatus();
  if (written.status().code() == absl::StatusCode::kNotFound) return absl::OkStatus();  // gone: nothing to do
  if (written.status().code() != absl::StatusCode::kAborted) return written.status();
  return MutateTyped<T>(api, kind, meta.namespace_, meta.name, meta.uid, sub, mutate);
}

// Reads `ns/name` from the store and decodes it (NOT_FOUND when gone).
template <typename T>
absl::StatusOr<T> GetTyped(apiserver::Api& api, const api::KindInfo& kind, const std::string& ns,
                           const std::string& name) {
  auto current = api.GetShared(kind, ns, name);
  if (!current.ok()) return current.status();
  return types::Decode<T>(**current);
}

}  // namespace berth::client
