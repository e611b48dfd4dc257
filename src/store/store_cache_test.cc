// The store's object cache: coherent with every write, within its budget,
// never stale under concurrent writers.
#include <sqlite3.h>

#include <atomic>
#include <thread>
#include <vector>

#include "common/testing/eventually.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "store/store.h"
#include "store/store_test_fixture.h"

namespace berth::store {
namespace {

using berth::testing::Eventually;
using testing::OwnerRef;
using testing::Pvc;
using testing::Rv;
using testing::StoreTest;

// A pod created and read once: among the objects read since written, which
// the cache evicts least recently used first.
void CreateAndRead(Store& store, const std::string& name) {
  ASSERT_TRUE(store.Create("pods", Pvc(name)).ok());
  ASSERT_TRUE(store.Get("pods", "default", name).ok());
}

// Pods held0..held<n-1>, created and read, held as an informer holds its
// objects (empty if a create failed).
std::vector<std::shared_ptr<const Object>> CreateHeld(Store& store, int n) {
  std::vector<std::shared_ptr<const Object>> held;
  for (int i = 0; i < n; ++i) {
    const std::string name = "held" + std::to_string(i);
    if (!store.Create("pods", Pvc(name)).ok()) return {};
    held.push_back(*store.GetShared("pods", "default", name));
  }
  return held;
}

TEST_F(StoreTest, CacheServesRepeatedGetsAndFollowsEveryWrite) {
  auto s = Open();
  auto a = s->Create("persistentvolumeclaims", Pvc("a"));
  ASSERT_TRUE(a.ok());
  const Store::CacheStats before = s->cache_stats();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(*s->Get("persistentvolumeclaims", "default", "a"), *a);
  EXPECT_EQ(s->cache_stats().hits - before.hits, 3) << "a created object is cached at once";
  EXPECT_EQ(s->cache_stats().misses, before.misses);

  // Every kind of write replaces or drops the cached object.
  Object changed = *a;
  changed["spec"]["x"] = 1;
  auto b = s->Update("persistentvolumeclaims", changed);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*s->Get("persistentvolumeclaims", "default", "a"), *b);
  auto shared = s->GetShared("persistentvolumeclaims", "default", "a");
  ASSERT_TRUE(shared.ok());
  EXPECT_EQ(**shared, *b);
  Object finalized = *b;
  finalized["metadata"]["finalizers"] = {"example.com/f"};
  auto c = s->Update("persistentvolumeclaims", finalized);
  ASSERT_TRUE(c.ok());
  auto marked = s->Delete("persistentvolumeclaims", "default", "a");
  ASSERT_TRUE(marked.ok());
  auto got = s->Get("persistentvolumeclaims", "default", "a");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, *marked);
  EXPECT_TRUE((*got)["metadata"].contains("deletionTimestamp"));
  EXPECT_EQ(**shared, *b) << "a shared object never changes under its holder";
  Object last = *got;
  last["metadata"]["finalizers"] = Object::array();
  ASSERT_TRUE(s->Update("persistentvolumeclaims", last).ok());
  EXPECT_EQ(s->Get("persistentvolumeclaims", "default", "a").status().code(), absl::StatusCode::kNotFound);
  // Recreated under the same name: a new object, not the cached old one.
  auto again = s->Create("persistentvolumeclaims", Pvc("a"));
  ASSERT_TRUE(again.ok());
  EXPECT_NE((*again)["metadata"]["uid"], (*a)["metadata"]["uid"]);
  EXPECT_EQ(*s->Get("persistentvolumeclaims", "default", "a"), *again);
  ASSERT_TRUE(s->Delete("persistentvolumeclaims", "default", "a").ok());
  EXPECT_EQ(s->Get("persistentvolumeclaims", "default", "a").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s->cache_stats().objects, 0u);
}

TEST_F(StoreTest, CacheFollowsGarbageCollectionOfDependents) {
  auto s = Open();
  auto owner = s->Create("volumesnapshots", Pvc("owner"));
  auto other = s->Create("volumesnapshots", Pvc("other"));
  Object one = Pvc("one");
  one["metadata"]["ownerReferences"] = {OwnerRef(*owner)};
  Object two = Pvc("two");
  two["metadata"]["ownerReferences"] = {OwnerRef(*owner), OwnerRef(*other)};
  ASSERT_TRUE(s->Create("events", one).ok());
  ASSERT_TRUE(s->Create("events", two).ok());
  ASSERT_TRUE(s->Get("events", "default", "one").ok());  // cached
  ASSERT_TRUE(s->Delete("volumesnapshots", "default", "owner").ok());
  EXPECT_EQ(s->Get("events", "default", "one").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ((*s->Get("events", "default", "two"))["metadata"]["ownerReferences"].size(), 1u);
}

// SQLite triggers inject failures the store cannot tell from real ones.
void Sql(const std::string& path, const char* sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* err = nullptr;
  EXPECT_EQ(sqlite3_exec(db, sql, nullptr, nullptr, &err), SQLITE_OK) << (err ? err : "");
  sqlite3_free(err);
  sqlite3_close(db);
}

TEST_F(StoreTest, FailedMutationLeavesCacheAsCommitted) {
  auto s = Open();
  auto owner = s->Create("volumesnapshots", Pvc("owner"));
  Object dep = Pvc("boom");
  dep["metadata"]["ownerReferences"] = {
      {{"apiVersion", "v1"}, {"kind", "X"}, {"name", "owner"}, {"uid", (*owner)["metadata"]["uid"]}},
      {{"apiVersion", "v1"}, {"kind", "X"}, {"name", "gone"}, {"uid", "other-uid"}}};
  ASSERT_TRUE(s->Create("events", dep).ok());
  ASSERT_TRUE(s->Get("volumesnapshots", "default", "owner").ok());
  // Deleting the owner removes it, then fails rewriting its dependent: the
  // whole mutation rolls back, in SQLite and in the cache.
  Sql(dir_.Join("state.db"),
      "CREATE TRIGGER fail_boom BEFORE INSERT ON objects WHEN NEW.name='boom' "
      "BEGIN SELECT RAISE(ABORT, 'injected'); END");
  EXPECT_EQ(s->Delete("volumesnapshots", "default", "owner").status().code(), absl::StatusCode::kInternal);
  auto still = s->Get("volumesnapshots", "default", "owner");
  ASSERT_TRUE(still.ok()) << still.status();
  EXPECT_EQ(*still, *owner);
  EXPECT_EQ((*s->Get("events", "default", "boom"))["metadata"]["ownerReferences"].size(), 2u);
  Sql(dir_.Join("state.db"), "DROP TRIGGER fail_boom");
  ASSERT_TRUE(s->Delete("volumesnapshots", "default", "owner").ok());
  EXPECT_EQ(s->Get("volumesnapshots", "default", "owner").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(StoreTest, FailedCommitLeavesCacheAsCommitted) {
  auto s = Open();
  auto a = s->Create("pods", Pvc("a"));
  ASSERT_TRUE(a.ok());
  // The batch's last step (recording the resourceVersion) fails: nothing of
  // the batch is committed, and nothing of it may be served.
  Sql(dir_.Join("state.db"),
      "CREATE TABLE fail_commit(x); INSERT INTO fail_commit VALUES(1); "
      "CREATE TRIGGER fail_rv BEFORE UPDATE ON meta WHEN EXISTS(SELECT 1 FROM fail_commit) "
      "BEGIN SELECT RAISE(ABORT, 'injected'); END");
  Object changed = *a;
  changed["spec"]["x"] = 1;
  EXPECT_FALSE(s->Update("pods", changed).ok());
  EXPECT_FALSE(s->Create("pods", Pvc("b")).ok());
  EXPECT_FALSE(s->Delete("pods", "default", "a").ok());
  EXPECT_EQ(*s->Get("pods", "default", "a"), *a);
  EXPECT_EQ(s->Get("pods", "default", "b").status().code(), absl::StatusCode::kNotFound);
  Sql(dir_.Join("state.db"), "DELETE FROM fail_commit");
  auto b = s->Update("pods", changed);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(Rv(*b), Rv(*a) + 1) << "the failed batch's versions were not used";
  EXPECT_EQ(*s->Get("pods", "default", "a"), *b);
}

TEST_F(StoreTest, CacheStartsEmptyAfterReopenAndLoadsLazily) {
  Object a;
  {
    auto s = Open();
    a = *s->Create("pods", Pvc("a"));
  }
  // Changed while the store was closed: the reopened store must not know
  // any older state.
  Sql(dir_.Join("state.db"), "UPDATE objects SET data=json_set(data, '$.spec.x', 7) WHERE name='a'");
  auto s = Open();
  EXPECT_EQ(s->cache_stats().objects, 0u);
  auto got = s->Get("pods", "default", "a");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ((*got)["spec"]["x"], 7);
  EXPECT_EQ(s->cache_stats().objects, 1u) << "filled by the read";
  EXPECT_EQ(*s->Get("pods", "default", "a"), *got);
  EXPECT_EQ(s->cache_stats().hits, 1);
}

TEST_F(StoreTest, WritesOfWriteOnlyResourcesStayOutOfTheCacheUntilRead) {
  auto s = Open();
  Object ev = Pvc("e1");
  ev["kind"] = "Event";
  ASSERT_TRUE(s->Create("events", ev).ok());
  ASSERT_TRUE(s->Create("pods", Pvc("p")).ok());
  EXPECT_EQ(s->cache_stats().objects, 1u) << "only the pod";
  const Store::CacheStats before = s->cache_stats();
  ASSERT_TRUE(s->Get("events", "default", "e1").ok());
  EXPECT_EQ(s->cache_stats().misses - before.misses, 1);
  EXPECT_EQ(s->cache_stats().objects, 2u) << "a read caches it";
  // An update of a cached event replaces the entry with nothing (never a
  // stale copy).
  Object changed = *s->Get("events", "default", "e1");
  changed["spec"]["x"] = 1;
  ASSERT_TRUE(s->Update("events", changed).ok());
  EXPECT_EQ(s->cache_stats().objects, 1u);
  EXPECT_EQ((*s->Get("events", "default", "e1"))["spec"]["x"], 1);
}

TEST_F(StoreTest, CacheStaysWithinItsBudget) {
  auto s = Store::Open({.path = dir_.Join("state.db"), .cache_bytes = 2000});
  ASSERT_TRUE(s.ok());
  for (int i = 0; i < 50; ++i) ASSERT_TRUE((*s)->Create("pods", Pvc("p" + std::to_string(i))).ok());
  EXPECT_LE((*s)->cache_stats().bytes, 2000u);
  EXPECT_GT((*s)->cache_stats().objects, 0u);
  // Evicted objects are read back from SQLite, intact.
  for (int i = 0; i < 50; ++i) {
    auto got = (*s)->Get("pods", "default", "p" + std::to_string(i));
    ASSERT_TRUE(got.ok());
    EXPECT_EQ((*got)["metadata"]["name"], "p" + std::to_string(i));
  }
  auto off = Store::Open({.path = dir_.Join("off.db"), .cache_bytes = 0});
  ASSERT_TRUE(off.ok());
  ASSERT_TRUE((*off)->Create("pods", Pvc("a")).ok());
  ASSERT_TRUE((*off)->Get("pods", "default", "a").ok());
  EXPECT_EQ((*off)->cache_stats().objects, 0u);
}

// A burst of creates that the controllers work through oldest first: each
// object waits unread while those handled before it are read and written
// again. Plain LRU evicted the oldest waiting object, the very next one to
// be read, for the ones just handled (every read of the backlog missed);
// the objects not read since written keep up to their share of the budget,
// and the handled ones go first.
TEST_F(StoreTest, CacheKeepsABacklogOfNewObjectsOverTheOnesAlreadyHandled) {
  auto s = Store::Open({.path = dir_.Join("state.db"), .cache_bytes = 8000});
  ASSERT_TRUE(s.ok());
  Store& store = **s;
  const int backlog = 18;  // about 4,500 of the 6,000 bytes fresh objects may keep
  for (int i = 0; i < backlog; ++i) ASSERT_TRUE(store.Create("pods", Pvc("b" + std::to_string(i))).ok());
  ASSERT_LE(store.cache_stats().bytes, 6000u) << "the backlog fits its share";
  const int64_t misses = store.cache_stats().misses;
  for (int i = 0; i < backlog; ++i) {
    // Handled: read, written back larger, and a second object made for it
    // and read (a claim and its volume).
    auto got = store.Get("pods", "default", "b" + std::to_string(i));
    ASSERT_TRUE(got.ok());
    Object handled = *got;
    handled["metadata"]["annotations"]["handled-by"] = std::string(100, 'x');
    ASSERT_TRUE(store.Update("pods", handled).ok());
    ASSERT_TRUE(store.Create("pods", Pvc("v" + std::to_string(i))).ok());
    ASSERT_TRUE(store.Get("pods", "default", "v" + std::to_string(i)).ok());
    ASSERT_LE(store.cache_stats().bytes, 8000u);
  }
  EXPECT_EQ(store.cache_stats().misses, misses) << "every read of the backlog and of the new objects was a hit";
  // The handled objects were evicted instead, and read back intact.
  EXPECT_TRUE(store.Get("pods", "default", "b0").ok());
  EXPECT_GT(store.cache_stats().misses, misses);

  // Objects never read keep only their share once others were read: the
  // oldest of them go first, the newest stay.
  for (int i = 0; i < 40; ++i) ASSERT_TRUE(store.Create("pods", Pvc("n" + std::to_string(i))).ok());
  EXPECT_LE(store.cache_stats().bytes, 8000u);
  const int64_t before = store.cache_stats().misses;
  ASSERT_TRUE(store.Get("pods", "default", "n39").ok());
  EXPECT_EQ(store.cache_stats().misses, before) << "the newest is cached";
  ASSERT_TRUE(store.Get("pods", "default", "n0").ok());
  EXPECT_EQ(store.cache_stats().misses, before + 1) << "the oldest went first";
}

// What someone else holds (an informer's objects) stays cached past the
// budget, uncounted: evicting it would free nothing. Once let go, it counts
// again and is evicted like anything else.
TEST_F(StoreTest, CacheKeepsObjectsHeldElsewherePastItsBudget) {
  auto s = Store::Open({.path = dir_.Join("state.db"), .cache_bytes = 2000});
  ASSERT_TRUE(s.ok());
  Store& store = **s;
  std::vector<std::shared_ptr<const Object>> held;  // as an informer holds its objects
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(store.Create("pods", Pvc("held" + std::to_string(i))).ok());
    auto got = store.GetShared("pods", "default", "held" + std::to_string(i));
    ASSERT_TRUE(got.ok());
    held.push_back(*got);
  }
  for (int i = 0; i < 50; ++i) CreateAndRead(store, "p" + std::to_string(i));
  Store::CacheStats st = store.cache_stats();
  EXPECT_LE(st.bytes, 2000u);
  EXPECT_EQ(st.shared_objects, 20u);
  EXPECT_GT(st.shared_bytes, 2000u);
  // Reads of the held objects are hits, and return the very object held.
  const int64_t misses = st.misses;
  for (int i = 0; i < 20; ++i) {
    auto got = store.GetShared("pods", "default", "held" + std::to_string(i));
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(got->get(), held[i].get());
  }
  EXPECT_EQ(store.cache_stats().misses, misses);
  // An update replaces a held object: the new version is cached, counted.
  Object changed = *held[0];
  changed["spec"]["x"] = 1;
  ASSERT_TRUE(store.Update("pods", changed).ok());
  EXPECT_EQ(store.cache_stats().shared_objects, 19u);
  // Let go, the shared entries count again within a few inserts and the
  // cache returns to its budget.
  held.clear();
  for (int i = 50; i < 80; ++i) CreateAndRead(store, "p" + std::to_string(i));
  st = store.cache_stats();
  EXPECT_EQ(st.shared_objects, 0u);
  EXPECT_EQ(st.shared_bytes, 0u);
  EXPECT_LE(st.bytes, 2000u);
  // Everything still reads back intact.
  for (int i = 0; i < 20; ++i) EXPECT_TRUE(store.Get("pods", "default", "held" + std::to_string(i)).ok());
}

// A burst leaves entries kept past the budget that only the cache holds
// once their other holders let go; when the writes stop, the writer looks
// them over once and the cache returns to its budget without another write.
TEST_F(StoreTest, CacheLetsGoOfWhatOnlyItHoldsOnceTheWritesStop) {
  auto s =
      Store::Open({.path = dir_.Join("state.db"), .cache_bytes = 2000, .shared_sweep_after = absl::ZeroDuration()});
  ASSERT_TRUE(s.ok());
  Store& store = **s;
  std::vector<std::shared_ptr<const Object>> held = CreateHeld(store, 20);
  ASSERT_EQ(held.size(), 20u);
  for (int i = 0; i < 50; ++i) CreateAndRead(store, "p" + std::to_string(i));
  // Looked over after the last write: all still held, all still kept.
  ASSERT_TRUE(Eventually([&] { return store.cache_stats().shared_objects == 20u; }));
  held.resize(5);                                       // 15 let go
  ASSERT_TRUE(store.Create("pods", Pvc("last")).ok());  // rechecks two itself
  EXPECT_TRUE(Eventually([&] { return store.cache_stats().shared_objects == 5u; }))
      << store.cache_stats().shared_objects << " kept past the budget";
  const Store::CacheStats st = store.cache_stats();
  EXPECT_LE(st.bytes, 2000u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(store.GetShared("pods", "default", "held" + std::to_string(i))->get(), held[i].get());
  }
}

// Once the writes stop the cache keeps its most recently used objects, down
// to rest_cache_bytes; the others are read back from SQLite, intact.
TEST_F(StoreTest, AtRestTheCacheKeepsOnlyItsMostRecentlyUsed) {
  auto s = Store::Open({.path = dir_.Join("state.db"),
                        .cache_bytes = 64000,
                        .shared_sweep_after = absl::ZeroDuration(),
                        .rest_cache_bytes = 4000});
  ASSERT_TRUE(s.ok());
  Store& store = **s;
  // ~10 KB of objects, all within the budget.
  for (int i = 0; i < 50; ++i) CreateAndRead(store, "p" + std::to_string(i));
  ASSERT_TRUE(Eventually([&] { return store.cache_stats().bytes <= 4000; })) << store.cache_stats().bytes;
  EXPECT_GT(store.cache_stats().objects, 0u);
  const Store::CacheStats before = store.cache_stats();
  ASSERT_TRUE(store.Get("pods", "default", "p49").ok());
  EXPECT_EQ(store.cache_stats().hits, before.hits + 1) << "the last read is kept";
  auto first = store.Get("pods", "default", "p0");
  ASSERT_TRUE(first.ok());
  EXPECT_EQ((*first)["metadata"]["name"], "p0");
  EXPECT_EQ(store.cache_stats().misses, before.misses + 1) << "the least recently used went";
}

// Once the writes stop the cache holds its objects' text only; a read
// takes back a parsed object someone still holds, or parses the text once
// and holds the result; a write over a let-go entry starts from it.
TEST_F(StoreTest, CacheHoldsOnlyTextOnceTheWritesStop) {
  auto s = Store::Open({.path = dir_.Join("state.db"), .shared_sweep_after = absl::ZeroDuration()});
  ASSERT_TRUE(s.ok());
  Store& store = **s;
  // The first held as an informer holds its objects (the writes' look-overs
  // run whenever the queue is empty: only what is held before them is
  // known to be held at rest).
  auto held = store.CreateShared("pods", Pvc("p0"));
  ASSERT_TRUE(held.ok());
  std::vector<Object> created = {**held};
  for (int i = 1; i < 4; ++i) {
    auto c = store.Create("pods", Pvc("p" + std::to_string(i)));
    ASSERT_TRUE(c.ok());
    created.push_back(*c);
  }
  ASSERT_TRUE(Eventually([&] { return store.cache_stats().parsed_objects == 0; }))
      << store.cache_stats().parsed_objects << " still held parsed";
  Store::CacheStats st = store.cache_stats();
  EXPECT_EQ(st.objects, 4u) << "let go of parsed, not evicted";
  EXPECT_EQ(st.reparses, 0);

  // Still held elsewhere: taken back, the very object, nothing parsed.
  auto again = store.GetShared("pods", "default", "p0");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->get(), held->get());
  EXPECT_EQ(store.cache_stats().reparses, 0);
  // Held by no one: parsed from its text once, a hit, then held again.
  auto p1 = store.GetShared("pods", "default", "p1");
  ASSERT_TRUE(p1.ok());
  EXPECT_EQ(**p1, created[1]);
  st = store.cache_stats();
  EXPECT_EQ(st.reparses, 1);
  EXPECT_EQ(st.misses, 0) << "no SQLite read";
  auto p1_again = store.GetShared("pods", "default", "p1");
  EXPECT_EQ(p1_again->get(), p1->get());
  EXPECT_EQ(store.cache_stats().reparses, 1);

  // A write over a let-go entry (the writer loads it from its text) and a
  // deletion of one: both as committed, read back the same.
  Object changed = created[2];
  changed["spec"]["x"] = 1;
  auto updated = store.Update("pods", changed);
  ASSERT_TRUE(updated.ok()) << updated.status();
  EXPECT_EQ((*updated)["metadata"]["uid"], created[2]["metadata"]["uid"]);
  EXPECT_EQ(*store.Get("pods", "default", "p2"), *updated);
  ASSERT_TRUE(store.Delete("pods", "default", "p3").ok());
  EXPECT_EQ(store.Get("pods", "default", "p3").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store.cache_stats().misses, 1) << "only the deleted one's read went to SQLite";
  ASSERT_TRUE(Eventually([&] { return store.cache_stats().parsed_objects == 0; }));
  EXPECT_EQ(*store.Get("pods", "default", "p2"), *updated);
}

// Once the writes stop the texts the cache and the watch history keep are
// compressed with a dictionary of their resource, once it has enough of
// them; reads and replayed watches get every object back as written.
TEST_F(StoreTest, KeptTextsAreCompressedOnceTheWritesStop) {
  auto s = Store::Open({.path = dir_.Join("state.db"), .shared_sweep_after = absl::ZeroDuration()});
  ASSERT_TRUE(s.ok());
  Store& store = **s;
  constexpr int kPods = 150, kFew = 10;  // kFew configmaps, the first to watch from
  auto first = store.Create("configmaps", Pvc("first"));
  ASSERT_TRUE(first.ok());
  const int64_t from = Rv(*first);
  std::vector<Object> created;
  for (int i = 0; i < kPods; ++i) {
    auto c = store.Create("pods", Pvc("p" + std::to_string(i), "ns" + std::to_string(i % 7), {{"app", "a"}}));
    ASSERT_TRUE(c.ok());
    created.push_back(*c);
  }
  for (int i = 1; i < kFew; ++i) ASSERT_TRUE(store.Create("configmaps", Pvc("c" + std::to_string(i))).ok());
  size_t plain_bytes = 0;
  for (const Object& o : created) plain_bytes += o.dump().size();
  // Too few configmaps for a dictionary: theirs stay plain.
  ASSERT_TRUE(Eventually([&] { return store.history_stats().compressed_events == kPods; }))
      << store.history_stats().compressed_events << " of " << kPods << " compressed";
  ASSERT_TRUE(Eventually([&] { return store.cache_stats().compressed_objects == kPods; }));
  // And copied into pages of their own (here at pauses between the writes
  // already: the look-over waits for none); what follows reads the copies.
  // (The pass that compressed the last texts copies after compressing: it
  // may still be at it.)
  ASSERT_TRUE(Eventually([&] { return store.cache_stats().relocations >= 1; }));
  EXPECT_LE(store.cache_stats().relocations, (kPods + kFew) / Store::kRelocateAfter);
  const Store::HistoryStats hs = store.history_stats();
  EXPECT_EQ(hs.events, static_cast<size_t>(kPods + kFew));
  const Store::CacheStats cs = store.cache_stats();
  EXPECT_EQ(cs.objects, static_cast<size_t>(kPods + kFew));
  EXPECT_GT(cs.bytes, plain_bytes) << "the budget counts plain bytes";
  EXPECT_LT(hs.text_bytes, plain_bytes / 3 + kFew * 300) << "history holds " << hs.text_bytes;
  EXPECT_LT(cs.text_bytes, plain_bytes / 3 + kFew * 300) << "cache holds " << cs.text_bytes;

  // Reads: parsed back from the frames, a hit each, intact.
  for (int i = 0; i < kPods; ++i) {
    auto got = store.Get("pods", "ns" + std::to_string(i % 7), "p" + std::to_string(i));
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(*got, created[i]);
  }
  EXPECT_EQ(store.cache_stats().reparses, kPods);
  EXPECT_EQ(store.cache_stats().misses, 0);
  // A replayed watch: every event, its object and its text as written.
  auto w = store.Watch("pods", "", from);
  ASSERT_TRUE(w.ok()) << w.status();
  for (int i = 0; i < kPods; ++i) {
    auto e = (*w)->Next(absl::Seconds(5));
    ASSERT_TRUE(e.has_value()) << i;
    EXPECT_EQ(*e->object, created[i]);
    ASSERT_NE(e->text, nullptr);
    EXPECT_EQ(*e->text, created[i].dump());
  }
  // A label selector's replay still sees the labels.
  auto none = store.Watch("pods", "", from, *api::LabelSelector::Parse("app=b"));
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE((*none)->Next(absl::Milliseconds(100)).has_value());
  // Writes go on from compressed entries, and are compressed in turn.
  Object changed = created[3];
  changed["spec"]["x"] = 1;
  auto updated = store.Update("pods", changed);
  ASSERT_TRUE(updated.ok()) << updated.status();
  EXPECT_EQ(*store.Get("pods", "ns3", "p3"), *updated);
  ASSERT_TRUE(Eventually([&] { return store.history_stats().compressed_events == kPods + 1; }));
  // One write is not worth copying everything again: at most one copy per
  // kRelocateAfter writes, however the idle passes fell between them.
  EXPECT_LE(store.cache_stats().relocations, (kPods + kFew + 1) / Store::kRelocateAfter);
}

// Without compact_when_idle the cache keeps its parsed objects at rest.
// A long list lets the read connection's pages go (they were held in the
// reading thread's heap until the next burst of writes); a short one keeps
// them for the reads that follow.
TEST_F(StoreTest, ALongListLetsTheReadPageCacheGo) {
  auto s = Open();
  std::vector<Object> claims;
  for (int i = 0; i < 2 * static_cast<int>(Store::kListReleasesPageCache); ++i)
    claims.push_back(Pvc("c" + std::to_string(i)));
  for (const auto& st : s->CreateAll("persistentvolumeclaims", std::move(claims))) ASSERT_TRUE(st.ok()) << st.status();
  auto short_list = s->List("persistentvolumeclaims", "default", {}, {.limit = 10, .after = std::nullopt});
  ASSERT_TRUE(short_list.ok());
  ASSERT_EQ(short_list->items.size(), 10u);
  const int64_t after_short = s->read_page_cache_bytes();
  EXPECT_GT(after_short, 0);
  auto long_list = s->List("persistentvolumeclaims", "default");
  ASSERT_TRUE(long_list.ok());
  EXPECT_EQ(long_list->items.size(), 2 * Store::kListReleasesPageCache);
  EXPECT_LT(s->read_page_cache_bytes(), after_short);
}

TEST_F(StoreTest, CacheKeepsParsedObjectsWhenTold) {
  for (const bool compact : {false, true}) {
    SCOPED_TRACE(compact ? "compact_when_idle" : "without");
    auto s = Store::Open({.path = dir_.Join(compact ? "compact.db" : "parsed.db"),
                          .cache_bytes = 2000,
                          .shared_sweep_after = absl::ZeroDuration(),
                          .compact_when_idle = compact});
    ASSERT_TRUE(s.ok());
    Store& store = **s;
    std::vector<std::shared_ptr<const Object>> held = CreateHeld(store, 20);
    ASSERT_EQ(held.size(), 20u);
    ASSERT_GT(store.cache_stats().shared_objects, 2u);
    held.clear();
    ASSERT_TRUE(store.Create("pods", Pvc("last")).ok());  // rechecks two itself
    // The rest are counted again only by the look-over once the writes
    // stop, which comes before the cache lets go of parsed objects.
    ASSERT_TRUE(Eventually([&] { return store.cache_stats().shared_objects == 0; }));
    if (compact) {
      EXPECT_TRUE(Eventually([&] { return store.cache_stats().parsed_objects == 0; }));
    } else {
      const Store::CacheStats st = store.cache_stats();
      EXPECT_GT(st.objects, 0u);
      EXPECT_EQ(st.parsed_objects, st.objects);
      EXPECT_EQ(store.history_stats().compressed_events, 0u);
    }
  }
}

// Readers racing writers never see an object older than one already
// acknowledged or observed, nor a deleted object once its deletion was
// acknowledged: with evictions, and with the cache letting go of its
// parsed objects whenever the writer's queue is empty (the reads then
// parse entries' text while writes replace them).
class StoreCacheRaceTest : public StoreTest, public ::testing::WithParamInterface<bool> {};

TEST_P(StoreCacheRaceTest, CacheReadsAreNeverStaleUnderConcurrentWrites) {
  Store::Options options{.path = dir_.Join("state.db"), .cache_bytes = 4000};  // evictions too
  if (GetParam()) options.shared_sweep_after = absl::ZeroDuration();
  auto s = Store::Open(options);
  ASSERT_TRUE(s.ok());
  Store& store = **s;
  constexpr int kKeys = 8, kRounds = 150;
  std::atomic<int64_t> acked[kKeys];
  std::atomic<bool> deleting[kKeys], deleted[kKeys];
  for (int k = 0; k < kKeys; ++k) {
    auto c = store.Create("pods", Pvc("k" + std::to_string(k)));
    ASSERT_TRUE(c.ok());
    acked[k] = Rv(*c);
    deleting[k] = false;
    deleted[k] = false;
  }
  std::atomic<bool> done{false};
  std::atomic<int> violations{0};
  std::vector<std::thread> threads;
  for (int k = 0; k < kKeys; ++k) {
    threads.emplace_back([&, k] {
      const std::string name = "k" + std::to_string(k);
      for (int i = 0; i < kRounds; ++i) {
        auto cur = store.Get("pods", "default", name);
        if (!cur.ok()) {
          ++violations;
          return;
        }
        Object next = *cur;
        next["spec"]["i"] = i;
        auto u = store.Update("pods", next);
        if (!u.ok()) {
          ++violations;
          return;
        }
        acked[k] = Rv(*u);
      }
      deleting[k] = true;
      ASSERT_TRUE(store.Delete("pods", "default", name).ok());
      deleted[k] = true;
    });
  }
  for (int r = 0; r < 4; ++r) {
    threads.emplace_back([&] {
      std::vector<int64_t> seen(kKeys, 0);
      while (!done) {
        for (int k = 0; k < kKeys; ++k) {
          const int64_t floor = acked[k];
          const bool gone = deleted[k];
          auto got = store.Get("pods", "default", "k" + std::to_string(k));
          if (gone) {
            if (got.ok()) ++violations;
            continue;
          }
          if (!got.ok()) {
            if (!deleting[k]) ++violations;
            continue;
          }
          const int64_t rv = Rv(*got);
          if (rv < floor || rv < seen[k]) ++violations;
          seen[k] = rv;
        }
      }
    });
  }
  for (int k = 0; k < kKeys; ++k) threads[k].join();
  done = true;
  for (size_t t = kKeys; t < threads.size(); ++t) threads[t].join();
  EXPECT_EQ(violations, 0);
  EXPECT_GT(store.cache_stats().hits, 0);
}

INSTANTIATE_TEST_SUITE_P(Compacting, StoreCacheRaceTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? "LettingGoWhenIdle" : "AfterASecondIdle";
                         });

TEST_F(StoreTest, WatchEventsAreUnaffectedByTheCache) {
  auto s = Open();
  auto w = s->Watch("pods", "", s->ResourceVersion());
  ASSERT_TRUE(w.ok());
  auto a = s->Create("pods", Pvc("a"));
  ASSERT_TRUE(s->Get("pods", "default", "a").ok());
  Object changed = *a;
  changed["spec"]["x"] = 1;
  auto b = s->Update("pods", changed);
  ASSERT_TRUE(s->Delete("pods", "default", "a").ok());
  std::vector<Object> objects;
  while (auto e = (*w)->Next(absl::Milliseconds(200))) objects.push_back(*e->object);
  ASSERT_EQ(objects.size(), 3u);
  EXPECT_EQ(objects[0], *a);
  EXPECT_EQ(objects[1], *b);
  EXPECT_EQ(objects[2]["spec"]["x"], 1);
  EXPECT_GT(Rv(objects[2]), Rv(*b));
}

}  // namespace
}  // namespace berth::store
