// The pod GC of out-of-service nodes: a Terminating pod on a node that is
// not Ready and tainted out-of-service is marked Failed and deleted; on any
// other node it is left to its agent.
#include "controllers/nodelifecycle/pod_gc.h"

#include "client/object.h"
#include "client/writes.h"
#include "common/testing/eventually.h"
#include "controllers/taints.h"
#include "controllers/testing/controller_fixture.h"
#include "gtest/gtest.h"
#include "store/store.h"

namespace berth::controllers {
namespace {

using berth::testing::Eventually;
using client::Informer;
using client::K;
using client::Str;
using nlohmann::json;

class PodGcTest : public controllers::testing::ControllerTest {
 protected:
  void SetUp() override {
    ControllerTest::SetUp();
    if (HasFatalFailure()) return;
    nodes_ = std::make_unique<Informer>(*registry_, K("nodes"));
    pods_ = std::make_unique<Informer>(*registry_, K("pods"));
    gc_ = std::make_unique<PodGarbageCollector>(*registry_, PodGcInformers{*nodes_, *pods_},
                                                PodGarbageCollector::Options{.clock = &clock_});
    gc_->RegisterHandlers();
    for (Informer* i : {nodes_.get(), pods_.get()}) {
      i->Start();
      ASSERT_TRUE(i->WaitForSync(absl::Seconds(10)));
    }
    ASSERT_TRUE(registry_->Create(K("nodes"), "", {{"metadata", {{"name", "n1"}}}}).ok());
  }
  void TearDown() override {
    gc_->Stop();
    for (Informer* i : {nodes_.get(), pods_.get()}) i->Stop();
  }

  void SetNode(const std::string& ready, bool out_of_service) {
    auto node = registry_->Get(K("nodes"), "", "n1");
    ASSERT_TRUE(client::EditStatus(*registry_, K("nodes"), *node, [&](json& status) {
                  status["conditions"] = {{{"type", "Ready"}, {"status", ready}}};
                }).ok());
    node = registry_->Get(K("nodes"), "", "n1");
    ASSERT_TRUE(client::MutateObject(*registry_, K("nodes"), *node, apiserver::Subresource::kMain, [&](json& n) {
                  n["spec"]["taints"] = json::array();
                  if (out_of_service) {
                    n["spec"]["taints"].push_back(
                        {{"key", kTaintNodeOutOfService}, {"value", "nodeshutdown"}, {"effect", kNoExecute}});
                  }
                  return true;
                }).ok());
    const std::string rv = Str(*registry_->Get(K("nodes"), "", "n1"), {"metadata", "resourceVersion"});
    ASSERT_TRUE(Eventually([&] {
      auto cached = nodes_->Get("", "n1");
      return cached && Str(*cached, {"metadata", "resourceVersion"}) == rv;
    }));
  }
  // A running pod on n1, then deleted gracefully: Terminating.
  void TerminatingPod(const std::string& name) {
    auto created =
        registry_->Create(K("pods"), "default",
                          {{"metadata", {{"name", name}}},
                           {"spec", {{"nodeName", "n1"}, {"containers", {{{"name", "c"}, {"image", "busybox"}}}}}}});
    ASSERT_TRUE(created.ok()) << created.status();
    ASSERT_TRUE(client::EditStatus(*registry_, K("pods"), *created, [](json& s) { s["phase"] = "Running"; }).ok());
    auto deleted = registry_->Delete(K("pods"), "default", name);
    ASSERT_TRUE(deleted.ok()) << deleted.status();
    ASSERT_TRUE(client::Deleting(*deleted)) << "graceful deletion keeps a running pod Terminating";
    ASSERT_TRUE(Eventually([&] {
      auto cached = pods_->Get("default", name);
      return cached && client::Deleting(*cached);
    }));
  }
  bool Exists(const std::string& name) { return registry_->Get(K("pods"), "default", name).ok(); }

  FakeClock clock_;
  std::unique_ptr<Informer> nodes_, pods_;
  std::unique_ptr<PodGarbageCollector> gc_;
};

TEST_F(PodGcTest, TerminatingPodsOfAnOutOfServiceNodeAreDeleted) {
  TerminatingPod("app");
  // Unknown without the taint: the node may come back and stop it itself.
  SetNode("Unknown", /*out_of_service=*/false);
  ASSERT_TRUE(gc_->SyncNode("n1").ok());
  EXPECT_TRUE(Exists("app"));
  // Ready with the taint: its agent still stops it.
  SetNode("True", /*out_of_service=*/true);
  ASSERT_TRUE(gc_->SyncNode("n1").ok());
  EXPECT_TRUE(Exists("app"));
  // Not Ready and out of service: gone.
  SetNode("Unknown", /*out_of_service=*/true);
  ASSERT_TRUE(gc_->SyncNode("n1").ok());
  EXPECT_FALSE(Exists("app"));
}

TEST_F(PodGcTest, TheLoopAndNodeChangesFindThem) {
  gc_->Start();
  TerminatingPod("app");
  SetNode("Unknown", /*out_of_service=*/true);  // the node's change triggers a pass
  EXPECT_TRUE(Eventually([&] { return !Exists("app"); }));
  // A pod terminating there later is found by the periodic pass.
  TerminatingPod("late");
  ASSERT_TRUE(clock_.BlockUntilTimers(1));
  clock_.Advance(absl::Seconds(20));
  EXPECT_TRUE(Eventually([&] { return !Exists("late"); }));
}

}  // namespace
}  // namespace berth::controllers
