#include "controllers/volume/data_source.h"

#include "api/quantity.h"
#include "api/types/snapshot.h"
#include "client/object.h"
#include "client/typed.h"
#include "common/strings.h"

namespace berth::controllers {
namespace {

namespace types = ::berth::api::types;
using client::K;
using types::PersistentVolume;
using types::PersistentVolumeClaim;
using types::StorageClass;

constexpr char kSnapshotGroup[] = "snapshot.storage.k8s.io";
constexpr char kAnnAllowVolumeModeChange[] = "snapshot.storage.kubernetes.io/allow-volume-mode-change";

int64_t RequestBytes(const PersistentVolumeClaim& claim) {
  auto it = claim.spec.resources.requests.find("storage");
  return it == claim.spec.resources.requests.end() ? 0 : it->second.Value();
}

absl::Status Refused(const std::string& message) { return absl::FailedPreconditionError(message); }

absl::StatusOr<::csi::v1::VolumeContentSource> SnapshotSource(apiserver::Registry& registry,
                                                              const PersistentVolumeClaim& claim,
                                                              const StorageClass& sc, const std::string& name,
                                                              bool provisioning_started) {
  auto snapshot = client::GetTyped<types::VolumeSnapshot>(registry, K("volumesnapshots", kSnapshotGroup),
                                                          claim.metadata.namespace_, name);
  if (!snapshot.ok()) {
    return Refused(StrCat("error getting snapshot ", name, " from api server: ", snapshot.status().message()));
  }
  if (snapshot->metadata.Deleting() && !provisioning_started) {
    return Refused(StrCat("snapshot ", name, " is being deleted"));
  }
  const types::VolumeSnapshotStatus status = snapshot->status.value_or(types::VolumeSnapshotStatus{});
  const std::string content_name = status.bound_volume_snapshot_content_name.value_or("");
  if (content_name.empty()) return Refused(StrCat("snapshot ", name, " not bound"));
  auto content = client::GetTyped<types::VolumeSnapshotContent>(registry, K("volumesnapshotcontents", kSnapshotGroup),
                                                                "", content_name);
  if (!content.ok()) {
    return Refused(StrCat("error getting snapshotcontent ", content_name, " for snapshot ", name, " from api server"));
  }
  const types::ObjectReference& ref = content->spec.volume_snapshot_ref;
  if (ref.uid != snapshot->metadata.uid || ref.namespace_ != snapshot->metadata.namespace_ || ref.name != name) {
    return Refused(
        StrCat("snapshotcontent ", content_name, " for snapshot ", name, " is bound to a different snapshot"));
  }
  if (content->spec.driver != sc.provisioner) {
    return Refused(StrCat("snapshotcontent ", content_name, " for snapshot ", name,
                          " is handled by a different CSI driver than requested by StorageClass ", sc.metadata.name));
  }
  if (!status.ready_to_use.value_or(false)) return Refused(StrCat("snapshot ", name, " is not Ready"));
  std::string handle = content->status ? content->status->snapshot_handle.value_or("") : "";
  if (handle.empty()) handle = content->spec.source.snapshot_handle.value_or("");  // pre-provisioned
  if (handle.empty()) return Refused(StrCat("snapshot handle ", name, " is not available"));
  if (status.restore_size && RequestBytes(claim) < status.restore_size->Value()) {
    return Refused(StrCat("requested volume size ", RequestBytes(claim), " is less than the size ",
                          status.restore_size->Value(), " for the source snapshot ", name));
  }
  const std::string source_mode = content->spec.source_volume_mode.value_or("");
  const std::string mode = types::VolumeModeOf(claim.spec.volume_mode);
  if (!source_mode.empty() && source_mode != mode &&
      content->metadata.Annotation(kAnnAllowVolumeModeChange) != "true") {
    return Refused(StrCat("requested volume ", claim.metadata.namespace_, "/", claim.metadata.name,
                          " modifies the mode of the source volume but does not have permission to do so. ",
                          kAnnAllowVolumeModeChange, " annotation is not present on snapshotcontent ", content_name));
  }
  ::csi::v1::VolumeContentSource out;
  out.mutable_snapshot()->set_snapshot_id(handle);
  return out;
}

absl::StatusOr<::csi::v1::VolumeContentSource> ClaimSource(apiserver::Registry& registry,
                                                           const PersistentVolumeClaim& claim, const StorageClass& sc,
                                                           const std::string& name) {
  const std::string& ns = claim.metadata.namespace_;
  auto source = client::GetTyped<PersistentVolumeClaim>(registry, K("persistentvolumeclaims"), ns, name);
  if (!source.ok()) {
    return Refused(
        StrCat("error getting PVC ", name, " (namespace \"", ns, "\") from api server: ", source.status().message()));
  }
  if (source->status.phase != "Bound") {
    return Refused(StrCat("the PVC DataSource ", name, " must have a status of Bound.  Got ",
                          source->status.phase.empty() ? "no phase" : source->status.phase));
  }
  if (source->metadata.Deleting()) return Refused(StrCat("the PVC DataSource ", name, " is currently being deleted"));
  if (types::ClaimClass(*source).empty()) {
    return Refused(StrCat("the source PVC (", name, ") storageclass cannot be empty"));
  }
  if (types::ClaimClass(claim).empty()) {
    return Refused(StrCat("the requested PVC (", claim.metadata.name, ") storageclass cannot be empty"));
  }
  if (RequestBytes(claim) < RequestBytes(*source)) {
    return Refused(
        StrCat("error, new PVC request must be greater than or equal in size to the specified PVC data "
               "source, requested ",
               RequestBytes(claim), " but source is ", RequestBytes(*source)));
  }
  const std::string& pv_name = source->spec.volume_name;
  if (pv_name.empty()) return Refused(StrCat("volume name is empty in source PVC ", name));
  auto pv = client::GetTyped<PersistentVolume>(registry, K("persistentvolumes"), "", pv_name);
  const bool bound_to_source = pv.ok() && pv->spec.claim_ref && pv->spec.claim_ref->uid == source->metadata.uid &&
                               pv->spec.claim_ref->namespace_ == ns && pv->spec.claim_ref->name == name;
  if (!bound_to_source || !pv->spec.csi || pv->spec.csi->driver != sc.provisioner || pv->status.phase != "Bound") {
    return Refused("claim in dataSource not bound or invalid");
  }
  const std::string mode = types::VolumeModeOf(claim.spec.volume_mode);
  const std::string source_mode = types::VolumeModeOf(pv->spec.volume_mode);
  if (mode != source_mode) {
    return Refused(StrCat("the source PVC and destination PVCs must have the same volume mode for cloning.  Source is ",
                          source_mode, ", but new PVC requested ", mode));
  }
  ::csi::v1::VolumeContentSource out;
  out.mutable_volume()->set_volume_id(pv->spec.csi->volume_handle);
  return out;
}

}  // namespace

std::optional<DataSourceRef> ClaimDataSource(const PersistentVolumeClaim& claim) {
  const types::PersistentVolumeClaimSpec& spec = claim.spec;
  if (spec.data_source_ref) {
    const types::TypedObjectReference& r = *spec.data_source_ref;
    return DataSourceRef{
        .kind = r.kind, .name = r.name, .api_group = r.api_group.value_or(""), .namespace_ = r.namespace_.value_or("")};
  }
  if (spec.data_source) {
    const types::TypedLocalObjectReference& r = *spec.data_source;
    return DataSourceRef{.kind = r.kind, .name = r.name, .api_group = r.api_group.value_or(""), .namespace_ = ""};
  }
  return std::nullopt;
}

absl::StatusOr<std::optional<::csi::v1::VolumeContentSource>> ResolveDataSource(apiserver::Registry& registry,
                                                                                const PersistentVolumeClaim& claim,
                                                                                const StorageClass& sc,
                                                                                bool provisioning_started) {
  std::optional<DataSourceRef> ds = ClaimDataSource(claim);
  if (!ds) return std::nullopt;
  if (!ds->namespace_.empty() && ds->namespace_ != claim.metadata.namespace_) {
    return Refused(StrCat("data source ", ds->kind, " ", ds->namespace_, "/", ds->name,
                          " is in another namespace; cross-namespace data sources need a ReferenceGrant, which berth "
                          "does not support"));
  }
  absl::StatusOr<::csi::v1::VolumeContentSource> source;
  if (ds->kind == "VolumeSnapshot" && ds->api_group == kSnapshotGroup) {
    source = SnapshotSource(registry, claim, sc, ds->name, provisioning_started);
  } else if (ds->kind == "PersistentVolumeClaim" && ds->api_group.empty()) {
    source = ClaimSource(registry, claim, sc, ds->name);
  } else {
    return absl::InvalidArgumentError(
        StrCat("data source kind ", ds->kind, " (apiGroup \"", ds->api_group, "\") is not supported"));
  }
  if (!source.ok()) {
    return absl::Status(source.status().code(), StrCat("error getting handle for DataSource Type ", ds->kind,
                                                       " by Name ", ds->name, ": ", source.status().message()));
  }
  return std::optional<::csi::v1::VolumeContentSource>(*std::move(source));
}

bool ClonesFrom(const PersistentVolumeClaim& claim, const std::string& ns, const std::string& source_name) {
  if (claim.metadata.namespace_ != ns) return false;
  std::optional<DataSourceRef> ds = ClaimDataSource(claim);
  if (!ds || ds->kind != "PersistentVolumeClaim" || ds->name != source_name) return false;
  return claim.status.phase.empty() || claim.status.phase == "Pending";
}

}  // namespace berth::controllers
