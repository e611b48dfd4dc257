// The parts of the client library that work in the background — work
// queues, informers, event recorders — each register here a probe that
// says whether it is idle at this moment, so a test can wait until the
// system has settled (client/testing/settle.h: every informer has
// delivered the store's changes, no queue holds or runs a key that is due,
// no event waits to be written) instead of sleeping a fixed time to see
// that "nothing happens". Production code never asks.
//
// Thread-safety: thread-safe. A probe runs with the registry's lock held:
// it may take its component's own lock but must not call back in here; a
// component unregisters (first thing in its destructor) before its state
// goes, and Unregister waits for a probe that is running.
#pragma once

#include <cstdint>
#include <functional>

namespace berth::client {

class Quiescence {
 public:
  // `idle(rv)`: true when the component has nothing left to do about the
  // store's changes up to resourceVersion `rv`.
  using IdleFn = std::function<bool(int64_t rv)>;
  static uint64_t Register(IdleFn idle);
  static void Unregister(uint64_t id);
  // Whether every registered component is idle for `rv`.
  static bool AllIdle(int64_t rv);
};

}  // namespace berth::client
