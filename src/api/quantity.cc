#include "api/quantity.h"

#include <array>
#include <cctype>

#include "common/strings.h"

namespace berth::api {
namespace {

using i128 = QuantityInt;
constexpr i128 kNano = 1000000000;

i128 Pow(i128 base, int exp) {
  i128 r = 1;
  while (exp-- > 0) r *= base;
  return r;
}

std::string ToDecimal(i128 v) {
  if (v == 0) return "0";
  const bool neg = v < 0;
  if (neg) v = -v;
  std::string s;
  while (v > 0) {
    s.insert(s.begin(), static_cast<char>('0' + static_cast<int>(v % 10)));
    v /= 10;
  }
  return neg ? "-" + s : s;
}

struct Suffix {
  std::string_view text;
  bool binary;
  int power;  // of 1024 (binary) or of 10 (decimal)
};

constexpr std::array<Suffix, 16> kSuffixes = {{
    {"Ki", true, 1},
    {"Mi", true, 2},
    {"Gi", true, 3},
    {"Ti", true, 4},
    {"Pi", true, 5},
    {"Ei", true, 6},
    {"n", false, -9},
    {"u", false, -6},
    {"m", false, -3},
    {"k", false, 3},
    {"M", false, 6},
    {"G", false, 9},
    {"T", false, 12},
    {"P", false, 15},
    {"E", false, 18},
    {"", false, 0},
}};

// Limits of what a quantity may hold: |value| < 2^63 units.
constexpr i128 kMaxNano = static_cast<i128>(INT64_MAX) * kNano;

}  // namespace

absl::StatusOr<Quantity> Quantity::Parse(std::string_view text) {
  auto bad = [&](std::string_view why) { return absl::InvalidArgumentError(StrCat("quantity \"", text, "\": ", why)); };
  std::string_view s = text;
  bool neg = false;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    neg = s[0] == '-';
    s.remove_prefix(1);
  }
  size_t i = 0;
  std::string whole, frac;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) whole += s[i++];
  if (i < s.size() && s[i] == '.') {
    ++i;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) frac += s[i++];
  }
  if (whole.empty() && frac.empty()) return bad("must start with a number");
  std::string_view suffix = s.substr(i);
  Quantity q;
  int dec_power = 0;
  int bin_power = 0;
  if (!suffix.empty() && (suffix[0] == 'e' || suffix[0] == 'E') && suffix.size() > 1 &&
      (std::isdigit(static_cast<unsigned char>(suffix[1])) || suffix[1] == '-' || suffix[1] == '+')) {
    std::string_view e = suffix.substr(1);
    bool eneg = false;
    if (e[0] == '+' || e[0] == '-') {
      eneg = e[0] == '-';
      e.remove_prefix(1);
    }
    if (e.empty() || e.size() > 3) return bad("bad exponent");
    for (char c : e) {
      if (!std::isdigit(static_cast<unsigned char>(c))) return bad("bad exponent");
    }
    dec_power = std::stoi(std::string(e)) * (eneg ? -1 : 1);
    if (dec_power > 18 || dec_power < -9) return bad("exponent out of range");
  } else {
    bool found = false;
    for (const auto& sx : kSuffixes) {
      if (suffix == sx.text) {
        found = true;
        q.binary_ = sx.binary;
        (sx.binary ? bin_power : dec_power) = sx.power;
        break;
      }
    }
    if (!found) return bad("unknown suffix (want Ki, Mi, Gi, Ti, Pi, Ei, n, u, m, k, M, G, T, P, E)");
  }
  if (whole.size() > 19 || frac.size() > 30) return bad("too many digits");
  // value = (whole.frac) × 10^dec_power × 1024^bin_power, exact in nano-units.
  i128 mantissa = 0;
  for (char c : whole + frac) mantissa = mantissa * 10 + (c - '0');
  int scale = 9 + dec_power - static_cast<int>(frac.size());  // power of ten to apply
  i128 v = mantissa * Pow(1024, bin_power);
  if (v > kMaxNano) return bad("out of range");
  if (scale >= 0) {
    if (scale > 27) return bad("out of range");
    const i128 f = Pow(10, scale);
    if (v != 0 && v > kMaxNano / f) return bad("out of range");
    v *= f;
  } else {
    const i128 d = Pow(10, -scale);
    v = (v + d - 1) / d;  // finer than 10^-9: round up, as Kubernetes does
  }
  if (v > kMaxNano) return bad("out of range");
  q.nano_ = neg ? -v : v;
  return q;
}

Quantity Quantity::FromBytes(int64_t bytes, bool binary) {
  Quantity q;
  q.nano_ = static_cast<i128>(bytes) * kNano;
  q.binary_ = binary;
  return q;
}

int64_t Quantity::Value() const {
  i128 v = nano_ / kNano;
  if (nano_ % kNano > 0) ++v;
  return static_cast<int64_t>(v);
}

int64_t Quantity::MilliValue() const {
  constexpr i128 kPerMilli = kNano / 1000;
  i128 v = nano_ / kPerMilli;
  if (nano_ % kPerMilli > 0) ++v;
  return static_cast<int64_t>(v);
}

std::string Quantity::ToString() const {
  if (nano_ == 0) return "0";
  const bool neg = nano_ < 0;
  const i128 a = neg ? -nano_ : nano_;
  const std::string sign = neg ? "-" : "";
  if (binary_ && a % kNano == 0) {
    const i128 units = a / kNano;
    static constexpr std::string_view kBin[] = {"", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"};
    for (int p = 6; p >= 0; --p) {
      const i128 f = Pow(1024, p);
      if (units % f == 0 && (units / f) > 0) {
        // Kubernetes prints values below 1024 units in decimal form.
        if (p == 0 && units >= 1) return sign + ToDecimal(units);
        return sign + ToDecimal(units / f) + std::string(kBin[p]);
      }
    }
  }
  // Decimal: the largest power of 1000 that keeps the number whole.
  static constexpr std::pair<int, std::string_view> kDec[] = {{18, "E"}, {15, "P"}, {12, "T"}, {9, "G"},  {6, "M"},
                                                              {3, "k"},  {0, ""},   {-3, "m"}, {-6, "u"}, {-9, "n"}};
  for (const auto& [p, text] : kDec) {
    const i128 f = Pow(10, p + 9);
    if (a % f == 0) return sign + ToDecimal(a / f) + std::string(text);
  }
  return sign + ToDecimal(a) + "n";
}

}  // namespace berth::api
