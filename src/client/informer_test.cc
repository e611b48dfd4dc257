#include "client/informer.h"
#include "apiserver/registry.h"

#include <atomic>
#include <set>
#include <thread>

#include "absl/synchronization/notification.h"
#include "api/types/core.h"
#include "client/object.h"
#include "common/testing/eventually.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace berth::client {
namespace {

using testing::Eventually;

const api::KindInfo& Claims() { return *api::FindResource("", "persistentvolumeclaims"); }

json Claim(const std::string& name) {
  return {{"apiVersion", "v1"},
          {"kind", "PersistentVolumeClaim"},
          {"metadata", {{"name", name}}},
          {"spec", {{"accessModes", {"ReadWriteOnce"}}, {"resources", {{"requests", {{"storage", "1Gi"}}}}}}}};
}

// Every test runs twice: objects held parsed, and held packed (compact).
class InformerTest : public ::testing::TestWithParam<bool> {
 protected:
  void Open(size_t watcher_queue = 100000, size_t cache_bytes = 8 << 20) {
    store_ = std::move(*store::Store::Open(
        {.path = dir_.path() + "/state.db", .watcher_queue = watcher_queue, .cache_bytes = cache_bytes}));
    registry_ = std::make_unique<apiserver::Registry>(*store_);
    ASSERT_TRUE(registry_->Bootstrap().ok());
  }
  berth::testing::TempDir dir_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<apiserver::Registry> registry_;
};

TEST_P(InformerTest, ListsThenFollowsAddsUpdatesAndDeletes) {
  Open();
  ASSERT_TRUE(registry_->Create(Claims(), "default", Claim("before")).ok());
  absl::Mutex mu;
  std::vector<std::string> seen;
  Informer informer(*registry_, Claims(), absl::Minutes(5), /*compact=*/GetParam());
  informer.AddHandlers({
      .on_add =
          [&](const json& o) {
            absl::MutexLock l(&mu);
            seen.push_back("add " + ObjectKey(o));
          },
      .on_update =
          [&](const json&, const json& o) {
            absl::MutexLock l(&mu);
            seen.push_back("update " + ObjectKey(o));
          },
      .on_delete =
          [&](const json& o) {
            absl::MutexLock l(&mu);
            seen.push_back("delete " + ObjectKey(o));
          },
  });
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(absl::Seconds(10)));
  EXPECT_TRUE(informer.Get("default", "before").has_value());
  ASSERT_TRUE(registry_->Create(Claims(), "default", Claim("after")).ok());
  ASSERT_TRUE(registry_
                  ->Patch(Claims(), "default", "after", R"({"metadata":{"labels":{"a":"b"}}})",
                          apiserver::PatchType::kMerge, apiserver::Subresource::kMain)
                  .ok());
  ASSERT_TRUE(registry_->Delete(Claims(), "default", "before").ok());
  ASSERT_TRUE(Eventually([&] {
    absl::MutexLock l(&mu);
    return seen.size() >= 4;
  }));
  {
    absl::MutexLock l(&mu);
    EXPECT_THAT(seen, ::testing::ElementsAre("add default/before", "add default/after", "update default/after",
                                             "delete default/before"));
  }
  EXPECT_FALSE(informer.Get("default", "before").has_value());
  EXPECT_EQ((*informer.Get("default", "after"))["metadata"]["labels"]["a"], "b");
  EXPECT_EQ(informer.List("default").size(), 1u);
  EXPECT_EQ(informer.List("other").size(), 0u);
  EXPECT_THAT(informer.Keys(), ::testing::ElementsAre("default/after"));
}

TEST_P(InformerTest, FirstListComesInPagesAndTheWatchFollowsIt) {
  // More than two pages of kListPageSize: every object listed once, in
  // two namespaces, and the watch goes on from the first page's version.
  Open();
  auto ns = registry_->Create(*api::FindResource("", "namespaces"), "",
                              {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", "other"}}}});
  ASSERT_TRUE(ns.ok()) << ns.status();
  const size_t n = 2 * Informer::kListPageSize + 37;
  std::vector<std::pair<std::string, json>> claims;
  for (size_t i = 0; i < n; ++i) {
    claims.emplace_back(i % 3 == 0 ? "other" : "default", Claim("c-" + std::to_string(i)));
  }
  for (const auto& r : registry_->CreateAll(Claims(), claims)) ASSERT_TRUE(r.ok()) << r.status();
  absl::Mutex mu;
  std::multiset<std::string> added;
  Informer informer(*registry_, Claims(), absl::Minutes(5), /*compact=*/GetParam());
  informer.AddHandlers({.on_add =
                            [&](const json& o) {
                              absl::MutexLock l(&mu);
                              added.insert(ObjectKey(o));
                            },
                        .on_update = nullptr,
                        .on_delete = nullptr});
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(absl::Seconds(30)));
  {
    absl::MutexLock l(&mu);
    EXPECT_EQ(added.size(), n);
    EXPECT_EQ(std::set<std::string>(added.begin(), added.end()).size(), n) << "each object added once";
  }
  EXPECT_EQ(informer.List().size(), n);
  EXPECT_EQ(informer.List("other").size(), (n + 2) / 3);
  ASSERT_TRUE(registry_->Create(Claims(), "default", Claim("later")).ok());
  EXPECT_TRUE(Eventually([&] { return informer.Get("default", "later").has_value(); }));
  informer.Stop();
}

TEST_P(InformerTest, NotSyncedUntilEveryHandlerHasSeenTheFirstList) {
  Open();
  ASSERT_TRUE(registry_->Create(Claims(), "default", Claim("one")).ok());
  absl::Notification entered, release;
  std::atomic<int> adds{0};
  Informer informer(*registry_, Claims(), absl::Minutes(5), /*compact=*/GetParam());
  informer.AddHandlers({.on_add =
                            [&](const json&) {
                              entered.Notify();
                              release.WaitForNotification();
                              ++adds;
                            },
                        .on_update = nullptr,
                        .on_delete = nullptr});
  informer.Start();
  ASSERT_TRUE(entered.WaitForNotificationWithTimeout(absl::Seconds(10)));
  // The list is in the cache, but its add is still being handled: whoever
  // reads "not handled" as "gone" must not be told the informer is synced.
  EXPECT_TRUE(informer.Get("default", "one").has_value());
  EXPECT_FALSE(informer.WaitForSync(absl::Milliseconds(100)));
  release.Notify();
  ASSERT_TRUE(informer.WaitForSync(absl::Seconds(10)));
  EXPECT_EQ(adds.load(), 1);
  informer.Stop();
}

TEST_P(InformerTest, AWatchThatFallsBehindRelistsAndConverges) {
  Open(/*watcher_queue=*/2);
  absl::Notification release;
  std::atomic<int> deletes{0};
  Informer informer(*registry_, Claims(), absl::Minutes(5), /*compact=*/GetParam());
  informer.AddHandlers({.on_add = [&](const json&) { release.WaitForNotification(); },
                        .on_update = nullptr,
                        .on_delete = [&](const json&) { deletes.fetch_add(1); }});
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(absl::Seconds(10)));
  // The handler blocks on the first add while more changes pile up than
  // the watch may queue: the store ends the watch and the informer relists.
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(registry_->Create(Claims(), "default", Claim("c" + std::to_string(i))).ok());
  ASSERT_TRUE(registry_->Delete(Claims(), "default", "c0").ok());
  release.Notify();
  EXPECT_TRUE(Eventually([&] { return informer.List().size() == 9 && !informer.Get("default", "c0"); }));
}

TEST_P(InformerTest, IndexesFollowAddsUpdatesDeletesAndRelists) {
  Open();
  ASSERT_TRUE(registry_->Create(Claims(), "default", Claim("a")).ok());
  Informer informer(*registry_, Claims(), absl::Minutes(5), /*compact=*/GetParam());
  informer.AddIndex("label", [](const json& o) -> std::vector<std::string> {
    const json& labels = o["metadata"].value("labels", json::object());
    if (!labels.contains("tier")) return {};
    return {labels["tier"].get<std::string>()};
  });
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(absl::Seconds(10)));
  auto names = [&](const std::string& v) {
    std::vector<std::string> out;
    for (const auto& o : informer.ByIndex("label", v)) out.push_back(o["metadata"]["name"]);
    return out;
  };
  EXPECT_TRUE(names("gold").empty());
  auto label = [&](const std::string& name, const std::string& tier) {
    ASSERT_TRUE(registry_
                    ->Patch(Claims(), "default", name, json({{"metadata", {{"labels", {{"tier", tier}}}}}}).dump(),
                            apiserver::PatchType::kMerge, apiserver::Subresource::kMain)
                    .ok());
  };
  label("a", "gold");
  ASSERT_TRUE(registry_->Create(Claims(), "default", Claim("b")).ok());
  label("b", "gold");
  ASSERT_TRUE(Eventually([&] { return names("gold") == std::vector<std::string>{"a", "b"}; }));
  label("a", "silver");
  ASSERT_TRUE(
      Eventually([&] { return names("gold") == std::vector<std::string>{"b"} && names("silver").size() == 1; }));
  ASSERT_TRUE(registry_->Delete(Claims(), "default", "b").ok());
  ASSERT_TRUE(Eventually([&] { return names("gold").empty(); }));
  EXPECT_TRUE(informer.ByIndex("no-such-index", "gold").empty());
}

TEST_P(InformerTest, HandlersAddedWhileRunningSeeEveryObjectOnce) {
  Open();
  for (int i = 0; i < 50; ++i)
    ASSERT_TRUE(registry_->Create(Claims(), "default", Claim("old-" + std::to_string(i))).ok());
  Informer informer(*registry_, Claims(), absl::Minutes(5), /*compact=*/GetParam());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(absl::Seconds(10)));
  // Objects keep coming while the late handler is added: each must reach it
  // (replayed or as an event), none may be missed.
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (int i = 0; i < 200; ++i) {
      EXPECT_TRUE(registry_->Create(Claims(), "default", Claim("new-" + std::to_string(i))).ok());
    }
    done = true;
  });
  // Objects are coming (the informer has seen the first) when the handler is added.
  EXPECT_TRUE(Eventually([&] { return informer.Get("default", "new-0").has_value(); }));
  absl::Mutex mu;
  std::set<std::string> seen;
  int deletes = 0;
  informer.AddHandlers({
      .on_add =
          [&](const json& o) {
            absl::MutexLock l(&mu);
            seen.insert(ObjectKey(o));
          },
      .on_update =
          [&](const json&, const json& o) {
            absl::MutexLock l(&mu);
            seen.insert(ObjectKey(o));
          },
      .on_delete =
          [&](const json&) {
            absl::MutexLock l(&mu);
            ++deletes;
          },
  });
  writer.join();
  ASSERT_TRUE(done);
  EXPECT_TRUE(Eventually([&] {
    absl::MutexLock l(&mu);
    return seen.size() == 250u;
  }));
  ASSERT_TRUE(registry_->Delete(Claims(), "default", "old-0").ok());
  EXPECT_TRUE(Eventually([&] {
    absl::MutexLock l(&mu);
    return deletes == 1;
  }));
  absl::MutexLock l(&mu);
  EXPECT_EQ(seen.size(), 250u);
  EXPECT_TRUE(seen.contains("default/old-0") && seen.contains("default/new-199"));
  informer.Stop();
}

TEST_P(InformerTest, DeliveredOnceTheHandlersHaveSeenTheStoresVersion) {
  Open();
  Informer informer(*registry_, Claims(), absl::Minutes(5), /*compact=*/GetParam());
  std::atomic<int> added{0};
  absl::Notification entered, release;
  informer.AddHandlers({.on_add =
                            [&](const json& o) {
                              if (o["metadata"]["name"] == "slow") {
                                entered.Notify();
                                release.WaitForNotification();
                              }
                              ++added;
                            },
                        .on_update = nullptr,
                        .on_delete = nullptr});
  EXPECT_FALSE(informer.Delivered(0)) << "not started";
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(absl::Seconds(10)));
  ASSERT_TRUE(Eventually([&] { return informer.Delivered(store_->ResourceVersion()); }));
  ASSERT_TRUE(registry_->Create(Claims(), "default", Claim("slow")).ok());
  const int64_t rv = store_->ResourceVersion();
  // The event is taken from the watch but its handler has not returned.
  ASSERT_TRUE(entered.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_FALSE(informer.Delivered(rv));
  EXPECT_EQ(added.load(), 0);
  release.Notify();
  ASSERT_TRUE(Eventually([&] { return informer.Delivered(rv); }));
  EXPECT_EQ(added.load(), 1);
  // Changes of other kinds move the store's version; the informer follows.
  ASSERT_TRUE(registry_->Create(*api::FindResource("", "namespaces"), "", {{"metadata", {{"name", "other"}}}}).ok());
  EXPECT_TRUE(Eventually([&] { return informer.Delivered(store_->ResourceVersion()); }));
}

}  // namespace
// Packed objects come back exactly as they went in (strings of any
// script, escapes, numbers), a parsed copy is shared while someone holds
// it, and the packed form is smaller than the object's JSON.
TEST_P(InformerTest, ObjectsComeBackAsTheyWentInAndAreSharedWhileHeld) {
  Open(/*watcher_queue=*/100000, /*cache_bytes=*/0);  // no store cache holds them
  json claim = Claim("a");
  claim["metadata"]["annotations"] = {{"note", "grüße \"quoted\" \\ 😀 \u0001"}, {"n", "12"}};
  claim["metadata"]["labels"] = {{"tier", "gold"}};
  ASSERT_TRUE(registry_->Create(Claims(), "default", claim).ok());
  Informer informer(*registry_, Claims(), absl::Minutes(5), /*compact=*/GetParam());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(absl::Seconds(10)));
  ASSERT_TRUE(registry_->Create(Claims(), "default", Claim("b")).ok());
  ASSERT_TRUE(Eventually([&] { return informer.Get("default", "b").has_value(); }));
  const json stored = *registry_->Get(Claims(), "default", "a");
  for (int i = 0; i < 2; ++i) {
    std::shared_ptr<const json> first = informer.GetSharedByKey("default/a");
    ASSERT_NE(first, nullptr);
    EXPECT_EQ(*first, stored);
    EXPECT_EQ(first->dump(), stored.dump());
    EXPECT_EQ(informer.GetSharedByKey("default/a"), first) << "a copy held is shared";
  }
  EXPECT_EQ(informer.Get("default", "b")->dump(), registry_->Get(Claims(), "default", "b")->dump());
  EXPECT_EQ(informer.List().size(), 2u);
  if (GetParam()) {
    EXPECT_GT(informer.PackedBytes(), 0u);
    EXPECT_LT(informer.PackedBytes(), stored.dump().size() + registry_->Get(Claims(), "default", "b")->dump().size());
  } else {
    EXPECT_EQ(informer.PackedBytes(), 0u);
  }
}

// Every controller that decodes one version of an object shares one decode;
// a new version (a new object) is decoded again, and an object that does
// not decode is an error every time (nothing kept).
TEST_P(InformerTest, DecodedViewsAreSharedPerObjectVersion) {
  Open();
  ASSERT_TRUE(registry_->Create(Claims(), "default", Claim("a")).ok());
  Informer informer(*registry_, Claims(), absl::Minutes(5), /*compact=*/GetParam());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(absl::Seconds(10)));
  std::shared_ptr<const json> v1 = informer.GetSharedByKey("default/a");
  ASSERT_NE(v1, nullptr);
  auto first = informer.Decoded<api::types::PersistentVolumeClaim>(v1);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ((*first)->metadata.name, "a");
  EXPECT_EQ((*first)->spec.access_modes, std::vector<std::string>{"ReadWriteOnce"});
  // The same view, not a second decode (the informer drops its views when
  // it falls idle, a second after its last event: on a loaded machine that
  // may come between two reads, so a few tries).
  EXPECT_TRUE(Eventually([&] {
    auto again = informer.Decoded<api::types::PersistentVolumeClaim>(v1);
    return again.ok() && *again == *first;
  }));
  EXPECT_GE(informer.TypedViewCounts().hits, 1);
  ASSERT_TRUE(registry_
                  ->Patch(Claims(), "default", "a", R"({"metadata":{"labels":{"tier":"gold"}}})",
                          apiserver::PatchType::kMerge, apiserver::Subresource::kMain)
                  .ok());
  ASSERT_TRUE(Eventually([&] { return informer.GetSharedByKey("default/a") != v1; }));
  auto v2 = informer.Decoded<api::types::PersistentVolumeClaim>(informer.GetSharedByKey("default/a"));
  ASSERT_TRUE(v2.ok());
  EXPECT_NE(*v2, *first);
  EXPECT_EQ((*v2)->metadata.labels.at("tier"), "gold");
  EXPECT_EQ((*first)->metadata.labels.count("tier"), 0u) << "a view never changes";
  // An object that does not decode is an error at every read: nothing kept.
  auto bad = std::make_shared<const json>(json{{"metadata", {{"name", 7}}}});
  const size_t kept = informer.TypedViewCounts().kept;
  EXPECT_FALSE(informer.Decoded<api::types::PersistentVolumeClaim>(bad).ok());
  EXPECT_FALSE(informer.Decoded<api::types::PersistentVolumeClaim>(bad).ok());
  EXPECT_LE(informer.TypedViewCounts().kept, kept);
}

// Once idle a second, a compact informer compresses its packed objects
// with a dictionary trained on them; they come back the same from every
// read, and an object changed afterwards is compressed at the next pause.
TEST_P(InformerTest, IdleCompactInformerCompressesItsObjects) {
  Open(/*watcher_queue=*/100000, /*cache_bytes=*/0);  // no store cache holds them
  constexpr int kClaims = 120;
  for (int i = 0; i < kClaims; ++i) {
    json claim = Claim("c" + std::to_string(i));
    claim["metadata"]["labels"] = {{"app", "a" + std::to_string(i % 3)}};
    ASSERT_TRUE(registry_->Create(Claims(), "default", claim).ok());
  }
  Informer informer(*registry_, Claims(), absl::Minutes(5), /*compact=*/GetParam());
  informer.AddIndex("app",
                    [](const json& o) { return std::vector<std::string>{o["metadata"]["labels"].value("app", "")}; });
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(absl::Seconds(10)));
  if (!GetParam()) {
    EXPECT_EQ(informer.CompressedCount(), 0u);
    return;
  }
  const size_t packed = informer.PackedBytes();
  ASSERT_TRUE(Eventually([&] { return informer.CompressedCount() == kClaims; }))
      << informer.CompressedCount() << " of " << kClaims << " compressed";
  EXPECT_LT(informer.PackedBytes() * 3, packed) << informer.PackedBytes() << " bytes, were " << packed;
  // Then copied into pages of their own; what follows reads the copies.
  ASSERT_TRUE(Eventually([&] { return informer.Relocations() == 1; }));
  for (int i = 0; i < kClaims; i += 7) {
    const std::string name = "c" + std::to_string(i);
    EXPECT_EQ(informer.Get("default", name)->dump(), registry_->Get(Claims(), "default", name)->dump());
  }
  EXPECT_EQ(informer.List().size(), static_cast<size_t>(kClaims));
  EXPECT_EQ(informer.ByIndex("app", "a1").size(), static_cast<size_t>(kClaims / 3));
  // A change arrives packed, and is compressed again once idle.
  json changed = *registry_->Get(Claims(), "default", "c5");
  changed["metadata"]["labels"]["app"] = "b";
  ASSERT_TRUE(registry_->Update(Claims(), "default", "c5", changed, apiserver::Subresource::kMain).ok());
  ASSERT_TRUE(Eventually([&] { return informer.ByIndex("app", "b").size() == 1; }));
  EXPECT_EQ(informer.Get("default", "c5")->dump(), registry_->Get(Claims(), "default", "c5")->dump());
  EXPECT_TRUE(Eventually([&] { return informer.CompressedCount() == kClaims; }));
  EXPECT_EQ(informer.Get("default", "c5")->dump(), registry_->Get(Claims(), "default", "c5")->dump());
  EXPECT_EQ(informer.ByIndex("app", "a2").size(), static_cast<size_t>(kClaims / 3 - 1));  // c5 is b now
  EXPECT_EQ(informer.Relocations(), 1);  // one event is not worth copying everything again
}

// A compact informer told to defer packing holds an unsettled object from
// its watch parsed until the newest `delay` such objects have pushed it out
// (a claim's versions while it binds are mostly replaced before that), and
// packs everything when idle; reads return the newest version either way.
TEST_P(InformerTest, PacksWhatItReceivedOnceNewerObjectsCameOrItIsIdle) {
  Open(/*watcher_queue=*/100000, /*cache_bytes=*/0);
  Informer informer(*registry_, Claims(), absl::Minutes(5), /*compact=*/GetParam());
  constexpr size_t kDelay = 3;
  informer.DeferPacking([](const json& o) { return Str(o, {"metadata", "labels", "round"}) == "settled"; }, kDelay);
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(absl::Seconds(10)));
  ASSERT_TRUE(registry_->Create(Claims(), "default", Claim("x")).ok());
  for (int i = 0; i < 4; ++i) {
    json x = *registry_->Get(Claims(), "default", "x");
    x["metadata"]["labels"] = {{"round", std::to_string(i)}};
    ASSERT_TRUE(registry_->Update(Claims(), "default", "x", x, apiserver::Subresource::kMain).ok());
  }
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(registry_->Create(Claims(), "default", Claim("y" + std::to_string(i))).ok());
  // Held past the delay only while a batch of events is being applied.
  const int64_t rv = store_->ResourceVersion();
  ASSERT_TRUE(Eventually([&] { return informer.Delivered(rv); }));
  EXPECT_LE(informer.UnpackedCount(), kDelay);
  EXPECT_EQ(informer.Get("default", "x")->dump(), registry_->Get(Claims(), "default", "x")->dump());
  EXPECT_EQ(informer.Get("default", "x")->at("metadata").at("labels").at("round"), "3");
  // A settled object is packed as it comes.
  {
    json x = *registry_->Get(Claims(), "default", "x");
    x["metadata"]["labels"]["round"] = "settled";
    ASSERT_TRUE(registry_->Update(Claims(), "default", "x", x, apiserver::Subresource::kMain).ok());
  }
  const int64_t settled_rv = store_->ResourceVersion();
  ASSERT_TRUE(Eventually([&] { return informer.Delivered(settled_rv); }));
  EXPECT_EQ(Str(*informer.Get("default", "x"), {"metadata", "labels", "round"}), "settled");
  EXPECT_LE(informer.UnpackedCount(), kDelay);
  for (int i = 0; i < 6; ++i) {
    const std::string name = "y" + std::to_string(i);
    EXPECT_EQ(informer.Get("default", name)->dump(), registry_->Get(Claims(), "default", name)->dump());
  }
  EXPECT_EQ(informer.List().size(), 7u);
  // Idle: nothing is left parsed, and every object reads back the same.
  ASSERT_TRUE(Eventually([&] { return informer.UnpackedCount() == 0; }));
  if (GetParam()) {
    EXPECT_TRUE(Eventually([&] { return informer.PackedBytes() > 0; }));
  } else {
    EXPECT_EQ(informer.PackedBytes(), 0u);
  }
  for (const json& o : informer.List()) {
    EXPECT_EQ(o.dump(), registry_->Get(Claims(), "default", o["metadata"]["name"].get<std::string>())->dump());
  }
  // A deleted object is gone though its versions may still wait to be packed.
  ASSERT_TRUE(registry_->Delete(Claims(), "default", "y5").ok());
  ASSERT_TRUE(Eventually([&] { return !informer.Get("default", "y5").has_value(); }));
  EXPECT_EQ(informer.List().size(), 6u);
}

INSTANTIATE_TEST_SUITE_P(Held, InformerTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) { return p.param ? "Packed" : "Parsed"; });

}  // namespace berth::client
