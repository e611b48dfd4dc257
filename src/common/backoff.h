// Jittered exponential backoff.
//
// Used wherever berth retries something that may succeed later: connecting to
// a CSI socket that is not there yet, a reconcile that failed. Each Next()
// returns the delay to wait before the next attempt; the nominal delay doubles
// (by `multiplier`) up to `max`, and each returned delay is spread by
// +/- `jitter` so that many retriers do not move in lock step. Reset() after a
// success starts again from `initial`.
//
//   Backoff backoff({.initial = absl::Milliseconds(100), .max = absl::Seconds(5)});
//   while (!TryOnce()) absl::SleepFor(backoff.Next());
//
// Thread-safety: not thread-safe; one Backoff per retry loop.
#pragma once

#include <functional>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/random/random.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace berth {

class Backoff {
 public:
  struct Options {
    absl::Duration initial = absl::Milliseconds(100);
    absl::Duration max = absl::Seconds(30);
    double multiplier = 2.0;
    // Fraction of the nominal delay by which a returned delay may differ,
    // in [0, 1). 0.2 means a delay in [0.8 d, 1.2 d] (capped at max).
    double jitter = 0.2;
  };

  // `uniform01` returns numbers in [0, 1); tests inject a fixed sequence.
  // Without it, a seeded absl::BitGen is used.
  explicit Backoff(Options options, std::function<double()> uniform01 = nullptr);

  // The delay before the next attempt; advances the nominal delay.
  absl::Duration Next();
  // Back to `initial` (call after a success).
  void Reset();

  // The nominal (unjittered) delay the next call to Next() is based on.
  absl::Duration nominal() const { return current_; }

 private:
  const Options options_;
  std::function<double()> uniform01_;
  absl::BitGen gen_;
  absl::Duration current_;
};

// Per-key exponential backoff (client-go's ItemExponentialFailureRateLimiter,
// with jitter): the n-th consecutive failure of a key waits
// base * 2^n (capped at max), spread by +/- jitter; Forget(key) after a
// success starts the key over. Every retry loop that is keyed (controllers'
// work queues, the volume manager's operations) uses this one.
//
// Thread-safety: thread-safe.
class ItemBackoff {
 public:
  struct Options {
    absl::Duration base = absl::Milliseconds(5);
    absl::Duration max = absl::Minutes(5);
    double jitter = 0.25;  // fraction, in [0, 1)
  };
  explicit ItemBackoff(Options options, std::function<double()> uniform01 = nullptr);

  // Records a failure of `key` and returns how long to wait before retrying.
  absl::Duration When(const std::string& key) ABSL_LOCKS_EXCLUDED(mu_);
  void Forget(const std::string& key) ABSL_LOCKS_EXCLUDED(mu_);
  int Failures(const std::string& key) const ABSL_LOCKS_EXCLUDED(mu_);
  const Options& options() const { return options_; }

 private:
  const Options options_;
  std::function<double()> uniform01_;
  mutable absl::Mutex mu_;
  absl::BitGen gen_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> failures_ ABSL_GUARDED_BY(mu_);
};

// An overall rate limit (client-go's BucketRateLimiter): a token bucket of
// `burst` tokens refilled at `qps` per second on `clock`. Reserve() takes a
// token and returns how long the caller must wait for it (zero while the
// bucket has tokens). qps <= 0 means unlimited.
//
// Thread-safety: thread-safe.
class TokenBucket {
 public:
  TokenBucket(double qps, int burst, Clock& clock = RealClock());
  absl::Duration Reserve() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const double qps_;
  const int burst_;
  Clock& clock_;
  absl::Mutex mu_;
  double tokens_ ABSL_GUARDED_BY(mu_);
  absl::Time last_ ABSL_GUARDED_BY(mu_);
};

}  // namespace berth
