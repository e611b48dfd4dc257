// Kubernetes resource quantities ("512Mi", "5Gi", "1G", "1500M", "100m",
// "0.5Gi", "1e3"), parsed exactly and printed in Kubernetes' canonical form.
//
// A quantity keeps the family of its suffix: binary ("Ki".."Ei") prints with
// the largest binary suffix that keeps the number whole ("1.5Gi" ->
// "1536Mi"); decimal ("n".."E", or none) with the largest power-of-1000
// suffix that keeps it whole ("2000M" -> "2G", "0.1" -> "100m"). Exponent
// forms ("1e3") are read as decimal and print with SI suffixes ("1k").
// Values are exact to 10^-9 and bounded by ±9.2e18 units.
//
// Thread-safety: a value type.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace berth::api {

// Exact arithmetic wide enough for 2^63 units × 10^9 (a GCC/Clang builtin).
__extension__ typedef __int128 QuantityInt;

class Quantity {
 public:
  Quantity() = default;
  // INVALID_ARGUMENT for anything Kubernetes would not accept, or values out
  // of range.
  static absl::StatusOr<Quantity> Parse(std::string_view text);
  static Quantity FromBytes(int64_t bytes, bool binary = true);

  // The value in whole units, rounded up (Kubernetes' Value()).
  int64_t Value() const;
  // The value in thousandths, rounded up (Kubernetes' MilliValue(): CPU).
  int64_t MilliValue() const;
  bool binary() const { return binary_; }
  std::string ToString() const;

  friend bool operator==(const Quantity& a, const Quantity& b) { return a.nano_ == b.nano_; }
  friend auto operator<=>(const Quantity& a, const Quantity& b) { return a.nano_ <=> b.nano_; }

 private:
  QuantityInt nano_ = 0;  // value × 10^9
  bool binary_ = false;
};

}  // namespace berth::api
