// The schemas of the kinds in AllKinds(), transcribed from Kubernetes' Go
// types (k8s.io/api core/v1 and storage/v1, ObjectMeta and LabelSelector of
// k8s.io/apimachinery meta/v1) and from the snapshot.storage.k8s.io/v1 types
// of kubernetes-csi/external-snapshotter; berth's backup.berth.io/v1 kinds
// take Velero's velero.io/v1 names. Field names, JSON types and patch
// merge keys (the `patchMergeKey` / `patchStrategy` tags) follow those
// sources; status fields are listed too, so that any manifest written for a
// real cluster passes CheckSchema.
//
// coordination.k8s.io/v1 Lease comes from k8s.io/api coordination/v1: node
// agents renew theirs in kube-node-lease, the node lifecycle controller reads
// them.
//
// Why AnyValue() in places: berth stores and serves Pods, Nodes and Events but
// only ever reads their storage parts. Subtrees that are deep, unrelated to
// storage and growing every release (container probes, lifecycle hooks and
// security contexts, pod affinity, container statuses, node images and
// system info, the in-tree legacy volume plugins...) are accepted as they
// come rather than transcribed, so a new Kubernetes field there never breaks
// a manifest. Everything storage touches (PV, PVC, StorageClass, the CSI and
// snapshot kinds, and pods' volumes, mounts and devices) is typed in full,
// and so are node taints and pod tolerations (node failure handling reads
// them).

#include <array>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "api/kinds.h"
#include "api/schema.h"
#include "api/volume_sources.h"

namespace berth::api {
namespace {

using Fields = std::vector<std::pair<std::string, SchemaPtr>>;

// Adds `names` to `fields` as free-form values.
template <size_t N>
void AddAny(Fields& fields, const std::array<std::string_view, N>& names) {
  for (std::string_view name : names) fields.emplace_back(std::string(name), AnyValue());
}

SchemaPtr StrList() { return Arr(Str()); }
SchemaPtr StrMap() { return Map(Str()); }
SchemaPtr ResourceList() { return Map(Qty()); }  // {"storage": "10Gi", "cpu": "500m"}

// A list of conditions merged by "type". `extra` holds the kind's timestamps
// (lastProbeTime, lastTransitionTime, lastHeartbeatTime...) and other fields.
SchemaPtr Conditions(Fields extra) {
  Fields fields = {
      {"type", Str()},
      {"status", Str()},
      {"reason", Str()},
      {"message", Str()},
  };
  for (auto& field : extra) fields.push_back(std::move(field));
  return Arr(Obj(std::move(fields)), "type");
}

// ---------------------------------------------------------------------------
// References.

// core/v1 ObjectReference (PV claimRef, Event involvedObject, snapshot refs).
SchemaPtr ObjectReferenceSchema() {
  return Obj({
      {"kind", Str()},
      {"namespace", Str()},
      {"name", Str()},
      {"uid", Str()},
      {"apiVersion", Str()},
      {"resourceVersion", Str()},
      {"fieldPath", Str()},
  });
}

// core/v1 SecretReference (CSI secrets of a PV).
SchemaPtr SecretReferenceSchema() { return Obj({{"name", Str()}, {"namespace", Str()}}); }

// core/v1 LocalObjectReference (imagePullSecrets, inline CSI secrets).
SchemaPtr LocalObjectReferenceSchema() { return Obj({{"name", Str()}}); }

SchemaPtr OwnerReferenceSchema() {
  return Obj({
      {"apiVersion", Str()},
      {"kind", Str()},
      {"name", Str()},
      {"uid", Str()},
      {"controller", Bool()},
      {"blockOwnerDeletion", Bool()},
  });
}

// ---------------------------------------------------------------------------
// Node selection.

SchemaPtr NodeSelectorRequirementSchema() { return Obj({{"key", Str()}, {"operator", Str()}, {"values", StrList()}}); }

SchemaPtr NodeSelectorTermSchema() {
  return Obj({
      {"matchExpressions", Arr(NodeSelectorRequirementSchema())},
      {"matchFields", Arr(NodeSelectorRequirementSchema())},
  });
}

// core/v1 TopologySelectorTerm (StorageClass allowedTopologies).
SchemaPtr TopologySelectorTermSchema() {
  return Obj({
      {"matchLabelExpressions", Arr(Obj({{"key", Str()}, {"values", StrList()}}))},
  });
}

// core/v1 Affinity: node affinity typed (it places pods next to their local
// volumes), pod (anti-)affinity free-form.
SchemaPtr AffinitySchema() {
  return Obj({
      {"nodeAffinity", Obj({
                           {"requiredDuringSchedulingIgnoredDuringExecution", NodeSelectorSchema()},
                           {"preferredDuringSchedulingIgnoredDuringExecution",
                            Arr(Obj({{"weight", Int()}, {"preference", NodeSelectorTermSchema()}}))},
                       })},
      {"podAffinity", AnyValue()},
      {"podAntiAffinity", AnyValue()},
  });
}

// ---------------------------------------------------------------------------
// Volume sources shared by PVs and pods.

SchemaPtr HostPathSchema() { return Obj({{"path", Str()}, {"type", Str()}}); }

SchemaPtr NfsSchema() { return Obj({{"server", Str()}, {"path", Str()}, {"readOnly", Bool()}}); }

// core/v1 CSIPersistentVolumeSource.
SchemaPtr CsiPvSourceSchema() {
  return Obj({
      {"driver", Str()},
      {"volumeHandle", Str()},
      {"readOnly", Bool()},
      {"fsType", Str()},
      {"volumeAttributes", StrMap()},
      {"controllerPublishSecretRef", SecretReferenceSchema()},
      {"nodeStageSecretRef", SecretReferenceSchema()},
      {"nodePublishSecretRef", SecretReferenceSchema()},
      {"controllerExpandSecretRef", SecretReferenceSchema()},
      {"nodeExpandSecretRef", SecretReferenceSchema()},
  });
}

// core/v1 CSIVolumeSource (CSI ephemeral inline volume of a pod).
SchemaPtr CsiInlineSourceSchema() {
  return Obj({
      {"driver", Str()},
      {"readOnly", Bool()},
      {"fsType", Str()},
      {"volumeAttributes", StrMap()},
      {"nodePublishSecretRef", LocalObjectReferenceSchema()},
  });
}

// ---------------------------------------------------------------------------
// PersistentVolume and PersistentVolumeClaim.

SchemaPtr PvSpecSchema() {
  Fields fields = {
      {"capacity", ResourceList()},
      {"accessModes", StrList()},
      {"claimRef", ObjectReferenceSchema()},
      {"persistentVolumeReclaimPolicy", Str()},
      {"storageClassName", Str()},
      {"mountOptions", StrList()},
      {"volumeMode", Str()},
      {"nodeAffinity", Obj({{"required", NodeSelectorSchema()}})},
      {"volumeAttributesClassName", Str()},
      // PersistentVolumeSource, inlined.
      {"csi", CsiPvSourceSchema()},
      {"hostPath", HostPathSchema()},
      {"local", Obj({{"path", Str()}, {"fsType", Str()}})},
      {"nfs", NfsSchema()},
  };
  AddAny(fields, kInTreeVolumeSources);
  return Obj(std::move(fields));
}

SchemaPtr PvStatusSchema() {
  return Obj({
      {"phase", Str()},
      {"message", Str()},
      {"reason", Str()},
      {"lastPhaseTransitionTime", Time()},
  });
}

SchemaPtr PvcSpecSchema() {
  return Obj({
      {"accessModes", StrList()},
      {"selector", LabelSelectorSchema()},
      // VolumeResourceRequirements: unlike a container's, no "claims".
      {"resources", Obj({{"limits", ResourceList()}, {"requests", ResourceList()}})},
      {"volumeName", Str()},
      {"storageClassName", Str()},
      {"volumeMode", Str()},
      {"dataSource", Obj({{"apiGroup", Str()}, {"kind", Str()}, {"name", Str()}})},
      {"dataSourceRef", Obj({{"apiGroup", Str()}, {"kind", Str()}, {"name", Str()}, {"namespace", Str()}})},
      {"volumeAttributesClassName", Str()},
  });
}

SchemaPtr PvcStatusSchema() {
  return Obj({
      {"phase", Str()},
      {"accessModes", StrList()},
      {"capacity", ResourceList()},
      {"conditions", Conditions({{"lastProbeTime", Time()}, {"lastTransitionTime", Time()}})},
      {"allocatedResources", ResourceList()},
      {"allocatedResourceStatuses", StrMap()},
      {"currentVolumeAttributesClassName", Str()},
      {"modifyVolumeStatus", Obj({{"targetVolumeAttributesClassName", Str()}, {"status", Str()}})},
      {"healthStatus", AnyValue()},  // alpha volume health monitoring
  });
}

// ---------------------------------------------------------------------------
// Pod.

// core/v1 Volume: a name and one VolumeSource key.
SchemaPtr PodVolumeSchema() {
  Fields fields = {
      {"name", Str()},
      {"persistentVolumeClaim", Obj({{"claimName", Str()}, {"readOnly", Bool()}})},
      {"csi", CsiInlineSourceSchema()},
      {"ephemeral", Obj({{"volumeClaimTemplate", Obj({{"metadata", ObjectMetaSchema()}, {"spec", PvcSpecSchema()}})}})},
      {"hostPath", HostPathSchema()},
      {"nfs", NfsSchema()},
      {"emptyDir", Obj({{"medium", Str()}, {"sizeLimit", Qty()}, {"mode", Int()}})},
  };
  AddAny(fields, kPodOnlyVolumeSources);
  AddAny(fields, kInTreeVolumeSources);
  return Obj(std::move(fields));
}

// core/v1 ResourceRequirements of a container or a pod.
SchemaPtr ResourceRequirementsSchema() {
  return Obj({
      {"limits", ResourceList()},
      {"requests", ResourceList()},
      {"claims", Arr(AnyValue())},
  });
}

SchemaPtr ContainerSchema() {
  return Obj({
      {"name", Str()},
      {"image", Str()},
      {"command", StrList()},
      {"args", StrList()},
      {"workingDir", Str()},
      {"ports", Arr(Obj({
                        {"name", Str()},
                        {"hostPort", Int()},
                        {"containerPort", Int()},
                        {"protocol", Str()},
                        {"hostIP", Str()},
                    }),
                    "containerPort")},
      {"envFrom", Arr(AnyValue())},
      {"env", Arr(Obj({{"name", Str()}, {"value", Str()}, {"valueFrom", AnyValue()}}), "name")},
      {"resources", ResourceRequirementsSchema()},
      {"resizePolicy", Arr(Obj({{"resourceName", Str()}, {"restartPolicy", Str()}}))},
      {"restartPolicy", Str()},
      {"restartPolicyRules", Arr(AnyValue())},
      {"volumeMounts", Arr(Obj({
                               {"name", Str()},
                               {"readOnly", Bool()},
                               {"recursiveReadOnly", Str()},
                               {"mountPath", Str()},
                               {"subPath", Str()},
                               {"mountPropagation", Str()},
                               {"subPathExpr", Str()},
                               {"bindMountOptions", StrList()},
                           }),
                           "mountPath")},
      {"volumeDevices", Arr(Obj({{"name", Str()}, {"devicePath", Str()}}), "devicePath")},
      {"livenessProbe", AnyValue()},
      {"readinessProbe", AnyValue()},
      {"startupProbe", AnyValue()},
      {"lifecycle", AnyValue()},
      {"terminationMessagePath", Str()},
      {"terminationMessagePolicy", Str()},
      {"imagePullPolicy", Str()},
      {"securityContext", AnyValue()},
      {"stdin", Bool()},
      {"stdinOnce", Bool()},
      {"tty", Bool()},
  });
}

// core/v1 Toleration (pod spec.tolerations).
SchemaPtr TolerationSchema() {
  return Obj({
      {"key", Str()},
      {"operator", Str()},
      {"value", Str()},
      {"effect", Str()},
      {"tolerationSeconds", Int()},
  });
}

SchemaPtr PodSpecSchema() {
  return Obj({
      {"volumes", Arr(PodVolumeSchema(), "name")},
      {"initContainers", Arr(ContainerSchema(), "name")},
      {"containers", Arr(ContainerSchema(), "name")},
      {"ephemeralContainers", Arr(AnyValue(), "name")},
      {"restartPolicy", Str()},
      {"terminationGracePeriodSeconds", Int()},
      {"activeDeadlineSeconds", Int()},
      {"dnsPolicy", Str()},
      {"nodeSelector", StrMap()},
      {"serviceAccountName", Str()},
      {"serviceAccount", Str()},
      {"automountServiceAccountToken", Bool()},
      {"nodeName", Str()},
      {"hostNetwork", Bool()},
      {"hostPID", Bool()},
      {"hostIPC", Bool()},
      {"shareProcessNamespace", Bool()},
      {"securityContext", AnyValue()},
      {"imagePullSecrets", Arr(LocalObjectReferenceSchema(), "name")},
      {"hostname", Str()},
      {"subdomain", Str()},
      {"affinity", AffinitySchema()},
      {"schedulerName", Str()},
      {"tolerations", Arr(TolerationSchema())},
      {"hostAliases", Arr(AnyValue(), "ip")},
      {"priorityClassName", Str()},
      {"priority", Int()},
      {"dnsConfig", AnyValue()},
      {"readinessGates", Arr(AnyValue())},
      {"runtimeClassName", Str()},
      {"enableServiceLinks", Bool()},
      {"preemptionPolicy", Str()},
      {"overhead", ResourceList()},
      {"topologySpreadConstraints", Arr(AnyValue(), "topologyKey")},
      {"setHostnameAsFQDN", Bool()},
      {"os", AnyValue()},
      {"hostUsers", Bool()},
      {"schedulingGates", Arr(AnyValue(), "name")},
      {"resourceClaims", Arr(AnyValue(), "name")},
      {"resources", ResourceRequirementsSchema()},
      {"hostnameOverride", Str()},
      {"schedulingGroup", AnyValue()},
      {"evictionResponders", Arr(AnyValue(), "name")},
  });
}

SchemaPtr PodStatusSchema() {
  SchemaPtr ips = Arr(Obj({{"ip", Str()}}), "ip");
  return Obj({
      {"observedGeneration", Int()},
      {"phase", Str()},
      {"conditions",
       Conditions({{"observedGeneration", Int()}, {"lastProbeTime", Time()}, {"lastTransitionTime", Time()}})},
      {"message", Str()},
      {"reason", Str()},
      {"nominatedNodeName", Str()},
      {"hostIP", Str()},
      {"hostIPs", ips},
      {"podIP", Str()},
      {"podIPs", ips},
      {"startTime", Time()},
      {"initContainerStatuses", AnyValue()},
      {"containerStatuses", AnyValue()},
      {"ephemeralContainerStatuses", AnyValue()},
      {"qosClass", Str()},
      {"resize", Str()},
      {"resourceClaimStatuses", Arr(AnyValue(), "name")},
      {"extendedResourceClaimStatus", AnyValue()},
      {"allocatedResources", ResourceList()},
      {"resources", ResourceRequirementsSchema()},
      {"nodeAllocatableResourceClaimStatuses", Arr(AnyValue(), "resourceClaimName")},
      {"volumeHealth", Arr(AnyValue())},
  });
}

// ---------------------------------------------------------------------------
// Node, Namespace, Event.

// core/v1 Taint (node spec.taints; the node lifecycle controller writes
// node.kubernetes.io/not-ready and .../unreachable).
SchemaPtr TaintSchema() { return Obj({{"key", Str()}, {"value", Str()}, {"effect", Str()}, {"timeAdded", Time()}}); }

SchemaPtr NodeSpecSchema() {
  return Obj({
      {"podCIDR", Str()},
      {"podCIDRs", PrimitiveSet(Str())},
      {"providerID", Str()},
      {"unschedulable", Bool()},
      {"taints", Arr(TaintSchema())},
      {"configSource", AnyValue()},
      {"externalID", Str()},
      {"podPreemptionPolicy", AnyValue()},
  });
}

SchemaPtr NodeStatusSchema() {
  return Obj({
      {"capacity", ResourceList()},
      {"allocatable", ResourceList()},
      {"phase", Str()},
      {"conditions", Conditions({{"lastHeartbeatTime", Time()}, {"lastTransitionTime", Time()}})},
      {"addresses", Arr(Obj({{"type", Str()}, {"address", Str()}}), "type")},
      {"daemonEndpoints", AnyValue()},
      {"nodeInfo", AnyValue()},
      {"images", AnyValue()},
      {"volumesInUse", StrList()},
      {"volumesAttached", Arr(Obj({{"name", Str()}, {"devicePath", Str()}}))},
      {"config", AnyValue()},
      {"runtimeHandlers", AnyValue()},
      {"features", AnyValue()},
      {"declaredFeatures", StrList()},
  });
}

SchemaPtr NamespaceSpecSchema() { return Obj({{"finalizers", StrList()}}); }

SchemaPtr NamespaceStatusSchema() {
  return Obj({
      {"phase", Str()},
      {"conditions", Conditions({{"lastTransitionTime", Time()}})},
  });
}

// core/v1 Event, whose fields sit at the top level next to metadata.
Fields EventFields() {
  return {
      {"involvedObject", ObjectReferenceSchema()},
      {"reason", Str()},
      {"message", Str()},
      {"source", Obj({{"component", Str()}, {"host", Str()}})},
      {"firstTimestamp", Time()},
      {"lastTimestamp", Time()},
      {"count", Int()},
      {"type", Str()},
      {"eventTime", AnyValue()},  // MicroTime: RFC 3339 with microseconds
      {"series", AnyValue()},     // {count, lastObservedTime MicroTime}
      {"action", Str()},
      {"related", ObjectReferenceSchema()},
      {"reportingComponent", Str()},
      {"reportingInstance", Str()},
  };
}

// ---------------------------------------------------------------------------
// storage.k8s.io/v1.

SchemaPtr VolumeErrorSchema() { return Obj({{"time", Time()}, {"message", Str()}, {"errorCode", Int()}}); }

Fields StorageClassFields() {
  return {
      {"provisioner", Str()},
      {"parameters", StrMap()},
      {"reclaimPolicy", Str()},
      {"mountOptions", StrList()},
      {"allowVolumeExpansion", Bool()},
      {"volumeBindingMode", Str()},
      {"allowedTopologies", Arr(TopologySelectorTermSchema())},
  };
}

SchemaPtr VolumeAttachmentSpecSchema() {
  return Obj({
      {"attacher", Str()},
      {"source", Obj({{"persistentVolumeName", Str()}, {"inlineVolumeSpec", PvSpecSchema()}})},
      {"nodeName", Str()},
  });
}

SchemaPtr VolumeAttachmentStatusSchema() {
  return Obj({
      {"attached", Bool()},
      {"attachmentMetadata", StrMap()},
      {"attachError", VolumeErrorSchema()},
      {"detachError", VolumeErrorSchema()},
  });
}

SchemaPtr CsiDriverSpecSchema() {
  return Obj({
      {"attachRequired", Bool()},
      {"podInfoOnMount", Bool()},
      {"volumeLifecycleModes", StrList()},
      {"storageCapacity", Bool()},
      {"fsGroupPolicy", Str()},
      {"tokenRequests", Arr(Obj({{"audience", Str()}, {"expirationSeconds", Int()}}))},
      {"requiresRepublish", Bool()},
      {"seLinuxMount", Bool()},
      {"nodeAllocatableUpdatePeriodSeconds", Int()},
      {"serviceAccountTokenInSecrets", Bool()},
      {"preventPodSchedulingIfMissing", Bool()},
  });
}

SchemaPtr CsiNodeSpecSchema() {
  SchemaPtr driver = Obj({
      {"name", Str()},
      {"nodeID", Str()},
      {"topologyKeys", StrList()},
      {"allocatable", Obj({{"count", Int()}})},
  });
  return Obj({{"drivers", Arr(driver, "name")}});
}

SchemaPtr CsiNodeStatusSchema() {
  return Obj({{"storageHealth", Arr(AnyValue(), "name")}});  // alpha
}

Fields CsiStorageCapacityFields() {
  return {
      {"nodeTopology", LabelSelectorSchema()},
      {"storageClassName", Str()},
      {"capacity", Qty()},
      {"maximumVolumeSize", Qty()},
  };
}

// ---------------------------------------------------------------------------
// snapshot.storage.k8s.io/v1 (CRDs of kubernetes-csi/external-snapshotter).

SchemaPtr SnapshotErrorSchema() { return Obj({{"time", Time()}, {"message", Str()}}); }

Fields VolumeSnapshotClassFields() {
  return {
      {"driver", Str()},
      {"parameters", StrMap()},
      {"deletionPolicy", Str()},
  };
}

SchemaPtr VolumeSnapshotSpecSchema() {
  return Obj({
      {"source", Obj({{"persistentVolumeClaimName", Str()}, {"volumeSnapshotContentName", Str()}})},
      {"volumeSnapshotClassName", Str()},
  });
}

SchemaPtr VolumeSnapshotStatusSchema() {
  return Obj({
      {"boundVolumeSnapshotContentName", Str()},
      {"creationTime", Time()},
      {"readyToUse", Bool()},
      {"restoreSize", Qty()},
      {"error", SnapshotErrorSchema()},
      {"volumeGroupSnapshotName", Str()},
  });
}

SchemaPtr VolumeSnapshotContentSpecSchema() {
  return Obj({
      {"volumeSnapshotRef", ObjectReferenceSchema()},
      {"deletionPolicy", Str()},
      {"driver", Str()},
      {"volumeSnapshotClassName", Str()},
      {"source", Obj({{"volumeHandle", Str()}, {"snapshotHandle", Str()}})},
      {"sourceVolumeMode", Str()},
  });
}

SchemaPtr VolumeSnapshotContentStatusSchema() {
  return Obj({
      {"snapshotHandle", Str()},
      {"creationTime", Int()},  // nanoseconds since the epoch, from CSI
      {"restoreSize", Int()},   // bytes
      {"readyToUse", Bool()},
      {"error", SnapshotErrorSchema()},
      {"volumeGroupSnapshotHandle", Str()},
  });
}

// ---------------------------------------------------------------------------
// backup.berth.io/v1: berth's own kinds with Velero's field names
// (velero.io/v1); only the fields berth implements, so a Velero manifest
// asking for something berth does not do is refused, not ignored.

SchemaPtr BackupStorageLocationSpecSchema() {
  return Obj({
      {"provider", Str()},
      {"config", StrMap()},
      {"default", Bool()},
      {"accessMode", Str()},
  });
}

SchemaPtr BackupStorageLocationStatusSchema() {
  return Obj({{"phase", Str()}, {"lastValidationTime", Time()}, {"message", Str()}});
}

SchemaPtr BackupSpecSchema() {
  return Obj({
      {"includedNamespaces", StrList()},
      {"excludedNamespaces", StrList()},
      {"labelSelector", LabelSelectorSchema()},
      {"ttl", Str()},  // a Go duration
      {"storageLocation", Str()},
  });
}

SchemaPtr BackupStatusSchema() {
  return Obj({
      {"phase", Str()},
      {"validationErrors", StrList()},
      {"startTimestamp", Time()},
      {"completionTimestamp", Time()},
      {"expiration", Time()},
      {"progress", Obj({{"totalItems", Int()}, {"itemsBackedUp", Int()}, {"totalBytes", Int()}, {"bytesDone", Int()}})},
      {"errors", Int()},
      {"warnings", Int()},
      {"failureReason", Str()},
      {"volumes", Arr(Obj({
                      {"namespace", Str()},
                      {"persistentVolumeClaim", Str()},
                      {"persistentVolume", Str()},
                      {"driver", Str()},
                      {"node", Str()},
                      {"volumeHandle", Str()},
                      {"snapshotName", Str()},
                      {"snapshotHandle", Str()},
                      {"sizeBytes", Int()},
                      {"phase", Str()},
                      {"bytesRead", Int()},
                      {"bytesAdded", Int()},
                      {"baseBackup", Str()},
                      {"groupSnapshot", Str()},
                      {"message", Str()},
                  }))},
      {"problems", StrList()},
      {"snapshotsRemoved", Bool()},
      {"groupSnapshots",
       Arr(Obj({
           {"driver", Str()},
           {"node", Str()},
           {"name", Str()},
           {"groupSnapshotId", Str()},
           {"deleted", Bool()},
           {"members", Arr(Obj({{"persistentVolume", Str()}, {"volumeHandle", Str()}, {"snapshotHandle", Str()}}))},
       }))},
  });
}

SchemaPtr RestoreSpecSchema() {
  return Obj({
      {"backupName", Str()},
      {"scheduleName", Str()},
      {"includedNamespaces", StrList()},
      {"namespaceMapping", StrMap()},
      {"targetNode", Str()},
  });
}

SchemaPtr RestoreStatusSchema() {
  return Obj({
      {"phase", Str()},
      {"validationErrors", StrList()},
      {"startTimestamp", Time()},
      {"completionTimestamp", Time()},
      {"progress", Obj({{"totalItems", Int()}, {"itemsRestored", Int()}, {"totalBytes", Int()}, {"bytesDone", Int()}})},
      {"errors", Int()},
      {"warnings", Int()},
      {"failureReason", Str()},
  });
}

SchemaPtr ScheduleSpecSchema() {
  return Obj({{"schedule", Str()}, {"template", BackupSpecSchema()}, {"paused", Bool()}});
}

SchemaPtr ScheduleStatusSchema() {
  return Obj({{"phase", Str()}, {"validationErrors", StrList()}, {"lastBackup", Time()}});
}

// ---------------------------------------------------------------------------
// coordination.k8s.io/v1.

SchemaPtr LeaseSpecSchema() {
  return Obj({
      {"holderIdentity", Str()},
      {"leaseDurationSeconds", Int()},
      {"acquireTime", Time()},  // MicroTime
      {"renewTime", Time()},    // MicroTime
      {"leaseTransitions", Int()},
      {"strategy", Str()},
      {"preferredHolder", Str()},
  });
}

// ---------------------------------------------------------------------------
// Whole objects.

// apiVersion, kind and metadata, then the kind's own top-level fields.
SchemaPtr TopLevel(Fields own) {
  Fields fields = {
      {"apiVersion", Str()},
      {"kind", Str()},
      {"metadata", ObjectMetaSchema()},
  };
  for (auto& field : own) fields.push_back(std::move(field));
  return Obj(std::move(fields));
}

SchemaPtr SpecAndStatus(SchemaPtr spec, SchemaPtr status) {
  return TopLevel({{"spec", std::move(spec)}, {"status", std::move(status)}});
}

using SchemaMap = std::map<std::string, SchemaPtr, std::less<>>;

SchemaMap BuildSchemas() {
  SchemaMap m;
  m["Namespace"] = SpecAndStatus(NamespaceSpecSchema(), NamespaceStatusSchema());
  m["Node"] = SpecAndStatus(NodeSpecSchema(), NodeStatusSchema());
  m["PersistentVolume"] = SpecAndStatus(PvSpecSchema(), PvStatusSchema());
  m["PersistentVolumeClaim"] = SpecAndStatus(PvcSpecSchema(), PvcStatusSchema());
  m["Pod"] = SpecAndStatus(PodSpecSchema(), PodStatusSchema());
  m["Secret"] = TopLevel({
      {"data", Map(Base64())},
      {"stringData", StrMap()},
      {"type", Str()},
      {"immutable", Bool()},
  });
  m["Event"] = TopLevel(EventFields());
  m["Lease"] = TopLevel({{"spec", LeaseSpecSchema()}});
  m["StorageClass"] = TopLevel(StorageClassFields());
  m["VolumeAttachment"] = SpecAndStatus(VolumeAttachmentSpecSchema(), VolumeAttachmentStatusSchema());
  m["CSIDriver"] = TopLevel({{"spec", CsiDriverSpecSchema()}});
  m["CSINode"] = SpecAndStatus(CsiNodeSpecSchema(), CsiNodeStatusSchema());
  m["CSIStorageCapacity"] = TopLevel(CsiStorageCapacityFields());
  m["VolumeSnapshotClass"] = TopLevel(VolumeSnapshotClassFields());
  m["VolumeSnapshot"] = SpecAndStatus(VolumeSnapshotSpecSchema(), VolumeSnapshotStatusSchema());
  m["VolumeSnapshotContent"] = SpecAndStatus(VolumeSnapshotContentSpecSchema(), VolumeSnapshotContentStatusSchema());
  m["BackupStorageLocation"] = SpecAndStatus(BackupStorageLocationSpecSchema(), BackupStorageLocationStatusSchema());
  m["Backup"] = SpecAndStatus(BackupSpecSchema(), BackupStatusSchema());
  m["Restore"] = SpecAndStatus(RestoreSpecSchema(), RestoreStatusSchema());
  m["Schedule"] = SpecAndStatus(ScheduleSpecSchema(), ScheduleStatusSchema());
  return m;
}

}  // namespace

SchemaPtr ObjectMetaSchema() {
  static const auto* schema = new SchemaPtr(Obj({
      {"name", Str()},
      {"generateName", Str()},
      {"namespace", Str()},
      {"selfLink", Str()},
      {"uid", Str()},
      {"resourceVersion", Str()},
      {"generation", Int()},
      {"creationTimestamp", Time()},
      {"deletionTimestamp", Time()},
      {"deletionGracePeriodSeconds", Int()},
      {"labels", StrMap()},
      {"annotations", StrMap()},
      {"ownerReferences", Arr(OwnerReferenceSchema(), "uid")},
      {"finalizers", PrimitiveSet(Str())},
      {"managedFields", Arr(AnyValue())},
  }));
  return *schema;
}

SchemaPtr LabelSelectorSchema() {
  static const auto* schema = new SchemaPtr(Obj({
      {"matchLabels", StrMap()},
      {"matchExpressions", Arr(Obj({{"key", Str()}, {"operator", Str()}, {"values", StrList()}}))},
  }));
  return *schema;
}

SchemaPtr NodeSelectorSchema() {
  static const auto* schema = new SchemaPtr(Obj({{"nodeSelectorTerms", Arr(NodeSelectorTermSchema())}}));
  return *schema;
}

const Schema& SchemaFor(const KindInfo& kind) {
  static const auto* schemas = new SchemaMap(BuildSchemas());
  auto it = schemas->find(kind.kind);
  if (it == schemas->end()) {
    std::fprintf(stderr, "berth: no schema for kind %.*s\n", static_cast<int>(kind.kind.size()), kind.kind.data());
    std::abort();
  }
  return *it->second;
}

}  // namespace berth::api
