// Cron schedules as Velero's Schedule.spec.schedule takes them (Velero
// parses with robfig/cron, whose standard parser this follows):
//
//   "30 2 * * *"       02:30 every day
//   "*/15 8-18 * * 1-5" every quarter hour from 08:00 to 18:45 on weekdays
//   "0 0 1,15 * sun"   midnight on the 1st, the 15th and every Sunday
//   "@daily"           "0 0 * * *" (also @yearly/@annually, @monthly,
//                      @weekly, @midnight, @hourly)
//   "@every 6h30m"     every 6h30m (a Go duration, at least 1s) from the
//                      time it is asked about
//
// Five fields: minute (0-59), hour (0-23), day of month (1-31), month
// (1-12 or jan-dec), day of week (0-7 or sun-sat; 0 and 7 are Sunday).
// A field is `*` (or `?`), or a comma list of values, ranges `a-b` and
// steps `*/n`, `a-b/n`, `a/n` (a to the field's end). As in cron, when both
// day of month and day of week are restricted (neither starts with `*` or
// `?`) a day matching either runs; otherwise a day must match both. Times
// are UTC; seconds are always zero.
//
//   BERTH_ASSIGN_OR_RETURN(CronSchedule cron, CronSchedule::Parse(spec));
//   absl::Time due = cron.Next(last_run);
//
// Thread-safety: an immutable value type.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace berth {

class CronSchedule {
 public:
  // INVALID_ARGUMENT naming the offending field, for a malformed spec, a
  // value out of its field's range, a step of 0, or a schedule that never
  // runs ("0 0 30 2 *").
  static absl::StatusOr<CronSchedule> Parse(std::string_view spec);

  // The first time strictly after `after` the schedule runs: a whole UTC
  // minute for a cron spec, `after` + the interval (whole seconds) for
  // @every. absl::InfiniteFuture() if none within five years (impossible
  // for a schedule Parse accepted).
  absl::Time Next(absl::Time after) const;

  // The text parsed.
  const std::string& spec() const { return spec_; }

 private:
  CronSchedule() = default;
  bool DayMatches(int day_of_month, int weekday) const;

  std::string spec_;
  absl::Duration every_ = absl::ZeroDuration();  // > 0: "@every"
  uint64_t minutes_ = 0;                         // bit m: minute m
  uint32_t hours_ = 0;                           // bit h
  uint32_t days_of_month_ = 0;                   // bit d, 1-31
  uint32_t months_ = 0;                          // bit m, 1-12
  uint32_t days_of_week_ = 0;                    // bit d, 0 (Sunday)-6
  bool day_of_month_star_ = false;               // the field starts with * or ?
  bool day_of_week_star_ = false;
};

}  // namespace berth
