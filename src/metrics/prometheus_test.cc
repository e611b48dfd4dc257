#include "metrics/prometheus.h"

#include <cmath>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "metrics/testing/exposition_check.h"

namespace berth::metrics {
namespace {

using testing::CheckExposition;
using testing::FindSample;
using ::testing::HasSubstr;
using testing::ParseExposition;

TEST(PrometheusTest, WritesFamiliesSamplesAndEscapes) {
  std::string out;
  WriteFamily(&out, "berth_volumes", MetricType::kGauge, "Volumes in the pool.\nOne per image \\ record.");
  WriteSample(&out, "berth_volumes", {}, 3);
  WriteFamily(&out, "berth_csi_requests_total", MetricType::kCounter, "CSI calls.");
  WriteSample(&out, "berth_csi_requests_total", {{"method", "/csi.v1.Node/NodeStageVolume"}, {"code", "OK"}}, 12);
  WriteSample(&out, "berth_csi_requests_total", {{"method", "a\"b\\c\nd"}, {"code", "INTERNAL"}}, 0.5);
  EXPECT_EQ(out,
            "# HELP berth_volumes Volumes in the pool.\\nOne per image \\\\ record.\n"
            "# TYPE berth_volumes gauge\n"
            "berth_volumes 3\n"
            "# HELP berth_csi_requests_total CSI calls.\n"
            "# TYPE berth_csi_requests_total counter\n"
            "berth_csi_requests_total{method=\"/csi.v1.Node/NodeStageVolume\",code=\"OK\"} 12\n"
            "berth_csi_requests_total{method=\"a\\\"b\\\\c\\nd\",code=\"INTERNAL\"} 0.5\n");
  auto samples = ParseExposition(out);
  ASSERT_TRUE(samples.ok()) << samples.status();
  // The checker undoes the escapes: the label value round-trips.
  EXPECT_EQ(*FindSample(*samples, "berth_csi_requests_total", {{"method", "a\"b\\c\nd"}}), 0.5);
}

TEST(PrometheusTest, FormatsValuesAsTheFormatWants) {
  EXPECT_EQ(FormatValue(1), "1");
  EXPECT_EQ(FormatValue(0.005), "0.005");
  EXPECT_EQ(FormatValue(21474836480), "21474836480");
  EXPECT_EQ(FormatValue(HUGE_VAL), "+Inf");
  EXPECT_EQ(FormatValue(-HUGE_VAL), "-Inf");
  EXPECT_EQ(FormatValue(NAN), "NaN");
}

TEST(PrometheusTest, HistogramBucketsAreCumulativeAndEndInInfEqualToCount) {
  Histogram h({0.25, 0.5, 1});
  for (double v : {0.125, 0.25, 0.375, 0.75, 0.75, 8.0}) h.Observe(v);
  EXPECT_THAT(h.counts(), ::testing::ElementsAre(2, 1, 2, 1));  // 0.25 falls in le=0.25
  std::string out;
  WriteFamily(&out, "rpc_seconds", MetricType::kHistogram, "Latency.");
  WriteHistogram(&out, "rpc_seconds", {{"method", "Probe"}}, h);
  EXPECT_EQ(out,
            "# HELP rpc_seconds Latency.\n# TYPE rpc_seconds histogram\n"
            "rpc_seconds_bucket{method=\"Probe\",le=\"0.25\"} 2\n"
            "rpc_seconds_bucket{method=\"Probe\",le=\"0.5\"} 3\n"
            "rpc_seconds_bucket{method=\"Probe\",le=\"1\"} 5\n"
            "rpc_seconds_bucket{method=\"Probe\",le=\"+Inf\"} 6\n"
            "rpc_seconds_sum{method=\"Probe\"} 10.25\n"
            "rpc_seconds_count{method=\"Probe\"} 6\n");
  EXPECT_TRUE(CheckExposition(out).ok()) << CheckExposition(out);
}

TEST(PrometheusTest, NameRules) {
  EXPECT_TRUE(IsValidMetricName("berth:pool_size_bytes"));
  EXPECT_FALSE(IsValidMetricName("1abc"));
  EXPECT_FALSE(IsValidMetricName("a-b"));
  EXPECT_FALSE(IsValidMetricName(""));
  EXPECT_TRUE(IsValidLabelName("method"));
  EXPECT_FALSE(IsValidLabelName("a:b"));
  EXPECT_FALSE(IsValidLabelName("__name__"));
}

TEST(PrometheusDeathTest, InvalidNamesAreBugs) {
  std::string out;
  EXPECT_DEATH(WriteSample(&out, "bad-name", {}, 1), "invalid Prometheus metric name");
  EXPECT_DEATH(WriteSample(&out, "ok", {{"bad-label", "x"}}, 1), "invalid Prometheus label name");
}

// The checker must refuse what Prometheus (or berth's stricter rules) would.
TEST(ExpositionCheckTest, RefusesMalformedExpositions) {
  const std::string head = "# HELP m Help.\n# TYPE m gauge\n";
  const std::string hist = "# HELP h Help.\n# TYPE h histogram\n";
  struct Case {
    std::string text;
    std::string why;
  };
  for (const Case& c : std::vector<Case>{
           {head + "m 1", "newline"},
           {"m 1\n", "no TYPE"},
           {"# TYPE m gauge\nm 1\n", "no HELP"},
           {head + "m 1\n# HELP m Again.\n", "after its samples"},
           {"# HELP m a\n# HELP m b\n# TYPE m gauge\nm 1\n", "second HELP"},
           {"# HELP m a\n# TYPE m gauge\n# TYPE m counter\nm 1\n", "second TYPE"},
           {"# HELP m a\n# TYPE m histo\nm 1\n", "unknown type"},
           {head + "m{a=\"1\",a=\"2\"} 1\n", "twice"},
           {head + "m{a=\"\\t\"} 1\n", "invalid escape"},
           {head + "m{a=\"x} 1\n", "unterminated"},
           {head + "m{1a=\"x\"} 1\n", "invalid label name"},
           {head + "m{__a=\"x\"} 1\n", "reserved"},
           {head + "m one\n", "invalid value"},
           {head + "m 1 12x\n", "timestamp"},
           {head + "m 1\nm 2\n", "given twice"},
           {head + "m{a=\"a\"} 1\n# HELP n N.\n# TYPE n gauge\nn 1\nm{a=\"b\"} 2\n", "contiguous"},
           {"# HELP c C.\n# TYPE c counter\nc -1\n", "negative"},
           {hist + "h_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 3\nh_count 3\n", "!= _count"},
           {hist + "h_bucket{le=\"1\"} 2\nh_bucket{le=\"2\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 3\nh_count 2\n",
            "decrease"},
           {hist + "h_bucket{le=\"2\"} 1\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",
            "do not increase"},
           {hist + "h_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n", "+Inf"},
           {hist + "h_bucket{le=\"+Inf\"} 1\nh_count 1\n", "lacks _sum"},
           {hist + "h 1\n", "without _bucket"},
           {hist + "h_bucket 1\n", "without an le"},
       }) {
    absl::Status st = CheckExposition(c.text);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(st.message(), HasSubstr(c.why)) << c.text;
  }
}

TEST(ExpositionCheckTest, AcceptsCommentsTimestampsAndSpecialValues) {
  EXPECT_TRUE(CheckExposition("").ok());
  const std::string text =
      "# a free comment\n"
      "# HELP m Help with \\\\ and \\n.\n# TYPE m gauge\n"
      "m{a=\"x\",} 1 1700000000000\nm{a=\"y\"} NaN\nm{a=\"z\"} -Inf\nm{a=\"w\"} 1.5e-3\n";
  EXPECT_TRUE(CheckExposition(text).ok()) << CheckExposition(text);
}

}  // namespace
}  // namespace berth::metrics
