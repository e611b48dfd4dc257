#include "api/codec.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <regex>
#include <sstream>

#include "common/strings.h"
#include "yaml-cpp/eventhandler.h"
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
  static const std::regex re(
      R"([-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?|[-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN))");
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
    errno = 0;
    const double d = std::strtod(s.c_str(), nullptr);
    if (errno == ERANGE || !std::isfinite(d)) return s;  // beyond a double: keep the text
    return d;
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
      if (tag == "tag:yaml.org,2002:int" || tag == "tag:yaml.org,2002:float" || tag == "tag:yaml.org,2002:bool" ||
          tag == "tag:yaml.org,2002:null") {
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

// Byte offset of the first invalid UTF-8 sequence, or npos.
size_t InvalidUtf8At(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    if (n == 0 || i + n > s.size()) return i;
    uint32_t cp = n == 1 ? c : c & (0x7f >> n);
    for (size_t k = 1; k < n; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc >> 6) != 0x2) return i;
      cp = (cp << 6) | (cc & 0x3f);
    }
    // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
    if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || (cp >= 0xd800 && cp <= 0xdfff) ||
        cp > 0x10ffff) {
      return i;
    }
    i += n;
  }
  return std::string_view::npos;
}

bool HasControl(const std::string& s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return true;
  }
  return false;
}

// Splits a stream at "---" document markers (column 0, alone or followed by
// a space); returns each document's text and its first line number.
std::vector<std::pair<std::string, int>> SplitDocuments(std::string_view text) {
  std::vector<std::pair<std::string, int>> out;
  std::string current;
  int line = 1, start = 1;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view l = text.substr(pos, end - pos);
    if (l == "---" || l.starts_with("--- ") || l == "---\r") {
      out.emplace_back(std::move(current), start);
      current.clear();
      start = line + 1;
      // Content after "--- " on the same line belongs to the new document.
      if (l.size() > 4) current.append(l.substr(4)).push_back('\n');
    } else {
      current.append(l).push_back('\n');
    }
    ++line;
    pos = end + 1;
  }
  out.emplace_back(std::move(current), start);
  return out;
}

// Counts nothing; only drives the parser.
class NullHandler final : public YAML::EventHandler {
 public:
  // YAML::EventHandler
  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

// YAML 1.1 timestamps (2001-12-14, 2001-12-14t21:59:43.10-05:00): readers
// such as PyYAML would load them as dates; go-yaml quotes them too.
bool LooksLikeTimestamp(const std::string& s) {
  auto digits = [&](size_t from, size_t n) {
    if (from + n > s.size()) return false;
    for (size_t i = from; i < from + n; ++i) {
      if (!std::isdigit(static_cast<unsigned char>(s[i]))) return false;
    }
    return true;
  };
  return s.size() >= 8 && digits(0, 4) && s[4] == '-' && std::isdigit(static_cast<unsigned char>(s[5]));
}

bool NeedsQuotes(const std::string& s) {
  if (s.empty()) return true;
  if (LooksLikeTimestamp(s)) return true;
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
      if (HasControl(s)) {
        out << YAML::DoubleQuoted << s;  // escapes: \n, \t, \x03, ...
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
        if (HasControl(k)) {
          out << YAML::DoubleQuoted << k;
        } else if (NeedsQuotes(k)) {
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
  if (size_t bad = InvalidUtf8At(text); bad != std::string_view::npos) {
    return absl::InvalidArgumentError(StrCat("input is not valid UTF-8 (byte ", bad, ")"));
  }
  // YAML streams are printable text: control characters other than tab and
  // line breaks may only appear escaped inside double-quoted strings.
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f) {
      return absl::InvalidArgumentError(
          StrCat("input contains control character 0x", fmt::format("{:02x}", c), " at byte ", i));
    }
  }
  // yaml-cpp 0.7's LoadAll loops forever on some malformed streams (a stray
  // ',' makes its parser stop advancing; found by tests/fuzz/codec_fuzz), so
  // berth splits documents itself and checks that each chunk parses to
  // exactly one document with a bounded number of parser calls.
  std::vector<YAML::Node> docs;
  int first_line = 1;
  for (const auto& [chunk, line] : SplitDocuments(text)) {
    try {
      std::istringstream in(chunk);
      YAML::Parser parser(in);
      NullHandler events;
      if (parser.HandleNextDocument(events) && parser.HandleNextDocument(events)) {
        return absl::InvalidArgumentError(StrCat("invalid YAML in the document starting at line ", line,
                                                 ": content the parser cannot place (a stray ',' or ']'?)"));
      }
      docs.push_back(YAML::Load(chunk));
    } catch (const YAML::Exception& e) {
      return absl::InvalidArgumentError(
          StrCat("invalid YAML at line ", line + e.mark.line, ", column ", e.mark.column + 1, ": ", e.msg));
    }
    first_line = line;
  }
  (void)first_line;
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

absl::StatusOr<std::optional<ManifestReader::Document>> ManifestReader::Next() {
  if (done_) return std::nullopt;
  Document doc{.line = carry_line_, .objects = {}};
  std::string text = std::move(carry_);
  carry_.clear();
  for (std::string l; !done_;) {
    if (!std::getline(in_, l)) {
      done_ = true;
      break;
    }
    if (size_t bad = InvalidUtf8At(l); bad != std::string_view::npos) {
      return absl::InvalidArgumentError(StrCat("input is not valid UTF-8 (byte ", bytes_ + bad, ")"));
    }
    for (size_t i = 0; i < l.size(); ++i) {
      const auto c = static_cast<unsigned char>(l[i]);
      if ((c < 0x20 && c != '\t' && c != '\r') || c == 0x7f) {
        return absl::InvalidArgumentError(
            StrCat("input contains control character 0x", fmt::format("{:02x}", c), " at byte ", bytes_ + i));
      }
    }
    bytes_ += l.size() + 1;
    const int number = line_++;
    if (l == "---" || l.starts_with("--- ") || l == "---\r") {
      carry_line_ = number + 1;
      // Content after "--- " on the same line belongs to the next document.
      if (l.size() > 4) carry_.append(l.substr(4)).push_back('\n');
      break;
    }
    text.append(l).push_back('\n');
  }
  ++index_;
  try {
    std::istringstream in(text);
    YAML::Parser parser(in);
    NullHandler events;
    if (parser.HandleNextDocument(events) && parser.HandleNextDocument(events)) {
      return absl::InvalidArgumentError(StrCat("invalid YAML in the document starting at line ", doc.line,
                                               ": content the parser cannot place (a stray ',' or ']'?)"));
    }
    auto value = ToJson(YAML::Load(text));
    if (!value.ok()) return absl::InvalidArgumentError(StrCat("document ", index_, ": ", value.status().message()));
    if (value->is_null()) return doc;
    if (!value->is_object()) return absl::InvalidArgumentError(StrCat("document ", index_, " is not a mapping"));
    std::string kind;
    if (auto it = value->find("kind"); it != value->end() && it->is_string()) kind = it->get<std::string>();
    if (kind.size() >= 4 && kind.ends_with("List") && value->contains("items")) {
      if (!(*value)["items"].is_array()) {
        return absl::InvalidArgumentError(StrCat("document ", index_, ": items must be a list"));
      }
      for (auto& item : (*value)["items"]) {
        if (!item.is_object()) {
          return absl::InvalidArgumentError(StrCat("document ", index_, ": list items must be mappings"));
        }
        doc.objects.push_back(std::move(item));
      }
      return doc;
    }
    doc.objects.push_back(std::move(*value));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        StrCat("invalid YAML at line ", doc.line + e.mark.line, ", column ", e.mark.column + 1, ": ", e.msg));
  }
  return doc;
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
