// berth explain: the fields of the storage kinds from a table kept here.
// berth publishes no OpenAPI schema, so this is a hand-written description
// of the fields berth reads and writes (names and types as upstream, text
// ours); other kinds get their kind and version only, and say so.
#include <ostream>
#include <vector>

#include "absl/strings/str_split.h"
#include "cli/commands.h"
#include "cli/rest.h"
#include "common/status.h"
#include "common/strings.h"

namespace berth::cli {
namespace {

struct FieldDoc {
  std::string_view kind;  // "PersistentVolumeClaim"
  std::string_view path;  // "" (the kind), "spec", "spec.accessModes"
  std::string_view type;  // "Object", "string", "[]string", "map[string]string"
  std::string_view description;
};

constexpr std::string_view kMeta =
    "Standard object's metadata: name, namespace, labels, annotations, uid, resourceVersion, finalizers.";
constexpr std::string_view kApiVersion = "The versioned schema of this representation of the object.";
constexpr std::string_view kKind = "The REST resource this object represents (CamelCase).";

// clang-format off
constexpr FieldDoc kFields[] = {
  {"PersistentVolumeClaim", "", "Object", "A user's request for and claim to a persistent volume."},
  {"PersistentVolumeClaim", "spec", "Object", "The characteristics of the volume requested by the pod author."},
  {"PersistentVolumeClaim", "spec.accessModes", "[]string", "The access modes the volume should have: ReadWriteOnce, ReadOnlyMany, ReadWriteMany, ReadWriteOncePod."},
  {"PersistentVolumeClaim", "spec.resources", "Object", "The minimum resources the volume should have."},
  {"PersistentVolumeClaim", "spec.resources.requests", "map[string]Quantity", "storage: the size requested (e.g. 1Gi). Raising it on a bound claim of an expandable class expands the volume."},
  {"PersistentVolumeClaim", "spec.storageClassName", "string", "The StorageClass to provision from; unset: the default class; \"\": no class (static volumes only)."},
  {"PersistentVolumeClaim", "spec.volumeName", "string", "The PersistentVolume bound to this claim (set by the binder, or by the user to ask for one volume)."},
  {"PersistentVolumeClaim", "spec.volumeMode", "string", "Filesystem (default) or Block."},
  {"PersistentVolumeClaim", "spec.selector", "LabelSelector", "Labels of the volumes this claim may bind to."},
  {"PersistentVolumeClaim", "spec.dataSource", "Object", "Populate the volume from a VolumeSnapshot (apiGroup snapshot.storage.k8s.io) or a PersistentVolumeClaim (clone)."},
  {"PersistentVolumeClaim", "spec.dataSourceRef", "Object", "Like dataSource, and may name an object in another namespace."},
  {"PersistentVolumeClaim", "status", "Object", "The observed state of the claim."},
  {"PersistentVolumeClaim", "status.phase", "string", "Pending, Bound or Lost."},
  {"PersistentVolumeClaim", "status.capacity", "map[string]Quantity", "The actual size of the bound volume."},
  {"PersistentVolumeClaim", "status.accessModes", "[]string", "The access modes of the bound volume."},
  {"PersistentVolumeClaim", "status.conditions", "[]Object", "Resizing, FileSystemResizePending and other conditions (type, status, reason, message)."},
  {"PersistentVolumeClaim", "status.allocatedResources", "map[string]Quantity", "The size the resize controller works towards."},

  {"PersistentVolume", "", "Object", "A piece of storage provisioned by an administrator or dynamically by a CSI driver."},
  {"PersistentVolume", "spec", "Object", "The volume's definition."},
  {"PersistentVolume", "spec.capacity", "map[string]Quantity", "storage: the volume's size."},
  {"PersistentVolume", "spec.accessModes", "[]string", "How the volume may be mounted."},
  {"PersistentVolume", "spec.claimRef", "ObjectReference", "The claim bound to this volume (namespace, name, uid)."},
  {"PersistentVolume", "spec.persistentVolumeReclaimPolicy", "string", "What happens when the claim is deleted: Delete or Retain."},
  {"PersistentVolume", "spec.storageClassName", "string", "The StorageClass this volume belongs to."},
  {"PersistentVolume", "spec.volumeMode", "string", "Filesystem (default) or Block."},
  {"PersistentVolume", "spec.mountOptions", "[]string", "Mount options passed to the driver."},
  {"PersistentVolume", "spec.nodeAffinity", "Object", "The nodes the volume can be reached from (required.nodeSelectorTerms)."},
  {"PersistentVolume", "spec.csi", "Object", "The CSI driver's volume."},
  {"PersistentVolume", "spec.csi.driver", "string", "The CSI driver's name (e.g. berth.csi.local)."},
  {"PersistentVolume", "spec.csi.volumeHandle", "string", "The driver's id of the volume."},
  {"PersistentVolume", "spec.csi.fsType", "string", "Filesystem to format the volume with (ext4, xfs)."},
  {"PersistentVolume", "spec.csi.readOnly", "boolean", "Publish the volume read-only."},
  {"PersistentVolume", "spec.csi.volumeAttributes", "map[string]string", "The driver's attributes of the volume (from CreateVolume)."},
  {"PersistentVolume", "status", "Object", "The observed state of the volume."},
  {"PersistentVolume", "status.phase", "string", "Pending, Available, Bound, Released or Failed."},
  {"PersistentVolume", "status.message", "string", "Why the volume is in this phase."},

  {"StorageClass", "", "Object", "A class of storage a claim can ask for, provisioned by one CSI driver."},
  {"StorageClass", "provisioner", "string", "The CSI driver that provisions volumes of this class."},
  {"StorageClass", "parameters", "map[string]string", "Passed to the driver's CreateVolume (csi.storage.k8s.io/* keys are read by the provisioner)."},
  {"StorageClass", "reclaimPolicy", "string", "Delete (default) or Retain, copied to each volume."},
  {"StorageClass", "volumeBindingMode", "string", "Immediate, or WaitForFirstConsumer: provision once a pod using the claim is scheduled."},
  {"StorageClass", "allowVolumeExpansion", "boolean", "Whether claims of this class may grow."},
  {"StorageClass", "mountOptions", "[]string", "Mount options given to the volumes of this class."},
  {"StorageClass", "allowedTopologies", "[]Object", "The topology the volumes may be provisioned in."},

  {"VolumeSnapshot", "", "Object", "A user's request for a snapshot of a claim's volume."},
  {"VolumeSnapshot", "spec", "Object", "What to snapshot."},
  {"VolumeSnapshot", "spec.source", "Object", "persistentVolumeClaimName (a new snapshot) or volumeSnapshotContentName (an existing one)."},
  {"VolumeSnapshot", "spec.volumeSnapshotClassName", "string", "The VolumeSnapshotClass; unset: the default class of the driver."},
  {"VolumeSnapshot", "status", "Object", "The observed state of the snapshot."},
  {"VolumeSnapshot", "status.boundVolumeSnapshotContentName", "string", "The VolumeSnapshotContent holding the snapshot."},
  {"VolumeSnapshot", "status.readyToUse", "boolean", "Whether the snapshot can be restored from."},
  {"VolumeSnapshot", "status.restoreSize", "Quantity", "The minimum size of a volume restored from it."},
  {"VolumeSnapshot", "status.creationTime", "string", "When the driver cut the snapshot."},
  {"VolumeSnapshot", "status.error", "Object", "The last error taking the snapshot (time, message)."},

  {"VolumeSnapshotClass", "", "Object", "A class of snapshots, taken by one CSI driver."},
  {"VolumeSnapshotClass", "driver", "string", "The CSI driver that takes the snapshots."},
  {"VolumeSnapshotClass", "deletionPolicy", "string", "Delete or Retain: what happens to the snapshot when its VolumeSnapshot goes."},
  {"VolumeSnapshotClass", "parameters", "map[string]string", "Passed to the driver's CreateSnapshot."},

  {"BackupStorageLocation", "", "Object", "Where backups are kept: a repository in a directory (a local disk, NFS, an object store mounted as a filesystem)."},
  {"BackupStorageLocation", "spec", "Object", "The location."},
  {"BackupStorageLocation", "spec.provider", "string", "filesystem (the only provider)."},
  {"BackupStorageLocation", "spec.config", "map[string]string", "path: the repository's directory, absolute and canonical."},
  {"BackupStorageLocation", "spec.default", "boolean", "Whether backups naming no location use this one; at most one location is the default."},
  {"BackupStorageLocation", "spec.accessMode", "string", "ReadWrite (default), or ReadOnly: restores only (another berth reading the same repository)."},
  {"BackupStorageLocation", "status", "Object", "The observed state of the location."},
  {"BackupStorageLocation", "status.phase", "string", "Available or Unavailable."},
  {"BackupStorageLocation", "status.lastValidationTime", "string", "When the repository was last checked."},
  {"BackupStorageLocation", "status.message", "string", "Why the location is Unavailable."},

  {"Backup", "", "Object", "A backup of pods, their claims and the claims' data to a BackupStorageLocation."},
  {"Backup", "spec", "Object", "What to back up, where, for how long."},
  {"Backup", "spec.includedNamespaces", "[]string", "The namespaces to back up; empty or [\"*\"]: all."},
  {"Backup", "spec.excludedNamespaces", "[]string", "Namespaces left out."},
  {"Backup", "spec.labelSelector", "LabelSelector", "The pods to back up (empty: all); a selected pod's claims are backed up with it."},
  {"Backup", "spec.ttl", "string", "How long the backup is kept, a Go duration (default 720h0m0s)."},
  {"Backup", "spec.storageLocation", "string", "The BackupStorageLocation; unset: the default one."},
  {"Backup", "status", "Object", "The observed state of the backup."},
  {"Backup", "status.phase", "string", "New, FailedValidation, InProgress, Completed, PartiallyFailed, Failed or Deleting."},
  {"Backup", "status.validationErrors", "[]string", "Why the backup is FailedValidation."},
  {"Backup", "status.startTimestamp", "string", "When the backup started."},
  {"Backup", "status.completionTimestamp", "string", "When the backup ended."},
  {"Backup", "status.expiration", "string", "When the backup will be deleted (start + ttl)."},
  {"Backup", "status.progress", "Object", "totalItems, itemsBackedUp, totalBytes and bytesDone."},
  {"Backup", "status.errors", "integer", "Errors met."},
  {"Backup", "status.warnings", "integer", "Warnings met."},
  {"Backup", "status.failureReason", "string", "Why the backup Failed."},
  {"Backup", "status.volumes", "[]Object", "Each volume: its claim and volume, node, snapshot, size, phase, bytes read and added to the repository, the backup it is incremental to, a message."},

  {"Restore", "", "Object", "A restore of a backup's pods, claims and data."},
  {"Restore", "spec", "Object", "What to restore, where."},
  {"Restore", "spec.backupName", "string", "The backup to restore (or scheduleName)."},
  {"Restore", "spec.scheduleName", "string", "Restore the newest Completed backup of this Schedule."},
  {"Restore", "spec.includedNamespaces", "[]string", "The namespaces of the backup to restore; empty: all."},
  {"Restore", "spec.namespaceMapping", "map[string]string", "Restore namespace old into namespace new."},
  {"Restore", "spec.targetNode", "string", "The node for every restored volume; unset: the scheduler's choice."},
  {"Restore", "status", "Object", "The observed state of the restore."},
  {"Restore", "status.phase", "string", "New, FailedValidation, InProgress, Completed, PartiallyFailed or Failed."},
  {"Restore", "status.validationErrors", "[]string", "Why the restore is FailedValidation."},
  {"Restore", "status.startTimestamp", "string", "When the restore started."},
  {"Restore", "status.completionTimestamp", "string", "When the restore ended."},
  {"Restore", "status.progress", "Object", "totalItems, itemsRestored, totalBytes and bytesDone."},
  {"Restore", "status.errors", "integer", "Errors met."},
  {"Restore", "status.warnings", "integer", "Warnings met."},
  {"Restore", "status.failureReason", "string", "Why the restore Failed."},

  {"Schedule", "", "Object", "Backups made on a schedule."},
  {"Schedule", "spec", "Object", "When, and the backup to make."},
  {"Schedule", "spec.schedule", "string", "A 5-field cron expression in UTC (\"0 2 * * *\"), @hourly, @daily, @weekly, @monthly, @yearly, or \"@every <duration>\"."},
  {"Schedule", "spec.template", "Object", "The spec of each Backup (includedNamespaces, labelSelector, ttl, storageLocation)."},
  {"Schedule", "spec.paused", "boolean", "Make no backups while true."},
  {"Schedule", "status", "Object", "The observed state of the schedule."},
  {"Schedule", "status.phase", "string", "New, Enabled or FailedValidation."},
  {"Schedule", "status.validationErrors", "[]string", "Why the schedule is FailedValidation."},
  {"Schedule", "status.lastBackup", "string", "When the schedule last created a backup."},

  {"VolumeAttachment", "", "Object", "The intent to attach a volume to a node (ControllerPublishVolume)."},
  {"VolumeAttachment", "spec", "Object", "What to attach where."},
  {"VolumeAttachment", "spec.attacher", "string", "The CSI driver attaching the volume."},
  {"VolumeAttachment", "spec.nodeName", "string", "The node to attach to."},
  {"VolumeAttachment", "spec.source", "Object", "persistentVolumeName: the volume."},
  {"VolumeAttachment", "status", "Object", "The observed state of the attachment."},
  {"VolumeAttachment", "status.attached", "boolean", "Whether the volume is attached."},
  {"VolumeAttachment", "status.attachmentMetadata", "map[string]string", "The driver's publish context, given to NodeStage."},
  {"VolumeAttachment", "status.attachError", "Object", "The last attach error (time, message)."},
  {"VolumeAttachment", "status.detachError", "Object", "The last detach error (time, message)."},
};
// clang-format on

// The fields every kind has, listed after the kind's own entry.
constexpr FieldDoc kCommonFields[] = {
    {"", "apiVersion", "string", kApiVersion},
    {"", "kind", "string", kKind},
    {"", "metadata", "ObjectMeta", kMeta},
};

// The documented fields of `kind`: its own entry, the common fields, then
// the rest in table order; empty when berth does not describe the kind.
std::vector<FieldDoc> FieldsOf(std::string_view kind) {
  std::vector<FieldDoc> out;
  for (const FieldDoc& f : kFields) {
    if (f.kind != kind) continue;
    out.push_back(f);
    if (f.path.empty()) {
      for (FieldDoc common : kCommonFields) {
        common.kind = kind;
        out.push_back(common);
      }
    }
  }
  return out;
}

// Wraps `text` at 75 columns, each line indented by `indent`.
std::string Wrapped(std::string_view text, int indent) {
  std::string out, line;
  const std::string pad(static_cast<size_t>(indent), ' ');
  for (std::string_view word : Split(text, ' ')) {
    if (word.empty()) continue;
    if (!line.empty() && line.size() + word.size() + 1 > 75) {
      out += pad + line + "\n";
      line.clear();
    }
    line += (line.empty() ? "" : " ") + std::string(word);
  }
  if (!line.empty()) out += pad + line + "\n";
  return out;
}

}  // namespace

absl::Status Explain(const std::string& what, std::ostream& out) {
  const size_t dot = what.find('.');
  BERTH_ASSIGN_OR_RETURN(const api::KindInfo* kind, ResolveKind(what.substr(0, dot)));
  const std::string path = dot == std::string::npos ? "" : what.substr(dot + 1);
  const std::vector<FieldDoc> fields = FieldsOf(kind->kind);
  const FieldDoc* self = nullptr;
  for (const FieldDoc& f : fields) {
    if (f.path == path) self = &f;
  }
  out << "KIND:     " << kind->kind << "\nVERSION:  " << kind->api_version() << "\n\n";
  if (fields.empty()) {
    out << "DESCRIPTION:\n"
        << Wrapped(StrCat("berth has no field descriptions for ", kind->kind, "; its fields are those of Kubernetes' ",
                          kind->api_version(), " ", kind->kind,
                          " (berth explain covers the storage kinds: pvc, pv, "
                          "sc, vs, vsclass, volumeattachments)."),
                   5);
    if (!path.empty()) return absl::NotFoundError(StrCat("field \"", path, "\" is not described by berth"));
    return absl::OkStatus();
  }
  if (self == nullptr) {
    return absl::NotFoundError(StrCat(
        "field \"", path.substr(path.rfind('.') == std::string::npos ? 0 : path.rfind('.') + 1), "\" does not exist"));
  }
  std::vector<const FieldDoc*> children;
  for (const FieldDoc& f : fields) {
    if (f.path.empty() || f.path == path) continue;
    std::string_view rest = f.path;
    if (!path.empty()) {
      if (!rest.starts_with(path) || rest.size() <= path.size() || rest[path.size()] != '.') continue;
      rest.remove_prefix(path.size() + 1);
    }
    if (rest.find('.') == std::string_view::npos) children.push_back(&f);
  }
  if (!path.empty()) {
    const std::string leaf = path.substr(path.rfind('.') == std::string::npos ? 0 : path.rfind('.') + 1);
    out << (children.empty() ? "FIELD:    " : "RESOURCE: ") << leaf << " <" << self->type << ">\n\n";
  }
  out << "DESCRIPTION:\n" << Wrapped(self->description, 5);
  if (!children.empty()) {
    out << "\nFIELDS:\n";
    for (const FieldDoc* c : children) {
      out << "   " << c->path.substr(c->path.rfind('.') == std::string_view::npos ? 0 : c->path.rfind('.') + 1) << "\t<"
          << c->type << ">\n"
          << Wrapped(c->description, 5) << "\n";
    }
  }
  return absl::OkStatus();
}

}  // namespace berth::cli
