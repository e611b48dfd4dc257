#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>

#include "api/codec.h"
#include "api/kinds.h"
#include "api/schema.h"
#include "api/types/backup.h"
#include "api/types/coordination.h"
#include "api/types/core.h"
#include "api/types/core_node.h"
#include "api/types/core_pod.h"
#include "api/types/snapshot.h"
#include "api/types/storage.h"
#include "api/validation.h"
#include "gtest/gtest.h"

namespace berth::api::types {
namespace {

using nlohmann::json;

json Claim() {
  return json::parse(R"({
    "apiVersion": "v1", "kind": "PersistentVolumeClaim",
    "metadata": {"name": "data", "namespace": "default", "uid": "u1", "resourceVersion": "7",
                 "annotations": {"a": "b"}, "finalizers": ["kubernetes.io/pvc-protection"],
                 "managedFields": [{"manager": "kubectl"}]},
    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
             "storageClassName": "", "volumeMode": "Block",
             "dataSourceRef": {"kind": "VolumeSnapshot", "name": "s", "apiGroup": "snapshot.storage.k8s.io",
                               "futureRefField": 3}},
    "status": {"phase": "Pending", "conditions": [{"type": "Resizing", "status": "True", "futureCondField": "x"}]},
    "futureTopLevel": {"x": 1}
  })");
}

TEST(TypesTest, DecodesClaimFields) {
  auto claim = Decode<PersistentVolumeClaim>(Claim());
  ASSERT_TRUE(claim.ok()) << claim.status();
  EXPECT_EQ(claim->metadata.name, "data");
  EXPECT_EQ(claim->metadata.namespace_, "default");
  EXPECT_TRUE(claim->metadata.HasFinalizer("kubernetes.io/pvc-protection"));
  EXPECT_EQ(claim->metadata.Annotation("a"), "b");
  EXPECT_EQ(claim->metadata.Annotation("missing"), "");
  EXPECT_FALSE(claim->metadata.Deleting());
  EXPECT_EQ(claim->spec.access_modes, std::vector<std::string>{"ReadWriteOnce"});
  EXPECT_EQ(claim->spec.resources.requests.at("storage"), *Quantity::Parse("1Gi"));
  // *string: "" is present and differs from absent.
  ASSERT_TRUE(claim->spec.storage_class_name.has_value());
  EXPECT_EQ(*claim->spec.storage_class_name, "");
  EXPECT_EQ(claim->spec.volume_name, "");
  EXPECT_EQ(VolumeModeOf(claim->spec.volume_mode), "Block");
  ASSERT_TRUE(claim->spec.data_source_ref.has_value());
  EXPECT_EQ(claim->spec.data_source_ref->api_group, "snapshot.storage.k8s.io");
  EXPECT_FALSE(claim->spec.data_source.has_value());
  ASSERT_EQ(claim->status.conditions.size(), 1u);
  EXPECT_EQ(claim->status.conditions[0].type, "Resizing");
}

// Upstream's GetPersistentVolume{,Claim}Class: the beta annotation, even
// empty, wins over the spec's field; typed and JSON forms agree.
TEST(TypesTest, ClassesReadTheBetaAnnotationFirst) {
  struct Case {
    json object;
    std::string want;
  };
  const std::vector<Case> cases = {
      {json::parse(R"({"spec": {"storageClassName": "fast"}})"), "fast"},
      {json::parse(R"({"metadata": {"annotations": {"volume.beta.kubernetes.io/storage-class": "old"}},
                       "spec": {"storageClassName": "fast"}})"),
       "old"},
      {json::parse(R"({"metadata": {"annotations": {"volume.beta.kubernetes.io/storage-class": ""}},
                       "spec": {"storageClassName": "fast"}})"),
       ""},
      {json::parse(R"({"metadata": {"annotations": {"volume.beta.kubernetes.io/storage-class": "old"}}})"), "old"},
      {json::parse(R"({"metadata": {"annotations": {"other": "x"}}})"), ""},
      {json::parse(R"({"spec": 3})"), ""},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(StorageClassOf(c.object), c.want) << c.object.dump();
    if (c.object.value("spec", json::object()).is_object()) {
      auto claim = Decode<PersistentVolumeClaim>(c.object);
      ASSERT_TRUE(claim.ok()) << claim.status();
      EXPECT_EQ(ClaimClass(*claim), c.want) << c.object.dump();
      auto volume = Decode<PersistentVolume>(c.object);
      ASSERT_TRUE(volume.ok()) << volume.status();
      EXPECT_EQ(VolumeClass(*volume), c.want) << c.object.dump();
    }
  }
}

TEST(TypesTest, RoundTripKeepsUnknownFieldsAtEveryLevel) {
  const json in = Claim();
  auto claim = Decode<PersistentVolumeClaim>(in);
  ASSERT_TRUE(claim.ok()) << claim.status();
  EXPECT_EQ(Encode(*claim), in);
  // A read-modify-write changes what it changes and nothing else.
  claim->spec.volume_name = "pv-1";
  claim->status.conditions[0].status = "False";
  json out = Encode(*claim);
  json want = in;
  want["spec"]["volumeName"] = "pv-1";
  want["status"]["conditions"][0]["status"] = "False";
  EXPECT_EQ(out, want);
  EXPECT_EQ(out["futureTopLevel"], json({{"x", 1}}));
  EXPECT_EQ(out["metadata"]["managedFields"], json::parse(R"([{"manager": "kubectl"}])"));
  EXPECT_EQ(out["spec"]["dataSourceRef"]["futureRefField"], 3);
  EXPECT_EQ(out["status"]["conditions"][0]["futureCondField"], "x");
}

TEST(TypesTest, WrongTypeIsAnErrorWithThePath) {
  json in = Claim();
  in["spec"]["volumeName"] = 5;
  auto claim = Decode<PersistentVolumeClaim>(in);
  ASSERT_EQ(claim.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(claim.status().message(),
            "PersistentVolumeClaim default/data: spec.volumeName: Invalid value: 5: expected string, got number");

  in = Claim();
  in["status"]["conditions"][0]["type"] = json::array();
  EXPECT_EQ(Decode<PersistentVolumeClaim>(in).status().message(),
            "PersistentVolumeClaim default/data: status.conditions[0].type: Invalid value: []: expected string, got "
            "array");

  in = Claim();
  in["spec"]["resources"]["requests"]["storage"] = "lots";
  EXPECT_EQ(Decode<PersistentVolumeClaim>(in).status().message(),
            "PersistentVolumeClaim default/data: spec.resources.requests[storage]: Invalid value: \"lots\": "
            "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'");

  in = Claim();
  in["metadata"]["annotations"]["a"] = true;
  EXPECT_EQ(Decode<PersistentVolumeClaim>(in).status().message(),
            "PersistentVolumeClaim default/data: metadata.annotations[a]: Invalid value: true: expected string, got "
            "bool");

  in = Claim();
  in["spec"] = "x";
  EXPECT_EQ(Decode<PersistentVolumeClaim>(in).status().code(), absl::StatusCode::kInvalidArgument);
}

// Every key a type models exists at that place in berth's schema of the
// kind (src/api/schema_kinds.cc, which follows the Kubernetes API), with a
// compatible JSON type: a misspelt key or a wrong member type fails here
// (a round trip cannot see it: the misspelt key would be kept as unknown).
template <typename M>
void CheckMember(const Schema& s, const std::string& path, std::vector<std::string>& errors);

template <typename T>
void CheckStruct(const Schema& s, const std::string& path, std::vector<std::string>& errors) {
  if (s.type == Schema::Type::kAny) return;  // free-form in the schema
  if (s.type != Schema::Type::kObject) {
    errors.push_back(path + ": modeled as an object, not one in the schema");
    return;
  }
  std::apply(
      [&](const auto&... f) {
        auto one = [&](const auto& field) {
          const std::string key(field.key);
          auto it = s.fields.find(key);
          if (it == s.fields.end()) {
            errors.push_back(path + "." + key + ": not in the schema");
            return;
          }
          using M = std::decay_t<decltype(std::declval<T>().*(field.member))>;
          CheckMember<M>(*it->second, path + "." + key, errors);
        };
        (one(f), ...);
      },
      T::Fields());
}

template <typename M>
void CheckMember(const Schema& s, const std::string& path, std::vector<std::string>& errors) {
  using Type = Schema::Type;
  auto want = [&](std::initializer_list<Type> ok, const char* what) {
    if (s.type == Type::kAny) return;
    for (Type t : ok) {
      if (s.type == t) return;
    }
    errors.push_back(path + ": modeled as " + what + ", the schema differs");
  };
  if constexpr (std::is_same_v<M, Json>) {
    return;
  } else if constexpr (internal::IsOptional<M>::value) {
    CheckMember<typename M::value_type>(s, path, errors);
  } else if constexpr (internal::IsVector<M>::value) {
    want({Type::kArray}, "a list");
    if (s.type == Type::kArray) CheckMember<typename M::value_type>(*s.elem, path + "[]", errors);
  } else if constexpr (internal::IsStringMap<M>::value) {
    want({Type::kMap}, "a map");
    if (s.type == Type::kMap) CheckMember<typename M::mapped_type>(*s.elem, path + "[]", errors);
  } else if constexpr (Modeled<M>) {
    CheckStruct<M>(s, path, errors);
  } else if constexpr (std::is_same_v<M, std::string>) {
    want({Type::kString, Type::kTime, Type::kBase64}, "a string");
  } else if constexpr (std::is_same_v<M, bool>) {
    want({Type::kBool}, "a bool");
  } else if constexpr (std::is_integral_v<M>) {
    want({Type::kInt}, "an integer");
  } else if constexpr (std::is_same_v<M, Quantity>) {
    want({Type::kQuantity}, "a quantity");
  }
}

template <typename T>
std::vector<std::string> SchemaErrors(std::string_view api_version) {
  const KindInfo* kind = FindKind(api_version, T::kKind);
  if (kind == nullptr) return {"no kind " + std::string(T::kKind)};
  std::vector<std::string> errors;
  CheckStruct<T>(SchemaFor(*kind), std::string(T::kKind), errors);
  return errors;
}

TEST(TypesTest, EveryModeledKeyIsInTheKindsSchema) {
  std::vector<std::vector<std::string>> all = {
      SchemaErrors<PersistentVolume>("v1"),
      SchemaErrors<PersistentVolumeClaim>("v1"),
      SchemaErrors<Node>("v1"),
      SchemaErrors<Pod>("v1"),
      SchemaErrors<StorageClass>("storage.k8s.io/v1"),
      SchemaErrors<VolumeAttachment>("storage.k8s.io/v1"),
      SchemaErrors<CSIDriver>("storage.k8s.io/v1"),
      SchemaErrors<CSINode>("storage.k8s.io/v1"),
      SchemaErrors<CSIStorageCapacity>("storage.k8s.io/v1"),
      SchemaErrors<Lease>("coordination.k8s.io/v1"),
      SchemaErrors<VolumeSnapshot>("snapshot.storage.k8s.io/v1"),
      SchemaErrors<VolumeSnapshotContent>("snapshot.storage.k8s.io/v1"),
      SchemaErrors<VolumeSnapshotClass>("snapshot.storage.k8s.io/v1"),
      SchemaErrors<BackupStorageLocation>("backup.berth.io/v1"),
      SchemaErrors<Backup>("backup.berth.io/v1"),
      SchemaErrors<Restore>("backup.berth.io/v1"),
      SchemaErrors<Schedule>("backup.berth.io/v1"),
  };
  for (const auto& errors : all) {
    for (const auto& e : errors) ADD_FAILURE() << e;
  }
}

template <typename T>
std::function<absl::StatusOr<json>(const json&)> RoundTripper() {
  return [](const json& in) -> absl::StatusOr<json> {
    absl::StatusOr<T> typed = Decode<T>(in);
    if (!typed.ok()) return typed.status();
    return Encode(*typed);
  };
}

// Each kind's realistic manifest (src/api/testdata), admitted as the API
// server admits it, decodes and encodes back to itself: nothing berth does
// not model is lost, nothing is added.
TEST(TypesTest, EveryKindsFixtureRoundTrips) {
  const std::map<std::string, std::function<absl::StatusOr<json>(const json&)>> kinds = {
      {"PersistentVolume", RoundTripper<PersistentVolume>()},
      {"PersistentVolumeClaim", RoundTripper<PersistentVolumeClaim>()},
      {"Node", RoundTripper<Node>()},
      {"Pod", RoundTripper<Pod>()},
      {"StorageClass", RoundTripper<StorageClass>()},
      {"VolumeAttachment", RoundTripper<VolumeAttachment>()},
      {"CSIDriver", RoundTripper<CSIDriver>()},
      {"CSINode", RoundTripper<CSINode>()},
      {"CSIStorageCapacity", RoundTripper<CSIStorageCapacity>()},
      {"Lease", RoundTripper<Lease>()},
      {"VolumeSnapshot", RoundTripper<VolumeSnapshot>()},
      {"VolumeSnapshotContent", RoundTripper<VolumeSnapshotContent>()},
      {"VolumeSnapshotClass", RoundTripper<VolumeSnapshotClass>()},
      {"BackupStorageLocation", RoundTripper<BackupStorageLocation>()},
      {"Backup", RoundTripper<Backup>()},
      {"Restore", RoundTripper<Restore>()},
      {"Schedule", RoundTripper<Schedule>()},
  };
  int tested = 0;
  for (const auto& entry : std::filesystem::directory_iterator(BERTH_API_TESTDATA)) {
    if (entry.path().extension() != ".yaml") continue;
    SCOPED_TRACE(entry.path().filename().string());
    std::ifstream file(entry.path());
    std::stringstream text;
    text << file.rdbuf();
    auto docs = DecodeManifests(text.str());
    ASSERT_TRUE(docs.ok()) << docs.status();
    json o = docs->at(0);
    auto it = kinds.find(o.value("kind", ""));
    if (it == kinds.end()) continue;  // Namespace, Secret, Event: not modeled
    const KindInfo* kind = FindKind(o.value("apiVersion", ""), o.value("kind", ""));
    ASSERT_NE(kind, nullptr);
    Normalize(*kind, o);
    ApplyDefaults(*kind, o);
    absl::StatusOr<json> out = it->second(o);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(*out, o) << "diff: " << json::diff(o, *out).dump();
    ++tested;
  }
  EXPECT_EQ(tested, static_cast<int>(kinds.size()));
}

TEST(TypesTest, PodContainersKeepTheirUnknownFieldsElementByElement) {
  json in = json::parse(R"({
    "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
    "spec": {
      "containers": [
        {"name": "a", "image": "busybox", "env": [{"name": "X", "value": "1"}], "futureContainerField": true,
         "volumeMounts": [{"name": "data", "mountPath": "/data", "recursiveReadOnly": "IfPossible"}]},
        {"name": "b", "image": "busybox", "ports": [{"containerPort": 80}]}
      ],
      "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "c"}},
                  {"name": "cfg", "configMap": {"name": "cm"}},
                  {"name": "run", "ephemeral": {"volumeClaimTemplate": {"spec": {"accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "1Gi"}}, "futureSpecField": 1}}}}],
      "dnsPolicy": "ClusterFirst"
    },
    "status": {"phase": "Running", "podIP": "10.0.0.1", "containerStatuses": [{"name": "a", "ready": true}]}
  })");
  auto pod = Decode<Pod>(in);
  ASSERT_TRUE(pod.ok()) << pod.status();
  ASSERT_EQ(pod->spec.containers.size(), 2u);
  EXPECT_EQ(pod->spec.containers[0].volume_mounts[0].mount_path, "/data");
  EXPECT_EQ(pod->VolumeClaim(pod->spec.volumes[0]), "c");
  EXPECT_EQ(pod->VolumeClaim(pod->spec.volumes[1]), "");
  bool ephemeral = false;
  EXPECT_EQ(pod->VolumeClaim(pod->spec.volumes[2], &ephemeral), "p-run");
  EXPECT_TRUE(ephemeral);
  EXPECT_EQ(Encode(*pod), in);
  // Reorder and edit the lists: each element keeps its own unknown fields.
  std::swap(pod->spec.containers[0], pod->spec.containers[1]);
  pod->spec.containers[1].image = "busybox:2";
  pod->spec.volumes.erase(pod->spec.volumes.begin());
  pod->status.phase = "Succeeded";
  json out = Encode(*pod);
  EXPECT_EQ(out["spec"]["containers"][0]["ports"], json::parse(R"([{"containerPort": 80}])"));
  EXPECT_EQ(out["spec"]["containers"][1]["futureContainerField"], true);
  EXPECT_EQ(out["spec"]["containers"][1]["env"], json::parse(R"([{"name": "X", "value": "1"}])"));
  EXPECT_EQ(out["spec"]["containers"][1]["image"], "busybox:2");
  EXPECT_EQ(out["spec"]["containers"][1]["volumeMounts"][0]["recursiveReadOnly"], "IfPossible");
  EXPECT_EQ(out["spec"]["volumes"][0]["configMap"], json({{"name", "cm"}}));
  EXPECT_EQ(out["spec"]["volumes"][1]["ephemeral"]["volumeClaimTemplate"]["spec"]["futureSpecField"], 1);
  EXPECT_EQ(out["spec"]["dnsPolicy"], "ClusterFirst");
  EXPECT_EQ(out["status"]["podIP"], "10.0.0.1");
  EXPECT_EQ(out["status"]["containerStatuses"], in["status"]["containerStatuses"]);
  EXPECT_EQ(out["status"]["phase"], "Succeeded");
}

// The schema leaves container statuses free-form (AnyValue), so the schema
// check cannot cover ContainerStatus: its keys are pinned here instead.
TEST(TypesTest, ContainerStatusesSayWhichStateEachContainerIsIn) {
  json in = json::parse(R"({
    "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
    "spec": {"containers": [{"name": "a"}, {"name": "b"}]},
    "status": {
      "initContainerStatuses": [{"name": "init", "state": {"terminated": {"exitCode": 0}}, "restartCount": 0}],
      "containerStatuses": [{"name": "a", "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}, "ready": true},
                            {"name": "b", "state": {"waiting": {"reason": "ContainerCreating"}}}],
      "ephemeralContainerStatuses": [{"name": "debug", "state": {}}]
    }
  })");
  auto pod = Decode<Pod>(in);
  ASSERT_TRUE(pod.ok()) << pod.status();
  ASSERT_EQ(pod->status.init_container_statuses.size(), 1u);
  EXPECT_FALSE(pod->status.init_container_statuses[0].state.terminated.is_null());
  ASSERT_EQ(pod->status.container_statuses.size(), 2u);
  EXPECT_EQ(pod->status.container_statuses[0].name, "a");
  EXPECT_FALSE(pod->status.container_statuses[0].state.running.is_null());
  EXPECT_TRUE(pod->status.container_statuses[0].state.waiting.is_null());
  EXPECT_EQ(pod->status.container_statuses[1].state.waiting["reason"], "ContainerCreating");
  ASSERT_EQ(pod->status.ephemeral_container_statuses.size(), 1u);
  EXPECT_EQ(pod->status.ephemeral_container_statuses[0].state, ContainerState{});  // {}: in no state yet
  EXPECT_EQ(Encode(*pod), in);
  json wrong = in;
  wrong["status"]["containerStatuses"][0]["name"] = 7;
  EXPECT_EQ(Decode<Pod>(wrong).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TypesTest, PointerFieldsKeepAbsentApartFromEmpty) {
  // VolumeSnapshot.status is a pointer: absent stays absent, and so do its
  // pointer fields; a struct field without omitempty is always written.
  json in = json::parse(R"({"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
      "metadata": {"name": "s", "namespace": "default"}, "spec": {"source": {"persistentVolumeClaimName": "c"}}})");
  auto snap = Decode<VolumeSnapshot>(in);
  ASSERT_TRUE(snap.ok()) << snap.status();
  EXPECT_FALSE(snap->status.has_value());
  EXPECT_FALSE(snap->spec.volume_snapshot_class_name.has_value());
  EXPECT_EQ(Encode(*snap), in);
  snap->status.emplace().ready_to_use = false;
  EXPECT_EQ(Encode(*snap)["status"], json({{"readyToUse", false}}));
  // An explicit empty value stays as read while its member stays empty; one
  // that becomes empty is left out (omitempty), and so is a struct left with
  // nothing set.
  json pvc = json::parse(R"({"metadata": {"name": "c", "namespace": "default"},
      "spec": {"volumeName": "", "resources": {}}, "status": {"capacity": {"storage": "1Gi"}}})");
  auto claim = Decode<PersistentVolumeClaim>(pvc);
  ASSERT_TRUE(claim.ok()) << claim.status();
  EXPECT_EQ(Encode(*claim), pvc);
  claim->status.capacity.clear();
  claim->spec.volume_name = "pv";
  json edited = pvc;
  edited.erase("status");  // a struct left with nothing set is left out
  edited["spec"]["volumeName"] = "pv";
  EXPECT_EQ(Encode(*claim), edited);
  // A Lease's pointers; null reads as absent.
  auto lease = Decode<Lease>(json::parse(R"({"metadata": {"name": "n"}, "spec": {"holderIdentity": null,
      "leaseDurationSeconds": 40, "renewTime": "2026-01-01T00:00:00.000000Z"}})"));
  ASSERT_TRUE(lease.ok()) << lease.status();
  EXPECT_FALSE(lease->spec.holder_identity.has_value());
  EXPECT_EQ(lease->spec.lease_duration_seconds, 40);
  EXPECT_EQ(Decode<Lease>(json::parse(R"({"spec": {"leaseDurationSeconds": 3000000000}})")).status().message(),
            "Lease: spec.leaseDurationSeconds: Invalid value: 3000000000: out of range for int32");
  EXPECT_EQ(Decode<Lease>(json::parse(R"({"spec": {"leaseDurationSeconds": 1.5}})")).status().message(),
            "Lease: spec.leaseDurationSeconds: Invalid value: 1.5: expected int32, got number");
}

}  // namespace
}  // namespace berth::api::types
