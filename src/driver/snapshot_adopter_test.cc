// The adopter against a real Kubernetes-shaped API server (berth's own, over
// HTTPS with a token, as a pod talks to kube-apiserver) and a real pool: it
// labels exactly the pre-provisioned contents whose snapshot this node
// holds, once, and its loop runs on the injected clock.
#include "driver/snapshot_adopter.h"

#include "apiserver/control_plane.h"
#include "apiserver/kubeconfig.h"
#include "common/testing/temp_dir.h"
#include "driver/pool/ids.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace berth::driver {
namespace {

using json = nlohmann::json;
constexpr char kDriver[] = "local.csi.berth.io";
constexpr char kContents[] = "/apis/snapshot.storage.k8s.io/v1/volumesnapshotcontents";

class SnapshotAdopterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto pool = Pool::Open({.dir = dir_.Join("pool")});
    ASSERT_TRUE(pool.ok()) << pool.status();
    pool_ = std::move(*pool);
    Pool::NewVolume volume;
    volume.id = IdForName(IdKind::kVolume, "pvc-1");
    volume.name = "pvc-1";
    volume.capacity_bytes = 1 << 20;
    volume.fs_type = "ext4";
    ASSERT_TRUE(pool_->CreateVolume(volume).ok());
    for (const char* name : {"snapshot-here", "snapshot-later"}) {
      ASSERT_TRUE(
          pool_->CreateSnapshot(IdForName(IdKind::kSnapshot, name), name, IdForName(IdKind::kVolume, "pvc-1"), {}, "")
              .ok());
    }
    apiserver::ControlPlane::Options o;
    o.data_dir = dir_.Join("api");
    o.api_address = "127.0.0.1:0";
    auto cp = apiserver::ControlPlane::Start(o);
    ASSERT_TRUE(cp.ok()) << cp.status();
    cp_ = std::move(*cp);
  }

  static SnapshotContentAdopter::Options Options() {
    SnapshotContentAdopter::Options o;
    o.driver_name = kDriver;
    o.node_name = "node-a";
    o.period = absl::Seconds(10);
    return o;
  }

  SnapshotContentAdopter::ClientFactory Client() {
    return [path = cp_->kubeconfig_path()] { return apiserver::ApiClientForKubeconfig(path); };
  }

  // A VolumeSnapshotContent as a user writes one for an existing snapshot.
  void Content(const std::string& name, const std::string& driver, const std::string& handle,
               const json& labels = json::object(), bool dynamic = false) {
    json source = dynamic ? json{{"volumeHandle", handle}} : json{{"snapshotHandle", handle}};
    json c = {{"apiVersion", "snapshot.storage.k8s.io/v1"},
              {"kind", "VolumeSnapshotContent"},
              {"metadata", {{"name", name}, {"labels", labels}}},
              {"spec",
               {{"driver", driver},
                {"deletionPolicy", "Retain"},
                {"source", source},
                {"volumeSnapshotRef", {{"name", "vs-" + name}, {"namespace", "default"}}}}}};
    auto client = Client()();
    ASSERT_TRUE(client.ok()) << client.status();
    auto r = (*client)->Call("POST", kContents, c.dump());
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->code, 201) << r->body;
  }

  std::string LabelOf(const std::string& name) {
    auto client = Client()();
    auto r = (*client)->Call("GET", std::string(kContents) + "/" + name);
    if (!r.ok() || r->code != 200) return "<error>";
    json c = json::parse(r->body);
    return c["metadata"].value("labels", json::object()).value(kManagedByLabel, "");
  }

  berth::testing::TempDir dir_;
  std::unique_ptr<Pool> pool_;
  std::unique_ptr<apiserver::ControlPlane> cp_;
};

TEST_F(SnapshotAdopterTest, LabelsOnlyContentsOfSnapshotsThisNodeHolds) {
  const std::string here = IdForName(IdKind::kSnapshot, "snapshot-here");
  Content("pre-here", kDriver, here);
  Content("pre-elsewhere", kDriver, IdForName(IdKind::kSnapshot, "snapshot-on-node-b"));
  Content("other-driver", "other.csi.example.com", here);
  Content("claimed-by-b", kDriver, here, {{kManagedByLabel, "node-b"}});
  Content("dynamic", kDriver, IdForName(IdKind::kVolume, "pvc-1"), json::object(), true);
  Content("not-an-id", kDriver, "..%2F..%2Fetc");
  SnapshotContentAdopter adopter(Options(), *pool_, Client());

  auto labelled = adopter.RunOnce();
  ASSERT_TRUE(labelled.ok()) << labelled.status();
  EXPECT_EQ(*labelled, 1);
  EXPECT_EQ(LabelOf("pre-here"), "node-a");
  EXPECT_EQ(LabelOf("pre-elsewhere"), "");
  EXPECT_EQ(LabelOf("other-driver"), "");
  EXPECT_EQ(LabelOf("claimed-by-b"), "node-b");
  EXPECT_EQ(LabelOf("dynamic"), "");
  EXPECT_EQ(LabelOf("not-an-id"), "");
  // Idempotent: nothing left to do.
  EXPECT_EQ(adopter.RunOnce().value_or(-1), 0);
}

TEST_F(SnapshotAdopterTest, LoopRunsEveryPeriodOnTheClock) {
  FakeClock clock;
  SnapshotContentAdopter adopter(Options(), *pool_, Client(), clock);
  adopter.Start();
  ASSERT_TRUE(clock.BlockUntilTimers(1));  // first pass done, waiting for the next
  Content("pre-later", kDriver, IdForName(IdKind::kSnapshot, "snapshot-later"));
  clock.Advance(absl::Seconds(9));
  EXPECT_EQ(LabelOf("pre-later"), "") << "labelled before the period was over";
  clock.Advance(absl::Seconds(1));
  ASSERT_TRUE(clock.BlockUntilTimers(1));  // the second pass is done
  EXPECT_EQ(LabelOf("pre-later"), "node-a");
  adopter.Stop();
}

TEST_F(SnapshotAdopterTest, AnUnreachableApiServerIsReported) {
  SnapshotContentAdopter adopter(Options(), *pool_, [] { return http::ApiClient::ForTcp("127.0.0.1", 1, "", ""); });
  EXPECT_EQ(adopter.RunOnce().status().code(), absl::StatusCode::kUnavailable)
      << "nothing listens on port 1: the failure is reported, not hidden";
}

TEST(InClusterApiClientTest, OutsideAPodSaysWhy) {
  ::unsetenv("KUBERNETES_SERVICE_HOST");
  auto c = InClusterApiClient();
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(c.status().message(), ::testing::HasSubstr("KUBERNETES_SERVICE_HOST"));
}

}  // namespace
}  // namespace berth::driver
