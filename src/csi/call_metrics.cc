#include "csi/call_metrics.h"

#include <utility>

#include "common/strings.h"

namespace berth::csi {

std::string GoCodeName(grpc::StatusCode code) {
  static constexpr const char* kNames[] = {
      "OK",       "Canceled",       "Unknown",          "InvalidArgument",   "DeadlineExceeded",
      "NotFound", "AlreadyExists",  "PermissionDenied", "ResourceExhausted", "FailedPrecondition",
      "Aborted",  "OutOfRange",     "Unimplemented",    "Internal",          "Unavailable",
      "DataLoss", "Unauthenticated"};
  const int c = static_cast<int>(code);
  return (c >= 0 && c <= 16) ? kNames[c] : StrCat("Code(", std::to_string(c), ")");
}

CallMetrics::CallMetrics(std::string name, std::string help, bool kubelet_labels)
    : name_(std::move(name)), help_(std::move(help)), kubelet_labels_(kubelet_labels) {}

CallMetrics& CallMetrics::Sidecar() {
  static auto* m = new CallMetrics("csi_sidecar_operations_seconds",
                                   "Container Storage Interface operation duration with gRPC error code status total",
                                   /*kubelet_labels=*/false);
  return *m;
}

CallMetrics& CallMetrics::Kubelet() {
  static auto* m = new CallMetrics("csi_operations_seconds",
                                   "Container Storage Interface operation duration with gRPC error code status total",
                                   /*kubelet_labels=*/true);
  return *m;
}

void CallMetrics::Observe(std::string_view driver, std::string_view method, grpc::StatusCode code,
                          absl::Duration took) {
  Key key{std::string(driver), std::string(method), GoCodeName(code)};
  absl::MutexLock lock(&mu_);
  auto it = series_.find(key);
  if (it == series_.end()) it = series_.emplace(std::move(key), metrics::Histogram(kOperationsLatencyBuckets)).first;
  it->second.Observe(absl::ToDoubleSeconds(took));
}

void CallMetrics::WriteHeader(std::string* out) const {
  metrics::WriteFamily(out, name_, metrics::MetricType::kHistogram, help_);
}

void CallMetrics::WriteSamples(std::string* out, const metrics::Labels& extra) const {
  absl::MutexLock lock(&mu_);
  for (const auto& [key, histogram] : series_) {
    const auto& [driver, method, code] = key;
    metrics::Labels labels = {{"driver_name", driver}, {"method_name", method}, {"grpc_status_code", code}};
    if (kubelet_labels_) labels.emplace_back("migrated", "false");
    labels.insert(labels.end(), extra.begin(), extra.end());
    metrics::WriteHistogram(out, name_, labels, histogram);
  }
}

void CallMetrics::Write(std::string* out, const metrics::Labels& extra) const {
  {
    absl::MutexLock lock(&mu_);
    if (series_.empty()) return;
  }
  WriteHeader(out);
  WriteSamples(out, extra);
}

uint64_t CallMetrics::Count(std::string_view driver, std::string_view method, grpc::StatusCode code) const {
  absl::MutexLock lock(&mu_);
  auto it = series_.find(Key{std::string(driver), std::string(method), GoCodeName(code)});
  return it == series_.end() ? 0 : it->second.count();
}

}  // namespace berth::csi
