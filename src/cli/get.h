// `berth get`: kubectl get's shapes over berth's API.
//
//   berth get pvc                       a table of the namespace's claims
//   berth get pvc,pv,pod -A             several kinds, every namespace
//   berth get pvc/data pv/pv-1          objects by KIND/NAME
//   berth get pvc -l app=web --field-selector status.phase=Bound
//   berth get pv -o custom-columns=NAME:.metadata.name --sort-by .spec.capacity.storage
//   berth get pvc -w                    the list, then every change
//
// Selectors are evaluated by the API server. Names that do not exist are
// reported after the objects that do (NOT_FOUND, exit code 1), as kubectl.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "cli/rest.h"
#include "http/api_client.h"

namespace berth::cli {

struct GetOptions {
  std::vector<std::string> args;  // "pvc,pv" [NAME...] | KIND/NAME...
  Target target;
  std::string output;             // -o
  std::string label_selector;     // -l
  std::string field_selector;     // --field-selector
  std::string sort_by;            // --sort-by
  bool watch = false;             // -w
  bool watch_only = false;        // --watch-only
  bool no_headers = false;        // --no-headers (tables, custom columns)
  bool ignore_not_found = false;  // --ignore-not-found: a missing name is no error
};

// One kind and the names asked for (none: the whole collection).
struct KindRequest {
  const api::KindInfo* kind;
  std::vector<std::string> names;
};
// `args` as kubectl reads them: "KIND[,KIND...] [NAME...]" or
// "KIND/NAME...". NOT_FOUND for an unknown kind, INVALID_ARGUMENT for a
// mix of the two forms or no kind.
absl::StatusOr<std::vector<KindRequest>> ParseResourceArgs(const std::vector<std::string>& args);

// Writes the objects to `out` and kubectl's notes ("No resources found in
// default namespace.") to `err`; with watch, runs until the server ends the
// stream or the client's stream is cancelled.
absl::Status Get(http::ApiClient& client, const GetOptions& options, std::ostream& out, std::ostream& err);

}  // namespace berth::cli
