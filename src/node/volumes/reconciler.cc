// The volume manager: the reconciler (desired vs actual state), its work queue and pod status.
#include "node/volumes/volume_manager_internal.h"

namespace berth::node {

using namespace internal;  // NOLINT: the volume manager's own helpers

// ---- the reconciler ----

void VolumeManager::ReconcileLoop() {
  // Nothing is torn down before every informer has its first list: an
  // empty cache would look like "no pod wants anything".
  for (auto& [r, informer] : informers_) {
    while (!informer->WaitForSync(absl::Milliseconds(200))) {
      absl::MutexLock lock(&mu_);
      if (stop_) return;
    }
  }
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || dirty_; };
      // Wake for the resync, or as soon as a failed operation may be retried.
      const absl::Time now = clock_.Now();
      absl::Time next = now + options_.resync;
      for (const auto* times : {&retry_at_, &waiting_until_}) {
        for (const auto& [id, at] : *times) {
          if (at > now && at < next) next = at;
        }
      }
      if (poll_at_ < next) next = std::max(poll_at_, now);
      poll_at_ = absl::InfiniteFuture();
      clock_.AwaitWithDeadline(mu_, absl::Condition(&ready), next);
      if (stop_) return;
      dirty_ = false;
      reconciling_ = true;
      last_pass_ = clock_.Now();
    }
    Reconcile();
    ReconcileProgress progress;
    {
      absl::MutexLock lock(&mu_);
      reconciling_ = false;
      progress = {.passes = ++passes_, .operations = locked_.size()};
    }
    if (options_.on_pass) options_.on_pass(progress);
  }
}

void VolumeManager::Reconcile() {
  std::map<std::string, std::string> waiting;
  PodsSeen seen;
  std::vector<Wanted> wanted = Desired(&waiting, &seen);

  std::map<std::string, Staged> staged;
  std::map<std::pair<std::string, std::string>, Published> published;
  std::map<std::string, int64_t> expanded;
  {
    absl::MutexLock lock(&mu_);
    staged = staged_;
    published = published_;
    expanded = expanded_;
    snapshot_seq_ = done_seq_;
    done_at_.clear();  // only ops ending after this snapshot make it stale
  }
  // volumesInUse first: nothing is staged before the node says it uses it.
  std::vector<std::string> in_use;
  for (const auto& w : wanted) in_use.push_back(w.volume.unique);
  for (const auto& [unique, s] : staged) in_use.push_back(unique);
  for (const auto& [key, p] : published) in_use.push_back(p.volume.unique);
  const bool in_use_reported = node_status_.SetVolumesInUse(in_use).ok();
  if (!in_use_reported) PollSoon();

  std::set<std::string> wanted_unique;
  std::set<std::pair<std::string, std::string>> wanted_pub;
  for (const auto& w : wanted) {
    wanted_unique.insert(w.volume.unique);
    wanted_pub.insert({w.pod_uid, w.volume.pv});
  }
  // Tear down what no pod here wants any more: unpublish first; a pod that
  // still runs keeps its volumes (a pod's volumes never change), and so does
  // a deleting or finished one whose containers may still run.
  std::set<std::string> still_published;
  for (const auto& [key, p] : published) {
    still_published.insert(p.volume.unique);  // unstaged only after this is unpublished
    if (wanted_pub.count(key) || seen.active.count(p.pod_uid) || seen.holding.count(p.pod_uid)) continue;
    // (A named copy: lambdas may not capture structured bindings before C++20's clang 16.)
    const Published pub = p;
    Dispatch(Op{.lock_key = p.volume.unique,
                .id = StrCat("unpublish/", key.first, "/", key.second),
                .run = [this, pub] { return Unpublish(pub); },
                .pod = json(),
                .pod_uid = "",
                .what = StrCat("UnmountVolume.TearDown failed for volume \"", p.volume.pv, "\"")});
  }
  for (const auto& [unique, s] : staged) {
    if (wanted_unique.count(unique) || still_published.count(unique)) continue;
    const Staged stg = s;
    Dispatch(Op{.lock_key = unique,
                .id = StrCat("unstage/", unique),
                .run = [this, stg] { return Unstage(stg); },
                .pod = json(),
                .pod_uid = "",
                .what = StrCat("UnmountDevice failed for volume \"", s.volume.pv, "\"")});
  }
  // Set up what is wanted.
  std::set<std::string> pods_pending;
  for (const auto& w : wanted) {
    auto pub = published.find({w.pod_uid, w.volume.pv});
    const bool is_published = pub != published.end() && pub->second.certain;
    auto driver = plugins_.Get(w.volume.driver);
    if (!driver) {
      if (!is_published) {
        waiting.emplace(w.pod_uid,
                        StrCat("driver ", w.volume.driver, " is not registered on node ", options_.node_name));
        pods_pending.insert(w.pod_uid);
      }
      continue;
    }
    auto st = staged.find(w.volume.unique);
    const bool stages = driver->Has(NodeCap::STAGE_UNSTAGE_VOLUME);
    const std::string staging =
        stages ? StagingPath(w.volume.driver, w.volume.handle, w.volume.pv, w.volume.block) : "";
    if (is_published) {
      const int64_t pv_size = StorageBytes(w.pv.spec.capacity);
      auto done = expanded.find(w.volume.unique);
      const bool already = done != expanded.end() && done->second >= pv_size;
      // Only a PV larger than the claim's capacity is a size to grow to
      // (kubelet's pvcStatusCap < pvSpecCap). The resizer grows the PV
      // before it marks the claim, but the two come through separate
      // informers: a mark seen first, with the PV's old size, would finish
      // the claim at that size and the new one would never be asked for.
      // The PV's update wakes this pass again.
      const bool pv_grew = pv_size > StorageBytes(w.claim.status.capacity);
      if (ResizePending(w.claim) && pv_grew && !already) {
        Dispatch(Op{.lock_key = w.volume.unique,
                    .id = StrCat("expand/", w.volume.unique),
                    .run = [this, w, target = pub->second.target, staging] { return Expand(w, target, staging); },
                    .pod = client::IdentityOf(w.pod),
                    .pod_uid = w.pod_uid,
                    .what = StrCat("MountVolume.NodeExpandVolume failed for volume \"", w.volume.pv, "\"")});
      }
      continue;
    }
    pods_pending.insert(w.pod_uid);
    if (auto ctx = PublishContext(w.volume); !ctx.ok()) {
      waiting.emplace(w.pod_uid, std::string(ctx.status().message()));
      continue;
    }
    if (stages && (st == staged.end() || !st->second.certain)) {
      if (!in_use_reported) continue;
      Dispatch(Op{.lock_key = w.volume.unique,
                  .id = StrCat("stage/", w.volume.unique),
                  .run = [this, w] { return Stage(w); },
                  .pod = client::IdentityOf(w.pod),
                  .pod_uid = w.pod_uid,
                  .what = StrCat("MountVolume.MountDevice failed for volume \"", w.volume.pv, "\"")});
      continue;
    }
    Dispatch(Op{.lock_key = w.volume.unique,
                .id = StrCat("publish/", w.pod_uid, "/", w.volume.pv),
                .run = [this, w, staging] { return Publish(w, staging); },
                .pod = client::IdentityOf(w.pod),
                .pod_uid = w.pod_uid,
                .what = StrCat("MountVolume.SetUp failed for volume \"", w.volume.pv, "\"")});
  }
  // What the pod workers read: which pods have every volume, and where.
  std::map<std::string, std::string> errors;
  {
    absl::MutexLock lock(&mu_);
    errors = errors_;
    ready_pods_.clear();
    pod_volumes_.clear();
    for (const auto& [uid, pod] : seen.active) {
      if (!pods_pending.count(uid) && !waiting.count(uid)) ready_pods_.insert(uid);
    }
    for (const auto& w : wanted) pod_volumes_[w.pod_uid][w.volume_name] = {w.volume.pv, w.read_only};
  }
  FinishDeletedPods(seen.deleting);
  if (options_.runtime_owns_pod_status) return;
  // Without a runtime, pod status is the volumes': Running once every volume
  // is published.
  for (const auto& [uid, pod] : seen.active) {
    if (!pods_pending.count(uid) && !waiting.count(uid)) {
      UpdatePodStatus(pod, true, "", "");
    } else if (auto e = errors.find(uid); e != errors.end()) {
      UpdatePodStatus(pod, false, "FailedMount", e->second);
    } else {
      auto wt = waiting.find(uid);
      UpdatePodStatus(pod, false, "ContainerCreating",
                      wt == waiting.end() ? "mounting volumes" : StrCat("waiting for volumes: ", wt->second));
    }
  }
}

void VolumeManager::FinishDeletedPods(const std::map<std::string, types::Pod>& deleting) {
  for (const auto& [uid, pod] : deleting) {
    if (ContainersMayRun(uid)) continue;
    {
      absl::MutexLock lock(&mu_);
      if (auto n = pod_ops_.find(uid); n != pod_ops_.end() && n->second > 0) continue;
      auto it = published_.lower_bound({uid, ""});
      if (it != published_.end() && it->first.first == uid) continue;  // mounted or uncertain
    }
    apiserver::DeleteOptions opts;
    opts.uid = uid;
    opts.grace_period_seconds = 0;
    const std::string& ns = pod.metadata.namespace_;
    const std::string& name = pod.metadata.name;
    auto st = registry_.Delete(K("pods"), ns, name, opts);
    if (st.ok()) {
      spdlog::info("node {}: pod {}/{} stopped and its volumes torn down: deleted", options_.node_name, ns, name);
    } else if (st.status().code() != absl::StatusCode::kNotFound && st.status().code() != absl::StatusCode::kAborted) {
      spdlog::warn("node {}: deleting pod {}/{}: {}", options_.node_name, ns, name, st.status().ToString());
      Wake();
    }
  }
}

// The pod condition of volume-only mode.
constexpr char kNoContainerRuntime[] = "berth.io/NoContainerRuntime";

void VolumeManager::UpdatePodStatus(const types::Pod& pod, bool ready, const std::string& reason,
                                    const std::string& message) {
  const std::string now = client::NowRfc3339();
  auto edit = [&](json& status) {
    if (ready) {
      status["phase"] = "Running";
      if (!status.contains("startTime")) status["startTime"] = now;
    } else if (!status.contains("phase")) {
      status["phase"] = "Pending";
    }
    json& conditions = status["conditions"];
    if (!conditions.is_array()) conditions = json::array();
    for (const char* type : {"PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready"}) {
      const bool on = ready || std::string_view(type) == "Initialized";
      json c = {{"type", type}, {"status", on ? "True" : "False"}, {"lastProbeTime", nullptr}};
      if (!on && std::string_view(type) != "PodReadyToStartContainers") {
        c["reason"] = reason;
        c["message"] = message;
      }
      auto it =
          std::find_if(conditions.begin(), conditions.end(), [&](const json& x) { return Str(x, {"type"}) == type; });
      if (it != conditions.end()) {
        c["lastTransitionTime"] =
            Str(*it, {"status"}) == Str(c, {"status"}) ? it->value("lastTransitionTime", now) : now;
        *it = c;
      } else {
        c["lastTransitionTime"] = now;
        conditions.push_back(c);
      }
    }
    // Without a runtime nothing runs the containers: say so (berth up
    // --runtime=none).
    if (std::none_of(conditions.begin(), conditions.end(),
                     [](const json& x) { return Str(x, {"type"}) == kNoContainerRuntime; })) {
      conditions.push_back({{"type", kNoContainerRuntime},
                            {"status", "True"},
                            {"lastProbeTime", nullptr},
                            {"lastTransitionTime", now},
                            {"reason", "NoContainerRuntime"},
                            {"message",
                             "this node has no container runtime (berth up --runtime=none): the pod's "
                             "volumes are mounted, its containers do not run"}});
    }
  };
  // Compare on the cached copy first: most passes change nothing. The status
  // is edited as JSON (the write keeps every field as the stored object has
  // it); the typed pod encodes back to the status it was decoded from.
  json status = types::EncodeValue(pod.status);
  if (!status.is_object()) status = json::object();
  const json before = status;
  edit(status);
  if (status == before) return;
  absl::Status st = client::EditStatus(registry_, K("pods"), client::IdentityOf(pod), edit);
  if (!st.ok() && st.code() != absl::StatusCode::kAborted) {
    spdlog::warn("pod {}/{} status: {}", pod.metadata.namespace_, pod.metadata.name, st.ToString());
  }
  if (!st.ok()) Wake();
}

void VolumeManager::PollSoon() {
  absl::MutexLock lock(&mu_);
  poll_at_ = std::min(poll_at_, clock_.Now() + options_.poll);
}

void VolumeManager::Dispatch(Op op) {
  absl::MutexLock lock(&mu_);
  if (locked_.count(op.lock_key)) return;
  // An op on this volume ended after the snapshot this op was decided on
  // (a stage that just finished would otherwise be staged again).
  if (auto d = done_at_.find(op.lock_key); d != done_at_.end() && d->second > snapshot_seq_) return;
  if (auto r = retry_at_.find(op.id); r != retry_at_.end() && r->second > clock_.Now()) return;
  if (auto w = waiting_until_.find(op.id); w != waiting_until_.end() && w->second > clock_.Now()) return;
  locked_.insert(op.lock_key);
  if (!op.pod_uid.empty()) ++pod_ops_[op.pod_uid];
  queue_.push_back(std::move(op));
}

void VolumeManager::WorkerLoop() {
  for (;;) {
    Op op;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || !queue_.empty(); };
      mu_.Await(absl::Condition(&ready));
      if (stop_) return;
      op = std::move(queue_.front());
      queue_.pop_front();
    }
    absl::Status st = op.run();
    const std::string uid = op.pod_uid;
    if (!st.ok()) {
      spdlog::warn("node {}: {}: {}", options_.node_name, op.what, std::string(st.message()));
      if (!op.pod.is_null()) events_.Record(op.pod, "Warning", "FailedMount", StrCat(op.what, " : ", st.message()));
    }
    const bool waits = client::IsNotAFailure(st);  // for the driver: no backoff
    if (st.ok()) backoff_.Forget(op.id);
    const absl::Time retry_at = st.ok() || waits ? absl::InfinitePast() : clock_.Now() + backoff_.When(op.id);
    absl::MutexLock lock(&mu_);
    locked_.erase(op.lock_key);
    done_at_[op.lock_key] = ++done_seq_;
    dirty_ = true;
    if (!uid.empty() && --pod_ops_[uid] <= 0) pod_ops_.erase(uid);
    waiting_until_.erase(op.id);
    if (st.ok()) {
      retry_at_.erase(op.id);
      if (!uid.empty()) errors_.erase(uid);
      continue;
    }
    // Waiting for the driver is no failure (no backoff): tried again when a
    // plugin registers or goes, else after Options::poll.
    if (waits) {
      retry_at_.erase(op.id);
      waiting_until_[op.id] = clock_.Now() + options_.poll;
    } else {
      retry_at_[op.id] = retry_at;
    }
    if (!uid.empty()) errors_[uid] = StrCat(op.what, " : ", st.message());
  }
}

}  // namespace berth::node
