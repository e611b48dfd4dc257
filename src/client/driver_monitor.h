// Whether each CSI driver endpoint answers, so that controllers wait for a
// driver that is down instead of failing — and backing off — every item
// that needs it (external-provisioner and friends re-queue everything when
// their driver's connection comes back; a restart of the driver is not an
// error of each claim).
//
// Every controller call to a driver goes through Call(). A call that fails
// with UNAVAILABLE (connection refused, socket gone, driver not registered)
// is checked with a Probe on a fresh connection: if the Probe fails too, the
// endpoint is *down* and Call returns a NotAFailure status; if it answers,
// the call is made once more on a fresh connection (the old one may have
// belonged to a driver process that has since been restarted). While an endpoint is down, Call
// makes no call at all (same status, at once). The caller parks its key
// with Park(); every parked key is re-added to its queue, all at once, as
// soon as the endpoint is up again — when the driver registers again (the
// DriverDirectory hears of it: a registrar only registers a driver that
// answered it) or a periodic Probe (backing off from `probe_initial` to
// `probe_max` on the Clock; a driver that does not register again, e.g. an
// external one restarted under the same socket) succeeds. The queues' workers
// bound how many of them run at a time. An UNAVAILABLE answered by a driver
// whose Probe succeeds is an ordinary failure of that call.
//
//   absl::Status st = monitor.Call(driver, node, [&](const csi::DriverClient& csi) {
//     return csi.CreateVolume(req, {.secrets = secrets}).status();
//   });
//   if (IsNotAFailure(st)) monitor.Park(driver, node, queue, key);
//
// Thread-safety: thread-safe. Probes run on the monitor's own thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/capability.h"
#include "client/drivers.h"
#include "client/workqueue.h"
#include "common/backoff.h"
#include "common/clock.h"
#include "csi/driver_client.h"
#include "grpcpp/channel.h"

namespace berth::client {

// A parked key's sync result is NotAFailure (client/workqueue.h): the key
// is not done, but the DriverMonitor re-adds it once the driver is back.

// Kept for the call sites: RunWorker itself leaves a NotAFailure key's
// backoff as it was (neither forgotten nor counted), so this returns `sync`.
std::function<absl::Status(const std::string&)> ParkAware(std::function<absl::Status(const std::string&)> sync);

// DriverMonitor's options (outside the class so they can default an argument).
struct DriverMonitorOptions {
  // A Probe dials the endpoint afresh (waiting at most probe_dial_timeout:
  // a dead driver's socket refuses at once) and waits probe_timeout for the
  // answer (bounds a hung driver). Real time: gRPC deadlines.
  absl::Duration probe_dial_timeout = absl::Milliseconds(500);
  absl::Duration probe_timeout = absl::Seconds(2);
  // Probes of a down endpoint, on the clock.
  absl::Duration probe_initial = absl::Milliseconds(250);
  absl::Duration probe_max = absl::Seconds(5);
  // How long Call may wait to dial an endpoint it has no channel for.
  absl::Duration dial_timeout = absl::Seconds(5);
  // Where the calls (and probes) are counted.
  csi::CallMetrics* metrics = &csi::CallMetrics::Sidecar();
};

class DriverMonitor {
 public:
  using Options = DriverMonitorOptions;

  struct Stats {
    int64_t calls = 0;                // calls made to a driver
    int64_t connection_failures = 0;  // of those, failed because it was down
    int64_t skipped = 0;              // calls not made: the endpoint was down
    int64_t probes = 0;
    int64_t failed_probes = 0;
    int64_t outages = 0;  // times an endpoint went down
    int64_t resumed = 0;  // parked keys re-added
  };

  explicit DriverMonitor(DriverDirectory& directory, Clock& clock = RealClock(), Options options = {});
  ~DriverMonitor();
  DriverMonitor(const DriverMonitor&) = delete;
  DriverMonitor& operator=(const DriverMonitor&) = delete;

  using CallFn = std::function<absl::Status(const csi::DriverClient& csi)>;
  // Runs `fn` with a client (csi/driver_client.h) of the endpoint serving
  // (driver, node), unless that endpoint is down. Returns fn's status, or NotAFailure when the
  // endpoint is (or turned out to be) down or unregistered.
  absl::Status Call(const std::string& driver, const std::string& node, const CallFn& fn) ABSL_LOCKS_EXCLUDED(mu_);

  // ControllerGetCapabilities through the directory's cache, as a Call.
  absl::StatusOr<bool> ControllerHasCapability(const std::string& driver, const std::string& node,
                                               ::csi::v1::ControllerServiceCapability::RPC::Type rpc);

  // How the driver's controller takes single-node access modes: split when
  // it reports SINGLE_NODE_MULTI_WRITER, else the legacy SINGLE_NODE_WRITER.
  absl::StatusOr<SingleNodeModes> ControllerSingleNodeModes(const std::string& driver, const std::string& node);

  // Re-adds `key` to `queue` once the endpoint serving (driver, node) is up
  // (at once if it already is). A key parked twice is re-added once.
  void Park(const std::string& driver, const std::string& node, WorkQueue& queue, const std::string& key)
      ABSL_LOCKS_EXCLUDED(mu_, release_mu_);
  // Drops every key parked for `queue` (call before destroying it).
  void Unpark(WorkQueue& queue) ABSL_LOCKS_EXCLUDED(mu_, release_mu_);

  // Whether the endpoint serving (driver, node) is believed up.
  bool Up(const std::string& driver, const std::string& node) const ABSL_LOCKS_EXCLUDED(mu_);
  Stats stats() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Endpoint {
    explicit Endpoint(const Options& o)
        : backoff({.initial = o.probe_initial, .max = o.probe_max, .multiplier = 2.0, .jitter = 0.2}) {}
    bool down = false;
    absl::Time next_probe = absl::InfinitePast();
    Backoff backoff;
    std::string driver, node;  // a (driver, node) it serves, to probe it
    std::set<std::pair<WorkQueue*, std::string>> parked;
  };

  // The endpoint's identity: its address, or for a driver not registered
  // for `node` a placeholder that any registration of the driver releases.
  std::string EndpointKey(const std::string& driver, const std::string& node) const;
  static bool Unregistered(const std::string& key) { return key.starts_with("unregistered:"); }
  Endpoint& StateLocked(const std::string& key, const std::string& driver, const std::string& node)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Probe on a fresh connection. OK when the driver answered and is not
  // "not ready".
  absl::Status Probe(const std::string& driver, const std::string& node) ABSL_LOCKS_EXCLUDED(mu_);
  void MarkDownLocked(Endpoint& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnRegistered(const std::string& driver, const std::string& node, const std::string& endpoint)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Re-adds `parked` to their queues.
  void Release(std::set<std::pair<WorkQueue*, std::string>> parked) ABSL_LOCKS_EXCLUDED(mu_, release_mu_);
  void ProberLoop() ABSL_LOCKS_EXCLUDED(mu_);

  DriverDirectory& directory_;
  Clock& clock_;
  const Options options_;
  int listener_id_ = 0;

  // Held while parked keys are re-added, so Unpark never returns while a
  // queue it dropped is still being used.
  absl::Mutex release_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable absl::Mutex mu_;
  std::map<std::string, Endpoint> endpoints_ ABSL_GUARDED_BY(mu_);
  // Queues Unpark-ed: keys taken out for release before are not re-added.
  std::set<WorkQueue*> unparked_ ABSL_GUARDED_BY(mu_);
  Stats stats_ ABSL_GUARDED_BY(mu_);
  bool wake_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread prober_;  // last: starts once everything above exists
};

}  // namespace berth::client
