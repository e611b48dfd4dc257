#include "client/workqueue.h"

#include <atomic>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/quiescence.h"
#include "common/backlog.h"
#include "common/clock.h"
#include "common/testing/eventually.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace berth::client {
namespace {

TEST(WorkQueueTest, DeduplicatesQueuedKeys) {
  WorkQueue q;
  q.Add("a");
  q.Add("b");
  q.Add("a");
  EXPECT_EQ(q.Len(), 2u);
  EXPECT_EQ(q.adds(), 2u) << "a key already waiting is not added again";
  EXPECT_EQ(*q.Get(), "a");
  EXPECT_EQ(*q.Get(), "b");
  q.Add("a");  // taken, so waiting again: a new add
  EXPECT_EQ(q.adds(), 3u);
}

TEST(WorkQueueTest, KeyAddedWhileProcessingRunsAgainAfterDoneNotConcurrently) {
  WorkQueue q;
  q.Add("a");
  auto key = q.Get();
  q.Add("a");              // while "a" is being processed
  EXPECT_EQ(q.Len(), 0u);  // not handed to a second worker
  q.Done(*key);
  EXPECT_EQ(q.Len(), 1u);
  EXPECT_EQ(*q.Get(), "a");
}

// The process's Backlog (what the API server holds clients' creates back
// on) counts what queues hold and no worker has taken: a key re-queued by
// Done counts again, a duplicate does not, and a queue that shuts down (or
// goes) takes back what it still held.
TEST(WorkQueueTest, CountsWhatItHoldsInTheProcessBacklog) {
  const int64_t before = Backlog::Pending();
  {
    WorkQueue q;
    q.Add("a");
    q.Add("b");
    q.Add("a");
    EXPECT_EQ(Backlog::Pending() - before, 2);
    auto a = q.Get();
    EXPECT_EQ(Backlog::Pending() - before, 1) << "taken by a worker";
    q.Add("a");  // while in process: waits for Done
    EXPECT_EQ(Backlog::Pending() - before, 1);
    q.Done(*a);
    EXPECT_EQ(Backlog::Pending() - before, 2) << "queued again";
    WorkQueue other;
    other.Add("x");
    EXPECT_EQ(Backlog::Pending() - before, 3);
    other.ShutDown();
    EXPECT_EQ(Backlog::Pending() - before, 2) << "a queue shut down holds nothing for anyone";
    other.Add("y");
    EXPECT_EQ(Backlog::Pending() - before, 2);
  }
  EXPECT_EQ(Backlog::Pending(), before) << "a queue that goes takes its keys with it";
}

TEST(WorkQueueTest, BackoffGrowsPerKeyAndForgetResetsIt) {
  FakeClock clock;
  WorkQueue q({.base_delay = absl::Seconds(1), .max_delay = absl::Seconds(100), .clock = &clock});
  q.AddRateLimited("a");
  EXPECT_EQ(q.Failures("a"), 1);
  EXPECT_EQ(q.Len(), 0u);
  clock.Advance(absl::Milliseconds(740));  // 1 s −25 %: not yet
  EXPECT_EQ(q.Len(), 0u);
  clock.Advance(absl::Milliseconds(520));  // 1 s +25 %: surely
  ASSERT_EQ(q.Len(), 1u);
  EXPECT_EQ(*q.Get(), "a");
  q.Done("a");
  // Failures 2..4 wait 2, 4, 8 s (±25 %).
  for (int n = 1; n <= 3; ++n) {
    const absl::Duration nominal = absl::Seconds(1 << n);
    q.AddRateLimited("a");
    clock.Advance(nominal * 0.74);
    EXPECT_EQ(q.Len(), 0u) << "failure " << n + 1;
    clock.Advance(nominal * 0.52);
    ASSERT_EQ(q.Len(), 1u) << "failure " << n + 1;
    EXPECT_EQ(*q.Get(), "a");
    q.Done("a");
  }
  EXPECT_EQ(q.Failures("a"), 4);
  q.Forget("a");
  EXPECT_EQ(q.Failures("a"), 0);
  q.AddRateLimited("a");
  clock.Advance(absl::Milliseconds(1260));
  EXPECT_EQ(q.Len(), 1u);
}

TEST(WorkQueueTest, BackoffIsCappedAtMaxDelay) {
  FakeClock clock;
  WorkQueue q({.base_delay = absl::Seconds(1), .max_delay = absl::Minutes(5), .clock = &clock});
  for (int i = 0; i < 30; ++i) q.AddRateLimited("a");  // 2^29 s nominal
  clock.Advance(absl::Minutes(5));
  EXPECT_EQ(q.Len(), 1u);
}

TEST(WorkQueueTest, TwoFailuresBeforeAGetQueueTheKeyOnceAtTheEarlierTime) {
  FakeClock clock;
  WorkQueue q({.base_delay = absl::Seconds(1), .max_delay = absl::Seconds(100), .clock = &clock});
  q.AddRateLimited("a");
  q.AddRateLimited("a");  // waits longer; "a" stays due at the first time
  clock.Advance(absl::Milliseconds(1260));
  EXPECT_EQ(q.Len(), 1u);
  clock.Advance(absl::Seconds(10));
  EXPECT_EQ(q.Len(), 1u);
}

TEST(WorkQueueTest, EarlierDelayWakesASleepingGet) {
  FakeClock clock;
  WorkQueue q({.clock = &clock});
  q.AddAfter("late", absl::Seconds(30));
  std::optional<std::string> got;
  std::thread getter([&] { got = q.Get(); });
  q.AddAfter("soon", absl::Seconds(1));
  clock.Advance(absl::Seconds(1));
  getter.join();
  EXPECT_EQ(got, "soon");
  EXPECT_EQ(q.Len(), 0u);
  clock.Advance(absl::Seconds(29));
  EXPECT_EQ(q.Len(), 1u);
}

TEST(WorkQueueTest, TheBucketLimitsTheOverallRateOfRetries) {
  FakeClock clock;
  WorkQueue q(
      {.base_delay = absl::Milliseconds(1), .max_delay = absl::Seconds(1), .qps = 10, .burst = 5, .clock = &clock});
  for (int i = 0; i < 25; ++i) q.AddRateLimited("k" + std::to_string(i));
  clock.Advance(absl::Milliseconds(2));
  EXPECT_EQ(q.Len(), 5u);  // the burst
  clock.Advance(absl::Seconds(1));
  EXPECT_EQ(q.Len(), 15u);  // then 10 per second
  clock.Advance(absl::Seconds(1));
  EXPECT_EQ(q.Len(), 25u);
}

TEST(WorkQueueTest, DestroyingAQueueWithPendingDelaysCancelsItsTimers) {
  FakeClock clock;
  {
    WorkQueue q({.clock = &clock});
    q.AddAfter("a", absl::Seconds(5));
    q.AddAfter("b", absl::Seconds(1));
    EXPECT_GE(clock.PendingTimers(), 1);
  }
  EXPECT_EQ(clock.PendingTimers(), 0);
  clock.Advance(absl::Seconds(10));  // nothing runs on the destroyed queue
}

TEST(WorkQueueTest, RunWorkerCountsFailuresButNotNotAFailure) {
  FakeClock clock;
  WorkQueue q({.base_delay = absl::Seconds(1), .max_delay = absl::Minutes(5), .clock = &clock});
  std::vector<absl::Status> results = {absl::InternalError("x"), NotAFailure("driver down"), absl::OkStatus()};
  std::atomic<int> calls{0};
  std::thread worker([&] { RunWorker(q, "test", [&](const std::string&) { return results[calls.fetch_add(1)]; }); });
  q.Add("k");
  ASSERT_TRUE(berth::testing::Eventually([&] { return calls.load() == 1; }));
  ASSERT_TRUE(berth::testing::Eventually([&] { return q.Failures("k") == 1; }));
  clock.Advance(absl::Milliseconds(1260));
  ASSERT_TRUE(berth::testing::Eventually([&] { return calls.load() == 2; }));
  // Parked: not re-added, not forgotten.
  clock.Advance(absl::Minutes(10));
  EXPECT_EQ(calls.load(), 2);
  EXPECT_EQ(q.Failures("k"), 1);
  EXPECT_TRUE(IsNotAFailure(results[1]));
  EXPECT_FALSE(IsNotAFailure(results[0]));
  EXPECT_FALSE(IsNotAFailure(absl::OkStatus()));
  q.Add("k");  // the one who parked it re-adds it
  ASSERT_TRUE(berth::testing::Eventually([&] { return calls.load() == 3 && q.Failures("k") == 0; }));
  q.ShutDown();
  worker.join();
}

TEST(WorkQueueTest, ShutDownWakesEveryWorker) {
  WorkQueue q;
  std::atomic<int> ended{0};
  std::vector<std::thread> workers;
  for (int i = 0; i < 4; ++i) {
    workers.emplace_back([&] {
      while (auto key = q.Get()) q.Done(*key);
      ended.fetch_add(1);
    });
  }
  q.ShutDown();
  for (auto& w : workers) w.join();
  EXPECT_EQ(ended.load(), 4);
  q.Add("x");
  EXPECT_FALSE(q.Get().has_value());
}

TEST(WorkQueueTest, ManyWorkersProcessEveryKeyExactlyOncePerAdd) {
  WorkQueue q;
  std::atomic<int> processed{0};
  std::vector<std::thread> workers;
  for (int i = 0; i < 4; ++i) {
    workers.emplace_back([&] {
      while (auto key = q.Get()) {
        processed.fetch_add(1);
        q.Done(*key);
      }
    });
  }
  for (int i = 0; i < 1000; ++i) q.Add("k" + std::to_string(i));
  ASSERT_TRUE(berth::testing::Eventually([&] { return processed.load() >= 1000; }));
  q.ShutDown();
  for (auto& w : workers) w.join();
  EXPECT_EQ(processed.load(), 1000);
}

TEST(WorkQueueTest, StartWorkersRunsTheSyncOnEveryWorkerUntilShutDown) {
  WorkQueue q;
  absl::Mutex mu;
  std::set<std::thread::id> threads;
  std::map<std::string, int> synced;
  std::vector<std::thread> workers;
  StartWorkers(workers, 3, q, "test workers", [&](const std::string& key) {
    absl::MutexLock lock(&mu);
    threads.insert(std::this_thread::get_id());
    // Held a moment, so the other workers take the next keys.
    absl::SleepFor(absl::Milliseconds(1));
    return ++synced[key] == 1 && key == "fails-once" ? absl::UnavailableError("once") : absl::OkStatus();
  });
  ASSERT_EQ(workers.size(), 3u);
  for (int i = 0; i < 60; ++i) q.Add("k" + std::to_string(i));
  q.Add("fails-once");  // re-added with backoff by the worker, then done
  ASSERT_TRUE(berth::testing::Eventually([&] {
    absl::MutexLock lock(&mu);
    const auto it = synced.find("fails-once");
    return synced.size() == 61 && it != synced.end() && it->second == 2;
  }));
  q.ShutDown();
  for (auto& w : workers) w.join();
  absl::MutexLock lock(&mu);
  for (int i = 0; i < 60; ++i) EXPECT_EQ(synced["k" + std::to_string(i)], 1);
  EXPECT_GT(threads.size(), 1u);
}

TEST(WorkQueueTest, IdleOnlyWithNothingQueuedRunningOrDue) {
  FakeClock clock;
  WorkQueue q({.base_delay = absl::Seconds(1), .clock = &clock});
  EXPECT_TRUE(q.WaitIdle(absl::ZeroDuration()));
  q.Add("a");
  EXPECT_FALSE(q.WaitIdle(absl::Milliseconds(10)));  // queued
  auto key = q.Get();
  EXPECT_FALSE(q.Idle());  // being processed
  std::thread done([&] {
    absl::SleepFor(absl::Milliseconds(20));  // the worker's own time, not a wait for an outcome
    q.AddRateLimited(*key);                  // fails: retried after its backoff
    q.Done(*key);
  });
  EXPECT_TRUE(q.WaitIdle(absl::Seconds(10)));  // wakes when Done runs
  done.join();
  // A retry waiting for the clock: idle until it is due.
  EXPECT_TRUE(q.Idle());
  clock.Advance(absl::Seconds(2));
  EXPECT_FALSE(q.Idle());
  EXPECT_EQ(q.Len(), 1u);
  q.Done(*q.Get());
  EXPECT_TRUE(q.Idle());
  q.Add("b");
  q.ShutDown();
  EXPECT_TRUE(q.Idle()) << "a stopped queue's keys are never taken";
}

TEST(WorkQueueTest, SettleSeesEveryLiveQueue) {
  auto q = std::make_unique<WorkQueue>();
  q->Add("a");
  EXPECT_FALSE(Quiescence::AllIdle(0));
  q.reset();  // unregistered with it
  EXPECT_TRUE(Quiescence::AllIdle(0));
}

}  // namespace
}  // namespace berth::client
