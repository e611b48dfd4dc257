// kubectl's JSONPath templates (`-o jsonpath=`, `--sort-by`, custom
// columns, `wait --for=jsonpath=`), the subset berth supports:
//
//   text outside braces            printed as is
//   {.a.b} {$.a.b} {.a['b.c']}     fields ("['...']" or "b\.c" for names
//   {.a.b\.c}                      with dots)
//   {.items[0]} {.items[-1]}       an element (negative: from the end)
//   {.items[1:3]} {.items[*]}      a slice, every element (or {.a.*})
//   {..name}                       every "name" field at any depth
//   {.c[?(@.type=="Ready")].status} filter: ==, !=, <, <=, >, >= against a
//                                  quoted string, a number, true/false;
//                                  {[?(@.x)]} keeps elements that have x
//   {range .items[*]}...{end}      the body once per element, relative to it
//   {"\n"} {'\t'}                  string literals (\n \t \\ \" escapes)
//
// Results print as kubectl does: strings raw, other values as compact JSON,
// several results of one expression separated by a space. A missing field
// prints nothing (kubectl get's allowMissingKeys). Unions ([a,b]) and
// functions are not supported: Parse says so.
//
// Example:
//   auto t = JsonPathTemplate::Parse("{range .items[*]}{.metadata.name}{\"\\n\"}{end}");
//   std::string text = *t->Execute(list);
//
// Thread-safety: a parsed template is immutable; Execute is const.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace berth::cli {

class JsonPathTemplate {
 public:
  // INVALID_ARGUMENT naming the problem for malformed templates.
  static absl::StatusOr<JsonPathTemplate> Parse(std::string_view text);
  std::string Execute(const nlohmann::json& data) const;

  struct Step;
  struct Node;

 private:
  std::vector<std::shared_ptr<const Node>> nodes_;
};

// The values one expression selects: "{.a.b}", ".a.b" or "a.b" (kubectl's
// relaxed form for --sort-by and custom columns).
absl::StatusOr<std::vector<nlohmann::json>> JsonPathSelect(const nlohmann::json& data, std::string_view expr);

// The first value `path` selects in `object`; nullopt when none (or the
// path is malformed).
std::optional<nlohmann::json> JsonPath(const nlohmann::json& object, std::string_view path);

// How kubectl prints one selected value: strings raw, the rest as JSON.
std::string JsonPathValueText(const nlohmann::json& v);

}  // namespace berth::cli
