// `berth up` end to end, as root with real loop devices and mounts: the
// examples applied with the berth CLI, pods Running with volumes mounted in
// their pod directories, data through snapshot and restore, online
// expansion, clean deletion, SIGTERM; kill -9 and restart; --nodes 3 with
// SpaceWeighted placement, and bursts that spread; a node whose agent hangs
// tainted and avoided;
// a private data directory.
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <map>

#include "absl/strings/match.h"
#include "api/quantity.h"
#include "common/testing/eventually.h"
#include "common/testing/subprocess.h"
#include "driver/testing/sandbox.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "http/api_client.h"
#include "metrics/testing/exposition_check.h"
#include "nlohmann/json.hpp"
#include "up_fixture.h"

namespace berth::testing {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// The shared `berth up` fixture (up_fixture.h), storage side only.
class BerthUpTest : public BerthUpFixture {
 protected:
  void StartUp(const std::vector<std::string>& extra = {}) {
    // The storage side alone (pods run for real in berth_up_pods_test).
    std::vector<std::string> args = {"--runtime", "none"};
    args.insert(args.end(), extra.begin(), extra.end());
    BerthUpFixture::StartUp(args);
  }
  // The pod's mounted volume directory.
  std::string MountOf(const std::string& pod, const std::string& claim, const std::string& node = "testnode") {
    const json p = Pod(pod), c = Claim(claim);
    return data_ + "/nodes/" + node + "/kubelet/pods/" + p["metadata"]["uid"].get<std::string>() +
           "/volumes/kubernetes.io~csi/" + c["spec"]["volumeName"].get<std::string>() + "/mount";
  }
  // Loop devices that belong to volumes (not to the pools).
  size_t VolumeLoops() {
    size_t n = 0;
    for (const auto& dev : sandbox_.Loops()) {
      std::ifstream f("/sys/block/" + fs::path(dev).filename().string() + "/loop/backing_file");
      std::string backing;
      std::getline(f, backing);
      if (!absl::EndsWith(backing, "/pool.img")) ++n;
    }
    return n;
  }
  std::string Example(const std::string& name) { return std::string(BERTH_SOURCE_DIR) + "/examples/" + name; }
  // Whether the node agent that started after `since` has had its volume
  // manager end at least two reconcile passes, the last with no operation
  // queued or running (berth up's /metrics: the agent's start time tells it
  // from an agent killed before, whose file outlives it). Every pass decides
  // on the state reconstructed from disk; an operation a pass dispatched
  // ends before the pass that follows it, so nothing it did is missed.
  bool AgentReconciledSince(absl::Time since, const std::string& node = "testnode") {
    auto r = client_->Call("GET", "/metrics");
    if (!r.ok() || r->code != 200) return false;
    auto samples = metrics::testing::ParseExposition(r->body);
    if (!samples.ok()) return false;
    auto value = [&](const char* name) {
      return metrics::testing::FindSample(*samples, name, {{"node", node}}).value_or(-1);
    };
    return value("berth_node_agent_start_time_seconds") > absl::ToDoubleSeconds(since - absl::UnixEpoch()) &&
           value("berth_volume_manager_reconciles_total") >= 2 && value("berth_volume_manager_operations") == 0;
  }
  // Successful NodeStageVolume calls in the node's berth-csi log.
  size_t NodeStages(const std::string& node = "testnode") {
    return CountOf(ReadWholeFile(data_ + "/nodes/" + node + "/berth-csi.log"), "NodeStageVolume code=OK");
  }
};

// Whether this process may grow a mounted ext4 (the ioctl needs
// CAP_SYS_RESOURCE, which some sandboxes drop even for root).
bool HasCapSysResource() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("CapEff:", 0) == 0) return (std::stoull(line.substr(7), nullptr, 16) >> 24) & 1;
  }
  return false;
}

TEST_F(BerthUpTest, ClaimPodSnapshotRestoreExpandDelete) {
  StartUp();
  // The defaults exist.
  EXPECT_EQ(Get("/apis/storage.k8s.io/v1/storageclasses/berth-local")["volumeBindingMode"], "WaitForFirstConsumer");
  EXPECT_FALSE(Get("/apis/storage.k8s.io/v1/csidrivers/local.csi.berth.io").is_null());
  EXPECT_FALSE(Get("/apis/snapshot.storage.k8s.io/v1/volumesnapshotclasses/berth-snapshots").is_null());
  ASSERT_TRUE(Eventually(
      [&] {
        json csinode = Get("/apis/storage.k8s.io/v1/csinodes/testnode");
        return !csinode.is_null() && csinode["spec"]["drivers"].size() == 1;
      },
      absl::Seconds(60)));

  Berth({"apply", "-f", Example("claim-and-pod.yaml")});
  ASSERT_TRUE(Eventually([&] { return Running("app"); }, absl::Seconds(90))) << Pod("app").dump();
  EXPECT_EQ(Claim("data")["spec"]["storageClassName"], "berth-local");
  const std::string mount = MountOf("app", "data");
  ASSERT_TRUE(Mounted(mount)) << mount;
  std::string payload(3 << 20, '\0');
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<char>(i * 2654435761u >> 13);
  {
    std::ofstream out(mount + "/payload.bin", std::ios::binary);
    out << payload;
  }
  ::sync();
  // kubelet's volume stats on the API server's /metrics (collected every
  // second here): the claim's filesystem, the payload counted as used.
  ASSERT_TRUE(Eventually(
      [&] {
        auto r = client_->Call("GET", "/metrics");
        if (!r.ok() || r->code != 200) return false;
        auto samples = metrics::testing::ParseExposition(r->body);
        if (!samples.ok()) return false;
        double capacity = 0, used = 0;
        for (const auto& smp : *samples) {
          if (smp.labels.count("persistentvolumeclaim") == 0 || smp.labels.at("persistentvolumeclaim") != "data")
            continue;
          if (smp.name == "kubelet_volume_stats_capacity_bytes") capacity = smp.value;
          if (smp.name == "kubelet_volume_stats_used_bytes") used = smp.value;
        }
        return capacity > 32 << 20 && used >= 3 << 20;
      },
      absl::Seconds(30)))
      << client_->Call("GET", "/metrics")->body;
  // The CSI calls that got it there: the controllers' as the sidecars count
  // them, the node agent's as kubelet does (csi/call_metrics.h).
  ASSERT_TRUE(Eventually(
      [&] {
        auto r = client_->Call("GET", "/metrics");
        if (!r.ok() || r->code != 200) return false;
        auto samples = metrics::testing::ParseExposition(r->body);
        if (!samples.ok()) return false;
        bool created = false, staged = false;
        for (const auto& smp : *samples) {
          auto label = [&](const char* l) { return smp.labels.count(l) ? smp.labels.at(l) : std::string(); };
          if (smp.name == "csi_sidecar_operations_seconds_count" &&
              label("method_name") == "/csi.v1.Controller/CreateVolume" && label("grpc_status_code") == "OK" &&
              label("driver_name") == "local.csi.berth.io") {
            created = smp.value >= 1;
          }
          if (smp.name == "csi_operations_seconds_count" && label("method_name") == "/csi.v1.Node/NodeStageVolume" &&
              label("grpc_status_code") == "OK" && label("node") == "testnode") {
            staged = smp.value >= 1;
          }
        }
        return created && staged;
      },
      absl::Seconds(30)))
      << client_->Call("GET", "/metrics")->body;

  Berth({"apply", "-f", Example("snapshot-and-restore.yaml")});
  ASSERT_TRUE(Eventually(
      [&] {
        json s = Get("/apis/snapshot.storage.k8s.io/v1/namespaces/default/volumesnapshots/data-snap");
        return s.value("status", json::object()).value("readyToUse", false);
      },
      absl::Seconds(90)));
  ASSERT_TRUE(Eventually([&] { return Running("restored-app"); }, absl::Seconds(90))) << Pod("restored-app").dump();
  const std::string restored = MountOf("restored-app", "restored");
  EXPECT_EQ(ReadWholeFile(restored + "/payload.bin"), payload);

  // Deleting the first pod unpublishes and unstages its volume.
  const json pv1 = Get("/api/v1/persistentvolumes/" + Claim("data")["spec"]["volumeName"].get<std::string>());
  Berth({"delete", "pod", "app"});
  EXPECT_TRUE(Eventually([&] { return !Mounted(mount); }, absl::Seconds(60)));
  EXPECT_TRUE(Eventually([&] { return VolumeMounts().size() == 2; }, absl::Seconds(60)));  // restored: stage + publish

  // Online expansion of the restored claim.
  struct statvfs before {};
  ASSERT_EQ(::statvfs(restored.c_str(), &before), 0);
  Berth({"apply", "-f", Example("expand.yaml")});
  if (HasCapSysResource()) {
    ASSERT_TRUE(Eventually(
        [&] {
          return Claim("restored")
                     .value("status", json::object())
                     .value("capacity", json::object())
                     .value("storage", "") == "128Mi";
        },
        absl::Seconds(90)))
        << Claim("restored").dump();
    struct statvfs after {};
    ASSERT_EQ(::statvfs(restored.c_str(), &after), 0);
    EXPECT_GT(after.f_blocks * after.f_frsize, before.f_blocks * before.f_frsize + (32u << 20));
  } else {
    // This sandbox drops CAP_SYS_RESOURCE even for root, so a mounted ext4
    // cannot grow here: the volume grows, and the pod shows why the
    // filesystem did not.
    const std::string pv = Claim("restored")["spec"]["volumeName"];
    ASSERT_TRUE(
        Eventually([&] { return Get("/api/v1/persistentvolumes/" + pv)["spec"]["capacity"]["storage"] == "128Mi"; },
                   absl::Seconds(90)));
    EXPECT_TRUE(Eventually(
        [&] { return Get("/api/v1/namespaces/default/events").dump().find("CAP_SYS_RESOURCE") != std::string::npos; },
        absl::Seconds(60)));
  }
  EXPECT_EQ(ReadWholeFile(restored + "/payload.bin"), payload);

  // Delete everything: volumes, snapshots and their storage go away.
  Berth({"delete", "-f", Example("snapshot-and-restore.yaml")});
  Berth({"delete", "pvc", "data"});  // its pod is gone already
  ASSERT_TRUE(Eventually([&] { return Get("/api/v1/persistentvolumes")["items"].empty(); }, absl::Seconds(90)))
      << Get("/api/v1/persistentvolumes").dump();
  EXPECT_TRUE(Eventually([&] { return VolumeMounts().empty() && VolumeLoops() == 0; }, absl::Seconds(30)));
  EXPECT_TRUE(
      Eventually([&] { return Get("/apis/snapshot.storage.k8s.io/v1/volumesnapshotcontents")["items"].empty(); },
                 absl::Seconds(30)));
  // No volume or snapshot images left in the pool.
  size_t images = 0;
  for (const auto& e : fs::recursive_directory_iterator(data_ + "/nodes/testnode/pool")) {
    if (e.is_regular_file() && e.path().extension() == ".img") ++images;
  }
  EXPECT_EQ(images, 0u);
  EXPECT_EQ(StopUp(SIGTERM), 0);
}

TEST_F(BerthUpTest, GenericEphemeralVolumeLivesAndDiesWithItsPod) {
  StartUp();
  Berth({"apply", "-f", Example("ephemeral.yaml")});
  ASSERT_TRUE(Eventually([&] { return Running("scratch-app"); }, absl::Seconds(90))) << Pod("scratch-app").dump();
  // --runtime=none: Running says the volumes are mounted; a condition says
  // that no container runs.
  bool no_runtime = false;
  for (const auto& c : Pod("scratch-app")["status"].value("conditions", json::array())) {
    no_runtime |= c.value("type", "") == "berth.io/NoContainerRuntime" && c.value("status", "") == "True" &&
                  c.value("reason", "") == "NoContainerRuntime";
  }
  EXPECT_TRUE(no_runtime) << Pod("scratch-app").dump();
  json claim = Claim("scratch-app-scratch");
  EXPECT_EQ(claim["metadata"]["ownerReferences"][0]["uid"], Pod("scratch-app")["metadata"]["uid"]);
  EXPECT_EQ(claim["spec"]["storageClassName"], "berth-local");
  const std::string mount = MountOf("scratch-app", "scratch-app-scratch");
  EXPECT_TRUE(Mounted(mount)) << mount;
  Berth({"delete", "-f", Example("ephemeral.yaml")});
  EXPECT_TRUE(Eventually([&] { return Claim("scratch-app-scratch").is_null(); }, absl::Seconds(90)))
      << Claim("scratch-app-scratch").dump();
  EXPECT_TRUE(Eventually([&] { return Get("/api/v1/persistentvolumes")["items"].empty(); }, absl::Seconds(90)));
  EXPECT_TRUE(Eventually([&] { return VolumeMounts().empty() && VolumeLoops() == 0; }, absl::Seconds(30)));
  EXPECT_EQ(StopUp(SIGTERM), 0);
}

TEST_F(BerthUpTest, KillNineAndRestartKeepsPodsRunning) {
  StartUp();
  Berth({"apply", "-f", Example("claim-and-pod.yaml")});
  ASSERT_TRUE(Eventually([&] { return Running("app"); }, absl::Seconds(90))) << Pod("app").dump();
  const std::string mount = MountOf("app", "data");
  { std::ofstream(mount + "/hello") << "still here"; }
  ::sync();
  const std::string pv = Claim("data")["spec"]["volumeName"];
  ASSERT_EQ(StopUp(SIGKILL), 128 + SIGKILL);
  EXPECT_TRUE(Mounted(mount));  // the mounts outlive the agent

  const absl::Time restarted = absl::Now();
  StartUp();
  EXPECT_TRUE(Running("app"));
  EXPECT_EQ(Claim("data")["spec"]["volumeName"], pv);
  EXPECT_EQ(ReadWholeFile(mount + "/hello"), "still here");
  // Nothing is staged or published twice: once the restarted agent's volume
  // manager has reconciled what it reconstructed (the second pass comes at
  // the latest with its 10 s resync), the driver's log shows one stage.
  ASSERT_TRUE(Eventually([&] { return AgentReconciledSince(restarted); }, absl::Seconds(60)))
      << client_->Call("GET", "/metrics")->body;
  EXPECT_TRUE(Mounted(mount));
  EXPECT_EQ(NodeStages(), 1u) << ReadWholeFile(data_ + "/nodes/testnode/berth-csi.log");
  Berth({"delete", "-f", Example("claim-and-pod.yaml")});
  EXPECT_TRUE(Eventually([&] { return Get("/api/v1/persistentvolumes")["items"].empty(); }, absl::Seconds(90)));
  EXPECT_EQ(StopUp(SIGTERM), 0);
}

// Issue 18: a node agent is a process of its own. kill -9 of it leaves the
// API and the controllers serving; berth up starts it again, and the new
// agent adopts the node's mounts (no second stage) and serves new pods.
TEST_F(BerthUpTest, AKilledNodeAgentIsRestartedAndAdoptsItsVolumes) {
  StartUp();
  Berth({"apply", "-f", Example("claim-and-pod.yaml")});
  ASSERT_TRUE(Eventually([&] { return Running("app"); }, absl::Seconds(90))) << Pod("app").dump();
  const std::string mount = MountOf("app", "data");
  { std::ofstream(mount + "/hello") << "still here"; }
  ::sync();
  auto agent_pid = [&] {
    pid_t pid = -1;
    if (std::ifstream in(data_ + "/nodes/testnode/agent.pid"); in) in >> pid;
    return pid;
  };
  const pid_t first = agent_pid();
  ASSERT_GT(first, 0);
  ASSERT_EQ(::kill(first, SIGKILL), 0);
  // The control plane does not notice beyond the node's heartbeat.
  EXPECT_FALSE(Get("/api/v1/nodes/testnode").is_null());
  ASSERT_TRUE(Eventually(
      [&] {
        const pid_t now = agent_pid();
        return now > 0 && now != first && ::kill(now, 0) == 0;
      },
      absl::Seconds(30)));
  EXPECT_TRUE(Mounted(mount));
  EXPECT_EQ(ReadWholeFile(mount + "/hello"), "still here");

  const std::string second =
      "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: after}\n"
      "spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 64Mi}}}\n---\n"
      "apiVersion: v1\nkind: Pod\nmetadata: {name: after}\nspec:\n  containers: [{name: c, image: busybox}]\n"
      "  volumes: [{name: d, persistentVolumeClaim: {claimName: after}}]\n";
  { std::ofstream(sandbox_.Join("after.yaml")) << second; }
  Berth({"apply", "-f", sandbox_.Join("after.yaml")});
  ASSERT_TRUE(Eventually([&] { return Running("after"); }, absl::Seconds(90))) << Pod("after").dump();
  EXPECT_TRUE(Running("app"));
  // One stage per volume: the restarted agent found the first one mounted.
  EXPECT_EQ(NodeStages(), 2u) << ReadWholeFile(data_ + "/nodes/testnode/berth-csi.log");
  Berth({"delete", "-f", Example("claim-and-pod.yaml")});
  Berth({"delete", "-f", sandbox_.Join("after.yaml")});
  EXPECT_TRUE(Eventually([&] { return Get("/api/v1/persistentvolumes")["items"].empty(); }, absl::Seconds(90)));
  EXPECT_EQ(StopUp(SIGTERM), 0);
}

TEST_F(BerthUpTest, ThreeNodesClaimLandsOnTheEmptiestNode) {
  StartUp({"--nodes", "3"});
  ASSERT_TRUE(Eventually([&] { return Get("/apis/storage.k8s.io/v1/csistoragecapacities")["items"].size() >= 3; },
                         absl::Seconds(90)));
  // Volumes pinned to testnode-1 and testnode-3 (pods with a nodeSelector
  // under the WaitForFirstConsumer class), so testnode-2 has the most room.
  std::string manifests;
  for (const char* node : {"testnode-1", "testnode-3"}) {
    manifests +=
        std::string("apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: fill-") + node +
        "}\nspec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 300Mi}}}\n---\n"
        "apiVersion: v1\nkind: Pod\nmetadata: {name: fill-" +
        node + "}\nspec:\n  nodeSelector: {kubernetes.io/hostname: " + node +
        "}\n  containers: [{name: c, image: busybox}]\n  volumes: [{name: d, persistentVolumeClaim: {claimName: fill-" +
        node + "}}]\n---\n";
  }
  { std::ofstream(sandbox_.Join("fill.yaml")) << manifests; }
  Berth({"apply", "-f", sandbox_.Join("fill.yaml")});
  ASSERT_TRUE(Eventually([&] { return Running("fill-testnode-1") && Running("fill-testnode-3"); }, absl::Seconds(120)));
  // The capacity tracker sees the difference (it polls).
  ASSERT_TRUE(Eventually(
      [&] {
        std::map<std::string, int64_t> room;
        const json list = Get("/apis/storage.k8s.io/v1/csistoragecapacities");
        for (const auto& c : list["items"]) {
          const std::string node = c["nodeTopology"]["matchLabels"].value("topology.berth.io/node", "");
          auto q = api::Quantity::Parse(c.value("capacity", "0"));
          if (q.ok()) room[node] = q->Value();
        }
        return room.size() == 3 && room["testnode-2"] > room["testnode-1"] && room["testnode-2"] > room["testnode-3"];
      },
      absl::Seconds(90)));
  Berth({"apply", "-f", Example("claim-and-pod.yaml")});
  ASSERT_TRUE(Eventually([&] { return Running("app"); }, absl::Seconds(120))) << Pod("app").dump();
  EXPECT_EQ(Pod("app")["spec"]["nodeName"], "testnode-2");
  const json pv = Get("/api/v1/persistentvolumes/" + Claim("data")["spec"]["volumeName"].get<std::string>());
  EXPECT_THAT(pv.dump(), ::testing::HasSubstr("testnode-2"));
  Berth({"delete", "-f", Example("claim-and-pod.yaml")});
  Berth({"delete", "-f", sandbox_.Join("fill.yaml")});
  EXPECT_TRUE(Eventually([&] { return Get("/api/v1/persistentvolumes")["items"].empty(); }, absl::Seconds(90)));
  EXPECT_EQ(StopUp(SIGTERM), 0);
}

// Issue 32 acceptance: bursts of claim + pod pairs applied in one file
// spread over three equal nodes, though CSIStorageCapacity (polled every
// 10 s) and the informers lag behind the scheduler's decisions: 30 with the
// default class (SpaceWeighted), then 30 with a VolumeWeighted class. The
// first burst (3000Mi) is bigger than one node's pool, and nothing fails to
// provision on a node that filled up.
TEST_F(BerthUpTest, ThreeNodesBurstsSpreadBySpaceAndVolumeCount) {
  pool_size_ = "2560Mi";
  StartUp({"--nodes", "3"});
  ASSERT_TRUE(Eventually([&] { return Get("/apis/storage.k8s.io/v1/csistoragecapacities")["items"].size() >= 3; },
                         absl::Seconds(90)));
  auto pairs = [&](const std::string& prefix, const std::string& cls) {
    std::string manifests;
    for (int i = 0; i < 30; ++i) {
      const std::string name = prefix + std::to_string(i);
      manifests += "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: " + name + "}\nspec: {" +
                   (cls.empty() ? "" : "storageClassName: " + cls + ", ") +
                   "accessModes: [ReadWriteOnce], resources: {requests: {storage: 100Mi}}}\n---\n"
                   "apiVersion: v1\nkind: Pod\nmetadata: {name: " +
                   name +
                   "}\nspec:\n  containers: [{name: c, image: busybox}]\n  volumes: [{name: d, "
                   "persistentVolumeClaim: {claimName: " +
                   name + "}}]\n---\n";
    }
    return WriteFile(prefix + "pairs.yaml", manifests);
  };
  // Where each claim of a burst was provisioned, once all are bound.
  auto placed = [&](const std::string& prefix) {
    std::map<std::string, int> per_node;
    bool all = Eventually(
        [&] {
          per_node.clear();
          for (int i = 0; i < 30; ++i) {
            const json claim = Claim(prefix + std::to_string(i));
            if (claim.value("status", json::object()).value("phase", "") != "Bound") return false;
            ++per_node[claim["metadata"]["annotations"].value("volume.kubernetes.io/selected-node", "")];
          }
          return true;
        },
        absl::Seconds(300));
    EXPECT_TRUE(all) << "claims of " << prefix << " not all bound";
    std::cout << prefix << ":";
    for (const auto& [node, n] : per_node) std::cout << " " << node << "=" << n;
    std::cout << "\n";
    return per_node;
  };
  auto expect_between = [](const std::map<std::string, int>& per_node, int low, int high) {
    EXPECT_EQ(per_node.size(), 3u);
    for (const char* node : {"testnode-1", "testnode-2", "testnode-3"}) {
      auto it = per_node.find(node);
      const int n = it == per_node.end() ? 0 : it->second;
      EXPECT_GE(n, low) << node;
      EXPECT_LE(n, high) << node;
    }
  };

  const std::string space = pairs("space-", "");
  Berth({"apply", "-f", space});
  expect_between(placed("space-"), 8, 12);

  const std::string cls = WriteFile("spread.yaml",
                                    "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: spread}\n"
                                    "provisioner: local.csi.berth.io\nvolumeBindingMode: WaitForFirstConsumer\n"
                                    "reclaimPolicy: Delete\nparameters: {berth.io/node-weighting: VolumeWeighted}\n");
  Berth({"apply", "-f", cls});
  ASSERT_TRUE(Eventually(
      [&] {
        int n = 0;
        const json list = Get("/apis/storage.k8s.io/v1/csistoragecapacities");
        for (const auto& c : list.value("items", json::array())) n += c.value("storageClassName", "") == "spread";
        return n == 3;
      },
      absl::Seconds(60)))
      << Get("/apis/storage.k8s.io/v1/storageclasses/spread").dump() << "\n"
      << Get("/apis/storage.k8s.io/v1/csistoragecapacities").dump() << "\n"
      << Get("/api/v1/events").dump();
  const std::string volume = pairs("volume-", "spread");
  Berth({"apply", "-f", volume});
  expect_between(placed("volume-"), 9, 11);

  // No volume was refused for want of room on a node that filled up.
  const json events = Get("/api/v1/namespaces/default/events");
  for (const auto& e : events.value("items", json::array())) {
    EXPECT_NE(e.value("reason", ""), "ProvisioningFailed") << e.dump();
  }
  Berth({"delete", "-f", volume});
  Berth({"delete", "-f", space});
  EXPECT_TRUE(Eventually([&] { return Get("/api/v1/persistentvolumes")["items"].empty(); }, absl::Seconds(180)));
  EXPECT_EQ(StopUp(SIGTERM), 0);
}

// Issue 18 acceptance: a node whose agent hangs is marked Unknown and
// tainted within the grace period + 10 s, new claim + pod pairs land on the
// other nodes, and once it is back it is Ready and untainted within 30 s.
// The hang is real: SIGSTOP of the agent's process (<data>/nodes/<node>/
// agent.pid), SIGCONT to resume it.
TEST_F(BerthUpTest, AHungNodeAgentIsTaintedAndAvoidedThenRecovers) {
  StartUp({"--nodes", "3", "--node-monitor-grace-period=8s"});
  auto node = [&](const std::string& name) { return Get("/api/v1/nodes/" + name); };
  auto ready = [](const json& n) {
    if (!n.is_object()) return std::string();  // the agent has not registered its node yet
    for (const auto& c : n.value("status", json::object()).value("conditions", json::array())) {
      if (c.value("type", "") == "Ready") return c.value("status", "");
    }
    return std::string();
  };
  auto tainted = [](const json& n, const std::string& effect) {
    if (!n.is_object()) return false;
    for (const auto& t : n.value("spec", json::object()).value("taints", json::array())) {
      if (t.value("key", "") == "node.kubernetes.io/unreachable" && t.value("effect", "") == effect) return true;
    }
    return false;
  };
  ASSERT_TRUE(Eventually(
      [&] {
        for (const char* n : {"testnode-1", "testnode-2", "testnode-3"}) {
          json csinode = Get(std::string("/apis/storage.k8s.io/v1/csinodes/") + n);
          if (ready(node(n)) != "True" || csinode.is_null() || csinode["spec"]["drivers"].size() != 1) return false;
        }
        return Get("/apis/storage.k8s.io/v1/csistoragecapacities")["items"].size() >= 3;
      },
      absl::Seconds(90)));

  const std::string victim = "testnode-2", victim_dir = data_ + "/nodes/" + victim;
  pid_t agent = -1;
  if (std::ifstream in(victim_dir + "/agent.pid"); in) in >> agent;
  ASSERT_GT(agent, 0) << "no agent.pid for " << victim;
  // The pid is a running `berth node-agent` of that node.
  std::string cmdline = ReadWholeFile("/proc/" + std::to_string(agent) + "/cmdline");
  std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
  ASSERT_THAT(cmdline, ::testing::HasSubstr("node-agent"));
  ASSERT_THAT(cmdline, ::testing::HasSubstr("--node=" + victim));
  struct Hang {
    pid_t pid;
    bool on = false;
    void Stop() {
      on = true;
      ::kill(pid, SIGSTOP);
    }
    void Resume() {
      if (!on) return;
      on = false;
      ::kill(pid, SIGCONT);
    }
    ~Hang() { Resume(); }
  } hang{agent};

  const absl::Time stopped = absl::Now();
  hang.Stop();
  ASSERT_TRUE(Eventually(
      [&] {
        const json n = node(victim);
        return ready(n) == "Unknown" && tainted(n, "NoSchedule") && tainted(n, "NoExecute");
      },
      absl::Seconds(8 + 10)))
      << node(victim).dump();
  std::cout << "node " << victim << " Unknown and tainted " << absl::FormatDuration(absl::Now() - stopped)
            << " after its agent stopped\n";
  EXPECT_EQ(ready(node("testnode-1")), "True");
  EXPECT_EQ(ready(node("testnode-3")), "True");

  // New pairs land on the healthy nodes only (the SpaceWeighted choice
  // would put some on the equally empty victim).
  // A pod that may only run on the victim waits, for the taint's reason.
  std::string manifests =
      "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: pinned}\n"
      "spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 64Mi}}}\n---\n"
      "apiVersion: v1\nkind: Pod\nmetadata: {name: pinned}\nspec:\n  nodeSelector: {kubernetes.io/hostname: " +
      victim +
      "}\n  containers: [{name: c, image: busybox}]\n"
      "  volumes: [{name: d, persistentVolumeClaim: {claimName: pinned}}]\n---\n";
  for (int i = 0; i < 4; ++i) {
    const std::string name = "pair-" + std::to_string(i);
    manifests += "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: " + name +
                 "}\nspec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 64Mi}}}\n---\n"
                 "apiVersion: v1\nkind: Pod\nmetadata: {name: " +
                 name +
                 "}\nspec:\n  containers: [{name: c, image: busybox}]\n  volumes: [{name: d, persistentVolumeClaim: "
                 "{claimName: " +
                 name + "}}]\n---\n";
  }
  { std::ofstream(sandbox_.Join("pairs.yaml")) << manifests; }
  Berth({"apply", "-f", sandbox_.Join("pairs.yaml")});
  for (int i = 0; i < 4; ++i) {
    const std::string name = "pair-" + std::to_string(i);
    ASSERT_TRUE(Eventually([&] { return Running(name); }, absl::Seconds(120))) << Pod(name).dump();
    EXPECT_NE(Pod(name)["spec"]["nodeName"], victim);
    const json pv = Get("/api/v1/persistentvolumes/" + Claim(name)["spec"]["volumeName"].get<std::string>());
    EXPECT_THAT(pv.dump(), ::testing::Not(::testing::HasSubstr(victim))) << pv.dump();
  }

  EXPECT_TRUE(Eventually(
      [&] {
        for (const auto& c : Pod("pinned").value("status", json::object()).value("conditions", json::array())) {
          if (c.value("type", "") == "PodScheduled" && c.value("status", "") == "False" &&
              c.value("message", "").find("untolerated taint {node.kubernetes.io/unreachable: }") !=
                  std::string::npos) {
            return true;
          }
        }
        return false;
      },
      absl::Seconds(30)))
      << Pod("pinned").dump();

  const absl::Time resumed = absl::Now();
  hang.Resume();
  ASSERT_TRUE(Eventually(
      [&] {
        const json n = node(victim);
        return ready(n) == "True" && n.value("spec", json::object()).value("taints", json::array()).empty();
      },
      absl::Seconds(30)))
      << node(victim).dump();
  std::cout << "node " << victim << " Ready and untainted " << absl::FormatDuration(absl::Now() - resumed)
            << " after its agent resumed\n";
  // Back in service: the pinned pod runs there.
  ASSERT_TRUE(Eventually([&] { return Running("pinned"); }, absl::Seconds(120))) << Pod("pinned").dump();

  Berth({"delete", "-f", sandbox_.Join("pairs.yaml")});
  EXPECT_TRUE(Eventually([&] { return Get("/api/v1/persistentvolumes")["items"].empty(); }, absl::Seconds(90)));
  EXPECT_EQ(StopUp(SIGTERM), 0);
}

// Every file berth up keeps under the data directory is its own: the
// directory 0700, the state, token, key and kubeconfig 0600 from creation,
// nothing anyone else may read or enter (mounted volumes are not walked: a
// volume's content is the pod's business).
TEST_F(BerthUpTest, DataDirectoryIsPrivate) {
  // An older run (or an operator's mkdir) left the directory world-readable.
  ASSERT_EQ(::mkdir(data_.c_str(), 0755), 0);
  ASSERT_EQ(::chmod(data_.c_str(), 0755), 0);
  api_address_ = "127.0.0.1:0";
  StartUp();
  EXPECT_THAT(up_->Output(), ::testing::HasSubstr(data_ + " was readable by others (mode 0755)"));
  Berth({"apply", "-f", Example("claim-and-pod.yaml")});
  ASSERT_TRUE(Eventually([&] { return Running("app"); }, absl::Seconds(90))) << Pod("app").dump();

  struct stat st {};
  ASSERT_EQ(::lstat(data_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  for (const char* name : {"state.db", "state.db-wal", "state.db-shm", "api-token", "kubeconfig", "tls/api.key",
                           "api.sock", "berth-up.lock"}) {
    const std::string path = data_ + "/" + name;
    ASSERT_EQ(::lstat(path.c_str(), &st), 0) << path;
    EXPECT_EQ(st.st_mode & 07777, 0600u) << path;
  }
  // The whole tree, without crossing into mounted filesystems (the pool and
  // the volumes).
  std::vector<std::string> open_to_others;
  size_t walked = 0;
  std::function<void(const std::string&, dev_t)> walk = [&](const std::string& dir, dev_t dev) {
    for (const auto& e : fs::directory_iterator(dir)) {
      struct stat est {};
      if (::lstat(e.path().c_str(), &est) != 0 || est.st_dev != dev) continue;
      ++walked;
      // A CSI socket is 0660 (root's group, as kubelet's plugins expect);
      // nothing else grants the group or others anything.
      const mode_t allowed = S_ISSOCK(est.st_mode) ? 0060 : 0;
      if (!S_ISLNK(est.st_mode) && (est.st_mode & 077 & ~allowed) != 0) {
        open_to_others.push_back(fmt::format("{} {:04o}", e.path().string(), est.st_mode & 07777));
      }
      if (S_ISDIR(est.st_mode)) walk(e.path(), dev);
    }
  };
  walk(data_, st.st_dev);
  EXPECT_GT(walked, 20u);  // the node's kubelet tree, records, logs, the pool image
  EXPECT_THAT(open_to_others, ::testing::IsEmpty());
  Berth({"delete", "-f", Example("claim-and-pod.yaml")});
  EXPECT_TRUE(Eventually([&] { return Get("/api/v1/persistentvolumes")["items"].empty(); }, absl::Seconds(90)));
  EXPECT_EQ(StopUp(SIGTERM), 0);
}

}  // namespace
}  // namespace berth::testing
