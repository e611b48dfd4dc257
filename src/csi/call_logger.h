// A gRPC server interceptor that logs every call (method, duration, code,
// message, redacted request and response), counts the calls in flight, and
// tells an optional CallObserver (metrics) about each finished call.
// Installed by CsiServer.
#pragma once

#include <memory>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/support/server_interceptor.h"
#include "grpcpp/support/status.h"

namespace berth::csi {

// The number of calls a server is running, for draining on shutdown.
// Thread-safety: thread-safe.
class InFlightCalls {
 public:
  void Started();
  void Finished();
  int count() const;
  // Waits until no call is in flight or `deadline` passes; true if none is.
  bool WaitForNone(absl::Time deadline) const;

 private:
  mutable absl::Mutex mu_;
  int count_ ABSL_GUARDED_BY(mu_) = 0;
};

// Told about every finished call, once, when its status is sent: the same
// method, code and duration the log line shows.
// Thread-safety: implementations must be thread-safe (gRPC's threads call).
class CallObserver {
 public:
  virtual ~CallObserver() = default;
  // `method` is the gRPC path, e.g. "/csi.v1.Node/NodeStageVolume".
  virtual void CallFinished(std::string_view method, grpc::StatusCode code, absl::Duration took) = 0;
};

// The name of a gRPC status code as gRPC spells it ("OK", "NOT_FOUND"), or
// "UNKNOWN_CODE" outside 0..16.
const char* StatusCodeName(grpc::StatusCode code);

// Logs each call, keeps `in_flight` up to date (a call is in flight from
// its arrival until gRPC has released it), and tells `observer` (not owned,
// may be null; must outlive the server) about each finished call.
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> NewCallLoggerFactory(
    std::shared_ptr<InFlightCalls> in_flight, CallObserver* observer = nullptr);

}  // namespace berth::csi
