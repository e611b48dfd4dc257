// The store tests' fixture and objects, shared by store_test.cc and
// store_cache_test.cc (one test binary: the fixture class is one type).
#pragma once

#include <map>
#include <memory>
#include <string>

#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"
#include "store/store.h"

namespace berth::store::testing {

inline Object Pvc(const std::string& name, const std::string& ns = "default",
                  const std::map<std::string, std::string>& labels = {}) {
  Object o = {{"apiVersion", "v1"},
              {"kind", "PersistentVolumeClaim"},
              {"metadata", {{"name", name}, {"namespace", ns}}},
              {"spec", {{"resources", {{"requests", {{"storage", "1Gi"}}}}}}}};
  if (!labels.empty()) o["metadata"]["labels"] = labels;
  return o;
}

// An ownerReference to `o` (what the store's garbage collector follows).
inline Object OwnerRef(const Object& o) {
  return Object{{"apiVersion", "v1"}, {"kind", "X"}, {"name", o["metadata"]["name"]}, {"uid", o["metadata"]["uid"]}};
}

inline int64_t Rv(const Object& o) { return std::stoll(o["metadata"]["resourceVersion"].get<std::string>()); }

class StoreTest : public ::testing::Test {
 protected:
  std::unique_ptr<Store> Open(size_t history = 100000) {
    auto s = Store::Open({.path = dir_.Join("state.db"), .history = history});
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(*s) : nullptr;
  }
  berth::testing::TempDir dir_;
};

}  // namespace berth::store::testing
