// Container logs: the CRI log format the runtime writes, and the pod log
// endpoint kubelet serves (GET /api/v1/namespaces/NS/pods/NAME/log).
//
// The runtime writes each container's output to
// <log_root>/<namespace>_<name>_<uid>/<container>/<restartCount>.log, one
// line per write:
//   2016-10-06T00:17:09.669794202Z stdout F the line
//   2016-10-06T00:17:09.669794203Z stderr P a long line is split into partial (P) pieces
// The pod workers rotate files larger than --container-log-max-size
// (<file>.<YYYYMMDD-HHMMSS>, ReopenContainerLog) and keep a few.
//
// Thread-safety: pure functions; ServePodLog is reentrant (followed logs
// share one thread of the process).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "apiserver/api.h"
#include "http/server.h"
#include "nlohmann/json.hpp"

namespace berth::node::pods {

struct CriLogLine {
  absl::Time time{};
  std::string_view stream{};  // "stdout" / "stderr"
  bool partial = false;
  std::string_view content{};  // without the newline
};

// nullopt for a line that is not in the CRI format.
std::optional<CriLogLine> ParseCriLogLine(std::string_view line);

struct LogOptions {
  bool timestamps = false;   // prefix each line with its RFC 3339 time
  int64_t tail_lines = -1;   // only the last N lines (-1: all)
  int64_t limit_bytes = -1;  // stop after this many bytes (-1: no limit)
  absl::Time since = absl::InfinitePast();
  bool follow = false;
};

// Writes the container output recorded in the CRI log file `path` (partial
// lines joined) through `write` (false: the reader went away). With
// `options.follow`, keeps reading what is appended (also across a
// rotation) while `keep_following()` is true. NOT_FOUND when the file does
// not exist.
absl::Status CopyLog(const std::string& path, const LogOptions& options,
                     const std::function<bool(std::string_view)>& write, const std::function<bool()>& keep_following,
                     absl::Duration poll = absl::Milliseconds(100));

// The container a pods/log, pods/exec or pods/attach request for pod
// `name` names: `container`, or the pod's only container when empty.
// INVALID_ARGUMENT (BadRequest) as the API server words it: "a container
// name must be specified for pod P, choose one of: [a b]", "container X is
// not valid for pod P".
absl::StatusOr<std::string> RequestedContainer(const nlohmann::json& pod, const std::string& name,
                                               std::string container);

// The pods/log subresource for the API server: the container's current (or
// `previous`) log of a pod in the registry, with the query parameters
// container, follow, previous, timestamps, tailLines, limitBytes,
// sinceSeconds, sinceTime. Errors (before anything is written) are the
// API's: NOT_FOUND for a pod, INVALID_ARGUMENT ("a container name must be
// specified for pod ...", a container still waiting to start, no previous
// container) as kubelet and the API server word them.
// With follow, what is there is written at once and the rest is followed on
// one thread shared by every follower (the stream is detached: no handler
// thread is held), until the container instance stops or the client goes.
absl::Status ServePodLog(apiserver::Api& registry, const std::string& log_root, const std::string& ns,
                         const std::string& name, const http::HttpRequest& request, http::ResponseWriter& out);

}  // namespace berth::node::pods
