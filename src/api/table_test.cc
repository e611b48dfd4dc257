#include "api/table.h"

#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace berth::api {
namespace {

using Json = nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

const KindInfo& Kind(std::string_view name) {
  for (const KindInfo& k : AllKinds()) {
    if (k.kind == name) return k;
  }
  std::abort();
}

// All timestamps below are relative to this instant.
absl::Time Now() {
  absl::Time t;
  std::string err;
  EXPECT_TRUE(absl::ParseTime(absl::RFC3339_full, "2024-05-01T12:00:00Z", &t, &err)) << err;
  return t;
}

std::vector<std::string> ColumnNames(const KindInfo& kind, int priority) {
  std::vector<std::string> names;
  for (const TableColumn& c : TableColumns(kind)) {
    if (c.priority == priority) names.push_back(c.name);
  }
  return names;
}

Json Cells(std::string_view kind, const char* object) {
  return Json(TableCells(Kind(kind), Json::parse(object), Now()));
}

constexpr char kBoundClaim[] = R"({
  "apiVersion": "v1", "kind": "PersistentVolumeClaim",
  "metadata": {"name": "data", "namespace": "default",
               "creationTimestamp": "2024-05-01T11:55:00Z"},
  "spec": {"volumeName": "pvc-0a1b", "storageClassName": "standard", "volumeMode": "Filesystem",
           "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}}},
  "status": {"phase": "Bound", "capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"]}
})";

constexpr char kPendingClaim[] = R"({
  "apiVersion": "v1", "kind": "PersistentVolumeClaim",
  "metadata": {"name": "scratch-volume", "namespace": "team-a",
               "creationTimestamp": "2024-05-01T11:59:15Z"},
  "spec": {"storageClassName": "fast", "accessModes": ["ReadWriteOnce"],
           "resources": {"requests": {"storage": "1Gi"}}},
  "status": {"phase": "Pending"}
})";

Json ClaimTable() {
  return BuildTable(Kind("PersistentVolumeClaim"), {Json::parse(kBoundClaim), Json::parse(kPendingClaim)}, Now(), "7");
}

TEST(TableTest, PersistentVolumeClaimColumns) {
  const KindInfo& pvc = Kind("PersistentVolumeClaim");
  EXPECT_THAT(ColumnNames(pvc, 0),
              ElementsAre("Name", "Status", "Volume", "Capacity", "Access Modes", "StorageClass", "Age"));
  EXPECT_THAT(ColumnNames(pvc, 1), ElementsAre("VolumeAttributesClass", "VolumeMode"));
  std::vector<TableColumn> columns = TableColumns(pvc);
  EXPECT_EQ(columns[0].format, "name");
  for (const TableColumn& c : columns) EXPECT_EQ(c.type, "string") << c.name;
}

TEST(TableTest, ClaimCellsBoundAndUnbound) {
  EXPECT_EQ(Cells("PersistentVolumeClaim", kBoundClaim),
            Json::array({"data", "Bound", "pvc-0a1b", "10Gi", "RWO", "standard", "5m", "<unset>", "Filesystem"}));
  // Like `kubectl get pvc`: an unbound claim shows no volume, capacity or modes.
  EXPECT_EQ(Cells("PersistentVolumeClaim", kPendingClaim),
            Json::array({"scratch-volume", "Pending", "", "", "", "fast", "45s", "<unset>", "<unset>"}));
}

TEST(TableTest, ClaimBeingDeletedWithBetaStorageClass) {
  Json cells = Cells("PersistentVolumeClaim", R"({
    "metadata": {"name": "old", "creationTimestamp": "2024-05-01T09:00:00Z",
                 "deletionTimestamp": "2024-05-01T11:59:00Z",
                 "annotations": {"volume.beta.kubernetes.io/storage-class": "legacy"}},
    "spec": {"storageClassName": "ignored", "volumeName": "pv-1",
             "volumeAttributesClassName": "gold"},
    "status": {"phase": "Bound", "capacity": {"storage": "5Gi"},
               "accessModes": ["ReadWriteOncePod", "ReadWriteMany", "ReadOnlyMany",
                               "ReadWriteOnce", "ReadWriteOnce"]}
  })");
  EXPECT_EQ(cells[1], "Terminating");
  EXPECT_EQ(cells[3], "5Gi");
  EXPECT_EQ(cells[4], "RWO,ROX,RWX,RWOP");  // fixed order, no duplicates
  EXPECT_EQ(cells[5], "legacy");
  EXPECT_EQ(cells[6], "3h");
  EXPECT_EQ(cells[7], "gold");  // VolumeAttributesClass is a wide column
}

TEST(TableTest, PersistentVolumeColumnsAndCells) {
  const KindInfo& pv = Kind("PersistentVolume");
  EXPECT_THAT(ColumnNames(pv, 0), ElementsAre("Name", "Capacity", "Access Modes", "Reclaim Policy", "Status", "Claim",
                                              "StorageClass", "Reason", "Age"));
  EXPECT_THAT(ColumnNames(pv, 1), ElementsAre("VolumeAttributesClass", "VolumeMode"));
  EXPECT_EQ(Cells("PersistentVolume", R"({
    "metadata": {"name": "pvc-0a1b", "creationTimestamp": "2024-05-01T09:00:00Z"},
    "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce", "ReadOnlyMany"],
             "persistentVolumeReclaimPolicy": "Delete", "storageClassName": "standard",
             "claimRef": {"kind": "PersistentVolumeClaim", "namespace": "default",
                          "name": "data"},
             "volumeMode": "Block"},
    "status": {"phase": "Bound"}
  })"),
            Json::array({"pvc-0a1b", "10Gi", "RWO,ROX", "Delete", "Bound", "default/data", "standard", "", "3h",
                         "<unset>", "Block"}));
  // Unclaimed, no capacity: Kubernetes prints a zero quantity as "0".
  EXPECT_EQ(
      Cells("PersistentVolume", R"({
    "metadata": {"name": "pv-free", "creationTimestamp": "2024-05-01T11:55:00Z"},
    "spec": {"persistentVolumeReclaimPolicy": "Retain"},
    "status": {"phase": "Failed", "reason": "RecyclerFailed"}
  })"),
      Json::array({"pv-free", "0", "", "Retain", "Failed", "", "", "RecyclerFailed", "5m", "<unset>", "<unset>"}));
}

TEST(TableTest, StorageClassDefaultsAndDefaultMarker) {
  const KindInfo& sc = Kind("StorageClass");
  EXPECT_THAT(ColumnNames(sc, 0),
              ElementsAre("Name", "Provisioner", "ReclaimPolicy", "VolumeBindingMode", "AllowVolumeExpansion", "Age"));
  EXPECT_EQ(Cells("StorageClass", R"({
    "metadata": {"name": "standard", "creationTimestamp": "2024-04-29T12:00:00Z",
                 "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
    "provisioner": "csi.example.com", "reclaimPolicy": "Retain",
    "volumeBindingMode": "WaitForFirstConsumer", "allowVolumeExpansion": true
  })"),
            Json::array({"standard (default)", "csi.example.com", "Retain", "WaitForFirstConsumer", true, "2d"}));
  EXPECT_EQ(Cells("StorageClass", R"({
    "metadata": {"name": "old",
                 "annotations": {"storageclass.beta.kubernetes.io/is-default-class": "true"}},
    "provisioner": "csi.example.com"
  })")[0],
            "old (default)");
  // Not "true": no marker. Unset policy, mode and expansion print Kubernetes' defaults.
  EXPECT_EQ(Cells("StorageClass", R"({
    "metadata": {"name": "plain", "creationTimestamp": "2024-05-01T11:55:00Z",
                 "annotations": {"storageclass.kubernetes.io/is-default-class": "false"}},
    "provisioner": "csi.example.com"
  })"),
            Json::array({"plain", "csi.example.com", "Delete", "Immediate", false, "5m"}));
}

TEST(TableTest, VolumeSnapshotFollowsTheCrdPrinterColumns) {
  const KindInfo& vs = Kind("VolumeSnapshot");
  EXPECT_THAT(ColumnNames(vs, 0), ElementsAre("Name", "ReadyToUse", "SourcePVC", "SourceSnapshotContent", "RestoreSize",
                                              "SnapshotClass", "SnapshotContent", "CreationTime", "Age"));
  std::vector<std::string> types;
  for (const TableColumn& c : TableColumns(vs)) types.push_back(c.type);
  EXPECT_THAT(types,
              ElementsAre("string", "boolean", "string", "string", "string", "string", "string", "date", "date"));

  constexpr char kNew[] = R"({
    "metadata": {"name": "snap-1", "namespace": "default",
                 "creationTimestamp": "2024-05-01T11:55:00Z"},
    "spec": {"source": {"persistentVolumeClaimName": "data"},
             "volumeSnapshotClassName": "csi-snapclass"}
  })";
  // Fields a CRD column cannot find are null cells.
  EXPECT_EQ(Cells("VolumeSnapshot", kNew),
            Json::array({"snap-1", nullptr, "data", nullptr, nullptr, "csi-snapclass", nullptr, nullptr, "5m"}));
  EXPECT_EQ(RenderTable(BuildTable(vs, {Json::parse(kNew)}, Now(), ""), false, false),
            "NAME     READYTOUSE   SOURCEPVC   SOURCESNAPSHOTCONTENT   RESTORESIZE   "
            "SNAPSHOTCLASS   SNAPSHOTCONTENT   CREATIONTIME   AGE\n"
            "snap-1   <none>       data        <none>                  <none>        "
            "csi-snapclass   <none>            <none>         5m\n");

  EXPECT_EQ(Cells("VolumeSnapshot", R"({
    "metadata": {"name": "snap-2", "creationTimestamp": "2024-05-01T11:55:00Z"},
    "spec": {"source": {"persistentVolumeClaimName": "data"}},
    "status": {"readyToUse": true, "restoreSize": "10Gi", "creationTime": "2024-05-01T11:56:00Z",
               "boundVolumeSnapshotContentName": "snapcontent-1"}
  })"),
            Json::array({"snap-2", true, "data", nullptr, "10Gi", nullptr, "snapcontent-1", "4m", "5m"}));
}

TEST(TableTest, VolumeSnapshotContentAndClass) {
  const KindInfo& vsc = Kind("VolumeSnapshotContent");
  EXPECT_THAT(ColumnNames(vsc, 0),
              ElementsAre("Name", "ReadyToUse", "RestoreSize", "DeletionPolicy", "Driver", "VolumeSnapshotClass",
                          "VolumeSnapshot", "VolumeSnapshotNamespace", "Age"));
  Json cells = Cells("VolumeSnapshotContent", R"({
    "metadata": {"name": "snapcontent-1", "creationTimestamp": "2024-05-01T11:55:00Z"},
    "spec": {"deletionPolicy": "Delete", "driver": "csi.example.com",
             "volumeSnapshotClassName": "csi-snapclass",
             "volumeSnapshotRef": {"name": "snap-2", "namespace": "default"},
             "source": {"volumeHandle": "vol-1"}},
    "status": {"readyToUse": true, "restoreSize": 10737418240}
  })");
  EXPECT_EQ(cells, Json::array({"snapcontent-1", true, 10737418240, "Delete", "csi.example.com", "csi-snapclass",
                                "snap-2", "default", "5m"}));
  EXPECT_TRUE(cells[2].is_number_integer());

  EXPECT_THAT(ColumnNames(Kind("VolumeSnapshotClass"), 0), ElementsAre("Name", "Driver", "DeletionPolicy", "Age"));
}

TEST(TableTest, BackupKindsShowPhaseProgressAndExpiry) {
  EXPECT_THAT(ColumnNames(Kind("Backup"), 0),
              ElementsAre("Name", "Phase", "Errors", "Warnings", "Progress", "Storage Location", "Expires", "Age"));
  Json running = Cells("Backup", R"({
    "metadata": {"name": "nightly-20240501115500", "creationTimestamp": "2024-05-01T11:55:00Z"},
    "spec": {"storageLocation": "default", "ttl": "720h0m0s"},
    "status": {"phase": "InProgress", "expiration": "2024-05-31T11:55:00Z", "warnings": 2,
               "progress": {"totalBytes": 4294967296, "bytesDone": 1288490189}}
  })");
  EXPECT_EQ(running, Json::array({"nightly-20240501115500", "InProgress", 0, 2, "1.2Gi/4Gi", "default", "29d", "5m"}));
  EXPECT_TRUE(running[2].is_number_integer());
  // Before its controller has looked at it, and after it expired.
  EXPECT_EQ(Cells("Backup", R"({"metadata": {"name": "b", "creationTimestamp": "2024-05-01T11:55:00Z"}})"),
            Json::array({"b", nullptr, 0, 0, nullptr, nullptr, nullptr, "5m"}));
  EXPECT_EQ(Cells("Backup", R"({"metadata": {"name": "b", "creationTimestamp": "2024-04-01T11:55:00Z"},
                               "status": {"phase": "Completed", "expiration": "2024-05-01T11:00:00Z",
                                          "progress": {"totalBytes": 0}}})")[6],
            "expired");

  EXPECT_THAT(ColumnNames(Kind("Restore"), 0),
              ElementsAre("Name", "Backup", "Phase", "Started", "Completed", "Errors", "Warnings", "Age"));
  EXPECT_EQ(Cells("Restore", R"({
    "metadata": {"name": "r", "creationTimestamp": "2024-05-01T11:55:00Z"},
    "spec": {"backupName": "nightly"},
    "status": {"phase": "Completed", "startTimestamp": "2024-05-01T11:55:00Z",
               "completionTimestamp": "2024-05-01T11:58:00Z", "errors": 1}
  })"),
            Json::array({"r", "nightly", "Completed", "5m", "2m", 1, 0, "5m"}));

  EXPECT_THAT(ColumnNames(Kind("Schedule"), 0),
              ElementsAre("Name", "Status", "Schedule", "LastBackup", "Age", "Paused"));
  EXPECT_EQ(Cells("Schedule", R"({
    "metadata": {"name": "nightly", "creationTimestamp": "2024-04-01T12:00:00Z"},
    "spec": {"schedule": "0 2 * * *", "paused": true},
    "status": {"phase": "Enabled", "lastBackup": "2024-05-01T02:00:00Z"}
  })"),
            Json::array({"nightly", "Enabled", "0 2 * * *", "10h", "30d", true}));

  EXPECT_THAT(ColumnNames(Kind("BackupStorageLocation"), 0),
              ElementsAre("Name", "Phase", "Last Validated", "Age", "Default"));
  const Json location = Json::parse(R"({
    "apiVersion": "backup.berth.io/v1", "kind": "BackupStorageLocation",
    "metadata": {"name": "default", "creationTimestamp": "2024-05-01T11:00:00Z"},
    "spec": {"provider": "filesystem", "config": {"path": "/backups"}, "default": true},
    "status": {"phase": "Available", "lastValidationTime": "2024-05-01T11:59:30Z"}
  })");
  EXPECT_EQ(RenderTable(BuildTable(Kind("BackupStorageLocation"), {location}, Now(), "1"), false, false),
            "NAME      PHASE       LAST VALIDATED   AGE   DEFAULT\n"
            "default   Available   30s              60m   true\n");
}

TEST(TableTest, SecretShowsKeyCountAndNeverValues) {
  const KindInfo& secret = Kind("Secret");
  EXPECT_THAT(ColumnNames(secret, 0), ElementsAre("Name", "Type", "Data", "Age"));
  EXPECT_THAT(ColumnNames(secret, 1), ElementsAre());
  constexpr char kSecret[] = R"({
    "apiVersion": "v1", "kind": "Secret",
    "metadata": {"name": "db-creds", "namespace": "default",
                 "creationTimestamp": "2024-05-01T11:55:00Z",
                 "annotations": {
                   "kubectl.kubernetes.io/last-applied-configuration":
                     "{\"data\":{\"password\":\"c3VwZXJzZWNyZXQ=\"},\"kind\":\"Secret\"}",
                   "team": "storage"}},
    "type": "kubernetes.io/basic-auth",
    "data": {"username": "YWRtaW4=", "password": "c3VwZXJzZWNyZXQ="},
    "stringData": {"token": "plain-token-value"}
  })";
  Json cells = Cells("Secret", kSecret);
  EXPECT_EQ(cells, Json::array({"db-creds", "kubernetes.io/basic-auth", 3, "5m"}));
  EXPECT_TRUE(cells[2].is_number_integer());

  Json table = BuildTable(secret, {Json::parse(kSecret)}, Now(), "9");
  const std::string dump = table.dump();
  const std::string text = RenderTable(table, true, true);
  for (const char* value : {"YWRtaW4=", "c3VwZXJzZWNyZXQ=", "plain-token-value", "admin"}) {
    EXPECT_THAT(dump, Not(HasSubstr(value)));
    EXPECT_THAT(text, Not(HasSubstr(value)));
  }
  EXPECT_EQ(table["rows"][0]["object"]["metadata"]["annotations"], Json::object({{"team", "storage"}}));
  EXPECT_EQ(text,
            "NAMESPACE   NAME       TYPE                       DATA   AGE\n"
            "default     db-creds   kubernetes.io/basic-auth   3      5m\n");

  EXPECT_EQ(Cells("Secret", R"({"metadata": {"name": "empty"}})"), Json::array({"empty", "Opaque", 0, "<unknown>"}));
}

TEST(TableTest, NodeStatusRolesAndVersion) {
  const KindInfo& node = Kind("Node");
  EXPECT_THAT(ColumnNames(node, 0), ElementsAre("Name", "Status", "Roles", "Age", "Version"));
  EXPECT_THAT(ColumnNames(node, 1),
              ElementsAre("Internal-IP", "External-IP", "OS-Image", "Kernel-Version", "Container-Runtime"));
  EXPECT_EQ(Cells("Node", R"({
    "metadata": {"name": "node-1", "creationTimestamp": "2024-04-29T12:00:00Z",
                 "labels": {"node-role.kubernetes.io/worker": "",
                            "node-role.kubernetes.io/control-plane": "",
                            "kubernetes.io/hostname": "node-1"}},
    "spec": {"unschedulable": true},
    "status": {"conditions": [{"type": "MemoryPressure", "status": "False"},
                              {"type": "Ready", "status": "True"}],
               "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
               "nodeInfo": {"kubeletVersion": "v1.30.2", "osImage": "Debian GNU/Linux 12"}}
  })"),
            Json::array({"node-1", "Ready,SchedulingDisabled", "control-plane,worker", "2d", "v1.30.2", "10.0.0.1",
                         "<none>", "Debian GNU/Linux 12", "<unknown>", "<unknown>"}));
  Json not_ready = Cells("Node", R"({
    "metadata": {"name": "node-2"},
    "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}
  })");
  EXPECT_EQ(not_ready[1], "NotReady");
  EXPECT_EQ(not_ready[2], "<none>");
  EXPECT_EQ(Cells("Node", R"({"metadata": {"name": "node-3"}})")[1], "Unknown");
}

TEST(TableTest, LeaseHolderAsKubectl) {
  EXPECT_THAT(ColumnNames(Kind("Lease"), 0), ElementsAre("Name", "Holder", "Age"));
  EXPECT_EQ(Cells("Lease", R"({
    "metadata": {"name": "node-1", "namespace": "kube-node-lease", "creationTimestamp": "2024-05-01T11:59:00Z"},
    "spec": {"holderIdentity": "node-1", "leaseDurationSeconds": 40, "renewTime": "2024-05-01T11:59:58.123456Z"}
  })"),
            Json::array({"node-1", "node-1", "60s"}));
  EXPECT_EQ(Cells("Lease", R"({"metadata": {"name": "free"}, "spec": {}})")[1], "");
}

TEST(TableTest, PodReadyStatusAndRestarts) {
  const KindInfo& pod = Kind("Pod");
  EXPECT_THAT(ColumnNames(pod, 0), ElementsAre("Name", "Ready", "Status", "Restarts", "Age"));
  EXPECT_THAT(ColumnNames(pod, 1), ElementsAre("IP", "Node", "Nominated Node", "Readiness Gates"));
  EXPECT_EQ(
      Cells("Pod", R"({
    "metadata": {"name": "web-0", "creationTimestamp": "2024-05-01T11:50:00Z"},
    "spec": {"nodeName": "node-1", "containers": [{"name": "app"}, {"name": "log"}]},
    "status": {"phase": "Running", "podIPs": [{"ip": "10.0.0.5"}],
               "containerStatuses": [
                 {"name": "app", "ready": true, "restartCount": 0, "state": {"running": {}}},
                 {"name": "log", "ready": false, "restartCount": 3,
                  "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                  "lastState": {"terminated": {"exitCode": 1,
                                               "finishedAt": "2024-05-01T11:58:00Z"}}}]}
  })"),
      Json::array({"web-0", "1/2", "CrashLoopBackOff", "3 (2m ago)", "10m", "10.0.0.5", "node-1", "<none>", "<none>"}));
  Json init = Cells("Pod", R"({
    "metadata": {"name": "db-0"},
    "spec": {"initContainers": [{"name": "setup"}], "containers": [{"name": "db"}]},
    "status": {"phase": "Pending",
               "initContainerStatuses": [{"name": "setup", "state": {"running": {}}}]}
  })");
  EXPECT_EQ(init[1], "0/1");
  EXPECT_EQ(init[2], "Init:0/1");
  EXPECT_EQ(init[3], "0");
  Json gone = Cells("Pod", R"({
    "metadata": {"name": "db-1", "deletionTimestamp": "2024-05-01T11:59:00Z"},
    "spec": {"containers": [{"name": "db"}]}, "status": {"phase": "Running"}
  })");
  EXPECT_EQ(gone[2], "Terminating");

  Json done = BuildTable(pod, {Json::parse(R"({
    "metadata": {"name": "job-1"},
    "spec": {"containers": [{"name": "main"}]},
    "status": {"phase": "Succeeded", "containerStatuses": [
      {"name": "main", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}
  })")},
                         Now(), "");
  EXPECT_EQ(done["rows"][0]["cells"][2], "Completed");
  EXPECT_EQ(done["rows"][0]["conditions"][0]["type"], "Completed");
}

TEST(TableTest, EventColumnsAsKubectlGetEvents) {
  const KindInfo& event = Kind("Event");
  EXPECT_THAT(ColumnNames(event, 0), ElementsAre("Last Seen", "Type", "Reason", "Object", "Message"));
  EXPECT_EQ(Cells("Event", R"({
    "metadata": {"name": "web-0.17a", "namespace": "default"},
    "involvedObject": {"kind": "Pod", "name": "web-0", "fieldPath": "spec.containers{app}"},
    "reason": "BackOff", "type": "Warning", "count": 5,
    "message": "  Back-off restarting failed container\n",
    "firstTimestamp": "2024-05-01T11:50:00Z", "lastTimestamp": "2024-05-01T11:59:00Z",
    "source": {"component": "kubelet", "host": "node-1"}
  })"),
            Json::array({"60s", "Warning", "BackOff", "pod/web-0", "spec.containers{app}", "kubelet, node-1",
                         "Back-off restarting failed container", "10m", 5, "web-0.17a"}));
  EXPECT_EQ(Cells("Event", R"({
    "metadata": {"name": "ev-2"},
    "involvedObject": {"kind": "PersistentVolumeClaim"},
    "eventTime": "2024-05-01T11:59:30.000000Z", "reportingComponent": "berth-controller",
    "type": "Normal", "reason": "Provisioning", "message": "waiting"
  })"),
            Json::array({"30s", "Normal", "Provisioning", "persistentvolumeclaim", "", "berth-controller", "waiting",
                         "30s", 1, "ev-2"}));
}

TEST(TableTest, StorageAndCsiKinds) {
  EXPECT_EQ(Cells("VolumeAttachment", R"({
    "metadata": {"name": "csi-0a1b", "creationTimestamp": "2024-05-01T11:55:00Z"},
    "spec": {"attacher": "csi.example.com", "nodeName": "node-1",
             "source": {"persistentVolumeName": "pvc-0a1b"}},
    "status": {"attached": true}
  })"),
            Json::array({"csi-0a1b", "csi.example.com", "pvc-0a1b", "node-1", true, "5m"}));
  EXPECT_EQ(Cells("CSIDriver", R"({
    "metadata": {"name": "csi.example.com", "creationTimestamp": "2024-05-01T11:55:00Z"},
    "spec": {"attachRequired": false, "volumeLifecycleModes": ["Persistent", "Ephemeral"]}
  })"),
            Json::array({"csi.example.com", false, false, false, "<unset>", false, "Persistent,Ephemeral", "5m"}));
  EXPECT_EQ(Cells("CSINode", R"({
    "metadata": {"name": "node-1", "creationTimestamp": "2024-05-01T11:55:00Z"},
    "spec": {"drivers": [{"name": "csi.example.com", "nodeID": "node-1"}]}
  })"),
            Json::array({"node-1", 1, "5m"}));
  EXPECT_THAT(ColumnNames(Kind("CSIStorageCapacity"), 0), ElementsAre("Name", "StorageClassName", "Capacity"));
  EXPECT_EQ(Cells("CSIStorageCapacity", R"({
    "metadata": {"name": "csisc-1", "namespace": "kube-system"},
    "storageClassName": "standard", "capacity": "100Gi"
  })"),
            Json::array({"csisc-1", "standard", "100Gi"}));
  EXPECT_EQ(Cells("Namespace", R"({
    "metadata": {"name": "team-a", "creationTimestamp": "2024-05-01T11:59:15Z"},
    "status": {"phase": "Active"}
  })"),
            Json::array({"team-a", "Active", "45s"}));
}

TEST(TableTest, HumanDurationMatchesApimachinery) {
  struct Case {
    absl::Duration d;
    const char* want;
  };
  const absl::Duration kDay = absl::Hours(24);
  const absl::Duration kYear = 365 * kDay;
  const absl::Duration kMs = absl::Milliseconds(1);
  const Case cases[] = {
      // TestHumanDuration
      {absl::Seconds(1), "1s"},
      {absl::Seconds(70), "70s"},
      {absl::Seconds(190), "3m10s"},
      {absl::Minutes(70), "70m"},
      {absl::Hours(47), "47h"},
      {absl::Hours(49), "2d1h"},
      {absl::Hours(8 * 24 + 2), "8d"},
      {absl::Hours(367 * 24), "367d"},
      {absl::Hours(365 * 2 * 24 + 25), "2y1d"},
      {absl::Hours(365 * 8 * 24 + 2), "8y"},
      // TestHumanDurationBoundaries
      {absl::Seconds(-2), "<invalid>"},
      {absl::Seconds(-2) + absl::Nanoseconds(1), "0s"},
      {absl::ZeroDuration(), "0s"},
      {absl::Seconds(1) - kMs, "0s"},
      {absl::Minutes(2) - kMs, "119s"},
      {absl::Minutes(2), "2m"},
      {absl::Minutes(2) + absl::Seconds(1), "2m1s"},
      {absl::Minutes(10) - kMs, "9m59s"},
      {absl::Minutes(10), "10m"},
      {absl::Minutes(10) + absl::Seconds(1), "10m"},
      {absl::Hours(3) - kMs, "179m"},
      {absl::Hours(3), "3h"},
      {absl::Hours(3) + absl::Minutes(1), "3h1m"},
      {absl::Hours(8) - kMs, "7h59m"},
      {absl::Hours(8), "8h"},
      {absl::Hours(8) + absl::Minutes(59), "8h"},
      {2 * kDay - kMs, "47h"},
      {2 * kDay, "2d"},
      {2 * kDay + absl::Hours(1), "2d1h"},
      {8 * kDay - kMs, "7d23h"},
      {8 * kDay, "8d"},
      {8 * kDay + absl::Hours(23), "8d"},
      {2 * kYear - kMs, "729d"},
      {2 * kYear, "2y"},
      {2 * kYear + absl::Hours(23), "2y"},
      {2 * kYear + absl::Hours(23) + absl::Minutes(59), "2y"},
      {2 * kYear + kDay - kMs, "2y"},
      {2 * kYear + kDay, "2y1d"},
      {3 * kYear, "3y"},
      {4 * kYear, "4y"},
      {5 * kYear, "5y"},
      {6 * kYear, "6y"},
      {7 * kYear, "7y"},
      {8 * kYear - kMs, "7y364d"},
      {8 * kYear, "8y"},
      {8 * kYear + 364 * kDay, "8y"},
      {9 * kYear, "9y"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(HumanDuration(c.d), c.want) << absl::FormatDuration(c.d);
  }
}

TEST(TableTest, BuildTableIsAMetaV1Table) {
  Json table = ClaimTable();
  EXPECT_EQ(table["kind"], "Table");
  EXPECT_EQ(table["apiVersion"], "meta.k8s.io/v1");
  EXPECT_EQ(table["metadata"], Json::object({{"resourceVersion", "7"}}));
  ASSERT_EQ(table["columnDefinitions"].size(), 9u);
  const Json& name = table["columnDefinitions"][0];
  EXPECT_EQ(name["name"], "Name");
  EXPECT_EQ(name["type"], "string");
  EXPECT_EQ(name["format"], "name");
  EXPECT_TRUE(name["description"].is_string());
  EXPECT_EQ(name["priority"], 0);
  EXPECT_EQ(table["columnDefinitions"][8]["priority"], 1);

  ASSERT_EQ(table["rows"].size(), 2u);
  const Json& row = table["rows"][0];
  EXPECT_EQ(row["cells"], Cells("PersistentVolumeClaim", kBoundClaim));
  EXPECT_EQ(row["object"]["kind"], "PartialObjectMetadata");
  EXPECT_EQ(row["object"]["apiVersion"], "meta.k8s.io/v1");
  EXPECT_EQ(row["object"]["metadata"], Json::parse(kBoundClaim)["metadata"]);
  EXPECT_FALSE(row["object"].contains("spec"));
}

TEST(TableTest, RenderTableLikeKubectl) {
  const Json table = ClaimTable();
  EXPECT_EQ(RenderTable(table, false, false),
            "NAME             STATUS    VOLUME     CAPACITY   ACCESS MODES   STORAGECLASS   AGE\n"
            "data             Bound     pvc-0a1b   10Gi       RWO            standard       5m\n"
            "scratch-volume   Pending                                        fast           45s\n");
  EXPECT_EQ(RenderTable(table, false, true),
            "NAMESPACE   NAME             STATUS    VOLUME     CAPACITY   ACCESS MODES   "
            "STORAGECLASS   AGE\n"
            "default     data             Bound     pvc-0a1b   10Gi       RWO            "
            "standard       5m\n"
            "team-a      scratch-volume   Pending                                        "
            "fast           45s\n");
  EXPECT_EQ(RenderTable(table, true, false),
            "NAME             STATUS    VOLUME     CAPACITY   ACCESS MODES   STORAGECLASS   AGE   "
            "VOLUMEATTRIBUTESCLASS   VOLUMEMODE\n"
            "data             Bound     pvc-0a1b   10Gi       RWO            standard       5m    "
            "<unset>                 Filesystem\n"
            "scratch-volume   Pending                                        fast           45s   "
            "<unset>                 <unset>\n");
  EXPECT_EQ(RenderTable(table, false, false, /*with_headers=*/false),
            "data             Bound     pvc-0a1b   10Gi   RWO   standard   5m\n"
            "scratch-volume   Pending                           fast       45s\n");
  // No rows: kubectl prints nothing, not even headers.
  EXPECT_EQ(RenderTable(BuildTable(Kind("PersistentVolumeClaim"), {}, Now(), "7"), false, false), "");
}

TEST(TableTest, RenderTableMinimumWidthAndCellText) {
  // Columns are at least 6 wide (kubectl's tabwriter minwidth): "PV" gets 4 spaces.
  Json table = BuildTable(Kind("VolumeAttachment"), {Json::parse(R"({
    "metadata": {"name": "csi-0a1b", "creationTimestamp": "2024-05-01T11:55:00Z"},
    "spec": {"attacher": "csi.example.com", "nodeName": "node-1", "source": {}},
    "status": {"attached": true}
  })")},
                          Now(), "");
  EXPECT_EQ(RenderTable(table, false, false),
            "NAME       ATTACHER          PV    NODE     ATTACHED   AGE\n"
            "csi-0a1b   csi.example.com         node-1   true       5m\n");

  // Multi-line text is cut with "..." and escapes are defused.
  Json event = BuildTable(Kind("Event"), {Json::parse(R"({
    "metadata": {"name": "ev-1"}, "involvedObject": {"kind": "Node", "name": "n"},
    "type": "Normal", "reason": "R", "count": 1,
    "lastTimestamp": "2024-05-01T11:59:00Z", "message": "first\nsecond \u001b[31m"
  })")},
                          Now(), "");
  EXPECT_EQ(RenderTable(event, false, false),
            "LAST SEEN   TYPE     REASON   OBJECT   MESSAGE\n"
            "60s         Normal   R        node/n   first...\n");
  size_t message = 0;
  while (event["columnDefinitions"][message]["name"] != "Message") ++message;
  event["rows"][0]["cells"][message] = "a \x1b[31m";
  EXPECT_THAT(RenderTable(event, false, false), HasSubstr("a ^[[31m\n"));
}

TEST(TableTest, IllTypedObjectsNeverThrow) {
  const std::vector<Json> inputs = {Json("garbage"), Json::array({1, 2}), Json(nullptr), Json::object(),
                                    Json::parse(R"({
        "metadata": {"name": 7, "labels": ["x"], "annotations": "y",
                     "creationTimestamp": "yesterday"},
        "spec": {"containers": "x", "initContainers": [1, null, {"name": 3}],
                 "accessModes": "RWO", "capacity": [], "claimRef": "x", "drivers": {},
                 "source": 5, "volumeSnapshotRef": []},
        "status": {"conditions": [null, 1, {"type": 2}], "containerStatuses": [7, "a", null,
                   {"state": {"terminated": "x"}, "restartCount": "many"}],
                   "podIPs": [null], "readyToUse": "yes", "restoreSize": 1.5e300},
        "data": ["not", "a", "map"], "count": "3", "series": 5, "capacity": {}
      })")};
  for (const KindInfo& kind : AllKinds()) {
    const size_t width = TableColumns(kind).size();
    for (const Json& input : inputs) {
      std::vector<Json> cells;
      EXPECT_NO_THROW(cells = TableCells(kind, input, Now())) << kind.kind << " " << input;
      EXPECT_EQ(cells.size(), width) << kind.kind << " " << input;
    }
    Json table;
    EXPECT_NO_THROW(table = BuildTable(kind, inputs, Now(), "1")) << kind.kind;
    EXPECT_NO_THROW(RenderTable(table, true, true)) << kind.kind;
  }
  EXPECT_EQ(Cells("Pod", R"({"metadata": {"name": "p", "creationTimestamp": "soon"}})")[4], "<invalid>");
  EXPECT_EQ(RenderTable(Json("not a table"), false, false), "");
}

TEST(TableTest, EveryKindHasANameColumnAndMatchingCells) {
  for (const KindInfo& kind : AllKinds()) {
    std::vector<TableColumn> columns = TableColumns(kind);
    ASSERT_FALSE(columns.empty()) << kind.kind;
    bool has_name = false;
    int last_priority = 0;
    for (const TableColumn& c : columns) {
      has_name |= c.name == "Name" && c.format == "name";
      if (kind.kind != "Event") {  // Kubernetes interleaves Event's wide columns
        EXPECT_GE(c.priority, last_priority) << kind.kind << " " << c.name;
      }
      last_priority = c.priority;
    }
    EXPECT_TRUE(has_name) << kind.kind;
    EXPECT_EQ(TableCells(kind, Json::object(), Now()).size(), columns.size()) << kind.kind;
  }
}

}  // namespace
}  // namespace berth::api
