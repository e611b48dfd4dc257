#include "controllers/nodelifecycle/taint_eviction.h"

#include <algorithm>

#include "client/object.h"
#include "client/writes.h"
#include "common/status.h"
#include "common/strings.h"
#include "controllers/nodelifecycle/node_lifecycle.h"
#include "controllers/taints.h"
#include "spdlog/spdlog.h"

namespace berth::controllers {
namespace {

using client::Field;
using client::K;
using client::Name;
using client::Ns;
using client::Str;
using nlohmann::json;

constexpr char kPodPrefix[] = "pod/";
constexpr char kNodePrefix[] = "node/";

// The NoExecute taints as (key, value) pairs: what eviction depends on.
std::vector<std::pair<std::string, std::string>> NoExecuteTaints(const json& node) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& t : NodeTaints(node, kNoExecute)) out.emplace_back(t.key, t.value);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TaintEvictionController::TaintEvictionController(apiserver::Registry& registry, TaintEvictionInformers informers,
                                                 Options options)
    : registry_(registry),
      informers_(informers),
      options_(options),
      clock_(options_.clock != nullptr ? *options_.clock : RealClock()),
      events_(registry, "taint-eviction-controller") {}

TaintEvictionController::~TaintEvictionController() { Stop(); }

void TaintEvictionController::RegisterHandlers() {
  IndexPodsByNode(informers_.pods);
  auto node_key = [this](const json& n) { queue_.Add(kNodePrefix + Name(n)); };
  informers_.nodes.AddHandlers({
      .on_add =
          [node_key](const json& n) {
            if (!NoExecuteTaints(n).empty()) node_key(n);
          },
      .on_update =
          [node_key](const json& before, const json& after) {
            if (NoExecuteTaints(before) != NoExecuteTaints(after)) node_key(after);
          },
      .on_delete = node_key,
  });
  auto pod_key = [this](const json& p) { queue_.Add(kPodPrefix + client::ObjectKey(p)); };
  informers_.pods.AddHandlers({
      .on_add = pod_key,
      .on_update = [pod_key](const json&, const json& after) { pod_key(after); },
      .on_delete = pod_key,
  });
}

void TaintEvictionController::Start() {
  client::StartWorkers(workers_, options_.workers, queue_, "taint eviction", [this](const std::string& key) {
    if (key.starts_with(kNodePrefix)) return SyncNode(key.substr(sizeof(kNodePrefix) - 1));
    return SyncPod(key.substr(sizeof(kPodPrefix) - 1));
  });
}

void TaintEvictionController::Stop() {
  queue_.ShutDown();
  for (auto& w : workers_) w.join();
  workers_.clear();
  absl::MutexLock lock(&mu_);
  for (auto& [key, s] : scheduled_) clock_.Cancel(s.timer);
  scheduled_.clear();
  stopped_ = true;
}

std::optional<absl::Time> TaintEvictionController::ScheduledEviction(const std::string& key) {
  absl::MutexLock lock(&mu_);
  auto it = scheduled_.find(key);
  if (it == scheduled_.end()) return std::nullopt;
  return it->second.due;
}

absl::Status TaintEvictionController::SyncPod(const std::string& key) {
  std::optional<json> pod = informers_.pods.GetByKey(key);
  if (!pod) {
    Cancel(key, nullptr);
    return absl::OkStatus();
  }
  return ProcessPod(*pod);
}

absl::Status TaintEvictionController::SyncNode(const std::string& node) {
  absl::Status result;
  for (const auto& pod : informers_.pods.ByIndex(kPodsByNode, node)) result.Update(ProcessPod(pod));
  return result;
}

void TaintEvictionController::Cancel(const std::string& key, const json* pod) {
  {
    absl::MutexLock lock(&mu_);
    auto it = scheduled_.find(key);
    if (it == scheduled_.end()) return;
    clock_.Cancel(it->second.timer);  // its callback only queues the key
    scheduled_.erase(it);
  }
  if (pod != nullptr) {
    events_.Record(*pod, "Normal", "TaintManagerEviction",
                   StrCat("Cancelling deletion of Pod ", client::ObjectKey(*pod)));
  }
}

absl::Status TaintEvictionController::ProcessPod(const json& pod) {
  const std::string key = client::ObjectKey(pod);
  const std::string node_name = Str(pod, {"spec", "nodeName"});
  if (client::Deleting(pod) || node_name.empty()) {
    Cancel(key, nullptr);
    return absl::OkStatus();
  }
  std::shared_ptr<const json> node = informers_.nodes.GetSharedByKey(node_name);
  const std::vector<Taint> taints = node ? NodeTaints(*node, kNoExecute) : std::vector<Taint>{};
  if (taints.empty()) {
    Cancel(key, &pod);
    return absl::OkStatus();
  }
  const TolerationVerdict verdict = MatchTolerations(Field(Field(pod, "spec"), "tolerations"), taints);
  if (verdict.tolerated && !verdict.for_how_long) {
    Cancel(key, &pod);  // tolerated forever
    return absl::OkStatus();
  }
  const absl::Time now = clock_.Now();
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return absl::OkStatus();
    auto it = scheduled_.find(key);
    if (it != scheduled_.end() && it->second.uid != client::Uid(pod)) {  // another pod of that name
      clock_.Cancel(it->second.timer);
      scheduled_.erase(it);
      it = scheduled_.end();
    }
    const absl::Time start = it == scheduled_.end() ? now : it->second.start;
    const absl::Time due = verdict.tolerated ? start + *verdict.for_how_long : now;
    if (due > now) {
      if (it != scheduled_.end() && it->second.due == due) return absl::OkStatus();
      if (it != scheduled_.end()) clock_.Cancel(it->second.timer);
      const Clock::TimerId timer = clock_.AfterFunc(due, [this, key] { queue_.Add(kPodPrefix + key); });
      scheduled_[key] = Scheduled{.uid = client::Uid(pod), .start = start, .due = due, .timer = timer};
      spdlog::info("taint eviction: pod {} on node {} is evicted at {} unless its node recovers", key, node_name,
                   client::Rfc3339(due));
      return absl::OkStatus();
    }
  }
  return Evict(pod);
}

absl::Status TaintEvictionController::Evict(const json& pod) {
  const std::string key = client::ObjectKey(pod);
  spdlog::warn("taint eviction: deleting pod {} (NoExecute taint of node {})", key, Str(pod, {"spec", "nodeName"}));
  events_.Record(pod, "Normal", "TaintManagerEviction", StrCat("Marking for deletion Pod ", key));
  const std::string now = client::Rfc3339(clock_.Now());
  BERTH_RETURN_IF_ERROR(client::EditStatus(registry_, K("pods"), pod, [&](json& status) {
    json& conditions = status["conditions"];
    if (!conditions.is_array()) conditions = json::array();
    json target = {{"type", "DisruptionTarget"},
                   {"status", "True"},
                   {"reason", "DeletionByTaintManager"},
                   {"message", "Taint manager: deleting due to NoExecute taint"},
                   {"lastTransitionTime", now}};
    for (auto& c : conditions) {
      if (Str(c, {"type"}) != "DisruptionTarget") continue;
      if (Str(c, {"status"}) == "True") target["lastTransitionTime"] = c.value("lastTransitionTime", now);
      c = target;
      return;
    }
    conditions.push_back(target);
  }));
  auto deleted = registry_.Delete(
      K("pods"), Ns(pod), Name(pod),
      {.uid = client::Uid(pod), .resource_version = std::nullopt, .grace_period_seconds = std::nullopt});
  if (!deleted.ok() && deleted.status().code() != absl::StatusCode::kNotFound) return deleted.status();
  absl::MutexLock lock(&mu_);
  if (auto it = scheduled_.find(key); it != scheduled_.end()) {
    clock_.Cancel(it->second.timer);
    scheduled_.erase(it);
  }
  return absl::OkStatus();
}

}  // namespace berth::controllers
