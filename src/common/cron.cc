#include "common/cron.h"

#include <algorithm>
#include <charconv>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/time/civil_time.h"
#include "common/strings.h"
#include "common/units.h"

namespace berth {
namespace {

struct Field {
  const char* name;
  int min;
  int max;
  // Names accepted for values min, min+1, ... ("jan" is 1, "sun" is 0).
  std::vector<std::string_view> names;
};

const Field kMinute{"minute", 0, 59, {}};
const Field kHour{"hour", 0, 23, {}};
const Field kDayOfMonth{"day of month", 1, 31, {}};
const Field kMonth{
    "month", 1, 12, {"jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"}};
// 7 is Sunday too; folded into 0 after parsing.
const Field kDayOfWeek{"day of week", 0, 7, {"sun", "mon", "tue", "wed", "thu", "fri", "sat"}};

absl::Status FieldError(const Field& f, std::string_view text, std::string_view why) {
  return absl::InvalidArgumentError(StrCat("cron ", f.name, " field \"", text, "\": ", why));
}

absl::StatusOr<int> Value(const Field& f, std::string_view field_text, std::string_view text) {
  const std::string lower = absl::AsciiStrToLower(std::string(text));
  for (size_t i = 0; i < f.names.size(); ++i) {
    if (lower == f.names[i]) return f.min + static_cast<int>(i);
  }
  int v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    return FieldError(f, field_text, StrCat("\"", text, "\" is not a number"));
  }
  if (v < f.min || v > f.max) {
    return FieldError(f, field_text, StrCat(v, " is out of range ", f.min, "-", f.max));
  }
  return v;
}

// The bits of one field: a comma list of *, ?, a, a-b, each optionally /n.
absl::StatusOr<uint64_t> ParseField(const Field& f, std::string_view text) {
  uint64_t bits = 0;
  for (std::string_view part : Split(text, ',')) {
    int step = 1;
    std::string_view range = part;
    bool has_step = false;
    if (size_t slash = part.find('/'); slash != std::string_view::npos) {
      range = part.substr(0, slash);
      std::string_view step_text = part.substr(slash + 1);
      auto [end, ec] = std::from_chars(step_text.data(), step_text.data() + step_text.size(), step);
      if (step_text.empty() || ec != std::errc() || end != step_text.data() + step_text.size() || step <= 0) {
        return FieldError(f, text, StrCat("step \"", step_text, "\" is not a positive number"));
      }
      has_step = true;
    }
    int lo, hi;
    if (range == "*" || range == "?") {
      lo = f.min;
      hi = f.max;
    } else if (size_t dash = range.find('-'); dash != std::string_view::npos) {
      absl::StatusOr<int> a = Value(f, text, range.substr(0, dash));
      if (!a.ok()) return a.status();
      absl::StatusOr<int> b = Value(f, text, range.substr(dash + 1));
      if (!b.ok()) return b.status();
      lo = *a;
      hi = *b;
      if (lo > hi) return FieldError(f, text, StrCat("range ", range, " runs backwards"));
    } else {
      absl::StatusOr<int> a = Value(f, text, range);
      if (!a.ok()) return a.status();
      lo = *a;
      hi = has_step ? f.max : *a;  // "a/n": from a to the end, as robfig/cron
    }
    for (int v = lo; v <= hi; v += step) bits |= uint64_t{1} << v;
  }
  return bits;
}

std::string_view Descriptor(std::string_view spec) {
  if (spec == "@yearly" || spec == "@annually") return "0 0 1 1 *";
  if (spec == "@monthly") return "0 0 1 * *";
  if (spec == "@weekly") return "0 0 * * 0";
  if (spec == "@daily" || spec == "@midnight") return "0 0 * * *";
  if (spec == "@hourly") return "0 * * * *";
  return "";
}

// The search horizon of Next (robfig/cron's): every valid day-of-month,
// month and weekday combination recurs within it.
constexpr int kHorizonYears = 5;

}  // namespace

absl::StatusOr<CronSchedule> CronSchedule::Parse(std::string_view spec) {
  CronSchedule out;
  out.spec_ = std::string(spec);
  std::string_view text = spec;
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
  if (text.starts_with("@every ")) {
    std::string_view d = text.substr(7);
    while (!d.empty() && d.front() == ' ') d.remove_prefix(1);
    absl::StatusOr<absl::Duration> every = ParseGoDuration(d);
    if (!every.ok()) return absl::InvalidArgumentError(StrCat("cron @every: ", every.status().message()));
    if (*every <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError(StrCat("cron @every: the interval \"", d, "\" must be positive"));
    }
    // robfig/cron's ConstantDelaySchedule: whole seconds, at least one.
    out.every_ = std::max(absl::Seconds(1), absl::Trunc(*every, absl::Seconds(1)));
    return out;
  }
  if (text.starts_with("@")) {
    text = Descriptor(text);
    if (text.empty()) {
      return absl::InvalidArgumentError(
          StrCat("cron: unknown descriptor \"", spec,
                 "\" (@yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly or @every <duration>)"));
    }
  }
  std::vector<std::string_view> fields;
  for (std::string_view f : Split(text, ' ')) {
    if (!f.empty()) fields.push_back(f);
  }
  if (fields.size() != 5) {
    return absl::InvalidArgumentError(StrCat("cron: \"", spec, "\" has ", fields.size(),
                                             " fields, want 5 (minute hour day-of-month month day-of-week)"));
  }
  const Field* kinds[] = {&kMinute, &kHour, &kDayOfMonth, &kMonth, &kDayOfWeek};
  uint64_t bits[5];
  for (int i = 0; i < 5; ++i) {
    absl::StatusOr<uint64_t> b = ParseField(*kinds[i], fields[i]);
    if (!b.ok()) return b.status();
    bits[i] = *b;
  }
  out.minutes_ = bits[0];
  out.hours_ = static_cast<uint32_t>(bits[1]);
  out.days_of_month_ = static_cast<uint32_t>(bits[2]);
  out.months_ = static_cast<uint32_t>(bits[3]);
  out.days_of_week_ = static_cast<uint32_t>((bits[4] | (bits[4] >> 7)) & 0x7f);  // 7 is Sunday
  out.day_of_month_star_ = fields[2].front() == '*' || fields[2].front() == '?';
  out.day_of_week_star_ = fields[4].front() == '*' || fields[4].front() == '?';
  // A leap day recurs within the horizon from any start; other days of a
  // month recur within a year. So a schedule that does not run within the
  // horizon from one instant never runs.
  if (out.Next(absl::FromCivil(absl::CivilSecond(2000, 1, 1), absl::UTCTimeZone())) == absl::InfiniteFuture()) {
    return absl::InvalidArgumentError(StrCat("cron: \"", spec, "\" never runs (no such day in those months)"));
  }
  return out;
}

bool CronSchedule::DayMatches(int day_of_month, int weekday) const {
  const bool dom = (days_of_month_ >> day_of_month) & 1;
  const bool dow = (days_of_week_ >> weekday) & 1;
  if (day_of_month_star_ || day_of_week_star_) return dom && dow;
  return dom || dow;
}

absl::Time CronSchedule::Next(absl::Time after) const {
  if (every_ > absl::ZeroDuration()) {
    // robfig/cron: the next whole second after `after` plus the interval
    // less a second, i.e. `after` truncated to seconds plus the interval.
    return absl::FromUnixSeconds(absl::ToUnixSeconds(after)) + every_;
  }
  const absl::TimeZone utc = absl::UTCTimeZone();
  // The first whole minute strictly after `after`.
  absl::CivilMinute t = absl::CivilMinute(absl::ToCivilSecond(after, utc)) + 1;
  const absl::CivilYear horizon = absl::CivilYear(t) + kHorizonYears;
  while (absl::CivilYear(t) <= horizon) {
    if (!((months_ >> t.month()) & 1)) {
      t = absl::CivilMinute(absl::CivilMonth(t) + 1);
      continue;
    }
    const int weekday = static_cast<int>(absl::GetWeekday(absl::CivilDay(t)));  // Monday is 0
    if (!DayMatches(t.day(), (weekday + 1) % 7)) {
      t = absl::CivilMinute(absl::CivilDay(t) + 1);
      continue;
    }
    if (!((hours_ >> t.hour()) & 1)) {
      t = absl::CivilMinute(absl::CivilHour(t) + 1);
      continue;
    }
    if (!((minutes_ >> t.minute()) & 1)) {
      t += 1;
      continue;
    }
    return absl::FromCivil(t, utc);
  }
  return absl::InfiniteFuture();
}

}  // namespace berth
