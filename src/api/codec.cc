#include "api/codec.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <map>
#include <regex>

#include "absl/strings/match.h"
#include "common/status.h"
#include "common/strings.h"
#include "yaml-cpp/yaml.h"
#include "yaml.h"

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

// One document's text read with libyaml, the parser go-yaml v2 (Kubernetes'
// YAML reader) was ported from: its events are made into JSON as they come
// (no tree of YAML nodes in between). A plain scalar resolves as YAML 1.1
// does (ResolvePlain); a quoted one, or one tagged "!" or !!str, is a
// string; mapping keys are their scalars' text.
class DocumentReader {
 public:
  // `first_line`: the line the text starts at in its stream (errors).
  DocumentReader(std::string_view text, int first_line) : first_line_(first_line) {
    yaml_parser_initialize(&parser_);
    yaml_parser_set_input_string(&parser_, reinterpret_cast<const unsigned char*>(text.data()), text.size());
    yaml_parser_set_encoding(&parser_, YAML_UTF8_ENCODING);
  }
  ~DocumentReader() { yaml_parser_delete(&parser_); }
  DocumentReader(const DocumentReader&) = delete;
  DocumentReader& operator=(const DocumentReader&) = delete;

  // The document (null when the text holds none); INVALID_ARGUMENT for
  // malformed YAML, or more than one document.
  absl::StatusOr<json> Read() {
    Event ev;
    BERTH_RETURN_IF_ERROR(Next(ev));  // the stream's start
    BERTH_RETURN_IF_ERROR(Next(ev));
    if (ev.e.type == YAML_STREAM_END_EVENT) return json(nullptr);
    if (ev.e.type != YAML_DOCUMENT_START_EVENT) return Unexpected();
    BERTH_RETURN_IF_ERROR(Next(ev));
    BERTH_ASSIGN_OR_RETURN(json doc, Node(ev, 0));
    BERTH_RETURN_IF_ERROR(Next(ev));  // the document's end
    BERTH_RETURN_IF_ERROR(Next(ev));
    if (ev.e.type != YAML_STREAM_END_EVENT) {
      return absl::InvalidArgumentError(StrCat("invalid YAML in the document starting at line ", first_line_,
                                               ": content after the document's end (a stray '...' or '---'?)"));
    }
    return doc;
  }

 private:
  struct Event {
    yaml_event_t e{};
    bool held = false;
    Event() = default;
    Event(const Event&) = delete;
    Event& operator=(const Event&) = delete;
    ~Event() { Release(); }
    void Release() {
      if (held) yaml_event_delete(&e);
      held = false;
    }
  };
  struct Anchored {
    json value;
    std::optional<std::string> scalar;  // a scalar's text (a key may be an alias of one)
    size_t nodes = 0;                   // what an alias of it adds
  };
  // A document may repeat what is anchored (an alias copies it) only so
  // far: a few lines of nested aliases would otherwise expand to gigabytes.
  static constexpr size_t kAliasedNodes = 100'000;

  absl::Status Next(Event& ev) {
    ev.Release();
    if (!yaml_parser_parse(&parser_, &ev.e)) {
      return absl::InvalidArgumentError(StrCat("invalid YAML at line ", first_line_ + parser_.problem_mark.line,
                                               ", column ", parser_.problem_mark.column + 1, ": ",
                                               parser_.problem != nullptr ? parser_.problem : "malformed",
                                               parser_.context != nullptr ? StrCat(" (", parser_.context, ")") : ""));
    }
    ev.held = true;
    return absl::OkStatus();
  }

  absl::Status Unexpected() const {
    return absl::InvalidArgumentError(StrCat("invalid YAML in the document starting at line ", first_line_));
  }

  static std::string Text(const yaml_event_t& e) {
    return std::string(reinterpret_cast<const char*>(e.data.scalar.value), e.data.scalar.length);
  }

  static json Scalar(const yaml_event_t& e) {
    std::string text = Text(e);
    const auto* tag = reinterpret_cast<const char*>(e.data.scalar.tag);
    if (tag == nullptr) return e.data.scalar.style == YAML_PLAIN_SCALAR_STYLE ? ResolvePlain(text) : json(text);
    const std::string_view t(tag);
    if (t == "tag:yaml.org,2002:int" || t == "tag:yaml.org,2002:float" || t == "tag:yaml.org,2002:bool" ||
        t == "tag:yaml.org,2002:null") {
      return ResolvePlain(text);
    }
    return json(std::move(text));  // "!", !!str and any other tag: the text
  }

  // The anchor a node's first event gives it ("" for none).
  static std::string AnchorOf(const yaml_event_t& e) {
    const yaml_char_t* anchor = e.type == YAML_SCALAR_EVENT           ? e.data.scalar.anchor
                                : e.type == YAML_SEQUENCE_START_EVENT ? e.data.sequence_start.anchor
                                : e.type == YAML_MAPPING_START_EVENT  ? e.data.mapping_start.anchor
                                                                      : nullptr;
    return anchor != nullptr ? reinterpret_cast<const char*>(anchor) : "";
  }

  absl::StatusOr<const Anchored*> Alias(const yaml_event_t& e) {
    const auto* name = reinterpret_cast<const char*>(e.data.alias.anchor);
    auto it = anchors_.find(name);
    if (it == anchors_.end()) return absl::InvalidArgumentError(StrCat("unknown anchor '", name, "' referenced"));
    aliased_ += it->second.nodes;
    if (aliased_ > kAliasedNodes) {
      return absl::InvalidArgumentError(
          StrCat("the document's aliases expand to more than ", kAliasedNodes, " values"));
    }
    nodes_ += it->second.nodes;
    return &it->second;
  }

  // The node `ev` starts (its events are read to its end).
  absl::StatusOr<json> Node(Event& ev, int depth) {
    if (depth > 100) return absl::InvalidArgumentError("document nests too deeply");
    if (ev.e.type == YAML_ALIAS_EVENT) {
      BERTH_ASSIGN_OR_RETURN(const Anchored* a, Alias(ev.e));
      return a->value;
    }
    const std::string anchor = AnchorOf(ev.e);
    const size_t before = nodes_++;
    json value;
    std::optional<std::string> scalar;
    switch (ev.e.type) {
      case YAML_SCALAR_EVENT:
        value = Scalar(ev.e);
        scalar = Text(ev.e);
        break;
      case YAML_SEQUENCE_START_EVENT:
        value = json::array();
        while (true) {
          BERTH_RETURN_IF_ERROR(Next(ev));
          if (ev.e.type == YAML_SEQUENCE_END_EVENT) break;
          BERTH_ASSIGN_OR_RETURN(json item, Node(ev, depth + 1));
          value.push_back(std::move(item));
        }
        break;
      case YAML_MAPPING_START_EVENT:
        value = json::object();
        while (true) {
          BERTH_RETURN_IF_ERROR(Next(ev));
          if (ev.e.type == YAML_MAPPING_END_EVENT) break;
          std::string key;
          if (ev.e.type == YAML_SCALAR_EVENT) {
            key = Text(ev.e);
            ++nodes_;
          } else if (ev.e.type == YAML_ALIAS_EVENT) {
            BERTH_ASSIGN_OR_RETURN(const Anchored* a, Alias(ev.e));
            if (!a->scalar) return absl::InvalidArgumentError("mapping keys must be scalars");
            key = *a->scalar;
          } else {
            return absl::InvalidArgumentError("mapping keys must be scalars");
          }
          BERTH_RETURN_IF_ERROR(Next(ev));
          BERTH_ASSIGN_OR_RETURN(json item, Node(ev, depth + 1));
          if (!value.emplace(key, std::move(item)).second) {
            return absl::InvalidArgumentError(StrCat("duplicate key \"", key, "\""));
          }
        }
        break;
      default:
        return Unexpected();
    }
    if (!anchor.empty()) anchors_[anchor] = Anchored{value, std::move(scalar), nodes_ - before};
    return value;
  }

  yaml_parser_t parser_;
  int first_line_;
  std::map<std::string, Anchored> anchors_;
  size_t nodes_ = 0;    // values made, aliases' copies included
  size_t aliased_ = 0;  // of which copies
};

// The objects of the `index`th document of a stream (from 1), its text
// starting at `line`: none (an empty document), the one mapping, or the
// items of a `kind: List` (any *List with items).
absl::StatusOr<std::vector<json>> ReadObjects(std::string_view text, int line, size_t index) {
  absl::StatusOr<json> doc = DocumentReader(text, line).Read();
  if (!doc.ok()) {
    if (absl::StartsWith(doc.status().message(), "invalid YAML")) return doc.status();
    return absl::InvalidArgumentError(StrCat("document ", index, ": ", doc.status().message()));
  }
  std::vector<json> out;
  if (doc->is_null()) return out;
  if (!doc->is_object()) return absl::InvalidArgumentError(StrCat("document ", index, " is not a mapping"));
  std::string kind;
  if (auto it = doc->find("kind"); it != doc->end() && it->is_string()) kind = it->get<std::string>();
  if (kind.size() >= 4 && kind.ends_with("List") && doc->contains("items")) {
    json& items = (*doc)["items"];
    if (!items.is_array()) return absl::InvalidArgumentError(StrCat("document ", index, ": items must be a list"));
    for (auto& item : items) {
      if (!item.is_object()) {
        return absl::InvalidArgumentError(StrCat("document ", index, ": list items must be mappings"));
      }
      out.push_back(std::move(item));
    }
    return out;
  }
  out.push_back(*std::move(doc));
  return out;
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

// NEL, LINE SEPARATOR and PARAGRAPH SEPARATOR: line breaks to a YAML 1.1
// reader (libyaml, go-yaml), folded into a space in any scalar that holds
// them raw; only a double-quoted escape keeps them.
bool HasUnicodeBreak(const std::string& s) {
  return s.find("\xc2\x85") != std::string::npos || s.find("\xe2\x80\xa8") != std::string::npos ||
         s.find("\xe2\x80\xa9") != std::string::npos;
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

// A string as a key or a value, quoted so that it reads back as itself.
void EmitString(YAML::Emitter& out, const std::string& s) {
  if (HasUnicodeBreak(s)) {
    out << YAML::EscapeNonAscii << YAML::DoubleQuoted << s;  // \u2028, ... (this scalar only)
  } else if (HasControl(s)) {
    out << YAML::DoubleQuoted << s;  // escapes: \n, \t, \x03, ...
  } else if (NeedsQuotes(s)) {
    out << YAML::SingleQuoted << s;
  } else {
    out << s;
  }
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
      EmitString(out, v.get_ref<const std::string&>());
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
        EmitString(out, k);
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
  // Documents split at "---" markers by berth (each with its first line
  // for errors), each read alone: a document's malformed YAML is reported
  // with the line in the stream.
  std::vector<json> out;
  size_t index = 0;
  for (const auto& [chunk, line] : SplitDocuments(text)) {
    BERTH_ASSIGN_OR_RETURN(std::vector<json> objects, ReadObjects(chunk, line, ++index));
    for (json& o : objects) out.push_back(std::move(o));
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
  BERTH_ASSIGN_OR_RETURN(doc.objects, ReadObjects(text, doc.line, ++index_));
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
