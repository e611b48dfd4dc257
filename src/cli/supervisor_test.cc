// The supervisor wakes for what happens (a child's exit, Stop) instead of
// polling: a killed child is restarted, Stop returns at once.
#include "cli/supervisor.h"

#include <signal.h>

#include "absl/time/clock.h"
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

TEST(SupervisorTest, RestartsAKilledChildAndStopsWithoutDelay) {
  testing::TempDir dir;
  Supervisor sup;
  sup.Add(Sleeper(dir));
  sup.Start();
  ASSERT_TRUE(testing::Eventually([&] { return sup.pid("sleeper") > 0; }));
  const pid_t first = sup.pid("sleeper");
  ASSERT_EQ(::kill(first, SIGKILL), 0);
  // Restarted after the first backoff (1 s): the monitor woke for the exit.
  ASSERT_TRUE(testing::Eventually([&] { return sup.starts("sleeper") == 2 && sup.pid("sleeper") > 0; }));
  EXPECT_NE(sup.pid("sleeper"), first);
  const pid_t second = sup.pid("sleeper");
  // The monitor sleeps without a timeout while every child runs; Stop wakes
  // it, and sleep(1) dies of the SIGTERM at once.
  const absl::Time t0 = absl::Now();
  sup.Stop(absl::Seconds(20));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
  EXPECT_EQ(sup.pid("sleeper"), -1);
  EXPECT_NE(::kill(second, 0), 0);  // reaped: gone
}

}  // namespace
}  // namespace berth::cli
