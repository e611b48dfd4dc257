// Volume expansion for one CSI driver (external-resizer semantics, seed
// 003): a bound claim asking for more than its volume has →
// ControllerExpandVolume (or, for drivers without EXPAND_VOLUME in their
// controller capabilities, nothing: the node grows it) → the PV's capacity →
// either the claim's status.capacity (done) or the FileSystemResizePending
// condition with allocatedResourceStatuses NodeResizePending, which the node
// agent finishes with NodeExpandVolume.
//
// While the controller call runs the claim carries the Resizing condition
// and ControllerResizeInProgress; a failure is an event plus
// ControllerResizeInfeasible (final errors such as INVALID_ARGUMENT or
// OUT_OF_RANGE) or a retry with backoff. Shrinking and classes without
// allowVolumeExpansion are refused by the API itself.
//
// Thread-safety: thread-safe; Start/Stop from one thread.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "apiserver/registry.h"
#include "client/drivers.h"
#include "client/events.h"
#include "client/informer.h"
#include "client/workqueue.h"

namespace berth::controllers {

using namespace ::berth::client;  // the controllers' own client library

class Resizer {
 public:
  struct Options {
    std::string driver;
    int workers = 2;
    absl::Duration rpc_timeout = absl::Minutes(2);
  };
  Resizer(apiserver::Registry& registry, DriverDirectory& drivers, Informer& claims, Informer& volumes,
          Options options);
  ~Resizer();

  void RegisterHandlers();
  void Start();
  void Stop();

  absl::Status SyncClaim(const std::string& key);

 private:
  apiserver::Registry& registry_;
  DriverDirectory& drivers_;
  Informer& claims_;
  Informer& volumes_;
  const Options options_;
  EventRecorder events_;
  WorkQueue queue_;
  std::vector<std::thread> workers_;
};

}  // namespace berth::controllers
