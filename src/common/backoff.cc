#include "common/backoff.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace berth {

Backoff::Backoff(Options options, std::function<double()> uniform01)
    : options_(options), uniform01_(std::move(uniform01)), current_(options.initial) {}

absl::Duration Backoff::Next() {
  const absl::Duration nominal = current_;
  current_ = std::min(options_.max, current_ * options_.multiplier);
  // Spread uniformly over [1 - jitter, 1 + jitter] of the nominal delay.
  // The generator is read here, not captured in a default `uniform01_`, so
  // a moved Backoff does not read its old self's.
  const double u = uniform01_ ? uniform01_() : absl::Uniform<double>(gen_, 0.0, 1.0);
  const double factor = 1.0 + options_.jitter * (2.0 * u - 1.0);
  return std::min(options_.max, nominal * factor);
}

void Backoff::Reset() { current_ = options_.initial; }

ItemBackoff::ItemBackoff(Options options, std::function<double()> uniform01)
    : options_(options), uniform01_(std::move(uniform01)) {}

absl::Duration ItemBackoff::When(const std::string& key) {
  absl::MutexLock l(&mu_);
  const int n = failures_[key]++;
  const absl::Duration nominal = std::min(options_.max, options_.base * std::ldexp(1.0, std::min(n, 40)));
  const double u = uniform01_ ? uniform01_() : absl::Uniform<double>(gen_, 0.0, 1.0);
  const double factor = 1.0 + options_.jitter * (2.0 * u - 1.0);
  return std::min(options_.max, nominal * factor);
}

void ItemBackoff::Forget(const std::string& key) {
  absl::MutexLock l(&mu_);
  failures_.erase(key);
}

int ItemBackoff::Failures(const std::string& key) const {
  absl::MutexLock l(&mu_);
  auto it = failures_.find(key);
  return it == failures_.end() ? 0 : it->second;
}

TokenBucket::TokenBucket(double qps, int burst, Clock& clock)
    : qps_(qps), burst_(std::max(burst, 1)), clock_(clock), tokens_(std::max(burst, 1)), last_(clock.Now()) {}

absl::Duration TokenBucket::Reserve() {
  if (qps_ <= 0) return absl::ZeroDuration();
  absl::MutexLock l(&mu_);
  const absl::Time now = clock_.Now();
  if (now > last_) {
    tokens_ = std::min<double>(burst_, tokens_ + absl::ToDoubleSeconds(now - last_) * qps_);
    last_ = now;
  }
  tokens_ -= 1;  // may go negative: a reservation in the future
  if (tokens_ >= 0) return absl::ZeroDuration();
  return absl::Seconds(-tokens_ / qps_);
}

}  // namespace berth
