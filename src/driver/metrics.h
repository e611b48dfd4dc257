// berth-csi's Prometheus metrics (text format 0.0.4, docs/kubernetes.md
// lists them):
//
//   berth_build_info{version,driver,node}             gauge 1
//   berth_pool_ready                                  gauge 1/0 (Probe's answer)
//   berth_pool_size_bytes, _used_bytes,               gauges read at scrape time
//     _provisioned_bytes, _limit_bytes, berth_pool_reflink
//   berth_volumes, berth_snapshots                    gauges
//   berth_csi_requests_total{method,code}             counter
//   berth_csi_request_duration_seconds{method}        histogram
//
// DriverMetrics observes CSI calls through CsiServer's call logger
// (ServerOptions::observer) and reads the pool when rendered.
//
// Thread-safety: thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "csi/call_logger.h"
#include "driver/driver.h"
#include "metrics/prometheus.h"

namespace berth::driver {

class DriverMetrics final : public csi::CallObserver {
 public:
  // `driver` is not owned and must outlive this object.
  explicit DriverMetrics(Driver& driver);

  // csi::CallObserver
  void CallFinished(std::string_view method, grpc::StatusCode code, absl::Duration took) override;

  // The whole exposition. Pool figures that cannot be read (the pool is
  // gone) are left out and berth_pool_ready is 0.
  std::string Render();

 private:
  struct MethodStats {
    std::map<std::string, uint64_t> calls_by_code;
    metrics::Histogram latency{metrics::kLatencyBuckets};
  };

  Driver& driver_;
  absl::Mutex mu_;
  // Keyed by gRPC method path; only methods of the CSI services (anything
  // else is counted as "unknown", so callers cannot grow the label set).
  std::map<std::string, MethodStats> methods_ ABSL_GUARDED_BY(mu_);
};

}  // namespace berth::driver
