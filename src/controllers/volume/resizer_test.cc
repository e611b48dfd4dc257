// Expansion failure and recovery (external-resizer with
// RecoverVolumeExpansionFailure) against a fake CSI driver; the slow retry
// of an infeasible size runs on a fake clock.
#include "controllers/volume/resizer.h"

#include "controllers/testing/helpers.h"
#include "controllers/testing/provisioner_fixture.h"
#include "gmock/gmock.h"

namespace berth::controllers {

using namespace ::berth::client;  // the controllers' own client library
namespace {

using testing::Claim;
using testing::Eventually;
using ::testing::HasSubstr;
using testing::K;
using testing::Settle;

class ResizerTest : public testing::ProvisionerTest {
 protected:
  void SetUp() override {
    ProvisionerTest::SetUp();
    Class("fast");
    Start();
    Create("persistentvolumeclaims", "", "default", Claim("data", "fast", "1Gi"));
    ASSERT_TRUE(Eventually([&] { return ClaimPhase("data") == "Bound"; }));
  }
  json Data() { return Get("persistentvolumeclaims", "default", "data"); }
  std::string ResizeStatus() { return Str(Data(), {"status", "allocatedResourceStatuses", "storage"}); }
  std::string PvSize() {
    return Str(Get("persistentvolumes", "", Str(Data(), {"spec", "volumeName"})), {"spec", "capacity", "storage"});
  }
  bool HasEvent(const std::string& reason, const std::string& text) {
    auto list = registry_->List(K("events"), "default", {});
    if (!list.ok()) return false;
    for (const auto& e : list->items) {
      if (Str(e, {"involvedObject", "name"}) == "data" && Str(e, {"reason"}) == reason &&
          Str(e, {"message"}).find(text) != std::string::npos) {
        return true;
      }
    }
    return false;
  }
  absl::Status Request(const std::string& size) {
    return registry_
        ->Patch(K("persistentvolumeclaims"), "default", "data",
                json({{"spec", {{"resources", {{"requests", {{"storage", size}}}}}}}}).dump(),
                apiserver::PatchType::kMerge, apiserver::Subresource::kMain)
        .status();
  }
};

// Which claim changes queue the claim for the resizer: what its decision
// reads, and every resync; not the claim's other edits on its way to Bound.
TEST(ClaimChangeConcernsResizeTest, OnlyWhatTheResizerReadsAndResyncs) {
  const json bound = json::parse(R"({"metadata": {"name": "data", "resourceVersion": "7", "labels": {"a": "b"}},
      "spec": {"resources": {"requests": {"storage": "1Gi"}}, "volumeName": "pv-1"},
      "status": {"phase": "Bound", "capacity": {"storage": "1Gi"}}})");
  auto changed = [&](const std::function<void(json&)>& edit) {
    json after = bound;
    after["metadata"]["resourceVersion"] = "8";
    edit(after);
    return ClaimChangeConcernsResize(bound, after);
  };
  EXPECT_TRUE(ClaimChangeConcernsResize(bound, bound)) << "a resync";
  EXPECT_FALSE(changed([](json&) {})) << "a write that changed nothing the resizer reads";
  EXPECT_FALSE(changed([](json& c) { c["metadata"]["labels"]["a"] = "c"; }));
  EXPECT_FALSE(changed([](json& c) { c["metadata"]["annotations"]["pv.kubernetes.io/bind-completed"] = "yes"; }));
  EXPECT_FALSE(changed([](json& c) { c["metadata"]["finalizers"] = {"kubernetes.io/pvc-protection"}; }));
  EXPECT_FALSE(changed([](json& c) { c["status"]["conditions"] = json::array(); }));
  EXPECT_TRUE(changed([](json& c) { c["spec"]["resources"]["requests"]["storage"] = "2Gi"; })) << "grown";
  EXPECT_TRUE(changed([](json& c) { c["spec"]["resources"]["requests"]["storage"] = "512Mi"; })) << "lowered";
  EXPECT_TRUE(changed([](json& c) { c["spec"]["volumeName"] = "pv-2"; }));
  EXPECT_TRUE(changed([](json& c) { c["status"]["phase"] = "Lost"; }));
  EXPECT_TRUE(changed([](json& c) { c["status"]["capacity"]["storage"] = "2Gi"; }));
  EXPECT_TRUE(changed([](json& c) { c["status"]["allocatedResources"]["storage"] = "2Gi"; }));
  EXPECT_TRUE(
      changed([](json& c) { c["status"]["allocatedResourceStatuses"]["storage"] = "ControllerResizeInProgress"; }));
  json pending = bound;
  pending["status"] = {{"phase", "Pending"}};
  pending["spec"].erase("volumeName");
  json now_bound = bound;
  now_bound["metadata"]["resourceVersion"] = "9";
  EXPECT_TRUE(ClaimChangeConcernsResize(pending, now_bound)) << "bound since";
}

class InfeasibleTest : public ResizerTest, public ::testing::WithParamInterface<grpc::StatusCode> {};

TEST_P(InfeasibleTest, IsRecordedAndTriedAgainOnlyAfterTheSlowRetry) {
  driver_->SetExpand(true, GetParam());
  ASSERT_TRUE(Request("100Ti").ok());
  ASSERT_TRUE(Eventually([&] { return ResizeStatus() == "ControllerResizeInfeasible"; }));
  json claim = Data();
  EXPECT_EQ(claim["status"]["allocatedResources"]["storage"], "100Ti");
  EXPECT_EQ(claim["status"]["capacity"]["storage"], "1Gi");
  EXPECT_EQ(Str(Condition(claim, "ControllerResizeError"), {"status"}), "True");
  EXPECT_THAT(Str(Condition(claim, "ControllerResizeError"), {"message"}),
              HasSubstr("failed to expand pvc with injected expand failure"));
  EXPECT_TRUE(Condition(claim, "Resizing").is_null());
  ASSERT_TRUE(Eventually([&] { return HasEvent("VolumeResizeFailed", "injected expand failure"); }));
  EXPECT_EQ(PvSize(), "1Gi");
  // However often it is looked at, the driver is not asked again... (the
  // workers stop, so only these syncs run)
  resizer_->Stop();
  const int calls = driver_->expand_calls();
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(resizer_->SyncClaim("default/data").ok());
  resize_clock_.Advance(absl::Minutes(4));
  ASSERT_TRUE(resizer_->SyncClaim("default/data").ok());
  EXPECT_EQ(driver_->expand_calls(), calls);
  // ...until the slow retry has passed.
  resize_clock_.Advance(absl::Minutes(1));
  ASSERT_TRUE(resizer_->SyncClaim("default/data").ok());
  EXPECT_EQ(driver_->expand_calls(), calls + 1);
  EXPECT_EQ(ResizeStatus(), "ControllerResizeInfeasible");
}

INSTANTIATE_TEST_SUITE_P(Codes, InfeasibleTest,
                         ::testing::Values(grpc::StatusCode::OUT_OF_RANGE, grpc::StatusCode::RESOURCE_EXHAUSTED,
                                           grpc::StatusCode::INVALID_ARGUMENT));

// A claim that binds asking no more than its capacity, or is edited
// otherwise, wakes no resizer worker (berth up runs one per driver); a
// larger request does, and is expanded.
TEST_F(ResizerTest, OnlyAClaimAskingMoreThanItsCapacityIsQueued) {
  ASSERT_TRUE(Settle(*store_));
  EXPECT_EQ(resizer_->queue_adds(), 0u);
  Label("persistentvolumeclaims", "default", "data");
  ASSERT_TRUE(Settle(*store_));
  EXPECT_EQ(resizer_->queue_adds(), 0u);
  ASSERT_TRUE(Request("2Gi").ok());
  ASSERT_TRUE(Eventually([&] { return PvSize() == "2Gi"; }));
  EXPECT_GT(resizer_->queue_adds(), 0u);
}

TEST_F(ResizerTest, LoweringTheRequestAboveTheCapacityRecovers) {
  driver_->SetExpand(true, grpc::StatusCode::OUT_OF_RANGE);
  ASSERT_TRUE(Request("100Ti").ok());
  ASSERT_TRUE(Eventually([&] { return ResizeStatus() == "ControllerResizeInfeasible"; }));
  // Not to the capacity or below: the API refuses it, with Kubernetes' words.
  for (const char* size : {"1Gi", "512Mi"}) {
    absl::Status refused = Request(size);
    EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
    EXPECT_THAT(refused.message(),
                HasSubstr("spec.resources.requests.storage: Forbidden: field can not be less than status.capacity"));
  }
  // A size the pool can hold: expanded at once, without waiting for the slow retry.
  driver_->SetExpand(true);
  ASSERT_TRUE(Request("2Gi").ok());
  ASSERT_TRUE(Eventually([&] { return ResizeStatus() == "NodeResizePending"; }));
  json claim = Data();
  EXPECT_EQ(claim["status"]["allocatedResources"]["storage"], "2Gi");
  EXPECT_TRUE(Condition(claim, "ControllerResizeError").is_null());
  EXPECT_EQ(Str(Condition(claim, "FileSystemResizePending"), {"status"}), "True");
  EXPECT_EQ(PvSize(), "2Gi");
  EXPECT_EQ(driver_->last_expand_bytes(), 2LL << 30);
}

TEST_F(ResizerTest, TheExpandSecretThePvNamesIsSentAndAMissingOneStopsTheCall) {
  Class("sealed", "Immediate",
        {{"csi.storage.k8s.io/controller-expand-secret-name", "expand"},
         {"csi.storage.k8s.io/controller-expand-secret-namespace", "default"}});
  Create("persistentvolumeclaims", "", "default", Claim("sealed", "sealed", "1Gi"));
  ASSERT_TRUE(Eventually([&] { return ClaimPhase("sealed") == "Bound"; }));
  const std::string pv = Str(Get("persistentvolumeclaims", "default", "sealed"), {"spec", "volumeName"});
  auto size = [&] { return Str(Get("persistentvolumes", "", pv), {"spec", "capacity", "storage"}); };
  // Not there: the driver is not called without the credentials.
  Grow("sealed", "2Gi");
  ASSERT_TRUE(Eventually([&] {
    auto list = registry_->List(K("events"), "default", {});
    for (const auto& e : list.ok() ? list->items : std::vector<json>{}) {
      if (Str(e, {"involvedObject", "name"}) == "sealed" && Str(e, {"reason"}) == "VolumeResizeFailed" &&
          Str(e, {"message"}).find("default/expand") != std::string::npos) {
        return true;
      }
    }
    return false;
  }));
  EXPECT_EQ(driver_->expand_calls(), 0);
  EXPECT_EQ(size(), "1Gi");
  // Created: sent, decoded.
  Create(
      "secrets", "", "default",
      {{"apiVersion", "v1"}, {"kind", "Secret"}, {"metadata", {{"name", "expand"}}}, {"data", {{"key", "czNjcjN0"}}}});
  ASSERT_TRUE(Eventually([&] {
    resize_clock_.Advance(absl::Seconds(1));
    return size() == "2Gi";
  }));
  EXPECT_EQ(driver_->last_expand_secrets(), (std::map<std::string, std::string>{{"key", "s3cr3t"}}));
}

TEST_F(ResizerTest, AnExpansionWhoseOutcomeIsUnknownIsRepeatedAtItsSizeEvenIfTheRequestIsLowered) {
  driver_->SetExpand(true, grpc::StatusCode::DEADLINE_EXCEEDED);
  ASSERT_TRUE(Request("5Gi").ok());
  ASSERT_TRUE(Eventually([&] { return driver_->expand_calls() >= 1; }));
  EXPECT_EQ(ResizeStatus(), "ControllerResizeInProgress");
  ASSERT_TRUE(Request("3Gi").ok());
  driver_->SetExpand(true);
  ASSERT_TRUE(Eventually([&] { return ResizeStatus() == "NodeResizePending"; }, absl::Seconds(20)));
  EXPECT_EQ(driver_->last_expand_bytes(), 5LL << 30);
  EXPECT_EQ(PvSize(), "5Gi");
}

TEST_F(ResizerTest, NodeResizeInfeasibleHandsTheVolumeToTheNodeAgain) {
  ASSERT_TRUE(Request("3Gi").ok());
  ASSERT_TRUE(Eventually([&] { return ResizeStatus() == "NodeResizePending"; }));
  // The node could not grow the filesystem (recorded by the node agent).
  ASSERT_TRUE(
      registry_
          ->Patch(K("persistentvolumeclaims"), "default", "data",
                  R"({"status":{"allocatedResourceStatuses":{"storage":"NodeResizeInfeasible"},"conditions":null}})",
                  apiserver::PatchType::kMerge, apiserver::Subresource::kStatus)
          .ok());
  ASSERT_TRUE(Eventually([&] { return ResizeStatus() == "NodeResizePending"; }));
  EXPECT_EQ(Str(Condition(Data(), "FileSystemResizePending"), {"status"}), "True");
  EXPECT_EQ(Data()["status"]["allocatedResources"]["storage"], "3Gi");
}

}  // namespace
}  // namespace berth::controllers
