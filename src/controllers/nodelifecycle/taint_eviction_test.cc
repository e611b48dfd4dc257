// Taint-based eviction on a fake clock, objects in a real store: a pod that
// does not tolerate a NoExecute taint goes at once, one with the default
// tolerations after 300 s, one tolerating forever stays; recovery cancels.
#include "controllers/nodelifecycle/taint_eviction.h"

#include "client/object.h"
#include "client/writes.h"
#include "common/testing/eventually.h"
#include "controllers/nodelifecycle/node_lifecycle.h"
#include "controllers/taints.h"
#include "controllers/testing/controller_fixture.h"
#include "gtest/gtest.h"
#include "store/store.h"

namespace berth::controllers {
namespace {

using berth::testing::Eventually;
using client::Field;
using client::Informer;
using client::K;
using client::Str;
using nlohmann::json;

class TaintEvictionTest : public controllers::testing::ControllerTest {
 protected:
  void SetUp() override {
    ControllerTest::SetUp();
    if (HasFatalFailure()) return;
    nodes_ = std::make_unique<Informer>(*registry_, K("nodes"));
    pods_ = std::make_unique<Informer>(*registry_, K("pods"));
    controller_ = std::make_unique<TaintEvictionController>(*registry_, TaintEvictionInformers{*nodes_, *pods_},
                                                            TaintEvictionController::Options{.clock = &clock_});
    controller_->RegisterHandlers();
    for (Informer* i : {nodes_.get(), pods_.get()}) {
      i->Start();
      ASSERT_TRUE(i->WaitForSync(absl::Seconds(10)));
    }
    ASSERT_TRUE(registry_->Create(K("nodes"), "", {{"metadata", {{"name", "n1"}}}}).ok());
    controller_->Start();
  }
  void TearDown() override {
    controller_->Stop();
    for (Informer* i : {nodes_.get(), pods_.get()}) i->Stop();
  }

  void SetTaints(json taints) {
    auto node = registry_->Get(K("nodes"), "", "n1");
    ASSERT_TRUE(node.ok());
    ASSERT_TRUE(client::MutateObject(*registry_, K("nodes"), *node, apiserver::Subresource::kMain, [&](json& n) {
                  n["spec"]["taints"] = taints;
                  return true;
                }).ok());
  }
  // A pod on n1 with `tolerations`; the DefaultTolerationSeconds admission
  // adds the 300 s ones for the keys they do not cover.
  void CreatePod(const std::string& name, json tolerations = json::array()) {
    json pod = {{"metadata", {{"name", name}}},
                {"spec", {{"nodeName", "n1"}, {"containers", {{{"name", "c"}, {"image", "busybox"}}}}}}};
    if (!tolerations.empty()) pod["spec"]["tolerations"] = tolerations;
    ASSERT_TRUE(registry_->Create(K("pods"), "default", pod).ok());
  }
  bool Gone(const std::string& pod) {
    auto p = registry_->Get(K("pods"), "default", pod);
    // Deleted, or (with graceful pod deletion) terminating.
    return !p.ok() || client::Deleting(*p);
  }
  bool Scheduled(const std::string& pod, absl::Time at) {
    auto due = controller_->ScheduledEviction("default/" + pod);
    return due && *due == at;
  }
  bool HasEvent(const std::string& pod, const std::string& message) {
    auto events = registry_->List(K("events"), "default", {});
    if (!events.ok()) return false;
    for (const auto& e : events->items) {
      if (Str(e, {"reason"}) == "TaintManagerEviction" && Str(e, {"involvedObject", "name"}) == pod &&
          Str(e, {"message"}) == message) {
        return true;
      }
    }
    return false;
  }
  static json Unreachable() {
    return json::array(
        {{{"key", kTaintNodeUnreachable}, {"effect", kNoExecute}, {"timeAdded", "2026-01-01T00:00:00Z"}}});
  }

  FakeClock clock_;
  std::unique_ptr<Informer> nodes_, pods_;
  std::unique_ptr<TaintEvictionController> controller_;
};

TEST_F(TaintEvictionTest, DefaultTolerationsEvictAfterFiveMinutes) {
  CreatePod("web");
  const absl::Time start = clock_.Now();
  SetTaints(Unreachable());
  ASSERT_TRUE(Eventually([&] { return Scheduled("web", start + absl::Seconds(300)); }));
  clock_.Advance(absl::Seconds(299));
  // Nothing happens before its time (the worker would have to be told).
  ASSERT_TRUE(controller_->SyncPod("default/web").ok());
  EXPECT_FALSE(Gone("web"));
  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(Eventually([&] { return Gone("web"); }));
  EXPECT_TRUE(Eventually([&] { return HasEvent("web", "Marking for deletion Pod default/web"); }));
}

TEST_F(TaintEvictionTest, AnUntoleratedTaintEvictsAtOnceWithTheDisruptionCondition) {
  CreatePod("batch");
  SetTaints({{{"key", "example.com/maintenance"}, {"effect", kNoExecute}}});
  ASSERT_TRUE(Eventually([&] { return Gone("batch"); }));
  auto pod = registry_->Get(K("pods"), "default", "batch");
  if (pod.ok()) {  // terminating: the condition says why
    bool found = false;
    for (const auto& c : Field(Field(*pod, "status"), "conditions")) {
      if (Str(c, {"type"}) != "DisruptionTarget") continue;
      found = true;
      EXPECT_EQ(Str(c, {"reason"}), "DeletionByTaintManager");
      EXPECT_EQ(Str(c, {"message"}), "Taint manager: deleting due to NoExecute taint");
    }
    EXPECT_TRUE(found);
  }
  // NoSchedule taints evict nothing.
  SetTaints({{{"key", "example.com/maintenance"}, {"effect", kNoSchedule}}});
  ASSERT_TRUE(Eventually([&] {
    auto n = nodes_->Get("", "n1");
    return n && NodeTaints(*n, kNoExecute).empty();
  }));
  CreatePod("stays");
  ASSERT_TRUE(Eventually([&] { return pods_->Get("default", "stays").has_value(); }));
  ASSERT_TRUE(controller_->SyncPod("default/stays").ok());
  ASSERT_TRUE(controller_->SyncNode("n1").ok());
  EXPECT_FALSE(Gone("stays"));
}

TEST_F(TaintEvictionTest, TolerationsDecideHowLong) {
  // Forever: tolerates with no tolerationSeconds.
  CreatePod("forever", {{{"operator", "Exists"}, {"effect", kNoExecute}}});
  // Shorter than the default, for unreachable only.
  CreatePod(
      "short",
      {{{"key", kTaintNodeUnreachable}, {"operator", "Exists"}, {"effect", kNoExecute}, {"tolerationSeconds", 30}}});
  const absl::Time start = clock_.Now();
  SetTaints(Unreachable());
  ASSERT_TRUE(Eventually([&] { return Scheduled("short", start + absl::Seconds(30)); }));
  ASSERT_TRUE(controller_->SyncPod("default/forever").ok());
  EXPECT_FALSE(controller_->ScheduledEviction("default/forever").has_value());
  // A second taint adds its own toleration: the shortest counts, from the
  // time the pod was first seen tainted.
  clock_.Advance(absl::Seconds(10));
  json both = Unreachable();
  both.push_back({{"key", kTaintNodeNotReady}, {"effect", kNoExecute}});
  SetTaints(both);
  ASSERT_TRUE(controller_->SyncNode("n1").ok());
  EXPECT_TRUE(Scheduled("short", start + absl::Seconds(30)));
  clock_.Advance(absl::Seconds(20));
  ASSERT_TRUE(Eventually([&] { return Gone("short"); }));
  EXPECT_FALSE(Gone("forever"));
}

TEST_F(TaintEvictionTest, RecoveryCancelsTheEviction) {
  CreatePod("web");
  const absl::Time start = clock_.Now();
  SetTaints(Unreachable());
  ASSERT_TRUE(Eventually([&] { return Scheduled("web", start + absl::Seconds(300)); }));
  clock_.Advance(absl::Seconds(120));
  SetTaints(json::array());
  ASSERT_TRUE(Eventually([&] { return !controller_->ScheduledEviction("default/web").has_value(); }));
  EXPECT_TRUE(Eventually([&] { return HasEvent("web", "Cancelling deletion of Pod default/web"); }));
  clock_.Advance(absl::Seconds(600));
  ASSERT_TRUE(controller_->SyncPod("default/web").ok());
  EXPECT_FALSE(Gone("web"));
  // Tainted again later: the five minutes start again.
  SetTaints(Unreachable());
  ASSERT_TRUE(Eventually([&] { return Scheduled("web", clock_.Now() + absl::Seconds(300)); }));
}

}  // namespace
}  // namespace berth::controllers
