#include "common/units.h"

#include "gtest/gtest.h"

namespace berth {
namespace {

TEST(ParseByteSizeTest, BinaryDecimalAndPlain) {
  EXPECT_EQ(*ParseByteSize("1048576"), 1048576);
  EXPECT_EQ(*ParseByteSize("512Mi"), 512LL << 20);
  EXPECT_EQ(*ParseByteSize("10Gi"), 10LL << 30);
  EXPECT_EQ(*ParseByteSize("1G"), 1000000000LL);
  EXPECT_EQ(*ParseByteSize("1500M"), 1500000000LL);
  EXPECT_EQ(*ParseByteSize("2k"), 2000);
  EXPECT_EQ(*ParseByteSize("0"), 0);
  EXPECT_EQ(*ParseByteSize("7Ei"), 7LL << 60);
}

TEST(ParseByteSizeTest, RejectsGarbageNegativeAndOverflow) {
  for (const char* bad : {"", "Gi", "-1", "1.5Gi", " 1Gi", "1 Gi", "1gi", "1Gb", "8Ei", "99999999999999999999"}) {
    EXPECT_EQ(ParseByteSize(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(FormatByteSizeTest, ShortestExactBinaryForm) {
  EXPECT_EQ(FormatByteSize(10LL << 30), "10Gi");
  EXPECT_EQ(FormatByteSize(1536LL << 20), "1536Mi");
  EXPECT_EQ(FormatByteSize(1000), "1000");
  EXPECT_EQ(FormatByteSize(0), "0");
}

TEST(FormatByteSizeApproxTest, ExactWhenShortElseOneDecimal) {
  EXPECT_EQ(FormatByteSizeApprox(int64_t{2} << 30), "2Gi");
  EXPECT_EQ(FormatByteSizeApprox(int64_t{512} << 20), "512Mi");
  EXPECT_EQ(FormatByteSizeApprox(973078528 + 12345), "928.0Mi");
  EXPECT_EQ(FormatByteSizeApprox((int64_t{19} << 30) + (int64_t{512} << 20) + 12345), "19.5Gi");
  EXPECT_EQ(FormatByteSizeApprox(1000), "1000");
  EXPECT_EQ(FormatByteSizeApprox(-973078528 - 12345), "-928.0Mi");
}

}  // namespace
}  // namespace berth
