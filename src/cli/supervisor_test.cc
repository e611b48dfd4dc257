// The supervisor wakes for what happens (a child's exit, a restart falling
// due on its clock, Stop) instead of polling: a killed child is restarted
// after its backoff, Stop returns at once.
#include "cli/supervisor.h"

#include <signal.h>

#include "absl/time/clock.h"
#include "common/clock.h"
#include "common/testing/eventually.h"
#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"

namespace berth::cli {
namespace {

Supervisor::Child Sleeper(const testing::TempDir& dir) {
  return {.name = "sleeper",
          .argv = {"/bin/sleep", "1000"},
          .log_file = dir.Join("sleeper.log"),
          .pid_file = dir.Join("sleeper.pid")};
}

// Kills the child and waits until the supervisor has reaped it (its pid is
// -1 then, and the restart timer is set in the same critical section).
void KillAndAwaitReap(Supervisor& sup) {
  const pid_t pid = sup.pid("sleeper");
  ASSERT_GT(pid, 0);
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  ASSERT_TRUE(testing::Eventually([&] { return sup.pid("sleeper") == -1; }));
}

TEST(SupervisorTest, RestartsAKilledChildAfterABackoffOnTheClockAndStopsWithoutDelay) {
  testing::TempDir dir;
  FakeClock clock;
  Supervisor sup(Supervisor::Options{.clock = &clock});
  sup.Add(Sleeper(dir));
  sup.Start();
  ASSERT_TRUE(testing::Eventually([&] { return sup.pid("sleeper") > 0; }));
  EXPECT_EQ(clock.PendingTimers(), 0);  // every child runs: nothing to wake for
  const pid_t first = sup.pid("sleeper");

  // First exit: restarted 1 s later on the clock, not before.
  KillAndAwaitReap(sup);
  EXPECT_EQ(clock.NextTimer() - clock.Now(), absl::Seconds(1));
  clock.Advance(absl::Milliseconds(999));
  EXPECT_EQ(sup.starts("sleeper"), 1);
  clock.Advance(absl::Milliseconds(1));
  ASSERT_TRUE(testing::Eventually([&] { return sup.starts("sleeper") == 2 && sup.pid("sleeper") > 0; }));
  EXPECT_NE(sup.pid("sleeper"), first);

  // A second exit soon after: the delay doubles.
  KillAndAwaitReap(sup);
  EXPECT_EQ(clock.NextTimer() - clock.Now(), absl::Seconds(2));
  clock.Advance(absl::Seconds(2));
  ASSERT_TRUE(testing::Eventually([&] { return sup.starts("sleeper") == 3 && sup.pid("sleeper") > 0; }));

  // After a minute of running, an exit starts over at 1 s.
  clock.Advance(absl::Minutes(1));
  KillAndAwaitReap(sup);
  EXPECT_EQ(clock.NextTimer() - clock.Now(), absl::Seconds(1));
  clock.Advance(absl::Seconds(1));
  ASSERT_TRUE(testing::Eventually([&] { return sup.starts("sleeper") == 4 && sup.pid("sleeper") > 0; }));
  const pid_t last = sup.pid("sleeper");

  // The monitor sleeps without a timeout while every child runs; Stop wakes
  // it, and sleep(1) dies of the SIGTERM at once.
  const absl::Time t0 = absl::Now();
  sup.Stop(absl::Seconds(20));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
  EXPECT_EQ(sup.pid("sleeper"), -1);
  EXPECT_NE(::kill(last, 0), 0);  // reaped: gone
  EXPECT_EQ(clock.PendingTimers(), 0);
}

// Stop while a restart is pending cancels it: advancing the clock after
// Stop starts nothing.
TEST(SupervisorTest, StopCancelsAPendingRestart) {
  testing::TempDir dir;
  FakeClock clock;
  Supervisor sup(Supervisor::Options{.clock = &clock});
  sup.Add(Sleeper(dir));
  sup.Start();
  ASSERT_TRUE(testing::Eventually([&] { return sup.pid("sleeper") > 0; }));
  KillAndAwaitReap(sup);
  EXPECT_EQ(clock.PendingTimers(), 1);
  sup.Stop(absl::Seconds(20));
  EXPECT_EQ(clock.PendingTimers(), 0);
  clock.Advance(absl::Minutes(1));
  EXPECT_EQ(sup.starts("sleeper"), 1);
  EXPECT_EQ(sup.pid("sleeper"), -1);
}

}  // namespace
}  // namespace berth::cli
