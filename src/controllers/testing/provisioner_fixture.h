// A test fixture: the provisioner, the PV binder and the resizer against
// a fake CSI driver over a real unix socket, on a durable store (what
// provisioner_test and provisioner_rules_test share; FakeCsiTest below).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"

#include "apiserver/registry.h"
#include "client/informer.h"
#include "common/clock.h"
#include "common/testing/temp_dir.h"
#include "controllers/testing/fake_csi_fixture.h"
#include "controllers/testing/helpers.h"
#include "controllers/volume/provisioner.h"
#include "controllers/volume/pv_binder.h"
#include "controllers/volume/resizer.h"
#include "gtest/gtest.h"
#include "store/store.h"

namespace berth::controllers::testing {

using nlohmann::json;

inline json Claim(const std::string& name, const std::string& cls, const std::string& size = "1Gi") {
  return {{"apiVersion", "v1"},
          {"kind", "PersistentVolumeClaim"},
          {"metadata", {{"name", name}}},
          {"spec",
           {{"accessModes", {"ReadWriteOnce"}},
            {"storageClassName", cls},
            {"resources", {{"requests", {{"storage", size}}}}}}}};
}

class ProvisionerTest : public FakeCsiTest {
 protected:
  ProvisionerTest() { storage_protection_ = true; }
  void TearDown() override {
    if (resizer_) resizer_->Stop();
    if (binder_) binder_->Stop();  // first: it hands claims to the provisioner
    if (provisioner_) provisioner_->Stop();
    for (auto* i : {&claims_, &volumes_, &classes_, &pods_, &nodes_, &csinodes_}) {
      if (*i) (*i)->Stop();
    }
  }
  void Start(const std::string& node_for_driver = "") {
    RegisterDriver(node_for_driver);
    // Probes of a down driver come quickly here (tests restart it at once).
    monitor_ = std::make_unique<DriverMonitor>(directory_, RealClock(),
                                               DriverMonitorOptions{.probe_timeout = absl::Seconds(1),
                                                                    .probe_initial = absl::Milliseconds(50),
                                                                    .probe_max = absl::Milliseconds(200),
                                                                    .dial_timeout = absl::Seconds(1)});
    claims_ = std::make_unique<Informer>(*registry_, K("persistentvolumeclaims"));
    volumes_ = std::make_unique<Informer>(*registry_, K("persistentvolumes"));
    classes_ = std::make_unique<Informer>(*registry_, K("storageclasses", "storage.k8s.io"));
    pods_ = std::make_unique<Informer>(*registry_, K("pods"));
    nodes_ = std::make_unique<Informer>(*registry_, K("nodes"));
    csinodes_ = std::make_unique<Informer>(*registry_, K("csinodes", "storage.k8s.io"));
    PvBinder::Options binder_options;
    if (hand_over_in_memory_) {
      // As berth up's controller manager: the binder hands claims of our
      // driver to the provisioner without the hand-over write. (The
      // provisioner exists before the binder's workers start, and is
      // stopped after them.)
      binder_options.provisioner_runs_here = [](const std::string& p) { return p == kDriver; };
      binder_options.hand_over = [this](const std::string& p, const std::string& key, const std::string& uid) {
        if (p != kDriver) return false;
        provisioner_->TakeOver(key, uid);
        return true;
      };
    }
    binder_ = std::make_unique<PvBinder>(*registry_, BinderInformers{*claims_, *volumes_, *classes_, *pods_, *nodes_},
                                         std::move(binder_options));
    provisioner_ = std::make_unique<Provisioner>(
        *registry_, directory_, ProvisionerInformers{*claims_, *volumes_, *classes_, *nodes_, *csinodes_, nullptr},
        Provisioner::Options{.driver = kDriver,
                             .workers = 2,
                             .rpc_timeout = absl::Seconds(10),
                             .monitor = monitor_.get(),
                             .populator = populator_,
                             .on_capacity_change = [this](const std::string& node) {
                               absl::MutexLock lock(&capacity_mu_);
                               capacity_changes_.push_back(node);
                             }});
    resizer_ = std::make_unique<Resizer>(*registry_, directory_, *claims_, *volumes_,
                                         Resizer::Options{.driver = kDriver,
                                                          .workers = 1,
                                                          .rpc_timeout = absl::Seconds(10),
                                                          .monitor = monitor_.get(),
                                                          .clock = &resize_clock_});
    binder_->RegisterHandlers();
    provisioner_->RegisterHandlers();
    resizer_->RegisterHandlers();
    for (Informer* i : {classes_.get(), nodes_.get(), csinodes_.get(), pods_.get(), volumes_.get(), claims_.get()}) {
      i->Start();
      ASSERT_TRUE(i->WaitForSync(absl::Seconds(10)));
    }
    binder_->Start();
    provisioner_->Start();
    resizer_->Start();
  }
  // The nodes the provisioner named after each volume it created or deleted.
  std::vector<std::string> CapacityChanges() {
    absl::MutexLock lock(&capacity_mu_);
    return capacity_changes_;
  }
  void Class(const std::string& name, const std::string& binding = "Immediate", json params = json::object()) {
    Create("storageclasses", "storage.k8s.io", "",
           {{"metadata", {{"name", name}}},
            {"provisioner", kDriver},
            {"volumeBindingMode", binding},
            {"reclaimPolicy", "Delete"},
            {"parameters", params},
            {"allowVolumeExpansion", true}});
  }
  // Class `name` (Immediate) whose provisioner secret `secret` in "default"
  // must exist before its claims can be provisioned: until then the
  // provisioner takes them and retries, writing and sending nothing.
  void ClassNeedingSecret(const std::string& name, const std::string& secret) {
    Class(name, "Immediate",
          {{"csi.storage.k8s.io/provisioner-secret-name", secret},
           {"csi.storage.k8s.io/provisioner-secret-namespace", "default"}});
  }
  // An edit no controller acts on: the label app=x.
  void Label(std::string_view resource, const std::string& ns, const std::string& name) {
    auto st = registry_->Patch(K(resource), ns, name, R"({"metadata":{"labels":{"app":"x"}}})",
                               apiserver::PatchType::kMerge, apiserver::Subresource::kMain);
    ASSERT_TRUE(st.ok()) << st.status();
  }
  void Grow(const std::string& name, const std::string& size) {
    auto st = registry_->Patch(K("persistentvolumeclaims"), "default", name,
                               json({{"spec", {{"resources", {{"requests", {{"storage", size}}}}}}}}).dump(),
                               apiserver::PatchType::kMerge, apiserver::Subresource::kMain);
    ASSERT_TRUE(st.ok()) << st.status();
  }
  json Condition(const json& claim, const std::string& type) {
    for (const auto& c : claim.value("status", json::object()).value("conditions", json::array())) {
      if (c.value("type", "") == type) return c;
    }
    return json();
  }
  json Get(std::string_view resource, const std::string& ns, const std::string& name) {
    auto got = registry_->Get(K(resource), ns, name);
    return got.ok() ? *got : json();
  }
  std::string ClaimPhase(const std::string& name) {
    json o = Get("persistentvolumeclaims", "default", name);
    return o.is_null() ? "<gone>" : o.value("status", json::object()).value("phase", "");
  }

  VolumePopulator* populator_ = nullptr;  // set before Start(); outlives the controllers
  // Set before Start(): the binder hands claims over in memory (berth up's
  // way), or writes the hand-over annotations (an external provisioner's).
  bool hand_over_in_memory_ = true;
  std::unique_ptr<DriverMonitor> monitor_;  // outlives the controllers
  FakeClock resize_clock_;                  // the resizer's slow retry
  std::unique_ptr<Informer> claims_, volumes_, classes_, pods_, nodes_, csinodes_;
  std::unique_ptr<PvBinder> binder_;
  std::unique_ptr<Provisioner> provisioner_;
  absl::Mutex capacity_mu_;
  std::vector<std::string> capacity_changes_ ABSL_GUARDED_BY(capacity_mu_);
  std::unique_ptr<Resizer> resizer_;
};

}  // namespace berth::controllers::testing
