#include "api/selector.h"

#include "gtest/gtest.h"

namespace berth::api {
namespace {

TEST(LabelSelectorTest, ParsesEveryOperator) {
  auto s = LabelSelector::Parse("app=web, tier!=db,env in (prod, staging),!canary,release,x==y");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->requirements().size(), 6u);
  EXPECT_TRUE(s->Matches({{"app", "web"}, {"env", "prod"}, {"release", "1"}, {"x", "y"}}));
  EXPECT_FALSE(s->Matches({{"app", "web"}, {"env", "prod"}, {"release", "1"}, {"x", "y"}, {"canary", ""}}));
  EXPECT_FALSE(s->Matches({{"app", "web"}, {"env", "dev"}, {"release", "1"}, {"x", "y"}}));
  EXPECT_FALSE(s->Matches({{"app", "web"}, {"tier", "db"}, {"env", "prod"}, {"release", "1"}, {"x", "y"}}));
  EXPECT_EQ(s->ToString(), "app=web,tier!=db,env in (prod,staging),!canary,release,x=y");
  EXPECT_TRUE(LabelSelector::Parse("")->Matches({}));
}

TEST(LabelSelectorTest, NotInMatchesAbsentKeys) {
  auto s = LabelSelector::Parse("env notin (prod)");
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->Matches({}));
  EXPECT_FALSE(s->Matches({{"env", "prod"}}));
}

TEST(LabelSelectorTest, RejectsMalformedWithTheOffendingPart) {
  for (const char* bad : {"a=b,,c", "env in prod", "env within (a)", "-bad=x", "a=b c", "a=-x-"}) {
    auto s = LabelSelector::Parse(bad);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_TRUE(LabelSelector::Parse("example.com/app=web").ok());
  EXPECT_FALSE(LabelSelector::Parse("Example.com/app=web").ok());
}

TEST(LabelSelectorTest, FromStructuredForm) {
  auto j = nlohmann::json::parse(R"({"matchLabels": {"app": "db"},
      "matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]},
                           {"key": "legacy", "operator": "DoesNotExist"}]})");
  auto s = LabelSelector::FromJson(j);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->Matches({{"app", "db"}, {"zone", "b"}}));
  EXPECT_FALSE(s->Matches({{"app", "db"}, {"zone", "c"}}));
  EXPECT_FALSE(s->Matches({{"app", "db"}, {"zone", "a"}, {"legacy", "1"}}));
  auto bad = nlohmann::json::parse(R"({"matchExpressions": [{"key": "k", "operator": "Near"}]})");
  EXPECT_EQ(LabelSelector::FromJson(bad).status().code(), absl::StatusCode::kInvalidArgument);
  auto novals = nlohmann::json::parse(R"({"matchExpressions": [{"key": "k", "operator": "In"}]})");
  EXPECT_EQ(LabelSelector::FromJson(novals).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace berth::api
