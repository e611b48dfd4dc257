// Volume expansion for one CSI driver (external-resizer semantics with
// RecoverVolumeExpansionFailure, seed 003): a bound claim asking for more
// than its status.capacity → ControllerExpandVolume (or, for drivers without
// EXPAND_VOLUME in their controller capabilities, nothing: the node grows
// it) → the PV's capacity → either the claim's status.capacity (done) or the
// FileSystemResizePending condition with allocatedResourceStatuses
// NodeResizePending, which the node agent finishes with NodeExpandVolume.
//
// The size asked of the driver follows external-resizer's expandAndRecover:
// status.allocatedResources records it (with ControllerResizeInProgress and
// the Resizing condition while the call runs); an operation whose outcome is
// unknown (a non-final error) is repeated at the same size even if the user
// lowers the request; after a final error the user's current request is
// used. Infeasible answers — INVALID_ARGUMENT, OUT_OF_RANGE, NOT_FOUND, and
// (berth: the pool cannot hold it; nothing was changed) RESOURCE_EXHAUSTED —
// are recorded as ControllerResizeInfeasible with a ControllerResizeError
// condition and a VolumeResizeFailed event, and the same size is tried again
// only after `infeasible_retry` (5 min, external-resizer's slow set). The
// user recovers by lowering the request to any size above status.capacity
// (the API refuses less); the next expansion to that size clears the status.
// NodeResizeInfeasible (recorded by the node) makes the controller hand the
// volume to the node again, as upstream.
//
// Calls to the driver go through a DriverMonitor (a down driver is waited
// for, not counted as a failure). Time (the slow retry) is on `clock`.
//
// Thread-safety: thread-safe; Start/Stop from one thread.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "api/types/core.h"
#include "apiserver/registry.h"
#include "client/driver_monitor.h"
#include "client/drivers.h"
#include "client/events.h"
#include "client/informer.h"
#include "client/workqueue.h"
#include "common/clock.h"

namespace berth::controllers {

using namespace ::berth::client;  // the controllers' own client library

// Whether a claim's change can alter what the resizer decides, so its key
// is queued (external-resizer's updatePVC filter, widened to every field
// berth's expansion and its recovery read): the request or the reported
// size changed (either way: a lowered request is a recovery), what was
// allocated or its status, the phase or the bound volume; and every resync
// (the same resourceVersion). A claim's other edits on its way to Bound
// (annotations, finalizers) wake no resizer.
bool ClaimChangeConcernsResize(const nlohmann::json& before, const nlohmann::json& after);

class Resizer {
 public:
  struct Options {
    std::string driver;
    int workers = 2;
    // Each CSI call's deadline; zero: the call layer's default for the call
    // (csi::DefaultTimeout).
    absl::Duration rpc_timeout = absl::ZeroDuration();
    // How long an infeasible size waits before it is tried again.
    absl::Duration infeasible_retry = absl::Minutes(5);
    DriverMonitor* monitor = nullptr;  // null: one of our own
    Clock* clock = nullptr;            // null: the real clock
  };
  Resizer(apiserver::Registry& registry, DriverDirectory& drivers, Informer& claims, Informer& volumes,
          Options options);
  ~Resizer();

  void RegisterHandlers();
  void Start();
  void Stop();

  // One reconcile (public for tests): NotAFailure while the driver is
  // down (the key is parked).
  absl::Status SyncClaim(const std::string& key);
  // Claims queued for SyncClaim so far (each a worker's wake-up).
  uint64_t queue_adds() const { return queue_.adds(); }

 private:
  // Whether SyncClaim has anything to do for `claim` (false: not Bound, or
  // nothing asked beyond its capacity — then what was remembered of an
  // earlier expansion of `key` is forgotten).
  bool ClaimNeedsSync(const nlohmann::json& claim, const std::string& key) ABSL_LOCKS_EXCLUDED(mu_);
  // The ControllerExpandVolume call (or its absence); returns the new size
  // and whether the node must finish.
  absl::Status Expand(const api::types::PersistentVolume& pv, const std::string& key, int64_t bytes, int64_t* new_bytes,
                      bool* node_expansion);

  apiserver::Registry& registry_;
  DriverDirectory& drivers_;
  Informer& claims_;
  Informer& volumes_;
  const Options options_;
  std::unique_ptr<DriverMonitor> own_monitor_;
  DriverMonitor& monitor_;
  Clock& clock_;
  EventRecorder events_;
  WorkQueue queue_;
  std::vector<std::thread> workers_;

  absl::Mutex mu_;
  // Claims whose expansion ended in a final error (in memory, as upstream:
  // after a restart the recorded size is retried once).
  std::set<std::string> final_error_ ABSL_GUARDED_BY(mu_);
  // Claims recorded infeasible: since when (external-resizer's slow set).
  std::map<std::string, absl::Time> infeasible_since_ ABSL_GUARDED_BY(mu_);
};

}  // namespace berth::controllers
