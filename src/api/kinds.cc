#include "api/kinds.h"

#include <algorithm>
#include <cctype>

namespace berth::api {
namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

}  // namespace

std::string KindInfo::api_version() const {
  return group.empty() ? std::string(version) : std::string(group) + "/" + std::string(version);
}

const std::vector<KindInfo>& AllKinds() {
  static const auto* kinds = new std::vector<KindInfo>{
      {"", "v1", "Namespace", "namespaces", "namespace", false, {"ns"}},
      {"", "v1", "Node", "nodes", "node", false, {"no"}},
      {"", "v1", "PersistentVolume", "persistentvolumes", "persistentvolume", false, {"pv"}},
      {"", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", "persistentvolumeclaim", true, {"pvc"}},
      {"", "v1", "Pod", "pods", "pod", true, {"po"}},
      {"", "v1", "Secret", "secrets", "secret", true, {}},
      {"", "v1", "Event", "events", "event", true, {"ev"}},
      {"coordination.k8s.io", "v1", "Lease", "leases", "lease", true, {}},
      {"storage.k8s.io", "v1", "StorageClass", "storageclasses", "storageclass", false, {"sc"}},
      {"storage.k8s.io", "v1", "VolumeAttachment", "volumeattachments", "volumeattachment", false, {"va"}},
      {"storage.k8s.io", "v1", "CSIDriver", "csidrivers", "csidriver", false, {}},
      {"storage.k8s.io", "v1", "CSINode", "csinodes", "csinode", false, {}},
      {"storage.k8s.io", "v1", "CSIStorageCapacity", "csistoragecapacities", "csistoragecapacity", true, {}},
      {"snapshot.storage.k8s.io",
       "v1",
       "VolumeSnapshotClass",
       "volumesnapshotclasses",
       "volumesnapshotclass",
       false,
       {"vsclass", "vsclasses"}},
      {"snapshot.storage.k8s.io", "v1", "VolumeSnapshot", "volumesnapshots", "volumesnapshot", true, {"vs"}},
      {"snapshot.storage.k8s.io",
       "v1",
       "VolumeSnapshotContent",
       "volumesnapshotcontents",
       "volumesnapshotcontent",
       false,
       {"vsc", "vscs"}},
      // berth's own, shaped like Velero's velero.io/v1 kinds (types/backup.h).
      {"backup.berth.io",
       "v1",
       "BackupStorageLocation",
       "backupstoragelocations",
       "backupstoragelocation",
       false,
       {"bsl"}},
      {"backup.berth.io", "v1", "Backup", "backups", "backup", false, {}},
      {"backup.berth.io", "v1", "Restore", "restores", "restore", false, {}},
      {"backup.berth.io", "v1", "Schedule", "schedules", "schedule", false, {}},
  };
  return *kinds;
}

const KindInfo* FindKind(std::string_view api_version, std::string_view kind) {
  for (const auto& k : AllKinds()) {
    if (k.kind == kind && k.api_version() == api_version) return &k;
  }
  return nullptr;
}

const KindInfo* FindResource(std::string_view group, std::string_view resource) {
  for (const auto& k : AllKinds()) {
    if (k.group == group && k.resource == resource) return &k;
  }
  return nullptr;
}

const KindInfo* FindByUserName(std::string_view name) {
  std::string n = Lower(name);
  std::string group;
  if (size_t dot = n.find('.'); dot != std::string::npos) {
    group = n.substr(dot + 1);
    n = n.substr(0, dot);
  }
  for (const auto& k : AllKinds()) {
    if (!group.empty() && k.group != group) continue;
    if (n == k.resource || n == k.singular || n == Lower(k.kind)) return &k;
    for (auto s : k.short_names) {
      if (n == s) return &k;
    }
  }
  return nullptr;
}

}  // namespace berth::api
