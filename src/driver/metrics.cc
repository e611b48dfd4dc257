#include "driver/metrics.h"

#include <string>

#include "berth/version.h"
#include "google/protobuf/descriptor.h"

namespace berth::driver {
namespace {

using metrics::MetricType;

// The method path when it names a method of a compiled-in service
// ("/csi.v1.Node/NodeStageVolume"), else "unknown".
std::string MethodLabel(std::string_view path) {
  if (path.size() < 2 || path.front() != '/') return "unknown";
  std::string full(path.substr(1));
  const size_t slash = full.find('/');
  if (slash == std::string::npos) return "unknown";
  full[slash] = '.';
  if (google::protobuf::DescriptorPool::generated_pool()->FindMethodByName(full) == nullptr) {
    return "unknown";
  }
  return std::string(path);
}

void Gauge(std::string* out, const char* name, const char* help, double value) {
  metrics::WriteFamily(out, name, MetricType::kGauge, help);
  metrics::WriteSample(out, name, {}, value);
}

}  // namespace

DriverMetrics::DriverMetrics(Driver& driver) : driver_(driver) {}

void DriverMetrics::CallFinished(std::string_view method, grpc::StatusCode code, absl::Duration took) {
  std::string label = MethodLabel(method);
  absl::MutexLock lock(&mu_);
  MethodStats& m = methods_[label];
  ++m.calls_by_code[csi::StatusCodeName(code)];
  m.latency.Observe(absl::ToDoubleSeconds(took));
}

std::string DriverMetrics::Render() {
  std::string out;
  const DriverOptions& o = driver_.options();
  metrics::WriteFamily(&out, "berth_build_info", MetricType::kGauge,
                       "berth-csi's version, driver name and node ID (always 1).");
  metrics::WriteSample(&out, "berth_build_info",
                       {{"version", kVersion}, {"driver", o.driver_name}, {"node", o.node_id}}, 1);

  absl::StatusOr<bool> ready = driver_.Ready();
  Gauge(&out, "berth_pool_ready",
        "1 while the pool is healthy (mounted if it is an image, writable, no kernel errors on its device), as Probe "
        "reports; else 0.",
        ready.ok() && *ready ? 1 : 0);
  Pool& pool = driver_.pool();
  if (absl::StatusOr<Pool::Capacity> c = pool.GetCapacity(); c.ok()) {
    Gauge(&out, "berth_pool_size_bytes", "Size of the pool filesystem.", static_cast<double>(c->total_bytes));
    Gauge(&out, "berth_pool_used_bytes", "Bytes in use on the pool filesystem (images are sparse).",
          static_cast<double>(c->used_bytes));
    Gauge(&out, "berth_pool_provisioned_bytes",
          "Sum of the provisioned sizes of volumes, snapshots and creations in progress.",
          static_cast<double>(c->provisioned_bytes));
    Gauge(&out, "berth_pool_limit_bytes",
          "Provisioning limit: pool size less its metadata reserve, times the overprovision ratio.",
          static_cast<double>(c->limit_bytes));
    Gauge(&out, "berth_pool_reserved_bytes", "Pool filesystem bytes kept for its own metadata.",
          static_cast<double>(c->reserved_bytes));
    Gauge(&out, "berth_pool_available_bytes",
          "What a new volume or snapshot may take now (GetCapacity): 0 under pressure.",
          static_cast<double>(c->available_bytes));
    Gauge(&out, "berth_pool_pressure",
          "1 while provisioning has stopped short of the limit (pool or host past its high watermark, or the host "
          "over-committed); else 0.",
          c->pressure_reason.empty() ? 0 : 1);
    if (c->has_host) {
      Gauge(&out, "berth_pool_host_free_bytes", "Free bytes of the host filesystem holding the pool image.",
            static_cast<double>(c->host_free_bytes));
      Gauge(&out, "berth_pool_host_size_bytes", "Size of the host filesystem holding the pool image.",
            static_cast<double>(c->host_total_bytes));
      Gauge(&out, "berth_pool_image_allocated_bytes",
            "Bytes of the pool image allocated on the host (its apparent size when fully allocated).",
            static_cast<double>(c->image_allocated_bytes));
      Gauge(&out, "berth_pool_host_owed_bytes",
            "Host bytes the pool image may still take for what is provisioned (0 when fully allocated).",
            static_cast<double>(c->host_owed_bytes));
    }
  }
  Gauge(&out, "berth_pool_reflink",
        "1 when the pool filesystem clones by reflink (constant-time snapshots and clones).", pool.reflink() ? 1 : 0);
  Gauge(&out, "berth_volumes", "Volumes in the pool.", static_cast<double>(pool.ListVolumes().size()));
  Gauge(&out, "berth_snapshots", "Snapshots in the pool (group members included).",
        static_cast<double>(pool.ListSnapshots().size()));

  absl::MutexLock lock(&mu_);
  metrics::WriteFamily(&out, "berth_csi_requests_total", MetricType::kCounter,
                       "CSI calls served, by gRPC method and status code.");
  for (const auto& [method, m] : methods_) {
    for (const auto& [code, n] : m.calls_by_code) {
      metrics::WriteSample(&out, "berth_csi_requests_total", {{"method", method}, {"code", code}},
                           static_cast<double>(n));
    }
  }
  metrics::WriteFamily(&out, "berth_csi_request_duration_seconds", MetricType::kHistogram,
                       "Time to serve a CSI call, by gRPC method.");
  for (const auto& [method, m] : methods_) {
    metrics::WriteHistogram(&out, "berth_csi_request_duration_seconds", {{"method", method}}, m.latency);
  }
  return out;
}

}  // namespace berth::driver
