#include "api/quantity.h"

#include "gtest/gtest.h"

namespace berth::api {
namespace {

std::string Canon(const char* s) {
  auto q = Quantity::Parse(s);
  EXPECT_TRUE(q.ok()) << s << ": " << q.status();
  return q.ok() ? q->ToString() : "";
}

TEST(QuantityTest, ParsesAndPrintsCanonically) {
  EXPECT_EQ(Canon("512Mi"), "512Mi");
  EXPECT_EQ(Canon("5Gi"), "5Gi");
  EXPECT_EQ(Canon("1024Mi"), "1Gi");
  EXPECT_EQ(Canon("1.5Gi"), "1536Mi");
  EXPECT_EQ(Canon("0.5Gi"), "512Mi");
  EXPECT_EQ(Canon("1G"), "1G");
  EXPECT_EQ(Canon("1500M"), "1500M");
  EXPECT_EQ(Canon("2000M"), "2G");
  EXPECT_EQ(Canon("0.1"), "100m");
  EXPECT_EQ(Canon("100"), "100");
  EXPECT_EQ(Canon("1e3"), "1k");
  EXPECT_EQ(Canon("0"), "0");
  EXPECT_EQ(Canon("-1Ki"), "-1Ki");
}

TEST(QuantityTest, ValuesRoundUpAndCompare) {
  EXPECT_EQ(Quantity::Parse("5Gi")->Value(), 5LL << 30);
  EXPECT_EQ(Quantity::Parse("1500M")->Value(), 1500000000LL);
  EXPECT_EQ(Quantity::Parse("100m")->Value(), 1);
  EXPECT_LT(*Quantity::Parse("1G"), *Quantity::Parse("1Gi"));
  EXPECT_EQ(*Quantity::Parse("1024Mi"), *Quantity::Parse("1Gi"));
  EXPECT_EQ(Quantity::FromBytes(10LL << 30).ToString(), "10Gi");
}

TEST(QuantityTest, RejectsMalformed) {
  for (const char* bad :
       {"", "Gi", "1GB", "1gi", "1 Gi", "1.2.3", "--1", "1e", "1e99", "8Ei", "99999999999999999999"}) {
    EXPECT_EQ(Quantity::Parse(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace berth::api
