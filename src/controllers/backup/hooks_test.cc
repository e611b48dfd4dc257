#include "controllers/backup/hooks.h"

#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace berth::controllers {
namespace {

using api::types::Pod;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

Pod MakePod(const std::string& name, std::map<std::string, std::string> annotations,
            std::vector<std::string> containers = {"app", "sidecar"}) {
  Pod pod;
  pod.metadata.namespace_ = "shop";
  pod.metadata.name = name;
  pod.metadata.annotations = std::move(annotations);
  for (auto& c : containers) pod.spec.containers.emplace_back().name = std::move(c);
  return pod;
}

// Records every hook it is asked to run; fails the pods named in `fail`.
class FakeHookRunner final : public HookRunner {
 public:
  struct Call {
    std::string pod;
    Hook hook;
  };
  absl::Status Run(const Pod& pod, const Hook& hook) override {
    calls.push_back({pod.metadata.name, hook});
    auto it = fail.find(pod.metadata.name);
    return it == fail.end() ? absl::OkStatus() : it->second;
  }
  std::vector<std::string> Pods() const {
    std::vector<std::string> out;
    for (const auto& c : calls) out.push_back(c.pod);
    return out;
  }
  std::map<std::string, absl::Status> fail;
  std::vector<Call> calls;
};

std::vector<std::string> Names(const std::vector<Pod>& pods) {
  std::vector<std::string> out;
  for (const auto& p : pods) out.push_back(p.metadata.name);
  return out;
}

TEST(ParseHookTest, NoCommandIsNoHook) {
  auto hook = ParseHook(MakePod("db", {{"pre.hook.backup.berth.io/container", "app"}}), HookPhase::kPre);
  ASSERT_TRUE(hook.ok()) << hook.status();
  EXPECT_FALSE(hook->has_value());
  // A post hook does not make a pre hook.
  hook = ParseHook(MakePod("db", {{"post.hook.backup.berth.io/command", "sync"}}), HookPhase::kPre);
  ASSERT_TRUE(hook.ok()) << hook.status();
  EXPECT_FALSE(hook->has_value());
}

TEST(ParseHookTest, DefaultsAreTheFirstContainerFailAndThirtySeconds) {
  auto hook = ParseHook(MakePod("db", {{"pre.hook.backup.berth.io/command", "sync"}}), HookPhase::kPre);
  ASSERT_TRUE(hook.ok()) << hook.status();
  ASSERT_TRUE(hook->has_value());
  EXPECT_EQ((*hook)->container, "app");
  EXPECT_THAT((*hook)->command, ElementsAre("sync"));
  EXPECT_FALSE((*hook)->continue_on_error);
  EXPECT_EQ((*hook)->timeout, absl::Seconds(30));
}

TEST(ParseHookTest, ReadsAllFourOfEachPhase) {
  const Pod pod = MakePod("db", {{"pre.hook.backup.berth.io/container", "sidecar"},
                                 {"pre.hook.backup.berth.io/command",
                                  R"(["/bin/sh", "-c", "sqlite3 /data/db 'PRAGMA wal_checkpoint(TRUNCATE)'"])"},
                                 {"pre.hook.backup.berth.io/on-error", "Continue"},
                                 {"pre.hook.backup.berth.io/timeout", "1m30s"},
                                 {"post.hook.backup.berth.io/command", " [\"/bin/rm\", \"/tmp/lock\"] "},
                                 {"post.hook.backup.berth.io/on-error", "fail"},
                                 {"post.hook.backup.berth.io/timeout", "720h0m0s"}});
  auto pre = ParseHook(pod, HookPhase::kPre);
  ASSERT_TRUE(pre.ok()) << pre.status();
  ASSERT_TRUE(pre->has_value());
  EXPECT_EQ((*pre)->container, "sidecar");
  EXPECT_THAT((*pre)->command, ElementsAre("/bin/sh", "-c", "sqlite3 /data/db 'PRAGMA wal_checkpoint(TRUNCATE)'"));
  EXPECT_TRUE((*pre)->continue_on_error);
  EXPECT_EQ((*pre)->timeout, absl::Seconds(90));

  auto post = ParseHook(pod, HookPhase::kPost);
  ASSERT_TRUE(post.ok()) << post.status();
  ASSERT_TRUE(post->has_value());
  EXPECT_EQ((*post)->container, "app");
  EXPECT_THAT((*post)->command, ElementsAre("/bin/rm", "/tmp/lock"));
  EXPECT_FALSE((*post)->continue_on_error);
  EXPECT_EQ((*post)->timeout, absl::Hours(720));
}

TEST(ParseHookTest, TimeoutsAreGoDurations) {
  for (const auto& [text, want] : std::vector<std::pair<std::string, absl::Duration>>{
           {"1.5m", absl::Seconds(90)}, {"500ms", absl::Milliseconds(500)}, {"1h0m0s", absl::Hours(1)}}) {
    auto hook = ParseHook(
        MakePod("db", {{"pre.hook.backup.berth.io/command", "sync"}, {"pre.hook.backup.berth.io/timeout", text}}),
        HookPhase::kPre);
    ASSERT_TRUE(hook.ok()) << text << ": " << hook.status();
    EXPECT_EQ((*hook)->timeout, want) << text;
  }
}

TEST(ParseHookTest, ReadsVelerosSpellings) {
  auto hook = ParseHook(MakePod("db", {{"pre.hook.backup.velero.io/container", "sidecar"},
                                       {"pre.hook.backup.velero.io/command", R"(["fsfreeze", "--freeze", "/data"])"},
                                       {"pre.hook.backup.velero.io/on-error", "Continue"},
                                       {"pre.hook.backup.velero.io/timeout", "5s"}}),
                        HookPhase::kPre);
  ASSERT_TRUE(hook.ok()) << hook.status();
  ASSERT_TRUE(hook->has_value());
  EXPECT_EQ((*hook)->container, "sidecar");
  EXPECT_THAT((*hook)->command, ElementsAre("fsfreeze", "--freeze", "/data"));
  EXPECT_TRUE((*hook)->continue_on_error);
  EXPECT_EQ((*hook)->timeout, absl::Seconds(5));
}

TEST(ParseHookTest, BothSpellingsMustAgree) {
  auto same = ParseHook(
      MakePod("db", {{"pre.hook.backup.berth.io/command", "sync"}, {"pre.hook.backup.velero.io/command", "sync"}}),
      HookPhase::kPre);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_TRUE(same->has_value());
  auto differ = ParseHook(MakePod("db", {{"pre.hook.backup.berth.io/command", "sync"},
                                         {"pre.hook.backup.berth.io/timeout", "5s"},
                                         {"pre.hook.backup.velero.io/timeout", "10s"}}),
                          HookPhase::kPre);
  EXPECT_EQ(differ.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(differ.status().message(), HasSubstr("pre.hook.backup.berth.io/timeout"));
  EXPECT_THAT(differ.status().message(), HasSubstr("pre.hook.backup.velero.io/timeout"));
}

// Each bad value: INVALID_ARGUMENT naming the annotation and the pod.
TEST(ParseHookTest, BadValuesNameTheAnnotationAndThePod) {
  struct Case {
    std::map<std::string, std::string> annotations;
    std::string annotation, says;
  };
  const std::string cmd = "post.hook.backup.berth.io/command";
  const std::vector<Case> cases = {
      {{{cmd, "[\"/bin/sh\", \"-c\""}}, cmd, "not a JSON array"},
      {{{cmd, "[\"/bin/sh\", 3]"}}, cmd, "every element must be a string"},
      {{{cmd, "[]"}}, cmd, "an empty command"},
      {{{cmd, "[\"\", \"x\"]"}}, cmd, "the program is empty"},
      {{{cmd, "sqlite3 /data/db .backup"}}, cmd, "write a command with arguments as a JSON array"},
      {{{cmd, "sync"}, {"post.hook.backup.berth.io/container", "db"}},
       "post.hook.backup.berth.io/container",
       "no container \"db\" (its containers: app, sidecar)"},
      {{{cmd, "sync"}, {"post.hook.backup.velero.io/container", "db"}}, "post.hook.backup.velero.io/container", "db"},
      {{{cmd, "sync"}, {"post.hook.backup.berth.io/on-error", "Ignore"}},
       "post.hook.backup.berth.io/on-error",
       "want Fail or Continue"},
      {{{cmd, "sync"}, {"post.hook.backup.berth.io/timeout", "30"}}, "post.hook.backup.berth.io/timeout", "\"30\""},
      {{{cmd, "sync"}, {"post.hook.backup.berth.io/timeout", "0s"}}, "post.hook.backup.berth.io/timeout", "positive"},
      {{{cmd, "sync"}, {"post.hook.backup.berth.io/timeout", "-5s"}}, "post.hook.backup.berth.io/timeout", "positive"},
      {{{cmd, "sync"}, {"post.hook.backup.berth.io/timeout", "inf"}}, "post.hook.backup.berth.io/timeout", "positive"},
      {{{cmd, "sync"}, {"post.hook.backup.berth.io/timeout", "1 m"}}, "post.hook.backup.berth.io/timeout", "positive"},
  };
  for (const auto& c : cases) {
    auto hook = ParseHook(MakePod("db", c.annotations), HookPhase::kPost);
    EXPECT_EQ(hook.status().code(), absl::StatusCode::kInvalidArgument) << c.annotation << " " << c.says;
    EXPECT_THAT(hook.status().message(), HasSubstr("pod shop/db"));
    EXPECT_THAT(hook.status().message(), HasSubstr("annotation " + c.annotation + ":"));
    EXPECT_THAT(hook.status().message(), HasSubstr(c.says));
  }
  // A pod without containers has nowhere to run a hook.
  auto none = ParseHook(MakePod("db", {{cmd, "sync"}}, {}), HookPhase::kPost);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(none.status().message(), HasSubstr("no containers"));
}

TEST(DescribeHookTest, QuotesArgumentsAndShortensLongCommands) {
  Hook hook{.container = "app", .command = {"/bin/sh", "-c", "echo hi > /data/x"}};
  EXPECT_EQ(DescribeHook(hook), "[/bin/sh -c \"echo hi > /data/x\"] in container app");
  hook.command = {"/bin/sh", "-c", std::string(300, 'x')};
  EXPECT_EQ(DescribeHook(hook).size(), std::string("[] in container app").size() + 120);
}

TEST(RunHooksTest, RunsEachPodsHookInOrderWithItsTimeout) {
  FakeHookRunner runner;
  const std::vector<Pod> pods = {
      MakePod("a", {{"pre.hook.backup.berth.io/command", "sync"}, {"pre.hook.backup.berth.io/timeout", "2s"}}),
      MakePod("no-hook", {}),
      MakePod("b", {{"pre.hook.backup.velero.io/command", "[\"/bin/true\"]"},
                    {"pre.hook.backup.velero.io/container", "sidecar"}}),
  };
  std::vector<std::string> warnings;
  std::vector<Pod> reached;
  ASSERT_TRUE(RunHooks(runner, pods, HookPhase::kPre, &warnings, &reached).ok());
  EXPECT_THAT(runner.Pods(), ElementsAre("a", "b"));
  EXPECT_EQ(runner.calls[0].hook.timeout, absl::Seconds(2));
  EXPECT_EQ(runner.calls[0].hook.container, "app");
  EXPECT_EQ(runner.calls[1].hook.timeout, absl::Seconds(30));
  EXPECT_EQ(runner.calls[1].hook.container, "sidecar");
  EXPECT_THAT(warnings, IsEmpty());
  EXPECT_THAT(Names(reached), ElementsAre("a", "no-hook", "b"));
}

TEST(RunHooksTest, ContinueWarnsAndGoesOn) {
  FakeHookRunner runner;
  runner.fail["a"] = absl::DeadlineExceededError("hook [sync] in container app of pod shop/a ran past 1s");
  const std::vector<Pod> pods = {
      MakePod("a", {{"pre.hook.backup.berth.io/command", "sync"}, {"pre.hook.backup.berth.io/on-error", "Continue"}}),
      MakePod("b", {{"pre.hook.backup.berth.io/command", "sync"}}),
  };
  std::vector<std::string> warnings;
  std::vector<Pod> reached;
  ASSERT_TRUE(RunHooks(runner, pods, HookPhase::kPre, &warnings, &reached).ok());
  EXPECT_THAT(runner.Pods(), ElementsAre("a", "b"));
  EXPECT_THAT(warnings, ElementsAre("pre hook of pod shop/a: hook [sync] in container app of pod shop/a ran past 1s "
                                    "(on-error: Continue)"));
  EXPECT_THAT(Names(reached), ElementsAre("a", "b"));
}

TEST(RunHooksTest, PreFailStopsThereAndSaysWhichPodsToRunPostHooksOf) {
  FakeHookRunner runner;
  runner.fail["b"] = absl::AbortedError("exit code 3");
  const std::vector<Pod> pods = {
      MakePod("a", {{"pre.hook.backup.berth.io/command", "sync"}}),
      MakePod("b", {{"pre.hook.backup.berth.io/command", "sync"}}),
      MakePod("c", {{"pre.hook.backup.berth.io/command", "sync"}}),
  };
  std::vector<std::string> warnings;
  std::vector<Pod> reached;
  absl::Status st = RunHooks(runner, pods, HookPhase::kPre, &warnings, &reached);
  EXPECT_EQ(st.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(st.message(), "pre hook of pod shop/b: exit code 3");
  EXPECT_THAT(runner.Pods(), ElementsAre("a", "b"));  // c's pre hook never ran
  EXPECT_THAT(warnings, IsEmpty());
  EXPECT_THAT(Names(reached), ElementsAre("a", "b"));
}

TEST(RunHooksTest, PostFailRunsTheOtherPostHooksAndReturnsTheFirstError) {
  FakeHookRunner runner;
  runner.fail["a"] = absl::DeadlineExceededError("too slow");
  runner.fail["b"] = absl::AbortedError("exit code 1");
  const std::vector<Pod> pods = {
      MakePod("a", {{"post.hook.backup.berth.io/command", "thaw"}}),
      MakePod("b", {{"post.hook.backup.berth.io/command", "thaw"}}),
      MakePod("bad", {{"post.hook.backup.berth.io/command", "thaw"}, {"post.hook.backup.berth.io/timeout", "x"}}),
      MakePod("c", {{"post.hook.backup.berth.io/command", "thaw"}}),
  };
  std::vector<std::string> warnings;
  absl::Status st = RunHooks(runner, pods, HookPhase::kPost, &warnings);
  EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(st.message(), "post hook of pod shop/a: too slow");
  EXPECT_THAT(runner.Pods(), ElementsAre("a", "b", "c"));  // every thaw that could run ran
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_EQ(warnings[0], "post hook of pod shop/b: exit code 1");
  EXPECT_THAT(warnings[1], HasSubstr("pod shop/bad: annotation post.hook.backup.berth.io/timeout"));
}

TEST(RunHooksTest, PreRefusesAMalformedHookOfEitherPhaseBeforeRunningAny) {
  FakeHookRunner runner;
  const std::vector<Pod> pods = {
      MakePod("a", {{"pre.hook.backup.berth.io/command", "freeze"}}),
      MakePod("b", {{"pre.hook.backup.berth.io/command", "freeze"},
                    {"post.hook.backup.berth.io/command", "thaw"},
                    {"post.hook.backup.berth.io/container", "nope"}}),
  };
  std::vector<std::string> warnings;
  std::vector<Pod> reached;
  absl::Status st = RunHooks(runner, pods, HookPhase::kPre, &warnings, &reached);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("pod shop/b: annotation post.hook.backup.berth.io/container"));
  EXPECT_THAT(runner.calls, IsEmpty());
  EXPECT_THAT(reached, IsEmpty());
}

TEST(RunHooksTest, PreFailOfAnOnErrorContinuePodAfterAFailPodKeepsGoing) {
  // Continue is per pod: a's failure is a warning, b's Fail ends the phase.
  FakeHookRunner runner;
  runner.fail["a"] = absl::FailedPreconditionError("container app of pod shop/a is not running");
  runner.fail["b"] = absl::FailedPreconditionError("pod shop/b is Pending, not Running");
  const std::vector<Pod> pods = {
      MakePod("a", {{"pre.hook.backup.berth.io/command", "sync"}, {"pre.hook.backup.berth.io/on-error", "Continue"}}),
      MakePod("b", {{"pre.hook.backup.berth.io/command", "sync"}}),
  };
  std::vector<std::string> warnings;
  absl::Status st = RunHooks(runner, pods, HookPhase::kPre, &warnings);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("pod shop/b is Pending"));
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("container app of pod shop/a is not running"));
}

}  // namespace
}  // namespace berth::controllers
