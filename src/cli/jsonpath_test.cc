#include "cli/jsonpath.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace berth::cli {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

const json kList = json::parse(R"({
  "kind": "List", "apiVersion": "v1",
  "items": [
    {"metadata": {"name": "a", "labels": {"app": "web"},
                  "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"}},
     "spec": {"volumeName": "pv-a", "resources": {"requests": {"storage": "1Gi"}}},
     "status": {"phase": "Bound", "conditions": [{"type": "Resizing", "status": "False"},
                                                 {"type": "Ready", "status": "True"}]}},
    {"metadata": {"name": "b"}, "spec": {"replicas": 3}, "status": {"phase": "Pending"}},
    {"metadata": {"name": "c"}, "spec": {"replicas": 1}, "status": {"phase": "Pending"}}
  ]
})");

std::string Run(std::string_view tmpl, const json& data = kList) {
  auto p = JsonPath::Parse(tmpl);
  EXPECT_TRUE(p.ok()) << tmpl << ": " << p.status();
  if (!p.ok()) return "<parse error>";
  auto out = p->Execute(data);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : "<error>";
}

TEST(JsonPathTest, FieldsWildcardsAndIndexesAsKubectlPrintsThem) {
  EXPECT_EQ(Run("{.items[0].metadata.name}"), "a");
  EXPECT_EQ(Run("{.items[*].metadata.name}"), "a b c");
  EXPECT_EQ(Run("{.items[-1].metadata.name}"), "c");
  EXPECT_EQ(Run("{.items[0:2].metadata.name}"), "a b");
  EXPECT_EQ(Run("{.items[1:].metadata.name}"), "b c");
  EXPECT_EQ(Run("{['kind']}"), "List");
  EXPECT_EQ(Run("{$.kind}/{.apiVersion}"), "List/v1");
  EXPECT_EQ(Run("{.items[1].spec.replicas}"), "3");
  // Objects and arrays print as compact JSON; a missing key prints nothing.
  EXPECT_EQ(Run("{.items[0].metadata.labels}"), R"({"app":"web"})");
  EXPECT_EQ(Run("{.items[0].spec.resources.requests.*}"), "1Gi");
  EXPECT_EQ(Run("name={.items[1].metadata.missing}."), "name=.");
  EXPECT_EQ(Run("{..volumeName}"), "pv-a");
}

TEST(JsonPathTest, EscapedDotsFiltersAndRanges) {
  EXPECT_EQ(Run(R"({.items[0].metadata.annotations.kubectl\.kubernetes\.io/last-applied-configuration})"), "{}");
  EXPECT_EQ(Run(R"({.items[0].status.conditions[?(@.type=="Ready")].status})"), "True");
  EXPECT_EQ(Run(R"({.items[?(@.status.phase=='Pending')].metadata.name})"), "b c");
  EXPECT_EQ(Run(R"({.items[?(@.spec.replicas>1)].metadata.name})"), "b");
  EXPECT_EQ(Run(R"({.items[?(@.spec.volumeName)].metadata.name})"), "a");
  EXPECT_EQ(Run(R"({range .items[*]}{.metadata.name}{"\t"}{.status.phase}{"\n"}{end})"),
            "a\tBound\nb\tPending\nc\tPending\n");
  EXPECT_EQ(Run(R"({range .items[*]}[{$.kind}:{.metadata.name}]{end})"), "[List:a][List:b][List:c]");
}

TEST(JsonPathTest, FindGivesValuesForSortingAndColumns) {
  auto p = JsonPath::Parse(RelaxedJsonPath(".items[*].spec.replicas"));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(*p->Find(kList), ElementsAre(json(3), json(1)));
  EXPECT_EQ(RelaxedJsonPath("metadata.name"), "{.metadata.name}");
  EXPECT_EQ(RelaxedJsonPath("{.status}"), "{.status}");
  EXPECT_EQ(JsonPath::Parse("a{.b}")->Find(kList).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(JsonPathTest, StrictModeAndBadTemplates) {
  auto p = JsonPath::Parse("{.items[0].nope}");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->Execute(kList, /*strict=*/true).status().code(), absl::StatusCode::kNotFound);
  for (const char* bad : {"{.a", "{range .items[*]}{.x}", "{end}", "{.a b}", "{.items[x]}", "{}"}) {
    auto parsed = JsonPath::Parse(bad);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(parsed.status().message(), HasSubstr("JSONPath")) << bad;
  }
}

}  // namespace
}  // namespace berth::cli
