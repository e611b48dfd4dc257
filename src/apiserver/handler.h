// The Kubernetes REST API over a Registry: paths, verbs, discovery, Table
// output, watch streams, and errors as `Status` objects.
//
//   GET    /api/v1/namespaces/default/persistentvolumeclaims        list
//   GET    ...?watch=1&resourceVersion=N                            watch
//   GET    /apis/storage.k8s.io/v1/storageclasses/fast               get
//   POST   /api/v1/namespaces/default/persistentvolumeclaims        create
//   PUT    .../persistentvolumeclaims/data[/status]                 update
//   PATCH  .../persistentvolumeclaims/data[/status]                 patch
//   DELETE .../persistentvolumeclaims/data                          delete
//   POST   /api/v1/namespaces/default/pods/web/binding              bind
//   GET    /api /apis /api/v1 /apis/<group>/<version> /version      discovery
//   GET    /metrics                                                 Prometheus text
//
// Thread-safety: thread-safe; Handle() is called from many connections.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "apiserver/backpressure.h"
#include "apiserver/registry.h"
#include "apiserver/watch_hub.h"
#include "common/backlog.h"
#include "common/clock.h"
#include "http/server.h"

namespace berth::apiserver {

// The API is served over berth's HTTP server.
using ::berth::http::HttpRequest;
using ::berth::http::ResponseWriter;

class ApiHandler {
 public:
  struct Options {
    absl::Duration bookmark_interval = absl::Seconds(30);
    absl::Duration max_watch = absl::Minutes(30);
    Clock* clock = &RealClock();  // watch deadlines and bookmarks
    // A client's create waits while the controllers' queued work is above
    // hold_back.limit (apiserver/backpressure.h): the sum of the process's
    // work queues by default.
    HoldBackOptions hold_back{};
    std::function<int64_t()> backlog = &Backlog::Pending;
  };
  ApiHandler(Registry& registry, Options options)
      : registry_(registry),
        options_(options),
        watches_({.bookmark_interval = options.bookmark_interval, .clock = options.clock}) {}

  void Handle(const HttpRequest& request, ResponseWriter& out);

  // Requests that stream for long (watches, followed pod logs, pods/exec
  // and pods/attach): the HTTP server exempts them from its in-flight
  // limits; Handle() detaches watch streams to the WatchHub (pods/log hands
  // followed logs to its own thread, pods/exec its connection to a tunnel),
  // so none holds a handler thread.
  static bool IsLongRunning(const HttpRequest& request);
  size_t watches() const { return watches_.size(); }
  // Creates held back while the controllers were behind, and the time they
  // waited in all.
  struct HoldBackStats {
    int64_t requests = 0;
    absl::Duration waited;
  };
  HoldBackStats held_back() const ABSL_LOCKS_EXCLUDED(held_back_mu_);

  // GET /metrics (Prometheus text format) renders every collector in the
  // order added, each appending whole metric families.
  using MetricsCollector = std::function<void(std::string* out)>;
  void AddMetricsCollector(MetricsCollector collector) ABSL_LOCKS_EXCLUDED(metrics_mu_);

  // A subresource served by someone else (pods/log, pods/exec: the node's
  // kubelet in Kubernetes, berth's pod log reader and exec proxy here),
  // for the HTTP `methods` given (others: 405). The handler gets the
  // object's namespace and name; an error it returns before writing
  // anything is sent as a Kubernetes Status.
  using SubresourceHandler =
      std::function<absl::Status(const HttpRequest&, ResponseWriter&, const std::string& ns, const std::string& name)>;
  void AddSubresource(const std::string& resource, const std::string& sub, SubresourceHandler handler,
                      std::vector<std::string> methods = {"GET"}) ABSL_LOCKS_EXCLUDED(metrics_mu_);

 private:
  Registry& registry_;
  const Options options_;
  mutable absl::Mutex metrics_mu_;
  std::vector<MetricsCollector> metrics_ ABSL_GUARDED_BY(metrics_mu_);
  struct Served {
    SubresourceHandler handler;
    std::vector<std::string> methods;
  };
  std::map<std::pair<std::string, std::string>, Served> subresources_ ABSL_GUARDED_BY(metrics_mu_);
  // Its own lock: /metrics reads it from a collector, under metrics_mu_.
  mutable absl::Mutex held_back_mu_;
  HoldBackStats held_back_ ABSL_GUARDED_BY(held_back_mu_);
  WatchHub watches_;  // last: its streams end before the rest goes
};

// The Kubernetes Status object for an error (or success when `status` is ok).
nlohmann::json StatusObject(const absl::Status& status);

}  // namespace berth::apiserver
