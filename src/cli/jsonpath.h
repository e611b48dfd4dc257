// kubectl's JSONPath templates, as `-o jsonpath=`, `-o custom-columns=`,
// `--sort-by` and `wait --for=jsonpath=` use them (client-go's
// util/jsonpath):
//
//   {.metadata.name}                                one value
//   {.items[*].metadata.name}                       several, joined by ' '
//   {.status.conditions[?(@.type=="Ready")].status} filters (== != < > <= >=, or @.x to test presence)
//   {range .items[*]}{.metadata.name}{"\t"}{.spec.volumeName}{"\n"}{end}
//   {.metadata.annotations.kubectl\.kubernetes\.io/last-applied-configuration}
//   {..name}  {.items[0:2]}  {.items[-1]}  {['metadata']['name']}  {.spec.*}
//
// Text outside braces is printed as is. A result that is a string prints
// raw, a number or boolean as its literal, an object or array as compact
// JSON. A path that leads nowhere prints nothing (kubectl's
// --allow-missing-template-keys=true), or is an error in strict mode.
//
// Thread-safety: a parsed JsonPath is immutable and thread-safe.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace berth::cli {

class JsonPath {
 public:
  // INVALID_ARGUMENT with kubectl's kind of message ("unclosed action",
  // "unrecognized character in action: U+0021 '!'", ...).
  static absl::StatusOr<JsonPath> Parse(std::string_view text);

  // Runs the template on `data`. With `strict`, a path that finds nothing
  // is NOT_FOUND ("<key> is not found").
  absl::StatusOr<std::string> Execute(const nlohmann::json& data, bool strict = false) const;

  // The values one expression (the template's only action) finds: for
  // --sort-by, custom-columns and wait. Several actions or text around it
  // are INVALID_ARGUMENT.
  absl::StatusOr<std::vector<nlohmann::json>> Find(const nlohmann::json& data) const;

  struct Node;
  JsonPath(std::shared_ptr<const std::vector<Node>> nodes) : nodes_(std::move(nodes)) {}

 private:
  std::shared_ptr<const std::vector<Node>> nodes_;
};

// A value as JSONPath prints it (see above).
std::string JsonPathText(const nlohmann::json& value);

// kubectl accepts a bare path where a template is expected ("-o
// custom-columns=NAME:.metadata.name", "--sort-by=.metadata.name"):
// "{.a.b}" is returned as is, ".a.b" becomes "{.a.b}".
std::string RelaxedJsonPath(std::string_view path);

}  // namespace berth::cli
