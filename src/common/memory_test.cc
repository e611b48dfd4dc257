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

// A thread waiting in AwaitReleasingWhenIdle until Wake.
class IdleWaiter {
 public:
  IdleWaiter()
      : thread_([this] {
          absl::MutexLock lock(&mu_);
          AwaitReleasingWhenIdle(mu_, absl::Condition(&ready_));
          woke_ = true;
        }) {}
  ~IdleWaiter() {
    if (thread_.joinable()) Wake();  // a failed assertion returned early
  }
  // Makes its condition hold and waits for it to return; true if it
  // returned then and not before.
  bool Wake() {
    bool early;
    {
      absl::MutexLock lock(&mu_);
      early = woke_;
      ready_ = true;
    }
    thread_.join();
    return !early && woke_;
  }

 private:
  absl::Mutex mu_;
  bool ready_ = false;
  bool woke_ = false;
  std::thread thread_;  // last: runs once the rest exists
};

TEST(MemoryTest, IdleWaiterReleasesOnceThenStillWakesForItsCondition) {
  const int64_t before = ThreadMemoryReleases();
  IdleWaiter waiter;
  // After kIdleMemoryRelease the waiter releases (mu is free meanwhile).
  ASSERT_TRUE(testing::Eventually([&] { return ThreadMemoryReleases() > before; }));
  EXPECT_TRUE(waiter.Wake());
  EXPECT_EQ(ThreadMemoryReleases(), before + 1);  // woken before the second
}

TEST(MemoryTest, AWaiterIdleLongerReleasesOnceMore) {
  const int64_t before = ThreadMemoryReleases();
  IdleWaiter waiter;
  // What other threads freed after the first release goes back too.
  ASSERT_TRUE(testing::Eventually([&] { return ThreadMemoryReleases() == before + 2; },
                                  kIdleMemoryRelease + kIdleMemoryReleaseAgain + absl::Seconds(10)));
  // And once more when asked (what the store's writer freed after both).
  EXPECT_EQ(RequestIdleRelease(), 1);
  ASSERT_TRUE(testing::Eventually([&] { return ThreadMemoryReleases() == before + 3; }));
  EXPECT_TRUE(waiter.Wake());
  EXPECT_EQ(ThreadMemoryReleases(), before + 3);  // not periodically
  EXPECT_EQ(RequestIdleRelease(), 0);             // it is no longer waiting
}

// Asked between its first and its second release, a waiter releases at
// once, and still wakes for its condition.
TEST(MemoryTest, AnIdleWaiterReleasesWhenAsked) {
  const int64_t before = ThreadMemoryReleases();
  IdleWaiter waiter;
  ASSERT_TRUE(testing::Eventually([&] { return ThreadMemoryReleases() == before + 1; }));
  // Registered before its first release: the one waiter here.
  EXPECT_EQ(RequestIdleRelease(), 1);
  ASSERT_TRUE(testing::Eventually([&] { return ThreadMemoryReleases() == before + 2; }, kIdleMemoryReleaseAgain / 2));
  EXPECT_TRUE(waiter.Wake());
  EXPECT_EQ(RequestIdleRelease(), 0);
}

// A waiter not yet idle is not asked: the busy path takes no global lock.
TEST(MemoryTest, AWaiterNotYetIdleIsNotAsked) {
  const int64_t before = ThreadMemoryReleases();
  IdleWaiter waiter;
  EXPECT_EQ(RequestIdleRelease(), 0);
  EXPECT_TRUE(waiter.Wake());
  EXPECT_EQ(ThreadMemoryReleases(), before);
}

}  // namespace
}  // namespace berth
