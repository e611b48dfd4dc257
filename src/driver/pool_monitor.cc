#include "driver/pool_monitor.h"

#include <utility>

#include "absl/strings/str_format.h"
#include "common/status.h"
#include "common/strings.h"
#include "common/thread_name.h"
#include "common/units.h"
#include "driver/pool/image.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"

namespace berth::driver {
namespace {

using json = nlohmann::json;

std::string Rfc3339(absl::Time t) { return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", t, absl::UTCTimeZone()); }

}  // namespace

PoolMonitor::PoolMonitor(const DriverContext& ctx, Options options, ClientFactory client, Clock& clock)
    : ctx_(ctx), options_(std::move(options)), client_(std::move(client)), clock_(clock) {}

PoolMonitor::~PoolMonitor() { Stop(); }

void PoolMonitor::Start() {
  thread_ = NamedThread("pool monitor", [this] { Loop(); });
}

void PoolMonitor::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void PoolMonitor::Loop() {
  while (true) {
    RunOnce();
    absl::MutexLock lock(&mu_);
    if (clock_.AwaitWithDeadline(mu_, absl::Condition(&stop_), clock_.Now() + options_.period)) return;
  }
}

PoolMonitor::State PoolMonitor::Compute() {
  if (std::string fault = ctx_.PoolFault(); !fault.empty()) return {"PoolUnhealthy", fault};
  auto c = ctx_.pool->GetCapacity();
  if (!c.ok()) return {"PoolUnhealthy", std::string(c.status().message())};
  if (!c->pressure_reason.empty()) return {c->pressure_reason, c->pressure_message};
  return {"PoolHasRoom", StrCat("pool has ", FormatByteSizeApprox(c->available_bytes), " to provision of ",
                                FormatByteSizeApprox(c->limit_bytes))};
}

PoolMonitor::State PoolMonitor::RunOnce() {
  const std::string& image = ctx_.options.pool_image;
  if (!image.empty() && !ctx_.options.pool_sparse) {
    auto allocated = AllocatedBytes(image);
    auto size = ImageSize(image);
    if (allocated.ok() && size.ok() && *allocated < *size) {
      if (absl::Status st = AllocateImage(image); st.ok()) {
        spdlog::info("pool image {}: allocated {} of holes again (a discard had punched them)", image,
                     FormatByteSizeApprox(*size - *allocated));
      } else {
        spdlog::warn("pool image {}: {} are not allocated: {}", image, FormatByteSizeApprox(*size - *allocated),
                     std::string(st.message()));
      }
    }
  }
  State now = Compute();
  const absl::Time t = clock_.Now();
  if (now.reason != last_.reason) {
    if (now.problem()) {
      spdlog::warn("pool {}: {}: {}", ctx_.options.pool, now.reason, now.message);
    } else if (!last_.reason.empty()) {
      spdlog::info("pool {}: {} again: {}", ctx_.options.pool, now.reason, now.message);
    }
    // An event for every change but the first healthy look.
    pending_event_ = now.problem() || !last_.reason.empty();
    since_ = t;
    reported_ = false;
  }
  last_ = now;
  // The condition again now and then (kubelet's status report frequency),
  // so that a Node made anew gets it back.
  if (client_ && (!reported_ || t - last_report_ >= absl::Minutes(1))) {
    if (absl::Status st = Report(now, pending_event_); st.ok()) {
      reported_ = true;
      pending_event_ = false;
      last_report_ = t;
    } else {
      spdlog::warn("reporting the pool's condition on node {}: {}", options_.node_name, st.ToString());
    }
  }
  return now;
}

absl::Status PoolMonitor::Report(const State& state, bool transition) {
  BERTH_ASSIGN_OR_RETURN(auto client, client_());
  const std::string now = Rfc3339(clock_.Now());
  json condition = {{"type", kPoolConditionType}, {"status", state.problem() ? "True" : "False"},
                    {"reason", state.reason},     {"message", state.message},
                    {"lastHeartbeatTime", now},   {"lastTransitionTime", Rfc3339(since_)}};
  json patch = {{"status", {{"conditions", json::array({condition})}}}};
  BERTH_ASSIGN_OR_RETURN(http::ApiResponse r,
                         client->Call("PATCH", StrCat("/api/v1/nodes/", options_.node_name, "/status"), patch.dump(),
                                      "application/strategic-merge-patch+json"));
  if (r.code != 200) {
    return absl::UnavailableError(
        StrCat("PATCH nodes/", options_.node_name, "/status: HTTP ", r.code, ": ", http::ErrorMessage(r)));
  }
  if (!transition) return absl::OkStatus();
  // kubelet's shape for an event on its Node: the node's name as its uid,
  // in the default namespace.
  const absl::Time t = clock_.Now();
  json event = {
      {"apiVersion", "v1"},
      {"kind", "Event"},
      {"metadata",
       {{"name", absl::StrFormat("%s.%x", options_.node_name, absl::ToUnixNanos(t))}, {"namespace", "default"}}},
      {"involvedObject", {{"kind", "Node"}, {"name", options_.node_name}, {"uid", options_.node_name}}},
      {"reason", state.problem() ? state.reason : "PoolPressureRelieved"},
      {"message", state.message},
      {"type", state.problem() ? "Warning" : "Normal"},
      {"source", {{"component", "berth-csi"}, {"host", options_.node_name}}},
      {"firstTimestamp", now},
      {"lastTimestamp", now},
      {"count", 1}};
  BERTH_ASSIGN_OR_RETURN(r, client->Call("POST", "/api/v1/namespaces/default/events", event.dump()));
  if (r.code != 201 && r.code != 200) {
    return absl::UnavailableError(StrCat("POST event: HTTP ", r.code, ": ", http::ErrorMessage(r)));
  }
  return absl::OkStatus();
}

}  // namespace berth::driver
