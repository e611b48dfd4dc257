// Serving CSI services on a unix socket.
//
// CsiServer binds any set of gRPC services (Identity, Controller, Node,
// GroupController, SnapshotMetadata, or test doubles) to one unix socket,
// logs every call with secrets redacted, and shuts down gracefully:
//
//   IdentityService identity(...);
//   auto server = CsiServer::Start({.endpoint = "unix:///run/csi/csi.sock"}, {&identity});
//   if (!server.ok()) return Fail(server.status());
//   WaitForTerminationSignal();
//   (*server)->Shutdown(absl::Seconds(10));  // drains calls, removes the socket
//
// Every call produces one log line at completion:
//   csi call method=/csi.v1.Node/NodeStageVolume code=OK duration=1.2ms
//       request={...} response={...}
// (failures at warn level with the gRPC message). Request and response are
// rendered by RedactedDebugString, so csi_secret fields never reach the log.
//
// Thread-safety: Start/Shutdown/destructor from one owning thread; the
// services are called concurrently from gRPC's thread pool.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/impl/service_type.h"
#include "grpcpp/server.h"

namespace berth::csi {

class CallObserver;
class InFlightCalls;

struct ServerOptions {
  // unix:///abs/path or /abs/path.
  std::string endpoint;
  // Permissions of the socket file; only root and the socket's group may
  // connect by default.
  mode_t socket_mode = 0660;
  // Told about every finished call (metrics); not owned, may be null, must
  // outlive the server.
  CallObserver* observer = nullptr;
};

class CsiServer {
 public:
  // Prepares the socket path (see PrepareSocketPath: a stale socket is
  // removed, anything else there is refused), binds, and starts serving.
  // `services` are not owned and must outlive the server.
  // Errors: INVALID_ARGUMENT for a bad endpoint, FAILED_PRECONDITION when the
  // path is taken, UNAVAILABLE when gRPC cannot bind.
  static absl::StatusOr<std::unique_ptr<CsiServer>> Start(const ServerOptions& options,
                                                          const std::vector<grpc::Service*>& services);

  // Shuts down if Shutdown() was not called (with no grace period).
  ~CsiServer();

  CsiServer(const CsiServer&) = delete;
  CsiServer& operator=(const CsiServer&) = delete;

  // Removes the socket file (no new connections), lets calls in flight
  // finish for up to `grace`, then closes all connections and cancels what is
  // still running. Returns as soon as the calls have drained. Idempotent.
  void Shutdown(absl::Duration grace);

  const std::string& socket_path() const { return socket_path_; }

  // True from Start until Shutdown begins, while the socket file is still a
  // socket at socket_path() (a deleted socket cannot be reached any more).
  // Thread-safe.
  bool Serving() const;

 private:
  CsiServer(std::string socket_path, std::unique_ptr<grpc::Server> server, std::shared_ptr<InFlightCalls> in_flight);

  const std::string socket_path_;
  std::unique_ptr<grpc::Server> server_;
  const std::shared_ptr<InFlightCalls> in_flight_;
  std::atomic<bool> shut_down_{false};
};

}  // namespace berth::csi
