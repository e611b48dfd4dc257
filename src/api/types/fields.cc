#include "api/types/fields.h"

#include <cmath>
#include <limits>
#include <vector>

#include "api/schema.h"
#include "common/status.h"
#include "common/strings.h"

namespace berth::api::types {

std::string Path::ToString() const {
  std::vector<const Path*> chain;
  for (const Path* p = this; p != nullptr; p = p->parent_) chain.push_back(p);
  std::string out;
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    const Path& p = **it;
    if (p.is_index_) {
      out += StrCat("[", std::to_string(p.index_), "]");
    } else if (p.is_map_key_) {
      out += StrCat("[", p.key_, "]");
    } else if (!p.key_.empty()) {
      if (!out.empty()) out += ".";
      out += p.key_;
    }
  }
  return out.empty() ? "<object>" : out;
}

namespace internal {
namespace {

// A short rendering of a bad value for the message.
std::string Shown(const Json& v) {
  std::string s = v.dump();
  if (s.size() > 64) s = s.substr(0, 61) + "...";
  return s;
}

absl::Status Invalid(const Json& v, std::string_view detail, const Path& path) {
  return absl::InvalidArgumentError(StrCat(path.ToString(), ": Invalid value: ", Shown(v), ": ", detail));
}

// An integer (integral floats as the schema admits them), within [lo, hi].
absl::Status DecodeInt(const Json& j, int64_t lo, int64_t hi, std::string_view want, int64_t& out, const Path& path) {
  if (j.is_number_unsigned()) {
    uint64_t u = j.get<uint64_t>();
    if (u > static_cast<uint64_t>(hi)) return Invalid(j, StrCat("out of range for ", want), path);
    out = static_cast<int64_t>(u);
    return absl::OkStatus();
  }
  if (j.is_number_integer()) {
    out = j.get<int64_t>();
  } else if (j.is_number_float()) {
    double d = j.get<double>();
    if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) >= 9.2e18) return TypeError(j, want, path);
    out = static_cast<int64_t>(d);
  } else {
    return TypeError(j, want, path);
  }
  if (out < lo || out > hi) return Invalid(j, StrCat("out of range for ", want), path);
  return absl::OkStatus();
}

}  // namespace

absl::Status TypeError(const Json& v, std::string_view want, const Path& path) {
  return Invalid(v, StrCat("expected ", want, ", got ", JsonTypeName(v)), path);
}

absl::Status DecodeScalar(const Json& j, std::string& out, const Path& path) {
  if (!j.is_string()) return TypeError(j, "string", path);
  out = j.get_ref<const std::string&>();
  return absl::OkStatus();
}

absl::Status DecodeScalar(const Json& j, bool& out, const Path& path) {
  if (!j.is_boolean()) return TypeError(j, "bool", path);
  out = j.get<bool>();
  return absl::OkStatus();
}

absl::Status DecodeScalar(const Json& j, int64_t& out, const Path& path) {
  return DecodeInt(j, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), "int64", out, path);
}

absl::Status DecodeScalar(const Json& j, int32_t& out, const Path& path) {
  int64_t v = 0;
  BERTH_RETURN_IF_ERROR(
      DecodeInt(j, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max(), "int32", v, path));
  out = static_cast<int32_t>(v);
  return absl::OkStatus();
}

absl::Status DecodeScalar(const Json& j, Quantity& out, const Path& path) {
  std::string text;
  if (j.is_string()) {
    text = j.get_ref<const std::string&>();
  } else if (j.is_number()) {
    text = j.dump();
  } else {
    return TypeError(j, "quantity", path);
  }
  auto q = Quantity::Parse(text);
  if (!q.ok()) {
    return Invalid(j, "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
                   path);
  }
  out = *q;
  return absl::OkStatus();
}

std::string ObjectPrefix(std::string_view kind, const Json& j) {
  std::string name, ns;
  if (j.is_object()) {
    auto meta = j.find("metadata");
    if (meta != j.end() && meta->is_object()) {
      if (auto n = meta->find("name"); n != meta->end() && n->is_string()) name = n->get<std::string>();
      if (auto n = meta->find("namespace"); n != meta->end() && n->is_string()) ns = n->get<std::string>();
    }
  }
  if (name.empty()) return StrCat(kind, ": ");
  return StrCat(kind, " ", ns.empty() ? name : StrCat(ns, "/", name), ": ");
}

}  // namespace internal
}  // namespace berth::api::types
