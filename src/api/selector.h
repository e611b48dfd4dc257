// Kubernetes label selectors: the string form used in `?labelSelector=` and
// `kubectl -l` ("app=web,tier!=db,env in (a,b),!canary,release"), and the
// structured form in object specs ({matchLabels, matchExpressions}).
//
//   auto sel = LabelSelector::Parse("app=web,env in (prod,staging)");
//   if (sel.ok() && sel->Matches(labels)) ...
//
// Thread-safety: immutable after construction; safe to share.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace berth::api {

class LabelSelector {
 public:
  enum class Op { kIn, kNotIn, kExists, kDoesNotExist };
  struct Requirement {
    std::string key;
    Op op = Op::kIn;
    std::vector<std::string> values;  // sorted
  };

  // Everything matches an empty selector.
  LabelSelector() = default;

  // INVALID_ARGUMENT naming the offending part for a malformed selector or
  // an invalid label key/value.
  static absl::StatusOr<LabelSelector> Parse(std::string_view text);
  // From {"matchLabels": {...}, "matchExpressions": [{key, operator, values}]}.
  static absl::StatusOr<LabelSelector> FromJson(const nlohmann::json& j);

  bool Matches(const std::map<std::string, std::string>& labels) const;
  bool empty() const { return requirements_.empty(); }
  const std::vector<Requirement>& requirements() const { return requirements_; }

  // The canonical string form.
  std::string ToString() const;

 private:
  std::vector<Requirement> requirements_;
};

// Kubernetes' rules for label keys ([prefix/]name) and values.
absl::Status ValidateLabelKey(std::string_view key);
absl::Status ValidateLabelValue(std::string_view value);

}  // namespace berth::api
