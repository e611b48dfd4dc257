#include "common/units.h"

#include <cstdio>

#include <limits>

#include <charconv>
#include "common/strings.h"

namespace berth {
namespace {

struct Suffix {
  std::string_view text;
  int64_t factor;
};

constexpr int64_t kKi = 1024;
constexpr Suffix kSuffixes[] = {
    {"Ki", kKi},
    {"Mi", kKi* kKi},
    {"Gi", kKi* kKi* kKi},
    {"Ti", kKi* kKi* kKi* kKi},
    {"Pi", kKi* kKi* kKi* kKi* kKi},
    {"Ei", kKi* kKi* kKi* kKi* kKi* kKi},
    {"k", 1000},
    {"K", 1000},
    {"M", 1000'000},
    {"G", 1000'000'000},
    {"T", 1000'000'000'000},
    {"P", 1000'000'000'000'000},
    {"E", 1000'000'000'000'000'000},
};

}  // namespace

absl::StatusOr<int64_t> ParseByteSize(std::string_view text) {
  std::string_view digits = text;
  int64_t factor = 1;
  for (const Suffix& s : kSuffixes) {
    if (text.size() > s.text.size() && text.substr(text.size() - s.text.size()) == s.text) {
      digits = text.substr(0, text.size() - s.text.size());
      factor = s.factor;
      break;
    }
  }
  const bool all_digits = !digits.empty() && digits.find_first_not_of("0123456789") == std::string_view::npos;
  uint64_t n = 0;
  if (!all_digits || std::from_chars(digits.data(), digits.data() + digits.size(), n).ec != std::errc()) {
    return absl::InvalidArgumentError(StrCat("invalid size \"", text,
                                             "\": want a whole number with an optional unit such as 512Mi, "
                                             "10Gi or 1G"));
  }
  if (n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max() / factor)) {
    return absl::InvalidArgumentError(StrCat("size \"", text, "\" is too large"));
  }
  return static_cast<int64_t>(n) * factor;
}

std::string FormatByteSize(int64_t bytes) {
  static constexpr std::string_view kBinary[] = {"Ei", "Pi", "Ti", "Gi", "Mi", "Ki"};
  int64_t factor = kKi * kKi * kKi * kKi * kKi * kKi;
  for (std::string_view suffix : kBinary) {
    if (bytes != 0 && bytes % factor == 0) return StrCat(bytes / factor, suffix);
    factor /= kKi;
  }
  return StrCat(bytes);
}

std::string FormatByteSizeApprox(int64_t bytes) {
  std::string exact = FormatByteSize(bytes);
  if (exact.size() <= 6) return exact;
  static constexpr const char* kUnits[] = {"Ki", "Mi", "Gi", "Ti", "Pi", "Ei"};
  double value = static_cast<double>(bytes < 0 ? -bytes : bytes);
  int unit = -1;
  while (value >= 1024 && unit < 5) {
    value /= 1024;
    ++unit;
  }
  if (unit < 0) return exact;
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%s%.1f%s", bytes < 0 ? "-" : "", value, kUnits[unit]);
  return buf;
}

// Go's time.ParseDuration, step for step: the value is accumulated in
// unsigned nanoseconds so that the overflow checks are Go's too.
absl::StatusOr<absl::Duration> ParseGoDuration(std::string_view text) {
  auto invalid = [&](std::string_view why) {
    return absl::InvalidArgumentError(StrCat("time: ", why, " \"", text, "\""));
  };
  constexpr uint64_t kLimit = uint64_t{1} << 63;
  std::string_view s = text;
  bool neg = false;
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) {
    neg = s[0] == '-';
    s.remove_prefix(1);
  }
  if (s == "0") return absl::ZeroDuration();
  if (s.empty()) return invalid("invalid duration");
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  uint64_t total = 0;
  while (!s.empty()) {
    if (s[0] != '.' && !digit(s[0])) return invalid("invalid duration");
    uint64_t v = 0;
    size_t i = 0;
    for (; i < s.size() && digit(s[i]); ++i) {
      if (v > (kLimit - 1) / 10) return invalid("invalid duration");
      v = v * 10 + static_cast<uint64_t>(s[i] - '0');
      if (v > kLimit) return invalid("invalid duration");
    }
    const bool pre = i > 0;
    s.remove_prefix(i);
    uint64_t frac = 0;
    double scale = 1;
    bool post = false;
    if (!s.empty() && s[0] == '.') {
      s.remove_prefix(1);
      bool overflow = false;
      size_t j = 0;
      for (; j < s.size() && digit(s[j]); ++j) {
        if (overflow) continue;
        if (frac > (kLimit - 1) / 10) {
          overflow = true;  // further digits are below a nanosecond anyway
          continue;
        }
        uint64_t next = frac * 10 + static_cast<uint64_t>(s[j] - '0');
        if (next > kLimit) {
          overflow = true;
          continue;
        }
        frac = next;
        scale *= 10;
      }
      post = j > 0;
      s.remove_prefix(j);
    }
    if (!pre && !post) return invalid("invalid duration");
    size_t u = 0;
    while (u < s.size() && s[u] != '.' && !digit(s[u])) ++u;
    if (u == 0) return invalid("missing unit in duration");
    const std::string_view unit_text = s.substr(0, u);
    s.remove_prefix(u);
    uint64_t unit = 0;
    if (unit_text == "ns") {
      unit = 1;
    } else if (unit_text == "us" || unit_text == "\u00b5s" || unit_text == "\u03bcs") {
      unit = 1000;
    } else if (unit_text == "ms") {
      unit = 1000'000;
    } else if (unit_text == "s") {
      unit = 1000'000'000;
    } else if (unit_text == "m") {
      unit = 60 * uint64_t{1000'000'000};
    } else if (unit_text == "h") {
      unit = 3600 * uint64_t{1000'000'000};
    } else {
      return absl::InvalidArgumentError(StrCat("time: unknown unit \"", unit_text, "\" in duration \"", text, "\""));
    }
    if (v > kLimit / unit) return invalid("invalid duration");
    v *= unit;
    if (frac > 0) {
      v += static_cast<uint64_t>(static_cast<double>(frac) * (static_cast<double>(unit) / scale));
      if (v > kLimit) return invalid("invalid duration");
    }
    total += v;
    if (total > kLimit) return invalid("invalid duration");
  }
  if (neg && total > 0) return absl::Nanoseconds(-static_cast<int64_t>(total - 1) - 1);
  if (total > kLimit - 1) return invalid("invalid duration");
  return absl::Nanoseconds(static_cast<int64_t>(total));
}

namespace {

// Go's fmtFrac: the low `prec` digits of `v` as a fraction without trailing
// zeros (nothing when they are all zero), prepended to `out`; returns v
// without them.
uint64_t PrependFraction(std::string& out, uint64_t v, int prec) {
  std::string digits;
  bool print = false;
  for (int i = 0; i < prec; ++i) {
    const uint64_t digit = v % 10;
    print = print || digit != 0;
    if (print) digits.insert(digits.begin(), static_cast<char>('0' + digit));
    v /= 10;
  }
  if (print) out.insert(0, "." + digits);
  return v;
}

}  // namespace

std::string FormatGoDuration(absl::Duration d) {
  const int64_t ns = absl::ToInt64Nanoseconds(d);
  const bool neg = ns < 0;
  uint64_t u = neg ? -static_cast<uint64_t>(ns) : static_cast<uint64_t>(ns);
  std::string out;
  if (u < 1000'000'000) {
    if (u == 0) return "0s";
    int prec;
    if (u < 1000) {
      prec = 0;
      out = "ns";
    } else if (u < 1000'000) {
      prec = 3;
      out = "\u00b5s";
    } else {
      prec = 6;
      out = "ms";
    }
    u = PrependFraction(out, u, prec);
    out.insert(0, std::to_string(u));
  } else {
    out = "s";
    u = PrependFraction(out, u, 9);
    out.insert(0, std::to_string(u % 60));
    u /= 60;
    if (u > 0) {
      out.insert(0, std::to_string(u % 60) + "m");
      u /= 60;
      if (u > 0) out.insert(0, std::to_string(u) + "h");
    }
  }
  if (neg) out.insert(0, "-");
  return out;
}

}  // namespace berth
