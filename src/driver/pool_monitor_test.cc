// The pool monitor against berth's own API server (over HTTPS with a token,
// as a pod reaches kube-apiserver): the pool's pressure becomes the Node's
// BerthPoolPressure condition — kubelet's Ready left alone — and a Warning
// event when it turns True, a Normal one when it clears; on a fake clock.
#include "driver/pool_monitor.h"

#include "apiserver/control_plane.h"
#include "apiserver/kubeconfig.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace berth::driver {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;

class PoolMonitorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A directory pool on the test machine's disk. With a high watermark of
    // 1 % it is "nearly full"; with 100 % it never is.
    auto full = Pool::Open({.dir = dir_.Join("pool"), .high_watermark = 0.01});
    ASSERT_TRUE(full.ok()) << full.status();
    full_ = std::move(*full);
    auto roomy = Pool::Open({.dir = dir_.Join("pool"), .high_watermark = 1.0});
    ASSERT_TRUE(roomy.ok()) << roomy.status();
    roomy_ = std::move(*roomy);
    ctx_.options.pool = dir_.Join("pool");
    ctx_.pool = roomy_.get();

    apiserver::ControlPlane::Options o;
    o.data_dir = dir_.Join("api");
    o.api_address = "127.0.0.1:0";
    auto cp = apiserver::ControlPlane::Start(o);
    ASSERT_TRUE(cp.ok()) << cp.status();
    cp_ = std::move(*cp);
    // The Node as kubelet keeps it, with its Ready condition.
    auto r = Client()()->get()->Call(
        "POST", "/api/v1/nodes",
        json{{"apiVersion", "v1"},
             {"kind", "Node"},
             {"metadata", {{"name", "node-a"}}},
             {"status", {{"conditions", {{{"type", "Ready"}, {"status", "True"}, {"reason", "KubeletReady"}}}}}}}
            .dump());
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->code, 201) << r->body;
  }

  PoolMonitor::ClientFactory Client() {
    return [path = cp_->kubeconfig_path()] { return apiserver::ApiClientForKubeconfig(path); };
  }

  json Condition(const std::string& type) {
    auto r = Client()()->get()->Call("GET", "/api/v1/nodes/node-a");
    if (!r.ok() || r->code != 200) return nullptr;
    const json node = json::parse(r->body);
    for (const auto& c : node["status"].value("conditions", json::array())) {
      if (c.value("type", "") == type) return c;
    }
    return nullptr;
  }

  // (type, reason) of the events on node-a, oldest first.
  std::vector<std::pair<std::string, std::string>> Events() {
    std::vector<std::pair<std::string, std::string>> out;
    auto r = Client()()->get()->Call("GET", "/api/v1/namespaces/default/events");
    if (!r.ok() || r->code != 200) return out;
    const json list = json::parse(r->body);
    for (const auto& e : list["items"]) {
      if (e["involvedObject"].value("name", "") == "node-a" && e["involvedObject"].value("kind", "") == "Node") {
        out.emplace_back(e.value("type", ""), e.value("reason", ""));
      }
    }
    return out;
  }

  berth::testing::TempDir dir_;
  std::unique_ptr<Pool> full_, roomy_;
  DriverContext ctx_;
  std::unique_ptr<apiserver::ControlPlane> cp_;
};

TEST_F(PoolMonitorTest, PressureIsANodeConditionWithEventsAndKubeletsConditionsStay) {
  FakeClock clock;
  PoolMonitor monitor(ctx_, {.node_name = "node-a"}, Client(), clock);
  EXPECT_EQ(monitor.RunOnce().reason, "PoolHasRoom");
  json c = Condition(kPoolConditionType);
  ASSERT_FALSE(c.is_null());
  EXPECT_EQ(c["status"], "False");
  EXPECT_EQ(c["reason"], "PoolHasRoom");
  EXPECT_TRUE(Events().empty()) << "the first healthy look is no news";

  ctx_.pool = full_.get();
  clock.Advance(absl::Seconds(10));
  PoolMonitor::State s = monitor.RunOnce();
  EXPECT_EQ(s.reason, "PoolNearlyFull");
  c = Condition(kPoolConditionType);
  EXPECT_EQ(c["status"], "True");
  EXPECT_EQ(c["reason"], "PoolNearlyFull");
  EXPECT_THAT(c["message"].get<std::string>(), HasSubstr("past its high watermark of 1%"));
  EXPECT_EQ(Condition("Ready")["status"], "True") << "kubelet's condition is left alone";
  EXPECT_EQ(Events(), (std::vector<std::pair<std::string, std::string>>{{"Warning", "PoolNearlyFull"}}));
  // The same state again: no new event.
  monitor.RunOnce();
  EXPECT_EQ(Events().size(), 1u);

  ctx_.pool = roomy_.get();
  clock.Advance(absl::Seconds(10));
  EXPECT_EQ(monitor.RunOnce().reason, "PoolHasRoom");
  EXPECT_EQ(Condition(kPoolConditionType)["status"], "False");
  EXPECT_EQ(Events(), (std::vector<std::pair<std::string, std::string>>{{"Warning", "PoolNearlyFull"},
                                                                        {"Normal", "PoolPressureRelieved"}}));
}

TEST_F(PoolMonitorTest, AFailedReportIsMadeAtTheNextPassEventIncluded) {
  FakeClock clock;
  bool reachable = false;
  PoolMonitor::ClientFactory flaky = [&]() -> absl::StatusOr<std::unique_ptr<http::ApiClient>> {
    if (!reachable) return absl::UnavailableError("API server down");
    return Client()();
  };
  ctx_.pool = full_.get();
  PoolMonitor monitor(ctx_, {.node_name = "node-a"}, flaky, clock);
  EXPECT_EQ(monitor.RunOnce().reason, "PoolNearlyFull");
  EXPECT_TRUE(Condition(kPoolConditionType).is_null());
  reachable = true;
  clock.Advance(absl::Seconds(10));
  monitor.RunOnce();
  EXPECT_EQ(Condition(kPoolConditionType)["status"], "True");
  EXPECT_EQ(Events(), (std::vector<std::pair<std::string, std::string>>{{"Warning", "PoolNearlyFull"}}));
}

TEST_F(PoolMonitorTest, TheLoopRunsEveryPeriodOnTheClock) {
  FakeClock clock;
  PoolMonitor monitor(ctx_, {.node_name = "node-a", .period = absl::Seconds(10)}, Client(), clock);
  monitor.Start();
  ASSERT_TRUE(clock.BlockUntilTimers(1));  // first pass done
  EXPECT_EQ(Condition(kPoolConditionType)["reason"], "PoolHasRoom");
  ctx_.pool = full_.get();
  clock.Advance(absl::Seconds(9));
  EXPECT_EQ(Condition(kPoolConditionType)["reason"], "PoolHasRoom") << "looked again before the period was over";
  clock.Advance(absl::Seconds(1));
  ASSERT_TRUE(clock.BlockUntilTimers(1));  // the second pass is done
  EXPECT_EQ(Condition(kPoolConditionType)["reason"], "PoolNearlyFull");
  monitor.Stop();
}

}  // namespace
}  // namespace berth::driver
