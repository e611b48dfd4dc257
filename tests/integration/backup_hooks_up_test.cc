// The backup hooks (issue 30, item 3) for real (root; containerd, runc, CNI
// plugins and berth's images): a pod of `berth up` with pre and post hook
// annotations, its hooks run by CriHookRunner through CRI ExecSync on its
// node's containerd, what they wrote read back with `berth exec`; a hook past
// its 1 s timeout (the runtime's clock) is DEADLINE_EXCEEDED; a hook that
// exits non-zero, or in a container the pod lacks or that is not running,
// fails clearly. The pod runs berth.local/sqlite-toolbox:1, imported with
// `berth image import` as the backup tests do, and its sqlite3 works.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "api/types/core_pod.h"
#include "cli/hook_runner.h"
#include "common/testing/eventually.h"
#include "controllers/backup/hooks.h"
#include "cri/containerd.h"
#include "cri/testing/containerd.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "up_fixture.h"

namespace berth::testing {
namespace {

using controllers::Hook;
using controllers::HookPhase;
using controllers::ParseHook;
using controllers::RunHooks;
using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
namespace fs = std::filesystem;

constexpr char kNode[] = "hooknode";
constexpr char kSqliteImage[] = "berth.local/sqlite-toolbox:1";

class BackupHooksUpTest : public BerthUpFixture {
 protected:
  void SetUp() override {
    BerthUpFixture::SetUp();
    if (IsSkipped()) return;
    if (std::string why = cri::testing::TestContainerd::Unavailable(); !why.empty()) GTEST_SKIP() << why;
    archive_ = std::string(BERTH_IMAGES_DIR) + "/sqlite-toolbox.tar";
    if (!fs::exists(archive_)) GTEST_SKIP() << archive_ << " missing (scripts/install-deps installs sqlite3)";
    node_ = kNode;
    with_runtime_ = true;
  }
  void TearDown() override {
    if (with_runtime_) {
      StopUp(SIGTERM);
      auto [rc, out] = RunBerth({"down"});
      EXPECT_EQ(rc, 0) << out;
      EXPECT_TRUE(sandbox_.Mounts().empty()) << "mounts left: " << sandbox_.Mounts().front();
      const std::vector<pid_t> shims = Shims();
      EXPECT_TRUE(shims.empty()) << "shims left";
      for (pid_t pid : shims) ::kill(pid, SIGKILL);
    }
    BerthUpFixture::TearDown();
  }

  // containerd shims of this test's containerd (berth down stops them).
  std::vector<pid_t> Shims() {
    const std::string socket = cri::ContainerdSetup{.dir = data_ + "/containerd/" + kNode, .pod_cidr = ""}.Socket();
    std::vector<pid_t> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("/proc", ec)) {
      const pid_t pid = static_cast<pid_t>(std::atoi(e.path().filename().c_str()));
      if (pid <= 0) continue;
      std::string cmd = ReadWholeFile(e.path() / "cmdline");
      std::replace(cmd.begin(), cmd.end(), '\0', ' ');
      if (absl::StrContains(cmd, "containerd-shim") && absl::StrContains(cmd, socket)) out.push_back(pid);
    }
    return out;
  }
  void Apply(const std::string& yaml) { Berth({"apply", "-f", WriteFile("manifest.yaml", yaml)}); }

  // The pod as the controllers see it.
  api::types::Pod TypedPod(const std::string& name) {
    auto pod = api::types::Decode<api::types::Pod>(Pod(name));
    EXPECT_TRUE(pod.ok()) << pod.status();
    return pod.ok() ? *pod : api::types::Pod();
  }
  // What `berth exec POD -c C -- CMD...` printed, failing unless it exits 0.
  std::string Exec(const std::string& pod, const std::string& container, const std::vector<std::string>& cmd) {
    std::vector<std::string> args = {"exec", pod, "-c", container, "--"};
    args.insert(args.end(), cmd.begin(), cmd.end());
    auto [rc, out] = RunBerth(args);
    EXPECT_EQ(rc, 0) << out;
    return out;
  }
  // The runner berth up's backup controller uses, on this data directory's
  // endpoint files (as `berth exec` finds the runtimes).
  std::unique_ptr<cli::CriHookRunner> Runner() {
    return cli::CriHookRunner::ForEndpoints([this](const std::string& node) {
      return std::string(absl::StripAsciiWhitespace(ReadWholeFile(data_ + "/nodes/" + node + "/runtime-endpoint")));
    });
  }

  std::string archive_;
  bool with_runtime_ = false;
};

TEST_F(BackupHooksUpTest, HooksRunInThePodsContainersThroughItsNodesRuntime) {
  StartUp({"--pod-cidr", "10.213.9.0/24"});
  // The backup tests' image, imported as they do.
  auto [import_rc, import_out] = RunBerth({"image", "import", archive_});
  ASSERT_EQ(import_rc, 0) << import_out;

  // db: an SQLite writer (sqlite-toolbox) whose pre hook checkpoints its
  // database and leaves a mark; a sidecar (toolbox) with the post hook.
  Apply(std::string(R"(apiVersion: v1
kind: Pod
metadata:
  name: db
  annotations:
    pre.hook.backup.berth.io/command: '["/bin/sh", "-c", "sqlite3 /tmp/db \"PRAGMA wal_checkpoint(TRUNCATE)\" && echo checkpointed $(sqlite3 /tmp/db \"select count(*) from t\") > /tmp/pre"]'
    pre.hook.backup.berth.io/timeout: 20s
    post.hook.backup.velero.io/container: side
    post.hook.backup.velero.io/command: '["/bin/sh", "-c", "echo thawed > /tmp/post"]'
spec:
  terminationGracePeriodSeconds: 1
  containers:
    - name: main
      image: )") +
        kSqliteImage + R"(
      # The writer keeps its connection open, so its write-ahead log stays.
      command: ["/bin/sh", "-c", "(echo 'PRAGMA journal_mode=WAL; create table t(x); insert into t values (1), (2), (3);'; exec sleep 100000) | exec sqlite3 /tmp/db"]
    - name: side
      image: )" +
        cri::kToolboxImage + R"(
      command: ["/bin/sh", "-c", "exec sleep 100000"]
)");
  ASSERT_TRUE(Eventually(
      [&] {
        if (!Running("db")) return false;
        for (const auto& cs : Pod("db")["status"].value("containerStatuses", json::array())) {
          if (!cs["state"].contains("running")) return false;
        }
        return true;
      },
      absl::Seconds(120)))
      << Pod("db").dump();
  ASSERT_TRUE(Eventually(
      [&] {
        return RunBerth({"exec", "db", "-c", "main", "--", "sqlite3", "/tmp/db", "select count(*) from t"}).second ==
               "3\n";
      },
      absl::Seconds(30)));
  // The image's sqlite3 runs in the container (libraries and loader found).
  EXPECT_EQ(Exec("db", "main", {"sqlite3", "/tmp/db", "PRAGMA integrity_check"}), "ok\n");
  // The writer's rows are in its write-ahead log, not yet in the database.
  EXPECT_NE(Exec("db", "main", {"stat", "-c", "%s", "/tmp/db-wal"}), "0\n");

  auto runner = Runner();
  const std::vector<api::types::Pod> pods = {TypedPod("db")};
  std::vector<std::string> warnings;
  std::vector<api::types::Pod> reached;
  ASSERT_TRUE(RunHooks(*runner, pods, HookPhase::kPre, &warnings, &reached).ok());
  EXPECT_THAT(warnings, IsEmpty());
  EXPECT_EQ(Exec("db", "main", {"cat", "/tmp/pre"}), "checkpointed 3\n");
  // Checkpointed (TRUNCATE): the log is empty, the database file holds it all.
  EXPECT_EQ(Exec("db", "main", {"stat", "-c", "%s", "/tmp/db-wal"}), "0\n");
  ASSERT_TRUE(RunHooks(*runner, reached, HookPhase::kPost, &warnings).ok());
  EXPECT_EQ(Exec("db", "side", {"cat", "/tmp/post"}), "thawed\n");
  EXPECT_THAT(warnings, IsEmpty());

  const api::types::Pod db = TypedPod("db");
  // Past its timeout: the runtime's own 1 s deadline, so real time.
  {
    const absl::Time start = absl::Now();
    absl::Status st =
        runner->Run(db, Hook{.container = "main", .command = {"sleep", "30"}, .timeout = absl::Seconds(1)});
    EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded) << st;
    EXPECT_THAT(st.message(),
                HasSubstr("hook [sleep 30] in container main of pod default/db ran past its timeout of 1s"));
    EXPECT_LT(absl::Now() - start, absl::Seconds(20));
  }
  // On-error Continue makes it a warning.
  {
    api::types::Pod slow = db;
    slow.metadata.annotations = {{"pre.hook.backup.berth.io/command", R"(["sleep", "30"])"},
                                 {"pre.hook.backup.berth.io/timeout", "1s"},
                                 {"pre.hook.backup.berth.io/on-error", "Continue"}};
    warnings.clear();
    EXPECT_TRUE(RunHooks(*runner, {slow}, HookPhase::kPre, &warnings).ok());
    ASSERT_EQ(warnings.size(), 1u);
    EXPECT_THAT(warnings[0], HasSubstr("ran past its timeout of 1s"));
    EXPECT_THAT(warnings[0], HasSubstr("(on-error: Continue)"));
  }
  // A non-zero exit: its code and what it printed.
  {
    absl::Status st =
        runner->Run(db, Hook{.container = "main", .command = {"sqlite3", "/tmp/no/such/dir/db", "select 1"}});
    EXPECT_EQ(st.code(), absl::StatusCode::kAborted) << st;
    EXPECT_THAT(st.message(), HasSubstr("failed with exit code 1: "));
    EXPECT_THAT(st.message(), HasSubstr("unable to open database"));
  }
  // A container the pod does not have: refused when the annotation is read,
  // naming it; and the runner itself runs nothing there.
  {
    api::types::Pod ghost = db;
    ghost.metadata.annotations["pre.hook.backup.berth.io/container"] = "ghost";
    auto hook = ParseHook(ghost, HookPhase::kPre);
    EXPECT_EQ(hook.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(hook.status().message(),
                HasSubstr("pod default/db: annotation pre.hook.backup.berth.io/container: the pod has no container "
                          "\"ghost\" (its containers: main, side)"));
    absl::Status st = runner->Run(db, Hook{.container = "ghost", .command = {"true"}});
    EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
    EXPECT_THAT(st.message(), HasSubstr("in container ghost of pod default/db: the container is not running"));
  }
  // A container whose status is behind (the runtime removed it): the
  // runtime's NOT_FOUND says it is not running.
  {
    api::types::Pod stale = db;
    for (auto& cs : stale.status.container_statuses) {
      if (cs.name == "main") cs.unknown["containerID"] = "containerd://0123456789abcdef";
    }
    absl::Status st = runner->Run(stale, Hook{.container = "main", .command = {"true"}});
    EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
    EXPECT_THAT(st.message(), HasSubstr("the container is not running (node hooknode's runtime:"));
  }
}

}  // namespace
}  // namespace berth::testing
