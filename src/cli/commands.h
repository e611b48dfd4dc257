// The berth command line: apply, get, describe, delete, wait, events, and
// `serve` (the control plane core). Each command is a function over an
// ApiClient writing to the given streams; main.cc only parses flags.
//
// Errors are one line ("error: ...") and a non-zero exit code.
#pragma once

#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "http/api_client.h"
#include "nlohmann/json.hpp"

namespace berth::cli {

struct Target {
  std::string namespace_;      // -n; "" = the client's default
  bool all_namespaces = false; // -A
};

// An API error answer as a status (kubectl's "Error from server (Reason): ...").
absl::Status ErrorFromResponse(const http::ApiResponse& response);

absl::Status Apply(http::ApiClient& client, const std::vector<std::string>& files,
                   const Target& target, std::ostream& out);
absl::Status Get(http::ApiClient& client, const std::string& kind,
                 const std::vector<std::string>& names, const Target& target,
                 const std::string& output, const std::string& selector, bool watch,
                 std::ostream& out);
absl::Status Describe(http::ApiClient& client, const std::string& kind,
                      const std::vector<std::string>& names, const Target& target,
                      std::ostream& out);
absl::Status Delete(http::ApiClient& client, const std::string& kind,
                    const std::vector<std::string>& names, const std::vector<std::string>& files,
                    const Target& target, bool wait, absl::Duration timeout, std::ostream& out,
                    std::optional<int64_t> grace_period_seconds = std::nullopt);
// `for_condition`: "delete", "jsonpath={.status.phase}=Bound",
// "condition=Ready".
absl::Status Wait(http::ApiClient& client, const std::string& kind_slash_name,
                  const std::string& for_condition, const Target& target,
                  absl::Duration timeout, std::ostream& out);
absl::Status Events(http::ApiClient& client, const Target& target,
                    const std::string& for_object, std::ostream& out);

// A small JSONPath: "{.status.phase}", "{.spec.containers[0].name}",
// "{.status.conditions[?(@.type==\"Ready\")].status}". Missing → nullopt.
std::optional<nlohmann::json> JsonPath(const nlohmann::json& object, std::string_view path);

// Reads manifests from files, directories (*.yaml, *.yml, *.json, sorted)
// or "-" (stdin).
absl::StatusOr<std::vector<nlohmann::json>> ReadManifests(const std::vector<std::string>& files);

}  // namespace berth::cli
