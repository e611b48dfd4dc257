// The fixture of client tests that write through a real registry: a durable
// store in a temp dir and the registry over it (bootstrapped), and a claim
// to write about.
//
//   class MutateFromTest : public testing::RegistryTest {};
//   TEST_F(MutateFromTest, ...) { const json a = Claim("a"); ... *registry_ ... }
//
// The store and the temp dir go with the fixture, also when a test fails.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "api/kinds.h"
#include "apiserver/registry.h"
#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "store/store.h"

namespace berth::client::testing {

class RegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = store::Store::Open({.path = dir_.path() + "/state.db"});
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    registry_ = std::make_unique<apiserver::Registry>(*store_);
    ASSERT_TRUE(registry_->Bootstrap().ok());
  }
  // Creates claim `name` (1Gi, ReadWriteOnce) in "default" (EXPECTs
  // success); the stored object, or null.
  nlohmann::json Claim(const std::string& name) {
    auto got = registry_->Create(
        *api::FindResource("", "persistentvolumeclaims"), "default",
        {{"metadata", {{"name", name}}},
         {"spec", {{"accessModes", {"ReadWriteOnce"}}, {"resources", {{"requests", {{"storage", "1Gi"}}}}}}}});
    EXPECT_TRUE(got.ok()) << got.status();
    return got.ok() ? *got : nlohmann::json();
  }

  berth::testing::TempDir dir_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<apiserver::Registry> registry_;
};

}  // namespace berth::client::testing
