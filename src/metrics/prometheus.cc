#include "metrics/prometheus.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "fmt/format.h"

namespace berth::metrics {
namespace {

bool IsNameStart(char c, bool colon) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':');
}
bool IsNameChar(char c, bool colon) { return IsNameStart(c, colon) || (c >= '0' && c <= '9'); }

bool IsValidName(std::string_view name, bool colon) {
  if (name.empty() || !IsNameStart(name.front(), colon)) return false;
  return std::all_of(name.begin(), name.end(), [&](char c) { return IsNameChar(c, colon); });
}

// Names come from the program; a bad one is a bug, not an input error.
void CheckName(std::string_view name, bool metric) {
  if (!(metric ? IsValidMetricName(name) : IsValidLabelName(name))) {
    fmt::print(stderr, "invalid Prometheus {} name \"{}\"\n", metric ? "metric" : "label", name);
    std::abort();
  }
}

void AppendEscaped(std::string* out, std::string_view s, bool quote) {
  for (char c : s) {
    if (c == '\\') {
      out->append("\\\\");
    } else if (c == '\n') {
      out->append("\\n");
    } else if (c == '"' && quote) {
      out->append("\\\"");
    } else {
      out->push_back(c);
    }
  }
}

void AppendLabels(std::string* out, const Labels& labels, const char* le) {
  if (labels.empty() && le == nullptr) return;
  out->push_back('{');
  bool first = true;
  for (const auto& [k, v] : labels) {
    CheckName(k, false);
    if (!first) out->push_back(',');
    first = false;
    out->append(k);
    out->append("=\"");
    AppendEscaped(out, v, true);
    out->push_back('"');
  }
  if (le != nullptr) {
    if (!first) out->push_back(',');
    out->append("le=\"");
    out->append(le);
    out->push_back('"');
  }
  out->push_back('}');
}

void AppendSample(std::string* out, std::string_view name, const Labels& labels, const char* le, double value) {
  out->append(name);
  AppendLabels(out, labels, le);
  out->push_back(' ');
  out->append(FormatValue(value));
  out->push_back('\n');
}

}  // namespace

bool IsValidMetricName(std::string_view name) { return IsValidName(name, true); }

bool IsValidLabelName(std::string_view name) { return IsValidName(name, false) && !name.starts_with("__"); }

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", v);
}

void WriteFamily(std::string* out, std::string_view name, MetricType type, std::string_view help) {
  CheckName(name, true);
  out->append("# HELP ");
  out->append(name);
  out->push_back(' ');
  AppendEscaped(out, help, false);
  out->append("\n# TYPE ");
  out->append(name);
  switch (type) {
    case MetricType::kCounter:
      out->append(" counter\n");
      break;
    case MetricType::kGauge:
      out->append(" gauge\n");
      break;
    case MetricType::kHistogram:
      out->append(" histogram\n");
      break;
  }
}

void WriteSample(std::string* out, std::string_view name, const Labels& labels, double value) {
  CheckName(name, true);
  AppendSample(out, name, labels, nullptr, value);
}

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {
  for (size_t i = 0; i < bounds_.size(); ++i) {
    if (!std::isfinite(bounds_[i]) || (i > 0 && bounds_[i] <= bounds_[i - 1])) {
      fmt::print(stderr, "histogram bounds must be finite and strictly increasing\n");
      std::abort();
    }
  }
}

void Histogram::Observe(double v) {
  // The first bucket whose upper bound is >= v ("le"); +Inf otherwise.
  const size_t i = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  ++counts_[i];
  ++count_;
  sum_ += v;
}

void WriteHistogram(std::string* out, std::string_view name, const Labels& labels, const Histogram& h) {
  CheckName(name, true);
  const std::string base(name);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < h.counts().size(); ++i) {
    cumulative += h.counts()[i];
    const std::string le = i < h.upper_bounds().size() ? FormatValue(h.upper_bounds()[i]) : "+Inf";
    AppendSample(out, base + "_bucket", labels, le.c_str(), static_cast<double>(cumulative));
  }
  AppendSample(out, base + "_sum", labels, nullptr, h.sum());
  AppendSample(out, base + "_count", labels, nullptr, static_cast<double>(h.count()));
}

}  // namespace berth::metrics
