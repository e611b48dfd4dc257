#include "api/codec.h"

#include <cmath>
#include <regex>

#include "common/strings.h"
#include "yaml-cpp/yaml.h"

namespace berth::api {
namespace {

using nlohmann::json;

bool OneOf(const std::string& s, std::initializer_list<const char*> words) {
  for (const char* w : words) {
    if (s == w) return true;
  }
  return false;
}

bool IsNullWord(const std::string& s) { return OneOf(s, {"", "~", "null", "Null", "NULL"}); }
bool IsTrueWord(const std::string& s) {
  return OneOf(s, {"y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"});
}
bool IsFalseWord(const std::string& s) {
  return OneOf(s, {"n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"});
}

const std::regex& IntPattern() {
  static const std::regex re(R"([-+]?(0|[1-9][0-9_]*)|0x[0-9a-fA-F_]+|0o?[0-7_]+)");
  return re;
}
const std::regex& FloatPattern() {
  static const std::regex re(R"([-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?|[-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN))");
  return re;
}

// A plain (unquoted) scalar as YAML 1.1 resolves it.
json ResolvePlain(const std::string& s) {
  if (IsNullWord(s)) return nullptr;
  if (IsTrueWord(s)) return true;
  if (IsFalseWord(s)) return false;
  if (std::regex_match(s, IntPattern())) {
    std::string digits;
    for (char c : s) {
      if (c != '_') digits += c;
    }
    try {
      size_t used = 0;
      int base = 10;
      std::string body = digits;
      bool neg = false;
      if (!body.empty() && (body[0] == '-' || body[0] == '+')) {
        neg = body[0] == '-';
        body = body.substr(1);
      }
      if (body.rfind("0x", 0) == 0) {
        base = 16;
        body = body.substr(2);
      } else if (body.rfind("0o", 0) == 0) {
        base = 8;
        body = body.substr(2);
      } else if (body.size() > 1 && body[0] == '0') {
        base = 8;
      }
      long long v = std::stoll(body, &used, base);
      if (used == body.size()) return neg ? -v : v;
    } catch (const std::exception&) {
      // Too large for int64: fall through to float.
    }
  }
  if (std::regex_match(s, FloatPattern())) {
    if (s.find("inf") != std::string::npos || s.find("Inf") != std::string::npos ||
        s.find("INF") != std::string::npos || s.find("nan") != std::string::npos ||
        s.find("NaN") != std::string::npos || s.find("NAN") != std::string::npos) {
      return s;  // JSON has no infinities or NaN; keep the text
    }
    return std::stod(s);
  }
  return s;
}

absl::StatusOr<json> ToJson(const YAML::Node& node, int depth = 0) {
  if (depth > 100) return absl::InvalidArgumentError("document nests too deeply");
  switch (node.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null:
      return json(nullptr);
    case YAML::NodeType::Scalar: {
      const std::string& tag = node.Tag();
      const std::string& s = node.Scalar();
      if (tag == "!" || tag == "tag:yaml.org,2002:str") return json(s);
      if (tag == "?" || tag.empty()) return ResolvePlain(s);
      if (tag == "tag:yaml.org,2002:int" || tag == "tag:yaml.org,2002:float" ||
          tag == "tag:yaml.org,2002:bool" || tag == "tag:yaml.org,2002:null") {
        return ResolvePlain(s);
      }
      return json(s);
    }
    case YAML::NodeType::Sequence: {
      json arr = json::array();
      for (const auto& item : node) {
        auto v = ToJson(item, depth + 1);
        if (!v.ok()) return v;
        arr.push_back(std::move(*v));
      }
      return arr;
    }
    case YAML::NodeType::Map: {
      json obj = json::object();
      for (const auto& kv : node) {
        if (!kv.first.IsScalar()) return absl::InvalidArgumentError("mapping keys must be scalars");
        auto v = ToJson(kv.second, depth + 1);
        if (!v.ok()) return v;
        const std::string key = kv.first.Scalar();
        if (obj.contains(key)) {
          return absl::InvalidArgumentError(StrCat("duplicate key \"", key, "\""));
        }
        obj[key] = std::move(*v);
      }
      return obj;
    }
  }
  return json(nullptr);
}

bool NeedsQuotes(const std::string& s) {
  if (s.empty()) return true;
  if (ResolvePlain(s).type() != json::value_t::string) return true;
  // Indicators and characters with meaning at the start or anywhere.
  if (std::string_view("-?:,[]{}#&*!|>'\"%@`").find(s.front()) != std::string_view::npos) return true;
  if (s.front() == ' ' || s.back() == ' ') return true;
  if (s.find(": ") != std::string::npos || s.find(" #") != std::string::npos) return true;
  for (char c : s) {
    if (static_cast<unsigned char>(c) < 0x20) return true;
  }
  return false;
}

void Emit(YAML::Emitter& out, const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      out << YAML::Null;
      break;
    case json::value_t::boolean:
      out << (v.get<bool>() ? "true" : "false");
      break;
    case json::value_t::number_integer:
      out << v.get<int64_t>();
      break;
    case json::value_t::number_unsigned:
      out << v.get<uint64_t>();
      break;
    case json::value_t::number_float:
      out << v.dump();
      break;
    case json::value_t::string: {
      const std::string& s = v.get_ref<const std::string&>();
      if (s.find('\n') != std::string::npos) {
        out << YAML::DoubleQuoted << s;
      } else if (NeedsQuotes(s)) {
        out << YAML::SingleQuoted << s;
      } else {
        out << s;
      }
      break;
    }
    case json::value_t::array:
      if (v.empty()) {
        out << YAML::Flow << YAML::BeginSeq << YAML::EndSeq;
        break;
      }
      out << YAML::BeginSeq;
      for (const auto& item : v) Emit(out, item);
      out << YAML::EndSeq;
      break;
    case json::value_t::object:
      if (v.empty()) {
        out << YAML::Flow << YAML::BeginMap << YAML::EndMap;
        break;
      }
      out << YAML::BeginMap;
      for (const auto& [k, item] : v.items()) {
        out << YAML::Key;
        if (NeedsQuotes(k)) {
          out << YAML::SingleQuoted << k;
        } else {
          out << k;
        }
        out << YAML::Value;
        Emit(out, item);
      }
      out << YAML::EndMap;
      break;
    default:
      out << YAML::Null;
  }
}

}  // namespace

absl::StatusOr<std::vector<json>> DecodeManifests(std::string_view text) {
  std::vector<YAML::Node> docs;
  try {
    docs = YAML::LoadAll(std::string(text));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(StrCat("invalid YAML at line ", e.mark.line + 1, ", column ",
                                             e.mark.column + 1, ": ", e.msg));
  }
  std::vector<json> out;
  for (size_t i = 0; i < docs.size(); ++i) {
    auto doc = ToJson(docs[i]);
    if (!doc.ok()) {
      return absl::InvalidArgumentError(StrCat("document ", i + 1, ": ", doc.status().message()));
    }
    if (doc->is_null()) continue;
    if (!doc->is_object()) {
      return absl::InvalidArgumentError(StrCat("document ", i + 1, " is not a mapping"));
    }
    std::string kind;
    if (auto it = doc->find("kind"); it != doc->end() && it->is_string()) kind = it->get<std::string>();
    if (kind.size() >= 4 && kind.ends_with("List") && doc->contains("items")) {
      if (!(*doc)["items"].is_array()) {
        return absl::InvalidArgumentError(StrCat("document ", i + 1, ": items must be a list"));
      }
      for (auto& item : (*doc)["items"]) {
        if (!item.is_object()) {
          return absl::InvalidArgumentError(StrCat("document ", i + 1, ": list items must be mappings"));
        }
        out.push_back(std::move(item));
      }
      continue;
    }
    out.push_back(std::move(*doc));
  }
  return out;
}

std::string EncodeYaml(const json& value) {
  YAML::Emitter out;
  out.SetIndent(2);
  out.SetSeqFormat(YAML::Block);
  out.SetMapFormat(YAML::Block);
  Emit(out, value);
  std::string s = out.c_str();
  if (s.empty() || s.back() != '\n') s += '\n';
  return s;
}

}  // namespace berth::api
