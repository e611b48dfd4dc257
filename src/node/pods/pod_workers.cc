// The pod workers' machinery: the pod informer, the runtime relist (PLEG),
// the work queue and its threads, delayed syncs on the clock, the crash-loop
// backoff and CouldHaveRunningContainers. One pod's sync is in pod_sync.cc.
#include "node/pods/pod_workers.h"

#include <unistd.h>

#include <fstream>

#include "client/object.h"
#include "common/status.h"
#include "common/strings.h"
#include "common/thread_name.h"
#include "spdlog/spdlog.h"

namespace berth::node::pods {
namespace {

using nlohmann::json;

int64_t NodeMemoryBytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  while (in >> key >> kib) {
    if (key == "MemTotal:") return kib * 1024;
    in.ignore(1 << 10, '\n');
  }
  return 0;
}

}  // namespace

PodWorkers::PodWorkers(apiserver::Api& registry, cri::Runtime& runtime, PodVolumes& volumes, Options options)
    : registry_(registry),
      runtime_(runtime),
      volumes_(volumes),
      options_(std::move(options)),
      clock_(options_.clock != nullptr ? *options_.clock : RealClock()),
      events_(registry, "kubelet"),
      crash_backoff_(ItemBackoff::Options{.base = options_.backoff_initial, .max = options_.backoff_max, .jitter = 0},
                     [] { return 0.5; }),
      queue_(client::WorkQueue::Options{.base_delay = absl::Milliseconds(200), .max_delay = absl::Seconds(10)}) {}

PodWorkers::~PodWorkers() { Stop(); }

absl::Status PodWorkers::Start() {
  node_memory_bytes_ = NodeMemoryBytes();
  {
    absl::MutexLock lock(&mu_);
    stop_ = false;
    next_resync_ = clock_.Now() + options_.resync;
    next_rotation_ = clock_.Now() + options_.log_rotation_period;
  }
  pods_ = std::make_unique<client::Informer>(registry_, client::K("pods"));
  const std::string node = options_.node_name;
  auto mine = [node](const json& pod) { return client::Str(pod, {"spec", "nodeName"}) == node; };
  auto remember = [this](const json& pod) {
    absl::MutexLock lock(&mu_);
    keys_[client::Uid(pod)] = client::ObjectKey(pod);
    states_[client::Uid(pod)].last_pod = pod;
  };
  pods_->AddHandlers({
      .on_add =
          [=, this](const json& pod) {
            if (!mine(pod)) return;
            remember(pod);
            queue_.Add(client::Uid(pod));
          },
      .on_update =
          [=, this](const json& before, const json& after) {
            if (!mine(after)) {
              if (mine(before)) queue_.Add(client::Uid(before));
              return;
            }
            remember(after);
            queue_.Add(client::Uid(after));
          },
      .on_delete =
          [=, this](const json& pod) {
            if (!mine(pod)) return;
            {
              absl::MutexLock lock(&mu_);
              keys_.erase(client::Uid(pod));
            }
            queue_.Add(client::Uid(pod));
          },
  });
  pods_->Start();
  relister_ = NamedThread("pod relister", [this] { RelistLoop(); });
  for (int i = 0; i < std::max(1, options_.workers); ++i)
    workers_.emplace_back(NamedThread("pod worker", [this] { WorkerLoop(); }));
  spdlog::info("pod workers for node {} on the container runtime", options_.node_name);
  return absl::OkStatus();
}

void PodWorkers::Stop() {
  std::vector<Clock::TimerId> timers;
  {
    absl::MutexLock lock(&mu_);
    if (stop_ && workers_.empty() && !relister_.joinable()) return;
    stop_ = true;
    for (const auto& [uid, id] : timers_) timers.push_back(id);
    timers_.clear();
  }
  for (Clock::TimerId id : timers) clock_.Cancel(id);
  queue_.ShutDown();
  if (relister_.joinable()) relister_.join();
  for (auto& w : workers_) w.join();
  workers_.clear();
  if (pods_) pods_->Stop();
  events_.Flush();
}

std::string PodWorkers::runtime_name() const {
  absl::MutexLock lock(&mu_);
  return runtime_name_;
}

void PodWorkers::Enqueue(const std::string& uid) { queue_.Add(uid); }

bool PodWorkers::CouldHaveRunningContainers(const std::string& uid) {
  absl::MutexLock lock(&mu_);
  if (!relisted_ || stop_) return true;
  return syncing_.count(uid) > 0 || running_.count(uid) > 0;
}

void PodWorkers::EnqueueAt(const std::string& uid, absl::Time when) {
  std::optional<Clock::TimerId> replaced;
  {
    absl::MutexLock lock(&mu_);
    if (stop_) return;
    if (auto it = timers_.find(uid); it != timers_.end()) replaced = it->second;
    // The callback forgets its own entry (never cancelling itself).
    auto id = std::make_shared<Clock::TimerId>(0);
    *id = clock_.AfterFunc(when, [this, uid, id] {
      {
        absl::MutexLock l(&mu_);
        if (auto it = timers_.find(uid); it != timers_.end() && it->second == *id) timers_.erase(it);
      }
      queue_.Add(uid);
    });
    timers_[uid] = *id;
  }
  if (replaced) clock_.Cancel(*replaced);
  // Reached already (the clock moved since `when` was computed): the timer
  // would wait for the clock's next step.
  if (when <= clock_.Now()) queue_.Add(uid);
}

std::optional<json> PodWorkers::PodByUid(const std::string& uid) {
  std::string key;
  {
    absl::MutexLock lock(&mu_);
    auto it = keys_.find(uid);
    if (it == keys_.end()) return std::nullopt;
    key = it->second;
  }
  auto pod = pods_->GetByKey(key);
  if (!pod || client::Uid(*pod) != uid) return std::nullopt;
  return pod;
}

void PodWorkers::WorkerLoop() {
  while (auto uid = queue_.Get()) {
    {
      absl::MutexLock lock(&mu_);
      syncing_.insert(*uid);
    }
    absl::Status st = SyncPod(*uid);
    {
      absl::MutexLock lock(&mu_);
      syncing_.erase(*uid);
      synced_at_[*uid] = ++sync_seq_;
    }
    if (st.ok()) {
      queue_.Forget(*uid);
    } else {
      spdlog::warn("node {}: pod {}: {}", options_.node_name, *uid, st.ToString());
      queue_.AddRateLimited(*uid);
    }
    queue_.Done(*uid);
    if (options_.after_sync_for_test) options_.after_sync_for_test(*uid);
  }
}

void PodWorkers::RelistLoop() {
  // The first relist waits for the pod informer's first list: a relist
  // before it cannot tell orphans from pods not listed yet, so it would not
  // count (relisted_), and the next one is a relist period away on the
  // clock. Real time: the informer lists in real time.
  while (!pods_->WaitForSync(absl::Milliseconds(100))) {
    absl::MutexLock lock(&mu_);
    if (stop_) return;
  }
  for (;;) {
    Relist();
    RotateLogs();
    relists_.fetch_add(1);
    absl::MutexLock lock(&mu_);
    if (stop_) return;
    clock_.AwaitWithDeadline(mu_, absl::Condition(&stop_), clock_.Now() + options_.relist_period);
    if (stop_) return;
  }
}

void PodWorkers::Relist() {
  bool need_version;
  {
    absl::MutexLock lock(&mu_);
    need_version = runtime_name_.empty();
  }
  if (need_version) {
    auto version = runtime_.Version();
    if (!version.ok()) {
      spdlog::warn("node {}: container runtime: {}", options_.node_name, version.status().ToString());
      return;
    }
    absl::MutexLock lock(&mu_);
    runtime_name_ = version->runtime_name();
  }
  uint64_t listed_at;
  {
    absl::MutexLock lock(&mu_);
    listed_at = sync_seq_;
  }
  cri::v1::PodSandboxFilter sandbox_filter;
  (*sandbox_filter.mutable_label_selector())[kNodeLabel] = options_.node_name;
  cri::v1::ContainerFilter container_filter;
  (*container_filter.mutable_label_selector())[kNodeLabel] = options_.node_name;
  auto sandboxes = runtime_.ListPodSandbox(sandbox_filter);
  auto containers = sandboxes.ok() ? runtime_.ListContainers(container_filter) : sandboxes.status();
  if (!sandboxes.ok() || !containers.ok()) {
    spdlog::warn("node {}: relisting the container runtime: {}", options_.node_name,
                 (sandboxes.ok() ? containers.status() : sandboxes.status()).ToString());
    return;
  }
  std::map<std::string, std::string> now_seen;
  std::set<std::string> running;
  for (const auto& sb : *sandboxes) {
    const auto it = sb.labels().find(kPodUidLabel);
    if (it == sb.labels().end()) continue;
    now_seen[it->second] += StrCat("s", sb.id(), ":", static_cast<int>(sb.state()), ";");
    if (sb.state() == cri::v1::SANDBOX_READY) running.insert(it->second);
  }
  for (const auto& c : *containers) {
    const auto it = c.labels().find(kPodUidLabel);
    if (it == c.labels().end()) continue;
    now_seen[it->second] += StrCat("c", c.id(), ":", static_cast<int>(c.state()), ";");
    if (c.state() == cri::v1::CONTAINER_RUNNING || c.state() == cri::v1::CONTAINER_UNKNOWN) running.insert(it->second);
  }
  const bool synced = pods_->WaitForSync(absl::ZeroDuration());
  std::vector<std::string> changed;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [uid, digest] : now_seen) {
      auto it = seen_.find(uid);
      if (it == seen_.end() || it->second != digest) changed.push_back(uid);
      // A pod the informer does not know (removed while we were down, or
      // whose removal failed): cleaned up, once the informer has its first
      // list.
      if (synced && !keys_.count(uid)) changed.push_back(uid);
    }
    for (const auto& [uid, digest] : seen_) {
      if (!now_seen.count(uid)) changed.push_back(uid);
    }
    seen_ = std::move(now_seen);
    // Pods being synced, or synced since the listing, keep that sync's view.
    for (const auto& uid : syncing_) {
      if (running_.count(uid)) running.insert(uid);
    }
    for (auto it = synced_at_.begin(); it != synced_at_.end();) {
      if (it->second > listed_at) {
        running_.count(it->first) ? (void)running.insert(it->first) : (void)running.erase(it->first);
        ++it;
      } else if (!seen_.count(it->first) && !keys_.count(it->first)) {
        it = synced_at_.erase(it);  // gone for good
      } else {
        ++it;
      }
    }
    running_ = std::move(running);
    relisted_ = relisted_ || synced;
    if (clock_.Now() >= next_resync_) {
      next_resync_ = clock_.Now() + options_.resync;
      for (const auto& [uid, key] : keys_) changed.push_back(uid);
    }
  }
  for (const auto& uid : changed) queue_.Add(uid);
}

absl::Time PodWorkers::ExitSeen(const ContainerState& c) {
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = exits_.emplace(c.id, clock_.Now());
  return it->second;
}

bool PodWorkers::InBackoff(const std::string& key, absl::Time since, absl::Time* until) {
  absl::MutexLock lock(&mu_);
  auto it = backoffs_.find(key);
  if (it == backoffs_.end()) return false;
  if (since == absl::InfinitePast()) since = it->second.last_update;  // since its last failure
  // Stable for twice the maximum since the last backoff: forgotten.
  if (since - it->second.last_update > 2 * options_.backoff_max) return false;
  *until = since + it->second.current;
  return clock_.Now() < *until;
}

void PodWorkers::NextBackoff(const std::string& key, absl::Time since) {
  absl::MutexLock lock(&mu_);
  CrashBackoff& b = backoffs_[key];
  // Stable for twice the maximum since the last backoff: start over.
  if (b.last_update != absl::InfinitePast() && since - b.last_update > 2 * options_.backoff_max) {
    crash_backoff_.Forget(key);
  }
  b.current = crash_backoff_.When(key);
  b.last_update = clock_.Now();
}

}  // namespace berth::node::pods
