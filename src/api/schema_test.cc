// Every kind's schema against real manifests, plus the validation rules with
// their exact messages.
#include <filesystem>
#include <fstream>
#include <sstream>

#include "api/codec.h"
#include "api/errors.h"
#include "api/kinds.h"
#include "api/schema.h"
#include "api/validation.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace berth::api {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

std::string ReadTestdata(const std::string& name) {
  std::ifstream in(std::string(BERTH_API_TESTDATA) + "/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

json Fixture(const std::string& name) {
  auto docs = DecodeManifests(ReadTestdata(name));
  EXPECT_TRUE(docs.ok()) << docs.status();
  EXPECT_EQ(docs->size(), 1u) << name;
  return docs->at(0);
}

const KindInfo& KindOf(const json& o) {
  const KindInfo* k = FindKind(o.value("apiVersion", ""), o.value("kind", ""));
  EXPECT_NE(k, nullptr) << o.dump();
  return *k;
}

// Runs what the API server runs on create; returns the final object.
absl::StatusOr<json> Admit(json o, const json* old = nullptr) {
  const KindInfo& kind = KindOf(o);
  if (absl::Status st = CheckSchema(o, SchemaFor(kind)); !st.ok()) return st;
  Normalize(kind, o);
  ApplyDefaults(kind, o);
  if (kind.namespaced && !o["metadata"].contains("namespace")) o["metadata"]["namespace"] = "default";
  if (absl::Status st = Validate(kind, o, old); !st.ok()) return st;
  return o;
}

TEST(SchemaTest, EveryKindHasAFixtureThatPassesAndRoundTrips) {
  std::set<std::string> covered;
  for (const auto& entry : std::filesystem::directory_iterator(BERTH_API_TESTDATA)) {
    if (entry.path().extension() != ".yaml") continue;
    SCOPED_TRACE(entry.path().filename().string());
    json o = Fixture(entry.path().filename());
    auto admitted = Admit(o);
    ASSERT_TRUE(admitted.ok()) << admitted.status();
    covered.insert(o["kind"].get<std::string>());
    // YAML out and back gives the same object.
    auto again = DecodeManifests(EncodeYaml(*admitted));
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->at(0), *admitted);
  }
  for (const auto& k : AllKinds()) EXPECT_TRUE(covered.contains(std::string(k.kind))) << k.kind;
}

TEST(SchemaTest, UnknownFieldIsRefusedWithItsPath) {
  json pvc = Fixture("persistentvolumeclaim.yaml");
  pvc["spec"]["acessModes"] = json::array({"ReadWriteOnce"});
  absl::Status st = CheckSchema(pvc, SchemaFor(KindOf(pvc)));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "strict decoding error: unknown field \"spec.acessModes\"");
  EXPECT_EQ(ToHttpError(st).code, 400);

  json pod = Fixture("pod.yaml");
  pod["spec"]["containers"][0]["volumeMounts"][0]["mountpath"] = "/x";
  st = CheckSchema(pod, SchemaFor(KindOf(pod)));
  EXPECT_THAT(st.message(), HasSubstr("unknown field \"spec.containers[0].volumeMounts[0].mountpath\""));
}

TEST(SchemaTest, WrongTypesAreRefused) {
  json pv = Fixture("persistentvolume.yaml");
  pv["spec"]["capacity"]["storage"] = "ten gigs";
  absl::Status st = CheckSchema(pv, SchemaFor(KindOf(pv)));
  EXPECT_THAT(st.message(), HasSubstr("spec.capacity[storage]: quantities must match"));

  json sc = Fixture("storageclass.yaml");
  sc["allowVolumeExpansion"] = "yes please";
  st = CheckSchema(sc, SchemaFor(KindOf(sc)));
  EXPECT_EQ(st.message(), "json: cannot unmarshal string into Go value of type bool (field \"allowVolumeExpansion\")");

  // Paths name object fields with dots, list elements and map keys with
  // brackets, as from the root.
  json pod = Fixture("pod.yaml");
  pod["spec"]["containers"][0]["volumeMounts"][0]["readOnly"] = "no";
  st = CheckSchema(pod, SchemaFor(KindOf(pod)));
  EXPECT_THAT(st.message(), HasSubstr("(field \"spec.containers[0].volumeMounts[0].readOnly\")"));
  json annotated = Fixture("persistentvolumeclaim.yaml");
  annotated["metadata"]["annotations"] = {{"a.b/c", 5}};
  st = CheckSchema(annotated, SchemaFor(KindOf(annotated)));
  EXPECT_THAT(st.message(), HasSubstr("(field \"metadata.annotations[a.b/c]\")"));

  json secret = Fixture("secret.yaml");
  secret["data"]["password"] = "not base64!";
  st = CheckSchema(secret, SchemaFor(KindOf(secret)));
  EXPECT_THAT(st.message(), HasSubstr("data[password]: illegal base64 data"));
}

TEST(ValidationTest, DefaultsAreKubernetes) {
  auto pvc = Admit(json::parse(R"({"apiVersion":"v1","kind":"PersistentVolumeClaim",
      "metadata":{"name":"d"},"spec":{"accessModes":["ReadWriteOnce"],
      "resources":{"requests":{"storage":"1.5Gi"}}}})"));
  ASSERT_TRUE(pvc.ok()) << pvc.status();
  EXPECT_EQ((*pvc)["spec"]["volumeMode"], "Filesystem");
  EXPECT_EQ((*pvc)["spec"]["resources"]["requests"]["storage"], "1536Mi");  // canonical

  auto sc = Admit(json::parse(R"({"apiVersion":"storage.k8s.io/v1","kind":"StorageClass",
      "metadata":{"name":"s"},"provisioner":"x.csi.io"})"));
  ASSERT_TRUE(sc.ok()) << sc.status();
  EXPECT_EQ((*sc)["reclaimPolicy"], "Delete");
  EXPECT_EQ((*sc)["volumeBindingMode"], "Immediate");

  auto drv = Admit(json::parse(R"({"apiVersion":"storage.k8s.io/v1","kind":"CSIDriver",
      "metadata":{"name":"x.csi.io"},"spec":{}})"));
  ASSERT_TRUE(drv.ok()) << drv.status();
  EXPECT_EQ((*drv)["spec"]["attachRequired"], true);
  EXPECT_EQ((*drv)["spec"]["volumeLifecycleModes"], json::array({"Persistent"}));

  auto secret = Admit(json::parse(R"({"apiVersion":"v1","kind":"Secret",
      "metadata":{"name":"s"},"stringData":{"user":"admin"}})"));
  ASSERT_TRUE(secret.ok()) << secret.status();
  EXPECT_EQ((*secret)["type"], "Opaque");
  EXPECT_EQ((*secret)["data"]["user"], "YWRtaW4=");
  EXPECT_FALSE(secret->contains("stringData"));
}

struct InvalidCase {
  const char* manifest;
  const char* message;
};

class InvalidTest : public ::testing::TestWithParam<InvalidCase> {};

TEST_P(InvalidTest, RefusedWithKubernetesMessage) {
  auto got = Admit(json::parse(GetParam().manifest));
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(ToHttpError(got.status()).code, 422);
  EXPECT_EQ(got.status().message(), GetParam().message);
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, InvalidTest,
    ::testing::Values(
        InvalidCase{R"({"apiVersion":"v1","kind":"PersistentVolumeClaim","metadata":{"name":"d"},
                        "spec":{"resources":{"requests":{"storage":"1Gi"}}}})",
                    "PersistentVolumeClaim \"d\" is invalid: spec.accessModes: Required value: at "
                    "least 1 access mode is required"},
        InvalidCase{R"({"apiVersion":"v1","kind":"PersistentVolumeClaim","metadata":{"name":"d"},
                        "spec":{"accessModes":["ReadWriteOnce"]}})",
                    "PersistentVolumeClaim \"d\" is invalid: spec.resources[storage]: Required value"},
        InvalidCase{R"({"apiVersion":"v1","kind":"PersistentVolumeClaim","metadata":{"name":"D_1"},
                        "spec":{"accessModes":["ReadWriteSometimes"],"resources":{"requests":{"storage":"0"}}}})",
                    "PersistentVolumeClaim \"D_1\" is invalid: [metadata.name: Invalid value: \"D_1\": "
                    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
                    "'-' or '.', and must start and end with an alphanumeric character (e.g. "
                    "'example.com', regex used for validation is "
                    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*'), "
                    "spec.accessModes: Unsupported value: \"ReadWriteSometimes\": supported values: "
                    "\"ReadOnlyMany\", \"ReadWriteMany\", \"ReadWriteOnce\", \"ReadWriteOncePod\", "
                    "spec.resources[storage]: Invalid value: \"0\": must be greater than zero]"},
        InvalidCase{R"({"apiVersion":"v1","kind":"PersistentVolume","metadata":{"name":"p"},
                        "spec":{"capacity":{"storage":"1Gi"},"accessModes":["ReadWriteOnce"]}})",
                    "PersistentVolume \"p\" is invalid: spec: Required value: must specify a volume type"},
        InvalidCase{R"({"apiVersion":"v1","kind":"PersistentVolume","metadata":{"name":"p"},
                        "spec":{"capacity":{"storage":"1Gi"},"accessModes":["ReadWriteOnce"],
                        "csi":{"driver":"x"},"persistentVolumeReclaimPolicy":"Keep"}})",
                    "PersistentVolume \"p\" is invalid: [spec.csi.volumeHandle: Required value, "
                    "spec.persistentVolumeReclaimPolicy: Unsupported value: \"Keep\": supported "
                    "values: \"Delete\", \"Recycle\", \"Retain\"]"},
        InvalidCase{R"({"apiVersion":"storage.k8s.io/v1","kind":"StorageClass","metadata":{"name":"s"},
                        "volumeBindingMode":"Later"})",
                    "StorageClass \"s\" is invalid: [provisioner: Required value, volumeBindingMode: "
                    "Unsupported value: \"Later\": supported values: \"Immediate\", "
                    "\"WaitForFirstConsumer\"]"},
        InvalidCase{R"({"apiVersion":"storage.k8s.io/v1","kind":"VolumeAttachment","metadata":{"name":"va"},
                        "spec":{"attacher":"x","source":{}}})",
                    "VolumeAttachment \"va\" is invalid: [spec.nodeName: Required value, spec.source: "
                    "Required value: must specify exactly one of inlineVolumeSpec and "
                    "persistentVolumeName]"},
        InvalidCase{R"({"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},
                        "spec":{"containers":[{"name":"c","image":"busybox",
                        "volumeMounts":[{"name":"data","mountPath":"/data"}]}]}})",
                    "Pod \"p\" is invalid: spec.containers[0].volumeMounts[0].name: Not found: \"data\""},
        InvalidCase{R"({"apiVersion":"snapshot.storage.k8s.io/v1","kind":"VolumeSnapshot",
                        "metadata":{"name":"s"},"spec":{"source":{}}})",
                    "VolumeSnapshot \"s\" is invalid: spec.source: Invalid value: \"object\": exactly "
                    "one of volumeSnapshotContentName and persistentVolumeClaimName must be set"},
        InvalidCase{R"({"apiVersion":"snapshot.storage.k8s.io/v1","kind":"VolumeSnapshotClass",
                        "metadata":{"name":"c"},"driver":"x"})",
                    "VolumeSnapshotClass \"c\" is invalid: deletionPolicy: Required value"},
        InvalidCase{R"({"apiVersion":"storage.k8s.io/v1","kind":"CSIStorageCapacity",
                        "metadata":{"name":"c"},"capacity":"1Gi"})",
                    "CSIStorageCapacity \"c\" is invalid: storageClassName: Required value"},
        InvalidCase{R"({"apiVersion":"coordination.k8s.io/v1","kind":"Lease",
                        "metadata":{"name":"n1","namespace":"kube-node-lease"},
                        "spec":{"holderIdentity":"n1","leaseDurationSeconds":0,"leaseTransitions":-1}})",
                    "Lease \"n1\" is invalid: [spec.leaseDurationSeconds: Invalid value: 0: must be greater "
                    "than 0, spec.leaseTransitions: Invalid value: -1: must be greater than or equal to 0]"},
        InvalidCase{R"({"apiVersion":"v1","kind":"Node","metadata":{"name":"n1"},
                        "spec":{"taints":[{"key":"a","effect":"NoRun"},{"effect":"NoSchedule"},
                                          {"key":"b","effect":"NoExecute"},{"key":"b","effect":"NoExecute"}]}})",
                    "Node \"n1\" is invalid: [spec.taints[0].effect: Unsupported value: \"NoRun\": supported "
                    "values: \"NoSchedule\", \"PreferNoSchedule\", \"NoExecute\", spec.taints[1].key: "
                    "Required value, spec.taints[3]: Duplicate value: {\"effect\":\"NoExecute\",\"key\":\"b\"}: "
                    "taints must be unique by key and effect pair]"},
        InvalidCase{R"({"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},
                        "spec":{"containers":[{"name":"c","image":"busybox"}],
                        "tolerations":[{"operator":"Equal","value":"x"},
                                       {"key":"k","operator":"Exists","effect":"NoSchedule","tolerationSeconds":5},
                                       {"key":"k","operator":"In"}]}})",
                    "Pod \"p\" is invalid: [spec.tolerations[0].operator: Invalid value: \"Equal\": operator "
                    "must be Exists when `key` is empty, which means \"match all values and all keys\", "
                    "spec.tolerations[1].effect: Invalid value: \"NoSchedule\": effect must be 'NoExecute' "
                    "when `tolerationSeconds` is set, spec.tolerations[2].operator: Unsupported value: "
                    "\"In\": supported values: \"Equal\", \"Exists\"]"}));

TEST(ValidationTest, BackupKindsDefaultsAndRules) {
  auto backup = Admit(json::parse(R"({"apiVersion":"backup.berth.io/v1","kind":"Backup","metadata":{"name":"b"}})"));
  ASSERT_TRUE(backup.ok()) << backup.status();
  EXPECT_EQ((*backup)["spec"]["ttl"], "720h0m0s");
  auto location = Admit(json::parse(R"({"apiVersion":"backup.berth.io/v1","kind":"BackupStorageLocation",
      "metadata":{"name":"l"},"spec":{"provider":"filesystem","config":{"path":"/"}}})"));
  ASSERT_TRUE(location.ok()) << location.status();
  EXPECT_EQ((*location)["spec"]["accessMode"], "ReadWrite");

  struct Case {
    const char* manifest;
    const char* message;
  };
  const Case cases[] = {
      {R"({"apiVersion":"backup.berth.io/v1","kind":"BackupStorageLocation","metadata":{"name":"l"},
           "spec":{"provider":"aws","config":{"region":"eu"},"accessMode":"WriteOnly"}})",
       "BackupStorageLocation \"l\" is invalid: [spec.provider: Unsupported value: \"aws\": supported values: "
       "\"filesystem\", spec.config[path]: Required value: the directory of the repository, spec.config[region]: "
       "Forbidden: the filesystem provider takes only path, spec.accessMode: Unsupported value: \"WriteOnly\": "
       "supported values: \"ReadWrite\", \"ReadOnly\"]"},
      {R"({"apiVersion":"backup.berth.io/v1","kind":"BackupStorageLocation","metadata":{"name":"l"},
           "spec":{"config":{"path":"/srv/../backups/"}}})",
       "BackupStorageLocation \"l\" is invalid: [spec.provider: Required value, spec.config[path]: Invalid value: "
       "\"/srv/../backups/\": must be an absolute path without trailing '/', '//', '.' or '..' components]"},
      {R"({"apiVersion":"backup.berth.io/v1","kind":"BackupStorageLocation","metadata":{"name":"l"},
           "spec":{"provider":"filesystem","config":{"path":"backups"}}})",
       "BackupStorageLocation \"l\" is invalid: spec.config[path]: Invalid value: \"backups\": must be an "
       "absolute path without trailing '/', '//', '.' or '..' components"},
      {R"({"apiVersion":"backup.berth.io/v1","kind":"Backup","metadata":{"name":"b"},
           "spec":{"includedNamespaces":["shop","*","Shop"],"ttl":"1d","storageLocation":"Main",
                   "labelSelector":{"matchExpressions":[{"key":"app","operator":"Near"}]}}})",
       "Backup \"b\" is invalid: [spec.includedNamespaces[2]: Invalid value: \"Shop\": a lowercase RFC 1123 "
       "label must consist of lower case alphanumeric characters or '-', and must start and end with an "
       "alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
       "'[a-z0-9]([-a-z0-9]*[a-z0-9])?'), spec.labelSelector: Invalid value: matchExpressions operator \"Near\" is "
       "not In, NotIn, Exists or DoesNotExist, spec.ttl: Invalid value: \"1d\": must be a duration such as 720h0m0s or "
       "30s (time: "
       "unknown unit \"d\" in duration \"1d\"), spec.storageLocation: Invalid value: \"Main\": a lowercase RFC "
       "1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end "
       "with an alphanumeric character (e.g. 'example.com', regex used for validation is "
       "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')]"},
      {R"({"apiVersion":"backup.berth.io/v1","kind":"Backup","metadata":{"name":"b"},"spec":{"ttl":"-1h"},
           "status":{"phase":"Done"}})",
       "Backup \"b\" is invalid: [spec.ttl: Invalid value: \"-1h\": must not be negative, status.phase: "
       "Unsupported value: \"Done\": supported values: \"New\", \"FailedValidation\", \"InProgress\", "
       "\"Completed\", \"PartiallyFailed\", \"Failed\", \"Deleting\"]"},
      {R"({"apiVersion":"backup.berth.io/v1","kind":"Restore","metadata":{"name":"r"},
           "spec":{"namespaceMapping":{"shop":"shop_2"}}})",
       "Restore \"r\" is invalid: [spec: Invalid value: \"object\": exactly one of backupName and scheduleName "
       "must be set, spec.namespaceMapping[shop]: Invalid value: \"shop_2\": a lowercase RFC 1123 label must "
       "consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric "
       "character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')]"},
      {R"({"apiVersion":"backup.berth.io/v1","kind":"Schedule","metadata":{"name":"s"},
           "spec":{"template":{"ttl":"soon"}}})",
       "Schedule \"s\" is invalid: [spec.schedule: Required value: a cron expression such as \"0 2 * * *\", or "
       "\"@every 6h\", spec.template.ttl: Invalid value: \"soon\": must be a duration such as 720h0m0s or 30s "
       "(time: invalid duration \"soon\")]"},
      {R"({"apiVersion":"backup.berth.io/v1","kind":"Schedule","metadata":{"name":"s"},
           "spec":{"schedule":"0 25 * * *"}})",
       "Schedule \"s\" is invalid: spec.schedule: Invalid value: \"0 25 * * *\": cron hour field \"25\": 25 is out "
       "of range 0-23"},
  };
  for (const Case& c : cases) {
    auto got = Admit(json::parse(c.manifest));
    ASSERT_FALSE(got.ok()) << c.manifest;
    EXPECT_EQ(ToHttpError(got.status()).code, 422);
    EXPECT_EQ(got.status().message(), c.message);
  }
}

TEST(ValidationTest, ImmutableFieldsAreNamed) {
  auto pvc = Admit(Fixture("persistentvolumeclaim.yaml"));
  ASSERT_TRUE(pvc.ok()) << pvc.status();
  json changed = *pvc;
  changed["spec"]["accessModes"] = json::array({"ReadWriteMany"});
  auto st = Admit(changed, &*pvc);
  EXPECT_EQ(ToHttpError(st.status()).code, 422);
  EXPECT_THAT(st.status().message(), HasSubstr("spec: Forbidden: spec is immutable after creation except "
                                               "resources.requests and volumeAttributesClassName for bound claims"));

  // Growing a bound claim is allowed; lowering the request again only to
  // above what the volume has (recovery from a failed expansion), never to
  // or below it.
  json bound = *pvc;
  bound["status"] = {{"phase", "Bound"}, {"capacity", {{"storage", "1Gi"}}}};
  json grown = bound;
  grown["spec"]["resources"]["requests"]["storage"] = "2Gi";
  EXPECT_TRUE(Admit(grown, &bound).ok());
  grown["status"] = bound["status"];
  json lowered = grown;
  lowered["spec"]["resources"]["requests"]["storage"] = "1536Mi";
  EXPECT_TRUE(Admit(lowered, &grown).ok());
  for (const char* size : {"1Gi", "512Mi"}) {
    json shrunk = grown;
    shrunk["spec"]["resources"]["requests"]["storage"] = size;
    EXPECT_THAT(Admit(shrunk, &grown).status().message(),
                HasSubstr("spec.resources.requests.storage: Forbidden: field can not be less than status.capacity"))
        << size;
  }

  auto pv = Admit(Fixture("persistentvolume.yaml"));
  ASSERT_TRUE(pv.ok()) << pv.status();
  json moved = *pv;
  moved["spec"]["csi"]["volumeHandle"] = "another";
  EXPECT_THAT(Admit(moved, &*pv).status().message(),
              HasSubstr("spec.persistentvolumesource: Forbidden: spec.persistentvolumesource is "
                        "immutable after creation"));
  // A second source is both too many and a change of the source; a null
  // one is no source at all; a label leaves the source alone.
  json two = *pv;
  two["spec"]["hostPath"] = {{"path", "/srv"}};
  EXPECT_THAT(Admit(two, &*pv).status().message(),
              HasSubstr("spec: Forbidden: may not specify more than 1 volume type"));
  EXPECT_THAT(Admit(two, &*pv).status().message(), HasSubstr("spec.persistentvolumesource is immutable"));
  json null_source = *pv;
  null_source["spec"]["hostPath"] = nullptr;
  null_source["metadata"]["labels"] = {{"tier", "gold"}};
  EXPECT_TRUE(Admit(null_source, &*pv).ok()) << Admit(null_source, &*pv).status();

  // A claim: an annotation alone passes; volumeName may be set while it is
  // unset (the binder), never changed once set.
  json annotated = *pvc;
  annotated["metadata"]["annotations"] = {{"a", "b"}};
  EXPECT_TRUE(Admit(annotated, &*pvc).ok()) << Admit(annotated, &*pvc).status();
  json named = *pvc;
  named["spec"]["volumeName"] = "pv-1";
  EXPECT_TRUE(Admit(named, &*pvc).ok()) << Admit(named, &*pvc).status();
  json renamed = named;
  renamed["spec"]["volumeName"] = "pv-2";
  EXPECT_THAT(Admit(renamed, &named).status().message(), HasSubstr("spec: Forbidden: spec is immutable"));

  auto sc = Admit(Fixture("storageclass.yaml"));
  ASSERT_TRUE(sc.ok());
  json reparam = *sc;
  reparam["parameters"]["x"] = "y";
  EXPECT_THAT(Admit(reparam, &*sc).status().message(),
              HasSubstr("parameters: Forbidden: updates to parameters are forbidden."));
}

}  // namespace
}  // namespace berth::api
