#include <string>

#include "api/types/core.h"
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

}  // namespace
}  // namespace berth::api::types
