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
#include "controllers/snapshot/snapshotter.h"
#include "nlohmann/json.hpp"

namespace berth::controllers::snapshot_util {

using nlohmann::json;

inline constexpr char kGroup[] = "snapshot.storage.k8s.io";

const api::KindInfo& ContentsKind();

bool Ready(const json& o);
bool RemoveFinalizer(json& o, const std::string& f);
bool SetAnnotation(json& o, const std::string& key, const std::string& value);

// Reads the object fresh and, while it is still the object with `uid`,
// applies `edit` (false: nothing to change) and writes it back
// conditionally. Returns the object as stored afterwards, or nullopt when it
// is gone or was replaced (not an error: there is nothing left to edit). A
// concurrent writer makes it ABORTED, which the work queue retries. (writes.h's
// MutateObject, plus the stored result: callers here must know whether a
// protection really is in place before they go on.)
absl::StatusOr<std::optional<json>> Edit(apiserver::Registry& registry, const api::KindInfo& kind,
                                         const std::string& ns, const std::string& name, const std::string& uid,
                                         apiserver::Subresource sub, const std::function<bool(json&)>& edit);

// Sets status.error and readyToUse false unless the same message is there
// already (an unchanged error is not rewritten: no hot loop of updates).
bool SetError(json& o, const std::string& message);

struct SecretRef {
  std::string name, ns;
};

// The secret that class parameters csi.storage.k8s.io/<which>-secret-name
// and -namespace name (both or neither), templates resolved as upstream's
// GetSecretReference does: ${volumesnapshotcontent.name} in both,
// ${volumesnapshot.namespace} in both and ${volumesnapshot.name} in the name
// when the snapshot is known. An empty ref when the class names none.
absl::StatusOr<SecretRef> ClassSecret(const json& cls, const std::string& which, const std::string& content_name,
                                      const json* snapshot);

// A snapshot class by name: the cache, else the store.
std::optional<json> GetClass(apiserver::Registry& registry, const client::Informer& classes, const std::string& name);

}  // namespace berth::controllers::snapshot_util

#endif  // BERTH_CONTROLLERS_SNAPSHOT_UTIL_H_
