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

#include "absl/random/random.h"
#include "absl/time/time.h"

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

}  // namespace berth
