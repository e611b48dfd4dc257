// The generic ephemeral volume controller against a real store: claims made
// from pod templates, owned by the pod, garbage-collected with it.
#include "controllers/volume/ephemeral.h"

#include "client/object.h"
#include "controllers/testing/controller_fixture.h"
#include "controllers/testing/helpers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "store/store.h"

namespace berth::controllers {

using namespace ::berth::client;  // the controllers' own client library
namespace {

using testing::Eventually;
using testing::K;
using testing::Settle;

class EphemeralTest : public controllers::testing::ControllerTest {
 protected:
  EphemeralTest() { storage_protection_ = true; }
  void SetUp() override {
    ControllerTest::SetUp();
    if (HasFatalFailure()) return;
    pods_ = std::make_unique<Informer>(*registry_, K("pods"));
    claims_ = std::make_unique<Informer>(*registry_, K("persistentvolumeclaims"));
    controller_ = std::make_unique<EphemeralController>(*registry_, *pods_, *claims_, EphemeralController::Options{});
    controller_->RegisterHandlers();
    for (Informer* i : {pods_.get(), claims_.get()}) {
      i->Start();
      ASSERT_TRUE(i->WaitForSync(absl::Seconds(10)));
    }
    controller_->Start();
  }
  void TearDown() override {
    controller_->Stop();
    pods_->Stop();
    claims_->Stop();
  }
  json Pod(const std::string& name, json spec_override = json()) {
    json tmpl = {{"metadata", {{"labels", {{"app", "cache"}}}, {"annotations", {{"note", "scratch"}}}}},
                 {"spec",
                  {{"accessModes", {"ReadWriteOnce"}},
                   {"storageClassName", "fast"},
                   {"resources", {{"requests", {{"storage", "2Gi"}}}}}}}};
    if (!spec_override.is_null()) tmpl["spec"] = spec_override;
    return {{"apiVersion", "v1"},
            {"kind", "Pod"},
            {"metadata", {{"name", name}}},
            {"spec",
             {{"containers", {{{"name", "c"}, {"image", "busybox"}}}},
              {"volumes",
               {{{"name", "scratch"}, {"ephemeral", {{"volumeClaimTemplate", tmpl}}}},
                {{"name", "cfg"}, {"emptyDir", json::object()}}}}}}};
  }
  json CreatePod(const json& pod) {
    auto created = registry_->Create(K("pods"), "default", pod);
    EXPECT_TRUE(created.ok()) << created.status();
    return created.ok() ? *created : json();
  }
  json Claim(const std::string& name) {
    auto got = registry_->Get(K("persistentvolumeclaims"), "default", name);
    return got.ok() ? *got : json();
  }
  std::vector<std::string> EventMessages(const std::string& reason) {
    std::vector<std::string> out;
    auto list = registry_->List(K("events"), "default", {});
    if (!list.ok()) return out;
    for (const auto& e : list->items) {
      if (Str(e, {"reason"}) == reason) out.push_back(Str(e, {"message"}));
    }
    return out;
  }

  std::unique_ptr<Informer> pods_, claims_;
  std::unique_ptr<EphemeralController> controller_;
};

TEST_F(EphemeralTest, ClaimIsMadeFromTheTemplateAndOwnedByThePod) {
  const json pod = CreatePod(Pod("web"));
  ASSERT_TRUE(Eventually([&] { return !Claim("web-scratch").is_null(); }));
  json claim = Claim("web-scratch");
  EXPECT_EQ(claim["metadata"]["labels"], json({{"app", "cache"}}));
  EXPECT_EQ(claim["metadata"]["annotations"], json({{"note", "scratch"}}));
  EXPECT_EQ(claim["spec"]["storageClassName"], "fast");
  EXPECT_EQ(claim["spec"]["resources"]["requests"]["storage"], "2Gi");
  EXPECT_EQ(claim["metadata"]["ownerReferences"], json({{{"apiVersion", "v1"},
                                                         {"kind", "Pod"},
                                                         {"name", "web"},
                                                         {"uid", pod["metadata"]["uid"]},
                                                         {"controller", true},
                                                         {"blockOwnerDeletion", true}}}));
  // Only the ephemeral volume gets a claim.
  EXPECT_TRUE(Claim("web-cfg").is_null());
  // A resync writes nothing.
  const std::string rv = claim["metadata"]["resourceVersion"];
  ASSERT_TRUE(controller_->SyncPod("default/web").ok());
  EXPECT_EQ(Claim("web-scratch")["metadata"]["resourceVersion"], rv);
}

TEST_F(EphemeralTest, ClaimDeletedByHandIsMadeAgainWhileThePodLives) {
  CreatePod(Pod("web"));
  ASSERT_TRUE(Eventually([&] { return !Claim("web-scratch").is_null(); }));
  const std::string uid = Claim("web-scratch")["metadata"]["uid"];
  // pvc-protection holds it: remove that finalizer as the binder would once
  // no pod uses it (here: no binder runs).
  ASSERT_TRUE(registry_->Delete(K("persistentvolumeclaims"), "default", "web-scratch").ok());
  json claim = Claim("web-scratch");
  if (!claim.is_null()) {
    claim["metadata"].erase("finalizers");
    ASSERT_TRUE(
        registry_->Update(K("persistentvolumeclaims"), "default", "web-scratch", claim, apiserver::Subresource::kMain)
            .ok());
  }
  EXPECT_TRUE(Eventually([&] {
    json again = Claim("web-scratch");
    return !again.is_null() && Str(again, {"metadata", "uid"}) != uid;
  }));
}

TEST_F(EphemeralTest, AForeignClaimOfThatNameIsLeftAlone) {
  ASSERT_TRUE(
      registry_
          ->Create(
              K("persistentvolumeclaims"), "default",
              {{"metadata", {{"name", "web-scratch"}, {"labels", {{"mine", "yes"}}}}},
               {"spec", {{"accessModes", {"ReadWriteOnce"}}, {"resources", {{"requests", {{"storage", "1Gi"}}}}}}}})
          .ok());
  CreatePod(Pod("web"));
  EXPECT_TRUE(Eventually([&] {
    auto m = EventMessages("FailedBinding");
    return !m.empty() && m[0] == "PVC default/web-scratch was not created for pod default/web (pod is not owner)";
  }));
  json claim = Claim("web-scratch");
  EXPECT_EQ(claim["metadata"]["labels"], json({{"mine", "yes"}}));
  EXPECT_FALSE(claim["metadata"].contains("ownerReferences"));
  EXPECT_EQ(controller_->SyncPod("default/web").code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(EphemeralTest, ThePodsClaimGoesWithThePod) {
  CreatePod(Pod("web"));
  ASSERT_TRUE(Eventually([&] { return !Claim("web-scratch").is_null(); }));
  ASSERT_TRUE(registry_->Delete(K("pods"), "default", "web", testing::PodGone()).ok());
  // The store collects the pod's dependents; pvc-protection is lifted by the
  // binder once no pod uses the claim (simulated: no binder here).
  ASSERT_TRUE(Eventually([&] {
    json claim = Claim("web-scratch");
    return claim.is_null() || Deleting(claim);
  })) << Claim("web-scratch").dump();
  json claim = Claim("web-scratch");
  if (!claim.is_null()) {
    claim["metadata"].erase("finalizers");
    ASSERT_TRUE(
        registry_->Update(K("persistentvolumeclaims"), "default", "web-scratch", claim, apiserver::Subresource::kMain)
            .ok());
  }
  EXPECT_TRUE(Eventually([&] { return Claim("web-scratch").is_null(); }));
  // And nothing makes it again for a pod that is gone.
  ASSERT_TRUE(Settle(*store_));
  EXPECT_TRUE(Claim("web-scratch").is_null());
}

TEST_F(EphemeralTest, AnInvalidTemplateIsReportedWithTheApisMessage) {
  CreatePod(Pod("web", {{"resources", {{"requests", {{"storage", "2Gi"}}}}}}));  // no accessModes
  EXPECT_TRUE(Eventually([&] {
    auto m = EventMessages("FailedBinding");
    return !m.empty() && m[0].find("PVC creation failed: ") == 0 && m[0].find("accessModes") != std::string::npos;
  })) << (EventMessages("FailedBinding").empty() ? "" : EventMessages("FailedBinding")[0]);
  EXPECT_TRUE(Claim("web-scratch").is_null());
}

TEST_F(EphemeralTest, PodsWithoutEphemeralVolumesAreIgnored) {
  json pod = Pod("plain");
  pod["spec"]["volumes"] = {{{"name", "cfg"}, {"emptyDir", json::object()}}};
  CreatePod(pod);
  ASSERT_TRUE(Settle(*store_));
  auto list = registry_->List(K("persistentvolumeclaims"), "default", {});
  ASSERT_TRUE(list.ok());
  EXPECT_TRUE(list->items.empty());
}

}  // namespace
}  // namespace berth::controllers
