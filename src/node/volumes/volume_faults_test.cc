// The volume manager under faults, on a fake clock: uncertain stages and
// publishes, final errors, infeasible expansions, pods deleted while their
// volumes are in use, and restarts after any step.
#include "node/testing/agent_fixture.h"

#include <atomic>
#include <memory>

namespace berth::node::testing {
namespace {

TEST_F(NodeAgentFaultTest, AnInfeasibleNodeExpansionIsRecordedOnTheClaimAndClearedWhenItSucceeds) {
  StartWithAppUsingData();
  ASSERT_TRUE(Eventually([&] { return PodPhase("app") == "Running"; }));
  driver_->Fail("expand", 1, grpc::StatusCode::OUT_OF_RANGE);
  GrowPvTo2GiForTheNode();
  auto claim_status = [&] { return Get("persistentvolumeclaims", "default", "data")["status"]; };
  // Seen by the next pass that reads the PV (the agent does not watch it).
  ASSERT_TRUE(EventuallyOnTheResync([&] {
    return Str(claim_status(), {"allocatedResourceStatuses", "storage"}) == "NodeResizeInfeasible";
  })) << claim_status().dump();
  bool has_error = false;
  const json failed = claim_status();
  for (const auto& c : failed["conditions"]) {
    has_error |= c["type"] == "NodeResizeError" && c["status"] == "True" &&
                 Str(c, {"message"}).find("pv-1") != std::string::npos;
  }
  EXPECT_TRUE(has_error) << claim_status().dump();
  EXPECT_EQ(Str(claim_status(), {"capacity", "storage"}), "1Gi");
  // The retry (after the operation's backoff) succeeds: all of it is cleared.
  ASSERT_TRUE(Eventually([&] {
    fake_clock_.Advance(absl::Milliseconds(500));
    return Str(claim_status(), {"capacity", "storage"}) == "2Gi";
  })) << claim_status().dump();
  EXPECT_FALSE(claim_status().contains("conditions"));
  EXPECT_FALSE(claim_status().contains("allocatedResourceStatuses"));
}

TEST_F(NodeAgentFaultTest, ADeletedPodStaysTerminatingUntilItsVolumesAreTornDown) {
  const std::string uid = StartWithAppUsingData();
  ASSERT_TRUE(Eventually([&] { return PodPhase("app") == "Running"; }));
  driver_->Fail("unpublish", 2, grpc::StatusCode::INTERNAL, "busy");
  DeletePod("app");
  ASSERT_TRUE(Terminating("app"));
  // The first unpublish fails: the pod is still there, Terminating, mounted.
  ASSERT_TRUE(Eventually([&] { return driver_->Calls("unpublish") >= 1; }));
  EXPECT_TRUE(Terminating("app"));
  EXPECT_EQ(driver_->Published().size(), 1u);
  EXPECT_TRUE(InUse(Unique(kHandle)));
  // Retried after its backoff on the clock.
  ASSERT_TRUE(Eventually([&] {
    fake_clock_.Advance(absl::Milliseconds(100));
    return driver_->Calls("unpublish") >= 2;
  }));
  EXPECT_TRUE(Terminating("app"));
  // The object goes only once nothing of it is mounted.
  ASSERT_TRUE(Eventually([&] {
    fake_clock_.Advance(absl::Milliseconds(100));
    const bool gone = PodGone("app");
    if (gone) {
      EXPECT_TRUE(driver_->Published().empty());
    }
    return gone;
  }));
  EXPECT_EQ(driver_->Calls("unpublish"), 3);
  EXPECT_TRUE(Eventually([&] { return driver_->Staged().empty() && VolumesInUse().empty(); }));
  EXPECT_FALSE(fs::exists(root_ + "/pods/" + uid));
}

TEST_F(NodeAgentFaultTest, APodThatNoLongerDecodesKeepsItsVolumes) {
  StartWithAppUsingData();
  ASSERT_TRUE(Eventually([&] { return PodPhase("app") == "Running"; }));
  // A field of the wrong type (the API server's validation would refuse it:
  // written to the store directly).
  json pod = Get("pods", "default", "app");
  pod["spec"]["restartPolicy"] = 5;
  ASSERT_TRUE(store_->Update("pods", pod).ok());
  fake_clock_.Advance(absl::Seconds(20));  // resyncs
  ASSERT_TRUE(Settle(*store_));
  // Not torn down from under its containers.
  EXPECT_EQ(driver_->Calls("unpublish"), 0);
  EXPECT_EQ(driver_->Published().size(), 1u);
  // Readable again: deleting it tears its volumes down as usual.
  pod = Get("pods", "default", "app");
  pod["spec"]["restartPolicy"] = "Always";
  ASSERT_TRUE(store_->Update("pods", pod).ok());
  DeletePod("app");
  ASSERT_TRUE(Eventually([&] {
    fake_clock_.Advance(absl::Milliseconds(100));
    return PodGone("app");
  }));
  EXPECT_EQ(driver_->Calls("unpublish"), 1);
  EXPECT_TRUE(Eventually([&] { return driver_->Staged().empty(); }));
}

TEST_F(NodeAgentFaultTest, AnUnscheduledPodIsDeletedAtOnce) {
  Create("pods", "default",
         {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", "pending"}}},
          {"spec", {{"containers", {{{"name", "c"}, {"image", "busybox"}}}}}}});
  DeletePod("pending");
  EXPECT_TRUE(PodGone("pending"));
}

TEST_F(NodeAgentFaultTest, ForceDeletionWithGracePeriodZeroRemovesThePodAtOnce) {
  StartWithAppUsingData();
  ASSERT_TRUE(Eventually([&] { return PodPhase("app") == "Running"; }));
  apiserver::DeleteOptions force;
  force.grace_period_seconds = 0;
  ASSERT_TRUE(registry_->Delete(K("pods"), "default", "app", force).ok());
  EXPECT_TRUE(PodGone("app"));
  // The agent still tears down what the pod had.
  EXPECT_TRUE(Eventually([&] { return driver_->Published().empty() && driver_->Staged().empty(); }));
}

TEST_F(NodeAgentFaultTest, AStageThatTimesOutAfterMountingIsUncertainAndUnstagedWhenNoLongerWanted) {
  AttachNotRequired();
  CreateVolume("data", "pv-1", kHandle);
  driver_->FailAfter("stage", 1, grpc::StatusCode::DEADLINE_EXCEEDED);
  StartAgent();
  ServeDriver();
  CreatePod("app", "data");
  // The driver mounted, but the agent heard a timeout: uncertain, not staged.
  ASSERT_TRUE(Eventually([&] { return agent_->volumes().UncertainStagedVolumes().count(Unique(kHandle)) == 1; }));
  EXPECT_TRUE(agent_->volumes().StagedVolumes().empty());
  EXPECT_EQ(driver_->Staged().count(kHandle), 1u);
  // It counts as in use (so it is never detached), and the pod is not Running.
  EXPECT_TRUE(Eventually([&] { return InUse(Unique(kHandle)); }));
  EXPECT_NE(PodPhase("app"), "Running");
  EXPECT_EQ(driver_->Calls("publish"), 0);
  // The pod goes before the retry (it never had the volume published, so
  // its object need not wait for the device); the uncertain stage is not
  // forgotten with it but unstaged.
  DeletePod("app");
  ASSERT_TRUE(Eventually([&] { return PodGone("app"); }));
  EXPECT_TRUE(Eventually([&] {
    return driver_->Calls("unstage") == 1 && driver_->Staged().empty() &&
           agent_->volumes().UncertainStagedVolumes().empty();
  }));
  EXPECT_TRUE(Eventually([&] { return VolumesInUse().empty(); }));
  EXPECT_EQ(driver_->Calls("stage"), 1);
}

TEST_F(NodeAgentFaultTest, AnUncertainStageIsStagedAgainWhileWanted) {
  AttachNotRequired();
  CreateVolume("data", "pv-1", kHandle);
  driver_->FailAfter("stage", 1, grpc::StatusCode::UNAVAILABLE);
  StartAgent();
  ServeDriver();
  CreatePod("app", "data");
  ASSERT_TRUE(Eventually([&] { return agent_->volumes().UncertainStagedVolumes().size() == 1; }));
  fake_clock_.Advance(absl::Milliseconds(500));  // the stage's backoff
  ASSERT_TRUE(Eventually([&] {
    fake_clock_.Advance(absl::Milliseconds(100));
    return PodPhase("app") == "Running";
  }));
  EXPECT_EQ(driver_->Calls("stage"), 2);
  EXPECT_TRUE(agent_->volumes().UncertainStagedVolumes().empty());
  EXPECT_EQ(agent_->volumes().StagedVolumes().size(), 1u);
}

TEST_F(NodeAgentFaultTest, AFinalStageErrorLeavesNothingToCleanUp) {
  AttachNotRequired();
  CreateVolume("data", "pv-1", kHandle);
  driver_->Fail("stage", 1, grpc::StatusCode::INVALID_ARGUMENT, "bad fsType");
  StartAgent();
  ServeDriver();
  CreatePod("app", "data");
  ASSERT_TRUE(Eventually([&] { return driver_->Calls("stage") == 1; }));
  // The record written before the call goes: nothing of the attempt stays on
  // disk for a restart to find.
  const fs::path record = fs::path(Staging(kHandle)).parent_path() / "vol_data.json";
  ASSERT_TRUE(Eventually([&] { return !fs::exists(record); }));
  ASSERT_TRUE(Eventually([&] { return PodPhase("app") == "Pending"; }));
  EXPECT_TRUE(agent_->volumes().UncertainStagedVolumes().empty());
  EXPECT_TRUE(agent_->volumes().StagedVolumes().empty());
  DeletePod("app");
  ASSERT_TRUE(Eventually([&] { return PodGone("app"); }));
  EXPECT_EQ(driver_->Calls("unstage"), 0);
}

TEST_F(NodeAgentFaultTest, APublishThatTimesOutIsUnpublishedBeforeThePodGoes) {
  AttachNotRequired();
  CreateVolume("data", "pv-1", kHandle);
  driver_->FailAfter("publish", 1, grpc::StatusCode::DEADLINE_EXCEEDED);
  StartAgent();
  ServeDriver();
  const std::string uid = CreatePod("app", "data");
  ASSERT_TRUE(Eventually([&] { return agent_->volumes().UncertainPublishedVolumes().size() == 1; }));
  EXPECT_EQ(driver_->Published().size(), 1u);
  DeletePod("app");
  ASSERT_TRUE(Eventually([&] {
    const bool gone = PodGone("app");
    if (gone) {
      EXPECT_TRUE(driver_->Published().empty());
    }
    return gone;
  }));
  EXPECT_EQ(driver_->Calls("unpublish"), 1);
  EXPECT_TRUE(Eventually([&] { return driver_->Staged().empty() && VolumesInUse().empty(); }));
}

TEST_F(NodeAgentFaultTest, ContainersThatMayStillRunKeepTheVolumesOfADeletingPod) {
  // Shared with the agent, which asks until TearDown stops it, after this
  // body returned.
  auto running = std::make_shared<std::atomic<bool>>(true);
  containers_may_run_ = [running](const std::string&) { return running->load(); };
  StartWithAppUsingData();
  ASSERT_TRUE(Eventually([&] { return PodPhase("app") == "Running"; }));
  DeletePod("app");
  fake_clock_.Advance(absl::Seconds(5));  // resyncs: nothing changes while containers may run
  ASSERT_TRUE(Eventually(
      [&] { return agent_->volumes().PodVolumesReady(client::Uid(Get("pods", "default", "app"))) == false; }));
  EXPECT_EQ(driver_->Calls("unpublish"), 0);
  EXPECT_TRUE(Terminating("app"));
  *running = false;
  agent_->volumes().Wake();
  ASSERT_TRUE(Eventually([&] { return PodGone("app"); }));
  EXPECT_EQ(driver_->Calls("unpublish"), 1);
  EXPECT_TRUE(Eventually([&] { return driver_->Staged().empty(); }));
}

TEST_F(NodeAgentFaultTest, PodVolumePathsNameThePublishedTargets) {
  AttachNotRequired();
  CreateVolume("data", "pv-1", kHandle);
  StartAgent();
  ServeDriver();
  const std::string uid = CreatePod("app", "data", /*read_only=*/true);
  ASSERT_TRUE(Eventually([&] { return agent_->volumes().PodVolumesReady(uid); }));
  auto paths = agent_->volumes().PodVolumePaths(uid);
  ASSERT_EQ(paths.count("data"), 1u);
  EXPECT_EQ(paths["data"].path, Target(uid, "pv-1"));
  EXPECT_TRUE(paths["data"].read_only);
  EXPECT_FALSE(paths["data"].block);
}

// A crash (the agent stopped without cleanup) after each step of the volume's
// life, then a restart: it ends clean.
TEST_F(NodeAgentFaultTest, ARestartAfterAnyStepEndsClean) {
  AttachNotRequired();
  CreateVolume("data", "pv-1", kHandle);
  ServeDriver();
  // 1. Staged, then the publish times out after mounting; the agent dies.
  driver_->FailAfter("publish", 1, grpc::StatusCode::DEADLINE_EXCEEDED);
  StartAgent();
  const std::string uid = CreatePod("app", "data");
  ASSERT_TRUE(Eventually([&] { return agent_->volumes().UncertainPublishedVolumes().size() == 1; }));
  StopAgent();
  // 2. Restarted: reconstruction finds the stage and the publish (mounted
  // per the mount table) and keeps them: nothing is staged again.
  StartAgent();
  // Registered by this agent: the CSINode from before the restart names
  // the driver already, and a teardown asked for before the driver is back
  // waits out its backoff on the fake clock.
  ASSERT_TRUE(Eventually(
      [&] { return agent_->volumes().PublishedVolumes().size() == 1 && agent_->plugins().Get(kDriver).has_value(); }));
  EXPECT_EQ(driver_->Calls("stage"), 1);
  // 3. The pod is deleted and the unpublish times out after unmounting; the
  // agent dies again.
  driver_->FailAfter("unpublish", 1, grpc::StatusCode::DEADLINE_EXCEEDED);
  DeletePod("app");
  ASSERT_TRUE(Eventually([&] { return driver_->Calls("unpublish") == 1; }));
  StopAgent();
  EXPECT_FALSE(PodGone("app"));
  // 4. Restarted: the record without a mount is uncertain, unpublished again
  // (idempotent), then unstaged, then the pod goes.
  StartAgent();
  ASSERT_TRUE(Eventually([&] {
    fake_clock_.Advance(absl::Milliseconds(500));
    return PodGone("app");
  }));
  EXPECT_TRUE(Eventually([&] { return driver_->Staged().empty() && driver_->Published().empty(); }));
  EXPECT_TRUE(Eventually([&] { return VolumesInUse().empty(); }));
  EXPECT_FALSE(fs::exists(root_ + "/pods/" + uid));
  EXPECT_FALSE(fs::exists(fs::path(Staging(kHandle)).parent_path() / "vol_data.json"));
}

}  // namespace
}  // namespace berth::node::testing
