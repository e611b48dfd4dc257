#include "controllers/volume/data_source.h"

#include "api/quantity.h"
#include "client/object.h"
#include "common/strings.h"

namespace berth::controllers {
namespace {

using client::Field;
using client::K;
using client::Str;
using nlohmann::json;

constexpr char kSnapshotGroup[] = "snapshot.storage.k8s.io";
constexpr char kAnnAllowVolumeModeChange[] = "snapshot.storage.kubernetes.io/allow-volume-mode-change";

std::string VolumeMode(const std::string& mode) { return mode.empty() ? "Filesystem" : mode; }

int64_t RequestBytes(const json& claim) {
  auto q = api::Quantity::Parse(Str(claim, {"spec", "resources", "requests", "storage"}));
  return q.ok() ? q->Value() : 0;
}

absl::Status Refused(const std::string& message) { return absl::FailedPreconditionError(message); }

absl::StatusOr<::csi::v1::VolumeContentSource> SnapshotSource(apiserver::Registry& registry, const json& claim,
                                                              const json& sc, const std::string& name,
                                                              bool provisioning_started) {
  auto snapshot = registry.Get(K("volumesnapshots", kSnapshotGroup), client::Ns(claim), name);
  if (!snapshot.ok()) {
    return Refused(StrCat("error getting snapshot ", name, " from api server: ", snapshot.status().message()));
  }
  if (client::Deleting(*snapshot) && !provisioning_started)
    return Refused(StrCat("snapshot ", name, " is being deleted"));
  const std::string content_name = Str(*snapshot, {"status", "boundVolumeSnapshotContentName"});
  if (content_name.empty()) return Refused(StrCat("snapshot ", name, " not bound"));
  auto content = registry.Get(K("volumesnapshotcontents", kSnapshotGroup), "", content_name);
  if (!content.ok()) {
    return Refused(StrCat("error getting snapshotcontent ", content_name, " for snapshot ", name, " from api server"));
  }
  const json& ref = Field(Field(*content, "spec"), "volumeSnapshotRef");
  if (Str(ref, {"uid"}) != client::Uid(*snapshot) || Str(ref, {"namespace"}) != client::Ns(*snapshot) ||
      Str(ref, {"name"}) != name) {
    return Refused(
        StrCat("snapshotcontent ", content_name, " for snapshot ", name, " is bound to a different snapshot"));
  }
  if (Str(*content, {"spec", "driver"}) != Str(sc, {"provisioner"})) {
    return Refused(StrCat("snapshotcontent ", content_name, " for snapshot ", name,
                          " is handled by a different CSI driver than requested by StorageClass ", client::Name(sc)));
  }
  if (Field(Field(*snapshot, "status"), "readyToUse") != true)
    return Refused(StrCat("snapshot ", name, " is not Ready"));
  std::string handle = Str(*content, {"status", "snapshotHandle"});
  if (handle.empty()) handle = Str(*content, {"spec", "source", "snapshotHandle"});  // pre-provisioned
  if (handle.empty()) return Refused(StrCat("snapshot handle ", name, " is not available"));
  if (auto restore = api::Quantity::Parse(Str(*snapshot, {"status", "restoreSize"})); restore.ok()) {
    if (RequestBytes(claim) < restore->Value()) {
      return Refused(StrCat("requested volume size ", RequestBytes(claim), " is less than the size ", restore->Value(),
                            " for the source snapshot ", name));
    }
  }
  const std::string source_mode = Str(*content, {"spec", "sourceVolumeMode"});
  const std::string mode = VolumeMode(Str(claim, {"spec", "volumeMode"}));
  if (!source_mode.empty() && source_mode != mode &&
      client::Annotation(*content, kAnnAllowVolumeModeChange) != "true") {
    return Refused(StrCat("requested volume ", client::Ns(claim), "/", client::Name(claim),
                          " modifies the mode of the source volume but does not have permission to do so. ",
                          kAnnAllowVolumeModeChange, " annotation is not present on snapshotcontent ", content_name));
  }
  ::csi::v1::VolumeContentSource out;
  out.mutable_snapshot()->set_snapshot_id(handle);
  return out;
}

absl::StatusOr<::csi::v1::VolumeContentSource> ClaimSource(apiserver::Registry& registry, const json& claim,
                                                           const json& sc, const std::string& name) {
  auto source = registry.Get(K("persistentvolumeclaims"), client::Ns(claim), name);
  if (!source.ok()) {
    return Refused(StrCat("error getting PVC ", name, " (namespace \"", client::Ns(claim),
                          "\") from api server: ", source.status().message()));
  }
  if (Str(*source, {"status", "phase"}) != "Bound") {
    return Refused(StrCat("the PVC DataSource ", name, " must have a status of Bound.  Got ",
                          Str(*source, {"status", "phase"}).empty() ? "no phase" : Str(*source, {"status", "phase"})));
  }
  if (client::Deleting(*source)) return Refused(StrCat("the PVC DataSource ", name, " is currently being deleted"));
  if (client::ClaimClass(*source).empty())
    return Refused(StrCat("the source PVC (", name, ") storageclass cannot be empty"));
  if (client::ClaimClass(claim).empty()) {
    return Refused(StrCat("the requested PVC (", client::Name(claim), ") storageclass cannot be empty"));
  }
  if (RequestBytes(claim) < RequestBytes(*source)) {
    return Refused(
        StrCat("error, new PVC request must be greater than or equal in size to the specified PVC data "
               "source, requested ",
               RequestBytes(claim), " but source is ", RequestBytes(*source)));
  }
  const std::string pv_name = Str(*source, {"spec", "volumeName"});
  if (pv_name.empty()) return Refused(StrCat("volume name is empty in source PVC ", name));
  auto pv = registry.Get(K("persistentvolumes"), "", pv_name);
  const json& ref = pv.ok() ? Field(Field(*pv, "spec"), "claimRef") : json();
  if (!pv.ok() || Field(Field(*pv, "spec"), "csi").is_null() ||
      Str(*pv, {"spec", "csi", "driver"}) != Str(sc, {"provisioner"}) || Str(ref, {"uid"}) != client::Uid(*source) ||
      Str(ref, {"namespace"}) != client::Ns(*source) || Str(ref, {"name"}) != name ||
      Str(*pv, {"status", "phase"}) != "Bound") {
    return Refused("claim in dataSource not bound or invalid");
  }
  const std::string mode = VolumeMode(Str(claim, {"spec", "volumeMode"}));
  const std::string source_mode = VolumeMode(Str(*pv, {"spec", "volumeMode"}));
  if (mode != source_mode) {
    return Refused(StrCat("the source PVC and destination PVCs must have the same volume mode for cloning.  Source is ",
                          source_mode, ", but new PVC requested ", mode));
  }
  ::csi::v1::VolumeContentSource out;
  out.mutable_volume()->set_volume_id(Str(*pv, {"spec", "csi", "volumeHandle"}));
  return out;
}

}  // namespace

std::optional<DataSourceRef> ClaimDataSource(const json& claim) {
  const json& spec = Field(claim, "spec");
  const json& ds = Field(spec, "dataSourceRef").is_null() ? Field(spec, "dataSource") : Field(spec, "dataSourceRef");
  if (ds.is_null()) return std::nullopt;
  return DataSourceRef{.kind = Str(ds, {"kind"}), .name = Str(ds, {"name"})};
}

absl::StatusOr<std::optional<::csi::v1::VolumeContentSource>> ResolveDataSource(apiserver::Registry& registry,
                                                                                const json& claim, const json& sc,
                                                                                bool provisioning_started) {
  std::optional<DataSourceRef> ds = ClaimDataSource(claim);
  if (!ds) return std::nullopt;
  const json& spec = Field(claim, "spec");
  const json& ref = Field(spec, "dataSourceRef").is_null() ? Field(spec, "dataSource") : Field(spec, "dataSourceRef");
  if (const std::string ns = Str(ref, {"namespace"}); !ns.empty() && ns != client::Ns(claim)) {
    return Refused(StrCat("data source ", ds->kind, " ", ns, "/", ds->name,
                          " is in another namespace; cross-namespace data sources need a ReferenceGrant, which berth "
                          "does not support"));
  }
  absl::StatusOr<::csi::v1::VolumeContentSource> source;
  if (ds->kind == "VolumeSnapshot" && Str(ref, {"apiGroup"}) == kSnapshotGroup) {
    source = SnapshotSource(registry, claim, sc, ds->name, provisioning_started);
  } else if (ds->kind == "PersistentVolumeClaim" && Str(ref, {"apiGroup"}).empty()) {
    source = ClaimSource(registry, claim, sc, ds->name);
  } else {
    return absl::InvalidArgumentError(
        StrCat("data source kind ", ds->kind, " (apiGroup \"", Str(ref, {"apiGroup"}), "\") is not supported"));
  }
  if (!source.ok()) {
    return absl::Status(source.status().code(), StrCat("error getting handle for DataSource Type ", ds->kind,
                                                       " by Name ", ds->name, ": ", source.status().message()));
  }
  return std::optional<::csi::v1::VolumeContentSource>(*std::move(source));
}

bool ClonesFrom(const json& claim, const std::string& ns, const std::string& source_name) {
  if (client::Ns(claim) != ns) return false;
  std::optional<DataSourceRef> ds = ClaimDataSource(claim);
  if (!ds || ds->kind != "PersistentVolumeClaim" || ds->name != source_name) return false;
  const std::string phase = Str(claim, {"status", "phase"});
  return phase.empty() || phase == "Pending";
}

}  // namespace berth::controllers
