// The node agent's pod workers: kubelet's podWorkers + kuberuntime manager
// + PLEG for one node, over the CRI. For every pod bound to this node they
// make the runtime match the pod and report its status; for pods deleted or
// finished they stop its containers (gracefully) and tell the volume manager
// when nothing can run any more.
//
//   PodVolumes& volumes = ...;   // the volume manager, through an adapter
//   PodWorkers workers(registry, runtime, volumes, {.node_name = "n1", .root = ..., .log_root = ...});
//   BERTH_RETURN_IF_ERROR(workers.Start());
//   vm_options.containers_may_run = [&](const std::string& uid) { return workers.CouldHaveRunningContainers(uid); };
//
// One sync of a pod (never two at once for the same pod; `workers` threads):
//   - pod gone (or no longer on this node): stop its containers (grace from
//     the last version seen, at least 2 s), remove containers and sandboxes,
//     its emptyDir volumes and log directory;
//   - deleting (deletionTimestamp): StopContainer with the grace period
//     (metadata.deletionGracePeriodSeconds, else
//     spec.terminationGracePeriodSeconds, else 30; at least 2 s) — SIGTERM,
//     SIGKILL at its end — for every container at once, then StopPodSandbox;
//     then the terminal status, and the volume manager is woken: only now
//     may it unpublish. The containers and sandbox are removed once the pod
//     object is gone;
//   - finished (Succeeded/Failed): its sandbox is stopped (IP released); the
//     containers stay for `logs` until the pod goes;
//   - otherwise: wait until the volume manager has published every volume,
//     then kubelet's SyncPod (pod_actions.h): sandbox → init containers in
//     order → containers, restarts by restartPolicy with the crash-loop
//     backoff (10 s doubling to 5 min, reset after 10 min without a crash;
//     CrashLoopBackOff), images by imagePullPolicy (ErrImagePull then
//     ImagePullBackOff, same backoff), then the status (pod_status.h).
//
// Changes are noticed from the pod informer and from a relist of the
// runtime every `relist_period` (kubelet's generic PLEG); every pod is also
// synced every `resync`. At start the sandboxes found in the runtime (label
// io.kubernetes.pod.uid, and berth.io/node = this node: nothing else in a
// shared runtime is touched) are adopted by the pods they belong to — never
// a second sandbox for a pod that has a ready one — and those of pods that
// no longer exist are removed, once the informer has its first list.
//
// Time (backoffs, relist, resync) is the injected clock's; CRI calls have
// real-time deadlines (cri::GrpcRuntime).
//
// Thread-safety: Start/Stop from one thread; the rest is thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "apiserver/api.h"
#include "client/events.h"
#include "client/informer.h"
#include "client/workqueue.h"
#include "common/backoff.h"
#include "common/clock.h"
#include "cri/runtime.h"
#include "node/pods/pod_config.h"
#include "node/pods/pod_status.h"
#include "node/pods/runtime_pod.h"

namespace berth::node::pods {

// What the pod workers need of the volume manager.
class PodVolumes {
 public:
  virtual ~PodVolumes() = default;
  // Every volume of the pod that the volume manager handles is published.
  virtual bool PodVolumesReady(const std::string& pod_uid) = 0;
  // The pod's published volumes: spec.volumes[].name → where it is.
  virtual std::map<std::string, VolumePath> PodVolumePaths(const std::string& pod_uid) = 0;
  // The containers of a pod stopped: reconcile soon.
  virtual void Wake() = 0;
};

class PodWorkers {
 public:
  struct Options {
    std::string node_name{};
    std::string root{};      // the kubelet root: emptyDir volumes under <root>/pods/<uid>/
    std::string log_root{};  // pod log directories <log_root>/<ns>_<name>_<uid>/
    std::string host_ip{};   // status.hostIP ("" : unset)
    int workers = 8;
    absl::Duration relist_period = absl::Seconds(1);
    absl::Duration resync = absl::Minutes(1);  // kubelet's --sync-frequency
    // While a pod waits for its volumes, how often it looks again.
    absl::Duration volume_poll = absl::Milliseconds(250);
    absl::Duration backoff_initial = absl::Seconds(10);
    absl::Duration backoff_max = absl::Minutes(5);
    // Container logs larger than this are rotated (kubelet's
    // --container-log-max-size); this many files are kept per container.
    int64_t log_max_bytes = int64_t{10} << 20;
    int log_max_files = 5;
    absl::Duration log_rotation_period = absl::Seconds(10);
    Clock* clock = nullptr;  // nullptr: RealClock()
    // TEST ONLY: called after each sync of a pod, with its uid.
    std::function<void(const std::string& pod_uid)> after_sync_for_test = nullptr;
  };

  PodWorkers(apiserver::Api& registry, cri::Runtime& runtime, PodVolumes& volumes, Options options);
  ~PodWorkers();  // Stop()

  absl::Status Start();
  // Stops the loops; containers keep running (the next start adopts them).
  void Stop();

  // kubelet's podWorkers.CouldHaveRunningContainers: false only once the
  // pod's containers are known to be stopped (or it never had any); true
  // while unknown (before the first relist of the runtime) or while a sync
  // of the pod is under way. The volume manager keeps a deleting or
  // finished pod's volumes published while this is true.
  bool CouldHaveRunningContainers(const std::string& pod_uid) ABSL_LOCKS_EXCLUDED(mu_);

  // Syncs a pod soon (tests, the volume manager when volumes became ready).
  void Enqueue(const std::string& pod_uid);

  cri::Runtime& runtime() { return runtime_; }
  // How many running containers' log paths the log rotation check keeps
  // (as of its last run; tests).
  size_t cached_log_paths() const { return log_paths_size_.load(); }
  // The runtime's name ("containerd") once known.
  std::string runtime_name() const ABSL_LOCKS_EXCLUDED(mu_);
  // How many relists of the runtime have finished: a test that moves the
  // clock waits for the relist it woke instead of sleeping.
  int64_t relists() const { return relists_.load(); }

 private:
  // Where a key's crash-loop (or image pull) backoff stands (kubelet's
  // flowcontrol.Backoff entry); the delays come from crash_backoff_.
  struct CrashBackoff {
    absl::Duration current = absl::ZeroDuration();
    absl::Time last_update = absl::InfinitePast();
  };
  // What the agent remembers of a pod between syncs.
  struct PodState {
    std::optional<nlohmann::json> last_pod{};  // the last version seen (grace periods after deletion)
    std::map<std::string, Waiting> waiting{};  // container name → why it waits
    bool killed = false;                       // its containers were stopped for deletion/completion
  };

  // pod_workers.cc: the machinery.
  void RelistLoop();
  void Relist() ABSL_LOCKS_EXCLUDED(mu_);
  void WorkerLoop();
  // Syncs `uid` again at `when` on the clock (at once if that time has
  // come: a timer set for a time already passed would wait for the next
  // one).
  void EnqueueAt(const std::string& uid, absl::Time when) ABSL_LOCKS_EXCLUDED(mu_);
  std::optional<nlohmann::json> PodByUid(const std::string& uid) ABSL_LOCKS_EXCLUDED(mu_);
  // Whether `key` is still backing off from an event at `since`
  // (InfinitePast: from its last failure), and until when: a time on the
  // clock, read once (a wake-up computed from a second reading would move
  // with a clock advanced in between).
  bool InBackoff(const std::string& key, absl::Time since, absl::Time* until) ABSL_LOCKS_EXCLUDED(mu_);
  void NextBackoff(const std::string& key, absl::Time since) ABSL_LOCKS_EXCLUDED(mu_);
  // When this agent first saw the container exited (backoffs count from it,
  // on our clock).
  absl::Time ExitSeen(const ContainerState& c) ABSL_LOCKS_EXCLUDED(mu_);

  // pod_sync.cc: one pod.
  absl::Status SyncPod(const std::string& uid);
  absl::StatusOr<RuntimePod> GetRuntimePod(const std::string& uid);
  // Stops every container (in parallel, with the grace period) and sandbox.
  absl::Status KillPod(const nlohmann::json& pod, const RuntimePod& rp);
  absl::Status RemovePod(const std::string& uid, const RuntimePod& rp);
  absl::Status RunPod(const nlohmann::json& pod, const RuntimePod& rp, PodState& state);
  // Starts one container; on failure records why it waits.
  absl::Status StartContainer(const nlohmann::json& pod, const nlohmann::json& container, bool init,
                              const std::string& sandbox_id, const cri::v1::PodSandboxConfig& sandbox_config,
                              const RuntimePod& rp, const std::string& pod_ip, PodState& state);
  // The image's ID, pulled if the policy says so; errors carry the waiting
  // reason (ErrImagePull, ImagePullBackOff, ErrImageNeverPull) in `why`.
  absl::StatusOr<cri::v1::Image> EnsureImage(const nlohmann::json& pod, const nlohmann::json& container,
                                             const cri::v1::PodSandboxConfig& sandbox_config, Waiting* why);
  absl::StatusOr<std::map<std::string, VolumePath>> Volumes(const nlohmann::json& pod);
  void WriteStatus(const nlohmann::json& pod, const RuntimePod& rp, const PodState& state, bool terminal);
  void RotateLogs() ABSL_LOCKS_EXCLUDED(mu_);
  std::string EmptyDirPath(const std::string& uid, const std::string& volume) const;

  apiserver::Api& registry_;
  cri::Runtime& runtime_;
  PodVolumes& volumes_;
  const Options options_;
  Clock& clock_;
  client::EventRecorder events_;
  // The crash-loop and image pull delays: berth's per-key backoff, without
  // jitter (kubelet's has none), base backoff_initial, cap backoff_max.
  ItemBackoff crash_backoff_;
  std::unique_ptr<client::Informer> pods_;
  client::WorkQueue queue_;
  std::thread relister_;
  std::vector<std::thread> workers_{};
  std::atomic<int64_t> relists_{0};
  int64_t node_memory_bytes_ = 0;

  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool relisted_ ABSL_GUARDED_BY(mu_) = false;
  std::string runtime_name_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> keys_ ABSL_GUARDED_BY(mu_);  // uid → namespace/name
  std::map<std::string, PodState> states_ ABSL_GUARDED_BY(mu_);   // uid →
  std::set<std::string> syncing_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> running_ ABSL_GUARDED_BY(mu_);  // pods with a running container or ready sandbox
  // Syncs end in this order: a relist listed before a pod's last sync ended
  // does not overwrite what that sync saw.
  uint64_t sync_seq_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, uint64_t> synced_at_ ABSL_GUARDED_BY(mu_);
  // The last relist: uid → a digest of its runtime objects and their states.
  std::map<std::string, std::string> seen_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, CrashBackoff> backoffs_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, absl::Time> exits_ ABSL_GUARDED_BY(mu_);       // container id → first seen exited
  std::map<std::string, Clock::TimerId> timers_ ABSL_GUARDED_BY(mu_);  // uid → its delayed sync
  absl::Time next_resync_ ABSL_GUARDED_BY(mu_);
  absl::Time next_rotation_ ABSL_GUARDED_BY(mu_);
  // Each running container's log path (fixed for its life), so a rotation
  // check asks the runtime for the status of new containers only. Used by
  // RotateLogs, on the relist thread only.
  std::map<std::string, std::string> log_paths_;
  std::atomic<size_t> log_paths_size_{0};  // log_paths_.size(), for cached_log_paths()
};

}  // namespace berth::node::pods
