// The pool's watchman, on a period of the injected clock:
//
//   - keeps an allocated pool image allocated: holes that a discard punched
//     (fstrim on the host reaches the pool's loop device, which serves it by
//     punching the image) are allocated again while the host has room;
//   - follows the pool's pressure (Pool::Capacity's reason) and health
//     (DriverContext::PoolFault), logs each change, and — when it has an
//     API client (in a pod, or berth up's socket) — reports them as node
//     problem detectors do: the condition BerthPoolPressure on its Node
//     (True with reason PoolNearlyFull, HostNearlyFull, HostOvercommitted
//     or PoolUnhealthy and a message naming the sizes; False "PoolHasRoom")
//     by a strategic merge patch of nodes/<node>/status, which leaves
//     kubelet's own conditions alone, and a Warning event on the Node when
//     it turns True (Normal "PoolPressureRelieved" when it clears). `kubectl
//     describe node` shows both.
//
//   PoolMonitor monitor(driver.context(), {.node_name = "node-a"}, client_factory);
//   monitor.Start();
//
// Thread-safety: Start/Stop from one thread; RunOnce is not to be called
// concurrently with the running loop (tests call it with no loop running).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "driver/context.h"
#include "http/api_client.h"

namespace berth::driver {

inline constexpr char kPoolConditionType[] = "BerthPoolPressure";

class PoolMonitor {
 public:
  struct Options {
    std::string node_name;
    absl::Duration period = absl::Seconds(10);
  };
  // What the monitor last saw: a reason ("PoolHasRoom" when all is well)
  // and a message.
  struct State {
    std::string reason;
    std::string message;
    bool problem() const { return reason != "PoolHasRoom"; }
    bool operator==(const State&) const = default;
  };
  // Null: nothing is reported to an API server (logs and metrics only).
  using ClientFactory = std::function<absl::StatusOr<std::unique_ptr<http::ApiClient>>()>;

  PoolMonitor(const DriverContext& ctx, Options options, ClientFactory client, Clock& clock = RealClock());
  ~PoolMonitor();

  void Start();
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

  // One pass: re-allocates holes, computes the state, and reports it when
  // it changed, was not yet reported (a failed report is tried again at the
  // next pass, event included) or was last reported a minute ago. Returns
  // the state.
  State RunOnce();

 private:
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);
  State Compute();
  absl::Status Report(const State& state, bool transition);

  const DriverContext& ctx_;
  const Options options_;
  const ClientFactory client_;
  Clock& clock_;
  std::thread thread_;

  // Only the loop thread (or a test with no loop) touches these.
  State last_{};
  bool reported_ = false;       // last_'s reason is on the Node
  bool pending_event_ = false;  // the change to last_ awaits its event
  absl::Time since_ = absl::InfinitePast();
  absl::Time last_report_ = absl::InfinitePast();

  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace berth::driver
