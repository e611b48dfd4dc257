#include "client/remote_api.h"

#include <set>

#include "apiserver/control_plane.h"
#include "client/informer.h"
#include "common/testing/eventually.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace berth::client {
namespace {

using nlohmann::json;

const api::KindInfo& Claims() { return *api::FindResource("", "persistentvolumeclaims"); }
const api::KindInfo& Pods() { return *api::FindResource("", "pods"); }

json Claim(const std::string& name) {
  return {{"apiVersion", "v1"},
          {"kind", "PersistentVolumeClaim"},
          {"metadata", {{"name", name}, {"labels", {{"app", "web"}}}}},
          {"spec",
           {{"accessModes", {"ReadWriteOnce"}},
            {"storageClassName", "none"},
            {"resources", {{"requests", {{"storage", "1Gi"}}}}}}}};
}

class RemoteApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    apiserver::ControlPlane::Options o;
    o.data_dir = dir_.Join("api");
    o.api_address = "";  // the unix socket only, as a node agent uses
    auto cp = apiserver::ControlPlane::Start(o);
    ASSERT_TRUE(cp.ok()) << cp.status();
    cp_ = std::move(*cp);
    api_ = RemoteApi::ForDataDir(dir_.Join("api"));
  }

  berth::testing::TempDir dir_;
  std::unique_ptr<apiserver::ControlPlane> cp_;
  std::unique_ptr<RemoteApi> api_;
};

TEST_F(RemoteApiTest, VerbsAndTheirErrorsAreTheRegistrys) {
  auto created = api_->Create(Claims(), "default", Claim("data"));
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_FALSE((*created)["metadata"].value("uid", "").empty());
  EXPECT_EQ(api_->Create(Claims(), "default", Claim("data")).status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(api_->Get(Claims(), "default", "nope").status().code(), absl::StatusCode::kNotFound);

  auto got = api_->GetShared(Claims(), "default", "data");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((**got)["metadata"]["uid"], (*created)["metadata"]["uid"]);

  // A stale resourceVersion is a conflict (Aborted), as in process.
  json stale = *created;
  json fresh = *created;
  fresh["metadata"]["labels"]["tier"] = "db";
  ASSERT_TRUE(api_->Update(Claims(), "default", "data", fresh, apiserver::Subresource::kMain).ok());
  stale["metadata"]["labels"]["tier"] = "cache";
  EXPECT_EQ(api_->Update(Claims(), "default", "data", stale, apiserver::Subresource::kMain).status().code(),
            absl::StatusCode::kAborted);

  // Status subresource and a merge patch.
  auto patched = api_->Patch(Claims(), "default", "data", R"({"status":{"phase":"Pending"}})",
                             apiserver::PatchType::kMerge, apiserver::Subresource::kStatus);
  ASSERT_TRUE(patched.ok()) << patched.status();
  EXPECT_EQ((*patched)["status"]["phase"], "Pending");
  EXPECT_EQ(api_->Update(Claims(), "default", "data", fresh, apiserver::Subresource::kMainAndStatus).status().code(),
            absl::StatusCode::kInvalidArgument);

  // Invalid objects are InvalidArgument with the Registry's message.
  json bad = Claim("bad");
  bad["spec"].erase("accessModes");
  auto refused = api_->Create(Claims(), "default", bad);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()), ::testing::HasSubstr("accessModes"));

  // Delete with a uid precondition that does not match, then for real.
  apiserver::DeleteOptions wrong;
  wrong.uid = "not-the-uid";
  EXPECT_EQ(api_->Delete(Claims(), "default", "data", wrong).status().code(), absl::StatusCode::kAborted);
  apiserver::DeleteOptions right;
  right.uid = (*created)["metadata"]["uid"].get<std::string>();
  ASSERT_TRUE(api_->Delete(Claims(), "default", "data", right).ok());
}

TEST_F(RemoteApiTest, ListReadsEveryPageAndAPageWhenAsked) {
  std::vector<std::pair<std::string, json>> many;
  for (int i = 0; i < 25; ++i) many.emplace_back("default", Claim("c" + std::to_string(i)));
  for (const auto& r : api_->CreateAll(Claims(), many)) ASSERT_TRUE(r.ok()) << r.status();

  auto all = api_->List(Claims(), "default", {});
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->items.size(), 25u);
  EXPECT_GT(all->resource_version, 0);
  EXPECT_EQ(all->items[0].value("kind", ""), "PersistentVolumeClaim");

  apiserver::ListOptions page;
  page.limit = 10;
  auto first = api_->List(Claims(), "default", page);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->items.size(), 10u);
  EXPECT_FALSE(first->continue_token.empty());
  std::set<std::string> names;
  apiserver::ListOptions more = page;
  auto r = first;
  while (true) {
    for (const auto& item : r->items) names.insert(item["metadata"]["name"].get<std::string>());
    if (r->continue_token.empty()) break;
    more.continue_token = r->continue_token;
    r = api_->List(Claims(), "default", more);
    ASSERT_TRUE(r.ok()) << r.status();
  }
  EXPECT_EQ(names.size(), 25u);

  apiserver::ListOptions selected;
  selected.labels = *api::LabelSelector::Parse("app=web");
  EXPECT_EQ(api_->List(Claims(), "default", selected).status().code(), absl::StatusCode::kUnimplemented);
}

TEST_F(RemoteApiTest, WatchDeliversChangesInOrderAndStopsWhenDestroyed) {
  auto list = api_->List(Claims(), "", {});
  ASSERT_TRUE(list.ok());
  auto stream = api_->Watch(Claims(), "", std::to_string(list->resource_version), {});
  ASSERT_TRUE(stream.ok()) << stream.status();
  ASSERT_TRUE(api_->Create(Claims(), "default", Claim("w")).ok());
  ASSERT_TRUE(api_->Patch(Claims(), "default", "w", R"({"metadata":{"labels":{"x":"y"}}})",
                          apiserver::PatchType::kMerge, apiserver::Subresource::kMain)
                  .ok());
  ASSERT_TRUE(cp_->registry().Delete(Claims(), "default", "w").ok());

  std::vector<store::EventType> types;
  int64_t last_rv = 0;
  // pvc-protection keeps a deleted claim until its finalizer goes: ADDED,
  // MODIFIED (labels), MODIFIED (deletionTimestamp) at least.
  while (types.size() < 3) {
    auto e = stream->watcher->Next(absl::Seconds(10));
    ASSERT_TRUE(e.has_value()) << "no event after " << types.size();
    EXPECT_EQ(e->resource, "persistentvolumeclaims");
    EXPECT_EQ((*e->object)["metadata"]["name"], "w");
    EXPECT_EQ(e->object->value("kind", ""), "PersistentVolumeClaim");
    EXPECT_GT(e->resource_version, last_rv);
    last_rv = e->resource_version;
    types.push_back(e->type);
  }
  EXPECT_EQ(types[0], store::EventType::kAdded);
  EXPECT_EQ(types[1], store::EventType::kModified);
  EXPECT_FALSE(stream->watcher->ended());
  const absl::Time before = absl::Now();
  stream->watcher.reset();  // cancels the stream and joins its reader
  EXPECT_LT(absl::Now() - before, absl::Seconds(5));
}

TEST_F(RemoteApiTest, AWatchEndsWhenTheServerGoesAway) {
  auto stream = api_->Watch(Pods(), "", "0", {});
  ASSERT_TRUE(stream.ok());
  cp_.reset();  // the API server stops
  auto e = stream->watcher->Next(absl::Seconds(30));
  EXPECT_FALSE(e.has_value());
  EXPECT_TRUE(stream->watcher->ended());
  EXPECT_EQ(api_->Get(Pods(), "default", "x").status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(RemoteApiTest, AnInformerOverTheSocketSeesWhatTheRegistryWrites) {
  Informer informer(*api_, Claims());
  informer.Start();
  ASSERT_TRUE(cp_->registry().Create(Claims(), "default", Claim("seen")).ok());
  EXPECT_TRUE(
      berth::testing::Eventually([&] { return informer.Get("default", "seen").has_value(); }, absl::Seconds(30)));
  informer.Stop();
}

}  // namespace
}  // namespace berth::client
