#include "controllers/taints.h"

#include "gtest/gtest.h"

namespace berth::controllers {
namespace {

using nlohmann::json;

const Taint kUnreachable{kTaintNodeUnreachable, "", kNoExecute, ""};
const Taint kNotReady{kTaintNodeNotReady, "", kNoExecute, ""};
const Taint kDedicated{"dedicated", "db", kNoSchedule, ""};

TEST(TaintsTest, ToleratesTaintAsKubernetes) {
  EXPECT_TRUE(ToleratesTaint({{"operator", "Exists"}}, kUnreachable));  // matches everything
  EXPECT_TRUE(ToleratesTaint({{"key", kTaintNodeUnreachable}, {"operator", "Exists"}}, kUnreachable));
  EXPECT_FALSE(
      ToleratesTaint({{"key", kTaintNodeUnreachable}, {"operator", "Exists"}, {"effect", kNoSchedule}}, kUnreachable));
  EXPECT_TRUE(ToleratesTaint({{"key", "dedicated"}, {"value", "db"}}, kDedicated));  // no operator: Equal
  EXPECT_TRUE(ToleratesTaint({{"key", "dedicated"}, {"operator", "Equal"}, {"value", "db"}}, kDedicated));
  EXPECT_FALSE(ToleratesTaint({{"key", "dedicated"}, {"operator", "Equal"}, {"value", "web"}}, kDedicated));
  EXPECT_FALSE(ToleratesTaint({{"key", "dedicated"}, {"operator", "Gt"}, {"value", "db"}}, kDedicated));
  EXPECT_FALSE(ToleratesTaint(json("junk"), kDedicated));
  EXPECT_FALSE(Tolerates(json(), kDedicated));
}

TEST(TaintsTest, MatchTolerationsGivesTheShortestTolerationOrForever) {
  const json defaults = {
      {{"key", kTaintNodeNotReady}, {"operator", "Exists"}, {"effect", kNoExecute}, {"tolerationSeconds", 300}},
      {{"key", kTaintNodeUnreachable}, {"operator", "Exists"}, {"effect", kNoExecute}, {"tolerationSeconds", 120}}};
  TolerationVerdict v = MatchTolerations(defaults, {kUnreachable});
  EXPECT_TRUE(v.tolerated);
  EXPECT_EQ(v.for_how_long, absl::Seconds(120));
  v = MatchTolerations(defaults, {kUnreachable, kNotReady});
  EXPECT_EQ(v.for_how_long, absl::Seconds(120));
  // A taint nobody tolerates: evict now.
  EXPECT_FALSE(MatchTolerations(defaults, {kUnreachable, {"other", "", kNoExecute, ""}}).tolerated);
  EXPECT_FALSE(MatchTolerations(json(), {kUnreachable}).tolerated);
  // No tolerationSeconds: forever; zero or negative: at once.
  v = MatchTolerations(json::array({{{"operator", "Exists"}}}), {kUnreachable});
  EXPECT_TRUE(v.tolerated);
  EXPECT_FALSE(v.for_how_long.has_value());
  v = MatchTolerations(json::array({{{"operator", "Exists"}, {"effect", kNoExecute}, {"tolerationSeconds", -5}}}),
                       {kUnreachable});
  EXPECT_EQ(v.for_how_long, absl::ZeroDuration());
  // The first matching toleration of each taint counts (upstream's
  // GetMatchingTolerations), even if a later one would tolerate longer.
  v = MatchTolerations(
      json::array(
          {{{"key", kTaintNodeUnreachable}, {"operator", "Exists"}, {"effect", kNoExecute}, {"tolerationSeconds", 10}},
           {{"operator", "Exists"}}}),
      {kUnreachable});
  EXPECT_EQ(v.for_how_long, absl::Seconds(10));
  // No taints: nothing to evict for.
  EXPECT_TRUE(MatchTolerations(json(), {}).tolerated);
}

TEST(TaintsTest, NodeTaintsAndReadiness) {
  const json node = {
      {"spec",
       {{"taints",
         {{{"key", kTaintNodeUnreachable}, {"effect", kNoSchedule}, {"timeAdded", "2026-01-01T00:00:00Z"}},
          {{"key", kTaintNodeUnreachable}, {"effect", kNoExecute}},
          "junk"}}}},
      {"status",
       {{"conditions",
         {{{"type", "MemoryPressure"}, {"status", "False"}}, {{"type", "Ready"}, {"status", "Unknown"}}}}}}};
  ASSERT_EQ(NodeTaints(node).size(), 2u);
  EXPECT_EQ(NodeTaints(node)[0].time_added, "2026-01-01T00:00:00Z");
  EXPECT_EQ(NodeTaints(node, kNoExecute).size(), 1u);
  EXPECT_TRUE(HasTaint(node, kTaintNodeUnreachable, kNoExecute));
  EXPECT_FALSE(HasTaint(node, kTaintNodeNotReady, kNoExecute));
  EXPECT_TRUE(HasTaintKey(node, kTaintNodeUnreachable));
  EXPECT_EQ(NodeReadyStatus(node), "Unknown");
  EXPECT_EQ(NodeReadyStatus(json::object()), "");
  EXPECT_EQ(NodeTaints(node)[0].ToJson(),
            json({{"key", kTaintNodeUnreachable}, {"effect", kNoSchedule}, {"timeAdded", "2026-01-01T00:00:00Z"}}));
}

}  // namespace
}  // namespace berth::controllers
