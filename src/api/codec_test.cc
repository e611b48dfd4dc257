#include "api/codec.h"

#include "common/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace berth::api {
namespace {

using nlohmann::json;

// Manifests as people write them for Kubernetes.
constexpr char kManifests[] = R"(# storage for the app
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: berth-local
  annotations:
    storageclass.kubernetes.io/is-default-class: "true"
provisioner: local.csi.berth.io
volumeBindingMode: WaitForFirstConsumer
allowVolumeExpansion: true
reclaimPolicy: Delete
parameters:
  fsType: xfs
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data
  namespace: default
  labels: {app: web, tier: "1"}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: berth-local
  resources:
    requests:
      storage: 5Gi
---
---
apiVersion: snapshot.storage.k8s.io/v1
kind: VolumeSnapshot
metadata:
  name: data-snap
spec:
  volumeSnapshotClassName: berth-snapclass
  source:
    persistentVolumeClaimName: data
)";

TEST(CodecTest, DecodesMultiDocumentManifestsWithKubernetesTypes) {
  auto docs = DecodeManifests(kManifests);
  ASSERT_TRUE(docs.ok()) << docs.status();
  ASSERT_EQ(docs->size(), 3u) << "empty documents are skipped";
  const json& sc = (*docs)[0];
  EXPECT_EQ(sc["kind"], "StorageClass");
  EXPECT_EQ(sc["allowVolumeExpansion"], true);
  EXPECT_EQ(sc["metadata"]["annotations"]["storageclass.kubernetes.io/is-default-class"], "true");
  const json& pvc = (*docs)[1];
  EXPECT_EQ(pvc["metadata"]["labels"]["tier"], "1") << "quoted numbers stay strings";
  EXPECT_EQ(pvc["spec"]["accessModes"], json::array({"ReadWriteOnce"}));
  EXPECT_EQ(pvc["spec"]["resources"]["requests"]["storage"], "5Gi");
  EXPECT_EQ((*docs)[2]["spec"]["source"]["persistentVolumeClaimName"], "data");
}

TEST(CodecTest, ResolvesPlainScalarsLikeYaml11) {
  auto docs = DecodeManifests(
      "a: 1\nb: -2\nc: 1.5\nd: yes\ne: off\nf: ~\ng: null\nh: '007'\ni: 0x1F\nj: 010\nk: 1e3\n"
      "l: hello world\nm:\nn: \"on\"\n");
  ASSERT_TRUE(docs.ok()) << docs.status();
  const json& o = (*docs)[0];
  EXPECT_EQ(o["a"], 1);
  EXPECT_EQ(o["b"], -2);
  EXPECT_EQ(o["c"], 1.5);
  EXPECT_EQ(o["d"], true);
  EXPECT_EQ(o["e"], false);
  EXPECT_TRUE(o["f"].is_null());
  EXPECT_TRUE(o["g"].is_null());
  EXPECT_EQ(o["h"], "007");
  EXPECT_EQ(o["i"], 31);
  EXPECT_EQ(o["j"], 8);
  EXPECT_EQ(o["k"], 1000.0);
  EXPECT_EQ(o["l"], "hello world");
  EXPECT_TRUE(o["m"].is_null());
  EXPECT_EQ(o["n"], "on");
  EXPECT_EQ((*DecodeManifests("x: -44444e444\n"))[0]["x"], "-44444e444") << "no double holds it";
}

TEST(CodecTest, JsonIsYamlAndListsExpand) {
  auto docs = DecodeManifests(R"({"apiVersion": "v1", "kind": "List", "items": [
      {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "a"}},
      {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "b"}}]})");
  ASSERT_TRUE(docs.ok()) << docs.status();
  ASSERT_EQ(docs->size(), 2u);
  EXPECT_EQ((*docs)[1]["metadata"]["name"], "b");
}

TEST(CodecTest, ErrorsNameTheLine) {
  auto bad = DecodeManifests("a: 1\nb: [unclosed\nc: 2\n");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), ::testing::HasSubstr("line"));
  EXPECT_EQ(DecodeManifests("- a\n- b\n").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(DecodeManifests("a: 1\na: 2\n").status().message(), ::testing::HasSubstr("duplicate key"));
}

TEST(CodecTest, EncodeRoundTripsEveryTypeAndTrickyString) {
  json o = {{"apiVersion", "v1"},
            {"kind", "ConfigLike"},
            {"s", {"true", "123", "", "null", "a: b", "- x", "# c", "yes", "multi\nline", "1.5", "ok"}},
            {"n", {1, -2, 3.25, true, false, nullptr}},
            {"empty", json::object()},
            {"none", json::array()},
            {"nested", {{"k.io/x", {{"deep", "v"}}}}}};
  const std::string yaml = EncodeYaml(o);
  auto back = DecodeManifests(yaml);
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << yaml;
  ASSERT_EQ(back->size(), 1u);
  EXPECT_EQ((*back)[0], o) << yaml;
  EXPECT_THAT(yaml, ::testing::HasSubstr("kind: ConfigLike\n"));
}

// Found by tests/fuzz/codec_fuzz: yaml-cpp's LoadAll never returned on this.
TEST(CodecTest, StrayCommaIsAnErrorNotAHang) {
  auto r = DecodeManifests(",apere");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  auto r2 = DecodeManifests("a: 1\n---\n,x\n");
  EXPECT_EQ(r2.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r2.status().message(), ::testing::HasSubstr("line 3"));
  auto inline_doc = DecodeManifests("--- {a: 1}\n--- {b: 2}\n");
  ASSERT_TRUE(inline_doc.ok()) << inline_doc.status();
  EXPECT_EQ(inline_doc->size(), 2u);
}

// Found by tests/fuzz/codec_fuzz: invalid UTF-8 and control characters.
TEST(CodecTest, RefusesInvalidUtf8AndRoundTripsControlCharacters) {
  auto bad = DecodeManifests("a: \x9c\x8d\n");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), ::testing::HasSubstr("UTF-8"));
  EXPECT_FALSE(DecodeManifests("a: \xed\xa0\x80\n").ok()) << "surrogates are not UTF-8";
  EXPECT_TRUE(DecodeManifests("name: caf\xc3\xa9\n").ok());
  EXPECT_EQ(DecodeManifests(std::string("me\0ta: 1\n", 9)).status().code(), absl::StatusCode::kInvalidArgument)
      << "raw control characters are not YAML";
  // Found by tests/fuzz/codec_fuzz: NEL, LS and PS are line breaks to a
  // YAML 1.1 reader (folded into a space unless escaped).
  json o = {{"k\x03ey", "v\x01al\tue"},
            {"\xc3\xa9", "ok"},
            {"a: \xe2\x80\xa8"
             "d",
             "p\xe2\x80\xa9q \xc3\xa9"},
            {"nel", "x\xc2\x85y"}};
  auto back = DecodeManifests(EncodeYaml(o));
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << EncodeYaml(o);
  EXPECT_EQ((*back)[0], o) << EncodeYaml(o);
}

// Anchors and aliases as go-yaml reads them (a copy of the anchored value),
// explicit tags, and the failures a reader must report rather than loop on
// or blow up: an unknown alias, aliases that expand without bound, content
// after a document's end.
TEST(CodecTest, ReadsAnchorsAndTagsAndRefusesAliasBombs) {
  auto docs = DecodeManifests(
      "base: &b {size: 1Gi, modes: [ReadWriteOnce]}\ncopy: *b\nname: &n claim\n*n : keyed\n"
      "s: !!str 123\ni: !!int \"42\"\nq: !custom 7\nlines: |\n  one\n  two\n");
  ASSERT_TRUE(docs.ok()) << docs.status();
  const json& o = (*docs)[0];
  EXPECT_EQ(o["copy"], o["base"]);
  EXPECT_EQ(o["copy"]["modes"], json::array({"ReadWriteOnce"}));
  EXPECT_EQ(o["claim"], "keyed") << "an alias of a scalar is a key";
  EXPECT_EQ(o["s"], "123");
  EXPECT_EQ(o["i"], 42);
  EXPECT_EQ(o["q"], "7") << "an unknown tag keeps the text";
  EXPECT_EQ(o["lines"], "one\ntwo\n");

  auto unknown = DecodeManifests("a: *nowhere\n");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unknown.status().message(), ::testing::HasSubstr("nowhere"));

  // Ten levels of ten aliases each: 10^10 values if expanded.
  std::string bomb = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 10; ++i) {
    bomb += berth::StrCat("a", i, ": &a", i, " [");
    for (int k = 0; k < 10; ++k) bomb += berth::StrCat(k ? ", " : "", "*a", i - 1);
    bomb += "]\n";
  }
  auto exploded = DecodeManifests(bomb);
  EXPECT_EQ(exploded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(exploded.status().message(), ::testing::HasSubstr("aliases"));

  auto after_end = DecodeManifests("a: 1\n...\nb: 2\n");
  EXPECT_EQ(after_end.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(DecodeManifests("a: 1\nb: [unclosed\nc: 2\n").status().message(),
              ::testing::HasSubstr("invalid YAML at line "));
}

}  // namespace
}  // namespace berth::api
