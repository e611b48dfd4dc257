#include "common/exec.h"

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace berth {
namespace {

TEST(LinuxCommandRunnerTest, CapturesOutputAndExitCode) {
  LinuxCommandRunner r;
  auto res = r.Run({"sh", "-c", "echo out; echo err >&2; exit 3"}, absl::Seconds(10));
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->exit_code, 3);
  EXPECT_EQ(res->output, "out\nerr\n");
}

TEST(LinuxCommandRunnerTest, NoShellInterpretation) {
  LinuxCommandRunner r;
  auto res = r.Run({"echo", "$HOME; rm -rf /"}, absl::Seconds(10));
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(res->output, "$HOME; rm -rf /\n");
}

TEST(LinuxCommandRunnerTest, MissingProgramIsNotFound) {
  LinuxCommandRunner r;
  EXPECT_EQ(r.Run({"no-such-program-berth"}, absl::Seconds(1)).status().code(), absl::StatusCode::kNotFound);
}

TEST(LinuxCommandRunnerTest, KillsAtTimeout) {
  LinuxCommandRunner r;
  const absl::Time start = absl::Now();
  auto res = r.Run({"sleep", "30"}, absl::Milliseconds(300));
  EXPECT_EQ(res.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

}  // namespace
}  // namespace berth
