// The controller test fixture (controller_fixture.h) plus a FakeCsiDriver
// (fake_csi.h) served over a real unix socket, and the DriverDirectory the
// controllers find it in. Faults are injected through the fake (FailCreates,
// FailPublishes, FailSnapshots, SetExpand, SetCreateDelay, SetProbeReady)
// and with CrashDriver()/RestartDriver().
//
//   class AttacherTest : public testing::FakeCsiTest {
//    protected:
//     void SetUp() override {
//       FakeCsiTest::SetUp();
//       RegisterDriver();  // its controller side (node "")
//     }
//   };
//
// The driver's server stops with the fixture, also when a test fails.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "client/drivers.h"
#include "controllers/testing/controller_fixture.h"
#include "controllers/testing/fake_csi.h"
#include "gtest/gtest.h"

namespace berth::controllers::testing {

// The fake driver's name unless a test names another.
inline constexpr char kDriver[] = "fake.csi.berth.io";

class FakeCsiTest : public ControllerTest {
 protected:
  explicit FakeCsiTest(std::string driver_name = kDriver) : driver_name_(std::move(driver_name)) {}

  void SetUp() override {
    ControllerTest::SetUp();
    if (HasFatalFailure()) return;
    driver_ = std::make_unique<FakeCsiDriver>(driver_name_);
    socket_ = dir_.path() + "/csi.sock";
    absl::Status st = driver_->Serve(socket_);
    ASSERT_TRUE(st.ok()) << st;
  }

  // The controllers find the driver: its controller side (node "") or its
  // registration on `node`.
  void RegisterDriver(const std::string& node = "") { directory_.Add(driver_name_, node, Endpoint()); }
  std::string Endpoint() const { return "unix://" + socket_; }
  // The driver dies (calls fail UNAVAILABLE); its state stays in the fake.
  void CrashDriver() { driver_->Crash(); }
  // It comes back on the same socket.
  void RestartDriver() {
    absl::Status st = driver_->Serve(socket_);
    ASSERT_TRUE(st.ok()) << st;
  }

  const std::string driver_name_;
  std::unique_ptr<FakeCsiDriver> driver_;
  std::string socket_;
  client::DriverDirectory directory_;
};

}  // namespace berth::controllers::testing
