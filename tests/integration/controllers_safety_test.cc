// Kubernetes' safety rules in berth's controllers, end to end against real
// berth-csi processes (as root: each on its own sandboxed XFS pool):
//   - two CSI drivers in one cluster: every provisioner and attacher acts on
//     its own driver's claims, volumes and attachments only, and nothing is
//     stuck or leaked in either pool;
//   - a statically provisioned CSI volume with reclaim policy Delete is
//     deleted through its driver when its claim goes;
//   - berth-csi killed (kill -9) and restarted while 200 claims are created
//     and deleted: nothing waits for a backoff once it is registered again,
//     and next to no calls are made while it is down.
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <set>

#include "client/object.h"
#include "common/testing/eventually.h"
#include "common/testing/temp_dir.h"
#include "controllers/manager.h"
#include "driver_process.h"
#include "gmock/gmock.h"
#include "spdlog/spdlog.h"
#include "store/store.h"

namespace berth::testing {
namespace {

using client::Annotation;
using client::Field;
using client::Str;
using nlohmann::json;

constexpr char kNode[] = "node-a";
constexpr char kDriverA[] = "local.csi.berth.io";
constexpr char kDriverB[] = "second.csi.berth.io";

const api::KindInfo& K(std::string_view resource, std::string_view group = "") {
  return *api::FindResource(group, resource);
}

// One berth-csi process under its own driver name and pool.
struct Driver {
  explicit Driver(const std::string& driver_name)
      : name(driver_name), process(sandbox, {"--driver-name", driver_name}) {}
  std::string name;
  MountSandbox sandbox;
  DriverProcess process;
};

class ControllersSafetyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    BERTH_REQUIRE_ROOT();
    store_ = std::move(*store::Store::Open({.path = dir_.path() + "/state.db"}));
    registry_ = std::make_unique<apiserver::Registry>(*store_);
    ASSERT_TRUE(registry_->Bootstrap().ok());
    Create("nodes", "", "",
           {{"metadata",
             {{"name", kNode}, {"labels", {{"kubernetes.io/hostname", kNode}, {"topology.berth.io/node", kNode}}}}}});
  }
  void TearDown() override {
    if (manager_) manager_->Stop();
    for (auto& d : drivers_) {
      EXPECT_EQ(d->process.Stop(), 0);
      if (HasFailure()) std::cerr << d->name << ":\n" << d->process.Log();
    }
  }

  // Starts berth-csi as `name`, registers it as the node agent would
  // (directory entry, CSINode entry), and adds a Delete class `cls` for it.
  // `fs_type` xfs rounds every volume up to 300Mi (mkfs.xfs's minimum);
  // many claims take ext4, so that their sparse pool's host can back them.
  // `thick_pool_size`, when given, makes the pool image fully allocated at
  // that size instead of the default sparse 64Gi.
  Driver& AddDriver(const std::string& name, const std::string& cls, const std::string& fs_type = "xfs",
                    const std::string& thick_pool_size = "") {
    drivers_.push_back(std::make_unique<Driver>(name));
    Driver& d = *drivers_.back();
    if (!thick_pool_size.empty()) d.process.SetPoolSize(thick_pool_size, /*sparse=*/false);
    EXPECT_TRUE(d.process.Start());
    directory_.Add(name, kNode, "unix://" + d.process.socket());
    json entry = {{"name", name}, {"nodeID", kNode}, {"topologyKeys", {"topology.berth.io/node"}}};
    auto csinode = registry_->Get(K("csinodes", "storage.k8s.io"), "", kNode);
    if (csinode.ok()) {
      (*csinode)["spec"]["drivers"].push_back(entry);
      EXPECT_TRUE(
          registry_->Update(K("csinodes", "storage.k8s.io"), "", kNode, *csinode, apiserver::Subresource::kMain).ok());
    } else {
      Create("csinodes", "storage.k8s.io", "", {{"metadata", {{"name", kNode}}}, {"spec", {{"drivers", {entry}}}}});
    }
    Create("storageclasses", "storage.k8s.io", "",
           {{"metadata", {{"name", cls}}},
            {"provisioner", name},
            {"volumeBindingMode", "Immediate"},
            {"reclaimPolicy", "Delete"},
            {"parameters", {{"csi.storage.k8s.io/fstype", fs_type}}}});
    return d;
  }

  void StartManager() {
    std::vector<std::string> names;
    for (auto& d : drivers_) names.push_back(d->name);
    manager_ = std::make_unique<controllers::ControllerManager>(
        *registry_, directory_,
        controllers::ControllerManager::Options{.drivers = names, .rpc_timeout = absl::Seconds(60)});
    ASSERT_TRUE(manager_->Start().ok());
  }

  void Create(std::string_view resource, std::string_view group, const std::string& ns, const json& obj) {
    auto got = registry_->Create(K(resource, group), ns, obj);
    ASSERT_TRUE(got.ok()) << resource << ": " << got.status();
  }
  json Get(std::string_view resource, std::string_view group, const std::string& ns, const std::string& name) {
    auto got = registry_->Get(K(resource, group), ns, name);
    return got.ok() ? *got : json();
  }
  json Claim(const std::string& name) { return Get("persistentvolumeclaims", "", "default", name); }
  void NewClaim(const std::string& name, const std::string& cls, const std::string& volume = "",
                const std::string& size = "64Mi") {
    json c = {{"metadata", {{"name", name}}},
              {"spec",
               {{"accessModes", {"ReadWriteOnce"}},
                {"storageClassName", cls},
                {"resources", {{"requests", {{"storage", size}}}}}}}};
    if (!volume.empty()) c["spec"]["volumeName"] = volume;
    Create("persistentvolumeclaims", "", "default", c);
  }
  void NewPod(const std::string& name, const std::string& claim) {
    Create("pods", "", "default",
           {{"metadata", {{"name", name}}},
            {"spec",
             {{"nodeName", kNode},
              {"containers", {{{"name", "c"}, {"image", "busybox"}}}},
              {"volumes", {{{"name", "d"}, {"persistentVolumeClaim", {{"claimName", claim}}}}}}}}});
  }
  size_t Count(std::string_view resource, std::string_view group = "") {
    auto list = registry_->List(K(resource, group), "", {});
    return list.ok() ? list->items.size() : 999;
  }
  std::set<std::string> PoolVolumes(Driver& d) {
    ::csi::v1::ListVolumesResponse resp;
    EXPECT_TRUE(d.process.controller().ListVolumes(Ctx().get(), {}, &resp).ok());
    std::set<std::string> out;
    for (const auto& e : resp.entries()) out.insert(e.volume().volume_id());
    return out;
  }
  // Every stuck object, for the failure message, in a few lines: counts by
  // kind, phase and finalizers with up to 3 names each, each pool's volume
  // count and free capacity, and the distinct Warning events' messages
  // (why provisioning or deletion failed).
  std::string Leftovers() {
    std::map<std::string, std::vector<std::string>> groups;
    for (const char* r : {"persistentvolumeclaims", "persistentvolumes"}) {
      auto list = registry_->List(K(r), "", {});
      if (!list.ok()) continue;
      for (const auto& o : list->items) {
        groups[std::string(r) + " phase=" + Str(o, {"status", "phase"}) +
               " finalizers=" + Field(Field(o, "metadata"), "finalizers").dump()]
            .push_back(Str(o, {"metadata", "name"}));
      }
    }
    std::string out;
    for (const auto& [group, names] : groups) {
      out += std::to_string(names.size()) + " " + group + ":";
      for (size_t i = 0; i < names.size() && i < 3; ++i) out += " " + names[i];
      out += names.size() > 3 ? " ...\n" : "\n";
    }
    for (auto& d : drivers_) {
      ::csi::v1::GetCapacityResponse cap;
      const bool ok = d->process.controller().GetCapacity(Ctx().get(), {}, &cap).ok();
      out += d->name + " pool: " + std::to_string(PoolVolumes(*d).size()) + " volumes, " +
             (ok ? std::to_string(cap.available_capacity() >> 20) + " MiB available" : "GetCapacity failed") + "\n";
    }
    std::set<std::string> warnings;
    if (auto events = registry_->List(K("events"), "", {}); events.ok()) {
      for (const auto& e : events->items) {
        if (Str(e, {"type"}) == "Warning" && warnings.size() < 3) {
          warnings.insert(Str(e, {"reason"}) + ": " + Str(e, {"message"}).substr(0, 300));
        }
      }
    }
    for (const auto& w : warnings) out += "event " + w + "\n";
    return out;
  }

  TempDir dir_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<apiserver::Registry> registry_;
  client::DriverDirectory directory_;
  std::vector<std::unique_ptr<Driver>> drivers_;
  std::unique_ptr<controllers::ControllerManager> manager_;
};

TEST_F(ControllersSafetyTest, TwoDriversEachKeepToTheirOwnClaimsVolumesAndAttachments) {
  Driver& a = AddDriver(kDriverA, "class-a");
  Driver& b = AddDriver(kDriverB, "class-b");
  StartManager();
  // Claims of both drivers used by pods, so both drivers' attachments exist
  // when everything is deleted.
  for (int i = 0; i < 3; ++i) {
    NewClaim("a-" + std::to_string(i), "class-a");
    NewClaim("b-" + std::to_string(i), "class-b");
    NewPod("pod-a-" + std::to_string(i), "a-" + std::to_string(i));
    NewPod("pod-b-" + std::to_string(i), "b-" + std::to_string(i));
  }
  ASSERT_TRUE(Eventually(
      [&] {
        for (int i = 0; i < 3; ++i) {
          for (const char* p : {"a-", "b-"}) {
            if (Str(Claim(p + std::to_string(i)), {"status", "phase"}) != "Bound") return false;
          }
        }
        return Count("volumeattachments", "storage.k8s.io") == 6;
      },
      absl::Seconds(60)))
      << Leftovers();
  // Each driver's objects carry only that driver's finalizers.
  auto attachments = registry_->List(K("volumeattachments", "storage.k8s.io"), "", {});
  ASSERT_TRUE(attachments.ok());
  for (const auto& va : attachments->items) {
    // (berth-csi has no ControllerPublish: attached without a call, so
    // possibly without any finalizer; never another driver's.)
    const std::string attacher = Str(va, {"spec", "attacher"});
    for (const auto& f : Field(Field(va, "metadata"), "finalizers")) EXPECT_EQ(f, "external-attacher/" + attacher);
  }
  // 20 claims of each class created and deleted at once: most deletions
  // land while CreateVolume is in flight. Everything else goes too.
  constexpr int kClaims = 20;
  for (int i = 0; i < kClaims; ++i) {
    NewClaim("x-a-" + std::to_string(i), "class-a");
    NewClaim("x-b-" + std::to_string(i), "class-b");
  }
  for (int i = 0; i < kClaims; ++i) {
    for (const char* p : {"x-a-", "x-b-"}) {
      ASSERT_TRUE(registry_->Delete(K("persistentvolumeclaims"), "default", p + std::to_string(i)).ok());
    }
  }
  for (int i = 0; i < 3; ++i) {
    for (const char* p : {"a-", "b-"}) {
      // No kubelet here to finish a graceful deletion: the pod goes at once.
      apiserver::DeleteOptions now;
      now.grace_period_seconds = 0;
      ASSERT_TRUE(registry_->Delete(K("pods"), "default", "pod-" + std::string(p) + std::to_string(i), now).ok());
      ASSERT_TRUE(registry_->Delete(K("persistentvolumeclaims"), "default", p + std::to_string(i)).ok());
    }
  }
  EXPECT_TRUE(Eventually(
      [&] {
        return Count("persistentvolumeclaims") == 0 && Count("persistentvolumes") == 0 &&
               Count("volumeattachments", "storage.k8s.io") == 0 && PoolVolumes(a).empty() && PoolVolumes(b).empty();
      },
      absl::Seconds(90)))
      << Leftovers();
}

TEST_F(ControllersSafetyTest, StaticVolumeWithReclaimDeleteIsDeletedThroughItsDriver) {
  Driver& b = AddDriver(kDriverB, "class-b");
  // A volume made outside Kubernetes, then described by a PV by hand.
  ::csi::v1::CreateVolumeRequest req;
  req.set_name("handmade");
  req.mutable_capacity_range()->set_required_bytes(64 << 20);
  *req.add_volume_capabilities() = MountCapability("xfs");
  ::csi::v1::CreateVolumeResponse resp;
  ASSERT_TRUE(b.process.controller().CreateVolume(Ctx().get(), req, &resp).ok());
  const std::string handle = resp.volume().volume_id();
  json terms = json::array();
  for (const auto& [k, v] : resp.volume().accessible_topology(0).segments()) {
    terms.push_back({{"key", k}, {"operator", "In"}, {"values", {v}}});
  }
  Create("persistentvolumes", "", "",
         {{"metadata", {{"name", "static-pv"}}},
          {"spec",
           {{"capacity", {{"storage", "64Mi"}}},
            {"accessModes", {"ReadWriteOnce"}},
            {"persistentVolumeReclaimPolicy", "Delete"},
            {"storageClassName", "class-b"},
            {"csi", {{"driver", kDriverB}, {"volumeHandle", handle}, {"fsType", "xfs"}}},
            {"nodeAffinity", {{"required", {{"nodeSelectorTerms", {{{"matchExpressions", terms}}}}}}}}}}});
  StartManager();
  NewClaim("data", "class-b", "static-pv");
  ASSERT_TRUE(Eventually(
      [&] {
        return Str(Claim("data"), {"status", "phase"}) == "Bound";
      },
      absl::Seconds(30)))
      << Leftovers();
  // Like every Delete volume of its driver, it is now protected by the
  // provisioner's finalizer.
  ASSERT_TRUE(Eventually([&] {
    return client::HasFinalizer(Get("persistentvolumes", "", "", "static-pv"),
                                "external-provisioner.volume.kubernetes.io/finalizer");
  })) << Leftovers();
  EXPECT_EQ(PoolVolumes(b), std::set<std::string>{handle});
  ASSERT_TRUE(registry_->Delete(K("persistentvolumeclaims"), "default", "data").ok());
  EXPECT_TRUE(Eventually([&] { return Count("persistentvolumes") == 0 && PoolVolumes(b).empty(); }, absl::Seconds(30)))
      << Leftovers();
}

TEST_F(ControllersSafetyTest, DriverKilledThreeTimesDuringCreationAndDeletionStallsNothing) {
  // 200 claims of 16Mi (ext4's least) in a fully allocated 4Gi pool: what
  // they take does not depend on the host's free space. (In the default
  // sparse 64Gi pool, 200 claims of 64Mi owe the host 12.5 GiB beyond its
  // 10 % kept free, and a CI machine whose disk holds the sanitized build
  // has not that much: provisioning stops, as it should.)
  Driver& d = AddDriver(kDriverA, "class-a", "ext4", "4Gi");
  StartManager();
  client::DriverMonitor& monitor = manager_->monitor();
  constexpr int kClaims = 200;
  auto name = [](int i) { return "c-" + std::to_string(i); };
  auto bound = [&] {
    int n = 0;
    for (int i = 0; i < kClaims; ++i) n += Str(Claim(name(i)), {"status", "phase"}) == "Bound";
    return n;
  };
  int64_t down_calls = 0, skipped = 0;
  std::vector<absl::Duration> recoveries;
  // kill -9, wait until the controllers noticed (a call failed), keep it
  // down ~1 s, start it again and register it as the node agent would.
  // `while_down` runs while it is down. Returns the time of the
  // registration.
  auto outage = [&](const std::function<void()>& while_down) {
    const client::DriverMonitor::Stats before = monitor.stats();
    spdlog::info("test: kill -9 berth-csi ({} claims bound, {} PVs)", bound(), Count("persistentvolumes"));
    d.process.Kill();
    const absl::Time killed = absl::Now();
    while_down();
    EXPECT_TRUE(Eventually([&] { return monitor.stats().outages > before.outages; }, absl::Seconds(60)))
        << "no call failed in 60 s while the driver was down; outages " << monitor.stats().outages << "\n"
        << Leftovers();
    EXPECT_TRUE(Eventually([&] { return absl::Now() - killed >= absl::Seconds(1); }, absl::Seconds(5)));
    EXPECT_TRUE(d.process.Start());
    spdlog::info("test: berth-csi restarted; registering it");
    directory_.Add(kDriverA, kNode, "unix://" + d.process.socket());
    const client::DriverMonitor::Stats after = monitor.stats();
    down_calls +=
        (after.connection_failures - before.connection_failures) + (after.failed_probes - before.failed_probes);
    skipped += after.skipped - before.skipped;
    return absl::Now();
  };
  // Twice while the claims are created and provisioned: 40 of the first 100
  // exist when it dies, the other 60 are created while it is down; the same
  // with the second 100.
  for (int i = 0; i < 40; ++i) NewClaim(name(i), "class-a", "", "16Mi");
  outage([&] {
    for (int i = 40; i < 100; ++i) NewClaim(name(i), "class-a", "", "16Mi");
  });
  for (int i = 100; i < 140; ++i) NewClaim(name(i), "class-a", "", "16Mi");
  absl::Time registered = outage([&] {
    for (int i = 140; i < kClaims; ++i) NewClaim(name(i), "class-a", "", "16Mi");
  });
  ASSERT_TRUE(Eventually([&] { return bound() == kClaims; }, absl::Seconds(120)))
      << bound() << " bound; resumed " << monitor.stats().resumed << "\n"
      << Leftovers();
  recoveries.push_back(absl::Now() - registered);
  EXPECT_EQ(PoolVolumes(d).size(), static_cast<size_t>(kClaims));
  // Once while they are deleted: it dies as the deletions start.
  size_t pvs_at_kill = 0;
  registered = outage([&] {
    for (int i = 0; i < kClaims; ++i) {
      ASSERT_TRUE(registry_->Delete(K("persistentvolumeclaims"), "default", name(i)).ok());
    }
    pvs_at_kill = Count("persistentvolumes");
  });
  EXPECT_GT(pvs_at_kill, 0u);
  ASSERT_TRUE(Eventually(
      [&] { return Count("persistentvolumeclaims") == 0 && Count("persistentvolumes") == 0 && PoolVolumes(d).empty(); },
      absl::Seconds(120)))
      << "resumed " << monitor.stats().resumed << "\n"
      << Leftovers();
  recoveries.push_back(absl::Now() - registered);
  const client::DriverMonitor::Stats s = monitor.stats();
  std::cout << "[ FIGURES  ] 200 claims, 3 outages: done " << absl::FormatDuration(recoveries[0])
            << " after the 2nd re-registration (all Bound) and " << absl::FormatDuration(recoveries[1])
            << " after the 3rd (all deleted); CSI calls attempted while the driver was down: " << down_calls
            << " (of them probes: " << s.failed_probes << "); calls not made because it was down: " << skipped
            << "; outages seen: " << s.outages << "; keys resumed: " << s.resumed
            << "; PVs left when the 3rd outage was noticed: " << pvs_at_kill << "\n";
  // Seconds here, 1-4 s on an idle machine; a key left to its backoff would
  // wait minutes. The bound is loose because CI runs this beside other
  // sanitized tests on two cores; that the parked keys were resumed at the
  // registration is what shows nothing waited for its backoff.
  for (absl::Duration r : recoveries) EXPECT_LE(r, absl::Seconds(60));
  EXPECT_GT(s.resumed, 0);
}

}  // namespace
}  // namespace berth::testing
