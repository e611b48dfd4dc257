// Backup hooks (issue 30, goal 4 of seed 002): commands a pod's annotations
// ask to run in one of its containers before its volumes are snapshotted
// (pre) and after (post), so the snapshot is application-consistent — a
// database checkpoints and holds its writes, then lets go. Velero's pod
// annotations with berth's group; Velero's own spellings are read too:
//
//   pre.hook.backup.berth.io/container  the container (default: the pod's first)
//   pre.hook.backup.berth.io/command    ["/bin/sh","-c","sqlite3 /data/db 'PRAGMA wal_checkpoint(TRUNCATE)'"]
//                                       (a JSON array of strings, or a single word)
//   pre.hook.backup.berth.io/on-error   Fail (default) | Continue
//   pre.hook.backup.berth.io/timeout    a Go duration, default 30s
//   post.hook.backup.berth.io/...       the same four
//   (pre.hook.backup.velero.io/..., post.hook.backup.velero.io/...)
//
// The backup controller runs one phase over the selected pods:
//
//   std::vector<std::string> warnings;
//   std::vector<api::types::Pod> reached;
//   absl::Status pre = RunHooks(runner, pods, HookPhase::kPre, &warnings, &reached);
//   if (pre.ok()) { ...snapshot... }
//   absl::Status post = RunHooks(runner, pre.ok() ? pods : reached, HookPhase::kPost, &warnings);
//
// HookRunner runs one hook; the real one (cli/hook_runner.h: CRI ExecSync on
// the pod's node) lives in the layer that knows the nodes' runtimes, the
// controllers only see this interface.
//
// Thread-safety: ParseHook and RunHooks are reentrant; HookRunner
// implementations must be thread-safe.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "api/types/core_pod.h"

namespace berth::controllers {

enum class HookPhase { kPre, kPost };

// "pre" or "post".
const char* HookPhaseName(HookPhase phase);

struct Hook {
  std::string container;
  std::vector<std::string> command;  // never empty
  bool continue_on_error = false;    // on-error: Continue
  absl::Duration timeout = absl::Seconds(30);
};

// The annotation prefixes of a phase: "pre.hook.backup.berth.io/" and
// "pre.hook.backup.velero.io/" (post: "post...").
std::string HookAnnotationPrefix(HookPhase phase);
std::string VeleroHookAnnotationPrefix(HookPhase phase);

// The pod's hook of `phase`, nullopt when it has no command annotation (then
// the other three are not read). Each field is read from berth's spelling,
// else Velero's; both present with different values is an error.
// INVALID_ARGUMENT naming the annotation and the pod (namespace/name) for: a
// command that is neither a JSON array of strings nor a single word (a
// command with spaces must be an array — Velero would run the whole string
// as one program name), an empty array or an empty program; a container the
// pod does not have (or a pod without containers); on-error other than Fail
// or Continue (case-insensitive); a timeout that is not a positive Go
// duration ("30s", "1m30s", "720h0m0s").
absl::StatusOr<std::optional<Hook>> ParseHook(const api::types::Pod& pod, HookPhase phase);

// Runs hooks. Implementations check the pod and container can run it and
// honour hook.timeout.
class HookRunner {
 public:
  virtual ~HookRunner() = default;
  // OK when the command ran and exited 0. Otherwise the error says why,
  // naming the hook, the container and the pod: DEADLINE_EXCEEDED when it
  // ran past hook.timeout; FAILED_PRECONDITION when the pod is not Running
  // or the container not running; another code with the exit code and the
  // tail of its output when it exited non-zero.
  virtual absl::Status Run(const api::types::Pod& pod, const Hook& hook) = 0;
};

// Runs the hooks of `phase` of `pods`, one pod after the other in their
// order. The pre phase parses every pod's annotations of both phases first: a
// malformed one returns its INVALID_ARGUMENT before any hook runs (a typo in
// a post hook must not be found only after the pre hooks froze everything).
//
// A hook that fails with on-error Continue appends a warning to `warnings`
// (may be null): "pre hook of pod ns/name: <error> (on-error: Continue)";
// the next pod goes on. One that fails with on-error Fail:
//  - pre: stops there and returns the error, prefixed with "pre hook of pod
//    ns/name: ", its code kept; later pods' hooks do not run.
//  - post: the later pods' post hooks still run (a post hook typically undoes
//    its pre hook: thaws, unlocks — one failure must not leave the others
//    frozen); the first such error is returned, the later ones are warnings.
//    A malformed post annotation counts as such a failure.
//
// `reached` (may be null) gets the pods this phase reached: every pod up to
// and including the one whose hook failed with Fail, or all of them. When a
// pre phase fails, the caller runs the post hooks of `reached`: their pre
// hooks ran, and a failed or timed-out pre hook may have done part of its
// work (frozen, then hung) that its post hook undoes.
absl::Status RunHooks(HookRunner& runner, const std::vector<api::types::Pod>& pods, HookPhase phase,
                      std::vector<std::string>* warnings, std::vector<api::types::Pod>* reached = nullptr);

// "namespace/name" of a pod, as the messages name it.
std::string PodRef(const api::types::Pod& pod);

// A short description of a hook for messages: `[/bin/sh -c "..."] in
// container C`, the command shortened past 120 characters.
std::string DescribeHook(const Hook& hook);

}  // namespace berth::controllers
