#include "cli/jsonpath.h"

#include "gtest/gtest.h"

namespace berth::cli {
namespace {

using nlohmann::json;

const json kList = json::parse(R"({
  "kind": "List",
  "items": [
    {"metadata": {"name": "a", "labels": {"app.kubernetes.io/name": "web"}},
     "spec": {"resources": {"requests": {"storage": "1Gi"}}},
     "status": {"phase": "Bound", "conditions": [{"type": "Resizing", "status": "False"},
                                                 {"type": "Ready", "status": "True"}]}},
    {"metadata": {"name": "b"}, "spec": {"size": 3}, "status": {"phase": "Pending"}},
    {"metadata": {"name": "c"}, "spec": {"size": 7}, "status": {"phase": "Bound"}}
  ]
})");

std::string Render(std::string_view t, const json& data = kList) {
  auto parsed = JsonPathTemplate::Parse(t);
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  return parsed.ok() ? parsed->Execute(data) : "<parse error>";
}

TEST(JsonPathTest, FieldsIndexesAndWildcards) {
  EXPECT_EQ(Render("{.items[0].metadata.name}"), "a");
  EXPECT_EQ(Render("{$.items[-1].metadata.name}"), "c");
  EXPECT_EQ(Render("{.items[*].metadata.name}"), "a b c");
  EXPECT_EQ(Render("{.items[1:].metadata.name}"), "b c");
  EXPECT_EQ(Render("{.items[0:2].status.phase}"), "Bound Pending");
  EXPECT_EQ(Render("{.items[0].metadata.labels['app.kubernetes.io/name']}"), "web");
  EXPECT_EQ(Render("{.items[0].spec.resources.requests.*}"), "1Gi");
  EXPECT_EQ(Render("{.items[0].metadata.labels.app\\.kubernetes\\.io/name}"), "web");
}

TEST(JsonPathTest, TextAroundActionsAndStringLiterals) {
  EXPECT_EQ(Render("name={.items[0].metadata.name}{\"\\n\"}"), "name=a\n");
  EXPECT_EQ(Render("{'\\t'}x"), "\tx");
}

TEST(JsonPathTest, RangeRunsTheBodyPerElementRelativeToIt) {
  EXPECT_EQ(Render("{range .items[*]}{.metadata.name}:{.status.phase}{\"\\n\"}{end}"), "a:Bound\nb:Pending\nc:Bound\n");
}

TEST(JsonPathTest, FiltersCompareStringsAndNumbersAndTestExistence) {
  EXPECT_EQ(Render("{.items[0].status.conditions[?(@.type==\"Ready\")].status}"), "True");
  EXPECT_EQ(Render("{.items[?(@.status.phase=='Bound')].metadata.name}"), "a c");
  EXPECT_EQ(Render("{.items[?(@.status.phase!='Bound')].metadata.name}"), "b");
  EXPECT_EQ(Render("{.items[?(@.spec.size > 4)].metadata.name}"), "c");
  EXPECT_EQ(Render("{.items[?(@.spec.size<=3)].metadata.name}"), "b");
  EXPECT_EQ(Render("{.items[?(@.metadata.labels)].metadata.name}"), "a");
}

TEST(JsonPathTest, RecursiveDescentFindsEveryMatchingField) { EXPECT_EQ(Render("{..phase}"), "Bound Pending Bound"); }

TEST(JsonPathTest, MissingFieldsPrintNothing) {
  EXPECT_EQ(Render("{.items[0].nosuch.deeper}"), "");
  EXPECT_EQ(Render("{.items[9].metadata.name}"), "");
  EXPECT_EQ(Render("x{.nosuch}y"), "xy");
}

TEST(JsonPathTest, ObjectsAndNumbersPrintAsJson) {
  EXPECT_EQ(Render("{.items[1].spec}"), R"({"size":3})");
  EXPECT_EQ(Render("{.items[2].spec.size}"), "7");
  EXPECT_EQ(Render("{.items[0].status.conditions[1]}"), R"({"status":"True","type":"Ready"})");
}

TEST(JsonPathTest, MalformedTemplatesAreInvalidArgument) {
  for (const char* bad : {"{.items[0}", "{range .items[*]}{.a}", "{end}", "{.items[0,1]}", "{.a", "{.items[x]}",
                          "{.items[?(type==1)]}"}) {
    auto t = JsonPathTemplate::Parse(bad);
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(JsonPathTest, SelectAcceptsTheRelaxedForm) {
  auto got = JsonPathSelect(kList, "items[0].metadata.name");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, std::vector<json>{"a"});
  EXPECT_EQ(*JsonPathSelect(kList, ".items[1].metadata.name"), std::vector<json>{"b"});
  EXPECT_EQ(*JsonPathSelect(kList, "{.items[2].metadata.name}"), std::vector<json>{"c"});
  EXPECT_EQ(JsonPath(kList, "{.items[0].status.conditions[?(@.type==\"Ready\")].status}"), json("True"));
  EXPECT_EQ(JsonPath(kList, "{.nosuch}"), std::nullopt);
}

}  // namespace
}  // namespace berth::cli
