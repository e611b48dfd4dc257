#include "common/units.h"

#include <limits>

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

// Cases from Go's time/time_test.go (parseDurationTests).
TEST(ParseGoDurationTest, AcceptsWhatGoAccepts) {
  struct Case {
    const char* text;
    absl::Duration want;
  };
  const Case cases[] = {
      {"0", absl::ZeroDuration()},
      {"5s", absl::Seconds(5)},
      {"30s", absl::Seconds(30)},
      {"1478s", absl::Seconds(1478)},
      {"-5s", absl::Seconds(-5)},
      {"+5s", absl::Seconds(5)},
      {"-0", absl::ZeroDuration()},
      {"5.0s", absl::Seconds(5)},
      {"5.6s", absl::Seconds(5) + absl::Milliseconds(600)},
      {"5.s", absl::Seconds(5)},
      {".5s", absl::Milliseconds(500)},
      {"1.004s", absl::Seconds(1) + absl::Milliseconds(4)},
      {"100.00100s", absl::Seconds(100) + absl::Milliseconds(1)},
      {"10ns", absl::Nanoseconds(10)},
      {"11us", absl::Microseconds(11)},
      {"12\u00b5s", absl::Microseconds(12)},
      {"12\u03bcs", absl::Microseconds(12)},
      {"13ms", absl::Milliseconds(13)},
      {"15m", absl::Minutes(15)},
      {"16h", absl::Hours(16)},
      {"3h30m", absl::Hours(3) + absl::Minutes(30)},
      {"720h0m0s", absl::Hours(720)},
      {"10.5s4m", absl::Minutes(4) + absl::Seconds(10) + absl::Milliseconds(500)},
      {"-2m3.4s", -(absl::Minutes(2) + absl::Seconds(3) + absl::Milliseconds(400))},
      {"1h2m3s4ms5us6ns", absl::Hours(1) + absl::Minutes(2) + absl::Seconds(3) + absl::Milliseconds(4) +
                              absl::Microseconds(5) + absl::Nanoseconds(6)},
      {"9223372036854775807ns", absl::Nanoseconds(std::numeric_limits<int64_t>::max())},
      {"-9223372036854775808ns", absl::Nanoseconds(std::numeric_limits<int64_t>::min())},
      {"0.100000000000000000000h", absl::Minutes(6)},
  };
  for (const Case& c : cases) {
    absl::StatusOr<absl::Duration> got = ParseGoDuration(c.text);
    ASSERT_TRUE(got.ok()) << c.text << ": " << got.status();
    EXPECT_EQ(*got, c.want) << c.text;
  }
}

TEST(ParseGoDurationTest, RefusesWhatGoRefuses) {
  for (const char* text : {"", "3", "-", "s", ".", "-.", ".s", "+.s", "1d", "inf", "1h 2m", "9223372036854775808ns",
                           "9223372036854775807ns1ns", "3000000h"}) {
    absl::StatusOr<absl::Duration> got = ParseGoDuration(text);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << text;
  }
  EXPECT_EQ(ParseGoDuration("10").status().message(), "time: missing unit in duration \"10\"");
  EXPECT_EQ(ParseGoDuration("3d").status().message(), "time: unknown unit \"d\" in duration \"3d\"");
}

// Cases from Go's durationTests.
TEST(FormatGoDurationTest, WritesWhatGoWrites) {
  EXPECT_EQ(FormatGoDuration(absl::ZeroDuration()), "0s");
  EXPECT_EQ(FormatGoDuration(absl::Nanoseconds(1)), "1ns");
  EXPECT_EQ(FormatGoDuration(absl::Nanoseconds(1100)), "1.1\u00b5s");
  EXPECT_EQ(FormatGoDuration(absl::Microseconds(2200)), "2.2ms");
  EXPECT_EQ(FormatGoDuration(absl::Milliseconds(3300)), "3.3s");
  EXPECT_EQ(FormatGoDuration(absl::Minutes(4) + absl::Seconds(5)), "4m5s");
  EXPECT_EQ(FormatGoDuration(absl::Minutes(4) + absl::Milliseconds(5001)), "4m5.001s");
  EXPECT_EQ(FormatGoDuration(absl::Hours(5) + absl::Minutes(6) + absl::Milliseconds(7001)), "5h6m7.001s");
  EXPECT_EQ(FormatGoDuration(absl::Minutes(8) + absl::Nanoseconds(1)), "8m0.000000001s");
  EXPECT_EQ(FormatGoDuration(absl::Hours(720)), "720h0m0s");
  EXPECT_EQ(FormatGoDuration(absl::Hours(24)), "24h0m0s");
  EXPECT_EQ(FormatGoDuration(-absl::Seconds(90)), "-1m30s");
  EXPECT_EQ(FormatGoDuration(absl::Nanoseconds(std::numeric_limits<int64_t>::max())), "2562047h47m16.854775807s");
  EXPECT_EQ(FormatGoDuration(absl::Nanoseconds(std::numeric_limits<int64_t>::min())), "-2562047h47m16.854775808s");
  for (const char* text : {"720h0m0s", "1m30s", "1.5s", "250ms"}) {
    EXPECT_EQ(FormatGoDuration(*ParseGoDuration(text)), text);
  }
}

}  // namespace
}  // namespace berth
