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
  EXPECT_TRUE(waiter.Wake());
  EXPECT_EQ(ThreadMemoryReleases(), before + 2);  // twice, not periodically
}

}  // namespace
}  // namespace berth
