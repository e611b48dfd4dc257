#include "client/workqueue.h"

#include <atomic>
#include <thread>
#include <vector>

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
  EXPECT_EQ(*q.Get(), "a");
  EXPECT_EQ(*q.Get(), "b");
}

TEST(WorkQueueTest, KeyAddedWhileProcessingRunsAgainAfterDoneNotConcurrently) {
  WorkQueue q;
  q.Add("a");
  auto key = q.Get();
  q.Add("a");             // while "a" is being processed
  EXPECT_EQ(q.Len(), 0u);  // not handed to a second worker
  q.Done(*key);
  EXPECT_EQ(q.Len(), 1u);
  EXPECT_EQ(*q.Get(), "a");
}

TEST(WorkQueueTest, BackoffGrowsPerKeyAndForgetResetsIt) {
  WorkQueue q({.base_delay = absl::Milliseconds(20), .max_delay = absl::Seconds(1)});
  q.AddRateLimited("a");
  q.AddRateLimited("a");  // the second failure waits longer, but "a" is pending once
  EXPECT_EQ(q.Failures("a"), 2);
  absl::Time start = absl::Now();
  EXPECT_EQ(*q.Get(), "a");
  absl::Duration waited = absl::Now() - start;
  EXPECT_GE(waited, absl::Milliseconds(14));  // 20ms −25% jitter: the earliest of the two
  q.Done("a");
  q.Forget("a");
  EXPECT_EQ(q.Failures("a"), 0);
}

TEST(WorkQueueTest, EarlierDelayWakesASleepingGet) {
  WorkQueue q;
  q.AddAfter("late", absl::Seconds(30));
  std::thread adder([&] {
    absl::SleepFor(absl::Milliseconds(50));
    q.AddAfter("soon", absl::Milliseconds(10));
  });
  absl::Time start = absl::Now();
  EXPECT_EQ(*q.Get(), "soon");
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  adder.join();
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
  absl::SleepFor(absl::Milliseconds(20));
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
  while (processed.load() < 1000) absl::SleepFor(absl::Milliseconds(1));
  q.ShutDown();
  for (auto& w : workers) w.join();
  EXPECT_EQ(processed.load(), 1000);
}

}  // namespace
}  // namespace berth::client
