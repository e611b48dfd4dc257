// Where each CSI driver can be reached, for the controllers: driver name →
// endpoints, either cluster-wide (a controller service anywhere) or per node
// (a node-local driver such as berth-csi, whose controller service must be
// called on the node that holds the storage). The node agent fills this at
// plugin registration; `berth up --external-driver` and tests add entries.
//
//   directory.Add("local.csi.berth.io", "node-1", "unix:///.../csi.sock");
//   auto channel = directory.Channel("local.csi.berth.io", "node-1");
//
// Channels are dialled lazily and cached per endpoint.
//
// Thread-safety: thread-safe.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "csi/driver_client.h"
#include "csi/v1/csi.pb.h"
#include "grpcpp/channel.h"

namespace berth::client {

class DriverDirectory {
 public:
  // `node` "" = reachable for any node.
  void Add(const std::string& driver, const std::string& node, const std::string& endpoint) ABSL_LOCKS_EXCLUDED(mu_);
  void Remove(const std::string& driver, const std::string& node) ABSL_LOCKS_EXCLUDED(mu_);

  // `fn` hears of every driver name as it first becomes known (and at once
  // of each already known), on the thread that added it; null stops it.
  // Replacing or clearing the listener waits for a call in progress.
  void SetOnNewDriver(std::function<void(const std::string& driver)> fn) ABSL_LOCKS_EXCLUDED(listener_mu_, mu_);
  std::vector<std::string> Drivers() const ABSL_LOCKS_EXCLUDED(mu_);

  // `fn` hears of every Add (a driver registering, again or anew, for a
  // node), on the thread that added it, after the entry is in place.
  // Returns an id for RemoveListener, which waits for a call in progress.
  // `fn` must not call Add/Remove/SetOnNewDriver/AddListener.
  using Listener = std::function<void(const std::string& driver, const std::string& node, const std::string& endpoint)>;
  int AddListener(Listener fn) ABSL_LOCKS_EXCLUDED(listener_mu_);
  void RemoveListener(int id) ABSL_LOCKS_EXCLUDED(listener_mu_);

  // The nodes a driver is registered on ("" included if cluster-wide).
  std::vector<std::string> Nodes(const std::string& driver) const ABSL_LOCKS_EXCLUDED(mu_);
  bool Known(const std::string& driver) const ABSL_LOCKS_EXCLUDED(mu_);
  // The endpoint serving `driver` for `node`: the node's own, else the
  // cluster-wide one, else "".
  std::string Endpoint(const std::string& driver, const std::string& node) const ABSL_LOCKS_EXCLUDED(mu_);

  // A channel to the driver for `node`: the node's own endpoint, else the
  // cluster-wide one. UNAVAILABLE when neither is registered or the socket
  // does not answer within `dial_timeout` (only a first dial waits; the
  // channel is cached and reconnects by itself).
  absl::StatusOr<std::shared_ptr<grpc::Channel>> Channel(const std::string& driver, const std::string& node,
                                                         absl::Duration dial_timeout = absl::Seconds(5))
      ABSL_LOCKS_EXCLUDED(mu_);

  // A client of that channel for `driver`, counting its calls in `metrics`
  // (null: not counted). Made once per channel and dropped with it: a client
  // makes a stub per CSI service, and each stub registers every one of its
  // methods with the channel, which cost a call per use as much as the call.
  absl::StatusOr<std::shared_ptr<const csi::DriverClient>> Client(const std::string& driver, const std::string& node,
                                                                  csi::CallMetrics* metrics,
                                                                  absl::Duration dial_timeout = absl::Seconds(5))
      ABSL_LOCKS_EXCLUDED(mu_);

  // Drops the cached channel to the endpoint serving (driver, node): the
  // next Channel() dials afresh (a restarted driver, while the old channel
  // still waits out its reconnect backoff).
  void Redial(const std::string& driver, const std::string& node) ABSL_LOCKS_EXCLUDED(mu_);

  // Whether the driver's controller service for `node` reports `rpc` in
  // ControllerGetCapabilities. Answers are cached per endpoint (until the
  // endpoint is re-registered); errors are not cached.
  absl::StatusOr<bool> ControllerHasCapability(const std::string& driver, const std::string& node,
                                               ::csi::v1::ControllerServiceCapability::RPC::Type rpc)
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // The endpoint for `node`, else the cluster-wide one, else "".
  std::string EndpointLocked(const std::string& driver, const std::string& node) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Channel(), with the endpoint it serves.
  absl::StatusOr<std::pair<std::string, std::shared_ptr<grpc::Channel>>> Dial(const std::string& driver,
                                                                              const std::string& node,
                                                                              absl::Duration dial_timeout)
      ABSL_LOCKS_EXCLUDED(mu_);

  // A dialled endpoint: its channel and the clients made of it.
  struct Dialed {
    std::shared_ptr<grpc::Channel> channel;
    std::map<std::pair<std::string, csi::CallMetrics*>, std::shared_ptr<const csi::DriverClient>> clients;
  };

  absl::Mutex listener_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::function<void(const std::string&)> on_new_driver_ ABSL_GUARDED_BY(listener_mu_);
  std::map<int, Listener> listeners_ ABSL_GUARDED_BY(listener_mu_);
  int next_listener_ ABSL_GUARDED_BY(listener_mu_) = 1;
  mutable absl::Mutex mu_;
  std::map<std::string, std::map<std::string, std::string>> endpoints_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Dialed> channels_ ABSL_GUARDED_BY(mu_);
  // endpoint → the controller capabilities it reported.
  std::map<std::string, std::vector<int>> capabilities_ ABSL_GUARDED_BY(mu_);
};

}  // namespace berth::client
