#include "api/selector.h"

#include <algorithm>
#include <cctype>

#include "common/strings.h"

namespace berth::api {
namespace {

bool IsAlnum(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }

// [A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])? of at most 63 characters.
bool IsQualifiedName(std::string_view s) {
  if (s.empty() || s.size() > 63 || !IsAlnum(s.front()) || !IsAlnum(s.back())) return false;
  for (char c : s) {
    if (!IsAlnum(c) && c != '-' && c != '_' && c != '.') return false;
  }
  return true;
}

// A DNS-1123 subdomain of at most 253 characters.
bool IsDnsSubdomain(std::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  for (std::string_view label : Split(s, '.')) {
    if (label.empty() || label.size() > 63) return false;
    if (!std::islower(static_cast<unsigned char>(label.front())) &&
        !std::isdigit(static_cast<unsigned char>(label.front()))) {
      return false;
    }
    for (char c : label) {
      if (!(std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '-')) {
        return false;
      }
    }
    if (label.back() == '-') return false;
  }
  return true;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

}  // namespace

absl::Status ValidateLabelKey(std::string_view key) {
  std::string_view name = key;
  if (size_t slash = key.find('/'); slash != std::string_view::npos) {
    if (!IsDnsSubdomain(key.substr(0, slash))) {
      return absl::InvalidArgumentError(StrCat("label key \"", key, "\": prefix must be a DNS subdomain"));
    }
    name = key.substr(slash + 1);
  }
  if (!IsQualifiedName(name)) {
    return absl::InvalidArgumentError(StrCat(
        "label key \"", key, "\": name must be 1-63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric"));
  }
  return absl::OkStatus();
}

absl::Status ValidateLabelValue(std::string_view value) {
  if (!value.empty() && !IsQualifiedName(value)) {
    return absl::InvalidArgumentError(
        StrCat("label value \"", value,
               "\": must be empty or 1-63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric"));
  }
  return absl::OkStatus();
}

absl::StatusOr<LabelSelector> LabelSelector::Parse(std::string_view text) {
  LabelSelector sel;
  text = Trim(text);
  if (text.empty()) return sel;
  // Split on commas that are not inside parentheses.
  std::vector<std::string_view> parts;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || (text[i] == ',' && depth == 0)) {
      parts.push_back(Trim(text.substr(start, i - start)));
      start = i + 1;
    } else if (text[i] == '(') {
      ++depth;
    } else if (text[i] == ')') {
      --depth;
    }
  }
  auto bad = [&](std::string_view part, std::string_view why) {
    return absl::InvalidArgumentError(StrCat("label selector \"", text, "\": \"", part, "\" ", why));
  };
  for (std::string_view p : parts) {
    if (p.empty()) return bad(p, "is empty");
    Requirement r;
    if (p.front() == '!') {
      r.key = std::string(Trim(p.substr(1)));
      r.op = Op::kDoesNotExist;
    } else if (size_t ne = p.find("!="); ne != std::string_view::npos) {
      r.key = std::string(Trim(p.substr(0, ne)));
      r.op = Op::kNotIn;
      r.values = {std::string(Trim(p.substr(ne + 2)))};
    } else if (size_t eq = p.find('='); eq != std::string_view::npos) {
      r.key = std::string(Trim(p.substr(0, eq)));
      std::string_view v = p.substr(eq + 1);
      if (!v.empty() && v.front() == '=') v.remove_prefix(1);  // "=="
      r.op = Op::kIn;
      r.values = {std::string(Trim(v))};
    } else if (size_t sp = p.find(' '); sp != std::string_view::npos) {
      r.key = std::string(Trim(p.substr(0, sp)));
      std::string_view rest = Trim(p.substr(sp + 1));
      if (rest.starts_with("notin")) {
        r.op = Op::kNotIn;
        rest = Trim(rest.substr(5));
      } else if (rest.starts_with("in")) {
        r.op = Op::kIn;
        rest = Trim(rest.substr(2));
      } else {
        return bad(p, "has an unknown operator (want =, ==, !=, in, notin, or !key)");
      }
      if (rest.size() < 2 || rest.front() != '(' || rest.back() != ')') {
        return bad(p, "needs a parenthesized value list");
      }
      for (std::string_view v : Split(rest.substr(1, rest.size() - 2), ',')) {
        r.values.emplace_back(Trim(v));
      }
    } else {
      r.key = std::string(p);
      r.op = Op::kExists;
    }
    if (absl::Status st = ValidateLabelKey(r.key); !st.ok()) return st;
    for (const auto& v : r.values) {
      if (absl::Status st = ValidateLabelValue(v); !st.ok()) return st;
    }
    std::sort(r.values.begin(), r.values.end());
    sel.requirements_.push_back(std::move(r));
  }
  return sel;
}

absl::StatusOr<LabelSelector> LabelSelector::FromJson(const nlohmann::json& j) {
  LabelSelector sel;
  if (j.is_null()) return sel;
  if (!j.is_object()) return absl::InvalidArgumentError("selector must be an object");
  if (auto it = j.find("matchLabels"); it != j.end() && !it->is_null()) {
    if (!it->is_object()) return absl::InvalidArgumentError("matchLabels must be an object");
    for (const auto& [k, v] : it->items()) {
      if (!v.is_string()) return absl::InvalidArgumentError("matchLabels values must be strings");
      if (absl::Status st = ValidateLabelKey(k); !st.ok()) return st;
      if (absl::Status st = ValidateLabelValue(v.get<std::string>()); !st.ok()) return st;
      sel.requirements_.push_back({k, Op::kIn, {v.get<std::string>()}});
    }
  }
  if (auto it = j.find("matchExpressions"); it != j.end() && !it->is_null()) {
    if (!it->is_array()) return absl::InvalidArgumentError("matchExpressions must be a list");
    for (const auto& e : *it) {
      if (!e.is_object() || !e.contains("key") || !e.contains("operator")) {
        return absl::InvalidArgumentError("matchExpressions entries need key and operator");
      }
      Requirement r;
      r.key = e["key"].get<std::string>();
      const std::string op = e["operator"].get<std::string>();
      if (e.contains("values") && e["values"].is_array()) {
        for (const auto& v : e["values"]) r.values.push_back(v.get<std::string>());
      }
      if (op == "In" || op == "NotIn") {
        r.op = op == "In" ? Op::kIn : Op::kNotIn;
        if (r.values.empty()) {
          return absl::InvalidArgumentError(StrCat("matchExpressions ", op, " needs values"));
        }
      } else if (op == "Exists" || op == "DoesNotExist") {
        r.op = op == "Exists" ? Op::kExists : Op::kDoesNotExist;
        if (!r.values.empty()) {
          return absl::InvalidArgumentError(StrCat("matchExpressions ", op, " takes no values"));
        }
      } else {
        return absl::InvalidArgumentError(
            StrCat("matchExpressions operator \"", op, "\" is not In, NotIn, Exists or DoesNotExist"));
      }
      if (absl::Status st = ValidateLabelKey(r.key); !st.ok()) return st;
      std::sort(r.values.begin(), r.values.end());
      sel.requirements_.push_back(std::move(r));
    }
  }
  return sel;
}

bool LabelSelector::Matches(const std::map<std::string, std::string>& labels) const {
  for (const auto& r : requirements_) {
    auto it = labels.find(r.key);
    const bool has = it != labels.end();
    switch (r.op) {
      case Op::kExists:
        if (!has) return false;
        break;
      case Op::kDoesNotExist:
        if (has) return false;
        break;
      case Op::kIn:
        if (!has || !std::binary_search(r.values.begin(), r.values.end(), it->second)) return false;
        break;
      case Op::kNotIn:
        if (has && std::binary_search(r.values.begin(), r.values.end(), it->second)) return false;
        break;
    }
  }
  return true;
}

std::string LabelSelector::ToString() const {
  std::string out;
  for (const auto& r : requirements_) {
    if (!out.empty()) out += ',';
    switch (r.op) {
      case Op::kExists:
        out += r.key;
        break;
      case Op::kDoesNotExist:
        out += "!" + r.key;
        break;
      case Op::kIn:
      case Op::kNotIn:
        if (r.values.size() == 1) {
          out += r.key + (r.op == Op::kIn ? "=" : "!=") + r.values[0];
        } else {
          out += r.key + (r.op == Op::kIn ? " in (" : " notin (");
          for (size_t i = 0; i < r.values.size(); ++i) out += (i ? "," : "") + r.values[i];
          out += ")";
        }
        break;
    }
  }
  return out;
}

}  // namespace berth::api
