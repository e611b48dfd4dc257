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

}  // namespace berth
