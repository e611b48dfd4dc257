// The provisioner's volume populator hook (populator.h) against a fake CSI
// driver and a fake populator: a claim whose dataSourceRef is the
// populator's kind is filled first, created as a clone of what was filled,
// bound only then, and what was filled goes afterwards — also when the claim
// is deleted meanwhile or an answer is lost.
#include "controllers/volume/populator.h"

#include <set>

#include "absl/synchronization/mutex.h"
#include "controllers/testing/provisioner_fixture.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace berth::controllers {
namespace {

using testing::Claim;
using testing::Eventually;
using testing::K;
using testing::kDriver;
using testing::Settle;

constexpr char kGroup[] = "populators.example.com";
constexpr char kParameter[] = "example.com/from-populator";

// Fills nothing: hands out "filled-<claim uid>" and records what it was
// asked. Populate can be held (Hold/Let) or made to fail.
class FakePopulator : public VolumePopulator {
 public:
  bool Serves(const DataSourceRef& ref) const override { return ref.api_group == kGroup && ref.kind == "Dataset"; }
  absl::Status Check(const PopulationRequest&) override {
    absl::MutexLock l(&mu_);
    return check_;
  }
  absl::StatusOr<::csi::v1::VolumeContentSource> Populate(const PopulationRequest& request) override {
    absl::MutexLock l(&mu_);
    ++populates_;
    node_ = request.node;
    driver_ = request.driver;
    size_ = request.size_bytes;
    mu_.Await(absl::Condition(
        +[](bool* held) { return !*held; }, &held_));
    if (failures_ > 0) {
      --failures_;
      return absl::UnavailableError("injected population failure");
    }
    ::csi::v1::VolumeContentSource source;
    source.mutable_volume()->set_volume_id("filled-" + request.claim.metadata.uid);
    return source;
  }
  std::map<std::string, std::string> Parameters() const override { return {{kParameter, "true"}}; }
  absl::Status Release(const PopulationRequest& request) override {
    absl::MutexLock l(&mu_);
    released_.insert(request.claim.metadata.uid);
    return absl::OkStatus();
  }

  void Hold() {
    absl::MutexLock l(&mu_);
    held_ = true;
  }
  void Let() {
    absl::MutexLock l(&mu_);
    held_ = false;
  }
  void SetCheck(absl::Status st) {
    absl::MutexLock l(&mu_);
    check_ = std::move(st);
  }
  void Fail(int count) {
    absl::MutexLock l(&mu_);
    failures_ = count;
  }
  int populates() const {
    absl::MutexLock l(&mu_);
    return populates_;
  }
  bool released(const std::string& uid) const {
    absl::MutexLock l(&mu_);
    return released_.contains(uid);
  }
  std::tuple<std::string, std::string, int64_t> asked() const {
    absl::MutexLock l(&mu_);
    return {driver_, node_, size_};
  }

 private:
  mutable absl::Mutex mu_;
  absl::Status check_ ABSL_GUARDED_BY(mu_);
  bool held_ ABSL_GUARDED_BY(mu_) = false;
  int failures_ ABSL_GUARDED_BY(mu_) = 0;
  int populates_ ABSL_GUARDED_BY(mu_) = 0;
  std::string driver_ ABSL_GUARDED_BY(mu_), node_ ABSL_GUARDED_BY(mu_);
  int64_t size_ ABSL_GUARDED_BY(mu_) = 0;
  std::set<std::string> released_ ABSL_GUARDED_BY(mu_);
};

class PopulatorTest : public testing::ProvisionerTest {
 protected:
  void SetUp() override {
    ProvisionerTest::SetUp();
    populator_ = &fake_;
  }
  void TearDown() override {
    fake_.Let();  // a held population must not keep a worker from stopping
    ProvisionerTest::TearDown();
  }
  json PopulatedClaim(const std::string& name) {
    json c = Claim(name, "fast", "2Gi");
    c["spec"]["dataSourceRef"] = {{"apiGroup", kGroup}, {"kind", "Dataset"}, {"name", "golden"}};
    return c;
  }
  std::string Uid(const std::string& claim) {
    return Get("persistentvolumeclaims", "default", claim)["metadata"]["uid"].get<std::string>();
  }
  bool NoVolumes() { return registry_->List(K("persistentvolumes"), "", {})->items.empty(); }

  FakePopulator fake_;
};

TEST_F(PopulatorTest, TheClaimBindsOnlyOnceItsVolumeIsFilledAndCloned) {
  Class("fast");
  fake_.Hold();
  Start();
  Create("persistentvolumeclaims", "", "default", PopulatedClaim("data"));
  const std::string uid = Uid("data");
  ASSERT_TRUE(Eventually([&] { return fake_.populates() == 1; }));
  // While it is filled: no volume of the claim's own, no PV, not bound, and
  // under the provisioner's finalizer (a deletion now is cleaned up).
  EXPECT_EQ(driver_->create_calls(), 0);
  EXPECT_TRUE(NoVolumes());
  EXPECT_EQ(ClaimPhase("data"), "Pending");
  EXPECT_THAT(Get("persistentvolumeclaims", "default", "data")["metadata"]["finalizers"],
              ::testing::Contains(kProvisioningFinalizer));
  EXPECT_EQ(fake_.asked(), std::make_tuple(std::string(kDriver), std::string(""), int64_t{2} << 30));

  fake_.Let();
  ASSERT_TRUE(Eventually([&] { return ClaimPhase("data") == "Bound"; }));
  auto req = driver_->last_request();
  ASSERT_TRUE(req.has_value());
  EXPECT_EQ(req->name(), "pvc-" + uid);
  EXPECT_EQ(req->volume_content_source().volume().volume_id(), "filled-" + uid);
  EXPECT_EQ(req->parameters().at(kParameter), "true");
  // The filled volume is released and the record of it goes.
  ASSERT_TRUE(Eventually([&] {
    return fake_.released(uid) && Get("persistentvolumeclaims", "default", "data")["metadata"]["annotations"].value(
                                      kAnnPopulatedVolume, "") == "";
  }));
  EXPECT_EQ(fake_.populates(), 1);
}

TEST_F(PopulatorTest, AMissingSourceHoldsTheClaimBackAndAFailedFillIsRetried) {
  Class("fast");
  fake_.SetCheck(absl::FailedPreconditionError("dataset golden is not ready"));
  Start();
  Create("persistentvolumeclaims", "", "default", PopulatedClaim("data"));
  ASSERT_TRUE(Settle(*store_));
  EXPECT_EQ(fake_.populates(), 0);
  EXPECT_EQ(driver_->create_calls(), 0);
  EXPECT_EQ(ClaimPhase("data"), "Pending");

  fake_.Fail(1);
  fake_.SetCheck(absl::OkStatus());
  ASSERT_TRUE(Eventually([&] { return ClaimPhase("data") == "Bound"; }));
  EXPECT_EQ(fake_.populates(), 2);
  EXPECT_EQ(driver_->create_calls(), 1);
}

TEST_F(PopulatorTest, ALostCloneAnswerIsRetriedWithTheRecordedSourceWithoutFillingAgain) {
  Class("fast");
  driver_->FailCreates(grpc::StatusCode::DEADLINE_EXCEEDED, 1, /*after_create=*/true);
  Start();
  Create("persistentvolumeclaims", "", "default", PopulatedClaim("data"));
  const std::string uid = Uid("data");
  ASSERT_TRUE(Eventually([&] { return ClaimPhase("data") == "Bound"; }));
  EXPECT_EQ(fake_.populates(), 1);
  EXPECT_GE(driver_->create_calls(), 2);
  EXPECT_EQ(driver_->volumes().size(), 1u);
  EXPECT_EQ(driver_->last_request()->volume_content_source().volume().volume_id(), "filled-" + uid);
  ASSERT_TRUE(Eventually([&] { return fake_.released(uid); }));
}

// The record of a fill is written before the clone is asked for; a retry
// that reads an informer's copy from before the record must not fill a
// second volume (and lose the first): it waits for the copy to catch up.
TEST_F(PopulatorTest, ARetryBehindItsOwnRecordOfAFillDoesNotFillAgain) {
  Class("fast");
  fake_.SetCheck(absl::FailedPreconditionError("dataset golden is not ready"));  // held back at first
  Create("persistentvolumeclaims", "", "default", PopulatedClaim("data"));
  Start();
  ASSERT_TRUE(Settle(*store_));
  ASSERT_EQ(fake_.populates(), 0);
  // The informer stops following; the stored claim has a fill recorded (as
  // an earlier attempt of this provisioner writes it).
  claims_->Stop();
  ASSERT_TRUE(registry_
                  ->Patch(K("persistentvolumeclaims"), "default", "data",
                          json({{"metadata", {{"annotations", {{kAnnPopulatedVolume, "filled-earlier"}}}}}}).dump(),
                          apiserver::PatchType::kMerge, apiserver::Subresource::kMain)
                  .ok());
  fake_.SetCheck(absl::OkStatus());
  absl::Status st = provisioner_->SyncClaim("default/data");
  EXPECT_EQ(st.code(), absl::StatusCode::kAborted) << st;
  EXPECT_EQ(fake_.populates(), 0);
  EXPECT_EQ(driver_->create_calls(), 0);
  EXPECT_EQ(Annotation(Get("persistentvolumeclaims", "default", "data"), kAnnPopulatedVolume), "filled-earlier");
}

TEST_F(PopulatorTest, AClaimDeletedWhileBeingFilledLeaksNothing) {
  Class("fast");
  fake_.Hold();
  Start();
  Create("persistentvolumeclaims", "", "default", PopulatedClaim("data"));
  const std::string uid = Uid("data");
  ASSERT_TRUE(Eventually([&] { return fake_.populates() == 1; }));
  ASSERT_TRUE(registry_->Delete(K("persistentvolumeclaims"), "default", "data").ok());
  EXPECT_NE(ClaimPhase("data"), "<gone>");  // the finalizer holds it while it is filled
  fake_.Let();
  ASSERT_TRUE(Eventually([&] {
    return ClaimPhase("data") == "<gone>" && driver_->volumes().empty() && NoVolumes() && fake_.released(uid);
  }));
}

}  // namespace
}  // namespace berth::controllers
