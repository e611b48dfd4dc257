// Prometheus text exposition format 0.0.4: writing metric families, and a
// fixed-bucket histogram.
//
//   std::string out;
//   WriteFamily(&out, "berth_volumes", MetricType::kGauge, "Volumes in the pool.");
//   WriteSample(&out, "berth_volumes", {}, 3);
//   WriteFamily(&out, "berth_csi_requests_total", MetricType::kCounter, "CSI calls.");
//   WriteSample(&out, "berth_csi_requests_total", {{"method", "/csi.v1.Node/NodeStageVolume"},
//                                                  {"code", "OK"}}, 12);
//   Histogram h(kLatencyBuckets);  h.Observe(0.004);
//   WriteFamily(&out, "berth_csi_request_duration_seconds", MetricType::kHistogram, "...");
//   WriteHistogram(&out, "berth_csi_request_duration_seconds", {{"method", "..."}}, h);
//
// Names are program constants: an invalid metric or label name is a bug
// (CHECK). Label values and help texts are escaped as the format requires.
//
// Thread-safety: the functions are thread-safe; Histogram is
// thread-compatible (callers guard it).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace berth::metrics {

// The Content-Type of the text format.
inline constexpr char kTextContentType[] = "text/plain; version=0.0.4; charset=utf-8";

enum class MetricType { kCounter, kGauge, kHistogram };

using Labels = std::vector<std::pair<std::string, std::string>>;

// [a-zA-Z_:][a-zA-Z0-9_:]*
bool IsValidMetricName(std::string_view name);
// [a-zA-Z_][a-zA-Z0-9_]*, not starting with "__" (reserved).
bool IsValidLabelName(std::string_view name);

// A value as the format writes it: shortest round-trip decimal, "+Inf",
// "-Inf" or "NaN".
std::string FormatValue(double v);

// "# HELP <name> <help>\n# TYPE <name> <type>\n".
void WriteFamily(std::string* out, std::string_view name, MetricType type, std::string_view help);

// `<name>{labels} <value>\n` (no braces without labels).
void WriteSample(std::string* out, std::string_view name, const Labels& labels, double value);

// Latency buckets in seconds, 0.5 ms to 2 min: CSI calls range from a
// sub-millisecond Probe to a mkfs of a large volume.
inline const std::vector<double> kLatencyBuckets = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                    0.5,    1,     2.5,    5,     10,   30,    60,   120};

// Observations counted in fixed buckets (upper bounds, strictly increasing,
// +Inf implied).
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);

  void Observe(double v);

  const std::vector<double>& upper_bounds() const { return bounds_; }
  // Per bucket, not cumulative; one more than upper_bounds() (+Inf last).
  const std::vector<uint64_t>& counts() const { return counts_; }
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  uint64_t count_ = 0;
  double sum_ = 0;
};

// `<name>_bucket{labels,le="..."}` cumulative for every bound and +Inf, then
// `<name>_sum` and `<name>_count`.
void WriteHistogram(std::string* out, std::string_view name, const Labels& labels, const Histogram& h);

}  // namespace berth::metrics
