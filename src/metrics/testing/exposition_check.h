// Test helper: a strict checker of the Prometheus text exposition format
// 0.0.4, stricter than Prometheus' own parser where berth wants more:
//
//  - every line ends in '\n'; '#' lines are HELP, TYPE or free comments;
//  - metric names [a-zA-Z_:][a-zA-Z0-9_:]*, label names [a-zA-Z_][a-zA-Z0-9_]*
//    (no "__" prefix), label values quoted with only \\, \" and \n escapes,
//    no label given twice, values Go-float syntax (incl. +Inf, -Inf, NaN),
//    optional integer timestamp;
//  - every family has exactly one HELP and one TYPE, both before its first
//    sample, and its samples are contiguous (a family is not reopened);
//  - counter and gauge samples carry the family's name; counters are >= 0;
//  - histograms: only <name>_bucket (with an `le` label), <name>_sum and
//    <name>_count; per label set the `le` bounds increase, the cumulative
//    counts do not decrease, `le="+Inf"` is present and equals _count, and
//    _sum and _count are present;
//  - no series (name + labels) appears twice.
//
// CheckExposition returns INVALID_ARGUMENT naming the line and the rule;
// ParseExposition also returns the samples for assertions.
#pragma once

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fmt/format.h"

namespace berth::metrics::testing {

struct ParsedSample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

namespace internal {

inline bool NameStart(char c, bool colon) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':');
}
inline bool NameChar(char c, bool colon) { return NameStart(c, colon) || (c >= '0' && c <= '9'); }

// Reads a name at s[*i]; empty if none.
inline std::string ReadName(std::string_view s, size_t* i, bool colon) {
  size_t start = *i;
  if (*i >= s.size() || !NameStart(s[*i], colon)) return "";
  while (*i < s.size() && NameChar(s[*i], colon)) ++*i;
  return std::string(s.substr(start, *i - start));
}

// Go's strconv.ParseFloat syntax as Prometheus accepts it (decimal, with
// exponent; Inf/NaN spellings).
inline bool ParseValue(std::string_view t, double* out) {
  if (t == "+Inf" || t == "Inf" || t == "+inf" || t == "inf") {
    *out = HUGE_VAL;
    return true;
  }
  if (t == "-Inf" || t == "-inf") {
    *out = -HUGE_VAL;
    return true;
  }
  if (t == "NaN" || t == "nan") {
    *out = NAN;
    return true;
  }
  if (t.empty()) return false;
  for (char c : t) {
    if (!((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-')) {
      return false;
    }
  }
  std::string copy(t);
  char* end = nullptr;
  errno = 0;
  *out = std::strtod(copy.c_str(), &end);
  return end == copy.c_str() + copy.size() && errno == 0;
}

struct Family {
  std::string type;
  bool help = false;
  bool has_samples = false;
  bool closed = false;
};

// Per histogram label set (without `le`).
struct HistogramSeries {
  std::vector<std::pair<double, double>> buckets;  // (le, cumulative)
  bool has_sum = false;
  bool has_count = false;
  double count = 0;
  size_t line = 0;
};

inline std::string LabelKey(const std::map<std::string, std::string>& labels) {
  std::string k;
  for (const auto& [n, v] : labels) k += n + "=" + v + "\x1f";
  return k;
}

}  // namespace internal

inline absl::StatusOr<std::vector<ParsedSample>> ParseExposition(std::string_view text) {
  using namespace internal;  // NOLINT: helpers of this header only
  std::vector<ParsedSample> samples;
  std::map<std::string, Family> families;
  std::string current;  // the family whose samples are being read
  std::set<std::string> series;
  std::map<std::string, std::map<std::string, HistogramSeries>> histograms;
  size_t line_no = 0;
  auto fail = [&](const std::string& why) {
    return absl::InvalidArgumentError(fmt::format("line {}: {}", line_no, why));
  };
  if (!text.empty() && text.back() != '\n') {
    line_no = static_cast<size_t>(std::count(text.begin(), text.end(), '\n')) + 1;
    return fail("the last line does not end in a newline");
  }
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t nl = text.find('\n', pos);
    std::string_view line = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    if (line.empty()) continue;
    if (line.front() == '#') {
      // "# HELP name text" / "# TYPE name type" / any other comment.
      std::string_view rest = line.substr(1);
      if (!rest.starts_with(" HELP ") && !rest.starts_with(" TYPE ")) continue;
      const bool help = rest.starts_with(" HELP ");
      rest.remove_prefix(6);
      size_t i = 0;
      std::string name = ReadName(rest, &i, true);
      if (name.empty()) return fail("HELP/TYPE without a valid metric name");
      if (i != rest.size() && rest[i] != ' ') return fail("invalid metric name in HELP/TYPE");
      std::string_view arg = i < rest.size() ? rest.substr(i + 1) : std::string_view();
      Family& f = families[name];
      if (f.has_samples) return fail(fmt::format("{} for {} after its samples", help ? "HELP" : "TYPE", name));
      if (help) {
        if (f.help) return fail("second HELP for " + name);
        for (size_t k = 0; k < arg.size(); ++k) {
          if (arg[k] == '\\' && (k + 1 >= arg.size() || (arg[k + 1] != '\\' && arg[k + 1] != 'n'))) {
            return fail("invalid escape in HELP of " + name);
          }
          if (arg[k] == '\\') ++k;
        }
        f.help = true;
      } else {
        if (!f.type.empty()) return fail("second TYPE for " + name);
        if (arg != "counter" && arg != "gauge" && arg != "histogram" && arg != "summary" && arg != "untyped") {
          return fail(fmt::format("unknown type \"{}\" for {}", arg, name));
        }
        f.type = std::string(arg);
      }
      continue;
    }
    // A sample: name{labels} value [timestamp]
    ParsedSample s;
    size_t i = 0;
    s.name = ReadName(line, &i, true);
    if (s.name.empty()) return fail("a sample must start with a valid metric name");
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (true) {
        if (i < line.size() && line[i] == '}') {
          ++i;
          break;
        }
        std::string label = ReadName(line, &i, false);
        if (label.empty()) return fail("invalid label name in " + s.name);
        if (label.starts_with("__")) return fail("reserved label name " + label);
        if (i + 1 >= line.size() || line[i] != '=' || line[i + 1] != '"') {
          return fail("label " + label + " must be followed by =\"");
        }
        i += 2;
        std::string value;
        bool closed = false;
        while (i < line.size()) {
          char c = line[i++];
          if (c == '"') {
            closed = true;
            break;
          }
          if (c == '\\') {
            if (i >= line.size()) break;
            char e = line[i++];
            if (e == '\\')
              value += '\\';
            else if (e == '"')
              value += '"';
            else if (e == 'n')
              value += '\n';
            else
              return fail(fmt::format("invalid escape \\{} in label {}", e, label));
          } else {
            value += c;
          }
        }
        if (!closed) return fail("unterminated value of label " + label);
        if (!s.labels.emplace(label, value).second) return fail("label " + label + " given twice");
        if (i < line.size() && line[i] == ',') {
          ++i;
          continue;
        }
        if (i < line.size() && line[i] == '}') continue;
        return fail("expected ',' or '}' after label " + label);
      }
    }
    if (i >= line.size() || line[i] != ' ') return fail("expected a space before the value of " + s.name);
    std::string_view rest = line.substr(i + 1);
    std::string_view value_text = rest.substr(0, rest.find(' '));
    if (!ParseValue(value_text, &s.value)) return fail(fmt::format("invalid value \"{}\"", value_text));
    if (value_text.size() < rest.size()) {
      std::string_view ts = rest.substr(value_text.size() + 1);
      if (ts.starts_with('-')) ts.remove_prefix(1);
      if (ts.empty() || ts.find_first_not_of("0123456789") != std::string_view::npos) {
        return fail("invalid timestamp");
      }
    }

    // Which family the sample belongs to.
    std::string family = s.name;
    std::string suffix;
    for (const char* sfx : {"_bucket", "_sum", "_count"}) {
      if (s.name.ends_with(sfx)) {
        std::string base = s.name.substr(0, s.name.size() - std::string_view(sfx).size());
        auto it = families.find(base);
        if (it != families.end() && (it->second.type == "histogram" || it->second.type == "summary")) {
          family = base;
          suffix = sfx;
        }
      }
    }
    auto fit = families.find(family);
    if (fit == families.end() || fit->second.type.empty()) return fail("sample " + s.name + " has no TYPE before it");
    if (!fit->second.help) return fail("sample " + s.name + " has no HELP before it");
    Family& f = fit->second;
    if (f.closed) return fail("family " + family + " is split: its samples must be contiguous");
    if (current != family) {
      if (!current.empty()) families[current].closed = true;
      current = family;
    }
    f.has_samples = true;
    if (!series.insert(s.name + "\x1e" + LabelKey(s.labels)).second) {
      return fail("series " + s.name + " given twice");
    }
    if (f.type == "counter" || f.type == "gauge") {
      if (s.name != family) return fail("sample " + s.name + " in family " + family);
      if (f.type == "counter" && !(s.value >= 0)) return fail("counter " + s.name + " is negative or NaN");
    }
    if (f.type == "histogram") {
      if (suffix.empty()) return fail("histogram " + family + " has a sample without _bucket/_sum/_count");
      auto labels = s.labels;
      if (suffix == "_bucket") {
        auto le = labels.find("le");
        if (le == labels.end()) return fail(s.name + " without an le label");
        double bound = 0;
        if (!ParseValue(le->second, &bound) || std::isnan(bound)) return fail("invalid le \"" + le->second + "\"");
        labels.erase(le);
        HistogramSeries& h = histograms[family][LabelKey(labels)];
        h.line = line_no;
        if (!h.buckets.empty()) {
          if (!(bound > h.buckets.back().first)) return fail("le bounds of " + family + " do not increase");
          if (s.value < h.buckets.back().second) return fail("bucket counts of " + family + " decrease");
        }
        h.buckets.emplace_back(bound, s.value);
      } else {
        if (labels.count("le") != 0) return fail(s.name + " must not have an le label");
        HistogramSeries& h = histograms[family][LabelKey(labels)];
        if (suffix == "_sum") h.has_sum = true;
        if (suffix == "_count") {
          h.has_count = true;
          h.count = s.value;
        }
      }
    }
    samples.push_back(std::move(s));
  }
  for (const auto& [family, by_labels] : histograms) {
    for (const auto& [key, h] : by_labels) {
      line_no = h.line;
      if (h.buckets.empty() || !std::isinf(h.buckets.back().first)) {
        return fail("histogram " + family + " has no le=\"+Inf\" bucket");
      }
      if (!h.has_sum || !h.has_count) return fail("histogram " + family + " lacks _sum or _count");
      if (h.buckets.back().second != h.count) {
        return fail(fmt::format("histogram {}: +Inf bucket {} != _count {}", family, h.buckets.back().second, h.count));
      }
    }
  }
  return samples;
}

inline absl::Status CheckExposition(std::string_view text) { return ParseExposition(text).status(); }

// The value of the one sample named `name` whose labels include `labels`;
// NOT_FOUND if none, FAILED_PRECONDITION if several match.
inline absl::StatusOr<double> FindSample(const std::vector<ParsedSample>& samples, const std::string& name,
                                         const std::map<std::string, std::string>& labels = {}) {
  const ParsedSample* found = nullptr;
  for (const auto& s : samples) {
    if (s.name != name) continue;
    bool match = true;
    for (const auto& [k, v] : labels) {
      auto it = s.labels.find(k);
      match = match && it != s.labels.end() && it->second == v;
    }
    if (!match) continue;
    if (found != nullptr) return absl::FailedPreconditionError("several samples match " + name);
    found = &s;
  }
  if (found == nullptr) return absl::NotFoundError("no sample " + name);
  return found->value;
}

}  // namespace berth::metrics::testing
