// Byte sizes and durations written the way people and Kubernetes write them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace berth {

// Parses "1048576", "512Mi", "10Gi", "1G", "1500M", "2T", "1Ki", "1k"
// (binary suffixes Ki Mi Gi Ti Pi Ei; decimal k/K M G T P E). Whitespace is
// not allowed. INVALID_ARGUMENT for anything else, a negative number or an
// overflow of int64.
absl::StatusOr<int64_t> ParseByteSize(std::string_view text);

// The shortest exact binary form: 10737418240 -> "10Gi", 1000 -> "1000".
std::string FormatByteSize(int64_t bytes);

// For messages about space: exact when FormatByteSize is short, else one
// decimal of the largest binary unit: 973078528 -> "928.0Mi", 2Gi -> "2Gi".
std::string FormatByteSizeApprox(int64_t bytes);

// Parses a Go duration (time.ParseDuration), the form Kubernetes and Velero
// write durations in: a sign, then one or more decimal numbers with an
// optional fraction, each followed by its unit (ns, us, µs, ms, s, m, h):
// "720h0m0s", "1.5h", "30s", "-2m"; a bare "0" too. INVALID_ARGUMENT
// naming the text for anything else, including a missing unit ("10") and
// an overflow of ±292 years; never "inf".
absl::StatusOr<absl::Duration> ParseGoDuration(std::string_view text);

// The duration as Go's Duration.String() writes it: "720h0m0s", "1m30s",
// "1.5s", "250ms", "0s". Whole nanoseconds (sub-nanosecond parts dropped).
std::string FormatGoDuration(absl::Duration d);

}  // namespace berth
