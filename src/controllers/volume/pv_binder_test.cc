#include "controllers/volume/pv_binder.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <string>

#include "absl/synchronization/mutex.h"
#include "common/testing/eventually.h"
#include "controllers/testing/controller_fixture.h"
#include "controllers/testing/helpers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace berth::controllers {

using namespace ::berth::client;  // the controllers' own client library
namespace {

using testing::Eventually;
using testing::K;
using testing::Settle;

json Claim(const std::string& name, const std::string& size, const std::string& cls = "",
           std::vector<std::string> modes = {"ReadWriteOnce"}) {
  return {{"apiVersion", "v1"},
          {"kind", "PersistentVolumeClaim"},
          {"metadata", {{"name", name}}},
          {"spec",
           {{"accessModes", modes}, {"storageClassName", cls}, {"resources", {{"requests", {{"storage", size}}}}}}}};
}

json Volume(const std::string& name, const std::string& size, const std::string& cls = "",
            std::vector<std::string> modes = {"ReadWriteOnce"}) {
  return {{"apiVersion", "v1"},
          {"kind", "PersistentVolume"},
          {"metadata", {{"name", name}}},
          {"spec",
           {{"capacity", {{"storage", size}}},
            {"accessModes", modes},
            {"storageClassName", cls},
            {"persistentVolumeReclaimPolicy", "Retain"},
            {"csi", {{"driver", "x.csi.io"}, {"volumeHandle", name}}}}}};
}

json OnNode(const std::string& node) {
  return json::parse(R"({"required":{"nodeSelectorTerms":[{"matchExpressions":[
      {"key":"kubernetes.io/hostname","operator":"In","values":[")" +
                     node + R"("]}]}]}})");
}

class PvBinderTest : public controllers::testing::ControllerTest {
 protected:
  void TearDown() override { StopBinder(); }

  void StartBinder(PvBinder::Options options = {}) {
    claims_ = std::make_unique<Informer>(*registry_, K("persistentvolumeclaims"));
    volumes_ = std::make_unique<Informer>(*registry_, K("persistentvolumes"));
    classes_ = std::make_unique<Informer>(*registry_, K("storageclasses", "storage.k8s.io"));
    pods_ = std::make_unique<Informer>(*registry_, K("pods"));
    nodes_ = std::make_unique<Informer>(*registry_, K("nodes"));
    binder_ = std::make_unique<PvBinder>(*registry_, BinderInformers{*claims_, *volumes_, *classes_, *pods_, *nodes_},
                                         std::move(options));
    binder_->RegisterHandlers();
    for (Informer* i : {classes_.get(), nodes_.get(), pods_.get(), volumes_.get(), claims_.get()}) {
      i->Start();
      ASSERT_TRUE(i->WaitForSync(absl::Seconds(10)));
    }
    binder_->Start();
  }
  void StopBinder() {
    if (binder_) binder_->Stop();
    for (auto* i : {&claims_, &volumes_, &classes_, &pods_, &nodes_}) {
      if (*i) (*i)->Stop();
    }
    binder_.reset();
  }
  json Get(std::string_view resource, const std::string& ns, const std::string& name) {
    auto got = registry_->Get(K(resource, resource == "storageclasses" ? "storage.k8s.io" : ""), ns, name);
    return got.ok() ? *got : json();
  }
  std::string Phase(std::string_view resource, const std::string& ns, const std::string& name) {
    json o = Get(resource, ns, name);
    return o.is_null() ? "<gone>" : o.value("status", json::object()).value("phase", "");
  }
  void Create(std::string_view resource, const std::string& ns, const json& obj) {
    auto got = registry_->Create(K(resource, resource == "storageclasses" ? "storage.k8s.io" : ""), ns, obj);
    ASSERT_TRUE(got.ok()) << got.status();
  }

  std::unique_ptr<Informer> claims_, volumes_, classes_, pods_, nodes_;
  std::unique_ptr<PvBinder> binder_;
};

TEST(FindBestMatchTest, SmallestThatFitsClassModesModeAndSelector) {
  std::vector<json> pvs = {Volume("big", "10Gi"), Volume("small", "1Gi"), Volume("right", "2Gi"),
                           Volume("rwx-only", "2Gi", "", {"ReadWriteMany"}), Volume("other-class", "2Gi", "fast")};
  pvs[2]["metadata"]["labels"] = {{"tier", "gold"}};
  pvs[0]["metadata"]["labels"] = {{"tier", "silver"}};
  json claim = Claim("c", "1500Mi");
  const json* m = PvBinder::FindBestMatch(claim, pvs, nullptr);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ((*m)["metadata"]["name"], "right");
  claim["spec"]["selector"] = {{"matchLabels", {{"tier", "silver"}}}};
  m = PvBinder::FindBestMatch(claim, pvs, nullptr);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ((*m)["metadata"]["name"], "big");  // the only silver one
  claim["spec"]["volumeMode"] = "Block";
  EXPECT_EQ(PvBinder::FindBestMatch(claim, pvs, nullptr), nullptr);
}

TEST(FindBestMatchTest, NodeAffinityAgainstTheSelectedNode) {
  json pv = Volume("local", "1Gi");
  pv["spec"]["nodeAffinity"] = OnNode("node-a");
  std::vector<json> pvs = {pv};
  json a = {{"kubernetes.io/hostname", "node-a"}}, b = {{"kubernetes.io/hostname", "node-b"}};
  EXPECT_NE(PvBinder::FindBestMatch(Claim("c", "1Gi"), pvs, &a), nullptr);
  EXPECT_EQ(PvBinder::FindBestMatch(Claim("c", "1Gi"), pvs, &b), nullptr);
}

TEST(VolumeChangeIsOnlyItsBindingTest, OnlyThePhaseBecomingBound) {
  json available = Volume("v", "1Gi");
  available["spec"]["claimRef"] = {{"namespace", "default"}, {"name", "c"}, {"uid", "u1"}};
  available["metadata"]["finalizers"] = {"kubernetes.io/pv-protection"};
  available["status"] = {{"phase", "Available"}};
  json bound = available;
  bound["status"] = {{"phase", "Bound"}, {"lastPhaseTransitionTime", "2026-12-02T21:00:00Z"}};
  bound["metadata"]["resourceVersion"] = "8";
  EXPECT_TRUE(VolumeChangeIsOnlyItsBinding(available, bound));
  EXPECT_FALSE(VolumeChangeIsOnlyItsBinding(bound, bound)) << "a resync";
  EXPECT_FALSE(VolumeChangeIsOnlyItsBinding(available, available));
  EXPECT_FALSE(VolumeChangeIsOnlyItsBinding(bound, available));
  json released = bound;
  released["status"]["phase"] = "Released";
  EXPECT_FALSE(VolumeChangeIsOnlyItsBinding(bound, released));
  EXPECT_FALSE(VolumeChangeIsOnlyItsBinding(released, bound)) << "written over the claim's deletion: looked at again";
  json failed = bound;
  failed["status"]["phase"] = "Failed";
  EXPECT_FALSE(VolumeChangeIsOnlyItsBinding(failed, bound));
  auto with = [&](const std::function<void(json&)>& edit) {
    json after = bound;
    edit(after);
    return VolumeChangeIsOnlyItsBinding(available, after);
  };
  EXPECT_FALSE(with([](json& o) { o["spec"]["claimRef"]["uid"] = "u2"; })) << "another claim";
  EXPECT_FALSE(with([](json& o) { o["spec"]["capacity"]["storage"] = "2Gi"; }));
  EXPECT_FALSE(with([](json& o) { o["metadata"]["finalizers"] = json::array(); }));
  EXPECT_FALSE(with([](json& o) { o["metadata"]["deletionTimestamp"] = "2026-12-02T21:00:00Z"; }));
}

TEST_F(PvBinderTest, BindsTheSmallestFittingVolumeOnBothSides) {
  Create("persistentvolumes", "", Volume("pv-5", "5Gi"));
  Create("persistentvolumes", "", Volume("pv-2", "2Gi"));
  Create("persistentvolumes", "", Volume("pv-1", "1Gi"));
  StartBinder();
  ASSERT_TRUE(Eventually([&] { return Phase("persistentvolumes", "", "pv-1") == "Available"; }));
  Create("persistentvolumeclaims", "default", Claim("data", "2Gi"));
  ASSERT_TRUE(Eventually([&] { return Phase("persistentvolumeclaims", "default", "data") == "Bound"; }));
  json pvc = Get("persistentvolumeclaims", "default", "data");
  json pv = Get("persistentvolumes", "", "pv-2");
  EXPECT_EQ(pvc["spec"]["volumeName"], "pv-2");
  EXPECT_EQ(pvc["metadata"]["annotations"][kAnnBindCompleted], "yes");
  EXPECT_EQ(pvc["metadata"]["annotations"][kAnnBoundByController], "yes");
  EXPECT_EQ(pvc["status"]["capacity"]["storage"], "2Gi");
  EXPECT_THAT(pvc["metadata"]["finalizers"], ::testing::Contains(kPvcProtection));
  EXPECT_EQ(pv["spec"]["claimRef"]["uid"], pvc["metadata"]["uid"]);
  EXPECT_EQ(Phase("persistentvolumes", "", "pv-2"), "Bound");
  EXPECT_THAT(pv["metadata"]["finalizers"], ::testing::Contains(kPvProtection));
  EXPECT_EQ(Phase("persistentvolumes", "", "pv-5"), "Available");
}

TEST_F(PvBinderTest, PreBoundClaimGetsItsVolume) {
  Create("persistentvolumes", "", Volume("small", "1Gi"));
  Create("persistentvolumes", "", Volume("wanted", "9Gi"));
  json c = Claim("data", "1Gi");
  c["spec"]["volumeName"] = "wanted";
  Create("persistentvolumeclaims", "default", c);
  StartBinder();
  ASSERT_TRUE(Eventually([&] { return Phase("persistentvolumeclaims", "default", "data") == "Bound"; }));
  EXPECT_EQ(Get("persistentvolumes", "", "wanted")["spec"]["claimRef"]["name"], "data");
  // The other volume's phase is its own sync's, apart from the claim's.
  EXPECT_TRUE(Eventually([&] { return Phase("persistentvolumes", "", "small") == "Available"; }));
}

TEST_F(PvBinderTest, WaitForFirstConsumerWaitsForTheSelectedNode) {
  Create("storageclasses", "",
         {{"metadata", {{"name", "local"}}},
          {"provisioner", "kubernetes.io/no-provisioner"},
          {"volumeBindingMode", "WaitForFirstConsumer"}});
  for (const char* node : {"node-a", "node-b"}) {
    json pv = Volume(std::string("pv-") + node, "1Gi", "local");
    pv["spec"]["nodeAffinity"] = OnNode(node);
    Create("persistentvolumes", "", pv);
  }
  Create("persistentvolumeclaims", "default", Claim("data", "1Gi", "local"));
  StartBinder();
  ASSERT_TRUE(Settle(*store_));
  EXPECT_EQ(Phase("persistentvolumeclaims", "default", "data"), "Pending");
  ASSERT_TRUE(registry_
                  ->Patch(K("persistentvolumeclaims"), "default", "data",
                          json({{"metadata", {{"annotations", {{kAnnSelectedNode, "node-b"}}}}}}).dump(),
                          apiserver::PatchType::kMerge, apiserver::Subresource::kMain)
                  .ok());
  ASSERT_TRUE(Eventually([&] { return Phase("persistentvolumeclaims", "default", "data") == "Bound"; }));
  EXPECT_EQ(Get("persistentvolumeclaims", "default", "data")["spec"]["volumeName"], "pv-node-b");
}

TEST_F(PvBinderTest, NoMatchHandsTheClaimToItsProvisioner) {
  Create("storageclasses", "", {{"metadata", {{"name", "fast"}}}, {"provisioner", "x.csi.io"}});
  Create("persistentvolumeclaims", "default", Claim("data", "1Gi", "fast"));
  StartBinder();
  ASSERT_TRUE(Eventually([&] {
    json md = Get("persistentvolumeclaims", "default", "data").value("metadata", json::object());
    return md.value("annotations", json::object()).value(kAnnStorageProvisioner, "") == "x.csi.io";
  }));
  EXPECT_EQ(Phase("persistentvolumeclaims", "default", "data"), "Pending");
  EXPECT_TRUE(Eventually([&] {
    auto events = registry_->List(K("events"), "default", {});
    if (!events.ok()) return false;
    const std::vector<json> items = events->items;
    return std::any_of(items.begin(), items.end(),
                       [](const json& e) { return e.value("reason", "") == "ExternalProvisioning"; });
  }));
}

TEST_F(PvBinderTest, AClaimHandedToAProvisionerOfThisProcessGetsNoExternalProvisioningEvent) {
  Create("storageclasses", "", {{"metadata", {{"name", "here"}}}, {"provisioner", "x.csi.io"}});
  Create("storageclasses", "", {{"metadata", {{"name", "elsewhere"}}}, {"provisioner", "y.csi.io"}});
  Create("persistentvolumeclaims", "default", Claim("mine", "1Gi", "here"));
  Create("persistentvolumeclaims", "default", Claim("theirs", "1Gi", "elsewhere"));
  StartBinder({.provisioner_runs_here = [](const std::string& p) { return p == "x.csi.io"; }});
  auto handed_to = [&](const std::string& name) {
    json md = Get("persistentvolumeclaims", "default", name).value("metadata", json::object());
    return md.value("annotations", json::object()).value(kAnnStorageProvisioner, "");
  };
  ASSERT_TRUE(Eventually([&] { return handed_to("mine") == "x.csi.io" && handed_to("theirs") == "y.csi.io"; }));
  // Stopped: every sync has finished and the recorder has written what it
  // was given.
  StopBinder();
  auto events = registry_->List(K("events"), "default", {});
  ASSERT_TRUE(events.ok()) << events.status();
  std::set<std::string> told;
  for (const json& e : events->items) {
    if (e.value("reason", "") == "ExternalProvisioning") told.insert(e["involvedObject"].value("name", ""));
  }
  EXPECT_EQ(told, std::set<std::string>{"theirs"});
}

TEST_F(PvBinderTest, AProvisionerOfThisProcessTakesItsClaimsWithoutTheHandOverWrite) {
  Create("storageclasses", "", {{"metadata", {{"name", "here"}}}, {"provisioner", "x.csi.io"}});
  Create("storageclasses", "", {{"metadata", {{"name", "refused"}}}, {"provisioner", "z.csi.io"}});
  Create("storageclasses", "", {{"metadata", {{"name", "elsewhere"}}}, {"provisioner", "y.csi.io"}});
  Create("persistentvolumeclaims", "default", Claim("mine", "1Gi", "here"));
  Create("persistentvolumeclaims", "default", Claim("stopped", "1Gi", "refused"));
  Create("persistentvolumeclaims", "default", Claim("theirs", "1Gi", "elsewhere"));
  absl::Mutex mu;
  std::map<std::string, std::set<std::string>> asked;  // provisioner → "key uid"
  StartBinder({.provisioner_runs_here = [](const std::string& p) { return p == "x.csi.io" || p == "z.csi.io"; },
               .hand_over =
                   [&](const std::string& p, const std::string& key, const std::string& uid) {
                     absl::MutexLock lock(&mu);
                     asked[p].insert(key + " " + uid);
                     return p == "x.csi.io";  // z's provisioner has stopped meanwhile; y's is external
                   }});
  auto handed_to = [&](const std::string& name) {
    json md = Get("persistentvolumeclaims", "default", name).value("metadata", json::object());
    return md.value("annotations", json::object()).value(kAnnStorageProvisioner, "");
  };
  // Refused by this process, or external: the annotations are written.
  ASSERT_TRUE(Eventually([&] { return handed_to("stopped") == "z.csi.io" && handed_to("theirs") == "y.csi.io"; }));
  StopBinder();
  const json mine = Get("persistentvolumeclaims", "default", "mine");
  // Taken: no hand-over annotation was written, and the provisioner was
  // told which claim, by uid (once per sync; the claim changed meanwhile,
  // its pvc-protection finalizer).
  EXPECT_FALSE(mine["metadata"].value("annotations", json::object()).contains(kAnnStorageProvisioner)) << mine.dump();
  EXPECT_FALSE(mine["metadata"].value("annotations", json::object()).contains(kAnnBetaStorageProvisioner));
  absl::MutexLock lock(&mu);
  EXPECT_EQ(asked["x.csi.io"], std::set<std::string>{"default/mine " + mine["metadata"]["uid"].get<std::string>()});
  EXPECT_EQ(asked["y.csi.io"].size(), 1u);
  EXPECT_EQ(asked["z.csi.io"].size(), 1u);
}

TEST_F(PvBinderTest, AVolumeCreatedBoundToTheClaimIsNotWrittenAgainAndTheClaimBindsToIt) {
  // As berth's provisioner creates its volumes: pointing at the claim by uid,
  // and Bound already (Registry::CreateSharedWithStatus). With the
  // protection finalizers added at create, as berth up runs.
  registry_->EnableStorageProtectionAdmission(true);
  Create("storageclasses", "", {{"metadata", {{"name", "here"}}}, {"provisioner", "x.csi.io"}});
  Create("persistentvolumeclaims", "default", Claim("data", "1Gi", "here"));
  const json claim = Get("persistentvolumeclaims", "default", "data");
  json pv = Volume("pvc-data", "1Gi", "here");
  pv["metadata"]["annotations"] = {{kAnnProvisionedBy, "x.csi.io"}};
  pv["spec"]["persistentVolumeReclaimPolicy"] = "Delete";
  pv["spec"]["claimRef"] = {
      {"kind", "PersistentVolumeClaim"}, {"apiVersion", "v1"},
      {"namespace", "default"},          {"name", "data"},
      {"uid", claim["metadata"]["uid"]}, {"resourceVersion", claim["metadata"]["resourceVersion"]}};
  pv["status"] = {{"phase", "Bound"}};
  auto created = registry_->CreateSharedWithStatus(K("persistentvolumes"), "", pv);
  ASSERT_TRUE(created.ok()) << created.status();
  const std::string written = (**created)["metadata"].value("resourceVersion", "");
  EXPECT_EQ((**created)["status"].value("phase", ""), "Bound");
  StartBinder({.provisioner_runs_here = [](const std::string& p) { return p == "x.csi.io"; }});
  ASSERT_TRUE(Eventually([&] { return Phase("persistentvolumeclaims", "default", "data") == "Bound"; }));
  StopBinder();  // every sync has finished
  const json bound = Get("persistentvolumeclaims", "default", "data");
  EXPECT_EQ(bound["spec"].value("volumeName", ""), "pvc-data");
  const json after = Get("persistentvolumes", "", "pvc-data");
  EXPECT_EQ(after["status"].value("phase", ""), "Bound");
  EXPECT_EQ(after["metadata"].value("resourceVersion", ""), written) << after.dump();
}

TEST_F(PvBinderTest, DeletedClaimWaitsForItsPodThenReleasesTheVolume) {
  Create("persistentvolumes", "", Volume("pv", "1Gi"));
  Create("persistentvolumeclaims", "default", Claim("data", "1Gi"));
  // Scheduled: only pods on a node hold a claim (Kubernetes' rule).
  Create("pods", "default",
         {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", "app"}}},
          {"spec",
           {{"nodeName", "node-1"},
            {"containers", {{{"name", "c"}, {"image", "busybox"}}}},
            {"volumes", {{{"name", "d"}, {"persistentVolumeClaim", {{"claimName", "data"}}}}}}}}});
  StartBinder();
  ASSERT_TRUE(Eventually([&] { return Phase("persistentvolumeclaims", "default", "data") == "Bound"; }));
  ASSERT_TRUE(registry_->Delete(K("persistentvolumeclaims"), "default", "data").ok());
  ASSERT_TRUE(Settle(*store_));
  EXPECT_NE(Phase("persistentvolumeclaims", "default", "data"), "<gone>");  // protected: the pod uses it
  ASSERT_TRUE(registry_->Delete(K("pods"), "default", "app", testing::PodGone()).ok());
  ASSERT_TRUE(Eventually([&] { return Phase("persistentvolumeclaims", "default", "data") == "<gone>"; }));
  ASSERT_TRUE(Eventually([&] { return Phase("persistentvolumes", "", "pv") == "Released"; }));
}

TEST_F(PvBinderTest, RestartFinishesAHalfDoneBinding) {
  // A binder crashed after writing the volume side only.
  Create("persistentvolumeclaims", "default", Claim("data", "1Gi"));
  json claim = Get("persistentvolumeclaims", "default", "data");
  json pv = Volume("pv", "1Gi");
  pv["spec"]["claimRef"] = {{"kind", "PersistentVolumeClaim"},
                            {"namespace", "default"},
                            {"name", "data"},
                            {"uid", claim["metadata"]["uid"]},
                            {"apiVersion", "v1"}};
  pv["metadata"]["annotations"] = {{kAnnBoundByController, "yes"}};
  Create("persistentvolumes", "", pv);
  StartBinder();
  ASSERT_TRUE(Eventually([&] { return Phase("persistentvolumeclaims", "default", "data") == "Bound"; }));
  EXPECT_EQ(Get("persistentvolumeclaims", "default", "data")["spec"]["volumeName"], "pv");
  EXPECT_EQ(Phase("persistentvolumes", "", "pv"), "Bound");
}

TEST_F(PvBinderTest, ProvisionedVolumeForAClaimThatBoundElsewhereIsReleased) {
  // The claim took a static volume while a provisioner made one for it: the
  // provisioned one must not be stranded (reclaim Delete → Released).
  Create("persistentvolumes", "", Volume("static", "1Gi"));
  Create("persistentvolumeclaims", "default", Claim("data", "1Gi"));
  StartBinder();
  ASSERT_TRUE(Eventually([&] { return Phase("persistentvolumeclaims", "default", "data") == "Bound"; }));
  json claim = Get("persistentvolumeclaims", "default", "data");
  json pv = Volume("pvc-extra", "1Gi");
  pv["metadata"]["annotations"] = {{kAnnProvisionedBy, "x.csi.io"}};
  pv["spec"]["persistentVolumeReclaimPolicy"] = "Delete";
  pv["spec"]["claimRef"] = {{"kind", "PersistentVolumeClaim"},
                            {"namespace", "default"},
                            {"name", "data"},
                            {"uid", claim["metadata"]["uid"]},
                            {"apiVersion", "v1"}};
  Create("persistentvolumes", "", pv);
  ASSERT_TRUE(Eventually([&] { return Phase("persistentvolumes", "", "pvc-extra") == "Released"; }));
  EXPECT_EQ(Get("persistentvolumeclaims", "default", "data")["spec"]["volumeName"], "static");
}

TEST_F(PvBinderTest, BoundClaimWhoseVolumeIsGoneIsLost) {
  Create("persistentvolumes", "", Volume("pv", "1Gi"));
  Create("persistentvolumeclaims", "default", Claim("data", "1Gi"));
  StartBinder();
  ASSERT_TRUE(Eventually([&] { return Phase("persistentvolumeclaims", "default", "data") == "Bound"; }));
  // A bound volume is protected (the volume's own sync adds the finalizer,
  // apart from the claim's: waited for too), so deleting it only marks it...
  ASSERT_TRUE(Eventually([&] {
    const json pv = Get("persistentvolumes", "", "pv");
    if (!pv.is_object()) return false;
    const json finalizers = pv.value("metadata", json::object()).value("finalizers", json::array());
    return std::find(finalizers.begin(), finalizers.end(), kPvProtection) != finalizers.end();
  }));
  ASSERT_TRUE(registry_->Delete(K("persistentvolumes"), "", "pv").ok());
  ASSERT_TRUE(Settle(*store_));
  EXPECT_NE(Phase("persistentvolumes", "", "pv"), "<gone>");
  // ...until someone forces it away by removing the finalizer.
  ASSERT_TRUE(registry_
                  ->Patch(K("persistentvolumes"), "", "pv", R"({"metadata":{"finalizers":null}})",
                          apiserver::PatchType::kMerge, apiserver::Subresource::kMain)
                  .ok());
  EXPECT_EQ(Phase("persistentvolumes", "", "pv"), "<gone>");
  ASSERT_TRUE(Eventually([&] { return Phase("persistentvolumeclaims", "default", "data") == "Lost"; }));
}

TEST_F(PvBinderTest, VolumePreBoundByNameToAnotherClaimIsNotTaken) {
  json pv = Volume("pv", "1Gi");
  pv["spec"]["claimRef"] = {{"namespace", "default"}, {"name", "someone-else"}};
  Create("persistentvolumes", "", pv);
  Create("persistentvolumeclaims", "default", Claim("data", "1Gi"));
  StartBinder();
  ASSERT_TRUE(Settle(*store_));
  EXPECT_EQ(Phase("persistentvolumeclaims", "default", "data"), "Pending");
  EXPECT_EQ(Get("persistentvolumes", "", "pv")["spec"]["claimRef"]["name"], "someone-else");
}

TEST_F(PvBinderTest, ANewVolumeWakesAWaitingClaim) {
  Create("persistentvolumeclaims", "default", Claim("data", "1Gi"));
  StartBinder();
  ASSERT_TRUE(Settle(*store_));
  EXPECT_EQ(Phase("persistentvolumeclaims", "default", "data"), "Pending");
  Create("persistentvolumes", "", Volume("pv", "1Gi"));
  // No resync needed: the volume's arrival re-queues the claim.
  ASSERT_TRUE(
      Eventually([&] { return Phase("persistentvolumeclaims", "default", "data") == "Bound"; }, absl::Seconds(5)));
}

// Applied in either order, a claim and its class meet at once: the class's
// arrival (or a change to it) re-queues the claims waiting for it, not the
// next resync (five minutes; this test would time out).
TEST_F(PvBinderTest, AClassCreatedAfterItsClaimsServesThemAtOnce) {
  Create("persistentvolumeclaims", "default", Claim("data", "1Gi", "late"));
  Create("persistentvolumeclaims", "default", Claim("other", "1Gi", "unrelated"));
  StartBinder();
  ASSERT_TRUE(Settle(*store_));
  auto handed_to = [&](const std::string& name) {
    json md = Get("persistentvolumeclaims", "default", name).value("metadata", json::object());
    return md.value("annotations", json::object()).value(kAnnStorageProvisioner, "");
  };
  EXPECT_EQ(handed_to("data"), "");
  Create("storageclasses", "", {{"metadata", {{"name", "late"}}}, {"provisioner", "x.csi.io"}});
  ASSERT_TRUE(Eventually([&] { return handed_to("data") == "x.csi.io"; }, absl::Seconds(5)));
  // Made anew for another provisioner (a class's provisioner cannot be
  // edited) before any took the claim: handed to the new one.
  ASSERT_TRUE(registry_->Delete(K("storageclasses", "storage.k8s.io"), "", "late").ok());
  Create("storageclasses", "", {{"metadata", {{"name", "late"}}}, {"provisioner", "y.csi.io"}});
  ASSERT_TRUE(Eventually([&] { return handed_to("data") == "y.csi.io"; }, absl::Seconds(5)));
  ASSERT_TRUE(Settle(*store_));
  EXPECT_EQ(handed_to("other"), "") << "a claim of another class is not touched";
  EXPECT_EQ(Phase("persistentvolumeclaims", "default", "data"), "Pending");
}

TEST_F(PvBinderTest, UnscheduledPodDoesNotHoldADeletedClaim) {
  Create("persistentvolumes", "", Volume("pv", "1Gi"));
  Create("persistentvolumeclaims", "default", Claim("data", "1Gi"));
  Create("pods", "default",
         {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", "app"}}},
          {"spec",
           {{"containers", {{{"name", "c"}, {"image", "busybox"}}}},
            {"volumes", {{{"name", "d"}, {"persistentVolumeClaim", {{"claimName", "data"}}}}}}}}});
  StartBinder();
  ASSERT_TRUE(Eventually([&] { return Phase("persistentvolumeclaims", "default", "data") == "Bound"; }));
  ASSERT_TRUE(registry_->Delete(K("persistentvolumeclaims"), "default", "data").ok());
  ASSERT_TRUE(Eventually([&] { return Phase("persistentvolumeclaims", "default", "data") == "<gone>"; }));
}

TEST_F(PvBinderTest, LostClaimHasNoCapacity) {
  Create("persistentvolumes", "", Volume("pv", "1Gi"));
  Create("persistentvolumeclaims", "default", Claim("data", "1Gi"));
  StartBinder();
  ASSERT_TRUE(Eventually([&] { return Phase("persistentvolumeclaims", "default", "data") == "Bound"; }));
  // Forced away under the binder's feet: deleted, then its finalizers
  // stripped by hand. (The claim can bind before the binder's volume worker
  // adds pv-protection: the deletion then removes the volume at once.)
  ASSERT_TRUE(registry_->Delete(K("persistentvolumes"), "", "pv").ok());
  auto stripped = registry_->Patch(K("persistentvolumes"), "", "pv", R"({"metadata":{"finalizers":null}})",
                                   apiserver::PatchType::kMerge, apiserver::Subresource::kMain);
  ASSERT_TRUE(stripped.ok() || stripped.status().code() == absl::StatusCode::kNotFound) << stripped.status();
  ASSERT_TRUE(Eventually([&] { return Phase("persistentvolumeclaims", "default", "data") == "Lost"; }));
  json status = Get("persistentvolumeclaims", "default", "data")["status"];
  EXPECT_FALSE(status.contains("capacity"));
  EXPECT_FALSE(status.contains("accessModes"));
}

TEST_F(PvBinderTest, WaitForFirstConsumerClaimBindsAVolumePreBoundToItAtOnce) {
  Create("storageclasses", "",
         {{"metadata", {{"name", "late"}}},
          {"provisioner", "kubernetes.io/no-provisioner"},
          {"volumeBindingMode", "WaitForFirstConsumer"}});
  json pv = Volume("pv", "1Gi", "late");
  pv["spec"]["claimRef"] = {{"namespace", "default"}, {"name", "data"}};
  Create("persistentvolumes", "", pv);
  Create("persistentvolumeclaims", "default", Claim("data", "1Gi", "late"));
  StartBinder();
  ASSERT_TRUE(Eventually([&] { return Phase("persistentvolumeclaims", "default", "data") == "Bound"; }));
}

TEST(CheckVolumeSatisfyClaimTest, SaysWhyAVolumeDoesNotFitInUpstreamsWords) {
  json claim = Claim("c", "2Gi", "fast", {"ReadWriteOnce"});
  EXPECT_TRUE(PvBinder::CheckVolumeSatisfyClaim(Volume("v", "2Gi", "fast"), claim).ok());
  auto why = [&](const json& pv) { return std::string(PvBinder::CheckVolumeSatisfyClaim(pv, claim).message()); };
  EXPECT_EQ(why(Volume("v", "1Gi", "fast")), "requested PV is too small");
  EXPECT_EQ(why(Volume("v", "2Gi", "slow")), "storageClassName does not match");
  EXPECT_EQ(why(Volume("v", "2Gi", "fast", {"ReadOnlyMany"})), "incompatible accessMode");
  json block = Volume("v", "2Gi", "fast");
  block["spec"]["volumeMode"] = "Block";
  EXPECT_EQ(why(block), "incompatible volumeMode");
  json deleting = Volume("v", "2Gi", "fast");
  deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z";
  EXPECT_EQ(why(deleting), "the volume is marked for deletion \"v\"");
}

TEST_F(PvBinderTest, AClaimNamingAVolumeThatDoesNotFitStaysPendingWithVolumeMismatch) {
  auto HasMismatch = [&](const std::string& claim, const std::string& pv, const std::string& why) {
    auto events = registry_->List(K("events"), "default", {});
    if (!events.ok()) return false;
    for (const auto& e : events->items) {
      if (Str(e, {"involvedObject", "name"}) == claim && Str(e, {"reason"}) == "VolumeMismatch" &&
          Str(e, {"type"}) == "Warning" &&
          Str(e, {"message"}) == "Cannot bind to requested volume \"" + pv + "\": " + why) {
        return true;
      }
    }
    return false;
  };
  Create("persistentvolumes", "", Volume("small", "1Gi", "fast"));
  json rwx = Volume("rwx", "5Gi", "fast", {"ReadWriteMany"});
  Create("persistentvolumes", "", rwx);
  json block = Volume("block", "5Gi", "fast");
  block["spec"]["volumeMode"] = "Block";
  Create("persistentvolumes", "", block);
  Create("persistentvolumes", "", Volume("other", "5Gi", "slow"));
  json pinned = Volume("pinned", "5Gi", "fast");
  pinned["spec"]["nodeAffinity"] = OnNode("node-b");
  Create("persistentvolumes", "", pinned);
  Create("nodes", "", {{"metadata", {{"name", "node-a"}, {"labels", {{"kubernetes.io/hostname", "node-a"}}}}}});
  StartBinder();
  const std::map<std::string, std::string> expected = {
      {"small", "requested PV is too small"},
      {"rwx", "incompatible accessMode"},
      {"block", "incompatible volumeMode"},
      {"other", "storageClassName does not match"},
      {"pinned", "its node affinity does not admit node \"node-a\", where the claim is used"}};
  for (const auto& [pv, why] : expected) {
    json c = Claim("wants-" + pv, "2Gi", "fast");
    c["spec"]["volumeName"] = pv;
    if (pv == "pinned") c["metadata"]["annotations"] = {{kAnnSelectedNode, "node-a"}};
    Create("persistentvolumeclaims", "default", c);
  }
  for (const auto& entry : expected) {
    const std::string& pv = entry.first;
    const std::string& why = entry.second;
    const std::string claim = "wants-" + pv;
    ASSERT_TRUE(Eventually([&] { return HasMismatch(claim, pv, why); })) << claim;
    EXPECT_EQ(Phase("persistentvolumeclaims", "default", claim), "Pending");
    EXPECT_TRUE(Field(Get("persistentvolumes", "", pv)["spec"], "claimRef").is_null()) << pv;
  }
  // A scheduled pod's node counts like a selected node.
  Create("pods", "default",
         {{"metadata", {{"name", "p"}}},
          {"spec",
           {{"nodeName", "node-a"},
            {"containers", {{{"name", "c"}, {"image", "i"}}}},
            {"volumes", {{{"name", "d"}, {"persistentVolumeClaim", {{"claimName", "used-elsewhere"}}}}}}}}});
  ASSERT_TRUE(Eventually([&] { return pods_->Get("default", "p").has_value(); }));
  json c = Claim("used-elsewhere", "2Gi", "fast");
  c["spec"]["volumeName"] = "pinned";
  Create("persistentvolumeclaims", "default", c);
  ASSERT_TRUE(Eventually([&] {
    return HasMismatch("used-elsewhere", "pinned",
                       "its node affinity does not admit node \"node-a\", where the claim is used");
  }));
  EXPECT_EQ(Phase("persistentvolumeclaims", "default", "used-elsewhere"), "Pending");
  // The right node: it binds.
  json ok = Claim("on-b", "2Gi", "fast");
  ok["spec"]["volumeName"] = "pinned";
  ok["metadata"]["annotations"] = {{kAnnSelectedNode, "node-b"}};
  ASSERT_TRUE(registry_->Delete(K("persistentvolumeclaims"), "default", "used-elsewhere").ok());
  ASSERT_TRUE(registry_->Delete(K("pods"), "default", "p").ok());
  Create("persistentvolumeclaims", "default", ok);
  ASSERT_TRUE(Eventually([&] { return Phase("persistentvolumeclaims", "default", "on-b") == "Bound"; }));
}

}  // namespace
}  // namespace berth::controllers
