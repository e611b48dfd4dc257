// A gRPC server interceptor that logs every call (method, duration, code,
// message, redacted request and response) and counts the calls in flight.
// Installed by CsiServer.
#pragma once

#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/support/server_interceptor.h"

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

// Logs each call and keeps `in_flight` up to date (a call is in flight from
// its arrival until gRPC has released it).
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> NewCallLoggerFactory(
    std::shared_ptr<InFlightCalls> in_flight);

}  // namespace berth::csi
