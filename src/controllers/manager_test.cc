// The controller manager with drivers that become known while it runs: a
// driver registered after start gets its provisioner (and the rest), which
// catches up on claims that were waiting for it.
#include "controllers/manager.h"

#include "common/testing/eventually.h"
#include "controllers/testing/fake_csi_fixture.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace berth::controllers {

using namespace ::berth::client;  // the controllers' own client library
namespace {

using testing::Eventually;
using testing::K;
using testing::Settle;

ControllerManager::Options Follow(bool follow) {
  ControllerManager::Options o;
  o.informer_sync_timeout = absl::Seconds(10);
  o.follow_directory = follow;
  return o;
}

constexpr char kLate[] = "late.csi.example.com";

// The driver is not in the directory at first: tests register it.
class ControllerManagerTest : public testing::FakeCsiTest {
 protected:
  ControllerManagerTest() : FakeCsiTest(kLate) {}
  void ClassAndClaim(const std::string& claim) {
    if (!registry_->Get(K("storageclasses", "storage.k8s.io"), "", "late").ok()) {
      Create("storageclasses", "storage.k8s.io", "",
             {{"metadata", {{"name", "late"}}}, {"provisioner", kLate}, {"volumeBindingMode", "Immediate"}});
    }
    Create("persistentvolumeclaims", "", "default",
           {{"metadata", {{"name", claim}}},
            {"spec",
             {{"storageClassName", "late"},
              {"accessModes", {"ReadWriteOnce"}},
              {"resources", {{"requests", {{"storage", "1Gi"}}}}}}}});
  }
  std::string Phase(const std::string& claim) {
    auto got = registry_->Get(K("persistentvolumeclaims"), "default", claim);
    return got.ok() ? got->value("status", json::object()).value("phase", "") : "<gone>";
  }
};

TEST_F(ControllerManagerTest, ADriverRegisteredLaterGetsItsControllers) {
  ControllerManager manager(*registry_, directory_, Follow(true));
  ASSERT_TRUE(manager.Start().ok());
  EXPECT_TRUE(manager.drivers().empty());
  ClassAndClaim("early");
  ASSERT_TRUE(Settle(*store_));
  EXPECT_EQ(Phase("early"), "Pending") << "no provisioner for the driver yet";
  EXPECT_EQ(driver_->create_calls(), 0);

  RegisterDriver("node-1");  // e.g. a node's plugin registration
  EXPECT_THAT(manager.drivers(), ::testing::ElementsAre(kLate));
  EXPECT_TRUE(Eventually([&] { return Phase("early") == "Bound"; })) << "the claim that waited is provisioned";
  ClassAndClaim("later");
  EXPECT_TRUE(Eventually([&] { return Phase("later") == "Bound"; }));

  // The same driver on another node, or again after a re-registration: one
  // set of controllers.
  RegisterDriver("node-2");
  directory_.Remove(kLate, "node-1");
  directory_.Remove(kLate, "node-2");
  RegisterDriver("node-1");
  EXPECT_THAT(manager.drivers(), ::testing::ElementsAre(kLate));
  EXPECT_EQ(driver_->create_calls(), 2);
  manager.Stop();
}

TEST_F(ControllerManagerTest, WithoutFollowingOnlyTheNamedDriversRun) {
  ControllerManager manager(*registry_, directory_, Follow(false));
  ASSERT_TRUE(manager.Start().ok());
  RegisterDriver();
  ClassAndClaim("data");
  ASSERT_TRUE(Settle(*store_));
  EXPECT_EQ(Phase("data"), "Pending");
  EXPECT_TRUE(manager.drivers().empty());
  // Added by hand: it catches up.
  manager.AddDriver(kLate);
  EXPECT_TRUE(Eventually([&] { return Phase("data") == "Bound"; }));
  manager.Stop();
}

TEST_F(ControllerManagerTest, DriversKnownBeforeStartAreFollowedToo) {
  RegisterDriver();
  ClassAndClaim("data");
  ControllerManager manager(*registry_, directory_, Follow(true));
  ASSERT_TRUE(manager.Start().ok());
  EXPECT_THAT(manager.drivers(), ::testing::ElementsAre(kLate));
  EXPECT_TRUE(Eventually([&] { return Phase("data") == "Bound"; }));
  manager.Stop();
  // Stopped: a new driver starts nothing.
  directory_.Add("other.csi.example.com", "", Endpoint());
  EXPECT_THAT(manager.drivers(), ::testing::ElementsAre(kLate));
}

// berth up --sidecar-driver: the upstream sidecars serve the driver's
// controller side, so neither naming it nor its registration on a node
// starts berth's provisioner (or the rest) for it.
TEST_F(ControllerManagerTest, SidecarDriversGetNoControllers) {
  ControllerManager::Options o = Follow(true);
  o.drivers = {kLate};
  o.sidecar_drivers = {kLate};
  ControllerManager manager(*registry_, directory_, o);
  ASSERT_TRUE(manager.Start().ok());
  RegisterDriver("node-1");
  manager.AddDriver(kLate);
  ClassAndClaim("data");
  ASSERT_TRUE(Settle(*store_));
  EXPECT_EQ(Phase("data"), "Pending") << "left to the external provisioner";
  EXPECT_TRUE(manager.drivers().empty());
  EXPECT_EQ(driver_->create_calls(), 0);
  manager.Stop();
}

}  // namespace
}  // namespace berth::controllers
