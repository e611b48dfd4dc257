#include "apiserver/admission.h"

#include "apiserver/registry.h"
#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"

namespace berth::apiserver {
namespace {

using nlohmann::json;

json Toleration(const std::string& key) {
  return {{"key", key}, {"operator", "Exists"}, {"effect", "NoExecute"}, {"tolerationSeconds", 300}};
}

TEST(DefaultTolerationSecondsTest, AddsBothTolerationsToAPodWithout) {
  json pod = {{"spec", {{"containers", json::array()}}}};
  AddDefaultTolerations(pod);
  EXPECT_EQ(pod["spec"]["tolerations"],
            json::array({Toleration("node.kubernetes.io/not-ready"), Toleration("node.kubernetes.io/unreachable")}));
  // Idempotent.
  json again = pod;
  AddDefaultTolerations(again);
  EXPECT_EQ(again, pod);
}

TEST(DefaultTolerationSecondsTest, KeepsTheUsersOwnAndAddsOnlyWhatIsMissing) {
  json mine = {{"key", "node.kubernetes.io/unreachable"},
               {"operator", "Exists"},
               {"effect", "NoExecute"},
               {"tolerationSeconds", 6000}};
  json pod = {{"spec", {{"tolerations", {mine, {{"key", "dedicated"}, {"value", "db"}, {"effect", "NoSchedule"}}}}}}};
  AddDefaultTolerations(pod);
  ASSERT_EQ(pod["spec"]["tolerations"].size(), 3u);
  EXPECT_EQ(pod["spec"]["tolerations"][0], mine);
  EXPECT_EQ(pod["spec"]["tolerations"][2], Toleration("node.kubernetes.io/not-ready"));
}

TEST(DefaultTolerationSecondsTest, AnEmptyKeyOrEffectCoversTheTaint) {
  // Tolerates everything: nothing added.
  json all = {{"spec", {{"tolerations", {{{"operator", "Exists"}}}}}}};
  AddDefaultTolerations(all);
  EXPECT_EQ(all["spec"]["tolerations"].size(), 1u);
  // A not-ready toleration of any effect covers NoExecute; a NoSchedule one does not.
  json pod = {{"spec",
               {{"tolerations",
                 {{{"key", "node.kubernetes.io/not-ready"}, {"operator", "Exists"}},
                  {{"key", "node.kubernetes.io/unreachable"}, {"operator", "Exists"}, {"effect", "NoSchedule"}}}}}}};
  AddDefaultTolerations(pod);
  ASSERT_EQ(pod["spec"]["tolerations"].size(), 3u);
  EXPECT_EQ(pod["spec"]["tolerations"][2], Toleration("node.kubernetes.io/unreachable"));
}

TEST(DefaultTolerationSecondsTest, LeavesNonPodsAlone) {
  json no_spec = {{"metadata", {{"name", "x"}}}};
  AddDefaultTolerations(no_spec);
  EXPECT_FALSE(no_spec.contains("spec"));
}

// The registry runs the plugin for every writer, on create and on update.
TEST(DefaultTolerationSecondsTest, TheRegistryAdmitsPodsThroughIt) {
  berth::testing::TempDir dir;
  auto store = store::Store::Open({.path = dir.path() + "/state.db"});
  ASSERT_TRUE(store.ok()) << store.status();
  Registry registry(**store);
  ASSERT_TRUE(registry.Bootstrap().ok());
  const api::KindInfo& pods = *api::FindResource("", "pods");
  json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", {{"name", "p"}}},
              {"spec", {{"containers", {{{"name", "c"}, {"image", "busybox"}}}}}}};
  auto created = registry.Create(pods, "default", pod);
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ((*created)["spec"]["tolerations"].size(), 2u);
  // An update that drops them gets them back.
  json update = *created;
  update["spec"].erase("tolerations");
  auto updated = registry.Update(pods, "default", "p", update, Subresource::kMain);
  ASSERT_TRUE(updated.ok()) << updated.status();
  EXPECT_EQ((*updated)["spec"]["tolerations"], (*created)["spec"]["tolerations"]);
}

}  // namespace
}  // namespace berth::apiserver
