// Tables of objects with Kubernetes' columns. Core and storage.k8s.io kinds
// follow kubernetes/kubernetes pkg/printers/internalversion/printers.go; the
// snapshot kinds follow the additionalPrinterColumns of the external-snapshotter
// CRDs, with cells computed like apiextensions-apiserver's table convertor
// (a missing field is a null cell, which kubectl prints as <none>).
//
// Every accessor tolerates missing or ill-typed fields: it yields the zero
// value, never an exception.
#include "api/table.h"

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"

#include "api/table_internal.h"

namespace berth::api {
namespace {

using table_internal::Cells;
using table_internal::Json;
namespace ti = table_internal;

// ---- Columns and dispatch ------------------------------------------------------------

constexpr char kNameDescription[] =
    "Name must be unique within a namespace. Is required when creating resources, although "
    "some resources may allow a client to request the generation of an appropriate name "
    "automatically. Name is primarily intended for creation idempotence and configuration "
    "definition. Cannot be updated. More info: "
    "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";
constexpr char kAgeDescription[] =
    "CreationTimestamp is a timestamp representing the server time when this object was "
    "created. It is not guaranteed to be set in happens-before order across separate "
    "operations. Clients may not set this value. It is represented in RFC3339 form and is in "
    "UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/"
    "api-conventions.md#metadata";

// Descriptions paraphrase Kubernetes' (kubectl never prints them).
TableColumn Col(std::string name, std::string description, std::string type = "string") {
  return TableColumn{std::move(name), std::move(type), "", std::move(description), 0};
}
TableColumn Wide(std::string name, std::string description) {
  TableColumn c = Col(std::move(name), std::move(description));
  c.priority = 1;
  return c;
}
TableColumn NameCol() { return TableColumn{"Name", "string", "name", kNameDescription, 0}; }
TableColumn AgeCol() { return Col("Age", kAgeDescription); }
TableColumn CrdAgeCol() { return Col("Age", "", "date"); }

struct KindTable {
  std::vector<TableColumn> columns;
  Cells (*cells)(const Json& object, absl::Time now);
};

const std::map<std::string_view, KindTable>& KindTables() {
  static const auto* tables = new std::map<std::string_view, KindTable>{
      {"Namespace", {{NameCol(), Col("Status", "The status of the namespace"), AgeCol()}, ti::NamespaceCells}},
      {"Lease", {{NameCol(), Col("Holder", "The identity of the holder of the lease."), AgeCol()}, ti::LeaseCells}},
      {"Node",
       {{NameCol(), Col("Status", "The status of the node"), Col("Roles", "The roles of the node"), AgeCol(),
         Col("Version", "Kubelet Version reported by the node."),
         Wide("Internal-IP", "List of addresses reachable to the node."),
         Wide("External-IP", "List of addresses reachable to the node."),
         Wide("OS-Image", "OS Image reported by the node from /etc/os-release."),
         Wide("Kernel-Version", "Kernel Version reported by the node from 'uname -r'."),
         Wide("Container-Runtime", "ContainerRuntime Version reported by the node.")},
        ti::NodeCells}},
      {"PersistentVolume",
       {{NameCol(), Col("Capacity", "The persistent volume's resources and capacity."),
         Col("Access Modes", "All ways the volume can be mounted."),
         Col("Reclaim Policy", "What happens to the volume when released from its claim."),
         Col("Status", "Whether the volume is available, bound or released."),
         Col("Claim", "The claim bound to this volume, as namespace/name."),
         Col("StorageClass", "StorageClass of the pv"),
         Col("Reason", "A brief CamelCase string that describes any failure."), AgeCol(),
         Wide("VolumeAttributesClass", "VolumeAttributesClass of the pv"),
         Wide("VolumeMode", "Whether the volume holds a filesystem or is a raw block.")},
        ti::PersistentVolumeCells}},
      {"PersistentVolumeClaim",
       {{NameCol(), Col("Status", "The current phase of the PersistentVolumeClaim."),
         Col("Volume", "The PersistentVolume backing this claim."),
         Col("Capacity", "The actual resources of the underlying volume."),
         Col("Access Modes", "The actual access modes of the volume backing the claim."),
         Col("StorageClass", "StorageClass of the pvc"), AgeCol(),
         Wide("VolumeAttributesClass", "VolumeAttributesClass of the pvc"),
         Wide("VolumeMode", "What type of volume is required by the claim.")},
        ti::PersistentVolumeClaimCells}},
      {"Pod",
       {{NameCol(), Col("Ready", "The aggregate readiness state of this pod for accepting traffic."),
         Col("Status", "The aggregate status of the containers in this pod."),
         Col("Restarts", "Container restarts, and when the last one restarted."), AgeCol(),
         Wide("IP", "The IP address allocated to the pod."), Wide("Node", "The node this pod is scheduled to."),
         Wide("Nominated Node", "The node this pod preempted other pods on."),
         Wide("Readiness Gates", "Readiness gates that are true, of all.")},
        ti::PodCells}},
      {"Secret",
       {{NameCol(), Col("Type", "Used to facilitate programmatic handling of secret data."),
         Col("Data", "The number of keys in the secret's data."), AgeCol()},
        ti::SecretCells}},
      {"Event",  // Kubernetes' order: two wide columns sit between Object and Message.
       {{Col("Last Seen", "When the most recent occurrence of this event was recorded."),
         Col("Type", "Type of this event (Normal, Warning)."),
         Col("Reason", "Why the object transitioned into its current status."),
         Col("Object", "The object that this event is about."),
         Wide("Subobject", "The field path of the part of the object concerned."),
         Wide("Source", "The component reporting this event."),
         Col("Message", "A human-readable description of the status of this operation."),
         Wide("First Seen", "When the event was first recorded."),
         Wide("Count", "The number of times this event has occurred."),
         TableColumn{"Name", "string", "name", kNameDescription, 1}},
        ti::EventCells}},
      {"StorageClass",
       {{NameCol(), Col("Provisioner", "The type of the provisioner."),
         Col("ReclaimPolicy", "The reclaim policy of dynamically provisioned volumes."),
         Col("VolumeBindingMode", "How claims are provisioned and bound."),
         Col("AllowVolumeExpansion", "Whether the storage class allows volume expansion."), AgeCol()},
        ti::StorageClassCells}},
      {"VolumeAttachment",
       {{NameCol(),
         // Kubernetes marks Attacher with format "name" too.
         TableColumn{"Attacher", "string", "name", "The volume driver handling this request.", 0},
         Col("PV", "The persistent volume to attach."), Col("Node", "The node the volume should be attached to."),
         Col("Attached", "Whether the volume is successfully attached.", "boolean"), AgeCol()},
        ti::VolumeAttachmentCells}},
      {"CSIDriver",
       {{NameCol(), Col("AttachRequired", "Whether the driver needs an attach step.", "boolean"),
         Col("PodInfoOnMount", "Whether the driver wants pod information on mount.", "boolean"),
         Col("StorageCapacity", "Whether scheduling considers storage capacity.", "boolean"),
         Col("TokenRequests", "Audiences of the service account tokens the driver needs."),
         Col("RequiresRepublish", "Whether NodePublishVolume is called periodically.", "boolean"),
         Col("Modes", "The kinds of volumes the driver supports."), AgeCol()},
        ti::CSIDriverCells}},
      {"CSINode",
       {{NameCol(), Col("Drivers", "Drivers indicates the number of CSI drivers registered on the node", "integer"),
         AgeCol()},
        ti::CSINodeCells}},
      {"CSIStorageCapacity",  // no Age column in Kubernetes either
       {{NameCol(), Col("StorageClassName", "The StorageClass the reported capacity applies to."),
         Col("Capacity", "The capacity reported by the CSI driver.")},
        ti::CSIStorageCapacityCells}},
      {"VolumeSnapshotClass",
       {{NameCol(), Col("Driver", ""),
         Col("DeletionPolicy", "Whether contents are deleted with their bound snapshots."), CrdAgeCol()},
        ti::VolumeSnapshotClassCells}},
      {"VolumeSnapshot",
       {{NameCol(), Col("ReadyToUse", "Indicates if the snapshot is ready to be used to restore a volume.", "boolean"),
         Col("SourcePVC", "The source PVC of the snapshot."),
         Col("SourceSnapshotContent", "The pre-existing VolumeSnapshotContent, if any."),
         Col("RestoreSize", "The minimum size of a volume restored from this snapshot."),
         Col("SnapshotClass", "The VolumeSnapshotClass requested by the VolumeSnapshot."),
         Col("SnapshotContent", "The VolumeSnapshotContent this snapshot intends to bind to."),
         Col("CreationTime", "When the storage system took the snapshot.", "date"), CrdAgeCol()},
        ti::VolumeSnapshotCells}},
      {"VolumeSnapshotContent",
       {{NameCol(), Col("ReadyToUse", "Indicates if the snapshot is ready to be used to restore a volume.", "boolean"),
         Col("RestoreSize", "Represents the complete size of the snapshot in bytes", "integer"),
         Col("DeletionPolicy", "Whether the snapshot is deleted with its VolumeSnapshot."),
         Col("Driver", "The CSI driver that created the snapshot."),
         Col("VolumeSnapshotClass", "The VolumeSnapshotClass of this snapshot."),
         Col("VolumeSnapshot", "The VolumeSnapshot this content is bound to."),
         Col("VolumeSnapshotNamespace", "The namespace of that VolumeSnapshot."), CrdAgeCol()},
        ti::VolumeSnapshotContentCells}},
      // backup.berth.io: the columns of docs/api.md, close to Velero's CLI.
      {"BackupStorageLocation",
       {{NameCol(), Col("Phase", "Whether the repository can be used: Available or Unavailable."),
         Col("Last Validated", "When the location was last checked.", "date"), AgeCol(),
         Col("Default", "Whether backups naming no location use this one.", "boolean")},
        ti::BackupStorageLocationCells}},
      {"Backup",
       {{NameCol(), Col("Phase", "New, InProgress, Completed, PartiallyFailed, Failed..."),
         Col("Errors", "Errors met by the backup.", "integer"),
         Col("Warnings", "Warnings met by the backup.", "integer"),
         Col("Progress", "Bytes copied of the volumes' total."),
         Col("Storage Location", "The BackupStorageLocation the backup is stored in."),
         Col("Expires", "How long until the backup expires and is deleted."), AgeCol()},
        ti::BackupCells}},
      {"Restore",
       {{NameCol(), Col("Backup", "The backup restored from."),
         Col("Phase", "New, InProgress, Completed, PartiallyFailed, Failed..."),
         Col("Started", "When the restore started.", "date"), Col("Completed", "When the restore ended.", "date"),
         Col("Errors", "Errors met by the restore.", "integer"),
         Col("Warnings", "Warnings met by the restore.", "integer"), AgeCol()},
        ti::RestoreCells}},
      {"Schedule",
       {{NameCol(), Col("Status", "Enabled, or FailedValidation."), Col("Schedule", "When backups are made (cron)."),
         Col("LastBackup", "When the last backup was created.", "date"), AgeCol(),
         Col("Paused", "Whether backups are suspended.", "boolean")},
        ti::ScheduleCells}},
  };
  return *tables;
}

const KindTable& TableFor(const KindInfo& kind) {
  static const auto* fallback =
      new KindTable{{NameCol(), Col("Created At", kAgeDescription, "date")}, ti::DefaultCells};
  auto it = KindTables().find(kind.kind);
  return it == KindTables().end() ? *fallback : it->second;
}

// ---- Text rendering ------------------------------------------------------------------

// A cell as kubectl prints it: null as <none>, text cut at the first line
// break (with "..."), terminal escapes defused.
std::string CellText(const Json& cell) {
  if (cell.is_null()) return "<none>";
  if (cell.is_boolean()) return cell.get<bool>() ? "true" : "false";
  if (!cell.is_string()) return ti::Dump(cell);
  std::string text = cell.get<std::string>();
  if (size_t cut = text.find_first_of("\f\n\r"); cut != std::string::npos) {
    text = text.substr(0, cut) + "...";
  }
  // A tab would split the cell in kubectl's tabwriter; keep the layout.
  return absl::StrReplaceAll(text, {{"\x1b", "^["}, {"\t", " "}});
}

// Display width: UTF-8 code points, as Go's tabwriter counts.
size_t TextWidth(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

}  // namespace

// kubectl's tabwriter: minwidth 6, padding 3; the last column is not padded.
std::string Tabulate(const std::vector<std::vector<std::string>>& lines) {
  constexpr size_t kMinWidth = 6;
  constexpr size_t kPadding = 3;
  std::vector<size_t> widths;
  for (const auto& line : lines) {
    if (widths.size() < line.size()) widths.resize(line.size(), kMinWidth);
    for (size_t i = 0; i < line.size(); ++i) {
      widths[i] = std::max(widths[i], TextWidth(line[i]) + kPadding);
    }
  }
  std::string out;
  for (const auto& line : lines) {
    for (size_t i = 0; i < line.size(); ++i) {
      out += line[i];
      if (i + 1 < line.size()) out.append(widths[i] - TextWidth(line[i]), ' ');
    }
    out += '\n';
  }
  return out;
}

std::string HumanDuration(absl::Duration d) {
  // A deviation of up to 2s (excluded) counts as now, for clock skew.
  const int64_t seconds = absl::ToInt64Seconds(d);
  if (seconds < -1) return "<invalid>";
  if (seconds < 0) return "0s";
  if (seconds < 60 * 2) return absl::StrCat(seconds, "s");
  const int64_t minutes = absl::ToInt64Minutes(d);
  if (minutes < 10) {
    const int64_t s = seconds % 60;
    return s == 0 ? absl::StrCat(minutes, "m") : absl::StrCat(minutes, "m", s, "s");
  }
  if (minutes < 60 * 3) return absl::StrCat(minutes, "m");
  const int64_t hours = absl::ToInt64Hours(d);
  if (hours < 8) {
    const int64_t m = minutes % 60;
    return m == 0 ? absl::StrCat(hours, "h") : absl::StrCat(hours, "h", m, "m");
  }
  if (hours < 48) return absl::StrCat(hours, "h");
  if (hours < 24 * 8) {
    const int64_t h = hours % 24;
    return h == 0 ? absl::StrCat(hours / 24, "d") : absl::StrCat(hours / 24, "d", h, "h");
  }
  if (hours < 24 * 365 * 2) return absl::StrCat(hours / 24, "d");
  if (hours < 24 * 365 * 8) {
    const int64_t days = (hours / 24) % 365;
    return days == 0 ? absl::StrCat(hours / 24 / 365, "y") : absl::StrCat(hours / 24 / 365, "y", days, "d");
  }
  return absl::StrCat(hours / 24 / 365, "y");
}

std::vector<TableColumn> TableColumns(const KindInfo& kind) { return TableFor(kind).columns; }

std::vector<nlohmann::json> TableCells(const KindInfo& kind, const nlohmann::json& object, absl::Time now) {
  return TableFor(kind).cells(object, now);
}

nlohmann::json BuildTable(const KindInfo& kind, const std::vector<nlohmann::json>& objects, absl::Time now,
                          const std::string& resource_version) {
  Json columns = Json::array();
  for (const TableColumn& c : TableColumns(kind)) {
    columns.push_back({{"name", c.name},
                       {"type", c.type},
                       {"format", c.format},
                       {"description", c.description},
                       {"priority", c.priority}});
  }
  Json rows = Json::array();
  for (const Json& object : objects) {
    const Json& object_metadata = ti::At(object, {"metadata"});
    Json metadata = object_metadata.is_object() ? object_metadata : Json::object();
    if (auto it = metadata.find("annotations"); kind.kind == "Secret" && it != metadata.end() && it->is_object()) {
      // `kubectl apply` keeps the whole manifest, data included, here.
      it->erase("kubectl.kubernetes.io/last-applied-configuration");
    }
    Json row = {
        {"cells", TableCells(kind, object, now)},
        {"object",
         {{"kind", "PartialObjectMetadata"}, {"apiVersion", "meta.k8s.io/v1"}, {"metadata", std::move(metadata)}}}};
    if (kind.kind == "Pod") {
      const std::string phase = ti::Str(object, {"status", "phase"});
      if (phase == "Succeeded" || phase == "Failed") {
        Json completed = {
            {"type", "Completed"},
            {"status", "True"},
            {"reason", phase},
            {"message", phase == "Succeeded" ? "The pod has completed successfully." : "The pod failed."}};
        row["conditions"] = Json::array({std::move(completed)});
      }
    }
    rows.push_back(std::move(row));
  }
  Json metadata = Json::object();
  if (!resource_version.empty()) metadata["resourceVersion"] = resource_version;
  return {{"kind", "Table"},
          {"apiVersion", "meta.k8s.io/v1"},
          {"metadata", std::move(metadata)},
          {"columnDefinitions", std::move(columns)},
          {"rows", std::move(rows)}};
}

std::string RenderTable(const nlohmann::json& table, bool wide, bool with_namespace, bool with_headers) {
  const Json& rows = ti::Items(table, {"rows"});
  if (rows.empty()) return "";  // kubectl prints no headers for no rows
  const Json& columns = ti::Items(table, {"columnDefinitions"});
  std::vector<size_t> shown;
  for (size_t i = 0; i < columns.size(); ++i) {
    if (wide || ti::AsInt(ti::At(columns[i], {"priority"})) == 0) shown.push_back(i);
  }
  std::vector<std::vector<std::string>> lines;
  if (with_headers) {
    std::vector<std::string>& header = lines.emplace_back();
    if (with_namespace) header.push_back("NAMESPACE");
    for (size_t i : shown) header.push_back(absl::AsciiStrToUpper(ti::Str(columns[i], {"name"})));
  }
  for (const Json& row : rows) {
    std::vector<std::string>& line = lines.emplace_back();
    if (with_namespace) {
      const Json& metadata = ti::At(row, {"object", "metadata"});
      line.push_back(metadata.is_object() ? CellText(ti::Str(metadata, {"namespace"})) : "<none>");
    }
    const Json& cells = ti::Items(row, {"cells"});
    for (size_t i : shown) line.push_back(i < cells.size() ? CellText(cells[i]) : "");
  }
  return Tabulate(lines);
}

}  // namespace berth::api
