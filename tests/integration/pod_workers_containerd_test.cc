// The pod workers against a real containerd (root; containerd, runc, the CNI
// plugins) with objects in a real store and time on a FakeClock: the
// crash-loop backoff of an OnFailure pod grows 10 s → 20 s → 40 s on the
// fake clock, exit 3 with restartPolicy Never fails the pod with exit code 3
// and releases its sandbox, a graceful deletion runs the container's SIGTERM
// trap before the workers report that nothing runs, and a restarted agent
// adopts the running sandboxes (never a second one) and removes those of
// pods deleted while it was down; a container log over the limit is
// rotated, its path asked of the runtime once.
#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "absl/strings/match.h"
#include "apiserver/registry.h"
#include "client/object.h"
#include "client/testing/settle.h"
#include "common/clock.h"
#include "common/testing/eventually.h"
#include "common/testing/temp_dir.h"
#include "cri/testing/containerd.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "node/pods/pod_workers.h"
#include "store/store.h"

namespace berth::node::pods {
namespace {

using berth::testing::Eventually;
using client::K;
using nlohmann::json;
using ::testing::HasSubstr;

constexpr char kNode[] = "n1";

class FakeVolumes : public PodVolumes {
 public:
  bool PodVolumesReady(const std::string&) override { return true; }
  std::map<std::string, VolumePath> PodVolumePaths(const std::string&) override { return {}; }
  void Wake() override { ++wakes; }
  std::atomic<int> wakes{0};
};

// The real runtime, with the ContainerStatus calls counted per container
// (the log rotation check should ask once in a container's life).
class CountingRuntime : public cri::Runtime {
 public:
  explicit CountingRuntime(cri::Runtime& real) : real_(real) {}
  int StatusCalls(const std::string& id) {
    absl::MutexLock lock(&mu_);
    auto it = status_calls_.find(id);
    return it == status_calls_.end() ? 0 : it->second;
  }

  // cri::Runtime
  absl::StatusOr<cri::v1::ContainerStatus> ContainerStatus(const std::string& id) override {
    {
      absl::MutexLock lock(&mu_);
      ++status_calls_[id];
    }
    return real_.ContainerStatus(id);
  }
  absl::StatusOr<cri::v1::VersionResponse> Version() override { return real_.Version(); }
  absl::StatusOr<cri::v1::RuntimeStatus> Status() override { return real_.Status(); }
  absl::StatusOr<std::string> RunPodSandbox(const cri::v1::PodSandboxConfig& config,
                                            const std::string& handler) override {
    return real_.RunPodSandbox(config, handler);
  }
  absl::Status StopPodSandbox(const std::string& id) override { return real_.StopPodSandbox(id); }
  absl::Status RemovePodSandbox(const std::string& id) override { return real_.RemovePodSandbox(id); }
  absl::StatusOr<cri::v1::PodSandboxStatus> PodSandboxStatus(const std::string& id) override {
    return real_.PodSandboxStatus(id);
  }
  absl::StatusOr<std::vector<cri::v1::PodSandbox>> ListPodSandbox(const cri::v1::PodSandboxFilter& f) override {
    return real_.ListPodSandbox(f);
  }
  absl::StatusOr<std::string> CreateContainer(const std::string& sandbox_id, const cri::v1::ContainerConfig& config,
                                              const cri::v1::PodSandboxConfig& sandbox_config) override {
    return real_.CreateContainer(sandbox_id, config, sandbox_config);
  }
  absl::Status StartContainer(const std::string& id) override { return real_.StartContainer(id); }
  absl::Status StopContainer(const std::string& id, absl::Duration grace) override {
    return real_.StopContainer(id, grace);
  }
  absl::Status RemoveContainer(const std::string& id) override { return real_.RemoveContainer(id); }
  absl::StatusOr<std::vector<cri::v1::Container>> ListContainers(const cri::v1::ContainerFilter& f) override {
    return real_.ListContainers(f);
  }
  absl::Status ReopenContainerLog(const std::string& id) override { return real_.ReopenContainerLog(id); }
  absl::StatusOr<cri::v1::ExecSyncResponse> ExecSync(const std::string& id, const std::vector<std::string>& cmd,
                                                     absl::Duration timeout) override {
    return real_.ExecSync(id, cmd, timeout);
  }
  absl::StatusOr<std::string> Exec(const cri::v1::ExecRequest& r) override { return real_.Exec(r); }
  absl::StatusOr<std::string> Attach(const cri::v1::AttachRequest& r) override { return real_.Attach(r); }
  absl::StatusOr<std::vector<cri::v1::Image>> ListImages() override { return real_.ListImages(); }
  absl::StatusOr<cri::v1::Image> ImageStatus(const std::string& image) override { return real_.ImageStatus(image); }
  absl::StatusOr<std::string> PullImage(const std::string& image,
                                        const cri::v1::PodSandboxConfig& sandbox_config) override {
    return real_.PullImage(image, sandbox_config);
  }
  absl::Status RemoveImage(const std::string& image) override { return real_.RemoveImage(image); }

 private:
  cri::Runtime& real_;
  absl::Mutex mu_;
  std::map<std::string, int> status_calls_ ABSL_GUARDED_BY(mu_);
};

class PodWorkersContainerdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string why = cri::testing::TestContainerd::Unavailable(); !why.empty()) GTEST_SKIP() << why;
    ctd_ = std::make_unique<cri::testing::TestContainerd>("10.213.1.0/24");
    absl::Status st = ctd_->Start();
    ASSERT_TRUE(st.ok()) << st << "\n" << ctd_->Log();
    store_ = std::move(*store::Store::Open({.path = dir_.Join("state.db")}));
    registry_ = std::make_unique<apiserver::Registry>(*store_);
    ASSERT_TRUE(registry_->Bootstrap().ok());
  }
  void TearDown() override {
    if (workers_) workers_->Stop();
    workers_.reset();
  }

  void StartWorkers() {
    PodWorkers::Options o;
    o.node_name = kNode;
    o.root = dir_.Join("root");
    o.log_root = dir_.Join("logs");
    o.workers = 2;
    o.clock = &clock_;
    o.log_max_bytes = log_max_bytes_;
    o.resync = resync_;
    o.after_sync_for_test = [this](const std::string&) { syncs_.fetch_add(1); };
    workers_ = std::make_unique<PodWorkers>(*registry_, runtime_ != nullptr ? *runtime_ : ctd_->runtime(), volumes_, o);
    ASSERT_TRUE(workers_->Start().ok());
  }
  // Eventually, with the fake clock moving a relist period at a time (the
  // relist that notices containers exiting runs on it); after each tick,
  // until the relist it woke has run and the workers have done what it
  // found (containerd's own work is real time: the next tick looks again).
  template <class Pred>
  bool EventuallyTicking(Pred pred, absl::Duration timeout = absl::Seconds(60)) {
    return Eventually(
        [&] {
          if (pred()) return true;
          const int64_t relists = workers_->relists();
          clock_.Advance(absl::Seconds(1));
          return Eventually([&] { return workers_->relists() > relists; }, absl::Seconds(15)) &&
                 berth::testing::Settle(*store_) && pred();
        },
        timeout);
  }
  // Syncs the pod now and waits until a sync has finished.
  void SyncNow(const std::string& uid) {
    const int before = syncs_.load();
    workers_->Enqueue(uid);
    ASSERT_TRUE(Eventually([&] { return syncs_.load() > before; }, absl::Seconds(60)));
  }

  std::string CreatePod(const std::string& name, const std::string& policy, const std::string& script,
                        json extra_spec = json::object()) {
    json pod = {{"apiVersion", "v1"},
                {"kind", "Pod"},
                {"metadata", {{"name", name}, {"namespace", "default"}}},
                {"spec",
                 {{"nodeName", kNode},
                  {"restartPolicy", policy},
                  {"terminationGracePeriodSeconds", 5},
                  {"containers", json::array({{{"name", "main"},
                                               {"image", cri::kToolboxImage},
                                               {"command", json::array({"/bin/sh", "-c", script})}}})}}}};
    pod["spec"].update(extra_spec);
    auto created = registry_->Create(K("pods"), "default", pod);
    EXPECT_TRUE(created.ok()) << created.status();
    return created.ok() ? client::Uid(*created) : "";
  }
  json Pod(const std::string& name) {
    auto p = registry_->Get(K("pods"), "default", name);
    return p.ok() ? *p : json();
  }
  json Main(const std::string& name) {
    json statuses = Pod(name).value("status", json::object()).value("containerStatuses", json::array());
    return statuses.empty() ? json::object() : statuses[0];
  }
  // The runtime's instances of the pod's containers.
  std::vector<cri::v1::Container> Instances(const std::string& uid) {
    cri::v1::ContainerFilter f;
    (*f.mutable_label_selector())[kPodUidLabel] = uid;
    auto list = ctd_->runtime().ListContainers(f);
    return list.ok() ? *list : std::vector<cri::v1::Container>{};
  }
  std::vector<cri::v1::PodSandbox> Sandboxes(const std::string& uid) {
    cri::v1::PodSandboxFilter f;
    (*f.mutable_label_selector())[kPodUidLabel] = uid;
    auto list = ctd_->runtime().ListPodSandbox(f);
    return list.ok() ? *list : std::vector<cri::v1::PodSandbox>{};
  }
  bool NewestExited(const std::string& uid, int restarts) {
    for (const auto& c : Instances(uid)) {
      auto s = ctd_->runtime().ContainerStatus(c.id());
      if (s.ok() && s->annotations().at(kRestartCountAnnotation) == std::to_string(restarts) &&
          s->state() == cri::v1::CONTAINER_EXITED) {
        return true;
      }
    }
    return false;
  }

  berth::testing::TempDir dir_;
  std::unique_ptr<cri::testing::TestContainerd> ctd_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<apiserver::Registry> registry_;
  FakeClock clock_;
  FakeVolumes volumes_;
  std::atomic<int> syncs_{0};
  std::unique_ptr<PodWorkers> workers_;
  // Options a test may change before StartWorkers.
  cri::Runtime* runtime_ = nullptr;  // null: containerd's
  std::unique_ptr<CountingRuntime> counting_;
  int64_t log_max_bytes_ = int64_t{10} << 20;
  absl::Duration resync_ = absl::Minutes(1);
};

TEST_F(PodWorkersContainerdTest, OnFailureRestartsWithAGrowingBackoffOnTheClock) {
  StartWorkers();
  const std::string uid = CreatePod("crasher", "OnFailure", "echo run; exit 1");
  ASSERT_TRUE(Eventually([&] { return NewestExited(uid, 0); }, absl::Seconds(60))) << ctd_->Log();
  // The first crash restarts at once (and starts a 10 s backoff).
  SyncNow(uid);
  ASSERT_TRUE(Eventually([&] { return NewestExited(uid, 1); }, absl::Seconds(60)));
  absl::Duration backoff = absl::Seconds(10);
  for (int restarts = 1; restarts <= 3; ++restarts, backoff *= 2) {
    SyncNow(uid);
    ASSERT_TRUE(Eventually([&] {
      const json c = Main("crasher");
      return c.value("restartCount", -1) == restarts && c.contains("state") && c["state"].contains("waiting") &&
             c["state"]["waiting"].value("reason", "") == "CrashLoopBackOff";
    })) << Main("crasher").dump();
    EXPECT_THAT(Main("crasher")["state"]["waiting"].value("message", ""),
                HasSubstr("back-off " + absl::FormatDuration(backoff) +
                          " restarting failed container=main pod=crasher_default"));
    EXPECT_EQ(Main("crasher")["lastState"]["terminated"]["exitCode"], 1);
    EXPECT_EQ(Pod("crasher")["status"]["phase"], "Running");
    // Not a moment before the backoff ends...
    clock_.Advance(backoff - absl::Seconds(1));
    SyncNow(uid);
    EXPECT_FALSE(NewestExited(uid, restarts + 1));
    EXPECT_EQ(Main("crasher")["restartCount"], restarts);
    // ...and then again.
    clock_.Advance(absl::Seconds(1));
    ASSERT_TRUE(Eventually([&] { return NewestExited(uid, restarts + 1); }, absl::Seconds(60)));
  }
  // Dead instances are collected: the newest two stay.
  EXPECT_LE(Instances(uid).size(), 2u);
}

TEST_F(PodWorkersContainerdTest, ExitThreeWithRestartPolicyNeverFailsThePod) {
  StartWorkers();
  const std::string uid = CreatePod("three", "Never", "echo bye; exit 3");
  ASSERT_TRUE(EventuallyTicking([&] { return Pod("three")["status"].value("phase", "") == "Failed"; }))
      << Pod("three").dump() << ctd_->Log();
  const json t = Main("three")["state"]["terminated"];
  EXPECT_EQ(t["exitCode"], 3);
  EXPECT_EQ(t["reason"], "Error");
  EXPECT_TRUE(absl::StartsWith(t.value("containerID", ""), "containerd://"));
  EXPECT_FALSE(Pod("three")["status"].value("podIP", "").empty());
  // Nothing runs any more: the sandbox is stopped, the volume manager told.
  ASSERT_TRUE(EventuallyTicking([&] {
    auto sbs = Sandboxes(uid);
    return sbs.size() == 1 && sbs[0].state() == cri::v1::SANDBOX_NOTREADY && !workers_->CouldHaveRunningContainers(uid);
  }));
  EXPECT_GT(volumes_.wakes.load(), 0);
  // The log stays for `logs` until the pod goes.
  std::ifstream log(dir_.Join("logs/default_three_" + uid + "/main/0.log"));
  std::string line;
  std::getline(log, line);
  EXPECT_THAT(line, HasSubstr(" stdout F bye"));
}

TEST_F(PodWorkersContainerdTest, GracefulDeletionRunsTheSigtermTrapThenReportsNothingRuns) {
  StartWorkers();
  const std::string shared = dir_.Join("shared");
  const std::string uid =
      CreatePod("graceful", "Always",
                "trap 'echo last line > /shared/out; exit 0' TERM; echo up > /shared/out; while true; do sleep 1; done",
                {{"volumes",
                  json::array({{{"name", "shared"}, {"hostPath", {{"path", shared}, {"type", "DirectoryOrCreate"}}}}})},
                 {"containers",
                  json::array({{{"name", "main"},
                                {"image", cri::kToolboxImage},
                                {"volumeMounts", json::array({{{"name", "shared"}, {"mountPath", "/shared"}}})},
                                {"command", json::array({"/bin/sh", "-c",
                                                         "trap 'echo last line > /shared/out; exit 0' TERM; "
                                                         "echo up > /shared/out; while true; do sleep 1; done"})}}})}});
  ASSERT_TRUE(Eventually([&] { return Main("graceful").value("ready", false); }, absl::Seconds(60)))
      << Pod("graceful").dump();
  ASSERT_TRUE(Eventually([&] {
    std::ifstream in(shared + "/out");
    std::string s;
    return std::getline(in, s) && s == "up";
  }));
  EXPECT_TRUE(workers_->CouldHaveRunningContainers(uid));
  // kubectl delete: the pod stays, Terminating, until the agent is done.
  auto deleted = registry_->Delete(K("pods"), "default", "graceful", {});
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  ASSERT_TRUE(client::Deleting(*deleted));
  ASSERT_TRUE(Eventually([&] { return !workers_->CouldHaveRunningContainers(uid); }, absl::Seconds(60)))
      << "relists: " << workers_->relists() << "\ncontainers: " << Instances(uid).size()
      << "\npod: " << Pod("graceful").dump() << "\n"
      << ctd_->Log();
  std::ifstream in(shared + "/out");
  std::string last;
  std::getline(in, last);
  EXPECT_EQ(last, "last line");
  EXPECT_EQ(Main("graceful")["state"]["terminated"]["exitCode"], 0);
  EXPECT_EQ(Pod("graceful")["status"]["phase"], "Succeeded");
  // The object goes (the volume manager's final delete); so do the sandbox
  // and the containers.
  ASSERT_TRUE(registry_
                  ->Delete(K("pods"), "default", "graceful",
                           {.uid = uid, .resource_version = std::nullopt, .grace_period_seconds = 0})
                  .ok());
  // The logs go last, after the sandbox and the containers (one sync).
  const std::string logs = dir_.Join("logs/default_graceful_" + uid);
  ASSERT_TRUE(
      Eventually([&] { return Sandboxes(uid).empty() && Instances(uid).empty() && !std::filesystem::exists(logs); },
                 absl::Seconds(60)));
}

TEST_F(PodWorkersContainerdTest, ARestartedAgentAdoptsItsSandboxesAndRemovesThoseOfDeletedPods) {
  StartWorkers();
  const std::string kept = CreatePod("kept", "Always", "sleep 3600");
  const std::string gone = CreatePod("gone", "Always", "sleep 3600");
  ASSERT_TRUE(Eventually([&] { return Main("kept").value("ready", false) && Main("gone").value("ready", false); },
                         absl::Seconds(60)));
  const auto sandbox = Sandboxes(kept);
  const auto container = Instances(kept);
  ASSERT_EQ(sandbox.size(), 1u);
  ASSERT_EQ(container.size(), 1u);
  // An agent restart alone: the running sandbox and container are adopted.
  workers_->Stop();
  workers_.reset();
  StartWorkers();
  SyncNow(kept);
  ASSERT_EQ(Sandboxes(kept).size(), 1u);
  EXPECT_EQ(Sandboxes(kept)[0].id(), sandbox[0].id());
  ASSERT_EQ(Instances(kept).size(), 1u);
  EXPECT_EQ(Instances(kept)[0].id(), container[0].id());
  // Not stopped either: a restarted agent once took a pod its informer had
  // not listed yet for one deleted while it was down.
  EXPECT_EQ(Instances(kept)[0].state(), cri::v1::CONTAINER_RUNNING);
  workers_->Stop();
  workers_.reset();
  // While the agent is down: one pod is force-deleted, containerd restarts.
  ASSERT_TRUE(registry_
                  ->Delete(K("pods"), "default", "gone",
                           {.uid = gone, .resource_version = std::nullopt, .grace_period_seconds = 0})
                  .ok());
  ASSERT_TRUE(ctd_->Restart().ok()) << ctd_->Log();
  const absl::Time restarted = absl::Now();
  // containerd recovers the sandbox from its shim (the list fails until it
  // has): it must be adopted, never replaced.
  std::vector<cri::v1::PodSandbox> recovered;
  ASSERT_TRUE(Eventually(
      [&] {
        cri::v1::PodSandboxFilter f;
        (*f.mutable_label_selector())[kPodUidLabel] = kept;
        auto list = ctd_->runtime().ListPodSandbox(f);
        if (list.ok()) recovered = *list;
        return list.ok();
      },
      absl::Seconds(30)));
  ASSERT_EQ(recovered.size(), 1u) << ctd_->Log();
  ASSERT_EQ(recovered[0].id(), sandbox[0].id());
  ASSERT_EQ(recovered[0].state(), cri::v1::SANDBOX_READY) << ctd_->Log();
  StartWorkers();
  ASSERT_TRUE(EventuallyTicking([&] { return Sandboxes(gone).empty() && Instances(gone).empty(); }));
  // Its `sleep` (PID 1: SIGTERM does nothing) was killed after kubelet's
  // least grace period (2 s), not the pod's 5 s or the default 30 s.
  EXPECT_LT(absl::Now() - restarted, absl::Seconds(20));
  SyncNow(kept);
  const auto sandbox_after = Sandboxes(kept);
  const auto container_after = Instances(kept);
  ASSERT_EQ(sandbox_after.size(), 1u);
  EXPECT_EQ(sandbox_after[0].id(), sandbox[0].id());
  ASSERT_EQ(container_after.size(), 1u);
  EXPECT_EQ(container_after[0].id(), container[0].id());
  EXPECT_EQ(container_after[0].state(), cri::v1::CONTAINER_RUNNING);
  EXPECT_EQ(Main("kept")["restartCount"], 0);
  ASSERT_TRUE(EventuallyTicking([&] { return Main("kept").value("ready", false); })) << Pod("kept").dump();
}

// kubelet's container log manager: a running container's log over
// --container-log-max-size is renamed with a timestamp and the runtime
// reopens it (ReopenContainerLog). The check runs every log_rotation_period
// on the clock and asks the runtime for a container's log path once in its
// life; a container that no longer runs is forgotten.
TEST_F(PodWorkersContainerdTest, ALogOverTheLimitIsRotatedAskingForItsPathOnce) {
  counting_ = std::make_unique<CountingRuntime>(ctd_->runtime());
  runtime_ = counting_.get();
  log_max_bytes_ = 4096;
  resync_ = absl::Hours(1);  // no periodic syncs: ContainerStatus calls are the rotation check's
  StartWorkers();
  // About 14 KiB in the CRI log, then quiet.
  const std::string uid = CreatePod("chatty", "Always",
                                    "i=0; while [ $i -lt 100 ]; do echo "
                                    "line-$i-0123456789012345678901234567890123456789012345678901234567890123456789; "
                                    "i=$((i+1)); done; trap 'exit 0' TERM; while true; do sleep 1; done");
  ASSERT_TRUE(EventuallyTicking([&] { return Main("chatty").value("state", json::object()).contains("running"); }))
      << Pod("chatty").dump();
  const std::string dir = dir_.Join("logs/default_chatty_" + uid + "/main");
  auto rotated = [&] {
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
      if (absl::StartsWith(e.path().filename().string(), "0.log.")) out.push_back(e.path().string());
    }
    return out;
  };
  ASSERT_TRUE(EventuallyTicking([&] { return !rotated().empty(); }));
  ASSERT_EQ(rotated().size(), 1u);
  EXPECT_GT(std::filesystem::file_size(rotated()[0]), 4096u);
  std::ifstream old(rotated()[0]);
  EXPECT_THAT(std::string(std::istreambuf_iterator<char>(old), {}), HasSubstr("line-99-0123"));
  // The runtime writes a new 0.log (nothing yet: the container is quiet).
  ASSERT_TRUE(std::filesystem::exists(dir + "/0.log"));
  EXPECT_LT(std::filesystem::file_size(dir + "/0.log"), 4096u);
  EXPECT_EQ(workers_->cached_log_paths(), 1u);

  // Three more checks: the kept path is used, the runtime is not asked
  // again (a sync of the pod, if one happens, asks once itself).
  std::vector<cri::v1::Container> running = Instances(uid);
  ASSERT_EQ(running.size(), 1u);
  const int calls = counting_->StatusCalls(running[0].id()), syncs = syncs_.load();
  for (int i = 0; i < 30; ++i) {
    const int64_t relists = workers_->relists();
    clock_.Advance(absl::Seconds(1));
    ASSERT_TRUE(Eventually([&] { return workers_->relists() > relists; }, absl::Seconds(15)));
  }
  EXPECT_LE(counting_->StatusCalls(running[0].id()) - calls, syncs_.load() - syncs);
  EXPECT_EQ(rotated().size(), 1u);  // under the limit: not rotated again

  // The pod goes: its container stops and the next check forgets it.
  ASSERT_TRUE(registry_->Delete(K("pods"), "default", "chatty").ok());
  EXPECT_TRUE(EventuallyTicking([&] { return workers_->cached_log_paths() == 0; }));
}

}  // namespace
}  // namespace berth::node::pods
