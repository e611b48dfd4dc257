#include "common/clock.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace berth {
namespace {

TEST(FakeClockTest, TimersRunInTimeOrderAtTheirOwnTime) {
  FakeClock clock;
  const absl::Time start = clock.Now();
  std::vector<std::pair<int, absl::Duration>> ran;
  clock.AfterFunc(start + absl::Seconds(3), [&] { ran.push_back({3, clock.Now() - start}); });
  clock.AfterFunc(start + absl::Seconds(1), [&] { ran.push_back({1, clock.Now() - start}); });
  clock.AfterFunc(start + absl::Seconds(10), [&] { ran.push_back({10, clock.Now() - start}); });
  clock.Advance(absl::Seconds(5));
  ASSERT_EQ(ran.size(), 2u);
  EXPECT_EQ(ran[0], std::make_pair(1, absl::Seconds(1)));
  EXPECT_EQ(ran[1], std::make_pair(3, absl::Seconds(3)));
  EXPECT_EQ(clock.Now() - start, absl::Seconds(5));
  EXPECT_EQ(clock.PendingTimers(), 1);
  EXPECT_EQ(clock.NextTimer(), start + absl::Seconds(10));
}

TEST(FakeClockTest, TimersSetByACallbackRunWhenDueWithinTheSameAdvance) {
  FakeClock clock;
  int runs = 0;
  std::function<void()> again = [&] {
    ++runs;
    clock.AfterFunc(clock.Now() + absl::Seconds(1), again);
  };
  clock.AfterFunc(clock.Now() + absl::Seconds(1), again);
  clock.Advance(absl::Milliseconds(4500));
  EXPECT_EQ(runs, 4);
}

TEST(FakeClockTest, CancelledTimersNeverRun) {
  FakeClock clock;
  bool ran = false;
  const Clock::TimerId id = clock.AfterFunc(clock.Now() + absl::Seconds(1), [&] { ran = true; });
  EXPECT_TRUE(clock.Cancel(id));
  EXPECT_FALSE(clock.Cancel(id));
  clock.Advance(absl::Seconds(2));
  EXPECT_FALSE(ran);
}

TEST(FakeClockTest, AwaitWithDeadlineReturnsWhenTimeReachesTheDeadline) {
  FakeClock clock;
  absl::Mutex mu;
  bool never = false;
  std::atomic<bool> returned{false};
  bool result = true;
  std::thread waiter([&] {
    absl::MutexLock l(&mu);
    result = clock.AwaitWithTimeout(mu, absl::Condition(&never), absl::Minutes(5));
    returned = true;
  });
  ASSERT_TRUE(clock.BlockUntilTimers(1));
  clock.Advance(absl::Minutes(4));
  EXPECT_FALSE(returned.load());
  clock.Advance(absl::Minutes(1));
  waiter.join();
  EXPECT_TRUE(returned.load());
  EXPECT_FALSE(result);
  EXPECT_EQ(clock.PendingTimers(), 0);
}

// The clock moves past the deadline after the waiter has looked at the time
// and before its timer is set (the window a busy test thread can hit).
TEST(FakeClockTest, AwaitWithDeadlineReturnsWhenTimePassedTheDeadlineWhileItsTimerWasSet) {
  class AdvancedWhileSetting : public FakeClock {
   public:
    TimerId AfterFunc(absl::Time when, std::function<void()> fn) override {
      Advance(absl::Seconds(30));
      return FakeClock::AfterFunc(when, std::move(fn));
    }
  } clock;
  absl::Mutex mu;
  bool never = false;
  absl::Notification returned;
  bool result = true;
  std::thread waiter([&] {
    absl::MutexLock l(&mu);
    result = clock.AwaitWithTimeout(mu, absl::Condition(&never), absl::Seconds(30));
    returned.Notify();
  });
  const bool in_time = returned.WaitForNotificationWithTimeout(absl::Seconds(10));
  EXPECT_TRUE(in_time) << "the waiter sleeps through its deadline";
  if (!in_time) clock.Advance(absl::ZeroDuration());  // runs the overdue timer: lets it go
  waiter.join();
  EXPECT_FALSE(result);
  EXPECT_EQ(clock.PendingTimers(), 0);
}

TEST(FakeClockTest, AwaitWithDeadlineReturnsAsSoonAsTheConditionHolds) {
  FakeClock clock;
  absl::Mutex mu;
  bool done = false;
  bool result = false;
  std::thread waiter([&] {
    absl::MutexLock l(&mu);
    result = clock.AwaitWithTimeout(mu, absl::Condition(&done), absl::Hours(1));
  });
  ASSERT_TRUE(clock.BlockUntilTimers(1));
  {
    absl::MutexLock l(&mu);
    done = true;
  }
  waiter.join();
  EXPECT_TRUE(result);
  EXPECT_EQ(clock.PendingTimers(), 0);  // its deadline timer was cancelled
}

TEST(FakeClockTest, SleepForReturnsOnlyAfterTheClockMoved) {
  FakeClock clock;
  absl::Notification woke;
  std::thread sleeper([&] {
    clock.SleepFor(absl::Seconds(30));
    woke.Notify();
  });
  ASSERT_TRUE(clock.BlockUntilTimers(1));
  EXPECT_FALSE(woke.WaitForNotificationWithTimeout(absl::Milliseconds(20)));
  clock.Advance(absl::Seconds(30));
  EXPECT_TRUE(woke.WaitForNotificationWithTimeout(absl::Seconds(10)));
  sleeper.join();
}

TEST(FakeClockTest, CancelWaitsForARunningCallback) {
  FakeClock clock;
  absl::Notification entered, release;
  std::atomic<bool> finished{false};
  const Clock::TimerId id = clock.AfterFunc(clock.Now(), [&] {
    entered.Notify();
    release.WaitForNotification();
    finished = true;
  });
  std::thread advancer([&] { clock.Advance(absl::Seconds(1)); });
  entered.WaitForNotification();
  std::thread canceller([&] {
    EXPECT_FALSE(clock.Cancel(id));
    EXPECT_TRUE(finished.load());
  });
  release.Notify();
  canceller.join();
  advancer.join();
}

TEST(RealClockTest, TimersAndWaitsUseRealTime) {
  Clock& clock = RealClock();
  absl::Notification fired;
  const absl::Time start = clock.Now();
  clock.AfterFunc(start + absl::Milliseconds(20), [&] { fired.Notify(); });
  ASSERT_TRUE(fired.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_GE(clock.Now() - start, absl::Milliseconds(20));

  absl::Mutex mu;
  bool never = false;
  absl::MutexLock l(&mu);
  const absl::Time before = clock.Now();
  EXPECT_FALSE(clock.AwaitWithTimeout(mu, absl::Condition(&never), absl::Milliseconds(30)));
  EXPECT_GE(clock.Now() - before, absl::Milliseconds(30));
  // A condition that comes true ends the wait long before its deadline.
  bool set = false;
  std::thread setter([&] {
    absl::MutexLock setter_lock(&mu);
    set = true;
  });
  EXPECT_TRUE(clock.AwaitWithDeadline(mu, absl::Condition(&set), clock.Now() + absl::Seconds(60)));
  mu.Unlock();
  setter.join();
  mu.Lock();
  const absl::Time slept_from = clock.Now();
  clock.SleepFor(absl::Milliseconds(10));
  EXPECT_GE(clock.Now() - slept_from, absl::Milliseconds(10));
}

TEST(RealClockTest, CancelledTimerNeverRuns) {
  Clock& clock = RealClock();
  std::atomic<bool> ran{false};
  const Clock::TimerId id = clock.AfterFunc(clock.Now() + absl::Milliseconds(50), [&] { ran = true; });
  EXPECT_TRUE(clock.Cancel(id));
  absl::Notification later;
  clock.AfterFunc(clock.Now() + absl::Milliseconds(100), [&] { later.Notify(); });
  ASSERT_TRUE(later.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_FALSE(ran.load());
}

// The timer thread sleeps until the earliest deadline and wakes early only
// for an earlier one: a timer added before the one it waits for, after it
// began waiting, still runs at its own time; so does a later timer once the
// earliest was cancelled.
TEST(RealClockTest, AnEarlierTimerAddedWhileWaitingRunsAtItsOwnTime) {
  Clock& clock = RealClock();
  absl::Notification far_ran;
  const Clock::TimerId far = clock.AfterFunc(clock.Now() + absl::Hours(1), [&] { far_ran.Notify(); });
  absl::Notification first;
  absl::Notification second;
  const Clock::TimerId earliest = clock.AfterFunc(clock.Now() + absl::Milliseconds(40), [] {});
  clock.AfterFunc(clock.Now() + absl::Milliseconds(20), [&] { first.Notify(); });
  clock.AfterFunc(clock.Now() + absl::Milliseconds(60), [&] { second.Notify(); });
  ASSERT_TRUE(first.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_TRUE(clock.Cancel(earliest));
  ASSERT_TRUE(second.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_TRUE(clock.Cancel(far));
  EXPECT_FALSE(far_ran.HasBeenNotified());
}

}  // namespace
}  // namespace berth
