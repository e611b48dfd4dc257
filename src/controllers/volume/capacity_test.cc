// Capacity tracking against fake CSI drivers over real unix sockets, one
// per node (a node-local driver answers for its own storage only).
#include "controllers/volume/capacity.h"

#include <atomic>
#include <set>

#include "common/testing/eventually.h"
#include "controllers/testing/controller_fixture.h"
#include "controllers/testing/fake_csi.h"
#include "controllers/testing/helpers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace berth::controllers {

using namespace ::berth::client;  // the controllers' own client library
namespace {

using testing::Eventually;
using testing::K;
using testing::Settle;

constexpr char kDriver[] = "fake.csi.berth.io";
constexpr char kHostname[] = "kubernetes.io/hostname";
constexpr char kNs[] = "kube-system";
constexpr int64_t kGi = 1LL << 30;

// The fake driver plus what these tests need of GetCapacity: a
// maximum_volume_size in answers, and drivers without GET_CAPACITY.
class CapacityFake : public testing::FakeCsiDriver {
 public:
  using FakeCsiDriver::FakeCsiDriver;

  void SetMaximumVolumeSize(int64_t bytes) { maximum_ = bytes; }
  void SetGetCapacityCapability(bool on) { get_capacity_ = on; }

  grpc::Status GetCapacity(grpc::ServerContext* ctx, const ::csi::v1::GetCapacityRequest* req,
                           ::csi::v1::GetCapacityResponse* out) override {
    grpc::Status st = FakeCsiDriver::GetCapacity(ctx, req, out);
    if (st.ok() && maximum_ > 0) out->mutable_maximum_volume_size()->set_value(maximum_);
    return st;
  }
  grpc::Status ControllerGetCapabilities(grpc::ServerContext* ctx,
                                         const ::csi::v1::ControllerGetCapabilitiesRequest* req,
                                         ::csi::v1::ControllerGetCapabilitiesResponse* out) override {
    grpc::Status st = FakeCsiDriver::ControllerGetCapabilities(ctx, req, out);
    if (!get_capacity_) {
      ::csi::v1::ControllerGetCapabilitiesResponse kept;
      for (const auto& c : out->capabilities()) {
        if (c.rpc().type() != ::csi::v1::ControllerServiceCapability::RPC::GET_CAPACITY) *kept.add_capabilities() = c;
      }
      *out = kept;
    }
    return st;
  }

 private:
  std::atomic<int64_t> maximum_{0};
  std::atomic<bool> get_capacity_{true};
};

class CapacityTest : public controllers::testing::ControllerTest {
 protected:
  void TearDown() override { StopTracker(); }

  void StartTracker(CapacityTracker::Options options = {}) {
    options.driver = kDriver;
    if (options.poll_interval == absl::Minutes(1)) options.poll_interval = absl::Hours(1);  // tests refresh explicitly
    options.rpc_timeout = absl::Seconds(5);
    classes_ = std::make_unique<Informer>(*registry_, K("storageclasses", "storage.k8s.io"));
    nodes_ = std::make_unique<Informer>(*registry_, K("nodes"));
    csinodes_ = std::make_unique<Informer>(*registry_, K("csinodes", "storage.k8s.io"));
    capacities_ = std::make_unique<Informer>(*registry_, K("csistoragecapacities", "storage.k8s.io"));
    tracker_ = std::make_unique<CapacityTracker>(
        *registry_, directory_, CapacityInformers{*classes_, *nodes_, *csinodes_, *capacities_}, options);
    tracker_->RegisterHandlers();
    for (Informer* i : {classes_.get(), nodes_.get(), csinodes_.get(), capacities_.get()}) {
      i->Start();
      ASSERT_TRUE(i->WaitForSync(absl::Seconds(10)));
    }
    tracker_->Start();
  }
  // A restart: tracker and caches go, the objects stay.
  void StopTracker() {
    if (tracker_) tracker_->Stop();
    for (auto* i : {&classes_, &nodes_, &csinodes_, &capacities_}) {
      if (*i) (*i)->Stop();
    }
    tracker_.reset();
  }

  void Delete(std::string_view resource, std::string_view group, const std::string& ns, const std::string& name) {
    auto got = registry_->Delete(K(resource, group), ns, name);
    ASSERT_TRUE(got.ok()) << got.status();
  }
  // A node running the driver (its own endpoint, `bytes` free) with the
  // hostname topology key.
  CapacityFake& AddNode(const std::string& name, int64_t bytes) {
    auto& fake = fakes_[name];
    fake = std::make_unique<CapacityFake>(kDriver);
    sockets_[name] = dir_.path() + "/" + name + ".sock";
    EXPECT_TRUE(fake->Serve(sockets_[name]).ok());
    fake->SetCapacity(kHostname, name, bytes);
    directory_.Add(kDriver, name, "unix://" + sockets_[name]);
    Create("nodes", "", "", {{"metadata", {{"name", name}, {"labels", {{kHostname, name}}}}}});
    Create("csinodes", "storage.k8s.io", "",
           {{"metadata", {{"name", name}}},
            {"spec", {{"drivers", {{{"name", kDriver}, {"nodeID", name}, {"topologyKeys", {kHostname}}}}}}}});
    return *fake;
  }
  void Class(const std::string& name, const std::string& binding = "WaitForFirstConsumer", json params = json::object(),
             const std::string& provisioner = kDriver) {
    Create("storageclasses", "storage.k8s.io", "",
           {{"metadata", {{"name", name}}},
            {"provisioner", provisioner},
            {"volumeBindingMode", binding},
            {"parameters", params}});
  }

  std::vector<json> Objects() {
    auto page = registry_->List(K("csistoragecapacities", "storage.k8s.io"), kNs, {});
    EXPECT_TRUE(page.ok()) << page.status();
    return page.ok() ? page->items : std::vector<json>{};
  }
  std::vector<json> ObjectsFor(const std::string& cls, const std::string& node) {
    std::vector<json> out;
    for (const json& o : Objects()) {
      if (o.value("storageClassName", "") == cls &&
          o.value("nodeTopology", json::object()).value("matchLabels", json::object()).value(kHostname, "") == node) {
        out.push_back(o);
      }
    }
    return out;
  }
  // The one object for (class, node), or null.
  json ObjectFor(const std::string& cls, const std::string& node) {
    auto all = ObjectsFor(cls, node);
    return all.size() == 1 ? all[0] : json();
  }
  std::string CapacityOf(const std::string& cls, const std::string& node) {
    json o = ObjectFor(cls, node);
    return o.is_null() ? "<none>" : o.value("capacity", "<unset>");
  }
  // A capacity object as an older tracker (or someone else) left it.
  json Leftover(const std::string& cls, const std::string& node, const std::string& capacity,
                const std::string& managed_by = "berth-capacity-tracker", const std::string& driver = kDriver) {
    json o = {{"metadata",
               {{"generateName", "csisc-"},
                {"labels", {{kCapacityDriverLabel, driver}, {kCapacityManagedByLabel, managed_by}}}}},
              {"nodeTopology", {{"matchLabels", {{kHostname, node}}}}},
              {"storageClassName", cls},
              {"capacity", capacity}};
    auto got = registry_->Create(K("csistoragecapacities", "storage.k8s.io"), kNs, o);
    EXPECT_TRUE(got.ok()) << got.status();
    return got.ok() ? *got : json();
  }
  std::vector<json> Events(const std::string& ns, const std::string& reason) {
    std::vector<json> out;
    auto page = registry_->List(K("events"), ns, {});
    if (!page.ok()) return out;
    for (const json& e : page->items) {
      if (e.value("reason", "") == reason) out.push_back(e);
    }
    return out;
  }
  int CapacityCalls() {
    int n = 0;
    for (const auto& [node, fake] : fakes_) n += fake->capacity_calls();
    return n;
  }

  FakeClock fake_clock_;  // for tests that pass it in the tracker's options
  std::map<std::string, std::unique_ptr<CapacityFake>> fakes_;
  std::map<std::string, std::string> sockets_;
  DriverDirectory directory_;
  std::unique_ptr<Informer> classes_, nodes_, csinodes_, capacities_;
  std::unique_ptr<CapacityTracker> tracker_;
};

TEST_F(CapacityTest, PublishesOneObjectPerNodeSegmentAndClassAskingEachNodeItself) {
  AddNode("node-a", 10 * kGi).SetMaximumVolumeSize(5 * kGi);
  AddNode("node-b", 20 * kGi);
  Class("local", "WaitForFirstConsumer", {{"tier", "gold"}, {"csi.storage.k8s.io/fstype", "xfs"}});
  Class("elsewhere", "WaitForFirstConsumer", json::object(), "other.csi.example.com");
  StartTracker();
  ASSERT_TRUE(Eventually([&] { return Objects().size() == 2; }));
  ASSERT_TRUE(Settle(*store_));
  EXPECT_EQ(Objects().size(), 2u);  // nothing for the other driver's class

  json a = ObjectFor("local", "node-a");
  ASSERT_FALSE(a.is_null());
  EXPECT_EQ(a["metadata"]["namespace"], kNs);
  EXPECT_EQ(a["metadata"]["generateName"], "csisc-");
  EXPECT_TRUE(a["metadata"]["name"].get<std::string>().starts_with("csisc-"));
  EXPECT_EQ(a["metadata"]["labels"][kCapacityDriverLabel], kDriver);
  EXPECT_EQ(a["metadata"]["labels"][kCapacityManagedByLabel], "berth-capacity-tracker");
  EXPECT_EQ(a["nodeTopology"], json({{"matchLabels", {{kHostname, "node-a"}}}}));
  EXPECT_EQ(a["capacity"], "10Gi");
  EXPECT_EQ(a["maximumVolumeSize"], "5Gi");
  EXPECT_FALSE(a["metadata"].contains("ownerReferences"));
  json b = ObjectFor("local", "node-b");
  ASSERT_FALSE(b.is_null());
  EXPECT_EQ(b["capacity"], "20Gi");
  EXPECT_FALSE(b.contains("maximumVolumeSize"));  // the driver did not say

  // Each segment went to its own node's endpoint.
  for (const char* node : {"node-a", "node-b"}) {
    auto req = fakes_[node]->last_capacity_request();
    ASSERT_TRUE(req.has_value()) << node;
    EXPECT_EQ(req->accessible_topology().segments().at(kHostname), node);
    EXPECT_EQ(req->parameters().at("tier"), "gold");
    EXPECT_EQ(req->parameters().count("csi.storage.k8s.io/fstype"), 0u);  // reserved keys stay out
    ASSERT_EQ(req->volume_capabilities_size(), 1);
    EXPECT_EQ(req->volume_capabilities(0).mount().fs_type(), "xfs");
    EXPECT_EQ(req->volume_capabilities(0).access_mode().mode(),
              ::csi::v1::VolumeCapability::AccessMode::SINGLE_NODE_WRITER);
  }
}

TEST_F(CapacityTest, ASecondClassAddsItsObjects) {
  AddNode("node-a", 10 * kGi);
  AddNode("node-b", 20 * kGi);
  Class("local");
  StartTracker();
  ASSERT_TRUE(Eventually([&] { return Objects().size() == 2; }));
  const std::string kept = ObjectFor("local", "node-a")["metadata"]["name"];
  Class("local-xfs", "WaitForFirstConsumer", {{"csi.storage.k8s.io/fstype", "xfs"}});
  ASSERT_TRUE(Eventually([&] { return Objects().size() == 4; }));
  for (const char* cls : {"local", "local-xfs"}) {
    for (const char* node : {"node-a", "node-b"}) EXPECT_EQ(ObjectsFor(cls, node).size(), 1u) << cls << " " << node;
  }
  EXPECT_EQ(CapacityOf("local-xfs", "node-b"), "20Gi");
  EXPECT_EQ(ObjectFor("local", "node-a")["metadata"]["name"], kept);
}

TEST_F(CapacityTest, ADeletedClassTakesItsObjectsAlong) {
  AddNode("node-a", 10 * kGi);
  AddNode("node-b", 20 * kGi);
  Class("local");
  Class("scratch");
  StartTracker();
  ASSERT_TRUE(Eventually([&] { return Objects().size() == 4; }));
  Delete("storageclasses", "storage.k8s.io", "", "scratch");
  ASSERT_TRUE(Eventually([&] { return Objects().size() == 2; }));
  EXPECT_EQ(ObjectsFor("scratch", "node-a").size(), 0u);
  EXPECT_EQ(ObjectsFor("local", "node-a").size(), 1u);
  EXPECT_EQ(ObjectsFor("local", "node-b").size(), 1u);
}

TEST_F(CapacityTest, ARemovedNodeTakesItsSegmentAlong) {
  AddNode("node-a", 10 * kGi);
  AddNode("node-b", 20 * kGi);
  Class("local");
  StartTracker();
  ASSERT_TRUE(Eventually([&] { return Objects().size() == 2; }));
  const std::string kept = ObjectFor("local", "node-a")["metadata"]["name"];
  Delete("csinodes", "storage.k8s.io", "", "node-b");
  Delete("nodes", "", "", "node-b");
  ASSERT_TRUE(Eventually([&] { return Objects().size() == 1; }));
  EXPECT_EQ(ObjectsFor("local", "node-b").size(), 0u);
  EXPECT_EQ(ObjectFor("local", "node-a")["metadata"]["name"], kept);
}

TEST_F(CapacityTest, ANodeLabelChangeMovesItsObjectToTheNewSegment) {
  AddNode("node-a", 10 * kGi);
  Class("local");
  StartTracker();
  ASSERT_TRUE(Eventually([&] { return Objects().size() == 1; }));
  auto patched =
      registry_->Patch(K("nodes"), "", "node-a", json({{"metadata", {{"labels", {{kHostname, "renamed"}}}}}}).dump(),
                       apiserver::PatchType::kMerge, apiserver::Subresource::kMain);
  ASSERT_TRUE(patched.ok()) << patched.status();
  ASSERT_TRUE(Eventually([&] { return ObjectsFor("local", "renamed").size() == 1 && Objects().size() == 1; }));
  EXPECT_EQ(CapacityOf("local", "renamed"), "100Gi");  // the fake's default for an unknown segment value
}

TEST_F(CapacityTest, NodesWithoutTheDriverOrWithoutTheTopologyLabelAreSkipped) {
  AddNode("node-a", 10 * kGi);
  // node-c runs another driver only; node-d's label has not arrived yet.
  Create("nodes", "", "", {{"metadata", {{"name", "node-c"}, {"labels", {{kHostname, "node-c"}}}}}});
  Create(
      "csinodes", "storage.k8s.io", "",
      {{"metadata", {{"name", "node-c"}}},
       {"spec", {{"drivers", {{{"name", "other.csi.example.com"}, {"nodeID", "c"}, {"topologyKeys", {kHostname}}}}}}}});
  Create("nodes", "", "", {{"metadata", {{"name", "node-d"}}}});
  Create("csinodes", "storage.k8s.io", "",
         {{"metadata", {{"name", "node-d"}}},
          {"spec", {{"drivers", {{{"name", kDriver}, {"nodeID", "d"}, {"topologyKeys", {kHostname}}}}}}}});
  Class("local");
  StartTracker();
  ASSERT_TRUE(Eventually([&] { return Objects().size() == 1; }));
  ASSERT_TRUE(Settle(*store_));
  ASSERT_EQ(Objects().size(), 1u);
  EXPECT_EQ(ObjectsFor("local", "node-a").size(), 1u);

  // node-d's driver registers and its label arrives: its segment is tracked.
  auto fake = std::make_unique<CapacityFake>(kDriver);
  ASSERT_TRUE(fake->Serve(dir_.path() + "/node-d.sock").ok());
  fake->SetCapacity(kHostname, "node-d", 7 * kGi);
  directory_.Add(kDriver, "node-d", "unix://" + dir_.path() + "/node-d.sock");
  fakes_["node-d"] = std::move(fake);
  auto patched =
      registry_->Patch(K("nodes"), "", "node-d", json({{"metadata", {{"labels", {{kHostname, "node-d"}}}}}}).dump(),
                       apiserver::PatchType::kMerge, apiserver::Subresource::kMain);
  ASSERT_TRUE(patched.ok()) << patched.status();
  ASSERT_TRUE(Eventually([&] { return CapacityOf("local", "node-d") == "7Gi"; }));
  EXPECT_EQ(Objects().size(), 2u);
}

TEST_F(CapacityTest, RefreshPublishesACapacityChangeInTheSameObject) {
  AddNode("node-a", 10 * kGi);
  Class("local");
  StartTracker();
  ASSERT_TRUE(Eventually([&] { return CapacityOf("local", "node-a") == "10Gi"; }));
  const std::string name = ObjectFor("local", "node-a")["metadata"]["name"];
  fakes_["node-a"]->SetCapacity(kHostname, "node-a", 6 * kGi);
  fakes_["node-a"]->SetMaximumVolumeSize(3 * kGi);
  tracker_->Refresh();
  ASSERT_TRUE(Eventually([&] { return CapacityOf("local", "node-a") == "6Gi"; }));
  json o = ObjectFor("local", "node-a");
  EXPECT_EQ(o["metadata"]["name"], name);
  EXPECT_EQ(o["maximumVolumeSize"], "3Gi");
  EXPECT_EQ(Objects().size(), 1u);
}

TEST_F(CapacityTest, RefreshNodeAsksOnlyAboutThatNodesSegments) {
  AddNode("node-a", 10 * kGi);
  AddNode("node-b", 20 * kGi);
  Class("local");
  StartTracker();
  ASSERT_TRUE(Eventually([&] { return Objects().size() == 2 && CapacityOf("local", "node-b") == "20Gi"; }));
  ASSERT_TRUE(Settle(*store_));
  fakes_["node-a"]->SetCapacity(kHostname, "node-a", 9 * kGi);
  fakes_["node-b"]->SetCapacity(kHostname, "node-b", 19 * kGi);
  const int b_calls = fakes_["node-b"]->capacity_calls();
  tracker_->RefreshNode("node-a");
  ASSERT_TRUE(Eventually([&] { return CapacityOf("local", "node-a") == "9Gi"; }));
  ASSERT_TRUE(Settle(*store_));
  EXPECT_EQ(fakes_["node-b"]->capacity_calls(), b_calls);
  EXPECT_EQ(CapacityOf("local", "node-b"), "20Gi");
}

// The provisioner's refreshes (one per volume created or deleted) within
// a second: one GetCapacity per object, a second after the first ask.
TEST_F(CapacityTest, RefreshesAskedWithinASecondShareOneCall) {
  AddNode("node-a", 10 * kGi);
  Class("local");
  CapacityTracker::Options options;
  options.clock = &fake_clock_;
  StartTracker(options);
  ASSERT_TRUE(Eventually([&] { return CapacityOf("local", "node-a") == "10Gi"; }));
  ASSERT_TRUE(Settle(*store_));
  const int calls = fakes_["node-a"]->capacity_calls();
  fakes_["node-a"]->SetCapacity(kHostname, "node-a", 7 * kGi);
  for (int i = 0; i < 50; ++i) {
    tracker_->RefreshNode("node-a", absl::Seconds(1));
    if (i == 25) fake_clock_.Advance(absl::Milliseconds(500));
  }
  ASSERT_TRUE(Settle(*store_));
  EXPECT_EQ(fakes_["node-a"]->capacity_calls(), calls) << "nothing before the second is up";
  fake_clock_.Advance(absl::Milliseconds(500));
  ASSERT_TRUE(Eventually([&] { return CapacityOf("local", "node-a") == "7Gi"; }));
  ASSERT_TRUE(Settle(*store_));
  EXPECT_EQ(fakes_["node-a"]->capacity_calls(), calls + 1);
}

TEST_F(CapacityTest, PollingPublishesACapacityChange) {
  AddNode("node-a", 10 * kGi);
  Class("local");
  StartTracker({.poll_interval = absl::Milliseconds(300)});
  ASSERT_TRUE(Eventually([&] { return CapacityOf("local", "node-a") == "10Gi"; }));
  fakes_["node-a"]->SetCapacity(kHostname, "node-a", 4 * kGi);
  ASSERT_TRUE(Eventually([&] { return CapacityOf("local", "node-a") == "4Gi"; }));
  EXPECT_EQ(Objects().size(), 1u);
}

TEST_F(CapacityTest, AnUnchangedCapacityIsNotRewritten) {
  AddNode("node-a", 10 * kGi);
  Class("local");
  StartTracker({.poll_interval = absl::Milliseconds(100)});
  ASSERT_TRUE(Eventually([&] { return CapacityOf("local", "node-a") == "10Gi"; }));
  const json before = ObjectFor("local", "node-a");
  const int calls = CapacityCalls();
  ASSERT_TRUE(Eventually([&] { return CapacityCalls() >= calls + 3; }));  // polled again and again
  EXPECT_EQ(ObjectFor("local", "node-a")["metadata"]["resourceVersion"], before["metadata"]["resourceVersion"]);
}

TEST_F(CapacityTest, ATransientGetCapacityFailureKeepsTheLastPublishedValue) {
  AddNode("node-a", 10 * kGi);
  Class("local");
  CapacityTracker::Options options;
  options.clock = &fake_clock_;  // the retries run when the test moves time
  StartTracker(options);
  ASSERT_TRUE(Eventually([&] { return CapacityOf("local", "node-a") == "10Gi"; }));
  const std::string name = ObjectFor("local", "node-a")["metadata"]["name"];
  fakes_["node-a"]->Crash();
  fakes_["node-a"]->SetCapacity(kHostname, "node-a", 2 * kGi);
  tracker_->Refresh();
  ASSERT_TRUE(Eventually([&] { return !Events(kNs, "GetCapacityFailed").empty(); }));
  json event = Events(kNs, "GetCapacityFailed")[0];
  EXPECT_EQ(event["type"], "Warning");
  EXPECT_EQ(event["involvedObject"]["name"], name);
  EXPECT_THAT(event["message"].get<std::string>(), ::testing::HasSubstr("kubernetes.io/hostname=node-a"));
  // Three retries run out their backoff on the fake clock and fail again.
  for (int retry = 0; retry < 3; ++retry) {
    ASSERT_TRUE(fake_clock_.BlockUntilTimers(2));  // the poll and the retry
    ASSERT_TRUE(fake_clock_.AdvanceToNextTimer());
    ASSERT_TRUE(Settle(*store_));
    EXPECT_EQ(CapacityOf("local", "node-a"), "10Gi");  // neither zeroed nor deleted
    EXPECT_EQ(ObjectFor("local", "node-a")["metadata"]["name"], name);
  }

  ASSERT_TRUE(fakes_["node-a"]->Serve(sockets_["node-a"]).ok());
  // The next retries reach it (gRPC reconnects in real time meanwhile).
  ASSERT_TRUE(Eventually(
      [&] {
        if (CapacityOf("local", "node-a") == "2Gi") return true;
        fake_clock_.AdvanceToNextTimer();
        return false;
      },
      absl::Seconds(30)));
  EXPECT_EQ(ObjectFor("local", "node-a")["metadata"]["name"], name);
}

TEST_F(CapacityTest, ARestartedTrackerReusesItsObjects) {
  AddNode("node-a", 10 * kGi);
  AddNode("node-b", 20 * kGi);
  Class("local");
  StartTracker();
  ASSERT_TRUE(Eventually([&] { return Objects().size() == 2 && CapacityOf("local", "node-b") == "20Gi"; }));
  std::set<std::string> names;
  for (const json& o : Objects()) names.insert(o["metadata"]["name"].get<std::string>());
  StopTracker();

  fakes_["node-b"]->SetCapacity(kHostname, "node-b", 15 * kGi);
  const int calls = CapacityCalls();
  StartTracker();
  tracker_->Refresh();
  ASSERT_TRUE(Eventually([&] { return CapacityOf("local", "node-b") == "15Gi"; }));
  ASSERT_TRUE(Eventually([&] { return CapacityCalls() >= calls + 2; }));
  ASSERT_TRUE(Settle(*store_));
  std::set<std::string> after;
  for (const json& o : Objects()) after.insert(o["metadata"]["name"].get<std::string>());
  EXPECT_EQ(after, names);
  EXPECT_EQ(CapacityOf("local", "node-a"), "10Gi");
}

TEST_F(CapacityTest, StaleAndDuplicateObjectsAreDeletedAtStartForeignOnesKept) {
  AddNode("node-a", 10 * kGi);
  Class("local");
  const json first = Leftover("local", "node-a", "1Gi");
  const json second = Leftover("local", "node-a", "1Gi");  // a duplicate
  const json gone = Leftover("removed-class", "node-a", "1Gi");
  const json ghost = Leftover("local", "node-gone", "1Gi");  // a node that left
  const json foreign = Leftover("local", "node-a", "1Gi", "external-provisioner");
  const json other_driver = Leftover("local", "node-a", "1Gi", "berth-capacity-tracker", "other.csi.example.com");
  StartTracker();
  auto ours = [&] {
    std::vector<json> out;
    for (const json& o : ObjectsFor("local", "node-a")) {
      if (o["metadata"]["labels"][kCapacityManagedByLabel] == "berth-capacity-tracker" &&
          o["metadata"]["labels"][kCapacityDriverLabel] == kDriver) {
        out.push_back(o);
      }
    }
    return out;
  };
  ASSERT_TRUE(Eventually([&] { return ours().size() == 1 && ours()[0]["capacity"] == "10Gi"; }));
  ASSERT_TRUE(Eventually([&] { return Objects().size() == 3; }));
  const std::string kept = ours()[0]["metadata"]["name"];
  EXPECT_TRUE(kept == first["metadata"]["name"] || kept == second["metadata"]["name"]) << kept;
  std::set<std::string> names;
  for (const json& o : Objects()) names.insert(o["metadata"]["name"].get<std::string>());
  EXPECT_TRUE(names.contains(foreign["metadata"]["name"]));
  EXPECT_TRUE(names.contains(other_driver["metadata"]["name"]));
  EXPECT_FALSE(names.contains(gone["metadata"]["name"]));
  EXPECT_FALSE(names.contains(ghost["metadata"]["name"]));
}

TEST_F(CapacityTest, AnObjectDeletedBySomeoneElseComesBack) {
  AddNode("node-a", 10 * kGi);
  Class("local");
  StartTracker();
  ASSERT_TRUE(Eventually([&] { return Objects().size() == 1; }));
  const std::string name = ObjectFor("local", "node-a")["metadata"]["name"];
  Delete("csistoragecapacities", "storage.k8s.io", kNs, name);
  ASSERT_TRUE(Eventually([&] {
    json o = ObjectFor("local", "node-a");
    return !o.is_null() && o["metadata"]["name"] != name && o["capacity"] == "10Gi";
  }));
  ASSERT_TRUE(Settle(*store_));
  EXPECT_EQ(Objects().size(), 1u);
}

TEST_F(CapacityTest, ImmediateClassesAreTrackedByDefault) {
  AddNode("node-a", 10 * kGi);
  Class("local-now", "Immediate");
  StartTracker();
  ASSERT_TRUE(Eventually([&] { return CapacityOf("local-now", "node-a") == "10Gi"; }));
}

TEST_F(CapacityTest, ImmediateClassesAreLeftOutAsUpstreamWhenAsked) {
  AddNode("node-a", 10 * kGi);
  Class("local");
  Class("local-now", "Immediate");
  const json leftover = Leftover("local-now", "node-a", "1Gi");  // from a run that tracked it
  StartTracker({.immediate_binding = false});
  ASSERT_TRUE(Eventually([&] { return CapacityOf("local", "node-a") == "10Gi"; }));
  ASSERT_TRUE(Eventually([&] { return ObjectsFor("local-now", "node-a").empty(); }));
  ASSERT_TRUE(Settle(*store_));
  EXPECT_EQ(Objects().size(), 1u);
}

TEST_F(CapacityTest, ADriverWithoutGetCapacityGetsNoObjects) {
  AddNode("node-a", 10 * kGi).SetGetCapacityCapability(false);
  Class("local");
  Leftover("local", "node-a", "1Gi");  // from when it had the capability
  StartTracker();
  ASSERT_TRUE(Eventually([&] { return Objects().empty(); }));
  tracker_->Refresh();
  ASSERT_TRUE(Settle(*store_));
  EXPECT_TRUE(Objects().empty());
  EXPECT_EQ(CapacityCalls(), 0);
}

TEST_F(CapacityTest, ADriverWithoutTopologyKeysHasOneSegmentForEveryNode) {
  auto fake = std::make_unique<CapacityFake>(kDriver);
  ASSERT_TRUE(fake->Serve(dir_.path() + "/cluster.sock").ok());
  directory_.Add(kDriver, "", "unix://" + dir_.path() + "/cluster.sock");  // a cluster-wide controller
  fakes_["cluster"] = std::move(fake);
  for (const char* node : {"node-a", "node-b"}) {
    Create("nodes", "", "", {{"metadata", {{"name", node}}}});
    Create("csinodes", "storage.k8s.io", "",
           {{"metadata", {{"name", node}}}, {"spec", {{"drivers", {{{"name", kDriver}, {"nodeID", node}}}}}}});
  }
  Class("shared");
  StartTracker();
  ASSERT_TRUE(Eventually([&] { return Objects().size() == 1; }));
  json o = Objects()[0];
  EXPECT_EQ(o["nodeTopology"].value("matchLabels", json::object()), json::object());  // every node
  EXPECT_EQ(o["capacity"], "100Gi");
  auto req = fakes_["cluster"]->last_capacity_request();
  ASSERT_TRUE(req.has_value());
  EXPECT_FALSE(req->has_accessible_topology());
  const int calls = CapacityCalls();
  tracker_->Refresh();
  ASSERT_TRUE(Eventually([&] { return CapacityCalls() > calls; }));
  ASSERT_TRUE(Settle(*store_));
  ASSERT_EQ(Objects().size(), 1u);
  EXPECT_EQ(Objects()[0]["metadata"]["name"], o["metadata"]["name"]);  // read back as the same segment
}

TEST_F(CapacityTest, ObjectsCarryTheConfiguredOwner) {
  AddNode("node-a", 10 * kGi);
  Class("local");
  Create("csidrivers", "storage.k8s.io", "", {{"metadata", {{"name", kDriver}}}, {"spec", json::object()}});
  auto driver = registry_->Get(K("csidrivers", "storage.k8s.io"), "", kDriver);
  ASSERT_TRUE(driver.ok());
  const json owner = {{"apiVersion", "storage.k8s.io/v1"},
                      {"kind", "CSIDriver"},
                      {"name", kDriver},
                      {"uid", (*driver)["metadata"]["uid"]},
                      {"controller", true}};
  const json leftover = Leftover("local", "node-a", "10Gi");  // reused, and given the owner
  StartTracker({.owner = owner});
  ASSERT_TRUE(Eventually([&] {
    json o = ObjectFor("local", "node-a");
    return !o.is_null() && o["metadata"].contains("ownerReferences");
  }));
  json o = ObjectFor("local", "node-a");
  EXPECT_EQ(o["metadata"]["name"], leftover["metadata"]["name"]);
  ASSERT_EQ(o["metadata"]["ownerReferences"].size(), 1u);
  EXPECT_EQ(o["metadata"]["ownerReferences"][0]["uid"], owner["uid"]);
}

TEST(CapacityRequestTest, CarriesTheSegmentAndTheClassParametersWithoutReservedKeys) {
  const json sc = {
      {"provisioner", kDriver},
      {"parameters",
       {{"csi.storage.k8s.io/fstype", "ext4"}, {"csi.storage.k8s.io/provisioner-secret-name", "s"}, {"pool", "fast"}}}};
  auto req = CapacityTracker::BuildRequest(sc, {{"zone", "z1"}, {kHostname, "n1"}});
  EXPECT_EQ(req.parameters().size(), 1u);
  EXPECT_EQ(req.parameters().at("pool"), "fast");
  EXPECT_EQ(req.accessible_topology().segments().size(), 2u);
  EXPECT_EQ(req.accessible_topology().segments().at("zone"), "z1");
  ASSERT_EQ(req.volume_capabilities_size(), 1);
  EXPECT_EQ(req.volume_capabilities(0).mount().fs_type(), "ext4");

  auto everywhere = CapacityTracker::BuildRequest(json::object(), {});
  EXPECT_FALSE(everywhere.has_accessible_topology());
  ASSERT_EQ(everywhere.volume_capabilities_size(), 1);
  EXPECT_TRUE(everywhere.volume_capabilities(0).has_mount());
  EXPECT_EQ(everywhere.volume_capabilities(0).mount().fs_type(), "");
}

}  // namespace
}  // namespace berth::controllers
