// The fixture every controller test starts from: a durable store in a temp
// dir and the registry over it (bootstrapped), with Create/Get/PatchStatus
// helpers. With a fake CSI driver: fake_csi_fixture.h.
//
//   class PodGcTest : public testing::ControllerTest {
//    protected:
//     void SetUp() override {
//       ControllerTest::SetUp();
//       if (HasFatalFailure()) return;
//       ... informers and the controller over *registry_ ...
//     }
//   };
//
// The store and the temp dir go with the fixture, also when a test fails;
// controllers and informers a test starts are its own to stop (in its
// TearDown, which runs first).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "apiserver/registry.h"
#include "common/testing/temp_dir.h"
#include "controllers/testing/helpers.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "store/store.h"

namespace berth::controllers::testing {

class ControllerTest : public ::testing::Test {
 protected:
  using json = nlohmann::json;

  void SetUp() override {
    auto store = store::Store::Open({.path = dir_.path() + "/state.db"});
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    registry_ = std::make_unique<apiserver::Registry>(*store_);
    if (storage_protection_) registry_->EnableStorageProtectionAdmission(true);  // as berth up runs it
    ASSERT_TRUE(registry_->Bootstrap().ok());
  }

  // Creates `obj` (EXPECTs success); the stored object, or null.
  json Create(std::string_view resource, std::string_view group, const std::string& ns, const json& obj) {
    auto got = registry_->Create(K(resource, group), ns, obj);
    EXPECT_TRUE(got.ok()) << got.status();
    return got.ok() ? *got : json();
  }
  // The stored object, or null when there is none.
  json Get(std::string_view resource, std::string_view group, const std::string& ns, const std::string& name) {
    auto got = registry_->Get(K(resource, group), ns, name);
    return got.ok() ? *got : json();
  }
  // A JSON merge patch of the object's status (EXPECTs success).
  void PatchStatus(std::string_view resource, std::string_view group, const std::string& ns, const std::string& name,
                   const json& status) {
    auto st = registry_->Patch(K(resource, group), ns, name, json({{"status", status}}).dump(),
                               apiserver::PatchType::kMerge, apiserver::Subresource::kStatus);
    EXPECT_TRUE(st.ok()) << st.status();
  }

  berth::testing::TempDir dir_;
  // Set in a derived constructor: the registry admits as `berth up` runs it
  // (kubernetes.io/pvc-protection and pv-protection finalizers).
  bool storage_protection_ = false;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<apiserver::Registry> registry_;
};

}  // namespace berth::controllers::testing
