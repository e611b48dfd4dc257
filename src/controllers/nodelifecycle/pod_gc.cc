#include "controllers/nodelifecycle/pod_gc.h"

#include "client/object.h"
#include "client/writes.h"
#include "common/status.h"
#include "common/thread_name.h"
#include "controllers/nodelifecycle/node_lifecycle.h"
#include "controllers/taints.h"
#include "spdlog/spdlog.h"

namespace berth::controllers {

using client::K;
using client::Name;
using client::Str;
using nlohmann::json;

PodGarbageCollector::PodGarbageCollector(apiserver::Registry& registry, PodGcInformers informers, Options options)
    : registry_(registry),
      informers_(informers),
      options_(options),
      clock_(options_.clock != nullptr ? *options_.clock : RealClock()) {}

PodGarbageCollector::~PodGarbageCollector() { Stop(); }

void PodGarbageCollector::RegisterHandlers() {
  IndexPodsByNode(informers_.pods);
  informers_.nodes.AddHandlers({
      .on_add = nullptr,
      .on_update =
          [this](const json& before, const json& after) {
            if (NodeReadyStatus(before) != NodeReadyStatus(after) ||
                HasTaintKey(before, kTaintNodeOutOfService) != HasTaintKey(after, kTaintNodeOutOfService)) {
              queue_.Add(Name(after));
            }
          },
      .on_delete = nullptr,
  });
}

void PodGarbageCollector::Start() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = false;
  }
  threads_.emplace_back(NamedThread("pod gc", [this] { Loop(); }));
  client::StartWorkers(threads_, 1, queue_, "pod gc", [this](const std::string& node) { return SyncNode(node); });
}

void PodGarbageCollector::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  queue_.ShutDown();
  for (auto& t : threads_) t.join();
  threads_.clear();
}

void PodGarbageCollector::Loop() {
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (clock_.AwaitWithTimeout(mu_, absl::Condition(&stop_), options_.period)) return;
    }
    for (const auto& node : informers_.nodes.List()) queue_.Add(Name(node));
  }
}

absl::Status PodGarbageCollector::SyncNode(const std::string& name) {
  std::shared_ptr<const json> node = informers_.nodes.GetSharedByKey(name);
  if (!node || NodeReadyStatus(*node) == "True" || !HasTaintKey(*node, kTaintNodeOutOfService)) {
    return absl::OkStatus();
  }
  absl::Status result;
  for (const auto& pod : informers_.pods.ByIndex(kPodsByNode, name)) {
    const std::string phase = Str(pod, {"status", "phase"});
    if (!client::Deleting(pod) || phase == "Succeeded" || phase == "Failed") continue;
    spdlog::warn("pod gc: force-deleting terminating pod {} on out-of-service node {}", client::ObjectKey(pod), name);
    // markFailedAndDeletePod: Failed first, so whoever watches sees why.
    absl::Status st = client::EditStatus(registry_, K("pods"), pod, [](json& status) { status["phase"] = "Failed"; });
    if (st.ok()) {
      auto deleted =
          registry_.Delete(K("pods"), client::Ns(pod), Name(pod),
                           {.uid = client::Uid(pod), .resource_version = std::nullopt, .grace_period_seconds = 0});
      if (!deleted.ok() && deleted.status().code() != absl::StatusCode::kNotFound) st = deleted.status();
    }
    result.Update(st);
  }
  return result;
}

}  // namespace berth::controllers
