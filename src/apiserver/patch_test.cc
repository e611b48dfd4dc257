#include "apiserver/patch.h"

#include "api/errors.h"
#include "api/kinds.h"
#include "api/schema.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace berth::apiserver {
namespace {

using nlohmann::json;

const api::Schema& PodSchema() { return api::SchemaFor(*api::FindResource("", "pods")); }

const json kPod = json::parse(R"({
  "metadata": {"name": "web", "labels": {"app": "web", "tier": "1"}, "finalizers": ["a"]},
  "spec": {
    "containers": [
      {"name": "app", "image": "nginx:1", "volumeMounts": [{"name": "data", "mountPath": "/data"}]},
      {"name": "sidecar", "image": "busybox"}
    ],
    "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
  },
  "status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "Scheduled", "status": "True"}]}
})");

json Apply(const json& original, const std::string& patch, PatchType type) {
  auto out = ApplyPatch(original, patch, type, PodSchema());
  EXPECT_TRUE(out.ok()) << out.status();
  return out.value_or(json());
}

TEST(PatchTest, ContentTypes) {
  EXPECT_EQ(*ParsePatchType("application/merge-patch+json"), PatchType::kMerge);
  EXPECT_EQ(*ParsePatchType("application/json-patch+json; charset=utf-8"), PatchType::kJson);
  EXPECT_EQ(*ParsePatchType("application/strategic-merge-patch+json"), PatchType::kStrategic);
  auto bad = ParsePatchType("application/json");
  EXPECT_EQ(api::ToHttpError(bad.status()).code, 415);
}

TEST(PatchTest, MergePatchReplacesListsAndNullDeletes) {
  json out = Apply(kPod, R"({"metadata":{"labels":{"tier":null,"new":"x"}},
                             "spec":{"containers":[{"name":"only","image":"x"}]}})",
                   PatchType::kMerge);
  EXPECT_EQ(out["metadata"]["labels"], json({{"app", "web"}, {"new", "x"}}));
  ASSERT_EQ(out["spec"]["containers"].size(), 1u);
  EXPECT_EQ(out["spec"]["containers"][0]["name"], "only");
}

TEST(PatchTest, JsonPatchAppliesOrFailsCleanly) {
  json out = Apply(kPod, R"([{"op":"replace","path":"/spec/containers/1/image","value":"alpine"},
                             {"op":"add","path":"/metadata/labels/x","value":"y"}])",
                   PatchType::kJson);
  EXPECT_EQ(out["spec"]["containers"][1]["image"], "alpine");
  EXPECT_EQ(out["metadata"]["labels"]["x"], "y");
  auto failed =
      ApplyPatch(kPod, R"([{"op":"test","path":"/metadata/name","value":"other"}])", PatchType::kJson, PodSchema());
  EXPECT_EQ(api::ToHttpError(failed.status()).code, 422);
  auto missing = ApplyPatch(kPod, R"([{"op":"remove","path":"/nope"}])", PatchType::kJson, PodSchema());
  EXPECT_EQ(api::ToHttpError(missing.status()).code, 422);
  EXPECT_EQ(missing.status().message(), "the JSON patch does not apply: key 'nope' not found");
  auto garbage = ApplyPatch(kPod, "{not json", PatchType::kMerge, PodSchema());
  EXPECT_EQ(api::ToHttpError(garbage.status()).code, 400);
}

// The external-snapshotter (csi-snapshotter v7) marks a VolumeSnapshotContent
// without annotations with [replace /metadata/annotations {}, add
// /metadata/annotations/<key>]; kube-apiserver's JSON patch (evanphx/json-patch
// v4) sets a missing object member on replace, so berth must too.
TEST(PatchTest, JsonPatchReplaceOfMissingMemberSetsItAsKubernetesDoes) {
  json out = Apply(kPod, R"([{"op":"replace","path":"/metadata/annotations","value":{}},
                             {"op":"add","path":"/metadata/annotations/snapshot.storage.kubernetes.io~1volumesnapshot-being-created","value":"yes"},
                             {"op":"replace","path":"/spec/nodeName","value":"node-1"}])",
                   PatchType::kJson);
  EXPECT_EQ(out["metadata"]["annotations"],
            json({{"snapshot.storage.kubernetes.io/volumesnapshot-being-created", "yes"}}));
  EXPECT_EQ(out["spec"]["nodeName"], "node-1");
  // Still refused: a missing parent, an array index past the end.
  auto no_parent =
      ApplyPatch(kPod, R"([{"op":"replace","path":"/nope/deeper","value":1}])", PatchType::kJson, PodSchema());
  EXPECT_EQ(api::ToHttpError(no_parent.status()).code, 422);
  auto past_end =
      ApplyPatch(kPod, R"([{"op":"replace","path":"/spec/containers/7","value":{}}])", PatchType::kJson, PodSchema());
  EXPECT_EQ(api::ToHttpError(past_end.status()).code, 422);
  auto bad_pointer =
      ApplyPatch(kPod, R"([{"op":"replace","path":"no-slash","value":1}])", PatchType::kJson, PodSchema());
  EXPECT_FALSE(bad_pointer.ok());
}

TEST(PatchTest, StrategicMergesKeyedListsElementByElement) {
  json out = Apply(kPod, R"({"spec":{"containers":[{"name":"sidecar","image":"busybox:2"},
                                                   {"name":"extra","image":"x"}]},
                            "status":{"conditions":[{"type":"Ready","status":"True"}]}})",
                   PatchType::kStrategic);
  ASSERT_EQ(out["spec"]["containers"].size(), 3u);
  EXPECT_EQ(out["spec"]["containers"][0]["image"], "nginx:1");  // untouched
  EXPECT_EQ(out["spec"]["containers"][0]["volumeMounts"].size(), 1u);
  EXPECT_EQ(out["spec"]["containers"][1]["image"], "busybox:2");
  EXPECT_EQ(out["spec"]["containers"][2]["name"], "extra");
  ASSERT_EQ(out["status"]["conditions"].size(), 2u);
  EXPECT_EQ(out["status"]["conditions"][0]["status"], "True");
  EXPECT_EQ(out["status"]["conditions"][1]["type"], "Scheduled");
}

TEST(PatchTest, StrategicDirectives) {
  // $patch: delete on a keyed element; finalizers merge as a set and
  // $deleteFromPrimitiveList removes; $setElementOrder is only a hint.
  json out = Apply(kPod, R"({"metadata":{"finalizers":["b"],
                                         "$deleteFromPrimitiveList/finalizers":["a"]},
                            "spec":{"$setElementOrder/containers":[{"name":"app"}],
                                    "containers":[{"name":"sidecar","$patch":"delete"}]}})",
                   PatchType::kStrategic);
  EXPECT_EQ(out["metadata"]["finalizers"], json({"b"}));
  ASSERT_EQ(out["spec"]["containers"].size(), 1u);
  EXPECT_EQ(out["spec"]["containers"][0]["name"], "app");
  EXPECT_FALSE(out["spec"].contains("$setElementOrder/containers"));

  // $patch: replace on a map replaces it whole.
  out = Apply(kPod, R"({"metadata":{"labels":{"only":"this","$patch":"replace"}}})", PatchType::kStrategic);
  EXPECT_EQ(out["metadata"]["labels"], json({{"only", "this"}}));

  // $retainKeys drops what is not listed.
  out = Apply(kPod, R"({"spec":{"volumes":[{"name":"data","emptyDir":{},
                        "$retainKeys":["emptyDir","name"]}]}})",
              PatchType::kStrategic);
  EXPECT_EQ(out["spec"]["volumes"][0], json({{"name", "data"}, {"emptyDir", json::object()}}));

  // A keyed element without its key is an error, not a silent append.
  auto bad = ApplyPatch(kPod, R"({"spec":{"containers":[{"image":"x"}]}})", PatchType::kStrategic, PodSchema());
  EXPECT_EQ(api::ToHttpError(bad.status()).code, 400);
}

TEST(PatchTest, StrategicListWithoutMergeKeyIsReplaced) {
  json out = Apply(kPod, R"({"spec":{"containers":[{"name":"app","command":["b"]}]}})", PatchType::kStrategic);
  out = Apply(out, R"({"spec":{"containers":[{"name":"app","command":["c","d"]}]}})", PatchType::kStrategic);
  EXPECT_EQ(out["spec"]["containers"][0]["command"], json({"c", "d"}));
}

}  // namespace
}  // namespace berth::apiserver
