// The DriverMonitor against a fake CSI driver over a real unix socket, on a
// fake clock: a driver that is down is not called, its waiting keys come
// back all at once when it registers again or answers a Probe.
#include "client/driver_monitor.h"

#include "common/testing/eventually.h"
#include "common/testing/temp_dir.h"
#include "controllers/testing/fake_csi.h"
#include "csi/grpc_status.h"
#include "gtest/gtest.h"

namespace berth::client {
namespace {

using berth::testing::Eventually;

constexpr char kDriver[] = "fake.csi.berth.io";

class DriverMonitorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    socket_ = dir_.path() + "/csi.sock";
    ASSERT_TRUE(driver_.Serve(socket_).ok());
    directory_.Add(kDriver, "", "unix://" + socket_);
    monitor_ = std::make_unique<DriverMonitor>(directory_, clock_,
                                               DriverMonitor::Options{.probe_timeout = absl::Seconds(1),
                                                                      .probe_initial = absl::Seconds(1),
                                                                      .probe_max = absl::Seconds(8),
                                                                      .dial_timeout = absl::Milliseconds(300)});
  }
  void TearDown() override {
    if (monitor_) monitor_->Unpark(queue_);
  }

  // One GetPluginInfo through the monitor; counts the calls it made.
  absl::Status CallDriver() {
    return monitor_->Call(kDriver, "", [&](const csi::DriverClient& csi) {
      ++made_;
      return csi.GetPluginInfo({.timeout = absl::Seconds(5)}).status();
    });
  }
  // Takes down the driver and lets the monitor notice it.
  void Outage() {
    driver_.Crash();
    absl::Status st = CallDriver();
    ASSERT_TRUE(IsNotAFailure(st)) << st;
    ASSERT_FALSE(monitor_->Up(kDriver, ""));
  }
  // Moves the clock from timer to timer until `pred` holds (a probe is a
  // real RPC: its outcome arrives in real time).
  template <class Pred>
  bool AdvanceUntil(Pred pred) {
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (absl::Now() < deadline) {
      if (pred()) return true;
      if (absl::Time next = clock_.NextTimer(); next != absl::InfiniteFuture()) clock_.Advance(next - clock_.Now());
      absl::SleepFor(absl::Milliseconds(5));
    }
    return pred();
  }
  std::set<std::string> Queued() {
    std::set<std::string> out;
    while (queue_.Len() > 0) {
      auto key = queue_.Get();
      out.insert(*key);
      queue_.Done(*key);
    }
    return out;
  }

  berth::testing::TempDir dir_;
  std::string socket_;
  controllers::testing::FakeCsiDriver driver_{kDriver};
  DriverDirectory directory_;
  FakeClock clock_;
  std::unique_ptr<DriverMonitor> monitor_;
  WorkQueue queue_;
  int made_ = 0;
};

TEST_F(DriverMonitorTest, CallsReachALiveDriverAndItsErrorsAreOrdinaryFailures) {
  EXPECT_TRUE(CallDriver().ok());
  // UNAVAILABLE from a driver that answers its Probe is that call's error.
  absl::Status st = monitor_->Call(kDriver, "", [](const auto&) { return absl::UnavailableError("busy"); });
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(IsNotAFailure(st));
  EXPECT_TRUE(monitor_->Up(kDriver, ""));
  st = monitor_->Call(kDriver, "", [](const auto&) { return absl::NotFoundError("no such volume"); });
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(monitor_->stats().outages, 0);
  EXPECT_EQ(monitor_->stats().connection_failures, 0);
}

TEST_F(DriverMonitorTest, CallsShareOneClientPerChannelUntilItIsDialledAfresh) {
  auto client_of_a_call = [&] {
    const csi::DriverClient* used = nullptr;
    EXPECT_TRUE(monitor_
                    ->Call(kDriver, "",
                           [&](const csi::DriverClient& csi) {
                             used = &csi;
                             return csi.GetPluginInfo({.timeout = absl::Seconds(5)}).status();
                           })
                    .ok());
    return used;
  };
  const csi::DriverClient* first = client_of_a_call();
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(client_of_a_call(), first);
  auto held = directory_.Client(kDriver, "", &csi::CallMetrics::Sidecar());
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_EQ(held->get(), first);  // the monitor counts its calls as sidecars do
  // Other metrics, another client of the same channel.
  csi::CallMetrics own("test_calls", "calls of this test", /*kubelet_labels=*/false);
  auto counted_apart = directory_.Client(kDriver, "", &own);
  ASSERT_TRUE(counted_apart.ok()) << counted_apart.status();
  EXPECT_NE(counted_apart->get(), first);
  EXPECT_EQ((*counted_apart)->channel(), (*held)->channel());
  // A redial (the monitor's own after a failed call) and a registration
  // each make a fresh channel, and with it a fresh client, which calls.
  directory_.Redial(kDriver, "");
  const csi::DriverClient* redialled = client_of_a_call();
  EXPECT_NE((*held)->channel(), directory_.Channel(kDriver, "").value());
  directory_.Add(kDriver, "", "unix://" + socket_);
  const csi::DriverClient* registered = client_of_a_call();
  auto now = directory_.Client(kDriver, "", &csi::CallMetrics::Sidecar());
  ASSERT_TRUE(now.ok());
  EXPECT_EQ(now->get(), registered);
  EXPECT_NE(redialled, nullptr);
  EXPECT_NE((*now)->channel(), (*held)->channel());
  // What was handed out before stays usable while held.
  EXPECT_TRUE((*held)->GetPluginInfo({.timeout = absl::Seconds(5)}).ok());
}

TEST_F(DriverMonitorTest, ADownDriverIsNotCalledAgainUntilItIsBack) {
  Outage();
  const int made = made_;
  for (int i = 0; i < 50; ++i) EXPECT_TRUE(IsNotAFailure(CallDriver()));
  EXPECT_EQ(made_, made) << "no call may reach a driver known to be down";
  DriverMonitor::Stats s = monitor_->stats();
  EXPECT_EQ(s.outages, 1);
  EXPECT_EQ(s.connection_failures, 1);
  EXPECT_EQ(s.skipped, 50);
}

TEST_F(DriverMonitorTest, WaitingKeysResumeAllAtOnceWhenAProbeSucceeds) {
  Outage();
  for (const char* key : {"default/a", "default/b", "default/c"}) monitor_->Park(kDriver, "", queue_, key);
  monitor_->Park(kDriver, "", queue_, "default/a");  // parked twice: re-added once
  EXPECT_EQ(queue_.Len(), 0u);
  // Still down at the first probe: nothing is released.
  ASSERT_TRUE(clock_.BlockUntilTimers(1));
  clock_.Advance(absl::Seconds(2));
  ASSERT_TRUE(Eventually([&] { return monitor_->stats().failed_probes >= 1; }));
  EXPECT_EQ(queue_.Len(), 0u);
  EXPECT_FALSE(monitor_->Up(kDriver, ""));
  // Back: the next probe (on the clock, not on real time) releases them.
  ASSERT_TRUE(driver_.Serve(socket_).ok());
  ASSERT_TRUE(AdvanceUntil([&] { return queue_.Len() == 3u; }));
  EXPECT_EQ(Queued(), (std::set<std::string>{"default/a", "default/b", "default/c"}));
  EXPECT_TRUE(monitor_->Up(kDriver, ""));
  EXPECT_TRUE(CallDriver().ok());
  EXPECT_EQ(monitor_->stats().resumed, 3);
}

TEST_F(DriverMonitorTest, ProbesOfADownDriverBackOffOnTheClock) {
  Outage();
  // Probe intervals: ~1 s, ~2 s, ~4 s, then capped at 8 s (±20 % jitter).
  std::vector<absl::Duration> gaps;
  absl::Time last = clock_.Now();
  for (int i = 0; i < 5; ++i) {
    const int probes = monitor_->stats().probes;
    ASSERT_TRUE(Eventually([&] { return clock_.NextTimer() != absl::InfiniteFuture(); }));
    const absl::Time next = clock_.NextTimer();
    gaps.push_back(next - last);
    clock_.Advance(next - clock_.Now());
    last = next;
    ASSERT_TRUE(Eventually([&] { return monitor_->stats().probes > probes; }));
  }
  EXPECT_GE(gaps[0], absl::Milliseconds(800));
  EXPECT_LE(gaps[0], absl::Milliseconds(1200));
  EXPECT_GE(gaps[2], absl::Milliseconds(3200));
  EXPECT_LE(gaps[2], absl::Milliseconds(4800));
  EXPECT_LE(gaps[4], absl::Seconds(8));
  EXPECT_GE(gaps[4], absl::Milliseconds(6400));
}

TEST_F(DriverMonitorTest, RegistrationReleasesWaitingKeysWithoutWaitingForTheClock) {
  Outage();
  monitor_->Park(kDriver, "", queue_, "default/a");
  ASSERT_TRUE(driver_.Serve(socket_).ok());
  // What the node agent does when the restarted driver registers.
  directory_.Add(kDriver, "", "unix://" + socket_);
  ASSERT_TRUE(Eventually([&] { return queue_.Len() == 1u; }));
  EXPECT_TRUE(monitor_->Up(kDriver, ""));
}

TEST_F(DriverMonitorTest, ADriverNotRegisteredWaitsForItsRegistration) {
  absl::Status st = monitor_->Call("other.csi.berth.io", "node-1", [&](const auto&) {
    ++made_;
    return absl::OkStatus();
  });
  ASSERT_TRUE(IsNotAFailure(st)) << st;
  EXPECT_EQ(made_, 0);
  monitor_->Park("other.csi.berth.io", "node-1", queue_, "default/x");
  directory_.Add("other.csi.berth.io", "node-2", "unix://" + socket_);  // another node: not this one
  EXPECT_EQ(queue_.Len(), 0u);
  directory_.Add("other.csi.berth.io", "node-1", "unix://" + socket_);
  EXPECT_EQ(Queued(), std::set<std::string>{"default/x"});
}

// A claim with no node yet (Immediate binding, no node registered when it
// was looked at) waits for the driver on any node; the node agent registers
// the driver under its node's name, which must release it (chaos_test found
// such claims parked for good after berth up restarted).
TEST_F(DriverMonitorTest, AKeyWaitingForTheDriverOnAnyNodeIsReleasedByARegistrationOnOne) {
  absl::Status st = monitor_->Call("other.csi.berth.io", "", [&](const auto&) {
    ++made_;
    return absl::OkStatus();
  });
  ASSERT_TRUE(IsNotAFailure(st)) << st;
  EXPECT_EQ(made_, 0);
  monitor_->Park("other.csi.berth.io", "", queue_, "default/y");
  EXPECT_EQ(queue_.Len(), 0u);
  directory_.Add("other.csi.berth.io", "node-1", "unix://" + socket_);
  EXPECT_EQ(Queued(), std::set<std::string>{"default/y"});
}

TEST_F(DriverMonitorTest, AProbeSayingNotReadyKeepsTheDriverDown) {
  Outage();
  driver_.SetProbeReady(false);
  ASSERT_TRUE(driver_.Serve(socket_).ok());
  monitor_->Park(kDriver, "", queue_, "default/a");
  ASSERT_TRUE(AdvanceUntil([&] { return driver_.probe_calls() >= 2; }));
  EXPECT_FALSE(monitor_->Up(kDriver, ""));
  EXPECT_EQ(queue_.Len(), 0u);
  driver_.SetProbeReady(true);
  ASSERT_TRUE(AdvanceUntil([&] { return queue_.Len() == 1u; }));
}

TEST_F(DriverMonitorTest, UnparkedQueuesAreNotTouchedAgain) {
  Outage();
  WorkQueue other;
  monitor_->Park(kDriver, "", other, "default/gone");
  monitor_->Park(kDriver, "", queue_, "default/kept");
  monitor_->Unpark(other);
  ASSERT_TRUE(driver_.Serve(socket_).ok());
  directory_.Add(kDriver, "", "unix://" + socket_);
  ASSERT_TRUE(Eventually([&] { return queue_.Len() == 1u; }));
  EXPECT_EQ(other.Len(), 0u);
}

TEST(NotAFailureTest, IsRecognizedAndLeftToRunWorker) {
  absl::Status st = NotAFailure("waiting");
  EXPECT_TRUE(IsNotAFailure(st));
  EXPECT_FALSE(IsNotAFailure(absl::UnavailableError("waiting")));
  auto sync = ParkAware(
      [](const std::string& key) { return key == "parked" ? NotAFailure("w") : absl::InternalError("real"); });
  EXPECT_TRUE(IsNotAFailure(sync("parked")));  // RunWorker leaves its backoff alone
  EXPECT_EQ(sync("other").code(), absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace berth::client
