// The node agent against a fake CSI node driver over real unix sockets,
// objects in a real store: the fixture of the agent and volume manager tests
// (node/agent_test.cc, node/volumes/*_test.cc). NodeAgentFaultTest runs the
// volume manager's backoffs and resyncs on a fake clock.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <functional>

#include "apiserver/registry.h"
#include "client/object.h"
#include "client/testing/settle.h"
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

namespace berth::node::testing {

using berth::testing::Eventually;
using berth::testing::Settle;
using client::Field;
using client::K;
using client::Str;
using nlohmann::json;
namespace fs = std::filesystem;

inline constexpr char kDriver[] = "fake.csi.berth.io";
inline constexpr char kNode[] = "node-1";
inline constexpr char kHandle[] = "vol-1";

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
                                                            .runtime_owns_pod_status = false,
                                                            .on_volume_pass = on_volume_pass_});
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
  // The start most volume tests share: a driver that needs no attach, the
  // volume pv-1 bound to claim "data", the agent and its driver serving, and
  // pod "app" using the claim. Returns the pod's uid.
  std::string StartWithAppUsingData() {
    AttachNotRequired();
    CreateVolume("data", "pv-1", kHandle);
    StartAgent();
    ServeDriver();
    return CreatePod("app", "data");
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
  // grew to 2Gi, the claim waits for the node. The resizer writes them in
  // this order; the agent's informers may deliver them in either.
  void GrowPvTo2GiForTheNode() {
    GrowPvTo2Gi();
    MarkClaimNodeResizePending();
  }
  void GrowPvTo2Gi() {
    ASSERT_TRUE(
        UpdateObject(*registry_, K("persistentvolumes"), "", "pv-1", apiserver::Subresource::kMain, [](json& pv) {
          pv["spec"]["capacity"]["storage"] = "2Gi";
          return true;
        }).ok());
  }
  void MarkClaimNodeResizePending() {
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
  std::function<void(const VolumeManager::ReconcileProgress&)> on_volume_pass_;
};

// Tests of failures: the volume manager's backoffs and resyncs run on a
// fake clock, so a failed operation is retried only when the test says.
class NodeAgentFaultTest : public NodeAgentTest {
 protected:
  void SetUp() override {
    NodeAgentTest::SetUp();
    clock_ = &fake_clock_;
  }
  // `pred`, advancing the fake clock by the volume manager's resync (10 s)
  // between looks: what only a pass that reads the API again notices.
  bool EventuallyOnTheResync(const std::function<bool()>& pred) {
    return Eventually([&] {
      if (pred()) return true;
      fake_clock_.Advance(absl::Seconds(10));
      return false;
    });
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
  // Until the pod is Running, moving the clock on meanwhile: a pass that ran
  // before the driver registered, or before the node took volumesInUse,
  // looks again after Options::poll on the clock.
  bool RunningOnTheFakeClock(const std::string& pod) {
    return Eventually([&] {
      if (PodPhase(pod) == "Running") return true;
      fake_clock_.Advance(absl::Milliseconds(100));
      return false;
    });
  }

  FakeClock fake_clock_;
};

}  // namespace berth::node::testing
