#include "cli/printers.h"

#include "api/codec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace berth::cli {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

const api::KindInfo& Kind(std::string_view name) { return *api::FindByUserName(name); }

json Claim(const std::string& name, const std::string& size, const std::string& phase) {
  return {{"apiVersion", "v1"},
          {"kind", "PersistentVolumeClaim"},
          {"metadata", {{"name", name}, {"namespace", "default"}, {"creationTimestamp", "2026-11-26T00:00:00Z"}}},
          {"spec", {{"accessModes", {"ReadWriteOnce"}}, {"resources", {{"requests", {{"storage", size}}}}}}},
          {"status", {{"phase", phase}}}};
}

std::string Print(const std::vector<KindObjects>& groups, std::string_view format, PrintOptions o = {}) {
  auto f = OutputFormat::Parse(format);
  EXPECT_TRUE(f.ok()) << f.status();
  o.format = *f;
  return PrintObjects(groups, o, absl::FromUnixSeconds(1795651200));
}

TEST(OutputFormatTest, UnknownFormatsGetKubectlsMessage) {
  auto f = OutputFormat::Parse("xml");
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(f.status().message(), HasSubstr("unable to match a printer suitable for the output format \"xml\""));
  EXPECT_EQ(OutputFormat::Parse("jsonpath=").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(OutputFormat::Parse("custom-columns=NAME").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(PrintObjectsTest, AnEmptyJsonListIsKubectlsList) {
  json printed = json::parse(Print({{&Kind("pvc"), {}}}, "json"));
  EXPECT_EQ(printed, json::parse(R"({"apiVersion":"v1","kind":"List","items":[],"metadata":{"resourceVersion":""}})"));
}

TEST(PrintObjectsTest, OneObjectByNameIsTheObjectAndSeveralAreAList) {
  PrintOptions single;
  single.single = true;
  EXPECT_EQ(json::parse(Print({{&Kind("pvc"), {Claim("a", "1Gi", "Bound")}}}, "json", single)),
            Claim("a", "1Gi", "Bound"));
  json list = json::parse(Print({{&Kind("pvc"), {Claim("a", "1Gi", "Bound")}}, {&Kind("pv"), {}}}, "json"));
  EXPECT_EQ(list["kind"], "List");
  EXPECT_EQ(list["items"], json::array({Claim("a", "1Gi", "Bound")}));
  const std::string yaml = Print({{&Kind("pvc"), {Claim("a", "1Gi", "Bound")}}}, "yaml");
  EXPECT_THAT(yaml, HasSubstr("kind: List\n"));
  auto decoded = api::DecodeManifests(yaml);  // a List reads back as its items
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ASSERT_EQ(decoded->size(), 1u);
  EXPECT_EQ(decoded->at(0), Claim("a", "1Gi", "Bound"));
}

TEST(PrintObjectsTest, NamesAreKindSlashName) {
  json sc = {{"metadata", {{"name", "fast"}}}};
  EXPECT_EQ(Print({{&Kind("pvc"), {Claim("a", "1Gi", "Bound")}}, {&Kind("sc"), {sc}}}, "name"),
            "persistentvolumeclaim/a\nstorageclass.storage.k8s.io/fast\n");
}

TEST(PrintObjectsTest, JsonPathRunsOverTheList) {
  EXPECT_EQ(Print({{&Kind("pvc"), {Claim("a", "1Gi", "Bound"), Claim("b", "2Gi", "Pending")}}},
                  "jsonpath={.items[*].metadata.name}"),
            "a b");
  EXPECT_EQ(Print({{&Kind("pvc"), {Claim("a", "1Gi", "Bound")}}}, "jsonpath='{.items[0].status.phase}'"), "Bound");
}

TEST(PrintObjectsTest, CustomColumnsAlignLikeKubectlAndShowNoneForMissing) {
  std::string text = Print({{&Kind("pvc"), {Claim("a", "1Gi", "Bound"), Claim("long-name", "2Gi", "Pending")}}},
                           "custom-columns=NAME:.metadata.name,SIZE:.spec.resources.requests.storage,X:.nosuch");
  EXPECT_EQ(text,
            "NAME        SIZE   X\n"
            "a           1Gi    <none>\n"
            "long-name   2Gi    <none>\n");
}

TEST(PrintObjectsTest, NoHeadersLeavesOutTheHeaderLine) {
  PrintOptions o;
  o.headers = false;
  EXPECT_EQ(Print({{&Kind("pvc"), {Claim("a", "1Gi", "Bound")}}}, "custom-columns=NAME:.metadata.name", o), "a\n");
  EXPECT_THAT(Print({{&Kind("pvc"), {Claim("a", "1Gi", "Bound")}}}, "", o), ::testing::StartsWith("a "));
}

TEST(PrintObjectsTest, SeveralKindsPrintOneTableEachWithKindSlashName) {
  PrintOptions o;
  o.with_kind = true;
  json sc = {{"metadata", {{"name", "fast"}, {"creationTimestamp", "2026-11-26T00:00:00Z"}}},
             {"provisioner", "berth.csi.local"}};
  std::string text = Print({{&Kind("pvc"), {Claim("a", "1Gi", "Bound")}}, {&Kind("sc"), {sc}}}, "", o);
  EXPECT_THAT(text, HasSubstr("persistentvolumeclaim/a "));
  EXPECT_THAT(text, HasSubstr("\n\nNAME"));
  EXPECT_THAT(text, HasSubstr("storageclass.storage.k8s.io/fast "));
}

TEST(PrintObjectsTest, AllNamespacesAddsANamespaceColumnToNamespacedKindsOnly) {
  PrintOptions o;
  o.with_namespace = true;
  EXPECT_THAT(Print({{&Kind("pvc"), {Claim("a", "1Gi", "Bound")}}}, "", o), ::testing::StartsWith("NAMESPACE "));
  json pv = {{"metadata", {{"name", "pv-1"}}}, {"spec", json::object()}};
  EXPECT_THAT(Print({{&Kind("pv"), {pv}}}, "", o), ::testing::StartsWith("NAME "));
}

TEST(SortObjectsTest, SortsQuantitiesBySizeNumbersNumericallyAndMissingFirst) {
  std::vector<json> claims = {Claim("ten", "10Gi", "Bound"),
                              Claim("two", "2Gi", "Bound"),
                              Claim("half", "512Mi", "Bound"),
                              {{"metadata", {{"name", "none"}}}}};
  ASSERT_TRUE(SortObjects(claims, ".spec.resources.requests.storage").ok());
  std::vector<std::string> names;
  for (const auto& c : claims) names.push_back(c["metadata"]["name"]);
  EXPECT_EQ(names, (std::vector<std::string>{"none", "half", "two", "ten"}));
  ASSERT_TRUE(SortObjects(claims, "{.metadata.name}").ok());
  names.clear();
  for (const auto& c : claims) names.push_back(c["metadata"]["name"]);
  EXPECT_EQ(names, (std::vector<std::string>{"half", "none", "ten", "two"}));
  EXPECT_EQ(SortObjects(claims, "{.a[}").code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace berth::cli
