#include "client/events.h"
#include "apiserver/registry.h"

#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "client/object.h"
#include "client/testing/registry_fixture.h"
#include "common/testing/eventually.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace berth::client {
namespace {

using nlohmann::json;

class EventRecorderTest : public testing::RegistryTest {
 protected:
  std::vector<json> Events() {
    auto page = registry_->List(K("events"), "default", {});
    return page.ok() ? page->items : std::vector<json>{};
  }
};

TEST_F(EventRecorderTest, WritesQueuedEventsAndAggregatesRepeats) {
  EventRecorder recorder(*registry_, "test-controller", /*repeat_interval=*/absl::ZeroDuration());
  const json a = Claim("a"), b = Claim("b");
  for (int i = 0; i < 200; ++i) recorder.Record(i % 2 ? a : b, "Normal", "Reason" + std::to_string(i), "m");
  recorder.Record(a, "Warning", "Failed", "boom");
  recorder.Flush();
  EXPECT_EQ(Events().size(), 201u);
  recorder.Record(a, "Warning", "Failed", "boom");  // the same event again: counted, not repeated
  recorder.Flush();
  std::vector<json> failed;
  for (const auto& e : Events()) {
    if (e.value("reason", "") == "Failed") failed.push_back(e);
  }
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0]["count"], 2);
  EXPECT_EQ(failed[0]["type"], "Warning");
  EXPECT_EQ(failed[0]["involvedObject"]["uid"], a["metadata"]["uid"]);
  EXPECT_EQ(failed[0]["involvedObject"]["namespace"], "default");
  EXPECT_EQ(failed[0]["source"]["component"], "test-controller");
}

TEST_F(EventRecorderTest, DropsRepeatsWithinTheIntervalEvenBeforeTheyAreWritten) {
  EventRecorder recorder(*registry_, "test-controller", absl::Hours(1));
  const json a = Claim("a");
  for (int i = 0; i < 50; ++i) recorder.Record(a, "Normal", "Provisioning", "same");
  recorder.Flush();
  ASSERT_EQ(Events().size(), 1u);
  EXPECT_EQ(Events()[0]["count"], 1);
}

TEST_F(EventRecorderTest, DestructionWritesWhatIsQueued) {
  const json a = Claim("a");
  {
    EventRecorder recorder(*registry_, "test-controller");
    for (int i = 0; i < 20; ++i) recorder.Record(a, "Normal", "R" + std::to_string(i), "m");
  }
  EXPECT_EQ(Events().size(), 20u);
}

int Threads() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

TEST_F(EventRecorderTest, EveryRecorderSharesOneWriterThread) {
  const json a = Claim("a");
  std::vector<std::unique_ptr<EventRecorder>> recorders;
  recorders.push_back(std::make_unique<EventRecorder>(*registry_, "c0"));
  recorders[0]->Record(a, "Normal", "R", "m");
  recorders[0]->Flush();
  const int one = Threads();
  for (int i = 1; i < 10; ++i) {
    recorders.push_back(std::make_unique<EventRecorder>(*registry_, "c" + std::to_string(i)));
  }
  EXPECT_EQ(Threads(), one);
  // Recorded from many threads at once, destroyed while others still write.
  std::vector<std::thread> threads;
  for (int i = 1; i < 10; ++i) {
    threads.emplace_back([&, i] {
      for (int j = 0; j < 300; ++j) recorders[i]->Record(a, "Normal", "R" + std::to_string(j), "m");
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 9; i >= 5; --i) recorders[i].reset();  // writes what it has queued
  for (int i = 1; i < 5; ++i) recorders[i]->Flush();
  std::map<std::string, int> by_component;
  for (const auto& e : Events()) ++by_component[e["source"]["component"].get<std::string>()];
  EXPECT_EQ(by_component.size(), 10u);
  for (const auto& [component, n] : by_component) EXPECT_EQ(n, component == "c0" ? 1 : 300) << component;
  recorders.clear();
  EXPECT_TRUE(berth::testing::Eventually([&] { return Threads() == one - 1; }));  // the last took the writer along
}

TEST_F(EventRecorderTest, AnEventDeletedMeanwhileIsCreatedAgain) {
  EventRecorder recorder(*registry_, "test-controller", absl::ZeroDuration());
  const json a = Claim("a");
  recorder.Record(a, "Normal", "R", "m");
  recorder.Flush();
  ASSERT_EQ(Events().size(), 1u);
  ASSERT_TRUE(registry_->Delete(K("events"), "default", Events()[0]["metadata"]["name"].get<std::string>()).ok());
  recorder.Record(a, "Normal", "R", "m");
  recorder.Flush();
  ASSERT_EQ(Events().size(), 1u);
  EXPECT_EQ(Events()[0]["count"], 1);
}

TEST_F(EventRecorderTest, RemembersTheLastEventsRecordedAsClientGoDoes) {
  // client-go's correlator keeps the last 4096 events: one recorded again
  // after 4096 others is a new event; one still remembered is aggregated.
  EventRecorder recorder(*registry_, "test-controller", absl::Hours(1));
  const json a = Claim("a");
  for (int i = 0; i <= 4096; ++i) recorder.Record(a, "Normal", "R" + std::to_string(i), "m");
  recorder.Flush();
  ASSERT_EQ(Events().size(), 4097u);
  recorder.Record(a, "Normal", "R0", "m");     // forgotten: written again
  recorder.Record(a, "Normal", "R4096", "m");  // remembered, within the interval: dropped
  recorder.Flush();
  int r0 = 0, last = 0;
  std::set<std::string> names;
  for (const auto& e : Events()) {
    r0 += e.value("reason", "") == "R0";
    last += e.value("reason", "") == "R4096";
    names.insert(e["metadata"]["name"].get<std::string>());
    EXPECT_THAT(e["metadata"]["name"].get<std::string>(), ::testing::StartsWith("a."));
  }
  EXPECT_EQ(r0, 2);
  EXPECT_EQ(last, 1);
  EXPECT_EQ(names.size(), 4098u) << "every event has a name of its own";
}

}  // namespace
}  // namespace berth::client
