#include "common/backoff.h"

#include <algorithm>
#include <utility>

namespace berth {

Backoff::Backoff(Options options, std::function<double()> uniform01)
    : options_(options), uniform01_(std::move(uniform01)), current_(options.initial) {
  if (!uniform01_) {
    uniform01_ = [this] { return absl::Uniform<double>(gen_, 0.0, 1.0); };
  }
}

absl::Duration Backoff::Next() {
  const absl::Duration nominal = current_;
  current_ = std::min(options_.max, current_ * options_.multiplier);
  // Spread uniformly over [1 - jitter, 1 + jitter] of the nominal delay.
  const double factor = 1.0 + options_.jitter * (2.0 * uniform01_() - 1.0);
  return std::min(options_.max, nominal * factor);
}

void Backoff::Reset() { current_ = options_.initial; }

}  // namespace berth
