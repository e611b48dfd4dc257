// A claim's data source, checked before CreateVolume as external-provisioner
// checks it (getSnapshotSource / getPVCSource), with its messages:
//
//   VolumeSnapshot (snapshot.storage.k8s.io): exists in the claim's
//   namespace, is not being deleted (unless this claim's provisioning had
//   already started), is bound to a content that names it back, whose
//   driver is the class's provisioner; readyToUse; a snapshot handle; the
//   claim asks for at least its restoreSize; and the volume mode is the
//   source's unless the content allows a change
//   (snapshot.storage.kubernetes.io/allow-volume-mode-change: "true").
//
//   PersistentVolumeClaim: exists in the claim's namespace, is Bound and
//   not being deleted, both claims name a class, the new claim asks for at
//   least the source's request, and the source's PV is a CSI volume of the
//   class's provisioner, bound to that very claim, Bound, of the same
//   volume mode.
//
// A source in another namespace (dataSourceRef.namespace) would need a
// ReferenceGrant, which berth does not implement: refused. Other kinds are
// not supported here: a volume populator's kind (populator.h) never reaches
// ResolveDataSource, the provisioner hands it to the populator.
//
// Errors are FAILED_PRECONDITION (INVALID_ARGUMENT for an unsupported kind)
// with a message for the claim's ProvisioningFailed event; they are
// retried, since a source may become ready.
//
// Thread-safety: stateless (reads the registry).
#pragma once

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "api/types/core.h"
#include "api/types/storage.h"
#include "apiserver/registry.h"
#include "csi/v1/csi.pb.h"

namespace berth::controllers {

struct DataSourceRef {
  std::string kind;  // "VolumeSnapshot" or "PersistentVolumeClaim"
  std::string name;
  std::string api_group;   // "" for the core group
  std::string namespace_;  // dataSourceRef's namespace ("": the claim's)
};

// The claim's data source: spec.dataSourceRef, else spec.dataSource; nullopt
// when it has none.
std::optional<DataSourceRef> ClaimDataSource(const api::types::PersistentVolumeClaim& claim);

// The CreateVolume content source for `claim` of `storage_class` (nullopt:
// no data source). `provisioning_started`: the claim already holds the
// provisioner's finalizer, so a source being deleted was protected for it
// (its snapshot or claim waits for this restore) and may still be used.
absl::StatusOr<std::optional<::csi::v1::VolumeContentSource>> ResolveDataSource(
    apiserver::Registry& registry, const api::types::PersistentVolumeClaim& claim,
    const api::types::StorageClass& storage_class, bool provisioning_started);

// Whether `claim` is still being provisioned from `source_name` (a
// PersistentVolumeClaim in its namespace): it clones it and is not yet
// bound (phase Pending or not set yet).
bool ClonesFrom(const api::types::PersistentVolumeClaim& claim, const std::string& ns, const std::string& source_name);

}  // namespace berth::controllers
