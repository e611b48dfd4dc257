// The node agent against a fake CSI node driver over real unix sockets,
// objects in a real store: registration (CSINode, node ID annotation,
// labels), the volume manager's stage/publish/unpublish/unstage/expand,
// attach waits, failures, and restart reconstruction.
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>

#include "apiserver/registry.h"
#include "client/object.h"
#include "client/volume_names.h"
#include "common/clock.h"
#include "common/hash.h"
#include "common/testing/eventually.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "metrics/testing/exposition_check.h"
#include "node/agent.h"
#include "node/testing/fake_node.h"
#include "store/store.h"

namespace berth::node {
namespace {

using berth::testing::Eventually;
using client::Field;
using client::K;
using client::Str;
using nlohmann::json;
namespace fs = std::filesystem;

constexpr char kDriver[] = "fake.csi.berth.io";
constexpr char kNode[] = "node-1";
constexpr char kHandle[] = "vol-1";

class NodeAgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = std::move(*store::Store::Open({.path = dir_.path() + "/state.db"}));
    registry_ = std::make_unique<apiserver::Registry>(*store_);
    ASSERT_TRUE(registry_->Bootstrap().ok());
    ASSERT_TRUE(registry_->Create(K("namespaces"), "", {{"metadata", {{"name", "kube-node-lease"}}}}).ok());
    root_ = dir_.path() + "/node";
    driver_ = std::make_unique<testing::FakeNodeDriver>(kDriver, "fake-" + std::string(kNode));
    driver_->SetTopology({{"topology.fake/zone", "z1"}, {"topology.fake/rack", "r1"}});
    driver_->SetMaxVolumes(7);
  }
  void TearDown() override {
    if (agent_) agent_->Stop();
    driver_->Shutdown();
  }

  void StartAgent() {
    agent_ = std::make_unique<NodeAgent>(*registry_, directory_,
                                         NodeAgent::Options{.node_name = kNode,
                                                            .root = root_,
                                                            .labels = {},
                                                            .heartbeat = absl::Seconds(1),
                                                            .workers = 2,
                                                            .volume_stats_period = stats_period_,
                                                            .mount_table = [this] { return driver_->MountTable(); },
                                                            .clock = clock_,
                                                            .containers_may_run = containers_may_run_,
                                                            .runtime_owns_pod_status = false});
    ASSERT_TRUE(agent_->Start().ok());
  }
  void StopAgent() {
    agent_->Stop();
    agent_.reset();
  }
  void ServeDriver() { ASSERT_TRUE(driver_->Serve(dir_.path() + "/csi.sock", root_ + "/plugins_registry").ok()); }
  bool Registered() {
    auto csinode = registry_->Get(K("csinodes", "storage.k8s.io"), "", kNode);
    return csinode.ok() && Field(Field(*csinode, "spec"), "drivers").size() == 1;
  }

  json Get(const char* resource, const std::string& ns, const std::string& name, const char* group = "") {
    auto o = registry_->Get(K(resource, group), ns, name);
    return o.ok() ? *o : json();
  }
  void Create(const char* resource, const std::string& ns, json obj, const char* group = "") {
    auto created = registry_->Create(K(resource, group), ns, obj);
    ASSERT_TRUE(created.ok()) << created.status();
    if (obj.contains("status")) {
      json updated = *created;
      updated["status"] = obj["status"];
      auto st =
          registry_->Update(K(resource, group), ns, client::Name(updated), updated, apiserver::Subresource::kStatus);
      ASSERT_TRUE(st.ok()) << st.status();
    }
  }
  void AttachNotRequired() {
    Create("csidrivers", "",
           {{"apiVersion", "storage.k8s.io/v1"},
            {"kind", "CSIDriver"},
            {"metadata", {{"name", kDriver}}},
            {"spec", {{"attachRequired", false}, {"podInfoOnMount", true}}}},
           "storage.k8s.io");
  }
  // A CSI PV bound to claim `claim`.
  void CreateVolume(const std::string& claim, const std::string& pv, const std::string& handle, bool block = false,
                    const std::string& size = "1Gi") {
    Create("persistentvolumes", "",
           {{"apiVersion", "v1"},
            {"kind", "PersistentVolume"},
            {"metadata", {{"name", pv}}},
            {"spec",
             {{"capacity", {{"storage", size}}},
              {"accessModes", {"ReadWriteOnce"}},
              {"volumeMode", block ? "Block" : "Filesystem"},
              {"persistentVolumeReclaimPolicy", "Delete"},
              {"claimRef", {{"namespace", "default"}, {"name", claim}}},
              {"csi",
               {{"driver", kDriver},
                {"volumeHandle", handle},
                {"fsType", "ext4"},
                {"volumeAttributes", {{"color", "blue"}}}}}}},
            {"status", {{"phase", "Bound"}}}});
    Create("persistentvolumeclaims", "default",
           {{"apiVersion", "v1"},
            {"kind", "PersistentVolumeClaim"},
            {"metadata", {{"name", claim}}},
            {"spec",
             {{"accessModes", {"ReadWriteOnce"}},
              {"volumeName", pv},
              {"volumeMode", block ? "Block" : "Filesystem"},
              {"resources", {{"requests", {{"storage", size}}}}}}},
            {"status", {{"phase", "Bound"}, {"capacity", {{"storage", size}}}}}});
  }
  std::string CreatePod(const std::string& name, const std::string& claim, bool read_only = false) {
    Create("pods", "default",
           {{"apiVersion", "v1"},
            {"kind", "Pod"},
            {"metadata", {{"name", name}}},
            {"spec",
             {{"nodeName", kNode},
              {"containers", {{{"name", "c"}, {"image", "busybox"}}}},
              {"volumes",
               {{{"name", "data"}, {"persistentVolumeClaim", {{"claimName", claim}, {"readOnly", read_only}}}}}}}}});
    return client::Uid(Get("pods", "default", name));
  }
  std::string PodPhase(const std::string& name) { return Str(Get("pods", "default", name), {"status", "phase"}); }
  json VolumesInUse() { return Field(Field(Get("nodes", "", kNode), "status"), "volumesInUse"); }
  std::string Staging(const std::string& handle) {
    return root_ + "/plugins/kubernetes.io/csi/" + kDriver + "/" + Sha256Hex(handle) + "/globalmount";
  }
  std::string Target(const std::string& uid, const std::string& pv) {
    return root_ + "/pods/" + uid + "/volumes/kubernetes.io~csi/" + pv + "/mount";
  }

  // The resizer's part of an expansion of claim "data" (PV "pv-1"): the PV
  // grew to 2Gi, the claim waits for the node.
  void GrowPvTo2GiForTheNode() {
    ASSERT_TRUE(
        UpdateObject(*registry_, K("persistentvolumes"), "", "pv-1", apiserver::Subresource::kMain, [](json& pv) {
          pv["spec"]["capacity"]["storage"] = "2Gi";
          return true;
        }).ok());
    ASSERT_TRUE(
        UpdateObject(
            *registry_, K("persistentvolumeclaims"), "default", "data", apiserver::Subresource::kStatus,
            [](json& c) {
              c["status"]["allocatedResourceStatuses"] = {{"storage", "NodeResizePending"}};
              c["status"]["conditions"] = json::array({{{"type", "FileSystemResizePending"}, {"status", "True"}}});
              return true;
            })
            .ok());
  }

  berth::testing::TempDir dir_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<apiserver::Registry> registry_;
  client::DriverDirectory directory_;
  std::string root_;
  std::unique_ptr<testing::FakeNodeDriver> driver_;
  std::unique_ptr<NodeAgent> agent_;
  absl::Duration stats_period_ = absl::ZeroDuration();  // tests collect by hand
  Clock* clock_ = nullptr;                              // real unless a test sets one
  std::function<bool(const std::string&)> containers_may_run_;
};

// Tests of failures: the volume manager's backoffs and resyncs run on a
// fake clock, so a failed operation is retried only when the test says.
class NodeAgentFaultTest : public NodeAgentTest {
 protected:
  void SetUp() override {
    NodeAgentTest::SetUp();
    clock_ = &fake_clock_;
  }
  bool PodGone(const std::string& name) {
    return registry_->Get(K("pods"), "default", name).status().code() == absl::StatusCode::kNotFound;
  }
  bool Terminating(const std::string& name) {
    return !Field(Field(Get("pods", "default", name), "metadata"), "deletionTimestamp").is_null();
  }
  bool InUse(const std::string& unique) {
    for (const auto& v : VolumesInUse()) {
      if (v == unique) return true;
    }
    return false;
  }
  // Deletes the pod gracefully, as `kubectl delete pod` does.
  void DeletePod(const std::string& name) {
    auto deleted = registry_->Delete(K("pods"), "default", name);
    ASSERT_TRUE(deleted.ok()) << deleted.status();
  }
  std::string Unique(const std::string& handle) { return client::UniqueVolumeName(kDriver, handle); }

  FakeClock fake_clock_;
};

TEST_F(NodeAgentTest, CreatesTheNodeWithLabelsAndHeartbeats) {
  StartAgent();
  json node = Get("nodes", "", kNode);
  EXPECT_EQ(Str(node, {"metadata", "labels", "kubernetes.io/hostname"}), kNode);
  std::string ready;
  for (const auto& c : Field(Field(node, "status"), "conditions")) {
    if (Str(c, {"type"}) == "Ready") ready = Str(c, {"status"});
  }
  EXPECT_EQ(ready, "True");
  // The heartbeat is the node's lease (NodeStatus; node_status_test.cc has
  // the details on a fake clock).
  const std::string first = Str(Get("leases", "kube-node-lease", kNode, "coordination.k8s.io"), {"spec", "renewTime"});
  ASSERT_FALSE(first.empty());
  EXPECT_TRUE(Eventually(
      [&] {
        return Str(Get("leases", "kube-node-lease", kNode, "coordination.k8s.io"), {"spec", "renewTime"}) != first;
      },
      absl::Seconds(5)));
}

TEST_F(NodeAgentTest, RegistrationPublishesCsiNodeAnnotationAndLabels) {
  StartAgent();
  ServeDriver();
  ASSERT_TRUE(Eventually([&] { return Registered(); }));
  json csinode = Get("csinodes", "", kNode, "storage.k8s.io");
  const json& d = csinode["spec"]["drivers"][0];
  EXPECT_EQ(d["name"], kDriver);
  EXPECT_EQ(d["nodeID"], "fake-node-1");
  EXPECT_EQ(d["topologyKeys"], json({"topology.fake/rack", "topology.fake/zone"}));
  EXPECT_EQ(d["allocatable"]["count"], 7);
  EXPECT_EQ(csinode["metadata"]["ownerReferences"][0]["kind"], "Node");
  json node = Get("nodes", "", kNode);
  EXPECT_EQ(json::parse(Str(node, {"metadata", "annotations", kAnnNodeId})), json({{kDriver, "fake-node-1"}}));
  EXPECT_EQ(Str(node, {"metadata", "labels", "topology.fake/zone"}), "z1");
  ASSERT_TRUE(Eventually([&] { return driver_->registration()->last_status().has_value(); }));
  EXPECT_TRUE(driver_->registration()->last_status()->plugin_registered());
  EXPECT_TRUE(directory_.Channel(kDriver, kNode).ok());

  // The registration socket goes away: the driver is deregistered.
  driver_->StopRegistration();
  ASSERT_TRUE(Eventually([&] { return !Registered(); }));
  node = Get("nodes", "", kNode);
  EXPECT_EQ(Str(node, {"metadata", "annotations", kAnnNodeId}), "");
  EXPECT_EQ(Str(node, {"metadata", "labels", "topology.fake/zone"}), "z1");  // labels stay, as in kubelet
  EXPECT_FALSE(agent_->plugins().Get(kDriver).has_value());
  // ...and comes back.
  ASSERT_TRUE(driver_->ServeRegistration(root_ + "/plugins_registry").ok());
  EXPECT_TRUE(Eventually([&] { return Registered(); }));
}

TEST_F(NodeAgentTest, RefusesPluginsWithoutCsi1Versions) {
  StartAgent();
  ASSERT_TRUE(driver_->Serve(dir_.path() + "/csi.sock").ok());
  ASSERT_TRUE(driver_->ServeRegistration(root_ + "/plugins_registry", {"0.3.0", "2.0.0"}).ok());
  ASSERT_TRUE(Eventually([&] { return driver_->registration()->last_status().has_value(); }));
  EXPECT_FALSE(driver_->registration()->last_status()->plugin_registered());
  EXPECT_THAT(driver_->registration()->last_status()->error(), ::testing::HasSubstr("CSI 1.x"));
  EXPECT_FALSE(Registered());
}

TEST_F(NodeAgentTest, VersionCheckFollowsKubelet) {
  EXPECT_TRUE(CheckCsiVersions({"1.0.0"}).ok());
  EXPECT_TRUE(CheckCsiVersions({"v1.2", "2.0.0"}).ok());
  EXPECT_FALSE(CheckCsiVersions({}).ok());
  EXPECT_FALSE(CheckCsiVersions({"0.3.0"}).ok());
  EXPECT_FALSE(CheckCsiVersions({"2.0.0", "junk"}).ok());
}

TEST_F(NodeAgentTest, TopologyLabelCollisionFailsRegistration) {
  StartAgent();
  ASSERT_TRUE(UpdateObject(*registry_, K("nodes"), "", kNode, apiserver::Subresource::kMain, [](json& n) {
                n["metadata"]["labels"]["topology.fake/zone"] = "other";
                return true;
              }).ok());
  ServeDriver();
  ASSERT_TRUE(Eventually([&] { return driver_->registration()->last_status().has_value(); }));
  EXPECT_FALSE(driver_->registration()->last_status()->plugin_registered());
  EXPECT_THAT(driver_->registration()->last_status()->error(), ::testing::HasSubstr("collides"));
  EXPECT_FALSE(Registered());
}

TEST_F(NodeAgentTest, NodeGetInfoFailureIsRetried) {
  driver_->Fail("info", 1, grpc::StatusCode::UNAVAILABLE);
  StartAgent();
  ServeDriver();
  EXPECT_TRUE(Eventually([&] { return Registered(); }));
  EXPECT_GE(driver_->Calls("info"), 2);
}

// node-driver-registrar restarting after a SIGKILL removes its stale socket
// and binds a new one at once, and ext4 hands the new socket the inode just
// freed. Seen with the upstream sidecar (tests/integration/registrar_test):
// the watcher took the new socket for the old one and never asked it, so the
// restarted sidecar never heard its verdict. Here the same inode comes back
// for certain: the socket is removed and linked back from a hidden hard link.
TEST_F(NodeAgentTest, ASocketCreatedAgainWithTheSameInodeRegistersAgain) {
  StartAgent();
  ServeDriver();
  ASSERT_TRUE(Eventually([&] { return Registered(); }));
  ASSERT_TRUE(Eventually([&] { return driver_->registration()->last_status().has_value(); }));
  const int infos = driver_->Calls("info");
  const std::string socket = csi::RegistrationSocketPath(root_ + "/plugins_registry", kDriver);
  const std::string hidden = root_ + "/plugins_registry/.old-reg.sock";
  struct stat before {
  }, after{};
  ASSERT_EQ(::lstat(socket.c_str(), &before), 0);
  ASSERT_EQ(::link(socket.c_str(), hidden.c_str()), 0);
  ASSERT_EQ(::unlink(socket.c_str()), 0);
  ASSERT_EQ(::link(hidden.c_str(), socket.c_str()), 0);
  ASSERT_EQ(::unlink(hidden.c_str()), 0);
  ASSERT_EQ(::lstat(socket.c_str(), &after), 0);
  ASSERT_EQ(after.st_ino, before.st_ino);
  EXPECT_TRUE(Eventually([&] { return driver_->Calls("info") > infos; })) << "not registered again";
  EXPECT_TRUE(Eventually([&] { return Registered(); }));
}

TEST_F(NodeAgentTest, StagesAndPublishesThenTearsDown) {
  AttachNotRequired();
  CreateVolume("data", "pv-1", kHandle);
  StartAgent();
  ServeDriver();
  const std::string uid = CreatePod("app", "data");
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
  AttachNotRequired();
  CreateVolume("data", "pv-1", kHandle);
  StartAgent();
  ServeDriver();
  CreatePod("app", "data");
  ASSERT_TRUE(Eventually([&] { return PodPhase("app") == "Running"; }));
  driver_->Fail("unstage", 100, grpc::StatusCode::NOT_FOUND, "volume vol-1 not found");
  ASSERT_TRUE(registry_->Delete(K("pods"), "default", "app").ok());
  ASSERT_TRUE(Eventually([&] { return agent_->volumes().StagedVolumes().empty(); }));
  EXPECT_FALSE(fs::exists(fs::path(Staging(kHandle)).parent_path()));
  EXPECT_TRUE(Eventually([&] { return VolumesInUse().is_null(); }));
  absl::SleepFor(absl::Seconds(1));
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
  absl::SleepFor(absl::Milliseconds(500));
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
  absl::SleepFor(absl::Seconds(1));
  EXPECT_EQ(driver_->Calls("stage"), stages);
  EXPECT_EQ(driver_->Calls("publish"), publishes);
  EXPECT_EQ(driver_->Staged().count(kHandle), 1u);
  EXPECT_EQ(PodPhase("app"), "Running");
}

TEST_F(NodeAgentTest, AfterARebootWantedVolumesAreMountedAgain) {
  AttachNotRequired();
  CreateVolume("data", "pv-1", kHandle);
  StartAgent();
  ServeDriver();
  const std::string uid = CreatePod("app", "data");
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

TEST_F(NodeAgentTest, ADriverWithoutVolumeStatsIsNeverAsked) {
  AttachNotRequired();
  CreateVolume("data", "pv-1", kHandle);
  StartAgent();
  ServeDriver();
  CreatePod("app", "data");
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

TEST_F(NodeAgentTest, ExpandsOnTheNodeAndFinishesTheClaim) {
  AttachNotRequired();
  CreateVolume("data", "pv-1", kHandle);
  StartAgent();
  ServeDriver();
  CreatePod("app", "data");
  ASSERT_TRUE(Eventually([&] { return PodPhase("app") == "Running"; }));
  GrowPvTo2GiForTheNode();
  ASSERT_TRUE(Eventually([&] {
    return Str(Get("persistentvolumeclaims", "default", "data"), {"status", "capacity", "storage"}) == "2Gi";
  }));
  EXPECT_EQ(driver_->Expanded().at(kHandle), int64_t{2} << 30);
  json status = Get("persistentvolumeclaims", "default", "data")["status"];
  EXPECT_FALSE(status.contains("conditions"));
  EXPECT_FALSE(status.contains("allocatedResourceStatuses"));
}

TEST_F(NodeAgentFaultTest, AnInfeasibleNodeExpansionIsRecordedOnTheClaimAndClearedWhenItSucceeds) {
  AttachNotRequired();
  CreateVolume("data", "pv-1", kHandle);
  StartAgent();
  ServeDriver();
  CreatePod("app", "data");
  ASSERT_TRUE(Eventually([&] { return PodPhase("app") == "Running"; }));
  driver_->Fail("expand", 1, grpc::StatusCode::OUT_OF_RANGE);
  GrowPvTo2GiForTheNode();
  auto claim_status = [&] { return Get("persistentvolumeclaims", "default", "data")["status"]; };
  ASSERT_TRUE(Eventually([&] {
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
  absl::SleepFor(absl::Seconds(1));
  EXPECT_EQ(driver_->Calls("stage"), 0);
  const json pod = Get("pods", "default", "elsewhere");
  EXPECT_NE(PodPhase("elsewhere"), "Running");
  EXPECT_TRUE(Field(Field(pod, "status"), "conditions").is_null()) << pod.dump();
}

TEST_F(NodeAgentFaultTest, ADeletedPodStaysTerminatingUntilItsVolumesAreTornDown) {
  AttachNotRequired();
  CreateVolume("data", "pv-1", kHandle);
  StartAgent();
  ServeDriver();
  const std::string uid = CreatePod("app", "data");
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
  AttachNotRequired();
  CreateVolume("data", "pv-1", kHandle);
  StartAgent();
  ServeDriver();
  CreatePod("app", "data");
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
  std::atomic<bool> running{true};
  containers_may_run_ = [&running](const std::string&) { return running.load(); };
  AttachNotRequired();
  CreateVolume("data", "pv-1", kHandle);
  StartAgent();
  ServeDriver();
  CreatePod("app", "data");
  ASSERT_TRUE(Eventually([&] { return PodPhase("app") == "Running"; }));
  DeletePod("app");
  fake_clock_.Advance(absl::Seconds(5));  // resyncs: nothing changes while containers may run
  ASSERT_TRUE(Eventually(
      [&] { return agent_->volumes().PodVolumesReady(client::Uid(Get("pods", "default", "app"))) == false; }));
  EXPECT_EQ(driver_->Calls("unpublish"), 0);
  EXPECT_TRUE(Terminating("app"));
  running = false;
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
  ASSERT_TRUE(Eventually([&] { return agent_->volumes().PublishedVolumes().size() == 1 && Registered(); }));
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
}  // namespace berth::node
