// AwaitReleasingWhenIdle: an idle waiter gives its memory back after
// kIdleMemoryRelease and once more kIdleMemoryReleaseAgain later, and
// still wakes for its condition in between and afterwards.
#include "common/memory.h"

#include <thread>

#include "common/testing/eventually.h"
#include "gtest/gtest.h"

namespace berth {
namespace {

TEST(MemoryTest, ReturnsAtOnceWhenTheConditionHolds) {
  absl::Mutex mu;
  bool ready = true;
  const int64_t before = ThreadMemoryReleases();
  absl::MutexLock lock(&mu);
  AwaitReleasingWhenIdle(mu, absl::Condition(&ready));
  EXPECT_EQ(ThreadMemoryReleases(), before);  // not idle: nothing released
}

TEST(MemoryTest, IdleWaiterReleasesOnceThenStillWakesForItsCondition) {
  absl::Mutex mu;
  bool ready = false;
  bool woke = false;
  const int64_t before = ThreadMemoryReleases();
  std::thread waiter([&] {
    absl::MutexLock lock(&mu);
    AwaitReleasingWhenIdle(mu, absl::Condition(&ready));
    woke = true;
  });
  // After kIdleMemoryRelease the waiter releases (mu is free meanwhile).
  ASSERT_TRUE(testing::Eventually([&] { return ThreadMemoryReleases() > before; }));
  {
    absl::MutexLock lock(&mu);
    EXPECT_FALSE(woke);
    ready = true;
  }
  waiter.join();
  EXPECT_TRUE(woke);
  EXPECT_EQ(ThreadMemoryReleases(), before + 1);  // woken before the second
}

TEST(MemoryTest, AWaiterIdleLongerReleasesOnceMore) {
  absl::Mutex mu;
  bool ready = false;
  bool woke = false;
  const int64_t before = ThreadMemoryReleases();
  std::thread waiter([&] {
    absl::MutexLock lock(&mu);
    AwaitReleasingWhenIdle(mu, absl::Condition(&ready));
    woke = true;
  });
  // What other threads freed after the first release goes back too.
  ASSERT_TRUE(testing::Eventually([&] { return ThreadMemoryReleases() == before + 2; },
                                  kIdleMemoryRelease + kIdleMemoryReleaseAgain + absl::Seconds(10)));
  {
    absl::MutexLock lock(&mu);
    EXPECT_FALSE(woke);
    ready = true;
  }
  waiter.join();
  EXPECT_TRUE(woke);
  EXPECT_EQ(ThreadMemoryReleases(), before + 2);  // twice, not periodically
}

}  // namespace
}  // namespace berth
