// The node's lease and status (kubelet's node status and lease controllers)
// on a fake clock: the lease is created owned by the Node and renewed every
// interval; the status is posted on change and at least every report
// period; a Ready condition someone else changed is put right; readiness
// errors make the node NotReady; the test hook stops both signals.
#include "node/status/node_status.h"
#include "apiserver/registry.h"

#include <atomic>

#include "client/object.h"
#include "client/writes.h"
#include "common/clock.h"
#include "common/testing/eventually.h"
#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"
#include "node/plugins/csi_plugins.h"
#include "store/store.h"

namespace berth::node {
namespace {

using berth::testing::Eventually;
using client::Field;
using client::K;
using client::Str;
using nlohmann::json;

constexpr char kNode[] = "node-1";

class NodeStatusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = std::move(*store::Store::Open({.path = dir_.path() + "/state.db"}));
    registry_ = std::make_unique<apiserver::Registry>(*store_);
    ASSERT_TRUE(registry_->Bootstrap().ok());
  }
  void TearDown() override {
    if (status_) status_->Stop();
  }
  void CreateLeaseNamespace() {
    ASSERT_TRUE(registry_->Create(K("namespaces"), "", {{"metadata", {{"name", kNodeLeaseNamespace}}}}).ok());
  }
  void Start() {
    NodeStatus::Options options;
    options.node_name = kNode;
    options.labels = {{"topology.example/rack", "r1"}};
    options.kubelet_root = dir_.path();
    options.readiness_errors = [this] {
      absl::MutexLock lock(&mu_);
      return errors_;
    };
    options.paused_for_test = [this] { return paused_.load(); };
    options.clock = &clock_;
    status_ = std::make_unique<NodeStatus>(*registry_, std::move(options));
    ASSERT_TRUE(status_->Start().ok());
    // Both loops wait on the clock.
    ASSERT_TRUE(clock_.BlockUntilTimers(2));
  }
  // Moves the clock and waits until both loops have run and wait again.
  void Tick(absl::Duration d) {
    clock_.Advance(d);
    ASSERT_TRUE(clock_.BlockUntilTimers(2));
  }
  json Node() {
    auto n = registry_->Get(K("nodes"), "", kNode);
    return n.ok() ? *n : json();
  }
  json Lease() {
    auto l = registry_->Get(K("leases", "coordination.k8s.io"), kNodeLeaseNamespace, kNode);
    return l.ok() ? *l : json();
  }
  json Ready() {
    const json node = Node();
    for (const auto& c : Field(Field(node, "status"), "conditions")) {
      if (Str(c, {"type"}) == "Ready") return c;
    }
    return json();
  }
  std::string Rv(const json& o) { return Str(o, {"metadata", "resourceVersion"}); }
  std::string Micro(absl::Time t) { return absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", t, absl::UTCTimeZone()); }
  bool HasEvent(const std::string& reason) {
    auto events = registry_->List(K("events"), "default", {});
    if (!events.ok()) return false;
    for (const auto& e : events->items) {
      if (Str(e, {"reason"}) == reason && Str(e, {"involvedObject", "name"}) == kNode) return true;
    }
    return false;
  }

  berth::testing::TempDir dir_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<apiserver::Registry> registry_;
  FakeClock clock_;
  absl::Mutex mu_;
  std::vector<std::string> errors_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> paused_{false};
  std::unique_ptr<NodeStatus> status_;
};

TEST_F(NodeStatusTest, TheLeaseIsOwnedByTheNodeAndRenewedEveryTenSeconds) {
  CreateLeaseNamespace();
  const absl::Time start = clock_.Now();
  Start();
  const json lease = Lease();
  EXPECT_EQ(Str(lease, {"spec", "holderIdentity"}), kNode);
  EXPECT_EQ(Field(lease["spec"], "leaseDurationSeconds"), 40);
  EXPECT_EQ(Str(lease, {"spec", "renewTime"}), Micro(start));
  ASSERT_EQ(Field(lease["metadata"], "ownerReferences").size(), 1u);
  EXPECT_EQ(lease["metadata"]["ownerReferences"][0],
            json({{"apiVersion", "v1"}, {"kind", "Node"}, {"name", kNode}, {"uid", client::Uid(Node())}}));

  Tick(absl::Seconds(9));
  EXPECT_EQ(Str(Lease(), {"spec", "renewTime"}), Micro(start));
  Tick(absl::Seconds(1));
  EXPECT_EQ(Str(Lease(), {"spec", "renewTime"}), Micro(start + absl::Seconds(10)));
  Tick(absl::Seconds(10));
  EXPECT_EQ(Str(Lease(), {"spec", "renewTime"}), Micro(start + absl::Seconds(20)));
}

TEST_F(NodeStatusTest, TheLeaseNamespaceMayComeLater) {
  Start();  // kube-node-lease does not exist yet: the node still starts
  EXPECT_TRUE(Lease().is_null());
  CreateLeaseNamespace();
  Tick(absl::Seconds(10));
  EXPECT_EQ(Str(Lease(), {"spec", "renewTime"}), Micro(clock_.Now()));
}

TEST_F(NodeStatusTest, StatusIsPostedOnChangeAndAtLeastEveryMinute) {
  CreateLeaseNamespace();
  const absl::Time start = clock_.Now();
  Start();
  json node = Node();
  EXPECT_EQ(Str(node, {"metadata", "labels", "topology.example/rack"}), "r1");
  EXPECT_EQ(Str(node, {"metadata", "labels", "kubernetes.io/hostname"}), kNode);
  for (const char* r : {"cpu", "memory", "ephemeral-storage", "pods"}) {
    EXPECT_FALSE(Str(node, {"status", "capacity", r}).empty()) << r;
    EXPECT_EQ(Str(node, {"status", "allocatable", r}), Str(node, {"status", "capacity", r})) << r;
  }
  EXPECT_EQ(Str(node, {"status", "capacity", "pods"}), "110");
  EXPECT_EQ(Str(Ready(), {"status"}), "True");
  EXPECT_EQ(Str(Ready(), {"reason"}), "KubeletReady");
  EXPECT_EQ(Str(Ready(), {"message"}), "kubelet is posting ready status");
  EXPECT_EQ(Str(Ready(), {"lastHeartbeatTime"}), client::Rfc3339(start));
  const std::string rv = Rv(node);

  // Nothing changes: ticks for 50 s write nothing (the lease carries the
  // heartbeat).
  for (int i = 0; i < 5; ++i) Tick(absl::Seconds(10));
  EXPECT_EQ(Rv(Node()), rv);
  // A minute after the last write it is written again, heartbeat renewed.
  Tick(absl::Seconds(10));
  EXPECT_NE(Rv(Node()), rv);
  EXPECT_EQ(Str(Ready(), {"lastHeartbeatTime"}), client::Rfc3339(start + absl::Minutes(1)));
  EXPECT_EQ(Str(Ready(), {"lastTransitionTime"}), client::Rfc3339(start));

  // A change is posted at the next tick: the node becomes NotReady.
  {
    absl::MutexLock lock(&mu_);
    errors_ = {"kubelet root /x is not usable: Permission denied", "second reason"};
  }
  Tick(absl::Seconds(10));
  EXPECT_EQ(Str(Ready(), {"status"}), "False");
  EXPECT_EQ(Str(Ready(), {"reason"}), "KubeletNotReady");
  EXPECT_EQ(Str(Ready(), {"message"}), "kubelet root /x is not usable: Permission denied, second reason");
  EXPECT_EQ(Str(Ready(), {"lastTransitionTime"}), client::Rfc3339(clock_.Now()));
  EXPECT_TRUE(Eventually([&] { return HasEvent("NodeNotReady"); }));
  {
    absl::MutexLock lock(&mu_);
    errors_.clear();
  }
  Tick(absl::Seconds(10));
  EXPECT_EQ(Str(Ready(), {"status"}), "True");
  EXPECT_TRUE(Eventually([&] { return HasEvent("NodeReady"); }));
}

TEST_F(NodeStatusTest, AReadyConditionSetByTheControllerIsPutRightAndVolumesAttachedKept) {
  CreateLeaseNamespace();
  Start();
  // The node lifecycle controller marks the node Unknown; the attach-detach
  // controller lists an attached volume.
  ASSERT_TRUE(client::EditStatus(*registry_, K("nodes"), Node(), [](json& status) {
                for (auto& c : status["conditions"]) {
                  if (c["type"] == "Ready") {
                    c["status"] = "Unknown";
                    c["reason"] = "NodeStatusUnknown";
                    c["message"] = "Kubelet stopped posting node status.";
                  }
                }
                status["volumesAttached"] = {{{"name", "kubernetes.io/csi/d^v1"}, {"devicePath", ""}}};
              }).ok());
  Tick(absl::Seconds(10));
  EXPECT_EQ(Str(Ready(), {"status"}), "True");
  EXPECT_EQ(Str(Ready(), {"reason"}), "KubeletReady");
  EXPECT_EQ(Str(Ready(), {"lastTransitionTime"}), client::Rfc3339(clock_.Now()));
  EXPECT_EQ(Field(Field(Node(), "status"), "volumesAttached").size(), 1u);
  EXPECT_TRUE(Eventually([&] { return HasEvent("NodeReady"); }));
  // volumesInUse is written on change only.
  ASSERT_TRUE(status_->SetVolumesInUse({"kubernetes.io/csi/d^v2", "kubernetes.io/csi/d^v1"}).ok());
  EXPECT_EQ(Field(Field(Node(), "status"), "volumesInUse"), json({"kubernetes.io/csi/d^v1", "kubernetes.io/csi/d^v2"}));
  const std::string rv = Rv(Node());
  ASSERT_TRUE(status_->SetVolumesInUse({"kubernetes.io/csi/d^v1", "kubernetes.io/csi/d^v2"}).ok());
  EXPECT_EQ(Rv(Node()), rv);
  EXPECT_EQ(Field(Field(Node(), "status"), "volumesAttached").size(), 1u);
}

TEST_F(NodeStatusTest, WhilePausedForTestNeitherLeaseNorStatusIsWritten) {
  CreateLeaseNamespace();
  const absl::Time start = clock_.Now();
  Start();
  paused_ = true;
  const std::string rv = Rv(Node());
  for (int i = 0; i < 9; ++i) Tick(absl::Seconds(10));
  EXPECT_EQ(Str(Lease(), {"spec", "renewTime"}), Micro(start));
  EXPECT_EQ(Rv(Node()), rv);
  paused_ = false;
  Tick(absl::Seconds(10));
  EXPECT_EQ(Str(Lease(), {"spec", "renewTime"}), Micro(clock_.Now()));
  EXPECT_NE(Rv(Node()), rv);  // a report was due
}

}  // namespace
}  // namespace berth::node
