// The volume manager through the node agent: stage, publish, unpublish,
// unstage, attach waits, expansion, block volumes, volume statistics and
// reconstruction after a restart.
#include "node/testing/agent_fixture.h"

namespace berth::node::testing {
namespace {

TEST_F(NodeAgentTest, StagesAndPublishesThenTearsDown) {
  const std::string uid = StartWithAppUsingData();
  ASSERT_TRUE(Eventually([&] { return PodPhase("app") == "Running"; }));
  EXPECT_EQ(driver_->Staged(), (std::map<std::string, std::string>{{kHandle, Staging(kHandle)}}));
  EXPECT_EQ(driver_->Published(), (std::map<std::string, std::string>{{Target(uid, "pv-1"), kHandle}}));
  EXPECT_TRUE(fs::is_directory(Target(uid, "pv-1")));
  EXPECT_TRUE(fs::exists(root_ + "/pods/" + uid + "/volumes/kubernetes.io~csi/pv-1/vol_data.json"));
  EXPECT_EQ(VolumesInUse(), json({std::string("kubernetes.io/csi/") + kDriver + "^" + kHandle}));
  auto reqs = driver_->PublishRequests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_FALSE(reqs[0].readonly());
  EXPECT_EQ(reqs[0].volume_context().at("color"), "blue");
  EXPECT_EQ(reqs[0].volume_context().at("csi.storage.k8s.io/pod.name"), "app");  // podInfoOnMount
  EXPECT_EQ(reqs[0].volume_capability().mount().fs_type(), "ext4");
  bool ready = false;
  const json obj = Get("pods", "default", "app");
  for (const auto& c : Field(Field(obj, "status"), "conditions")) {
    if (Str(c, {"type"}) == "Ready") ready = Str(c, {"status"}) == "True";
  }
  EXPECT_TRUE(ready);

  ASSERT_TRUE(registry_->Delete(K("pods"), "default", "app").ok());
  ASSERT_TRUE(Eventually([&] { return driver_->Published().empty() && driver_->Staged().empty(); }));
  EXPECT_TRUE(Eventually([&] { return VolumesInUse().is_null(); }));
  EXPECT_TRUE(Eventually([&] { return !fs::exists(root_ + "/pods/" + uid); }));
  EXPECT_FALSE(fs::exists(fs::path(Staging(kHandle)).parent_path()));
}

TEST_F(NodeAgentTest, VolumeTheDriverNoLongerKnowsCountsAsTornDown) {
  StartWithAppUsingData();
  ASSERT_TRUE(Eventually([&] { return PodPhase("app") == "Running"; }));
  driver_->Fail("unstage", 100, grpc::StatusCode::NOT_FOUND, "volume vol-1 not found");
  ASSERT_TRUE(registry_->Delete(K("pods"), "default", "app").ok());
  ASSERT_TRUE(Eventually([&] { return agent_->volumes().StagedVolumes().empty(); }));
  EXPECT_FALSE(fs::exists(fs::path(Staging(kHandle)).parent_path()));
  EXPECT_TRUE(Eventually([&] { return VolumesInUse().is_null(); }));
  ASSERT_TRUE(Settle(*store_));
  EXPECT_EQ(driver_->Calls("unstage"), 1);
}

TEST_F(NodeAgentTest, TwoPodsShareOneStagedVolume) {
  AttachNotRequired();
  CreateVolume("data", "pv-1", kHandle);
  StartAgent();
  ServeDriver();
  CreatePod("a", "data");
  const std::string b = CreatePod("b", "data", /*read_only=*/true);
  ASSERT_TRUE(Eventually([&] { return PodPhase("a") == "Running" && PodPhase("b") == "Running"; }));
  EXPECT_EQ(driver_->Calls("stage"), 1);
  EXPECT_EQ(driver_->Published().size(), 2u);
  for (const auto& r : driver_->PublishRequests()) {
    EXPECT_EQ(r.readonly(), r.target_path() == Target(b, "pv-1")) << r.target_path();
  }
  ASSERT_TRUE(registry_->Delete(K("pods"), "default", "a").ok());
  ASSERT_TRUE(Eventually([&] { return driver_->Published().size() == 1; }));
  ASSERT_TRUE(Settle(*store_));
  EXPECT_EQ(driver_->Staged().size(), 1u);  // b still uses it
  ASSERT_TRUE(registry_->Delete(K("pods"), "default", "b").ok());
  EXPECT_TRUE(Eventually([&] { return driver_->Staged().empty(); }));
}

TEST_F(NodeAgentTest, WaitsForTheVolumeAttachment) {
  // No CSIDriver object: attach is required.
  CreateVolume("data", "pv-1", kHandle);
  StartAgent();
  ServeDriver();
  CreatePod("app", "data");
  ASSERT_TRUE(Eventually([&] {
    const json obj = Get("pods", "default", "app");
    for (const auto& c : Field(Field(obj, "status"), "conditions")) {
      if (Str(c, {"type"}) == "Ready") return Str(c, {"message"}).find("VolumeAttachment") != std::string::npos;
    }
    return false;
  }));
  EXPECT_EQ(driver_->Calls("stage"), 0);
  const std::string va = client::AttachmentName(kHandle, kDriver, kNode);
  Create("volumeattachments", "",
         {{"apiVersion", "storage.k8s.io/v1"},
          {"kind", "VolumeAttachment"},
          {"metadata", {{"name", va}}},
          {"spec", {{"attacher", kDriver}, {"nodeName", kNode}, {"source", {{"persistentVolumeName", "pv-1"}}}}},
          {"status", {{"attached", true}, {"attachmentMetadata", {{"device", "/dev/fake0"}}}}}},
         "storage.k8s.io");
  ASSERT_TRUE(Eventually([&] { return PodPhase("app") == "Running"; }));
  EXPECT_EQ(driver_->PublishRequests()[0].publish_context().at("device"), "/dev/fake0");
}

TEST_F(NodeAgentTest, FailuresBecomeEventsAndConditionsThenRecover) {
  AttachNotRequired();
  CreateVolume("data", "pv-1", kHandle);
  driver_->Fail("publish", 2, grpc::StatusCode::INTERNAL, "disk on fire");
  StartAgent();
  ServeDriver();
  CreatePod("app", "data");
  ASSERT_TRUE(Eventually([&] {
    auto events = registry_->List(K("events"), "default", {});
    if (!events.ok()) return false;
    for (const auto& e : events->items) {
      if (Str(e, {"reason"}) == "FailedMount" && Str(e, {"message"}).find("disk on fire") != std::string::npos &&
          Str(e, {"involvedObject", "name"}) == "app") {
        return true;
      }
    }
    return false;
  }));
  EXPECT_TRUE(Eventually([&] { return PodPhase("app") == "Running"; }));
  EXPECT_EQ(driver_->Calls("publish"), 3);
}

TEST_F(NodeAgentTest, RestartRebuildsStateWithoutRemounting) {
  AttachNotRequired();
  CreateVolume("data", "pv-1", kHandle);
  CreateVolume("logs", "pv-2", "vol-2");
  StartAgent();
  ServeDriver();
  CreatePod("app", "data");
  CreatePod("gone", "logs");
  ASSERT_TRUE(Eventually([&] { return PodPhase("app") == "Running" && PodPhase("gone") == "Running"; }));
  StopAgent();
  const int stages = driver_->Calls("stage"), publishes = driver_->Calls("publish");
  // While the agent is down, one pod goes away.
  ASSERT_TRUE(registry_->Delete(K("pods"), "default", "gone").ok());
  StartAgent();
  EXPECT_TRUE(Eventually([&] { return driver_->Published().size() == 1 && driver_->Staged().size() == 1; }));
  ASSERT_TRUE(Settle(*store_));
  EXPECT_EQ(driver_->Calls("stage"), stages);
  EXPECT_EQ(driver_->Calls("publish"), publishes);
  EXPECT_EQ(driver_->Staged().count(kHandle), 1u);
  EXPECT_EQ(PodPhase("app"), "Running");
}

// The reconciler counts its passes and reports each when it ends (the node
// agent publishes that as berth_volume_manager_reconciles_total), on the
// fake clock: a pass runs for a change, an ended operation or the resync.
TEST_F(NodeAgentFaultTest, EveryReconcilePassIsCountedAndReportedWhenItEnds) {
  // Shared with the reconciler thread, which outlives the test body.
  struct Reports {
    absl::Mutex mu;
    std::vector<VolumeManager::ReconcileProgress> seen ABSL_GUARDED_BY(mu);
  };
  auto reported = std::make_shared<Reports>();
  on_volume_pass_ = [reported](const VolumeManager::ReconcileProgress& p) {
    absl::MutexLock lock(&reported->mu);
    reported->seen.push_back(p);
  };
  auto reports = [reported] {
    absl::MutexLock lock(&reported->mu);
    return reported->seen;
  };
  StartWithAppUsingData();
  ASSERT_TRUE(RunningOnTheFakeClock("app"));
  ASSERT_TRUE(Settle(*store_));
  VolumeManager& vm = agent_->volumes();
  const VolumeManager::ReconcileProgress settled = vm.Progress();
  // The stage and the publish were each dispatched by one pass and followed
  // by another; nothing is left to do.
  EXPECT_GE(settled.passes, 3u);
  EXPECT_EQ(settled.operations, 0u);
  // Each pass reported once, in order, the count so far (the report of the
  // last pass may lag the count by the callback's call).
  ASSERT_TRUE(Eventually([&] { return reports().size() == settled.passes; }));
  const auto seen = reports();
  for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i].passes, i + 1);
  EXPECT_TRUE(std::any_of(seen.begin(), seen.end(), [](const auto& p) { return p.operations > 0; }));
  EXPECT_EQ(seen.back().operations, 0u);

  // A wake is one pass, and only one.
  vm.Wake();
  ASSERT_TRUE(Eventually([&] { return vm.Progress().passes == settled.passes + 1; }));
  ASSERT_TRUE(Settle(*store_));
  EXPECT_EQ(vm.Progress().passes, settled.passes + 1);
  // With nothing changing, the next pass is the resync, on the clock.
  ASSERT_TRUE(Eventually([&] {
    fake_clock_.Advance(absl::Seconds(10));
    return vm.Progress().passes >= settled.passes + 2;
  }));
  ASSERT_TRUE(Eventually([&] { return reports().size() == vm.Progress().passes; }));
  EXPECT_EQ(reports().back().passes, vm.Progress().passes);
}

// The agent watches no claim or PV (as kubelet): the cluster's other
// claims and PVs start no pass and are not held; a pod's own are read when a
// pass needs them, so a change of them is seen at the next pass (here the
// resync) and not before.
TEST_F(NodeAgentFaultTest, ClaimsAndVolumesAreReadByPassesNotWatched) {
  StartWithAppUsingData();
  ASSERT_TRUE(RunningOnTheFakeClock("app"));
  ASSERT_TRUE(Settle(*store_));
  VolumeManager& vm = agent_->volumes();
  const uint64_t settled = vm.Progress().passes;
  for (int i = 0; i < 20; ++i) {
    const std::string n = std::to_string(i);
    CreateVolume("other-" + n, "pv-other-" + n, "vol-other-" + n);
  }
  ASSERT_TRUE(Settle(*store_));
  EXPECT_EQ(vm.Progress().passes, settled);
  // The pod's claim gone: nothing notices until a pass reads it; the
  // volume stays published for the running pod all the same.
  ASSERT_TRUE(registry_->Delete(K("persistentvolumeclaims"), "default", "data").ok());
  ASSERT_TRUE(Settle(*store_));
  EXPECT_EQ(vm.Progress().passes, settled);
  const uint64_t before = vm.Progress().passes;
  ASSERT_TRUE(EventuallyOnTheResync([&] { return vm.Progress().passes > before; }));
  ASSERT_TRUE(Settle(*store_));
  EXPECT_EQ(vm.PublishedVolumes().size(), 1u);
  EXPECT_EQ(driver_->Calls("stage"), 1);
  EXPECT_EQ(driver_->Calls("unpublish"), 0);
}

// What berth_up_test's kill -9 test waits for, at the unit level: a
// restarted agent's count starts again from zero, and once two passes
// have ended with no operation queued or running, the reconstructed
// volume was found staged and published: nothing was mounted twice.
TEST_F(NodeAgentFaultTest, ARestartedAgentCountsAfreshAndFindsNothingToRemount) {
  StartWithAppUsingData();
  ASSERT_TRUE(RunningOnTheFakeClock("app"));
  ASSERT_TRUE(Settle(*store_));
  ASSERT_GE(agent_->volumes().Progress().passes, 2u);
  StopAgent();
  // The first count the new agent reports (shared with its reconciler
  // thread, which outlives the test body).
  auto first = std::make_shared<std::atomic<uint64_t>>(0);
  on_volume_pass_ = [first](const VolumeManager::ReconcileProgress& p) {
    uint64_t none = 0;
    first->compare_exchange_strong(none, p.passes);
  };
  StartAgent();
  // The second pass comes with the resync (nothing else changes).
  ASSERT_TRUE(Eventually([&] {
    const auto p = agent_->volumes().Progress();
    if (p.passes >= 2 && p.operations == 0) return true;
    fake_clock_.Advance(absl::Seconds(10));
    return false;
  }));
  EXPECT_EQ(first->load(), 1u);
  EXPECT_EQ(driver_->Calls("stage"), 1);
  EXPECT_EQ(driver_->Calls("publish"), 1);
  EXPECT_EQ(agent_->volumes().StagedVolumes().size(), 1u);
  EXPECT_EQ(agent_->volumes().PublishedVolumes().size(), 1u);
}

TEST_F(NodeAgentTest, AfterARebootWantedVolumesAreMountedAgain) {
  const std::string uid = StartWithAppUsingData();
  ASSERT_TRUE(Eventually([&] { return PodPhase("app") == "Running"; }));
  StopAgent();
  driver_->Reboot();
  StartAgent();
  EXPECT_TRUE(Eventually([&] { return driver_->Published().count(Target(uid, "pv-1")) == 1; }));
  EXPECT_EQ(driver_->Calls("stage"), 2);
}

TEST_F(NodeAgentTest, VolumeStatsAreCollectedOncePerVolumeAndExportedLikeKubelet) {
  AttachNotRequired();
  driver_->SetStats(true, /*bytes=*/1 << 30, /*bytes_used=*/100 << 20, /*inodes=*/65536, /*inodes_used=*/11);
  CreateVolume("data", "pv-1", kHandle);
  StartAgent();
  ServeDriver();
  const std::string a = CreatePod("a", "data");
  CreatePod("b", "data", /*read_only=*/true);
  ASSERT_TRUE(Eventually([&] { return PodPhase("a") == "Running" && PodPhase("b") == "Running"; }));
  agent_->volumes().CollectStats();
  // One call for the volume, however many pods publish it, with its paths.
  ASSERT_EQ(driver_->StatsRequests().size(), 1u);
  const auto req = driver_->StatsRequests()[0];
  EXPECT_EQ(req.volume_id(), kHandle);
  EXPECT_TRUE(driver_->Published().contains(req.volume_path())) << req.volume_path();
  EXPECT_EQ(req.staging_target_path(), driver_->Staged().at(kHandle));
  auto stats = agent_->volumes().Stats();
  ASSERT_EQ(stats.size(), 1u);
  EXPECT_EQ(stats[0].ns, "default");
  EXPECT_EQ(stats[0].claim, "data");
  EXPECT_EQ(stats[0].capacity_bytes, 1 << 30);
  EXPECT_EQ(stats[0].used_bytes, 100 << 20);
  EXPECT_EQ(stats[0].available_bytes, (1 << 30) - (100 << 20));
  EXPECT_EQ(stats[0].inodes_used, 11);

  std::string text;
  VolumeManager::WriteStatsMetrics(&text, stats);
  auto samples = metrics::testing::ParseExposition(text);
  ASSERT_TRUE(samples.ok()) << samples.status() << "\n" << text;
  std::map<std::string, double> by_name;
  for (const auto& smp : *samples) {
    EXPECT_EQ(smp.labels,
              (std::map<std::string, std::string>{{"namespace", "default"}, {"persistentvolumeclaim", "data"}}));
    by_name[smp.name] = smp.value;
  }
  EXPECT_EQ(by_name["kubelet_volume_stats_capacity_bytes"], 1 << 30);
  EXPECT_EQ(by_name["kubelet_volume_stats_available_bytes"], (1 << 30) - (100 << 20));
  EXPECT_EQ(by_name["kubelet_volume_stats_used_bytes"], 100 << 20);
  EXPECT_EQ(by_name["kubelet_volume_stats_inodes"], 65536);
  EXPECT_EQ(by_name["kubelet_volume_stats_inodes_free"], 65536 - 11);
  EXPECT_EQ(by_name["kubelet_volume_stats_inodes_used"], 11);
  EXPECT_EQ(by_name["kubelet_volume_stats_health_status_abnormal"], 0);
  EXPECT_EQ(by_name.size(), 7u);

  // Abnormal → 1; a failing call drops the entry; unpublished → gone.
  driver_->SetStats(true, 1 << 30, 100 << 20, 65536, 11, /*abnormal=*/true);
  agent_->volumes().CollectStats();
  ASSERT_EQ(agent_->volumes().Stats().size(), 1u);
  EXPECT_TRUE(agent_->volumes().Stats()[0].abnormal);
  driver_->Fail("stats", 1, grpc::StatusCode::INTERNAL, "statfs failed");
  agent_->volumes().CollectStats();
  EXPECT_TRUE(agent_->volumes().Stats().empty());
  agent_->volumes().CollectStats();
  EXPECT_EQ(agent_->volumes().Stats().size(), 1u);
  ASSERT_TRUE(registry_->Delete(K("pods"), "default", "a").ok());
  ASSERT_TRUE(registry_->Delete(K("pods"), "default", "b").ok());
  ASSERT_TRUE(Eventually([&] { return driver_->Published().empty(); }));
  ASSERT_TRUE(Eventually([&] { return agent_->volumes().PublishedVolumes().empty(); }));
  agent_->volumes().CollectStats();
  EXPECT_TRUE(agent_->volumes().Stats().empty());
  text.clear();
  VolumeManager::WriteStatsMetrics(&text, agent_->volumes().Stats());
  EXPECT_EQ(text, "");
  (void)a;
}

TEST_F(NodeAgentTest, AnAbnormalVolumeIsAWarningOnEveryPodUsingIt) {
  AttachNotRequired();
  driver_->SetStats(true, 1 << 30, 100 << 20, 65536, 11);
  CreateVolume("data", "pv-1", kHandle);
  StartAgent();
  ServeDriver();
  CreatePod("a", "data");
  CreatePod("b", "data", /*read_only=*/true);
  ASSERT_TRUE(Eventually([&] { return PodPhase("a") == "Running" && PodPhase("b") == "Running"; }));
  auto abnormal_events = [&] {
    std::map<std::string, std::string> out;  // pod → message
    auto events = registry_->List(K("events"), "default", {});
    if (!events.ok()) return out;
    for (const auto& e : events->items) {
      if (Str(e, {"reason"}) == "VolumeConditionAbnormal" && Str(e, {"type"}) == "Warning") {
        out[Str(e, {"involvedObject", "name"})] = Str(e, {"message"});
      }
    }
    return out;
  };
  agent_->volumes().CollectStats();
  agent_->volumes().FlushEvents();
  EXPECT_TRUE(abnormal_events().empty());
  // kubelet's message: the volume's name in the pod, then the driver's.
  driver_->SetStats(true, 1 << 30, 100 << 20, 65536, 11, /*abnormal=*/true);
  agent_->volumes().CollectStats();
  agent_->volumes().FlushEvents();
  EXPECT_EQ(abnormal_events(), (std::map<std::string, std::string>{{"a", "Volume data: the disk is failing"},
                                                                   {"b", "Volume data: the disk is failing"}}));
}

TEST_F(NodeAgentTest, ADriverWithoutVolumeStatsIsNeverAsked) {
  StartWithAppUsingData();
  ASSERT_TRUE(Eventually([&] { return PodPhase("app") == "Running"; }));
  agent_->volumes().CollectStats();
  EXPECT_EQ(driver_->Calls("stats"), 0);
  EXPECT_TRUE(driver_->StatsRequests().empty());
  EXPECT_TRUE(agent_->volumes().Stats().empty());
}

TEST_F(NodeAgentTest, VolumeStatsAreCollectedPeriodically) {
  AttachNotRequired();
  driver_->SetStats(true, 1 << 20, 1 << 10, 100, 1);
  CreateVolume("data", "pv-1", kHandle);
  stats_period_ = absl::Milliseconds(100);
  StartAgent();
  ServeDriver();
  CreatePod("app", "data");
  ASSERT_TRUE(Eventually([&] { return PodPhase("app") == "Running"; }));
  EXPECT_TRUE(Eventually([&] { return agent_->volumes().Stats().size() == 1u; }));
  EXPECT_TRUE(Eventually([&] { return driver_->Calls("stats") >= 3; }));
}

// The agent reads its pods' claims and PVs, it does not watch them (as
// kubelet): a grown PV is seen at the next pass, here the resync.
TEST_F(NodeAgentFaultTest, ExpandsOnTheNodeAndFinishesTheClaim) {
  StartWithAppUsingData();
  ASSERT_TRUE(RunningOnTheFakeClock("app"));
  GrowPvTo2GiForTheNode();
  ASSERT_TRUE(EventuallyOnTheResync([&] {
    return Str(Get("persistentvolumeclaims", "default", "data"), {"status", "capacity", "storage"}) == "2Gi";
  }));
  EXPECT_EQ(driver_->Expanded().at(kHandle), int64_t{2} << 30);
  json status = Get("persistentvolumeclaims", "default", "data")["status"];
  EXPECT_FALSE(status.contains("conditions"));
  EXPECT_FALSE(status.contains("allocatedResourceStatuses"));
}

// Regression: the resizer grows the PV before it marks the claim, but the
// agent sees them through two informers, which may deliver the mark first.
// The node then expanded to the PV's old size and finished the claim there
// (capacity 1Gi, no longer pending), so the new size was never asked for.
// The mark comes first here, as the informers may deliver it.
TEST_F(NodeAgentFaultTest, AClaimMarkedBeforeItsPvIsSeenToGrowWaitsForThePv) {
  StartWithAppUsingData();
  ASSERT_TRUE(RunningOnTheFakeClock("app"));
  MarkClaimNodeResizePending();
  // Passes that read the marked claim (two resyncs) expand nothing.
  for (int i = 0; i < 2; ++i) {
    const uint64_t before = agent_->volumes().Progress().passes;
    ASSERT_TRUE(EventuallyOnTheResync([&] { return agent_->volumes().Progress().passes > before; }));
  }
  ASSERT_TRUE(Settle(*store_));
  EXPECT_EQ(driver_->Calls("expand"), 0);
  json status = Get("persistentvolumeclaims", "default", "data")["status"];
  EXPECT_EQ(Str(status, {"capacity", "storage"}), "1Gi");
  EXPECT_EQ(Str(status, {"allocatedResourceStatuses", "storage"}), "NodeResizePending");

  GrowPvTo2Gi();
  ASSERT_TRUE(EventuallyOnTheResync([&] {
    return Str(Get("persistentvolumeclaims", "default", "data"), {"status", "capacity", "storage"}) == "2Gi";
  }));
  EXPECT_EQ(driver_->Expanded().at(kHandle), int64_t{2} << 30);
  EXPECT_EQ(driver_->Calls("expand"), 1);
  status = Get("persistentvolumeclaims", "default", "data")["status"];
  EXPECT_FALSE(status.contains("conditions"));
  EXPECT_FALSE(status.contains("allocatedResourceStatuses"));
}

TEST_F(NodeAgentTest, BlockVolumesArePublishedUnderVolumeDevices) {
  AttachNotRequired();
  CreateVolume("raw", "pv-b", "vol-b", /*block=*/true);
  StartAgent();
  ServeDriver();
  const std::string uid = CreatePod("app", "raw");
  ASSERT_TRUE(Eventually([&] { return PodPhase("app") == "Running"; }));
  const std::string target = root_ + "/pods/" + uid + "/volumeDevices/kubernetes.io~csi/pv-b";
  EXPECT_EQ(driver_->Published().count(target), 1u);
  EXPECT_TRUE(fs::is_regular_file(target));
  EXPECT_TRUE(driver_->PublishRequests()[0].volume_capability().has_block());
  ASSERT_TRUE(registry_->Delete(K("pods"), "default", "app").ok());
  EXPECT_TRUE(Eventually([&] { return driver_->Staged().empty(); }));
  EXPECT_TRUE(Eventually([&] { return !fs::exists(root_ + "/pods/" + uid); }));
}

TEST_F(NodeAgentTest, PodsOfOtherNodesAreIgnored) {
  AttachNotRequired();
  CreateVolume("data", "pv-1", kHandle);
  StartAgent();
  ServeDriver();
  Create("pods", "default",
         {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", "elsewhere"}}},
          {"spec",
           {{"nodeName", "node-2"},
            {"containers", {{{"name", "c"}, {"image", "busybox"}}}},
            {"volumes", {{{"name", "data"}, {"persistentVolumeClaim", {{"claimName", "data"}}}}}}}}});
  ASSERT_TRUE(Eventually([&] { return Registered(); }));
  ASSERT_TRUE(Settle(*store_));
  EXPECT_EQ(driver_->Calls("stage"), 0);
  const json pod = Get("pods", "default", "elsewhere");
  EXPECT_NE(PodPhase("elsewhere"), "Running");
  EXPECT_TRUE(Field(Field(pod, "status"), "conditions").is_null()) << pod.dump();
}

}  // namespace
}  // namespace berth::node::testing
