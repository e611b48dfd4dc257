#include "cli/jsonpath.h"

#include <functional>
#include <optional>

#include "absl/strings/numbers.h"
#include "common/status.h"
#include "common/strings.h"

namespace berth::cli {

using nlohmann::json;

namespace {

struct Step;
using Path = std::vector<Step>;

// One step of a path: .name  ..name  .*  [*]  [3]  [-1]  [1:3]  [?(@.a=="x")]
struct Step {
  enum Kind { kField, kRecursive, kWildcard, kIndex, kSlice, kFilter } kind = kField;
  std::string name;                       // kField, kRecursive
  int64_t index = 0;                      // kIndex
  std::optional<int64_t> start, end;      // kSlice
  int64_t step = 1;                       // kSlice
  // kFilter: `lhs op rhs`; op "" tests that lhs exists.
  std::shared_ptr<Path> lhs, rhs_path;
  std::string op;
  json rhs_literal;
};

absl::Status Bad(std::string_view what, std::string_view text) {
  return absl::InvalidArgumentError(StrCat(what, " in JSONPath \"", text, "\""));
}

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

// A quoted literal at the start of `s` ('..' or ".."), with \n \t \\ \" escapes.
std::optional<std::string> Unquote(std::string_view s, size_t* used) {
  if (s.empty() || (s[0] != '"' && s[0] != '\'')) return std::nullopt;
  const char q = s[0];
  std::string out;
  for (size_t i = 1; i < s.size(); ++i) {
    if (s[i] == q) {
      *used = i + 1;
      return out;
    }
    if (s[i] == '\\' && i + 1 < s.size()) {
      const char n = s[++i];
      out += n == 'n' ? '\n' : n == 't' ? '\t' : n == 'r' ? '\r' : n;
      continue;
    }
    out += s[i];
  }
  return std::nullopt;
}

absl::StatusOr<Path> ParsePath(std::string_view text);

absl::StatusOr<Step> ParseFilter(std::string_view f, std::string_view whole) {
  // ?( lhs [op rhs] )
  if (f.size() < 3 || f[0] != '?' || f[1] != '(' || f.back() != ')') return Bad("bad filter", whole);
  std::string_view body = Trim(f.substr(2, f.size() - 3));
  size_t at = std::string_view::npos, op_len = 0;
  char quote = 0;
  for (size_t i = 0; i < body.size() && at == std::string_view::npos; ++i) {
    const char c = body[i];
    if (quote != 0) {
      if (c == quote) quote = 0;
      continue;
    }
    if (c == '"' || c == '\'') {
      quote = c;
      continue;
    }
    for (std::string_view op : {"==", "!=", "<=", ">=", "<", ">"}) {
      if (body.substr(i, op.size()) == op) {
        at = i;
        op_len = op.size();
        break;
      }
    }
  }
  Step s;
  s.kind = Step::kFilter;
  BERTH_ASSIGN_OR_RETURN(Path lhs, ParsePath(Trim(body.substr(0, at))));
  s.lhs = std::make_shared<Path>(std::move(lhs));
  if (at == std::string_view::npos) return s;
  s.op = std::string(body.substr(at, op_len));
  std::string_view rhs = Trim(body.substr(at + op_len));
  size_t used = 0;
  if (auto q = Unquote(rhs, &used); q && used == rhs.size()) {
    s.rhs_literal = *q;
  } else if (!rhs.empty() && (rhs[0] == '@' || rhs[0] == '$')) {
    BERTH_ASSIGN_OR_RETURN(Path p, ParsePath(rhs));
    s.rhs_path = std::make_shared<Path>(std::move(p));
  } else if (double d = 0; absl::SimpleAtod(rhs, &d)) {
    int64_t i = 0;
    s.rhs_literal = absl::SimpleAtoi(rhs, &i) ? json(i) : json(d);
  } else if (rhs == "true" || rhs == "false") {
    s.rhs_literal = rhs == "true";
  } else {
    return Bad(StrCat("bad filter value ", rhs), whole);
  }
  return s;
}

absl::StatusOr<Step> ParseBracket(std::string_view b, std::string_view whole) {
  b = Trim(b);
  Step s;
  if (b == "*") {
    s.kind = Step::kWildcard;
    return s;
  }
  size_t used = 0;
  if (auto q = Unquote(b, &used); q && used == b.size()) {
    s.name = *q;
    return s;
  }
  if (!b.empty() && b[0] == '?') return ParseFilter(b, whole);
  if (b.find(':') != std::string_view::npos) {
    s.kind = Step::kSlice;
    std::vector<std::string_view> parts = Split(b, ':');
    if (parts.size() > 3) return Bad("bad slice", whole);
    for (size_t i = 0; i < parts.size(); ++i) {
      std::string_view p = Trim(parts[i]);
      if (p.empty()) continue;
      int64_t v = 0;
      if (!absl::SimpleAtoi(p, &v)) return Bad(StrCat("bad slice bound ", p), whole);
      if (i == 0) s.start = v;
      if (i == 1) s.end = v;
      if (i == 2) s.step = v;
    }
    if (s.step == 0) return Bad("slice step 0", whole);
    return s;
  }
  s.kind = Step::kIndex;
  if (!absl::SimpleAtoi(b, &s.index)) return Bad(StrCat("bad array index [", b, "]"), whole);
  return s;
}

// A name after '.': up to an unescaped '.' or '['; "\." is a literal dot.
std::string ReadName(std::string_view text, size_t* i) {
  std::string name;
  while (*i < text.size() && text[*i] != '.' && text[*i] != '[') {
    if (text[*i] == '\\' && *i + 1 < text.size()) ++*i;
    name += text[(*i)++];
  }
  return name;
}

absl::StatusOr<Path> ParsePath(std::string_view text) {
  Path path;
  size_t i = 0;
  if (!text.empty() && (text[0] == '$' || text[0] == '@')) ++i;
  while (i < text.size()) {
    const char c = text[i];
    if (c == '.') {
      if (i + 1 < text.size() && text[i + 1] == '.') {
        i += 2;
        Step s;
        s.kind = Step::kRecursive;
        s.name = ReadName(text, &i);
        if (s.name.empty()) return Bad("empty name after ..", text);
        path.push_back(std::move(s));
        continue;
      }
      ++i;
      if (i < text.size() && text[i] == '*') {
        ++i;
        path.push_back(Step{.kind = Step::kWildcard});
        continue;
      }
      std::string name = ReadName(text, &i);
      if (name.empty()) {
        if (i >= text.size()) break;  // "{.}" is the value itself
        continue;
      }
      if (name.find_first_of(" \t\"'(){}!") != std::string::npos) {
        return Bad(StrCat("unrecognized character in action: \"", name, "\""), text);
      }
      path.push_back(Step{.kind = Step::kField, .name = std::move(name)});
      continue;
    }
    if (c == '[') {
      // The matching ']', skipping quoted text and nested brackets.
      int depth = 0;
      char quote = 0;
      size_t j = i;
      for (; j < text.size(); ++j) {
        const char d = text[j];
        if (quote != 0) {
          if (d == quote) quote = 0;
        } else if (d == '"' || d == '\'') {
          quote = d;
        } else if (d == '[') {
          ++depth;
        } else if (d == ']' && --depth == 0) {
          break;
        }
      }
      if (j >= text.size()) return Bad("unterminated array", text);
      BERTH_ASSIGN_OR_RETURN(Step s, ParseBracket(text.substr(i + 1, j - i - 1), text));
      path.push_back(std::move(s));
      i = j + 1;
      continue;
    }
    if (path.empty() && i == 0) {
      // A bare first name ("metadata.name" inside a filter is not valid, but
      // kubectl tolerates it at the top).
      std::string name = ReadName(text, &i);
      path.push_back(Step{.kind = Step::kField, .name = std::move(name)});
      continue;
    }
    return Bad(StrCat("unrecognized character in action: '", std::string(1, c), "'"), text);
  }
  return path;
}

void Recurse(const json& v, const std::string& name, std::vector<const json*>& out) {
  if (v.is_object()) {
    if (auto it = v.find(name); it != v.end()) out.push_back(&*it);
    for (const auto& [k, child] : v.items()) Recurse(child, name, out);
  } else if (v.is_array()) {
    for (const auto& child : v) Recurse(child, name, out);
  }
}

std::vector<const json*> Eval(const Path& path, const json& root, const json& current);

bool Compare(const json& a, const std::string& op, const json& b) {
  if (op == "==") return a == b || (a.is_number() && b.is_number() && a.get<double>() == b.get<double>());
  if (op == "!=") return !Compare(a, "==", b);
  int cmp = 0;
  if (a.is_number() && b.is_number()) {
    const double x = a.get<double>(), y = b.get<double>();
    cmp = x < y ? -1 : x > y ? 1 : 0;
  } else if (a.is_string() && b.is_string()) {
    cmp = a.get_ref<const std::string&>().compare(b.get_ref<const std::string&>());
  } else {
    return false;
  }
  if (op == "<") return cmp < 0;
  if (op == ">") return cmp > 0;
  if (op == "<=") return cmp <= 0;
  return cmp >= 0;
}

bool Holds(const Step& f, const json& root, const json& element) {
  std::vector<const json*> lhs = Eval(*f.lhs, root, element);
  if (f.op.empty()) return !lhs.empty();
  if (lhs.empty()) return false;
  if (f.rhs_path) {
    std::vector<const json*> rhs = Eval(*f.rhs_path, root, element);
    return !rhs.empty() && Compare(*lhs[0], f.op, *rhs[0]);
  }
  return Compare(*lhs[0], f.op, f.rhs_literal);
}

std::vector<const json*> Eval(const Path& path, const json& root, const json& current) {
  std::vector<const json*> cur = {&current};
  for (const Step& s : path) {
    std::vector<const json*> next;
    for (const json* v : cur) {
      switch (s.kind) {
        case Step::kField:
          if (v->is_object()) {
            if (auto it = v->find(s.name); it != v->end()) next.push_back(&*it);
          }
          break;
        case Step::kRecursive:
          Recurse(*v, s.name, next);
          break;
        case Step::kWildcard:
          if (v->is_object() || v->is_array()) {
            for (const auto& child : *v) next.push_back(&child);
          }
          break;
        case Step::kIndex: {
          if (!v->is_array()) break;
          const int64_t n = static_cast<int64_t>(v->size());
          const int64_t i = s.index < 0 ? n + s.index : s.index;
          if (i >= 0 && i < n) next.push_back(&(*v)[static_cast<size_t>(i)]);
          break;
        }
        case Step::kSlice: {
          if (!v->is_array()) break;
          const int64_t n = static_cast<int64_t>(v->size());
          auto clamp = [n](int64_t x) { return std::clamp(x < 0 ? n + x : x, int64_t{0}, n); };
          const int64_t start = clamp(s.start.value_or(0)), end = clamp(s.end.value_or(n));
          if (s.step > 0) {
            for (int64_t i = start; i < end; i += s.step) next.push_back(&(*v)[static_cast<size_t>(i)]);
          } else {
            for (int64_t i = end - 1; i >= start; i += s.step) next.push_back(&(*v)[static_cast<size_t>(i)]);
          }
          break;
        }
        case Step::kFilter:
          if (v->is_array()) {
            for (const auto& e : *v) {
              if (Holds(s, root, e)) next.push_back(&e);
            }
          }
          break;
      }
    }
    cur = std::move(next);
  }
  return cur;
}

}  // namespace

struct JsonPath::Node {
  enum Kind { kText, kPath, kRange } kind = kText;
  std::string text;  // kText; the action's source for kPath (messages)
  Path path;         // kPath, kRange
  bool from_root = false;
  std::vector<Node> body;  // kRange
};

namespace {

using Node = JsonPath::Node;

absl::Status Run(const std::vector<Node>& nodes, const json& root, const json& current, bool strict,
                 std::string& out) {
  for (const Node& n : nodes) {
    switch (n.kind) {
      case Node::kText:
        out += n.text;
        break;
      case Node::kPath: {
        std::vector<const json*> found = Eval(n.path, root, n.from_root ? root : current);
        if (found.empty() && strict) return absl::NotFoundError(StrCat(n.text, " is not found"));
        for (size_t i = 0; i < found.size(); ++i) {
          if (i > 0) out += ' ';
          out += JsonPathText(*found[i]);
        }
        break;
      }
      case Node::kRange:
        for (const json* v : Eval(n.path, root, n.from_root ? root : current)) {
          BERTH_RETURN_IF_ERROR(Run(n.body, root, *v, strict, out));
        }
        break;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<JsonPath> JsonPath::Parse(std::string_view text) {
  std::vector<Node> top;
  std::vector<std::vector<Node>*> stack = {&top};
  size_t i = 0;
  while (i < text.size()) {
    const size_t open = text.find('{', i);
    if (open != i) {
      const size_t end = open == std::string_view::npos ? text.size() : open;
      if (text.substr(i, end - i).find('}') != std::string_view::npos) return Bad("unexpected '}'", text);
      stack.back()->push_back(Node{.kind = Node::kText, .text = std::string(text.substr(i, end - i))});
      i = end;
      continue;
    }
    // The action's closing brace, skipping quoted text.
    char quote = 0;
    size_t close = open + 1;
    for (; close < text.size(); ++close) {
      const char c = text[close];
      if (quote != 0) {
        if (c == '\\') {
          ++close;
        } else if (c == quote) {
          quote = 0;
        }
      } else if (c == '"' || c == '\'') {
        quote = c;
      } else if (c == '}') {
        break;
      }
    }
    if (close >= text.size()) return Bad("unclosed action", text);
    std::string_view action = Trim(text.substr(open + 1, close - open - 1));
    i = close + 1;
    size_t used = 0;
    if (auto literal = Unquote(action, &used); literal && used == action.size()) {
      stack.back()->push_back(Node{.kind = Node::kText, .text = *literal});
    } else if (action == "end") {
      if (stack.size() == 1) return Bad("not in range, nothing to end", text);
      stack.pop_back();
    } else if (action.starts_with("range ") || action.starts_with("range\t")) {
      std::string_view expr = Trim(action.substr(6));
      BERTH_ASSIGN_OR_RETURN(Path p, ParsePath(expr));
      stack.back()->push_back(
          Node{.kind = Node::kRange, .text = std::string(expr), .path = std::move(p), .from_root = expr.starts_with("$")});
      stack.push_back(&stack.back()->back().body);
    } else if (action.empty()) {
      return Bad("empty action", text);
    } else {
      BERTH_ASSIGN_OR_RETURN(Path p, ParsePath(action));
      stack.back()->push_back(Node{.kind = Node::kPath,
                                   .text = std::string(action),
                                   .path = std::move(p),
                                   .from_root = action.starts_with("$")});
    }
  }
  if (stack.size() != 1) return Bad("unclosed range", text);
  return JsonPath(std::make_shared<const std::vector<Node>>(std::move(top)));
}

absl::StatusOr<std::string> JsonPath::Execute(const json& data, bool strict) const {
  std::string out;
  BERTH_RETURN_IF_ERROR(Run(*nodes_, data, data, strict, out));
  return out;
}

absl::StatusOr<std::vector<json>> JsonPath::Find(const json& data) const {
  if (nodes_->size() != 1 || (*nodes_)[0].kind != Node::kPath) {
    return absl::InvalidArgumentError("want exactly one path, like {.metadata.name}");
  }
  std::vector<json> out;
  for (const json* v : Eval((*nodes_)[0].path, data, data)) out.push_back(*v);
  return out;
}

std::string JsonPathText(const json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_null()) return "<nil>";
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string RelaxedJsonPath(std::string_view path) {
  std::string_view p = Trim(path);
  if (p.starts_with("{") && p.ends_with("}")) return std::string(p);
  if (!p.starts_with(".") && !p.starts_with("[")) return StrCat("{.", p, "}");
  return StrCat("{", p, "}");
}

}  // namespace berth::cli
