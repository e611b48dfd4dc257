#include "cli/hook_runner.h"

#include <map>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/synchronization/mutex.h"
#include "common/status.h"
#include "common/strings.h"
#include "common/units.h"

namespace berth::cli {
namespace {

using api::types::Pod;
using controllers::DescribeHook;
using controllers::Hook;
using controllers::PodRef;

// node → runtime through its endpoint; one connection per endpoint.
class EndpointRuntimes {
 public:
  explicit EndpointRuntimes(CriHookRunner::EndpointOf endpoint_of) : endpoint_of_(std::move(endpoint_of)) {}

  absl::StatusOr<cri::Runtime*> Of(const std::string& node) {
    const std::string endpoint = endpoint_of_(node);
    if (endpoint.empty()) {
      return absl::FailedPreconditionError(
          StrCat("node ", node, " has no container runtime (berth up --runtime=none, or not a node)"));
    }
    absl::MutexLock lock(&mu_);
    auto& runtime = runtimes_[endpoint];
    if (runtime == nullptr) {
      // Connect does not dial; a runtime that is down answers UNAVAILABLE,
      // retried for a few seconds.
      BERTH_ASSIGN_OR_RETURN(runtime, cri::GrpcRuntime::Connect(endpoint, {.retry_for = absl::Seconds(5)}));
    }
    return runtime.get();
  }

 private:
  const CriHookRunner::EndpointOf endpoint_of_;
  absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<cri::GrpcRuntime>> runtimes_ ABSL_GUARDED_BY(mu_);  // endpoint →
};

// Drops UTF-8 continuation bytes at the front of a cut.
std::string_view FromCharBoundary(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && i < 3 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) ++i;
  return s.substr(i);
}

std::string_view Tail(std::string_view s, size_t limit) {
  while (!s.empty() && absl::ascii_isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  if (s.size() <= limit) return s;
  return FromCharBoundary(s.substr(s.size() - limit));
}

}  // namespace

std::unique_ptr<CriHookRunner> CriHookRunner::ForEndpoints(EndpointOf endpoint_of) {
  auto runtimes = std::make_shared<EndpointRuntimes>(std::move(endpoint_of));
  return std::make_unique<CriHookRunner>([runtimes](const std::string& node) { return runtimes->Of(node); });
}

std::string RuntimeContainerId(const std::string& container_id) {
  const size_t at = container_id.find("://");
  return at == std::string::npos ? container_id : container_id.substr(at + 3);
}

std::string OutputTail(const std::string& stdout_text, const std::string& stderr_text, size_t limit) {
  const std::string_view err = Tail(stderr_text, limit);
  std::string out(err);
  if (err.size() + 1 < limit) {
    const std::string_view rest = Tail(stdout_text, limit - err.size() - (err.empty() ? 0 : 1));
    if (!rest.empty()) out = err.empty() ? std::string(rest) : StrCat(err, "\n", rest);
  }
  return out;
}

absl::Status CriHookRunner::Run(const Pod& pod, const Hook& hook) {
  const std::string what = StrCat("hook ", DescribeHook(hook), " of pod ", PodRef(pod));
  if (pod.status.phase != "Running") {
    return absl::FailedPreconditionError(
        StrCat(what, ": the pod is ", pod.status.phase.empty() ? "Pending" : pod.status.phase, ", not Running"));
  }
  const api::types::ContainerStatus* status = nullptr;
  for (const auto& cs : pod.status.container_statuses) {
    if (cs.name == hook.container) status = &cs;
  }
  if (status == nullptr || status->state.running.is_null()) {
    std::string state = "it has no status yet";
    if (status != nullptr && status->state.waiting.is_object()) {
      state = StrCat("waiting: ", status->state.waiting.value("reason", "no reason"));
    } else if (status != nullptr && status->state.terminated.is_object()) {
      state = StrCat("terminated: ", status->state.terminated.value("reason", "no reason"));
    }
    return absl::FailedPreconditionError(StrCat(what, ": the container is not running (", state, ")"));
  }
  const std::string id = RuntimeContainerId(
      status->unknown.is_object() ? status->unknown.value("containerID", std::string()) : std::string());
  if (id.empty()) return absl::FailedPreconditionError(StrCat(what, ": the container's status has no containerID"));

  const std::string& node = pod.spec.node_name;
  auto runtime = runtime_of_(node);
  if (!runtime.ok()) {
    return absl::Status(runtime.status().code(), StrCat(what, ": ", runtime.status().message()));
  }
  auto result = (*runtime)->ExecSync(id, hook.command, hook.timeout);
  if (!result.ok()) {
    const absl::Status& st = result.status();
    switch (st.code()) {
      case absl::StatusCode::kDeadlineExceeded:
        return absl::DeadlineExceededError(
            StrCat(what, " ran past its timeout of ", FormatGoDuration(hook.timeout), " (", st.message(), ")"));
      case absl::StatusCode::kNotFound:
        // The pod's status is behind: the container is gone.
        return absl::FailedPreconditionError(
            StrCat(what, ": the container is not running (node ", node, "'s runtime: ", st.message(), ")"));
      default:
        return absl::Status(st.code(), StrCat(what, " on node ", node, ": ", st.message()));
    }
  }
  if (result->exit_code() != 0) {
    const std::string tail = OutputTail(result->stdout(), result->stderr());
    return absl::AbortedError(
        StrCat(what, " failed with exit code ", result->exit_code(), tail.empty() ? "" : ": ", tail));
  }
  return absl::OkStatus();
}

}  // namespace berth::cli
