#include "cli/jsonpath.h"

#include <cctype>

#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cli/rest.h"
#include "common/status.h"
#include "common/strings.h"

namespace berth::cli {

using nlohmann::json;

struct JsonPathTemplate::Step {
  enum Type { kField, kRecursive, kWildcard, kIndex, kSlice, kFilter } type;
  std::string name;                // kField, kRecursive
  long index = 0;                  // kIndex
  std::optional<long> begin, end;  // kSlice
  std::vector<Step> filter_path;   // kFilter: @.path
  std::string op;                  // kFilter: "" (exists), ==, != ...
  json operand;                    // kFilter
};

struct JsonPathTemplate::Node {
  enum Type { kText, kPath, kRange } type;
  std::string text;                               // kText
  std::vector<Step> path;                         // kPath, kRange
  std::vector<std::shared_ptr<const Node>> body;  // kRange
};

namespace {

using Step = JsonPathTemplate::Step;
using Node = JsonPathTemplate::Node;

absl::Status Bad(std::string_view expr, absl::string_view why) {
  return absl::InvalidArgumentError(StrCat("error parsing jsonpath ", expr, ", ", why));
}

// A quoted literal starting at s[0] ('"' or '\''); advances `at` past it.
absl::StatusOr<std::string> Quoted(std::string_view s, size_t& at) {
  const char q = s[at];
  std::string out;
  for (size_t i = at + 1; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      char c = s[++i];
      out += c == 'n' ? '\n' : c == 't' ? '\t' : c == 'r' ? '\r' : c;
    } else if (s[i] == q) {
      at = i + 1;
      return out;
    } else {
      out += s[i];
    }
  }
  return absl::InvalidArgumentError("unterminated quoted string");
}

absl::StatusOr<json> Literal(std::string_view text) {
  text = TrimSpace(text);
  if (text.empty()) return absl::InvalidArgumentError("missing value");
  if (text.front() == '"' || text.front() == '\'') {
    size_t at = 0;
    BERTH_ASSIGN_OR_RETURN(std::string s, Quoted(text, at));
    if (at != text.size()) return absl::InvalidArgumentError(StrCat("unexpected ", text.substr(at)));
    return json(s);
  }
  if (text == "true") return json(true);
  if (text == "false") return json(false);
  double d = 0;
  int64_t i = 0;
  if (absl::SimpleAtoi(std::string(text), &i)) return json(i);
  if (absl::SimpleAtod(std::string(text), &d)) return json(d);
  return absl::InvalidArgumentError(StrCat("unrecognized value ", text));
}

absl::StatusOr<std::vector<Step>> ParsePath(std::string_view expr);

absl::StatusOr<Step> ParseBracket(std::string_view in) {
  Step st;
  in = TrimSpace(in);
  if (in == "*") {
    st.type = Step::kWildcard;
    return st;
  }
  if (!in.empty() && (in.front() == '\'' || in.front() == '"')) {
    size_t at = 0;
    BERTH_ASSIGN_OR_RETURN(st.name, Quoted(in, at));
    if (at != in.size()) return absl::InvalidArgumentError("unions ([a,b]) are not supported");
    st.type = Step::kField;
    return st;
  }
  if (in.starts_with("?(") && in.ends_with(")")) {
    std::string_view cond = TrimSpace(in.substr(2, in.size() - 3));
    if (!cond.starts_with("@")) return absl::InvalidArgumentError("a filter starts with @");
    st.type = Step::kFilter;
    size_t op_at = std::string_view::npos;
    for (const char* op : {"==", "!=", "<=", ">=", "<", ">"}) {
      size_t at = cond.find(op);
      if (at != std::string_view::npos && at < op_at) {
        op_at = at;
        st.op = op;
      }
    }
    std::string_view lhs = op_at == std::string_view::npos ? cond : cond.substr(0, op_at);
    lhs = TrimSpace(lhs.substr(1));
    BERTH_ASSIGN_OR_RETURN(st.filter_path, ParsePath(lhs));
    if (op_at != std::string_view::npos) {
      BERTH_ASSIGN_OR_RETURN(st.operand, Literal(cond.substr(op_at + st.op.size())));
    }
    return st;
  }
  if (in.find(',') != std::string_view::npos) return absl::InvalidArgumentError("unions ([a,b]) are not supported");
  if (in.find(':') != std::string_view::npos) {
    std::vector<std::string_view> parts = Split(in, ':');
    if (parts.size() > 3) return absl::InvalidArgumentError(StrCat("bad slice [", in, "]"));
    if (parts.size() == 3 && !TrimSpace(parts[2]).empty() && TrimSpace(parts[2]) != "1") {
      return absl::InvalidArgumentError("slice steps are not supported");
    }
    st.type = Step::kSlice;
    for (int i = 0; i < 2; ++i) {
      std::string_view p = TrimSpace(parts[static_cast<size_t>(i)]);
      if (p.empty()) continue;
      long v = 0;
      if (!absl::SimpleAtoi(std::string(p), &v)) return absl::InvalidArgumentError(StrCat("bad slice [", in, "]"));
      (i == 0 ? st.begin : st.end) = v;
    }
    return st;
  }
  st.type = Step::kIndex;
  if (!absl::SimpleAtoi(std::string(in), &st.index)) return absl::InvalidArgumentError(StrCat("bad index [", in, "]"));
  return st;
}

// The index of the first `close` at or after `from` that is outside quoted
// text (backslash escapes inside) and outside parentheses, as in
// [?(@.name=="a]b")] and {.items[?(@.x=="}")]}; npos when there is none.
size_t FindClosing(std::string_view text, size_t from, char close) {
  char quote = 0;
  int depth = 0;
  for (size_t i = from; i < text.size(); ++i) {
    const char c = text[i];
    if (quote) {
      if (c == '\\')
        ++i;
      else if (c == quote)
        quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '(') {
      ++depth;
    } else if (c == ')') {
      --depth;
    } else if (c == close && depth == 0) {
      return i;
    }
  }
  return std::string_view::npos;
}

absl::StatusOr<std::vector<Step>> ParsePath(std::string_view expr) {
  std::vector<Step> steps;
  std::string_view p = TrimSpace(expr);
  if (p.starts_with("$")) p.remove_prefix(1);
  // The relaxed form ("metadata.name") reads as ".metadata.name".
  bool need_dot = false;
  while (!p.empty()) {
    if (p.front() == '[') {
      const size_t i = FindClosing(p, 1, ']');
      if (i == std::string_view::npos) return absl::InvalidArgumentError("unclosed [");
      BERTH_ASSIGN_OR_RETURN(Step st, ParseBracket(p.substr(1, i - 1)));
      steps.push_back(std::move(st));
      p.remove_prefix(i + 1);
      need_dot = true;
      continue;
    }
    Step st;
    st.type = Step::kField;
    if (p.starts_with("..")) {
      st.type = Step::kRecursive;
      p.remove_prefix(2);
    } else if (p.front() == '.') {
      p.remove_prefix(1);
    } else if (need_dot) {
      return absl::InvalidArgumentError(StrCat("unexpected \"", p, "\""));
    }
    // The name runs to the next '.' or '['; a backslash-dot is a dot inside
    // it, as in kubectl's {.metadata.annotations.kubectl\.kubernetes\.io/x}.
    size_t end = 0;
    std::string unescaped;
    while (end < p.size() && p[end] != '.' && p[end] != '[' && !std::isspace(static_cast<unsigned char>(p[end]))) {
      if (p[end] == '\\' && end + 1 < p.size()) ++end;
      unescaped += p[end++];
    }
    std::string_view name = unescaped;
    p.remove_prefix(end);
    need_dot = true;
    if (name.empty()) {
      if (st.type == Step::kRecursive && !p.empty() && p.front() == '[') {
        // "..[*]": every value at any depth, then the bracket.
        st.type = Step::kRecursive;
        steps.push_back(std::move(st));
        continue;
      }
      if (p.empty() && steps.empty()) break;  // "." or "$": the whole object
      return absl::InvalidArgumentError("empty field name");
    }
    if (name == "*") {
      st.type = st.type == Step::kRecursive ? Step::kRecursive : Step::kWildcard;
    } else {
      st.name = std::string(name);
    }
    if (!TrimSpace(p).empty() && std::isspace(static_cast<unsigned char>(p.front()))) {
      return absl::InvalidArgumentError(StrCat("unexpected \"", TrimSpace(p), "\""));
    }
    steps.push_back(std::move(st));
  }
  return steps;
}

void Recurse(const json& v, const std::string& name, std::vector<const json*>& out) {
  if (v.is_object()) {
    if (name.empty()) {
      for (const auto& [k, child] : v.items()) out.push_back(&child);
    } else if (auto it = v.find(name); it != v.end()) {
      out.push_back(&*it);
    }
    for (const auto& [k, child] : v.items()) Recurse(child, name, out);
  } else if (v.is_array()) {
    if (name.empty()) {
      for (const auto& child : v) out.push_back(&child);
    }
    for (const auto& child : v) Recurse(child, name, out);
  }
}

std::vector<const json*> Apply(const std::vector<Step>& steps, const json& root);

bool Matches(const Step& f, const json& element) {
  std::vector<const json*> got = Apply(f.filter_path, element);
  if (f.op.empty()) return !got.empty();
  for (const json* v : got) {
    const json& a = *v;
    const json& b = f.operand;
    bool comparable =
        (a.is_number() && b.is_number()) || (a.is_string() && b.is_string()) || (a.is_boolean() && b.is_boolean());
    if (!comparable) {
      if (f.op == "!=") return true;
      continue;
    }
    if ((f.op == "==" && a == b) || (f.op == "!=" && a != b) || (f.op == "<" && a < b) || (f.op == "<=" && a <= b) ||
        (f.op == ">" && a > b) || (f.op == ">=" && a >= b)) {
      return true;
    }
  }
  return false;
}

std::vector<const json*> Apply(const std::vector<Step>& steps, const json& root) {
  std::vector<const json*> cur = {&root};
  for (const Step& st : steps) {
    std::vector<const json*> next;
    for (const json* v : cur) {
      switch (st.type) {
        case Step::kField:
          if (v->is_object()) {
            if (auto it = v->find(st.name); it != v->end()) next.push_back(&*it);
          }
          break;
        case Step::kRecursive:
          Recurse(*v, st.name, next);
          break;
        case Step::kWildcard:
          if (v->is_object() || v->is_array()) {
            for (const auto& [k, child] : v->items()) next.push_back(&child);
          }
          break;
        case Step::kIndex:
          if (v->is_array()) {
            long n = static_cast<long>(v->size());
            long i = st.index < 0 ? n + st.index : st.index;
            if (i >= 0 && i < n) next.push_back(&(*v)[static_cast<size_t>(i)]);
          }
          break;
        case Step::kSlice:
          if (v->is_array()) {
            long n = static_cast<long>(v->size());
            auto clamp = [n](long x) { return std::clamp(x < 0 ? n + x : x, 0L, n); };
            long b = st.begin ? clamp(*st.begin) : 0, e = st.end ? clamp(*st.end) : n;
            for (long i = b; i < e; ++i) next.push_back(&(*v)[static_cast<size_t>(i)]);
          }
          break;
        case Step::kFilter:
          if (v->is_array()) {
            for (const auto& e : *v) {
              if (Matches(st, e)) next.push_back(&e);
            }
          }
          break;
      }
    }
    cur = std::move(next);
  }
  return cur;
}

// The text inside one {...} starting at text[at] == '{'; advances `at`.
absl::StatusOr<std::string_view> Braced(std::string_view text, size_t& at) {
  if (const size_t i = FindClosing(text, at + 1, '}'); i != std::string_view::npos) {
    std::string_view inner = text.substr(at + 1, i - at - 1);
    at = i + 1;
    return inner;
  }
  return absl::InvalidArgumentError("unclosed action");
}

void Run(const std::vector<std::shared_ptr<const Node>>& nodes, const json& data, std::string& out) {
  for (const auto& n : nodes) {
    switch (n->type) {
      case Node::kText:
        out += n->text;
        break;
      case Node::kPath: {
        bool first = true;
        for (const json* v : Apply(n->path, data)) {
          if (!first) out += ' ';
          first = false;
          out += JsonPathValueText(*v);
        }
        break;
      }
      case Node::kRange:
        // The body once per value the expression selects ({range
        // .items[*]}: per item), relative to that value.
        for (const json* v : Apply(n->path, data)) Run(n->body, *v, out);
        break;
    }
  }
}

}  // namespace

absl::StatusOr<JsonPathTemplate> JsonPathTemplate::Parse(std::string_view text) {
  JsonPathTemplate t;
  // Open ranges: each collects the nodes until its {end}.
  std::vector<std::pair<std::shared_ptr<Node>, std::vector<std::shared_ptr<const Node>>>> open;
  auto sink = [&]() -> std::vector<std::shared_ptr<const Node>>& {
    return open.empty() ? t.nodes_ : open.back().second;
  };
  size_t at = 0;
  while (at < text.size()) {
    size_t brace = text.find('{', at);
    if (brace != at) {
      auto n = std::make_shared<Node>();
      n->type = Node::kText;
      n->text = std::string(text.substr(at, brace == std::string_view::npos ? std::string_view::npos : brace - at));
      sink().push_back(std::move(n));
      if (brace == std::string_view::npos) break;
      at = brace;
    }
    auto inner = Braced(text, at);
    if (!inner.ok()) return Bad(text, inner.status().message());
    std::string_view action = TrimSpace(*inner);
    if (action == "end") {
      if (open.empty()) return Bad(text, "{end} without {range}");
      auto [range, body] = std::move(open.back());
      open.pop_back();
      range->body = std::move(body);
      sink().push_back(std::move(range));
      continue;
    }
    auto n = std::make_shared<Node>();
    if (!action.empty() && (action.front() == '"' || action.front() == '\'')) {
      size_t q = 0;
      auto s = Quoted(action, q);
      if (!s.ok() || q != action.size()) return Bad(text, "bad string literal");
      n->type = Node::kText;
      n->text = *s;
      sink().push_back(std::move(n));
      continue;
    }
    bool range = action.starts_with("range ") || action.starts_with("range\t");
    if (range) action.remove_prefix(6);
    auto path = ParsePath(action);
    if (!path.ok()) return Bad(text, path.status().message());
    n->path = std::move(*path);
    if (range) {
      n->type = Node::kRange;
      open.emplace_back(std::move(n), std::vector<std::shared_ptr<const Node>>{});
    } else {
      n->type = Node::kPath;
      sink().push_back(std::move(n));
    }
  }
  if (!open.empty()) return Bad(text, "{range} without {end}");
  return t;
}

std::string JsonPathTemplate::Execute(const json& data) const {
  std::string out;
  Run(nodes_, data, out);
  return out;
}

absl::StatusOr<std::vector<json>> JsonPathSelect(const json& data, std::string_view expr) {
  std::string_view e = TrimSpace(expr);
  if (e.size() >= 2 && e.front() == '{' && e.back() == '}') e = e.substr(1, e.size() - 2);
  auto path = ParsePath(e);
  if (!path.ok()) return Bad(expr, path.status().message());
  std::vector<json> out;
  for (const json* v : Apply(*path, data)) out.push_back(*v);
  return out;
}

std::optional<json> JsonPath(const json& object, std::string_view path) {
  auto got = JsonPathSelect(object, path);
  if (!got.ok() || got->empty()) return std::nullopt;
  return std::move(got->front());
}

std::string JsonPathValueText(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

}  // namespace berth::cli
