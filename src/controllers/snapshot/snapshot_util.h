// Helpers over the snapshot kinds that both halves of snapshotting use: the
// common snapshot controller (snapshot_controller.cc, the VolumeSnapshot
// side) and the CSI snapshotter sidecar (snapshotter.cc, the
// VolumeSnapshotContent side); upstream keeps them in external-snapshotter's
// pkg/utils. Not for use outside snapshotting.
#ifndef BERTH_CONTROLLERS_SNAPSHOT_UTIL_H_
#define BERTH_CONTROLLERS_SNAPSHOT_UTIL_H_

#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "api/types/snapshot.h"
#include "client/writes.h"
#include "controllers/snapshot/snapshotter.h"
#include "nlohmann/json.hpp"

namespace berth::controllers::snapshot_util {

using api::types::VolumeSnapshot;
using api::types::VolumeSnapshotClass;
using api::types::VolumeSnapshotContent;
using nlohmann::json;

inline constexpr char kGroup[] = "snapshot.storage.k8s.io";

const api::KindInfo& ContentsKind();
const api::KindInfo& SnapshotsKind();

// status.readyToUse is true.
template <typename T>
bool Ready(const T& snapshot_or_content) {
  return snapshot_or_content.status && snapshot_or_content.status->ready_to_use.value_or(false);
}
bool SetAnnotation(api::types::ObjectMeta& meta, const std::string& key, const std::string& value);

// Reads the object fresh and, while it is still the object with `uid`,
// applies `edit` (false: nothing to change) and writes it back
// conditionally. Returns the object as stored afterwards, or nullopt when it
// is gone or was replaced (not an error: there is nothing left to edit). A
// concurrent writer makes it ABORTED, which the work queue retries. (typed.h's
// MutateTyped, plus the stored result: callers here must know whether a
// protection really is in place before they go on.)
template <typename T>
absl::StatusOr<std::optional<T>> Edit(apiserver::Registry& registry, const api::KindInfo& kind, const std::string& ns,
                                      const std::string& name, const std::string& uid, apiserver::Subresource sub,
                                      const std::function<bool(T&)>& edit) {
  auto current = registry.GetShared(kind, ns, name);
  if (!current.ok()) {
    if (current.status().code() == absl::StatusCode::kNotFound) return std::optional<T>();
    return current.status();
  }
  absl::StatusOr<T> obj = api::types::Decode<T>(**current);
  if (!obj.ok()) return obj.status();
  if (obj->metadata.uid != uid) return std::optional<T>();
  if (!edit(*obj)) return std::optional<T>(*std::move(obj));
  auto updated = registry.Update(kind, ns, name, api::types::Encode(*obj), sub);
  if (!updated.ok()) {
    if (updated.status().code() == absl::StatusCode::kNotFound) return std::optional<T>();
    return updated.status();
  }
  absl::StatusOr<T> stored = api::types::Decode<T>(*updated);
  if (!stored.ok()) return stored.status();
  return std::optional<T>(*std::move(stored));
}

// Sets status.error and readyToUse false unless the same message is there
// already (an unchanged error is not rewritten: no hot loop of updates).
template <typename Status>
bool SetError(std::optional<Status>& status, const std::string& message) {
  if (!status) status.emplace();
  if ((status->error ? status->error->message.value_or("") : "") == message) return false;
  api::types::VolumeSnapshotError& error = status->error.emplace();
  error.time = client::NowRfc3339();
  error.message = message;
  status->ready_to_use = false;
  return true;
}

struct SecretRef {
  std::string name, ns;
};
// The secret that class parameters csi.storage.k8s.io/<which>-secret-name
// and -namespace name (both or neither), templates resolved as upstream's
// GetSecretReference does: ${volumesnapshotcontent.name} in both,
// ${volumesnapshot.namespace} in both and ${volumesnapshot.name} in the name
// when the snapshot is known. An empty ref when the class names none.
absl::StatusOr<SecretRef> ClassSecret(const VolumeSnapshotClass& cls, const std::string& which,
                                      const std::string& content_name, const VolumeSnapshot* snapshot);

// A snapshot class by name: the cache, else the store (nullopt: none).
absl::StatusOr<std::optional<VolumeSnapshotClass>> GetClass(apiserver::Registry& registry,
                                                            const client::Informer& classes, const std::string& name);

}  // namespace berth::controllers::snapshot_util

#endif  // BERTH_CONTROLLERS_SNAPSHOT_UTIL_H_
