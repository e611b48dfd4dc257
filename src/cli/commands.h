// The berth command line's API commands, in kubectl's shapes: apply,
// describe, delete, wait, events, patch, edit, explain, api-resources,
// version (get is in get.h, output formats in printers.h). Each command is
// a function over an ApiClient writing to the given streams; client_app.cc
// only parses flags.
//
// Errors are statuses whose message is kubectl's text ("Error from server
// (NotFound): persistentvolumeclaims \"x\" not found", "the server doesn't
// have a resource type \"foo\""); FormatError adds the "error: " prefixes.
#pragma once

#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cli/jsonpath.h"
#include "cli/rest.h"
#include "common/clock.h"
#include "http/api_client.h"
#include "nlohmann/json.hpp"

namespace berth::cli {

// An API error answer as a status (kubectl's "Error from server (Reason): ...").
absl::Status ErrorFromResponse(const http::ApiResponse& response);

// What the CLI prints for a failed command: each line of the message with
// kubectl's prefix ("error: ", none for "Error from server ..." lines),
// newline-terminated.
std::string FormatError(const absl::Status& st);

// `progress`: on a terminal, a "[n/N] applying" line kept at the bottom
// while objects are applied (main sets it when stdout is a tty).
absl::Status Apply(http::ApiClient& client, const std::vector<std::string>& files, const Target& target,
                   std::ostream& out, bool progress = false);
// `args`: "KIND [NAME...]" or "KIND/NAME..."; each object in detail, then
// its events (involvedObject matching its name, namespace, kind and uid).
absl::Status Describe(http::ApiClient& client, const std::vector<std::string>& args, const Target& target,
                      const std::string& label_selector, std::ostream& out);
// describe's last section: "Events:" and a table of the events about
// `object` (of `kind`), oldest first, or "Events:        <none>".
std::string EventsSection(http::ApiClient& client, const api::KindInfo& kind, const nlohmann::json& object);

struct DeleteOptions {
  std::vector<std::string> args;   // "KIND NAME..." or "KIND/NAME..."
  std::vector<std::string> files;  // -f
  Target target;
  bool all = false;            // --all: every object of the kind(s)
  std::string label_selector;  // -l
  bool wait = true;            // --wait
  absl::Duration timeout = absl::Seconds(60);
  std::optional<int64_t> grace_period_seconds;
  bool ignore_not_found = false;
};
// With wait, looks again every 100 ms on `clock` until the objects are gone
// (DEADLINE_EXCEEDED naming the finalizers left after options.timeout).
absl::Status Delete(http::ApiClient& client, const DeleteOptions& options, std::ostream& out,
                    Clock& clock = RealClock());

// `for_condition`: "delete", "jsonpath={.status.phase}=Bound",
// "condition=Ready[=VALUE]". Looks every 100 ms on `clock`;
// DEADLINE_EXCEEDED after `timeout`.
absl::Status Wait(http::ApiClient& client, const std::string& kind_slash_name, const std::string& for_condition,
                  const Target& target, absl::Duration timeout, std::ostream& out, Clock& clock = RealClock());
absl::Status Events(http::ApiClient& client, const Target& target, const std::string& for_object, std::ostream& out);

// `type`: strategic (the default, as kubectl), merge or json. Prints
// "KIND/NAME patched" or "... patched (no change)"; with `output` the
// object in that format instead.
absl::Status Patch(http::ApiClient& client, const std::vector<std::string>& args, const std::string& patch,
                   const std::string& type, const Target& target, const std::string& output, std::ostream& out);

// kubectl edit: the object as YAML in a private temporary file, `editor`
// run on it (`sh -c 'EDITOR "$1"'`), the changes sent as a merge patch
// guarded by the object's resourceVersion. Errors reopen the editor with
// the error at the top; when the user saves no further change the copy is
// kept and its path reported.
absl::Status Edit(http::ApiClient& client, const std::vector<std::string>& args, const Target& target,
                  const std::string& editor, std::ostream& out, std::ostream& err);

// KIND[.field[.field...]]: the field's type and description from berth's
// table of the storage kinds' fields (explain.cc).
absl::Status Explain(const std::string& what, std::ostream& out);
// The server's discovery as a table (or `-o name`).
absl::Status ApiResources(http::ApiClient& client, const std::string& output, std::optional<bool> namespaced,
                          std::ostream& out);
// Client and server versions; `client` null: the client's alone.
absl::Status Version(http::ApiClient* client, const std::string& output, std::ostream& out);

// The merge patch that takes `current` to `modified`, deleting what
// `original` (the previous apply) set and `modified` no longer has. With
// original == current: the plain two-way diff (edit).
nlohmann::json ThreeWayMergePatch(const nlohmann::json& original, const nlohmann::json& modified,
                                  const nlohmann::json& current);

// Reads manifests from files, directories (*.yaml, *.yml, *.json, sorted)
// or "-" (stdin).
absl::StatusOr<std::vector<nlohmann::json>> ReadManifests(const std::vector<std::string>& files);

}  // namespace berth::cli
