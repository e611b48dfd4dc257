#include "common/cron.h"

#include <string>

#include "absl/time/civil_time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace berth {
namespace {

using ::testing::HasSubstr;

absl::Time At(const char* rfc3339) {
  absl::Time t;
  std::string err;
  EXPECT_TRUE(absl::ParseTime(absl::RFC3339_full, rfc3339, &t, &err)) << err;
  return t;
}

std::string Format(absl::Time t) { return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", t, absl::UTCTimeZone()); }

// The next run of `spec` after `after`, as RFC 3339.
std::string Next(const char* spec, const char* after) {
  absl::StatusOr<CronSchedule> cron = CronSchedule::Parse(spec);
  EXPECT_TRUE(cron.ok()) << spec << ": " << cron.status();
  if (!cron.ok()) return "";
  return Format(cron->Next(At(after)));
}

TEST(CronScheduleTest, FieldsListsRangesAndSteps) {
  EXPECT_EQ(Next("30 2 * * *", "2026-11-27T08:00:00Z"), "2026-11-28T02:30:00Z");
  EXPECT_EQ(Next("30 2 * * *", "2026-11-27T02:29:59Z"), "2026-11-27T02:30:00Z");
  // Strictly after: a run due at the instant asked about is the next one.
  EXPECT_EQ(Next("30 2 * * *", "2026-11-27T02:30:00Z"), "2026-11-28T02:30:00Z");
  EXPECT_EQ(Next("* * * * *", "2026-11-27T08:00:30Z"), "2026-11-27T08:01:00Z");
  EXPECT_EQ(Next("*/15 * * * *", "2026-11-27T08:16:00Z"), "2026-11-27T08:30:00Z");
  EXPECT_EQ(Next("5,35 * * * *", "2026-11-27T08:06:00Z"), "2026-11-27T08:35:00Z");
  EXPECT_EQ(Next("0 8-18/4 * * *", "2026-11-27T12:00:00Z"), "2026-11-27T16:00:00Z");
  EXPECT_EQ(Next("0 8-18/4 * * *", "2026-11-27T16:00:00Z"), "2026-11-28T08:00:00Z");
  EXPECT_EQ(Next("10/20 * * * *", "2026-11-27T08:31:00Z"), "2026-11-27T08:50:00Z");  // a/n: a to the end
  EXPECT_EQ(Next("0 0 1 */3 *", "2026-11-27T00:00:00Z"), "2027-01-01T00:00:00Z");    // Jan, Apr, Jul, Oct
  EXPECT_EQ(Next("0 12 * jun-aug *", "2026-11-27T00:00:00Z"), "2027-06-01T12:00:00Z");
  // Year and month ends, leap days.
  EXPECT_EQ(Next("59 23 31 12 *", "2026-12-31T23:59:00Z"), "2027-12-31T23:59:00Z");
  EXPECT_EQ(Next("0 0 31 * *", "2026-11-27T00:00:00Z"), "2026-12-31T00:00:00Z");
  EXPECT_EQ(Next("0 0 29 2 *", "2026-03-01T00:00:00Z"), "2028-02-29T00:00:00Z");
}

TEST(CronScheduleTest, DaysOfWeekWithSundayAsZeroOrSeven) {
  // 2026-11-27 is a Friday.
  EXPECT_EQ(Next("0 3 * * 0", "2026-11-27T08:00:00Z"), "2026-11-29T03:00:00Z");
  EXPECT_EQ(Next("0 3 * * 7", "2026-11-27T08:00:00Z"), "2026-11-29T03:00:00Z");
  EXPECT_EQ(Next("0 3 * * SUN", "2026-11-27T08:00:00Z"), "2026-11-29T03:00:00Z");
  EXPECT_EQ(Next("0 9 * * 1-5", "2026-11-27T09:00:00Z"), "2026-11-30T09:00:00Z");  // Friday's is past: Monday
  EXPECT_EQ(Next("0 9 * * mon-fri", "2026-11-27T08:00:00Z"), "2026-11-27T09:00:00Z");
  EXPECT_EQ(Next("0 9 * * 5-7", "2026-11-28T10:00:00Z"), "2026-11-29T09:00:00Z");  // Fri, Sat, Sun
}

TEST(CronScheduleTest, DayOfMonthOrDayOfWeekWhenBothAreRestricted) {
  // Both restricted: the 1st or the 15th or any Monday (cron's OR).
  EXPECT_EQ(Next("0 0 1,15 * 1", "2026-11-27T08:00:00Z"), "2026-11-30T00:00:00Z");  // Monday the 30th
  EXPECT_EQ(Next("0 0 1,15 * 1", "2026-11-30T08:00:00Z"), "2026-12-01T00:00:00Z");  // the 1st, a Tuesday
  // One of them a star (even a stepped one): both must match.
  EXPECT_EQ(Next("0 0 13 * *", "2026-11-27T08:00:00Z"), "2026-12-13T00:00:00Z");
  EXPECT_EQ(Next("0 0 * * 5", "2026-11-27T08:00:00Z"), "2026-12-04T00:00:00Z");
  EXPECT_EQ(Next("0 0 */2 * 1", "2026-11-27T08:00:00Z"), "2026-12-07T00:00:00Z");  // an odd day and a Monday
  EXPECT_EQ(Next("0 0 13 * ?", "2026-11-27T08:00:00Z"), "2026-12-13T00:00:00Z");
}

TEST(CronScheduleTest, DescriptorsAndEvery) {
  EXPECT_EQ(Next("@hourly", "2026-11-27T08:00:00Z"), "2026-11-27T09:00:00Z");
  EXPECT_EQ(Next("@daily", "2026-11-27T08:00:00Z"), "2026-11-28T00:00:00Z");
  EXPECT_EQ(Next("@midnight", "2026-11-27T08:00:00Z"), "2026-11-28T00:00:00Z");
  EXPECT_EQ(Next("@weekly", "2026-11-27T08:00:00Z"), "2026-11-29T00:00:00Z");
  EXPECT_EQ(Next("@monthly", "2026-11-27T08:00:00Z"), "2026-12-01T00:00:00Z");
  EXPECT_EQ(Next("@yearly", "2026-11-27T08:00:00Z"), "2027-01-01T00:00:00Z");
  EXPECT_EQ(Next("@annually", "2026-11-27T08:00:00Z"), "2027-01-01T00:00:00Z");
  EXPECT_EQ(Next("@every 6h30m", "2026-11-27T08:00:00Z"), "2026-11-27T14:30:00Z");
  EXPECT_EQ(Next("@every 90s", "2026-11-27T08:00:10Z"), "2026-11-27T08:01:40Z");
  absl::StatusOr<CronSchedule> sub_second = CronSchedule::Parse("@every 1ms");
  ASSERT_TRUE(sub_second.ok());
  EXPECT_EQ(sub_second->Next(At("2026-11-27T08:00:00Z")), At("2026-11-27T08:00:01Z"));  // at least a second
  EXPECT_EQ(Next("  0 2 * * *  ", "2026-11-27T08:00:00Z"), "2026-11-28T02:00:00Z");
}

TEST(CronScheduleTest, RefusesMalformedSpecsNamingTheField) {
  struct Case {
    const char* spec;
    const char* message;
  };
  const Case cases[] = {
      {"", "has 0 fields, want 5"},
      {"0 2 * *", "has 4 fields, want 5"},
      {"0 2 * * * *", "has 6 fields, want 5"},
      {"60 * * * *", "cron minute field \"60\": 60 is out of range 0-59"},
      {"* 24 * * *", "cron hour field \"24\": 24 is out of range 0-23"},
      {"* * 0 * *", "cron day of month field \"0\": 0 is out of range 1-31"},
      {"* * * 13 *", "cron month field \"13\": 13 is out of range 1-12"},
      {"* * * * 8", "cron day of week field \"8\": 8 is out of range 0-7"},
      {"*/0 * * * *", "cron minute field \"*/0\": step \"0\" is not a positive number"},
      {"5-1 * * * *", "cron minute field \"5-1\": range 5-1 runs backwards"},
      {"a * * * *", "cron minute field \"a\": \"a\" is not a number"},
      {"1,,2 * * * *", "cron minute field \"1,,2\": \"\" is not a number"},
      {"* * * * fun", "cron day of week field \"fun\": \"fun\" is not a number"},
      {"0 0 30 2 *", "never runs"},
      {"0 0 31 4,6 *", "never runs"},
      {"@fortnightly", "unknown descriptor \"@fortnightly\""},
      {"@every", "unknown descriptor"},
      {"@every 1d", "cron @every: time: unknown unit \"d\" in duration \"1d\""},
      {"@every -5m", "must be positive"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<CronSchedule> got = CronSchedule::Parse(c.spec);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << c.spec;
    EXPECT_THAT(got.status().message(), HasSubstr(c.message)) << c.spec;
  }
  // Feb 30 is never, but Feb 30 or any Monday of February is every Monday
  // of February.
  EXPECT_EQ(Next("0 0 30 2 1", "2026-11-27T08:00:00Z"), "2027-02-01T00:00:00Z");
}

}  // namespace
}  // namespace berth
