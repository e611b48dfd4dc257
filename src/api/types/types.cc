// The decoders and encoders of the top-level kinds, compiled once here
// (their headers declare them extern).
#include "api/types/coordination.h"
#include "api/types/core.h"
#include "api/types/core_node.h"
#include "api/types/core_pod.h"
#include "api/types/snapshot.h"
#include "api/types/storage.h"

namespace berth::api::types {

namespace {
constexpr char kBetaStorageClass[] = "volume.beta.kubernetes.io/storage-class";
}  // namespace

std::string ClaimClass(const PersistentVolumeClaim& claim) {
  if (claim.metadata.annotations.contains(kBetaStorageClass)) return claim.metadata.annotations.at(kBetaStorageClass);
  return claim.spec.storage_class_name.value_or("");
}

std::string VolumeClass(const PersistentVolume& volume) {
  if (volume.metadata.annotations.contains(kBetaStorageClass)) return volume.metadata.annotations.at(kBetaStorageClass);
  return volume.spec.storage_class_name;
}

std::string StorageClassOf(const Json& object) {
  const auto metadata = object.find("metadata");
  if (metadata != object.end() && metadata->is_object()) {
    const auto annotations = metadata->find("annotations");
    if (annotations != metadata->end() && annotations->is_object()) {
      const auto beta = annotations->find(kBetaStorageClass);
      if (beta != annotations->end() && beta->is_string()) return beta->get<std::string>();
    }
  }
  const auto spec = object.find("spec");
  if (spec == object.end() || !spec->is_object()) return "";
  const auto name = spec->find("storageClassName");
  return name != spec->end() && name->is_string() ? name->get<std::string>() : "";
}

std::string VolumeModeOf(const std::optional<std::string>& mode) {
  return mode && !mode->empty() ? *mode : "Filesystem";
}

#define BERTH_TYPES_INSTANTIATE(T)                   \
  template absl::StatusOr<T> Decode<T>(const Json&); \
  template Json Encode<T>(const T&);

BERTH_TYPES_INSTANTIATE(PersistentVolume)
BERTH_TYPES_INSTANTIATE(PersistentVolumeClaim)
BERTH_TYPES_INSTANTIATE(Node)
BERTH_TYPES_INSTANTIATE(Pod)
BERTH_TYPES_INSTANTIATE(StorageClass)
BERTH_TYPES_INSTANTIATE(VolumeAttachment)
BERTH_TYPES_INSTANTIATE(CSIDriver)
BERTH_TYPES_INSTANTIATE(CSINode)
BERTH_TYPES_INSTANTIATE(CSIStorageCapacity)
BERTH_TYPES_INSTANTIATE(Lease)
BERTH_TYPES_INSTANTIATE(VolumeSnapshot)
BERTH_TYPES_INSTANTIATE(VolumeSnapshotContent)
BERTH_TYPES_INSTANTIATE(VolumeSnapshotClass)

}  // namespace berth::api::types
