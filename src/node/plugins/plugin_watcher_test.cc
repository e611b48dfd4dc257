// The plugin watcher's retries of a refused registration run on its clock:
// 0.5 s, then doubling, and a registration that succeeds stops them.
#include "node/plugins/plugin_watcher.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "common/testing/eventually.h"
#include "common/testing/temp_dir.h"
#include "csi/registration.h"
#include "csi/server.h"
#include "gtest/gtest.h"

namespace berth::node {
namespace {

// Refuses the first `refusals` registrations, then accepts.
class RefusingHandler : public PluginHandler {
 public:
  explicit RefusingHandler(int refusals) : refusals_(refusals) {}
  absl::Status RegisterPlugin(const std::string&, const std::string&, const std::vector<std::string>&) override {
    absl::MutexLock lock(&mu_);
    ++calls_;
    if (calls_ <= refusals_) return absl::UnavailableError("not yet");
    return absl::OkStatus();
  }
  void DeregisterPlugin(const std::string&) override {}
  int calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }

 private:
  const int refusals_;
  absl::Mutex mu_;
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
};

TEST(PluginWatcherTest, ARefusedRegistrationIsRetriedWithBackoffOnTheClock) {
  testing::TempDir dir;
  const std::string registry = dir.Join("plugins_registry");
  FakeClock clock;
  RefusingHandler handler(/*refusals=*/2);
  // A rescan period far beyond the retries, so only the retries wake it.
  PluginWatcher watcher(registry, handler, {.rescan = absl::Hours(1), .clock = &clock});
  ASSERT_TRUE(watcher.Start().ok());
  csi::RegistrationService reg({.name = "retry.csi.berth.io", .endpoint = dir.Join("csi.sock")});
  auto server =
      csi::CsiServer::Start({.endpoint = csi::RegistrationSocketPath(registry, "retry.csi.berth.io")}, {&reg});
  ASSERT_TRUE(server.ok()) << server.status();

  // Refused once: the verdict reaches the plugin, the retry waits 0.5 s.
  ASSERT_TRUE(testing::Eventually([&] { return handler.calls() == 1 && reg.last_status().has_value(); }));
  EXPECT_FALSE(reg.last_status()->plugin_registered());
  ASSERT_TRUE(testing::Eventually([&] { return clock.NextTimer() - clock.Now() == absl::Milliseconds(500); }));
  clock.Advance(absl::Milliseconds(499));
  EXPECT_EQ(handler.calls(), 1);
  clock.Advance(absl::Milliseconds(1));
  ASSERT_TRUE(testing::Eventually([&] { return handler.calls() == 2; }));

  // Refused again: the delay doubles.
  ASSERT_TRUE(testing::Eventually([&] { return clock.NextTimer() - clock.Now() == absl::Seconds(1); }));
  clock.Advance(absl::Seconds(1));
  ASSERT_TRUE(testing::Eventually([&] { return watcher.Registered().size() == 1; }));
  EXPECT_EQ(handler.calls(), 3);
  EXPECT_TRUE(reg.last_status()->plugin_registered());
  // Registered: nothing left to retry, only the hourly rescan is pending.
  ASSERT_TRUE(testing::Eventually([&] { return clock.NextTimer() - clock.Now() == absl::Hours(1); }));
  watcher.Stop();
  EXPECT_EQ(clock.PendingTimers(), 0);
}

}  // namespace
}  // namespace berth::node
