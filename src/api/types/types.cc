// The decoders and encoders of the top-level kinds, compiled once here
// (their headers declare them extern).
#include "api/types/backup.h"
#include "api/types/coordination.h"
#include "api/types/core.h"
#include "api/types/core_node.h"
#include "api/types/core_pod.h"
#include "api/types/snapshot.h"
#include "api/types/storage.h"
#include "api/types/storage_class_rule.h"

namespace berth::api::types {

std::string ClaimClass(const PersistentVolumeClaim& claim) {
  const auto& annotations = claim.metadata.annotations;
  if (auto beta = annotations.find(kBetaStorageClassAnnotation); beta != annotations.end()) return beta->second;
  return claim.spec.storage_class_name.value_or("");
}

std::string VolumeClass(const PersistentVolume& volume) {
  const auto& annotations = volume.metadata.annotations;
  if (auto beta = annotations.find(kBetaStorageClassAnnotation); beta != annotations.end()) return beta->second;
  return volume.spec.storage_class_name;
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
BERTH_TYPES_INSTANTIATE(BackupStorageLocation)
BERTH_TYPES_INSTANTIATE(Backup)
BERTH_TYPES_INSTANTIATE(Restore)
BERTH_TYPES_INSTANTIATE(Schedule)

}  // namespace berth::api::types
