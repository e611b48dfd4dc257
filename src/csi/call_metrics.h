// Latency histograms of the CSI calls berth makes as a client, in the shapes
// Kubernetes exposes them:
//
//   - the kubernetes-csi sidecars' (csi-lib-utils metrics):
//     csi_sidecar_operations_seconds{driver_name, method_name, grpc_status_code}
//     — berth's controllers (provisioner, attacher, resizer, snapshotter,
//     capacity) do the sidecars' work;
//   - kubelet's: csi_operations_seconds{driver_name, method_name,
//     grpc_status_code, migrated} — berth's node agent does kubelet's.
//
// method_name is the gRPC path ("/csi.v1.Controller/CreateVolume"),
// grpc_status_code the code as grpc-go prints it ("OK", "DeadlineExceeded",
// "Unavailable"), buckets 0.1 s to 600 s as csi-lib-utils'.
//
//   CallMetrics& m = CallMetrics::Sidecar();
//   m.Observe("local.csi.berth.io", "/csi.v1.Controller/CreateVolume", grpc::StatusCode::OK, absl::Milliseconds(3));
//   std::string text;  m.Write(&text);   // Prometheus text, one family
//
// Thread-safety: thread-safe.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/support/status.h"
#include "metrics/prometheus.h"

namespace berth::csi {

// csi-lib-utils' operationsLatencyBuckets, in seconds.
inline const std::vector<double> kOperationsLatencyBuckets = {.1, .25, .5, 1, 2.5, 5, 10, 15, 25, 50, 120, 300, 600};

// The name grpc-go gives a status code (codes.Code.String()): "OK",
// "Canceled", "DeadlineExceeded", ...; "Code(<n>)" outside 0..16.
std::string GoCodeName(grpc::StatusCode code);

class CallMetrics {
 public:
  // One histogram family `name`; `kubelet_labels` adds migrated="false"
  // (kubelet's extra label: berth migrates no in-tree plugin).
  CallMetrics(std::string name, std::string help, bool kubelet_labels);

  // The process's two families (controllers, node agent).
  static CallMetrics& Sidecar();
  static CallMetrics& Kubelet();

  void Observe(std::string_view driver, std::string_view method, grpc::StatusCode code, absl::Duration took)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The family in Prometheus text (HELP, TYPE, one histogram per label set);
  // nothing when no call was observed. `extra` labels go on every series
  // (e.g. the node of a node agent).
  void Write(std::string* out, const metrics::Labels& extra = {}) const ABSL_LOCKS_EXCLUDED(mu_);
  // Only the samples (no HELP/TYPE), to merge several processes' series
  // under one family header written by WriteHeader.
  void WriteSamples(std::string* out, const metrics::Labels& extra = {}) const ABSL_LOCKS_EXCLUDED(mu_);
  void WriteHeader(std::string* out) const;

  // The number of observations for (driver, method, code), for tests.
  uint64_t Count(std::string_view driver, std::string_view method, grpc::StatusCode code) const
      ABSL_LOCKS_EXCLUDED(mu_);

  const std::string& name() const { return name_; }

 private:
  using Key = std::tuple<std::string, std::string, std::string>;  // driver, method, code name

  const std::string name_;
  const std::string help_;
  const bool kubelet_labels_;

  mutable absl::Mutex mu_;
  std::map<Key, metrics::Histogram> series_ ABSL_GUARDED_BY(mu_);
};

}  // namespace berth::csi
