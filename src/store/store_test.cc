#include "store/store.h"

#include <sqlite3.h>
#include <sys/stat.h>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "store/store_test_fixture.h"

namespace berth::store {
namespace {

using ::testing::HasSubstr;
using testing::OwnerRef;
using testing::Pvc;
using testing::Rv;
using testing::StoreTest;

TEST_F(StoreTest, DatabaseAndItsWalAreOwnerOnlyWhateverTheUmask) {
  // Secrets live in the database: even a process with umask 0 must not
  // create it (or SQLite's -wal and -shm beside it) readable by others.
  const mode_t old_umask = ::umask(0);
  auto s = Open();
  ::umask(old_umask);
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(s->Create("persistentvolumeclaims", Pvc("a")).ok());
  for (const char* suffix : {"", "-wal", "-shm"}) {
    struct stat st {};
    const std::string path = dir_.Join(std::string("state.db") + suffix);
    ASSERT_EQ(::stat(path.c_str(), &st), 0) << path;
    EXPECT_EQ(st.st_mode & 07777, 0600u) << path;
  }
}

TEST_F(StoreTest, CreateGetListUpdateDelete) {
  auto s = Open();
  auto a = s->Create("persistentvolumeclaims", Pvc("a"));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_FALSE((*a)["metadata"]["uid"].get<std::string>().empty());
  EXPECT_EQ((*a)["metadata"]["generation"], 1);
  EXPECT_THAT((*a)["metadata"]["creationTimestamp"].get<std::string>(), HasSubstr("T"));
  EXPECT_EQ(s->Create("persistentvolumeclaims", Pvc("a")).status().code(), absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(s->Create("persistentvolumeclaims", Pvc("a", "other")).ok()) << "namespaces differ";

  auto got = s->Get("persistentvolumeclaims", "default", "a");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, *a);
  EXPECT_EQ(s->Get("persistentvolumeclaims", "default", "zz").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s->List("persistentvolumeclaims", "")->items.size(), 2u);
  EXPECT_EQ(s->List("persistentvolumeclaims", "default")->items.size(), 1u);

  // Update: spec change bumps generation; a stale resourceVersion conflicts.
  Object changed = *a;
  changed["spec"]["resources"]["requests"]["storage"] = "2Gi";
  auto b = s->Update("persistentvolumeclaims", changed);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*b)["metadata"]["generation"], 2);
  EXPECT_GT(Rv(*b), Rv(*a));
  EXPECT_EQ((*b)["metadata"]["uid"], (*a)["metadata"]["uid"]);
  auto stale = s->Update("persistentvolumeclaims", changed);
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(stale.status().message(), HasSubstr("the object has been modified"));
  Object labels_only = *b;
  labels_only["metadata"]["labels"] = {{"x", "y"}};
  EXPECT_EQ((*s->Update("persistentvolumeclaims", labels_only))["metadata"]["generation"], 2);

  ASSERT_TRUE(s->Delete("persistentvolumeclaims", "default", "a").ok());
  EXPECT_EQ(s->Get("persistentvolumeclaims", "default", "a").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s->Delete("persistentvolumeclaims", "default", "a").status().code(), absl::StatusCode::kNotFound);
}

// A create can hand back the text it stored (what the API sends on, not
// serialized twice): the watchers' bytes, the object's own; a failed one
// hands back nothing.
TEST_F(StoreTest, CreateSharedHandsBackTheStoredText) {
  auto s = Open();
  auto w = s->Watch("persistentvolumeclaims", "default", s->ResourceVersion());
  ASSERT_TRUE(w.ok()) << w.status();
  std::shared_ptr<const std::string> text;
  auto a = s->CreateShared("persistentvolumeclaims", Pvc("a"), &text);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_NE(text, nullptr);
  EXPECT_EQ(*text, (*a)->dump());
  auto e = (*w)->Next(absl::Seconds(5));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->text, text) << "the same bytes, shared";
  std::shared_ptr<const std::string> none;
  EXPECT_EQ(s->CreateShared("persistentvolumeclaims", Pvc("a"), &none).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(none, nullptr);
}

TEST_F(StoreTest, CreateAllCreatesEachOnItsOwnInOrder) {
  auto s = Open();
  ASSERT_TRUE(s->Create("pods", Pvc("taken")).ok());
  Object nameless = Pvc("");
  nameless["metadata"].erase("name");
  auto results = s->CreateAll("pods", {Pvc("a"), Pvc("taken"), nameless, Pvc("b"), Pvc("a")});
  ASSERT_EQ(results.size(), 5u);
  ASSERT_TRUE(results[0].ok());
  EXPECT_EQ(results[1].status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(results[2].status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(results[3].ok());
  EXPECT_EQ(results[4].status().code(), absl::StatusCode::kAlreadyExists) << "the first \"a\" won";
  EXPECT_LT(Rv(*results[0]), Rv(*results[3]));
  EXPECT_EQ(*s->Get("pods", "default", "a"), *results[0]);
  EXPECT_EQ(s->List("pods", "")->items.size(), 3u);
}

TEST_F(StoreTest, CommitStatsCountTheGroupCommitsAndTheWritesThatSharedThem) {
  auto s = Open();
  ASSERT_TRUE(s->Create("pods", Pvc("taken")).ok());
  const Store::CommitStats before = s->commit_stats();
  EXPECT_GE(before.commits, 1);
  // Submitted together: one transaction, one fsync, for the five, the two
  // that failed on their own (rolled back to their savepoints) included.
  auto results = s->CreateAll("pods", {Pvc("a"), Pvc("taken"), Pvc("b"), Pvc("a"), Pvc("c")});
  ASSERT_EQ(results.size(), 5u);
  const Store::CommitStats after = s->commit_stats();
  EXPECT_EQ(after.commits - before.commits, 1);
  EXPECT_EQ(after.mutations - before.mutations, 5);
  EXPECT_EQ(after.failed_commits, 0);
  EXPECT_GT(after.seconds, before.seconds);
  ASSERT_TRUE(s->Create("pods", Pvc("d")).ok());
  EXPECT_EQ(s->commit_stats().commits - after.commits, 1);
  EXPECT_EQ(s->commit_stats().mutations - after.mutations, 1);
}

TEST_F(StoreTest, GenerateNameAndRequiredName) {
  auto s = Open();
  Object o = Pvc("");
  o["metadata"].erase("name");
  o["metadata"]["generateName"] = "data-";
  auto c = s->Create("persistentvolumeclaims", o);
  ASSERT_TRUE(c.ok());
  EXPECT_THAT((*c)["metadata"]["name"].get<std::string>(), ::testing::MatchesRegex("data-[a-z0-9]{5}"));
  o["metadata"].erase("generateName");
  EXPECT_EQ(s->Create("persistentvolumeclaims", o).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(StoreTest, FinalizersDelayDeletionUntilRemoved) {
  auto s = Open();
  Object o = Pvc("p");
  o["metadata"]["finalizers"] = {"kubernetes.io/pvc-protection"};
  ASSERT_TRUE(s->Create("persistentvolumeclaims", o).ok());
  auto marked = s->Delete("persistentvolumeclaims", "default", "p");
  ASSERT_TRUE(marked.ok());
  EXPECT_TRUE((*marked)["metadata"].contains("deletionTimestamp"));
  auto still = s->Get("persistentvolumeclaims", "default", "p");
  ASSERT_TRUE(still.ok()) << "kept while a finalizer remains";
  // An update cannot clear deletionTimestamp.
  Object attempt = *still;
  attempt["metadata"].erase("deletionTimestamp");
  auto kept = s->Update("persistentvolumeclaims", attempt);
  ASSERT_TRUE(kept.ok());
  EXPECT_TRUE((*kept)["metadata"].contains("deletionTimestamp"));
  // Removing the last finalizer removes the object.
  Object done = *kept;
  done["metadata"]["finalizers"] = Object::array();
  ASSERT_TRUE(s->Update("persistentvolumeclaims", done).ok());
  EXPECT_EQ(s->Get("persistentvolumeclaims", "default", "p").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(StoreTest, OwnerReferencesGarbageCollectDependents) {
  auto s = Open();
  auto owner = s->Create("volumesnapshots", Pvc("owner"));
  auto other = s->Create("volumesnapshots", Pvc("other"));
  Object one = Pvc("one-owner");
  one["metadata"]["ownerReferences"] = {OwnerRef(*owner)};
  Object two = Pvc("two-owners");
  two["metadata"]["ownerReferences"] = {OwnerRef(*owner), OwnerRef(*other)};
  Object guarded = Pvc("guarded");
  guarded["metadata"]["ownerReferences"] = {OwnerRef(*owner)};
  guarded["metadata"]["finalizers"] = {"example.com/keep"};
  ASSERT_TRUE(s->Create("events", one).ok());
  ASSERT_TRUE(s->Create("events", two).ok());
  ASSERT_TRUE(s->Create("events", guarded).ok());

  ASSERT_TRUE(s->Delete("volumesnapshots", "default", "owner").ok());
  EXPECT_EQ(s->Get("events", "default", "one-owner").status().code(), absl::StatusCode::kNotFound);
  auto survivor = s->Get("events", "default", "two-owners");
  ASSERT_TRUE(survivor.ok()) << "still owned by the other owner";
  EXPECT_EQ((*survivor)["metadata"]["ownerReferences"].size(), 1u);
  auto g = s->Get("events", "default", "guarded");
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE((*g)["metadata"].contains("deletionTimestamp")) << "finalizers still apply";
}

TEST_F(StoreTest, WatchDeliversInOrderAndResumes) {
  auto s = Open();
  auto list = s->List("persistentvolumeclaims", "");
  auto w = s->Watch("persistentvolumeclaims", "default", list->resource_version);
  ASSERT_TRUE(w.ok()) << w.status();
  auto a = s->Create("persistentvolumeclaims", Pvc("a"));
  Object changed = *a;
  changed["spec"]["x"] = 1;
  auto b = s->Update("persistentvolumeclaims", changed);
  ASSERT_TRUE(s->Create("persistentvolumeclaims", Pvc("elsewhere", "other")).ok());
  ASSERT_TRUE(s->Create("storageclasses", Pvc("sc", "")).ok());
  ASSERT_TRUE(s->Delete("persistentvolumeclaims", "default", "a").ok());

  std::vector<std::string> seen;
  int64_t last = 0;
  while (auto e = (*w)->Next(absl::Milliseconds(200))) {
    seen.push_back(std::string(EventTypeName(e->type)) + " " + (*e->object)["metadata"]["name"].get<std::string>());
    // Each event carries the object's JSON as stored (a deletion's last
    // state too), byte for byte what the object serializes to.
    ASSERT_NE(e->text, nullptr) << seen.back();
    EXPECT_EQ(*e->text, e->object->dump()) << seen.back();
    EXPECT_GT(e->resource_version, last);
    last = e->resource_version;
  }
  EXPECT_THAT(seen, ::testing::ElementsAre("ADDED a", "MODIFIED a", "DELETED a"));

  // Resume from the MODIFIED event: only what came after.
  auto resumed = s->Watch("persistentvolumeclaims", "", Rv(*b));
  ASSERT_TRUE(resumed.ok());
  std::vector<std::string> after;
  while (auto e = (*resumed)->Next(absl::Milliseconds(200))) {
    after.push_back((*e->object)["metadata"]["name"].get<std::string>());
    ASSERT_NE(e->text, nullptr) << "replayed from the history: " << after.back();
    EXPECT_EQ(*e->text, e->object->dump()) << after.back();
  }
  EXPECT_THAT(after, ::testing::ElementsAre("elsewhere", "a"));
}

TEST_F(StoreTest, WatcherNotifiesEachQueuedEventAndItsEnd) {
  auto opened = Store::Open({.path = dir_.Join("state.db"), .watcher_queue = 2});
  ASSERT_TRUE(opened.ok());
  auto& s = *opened;
  auto w = s->Watch("persistentvolumeclaims", "default", s->ResourceVersion());
  ASSERT_TRUE(w.ok()) << w.status();
  std::atomic<int> notified{0};
  (*w)->SetNotify([&] { ++notified; });
  ASSERT_TRUE(s->Create("persistentvolumeclaims", Pvc("a")).ok());
  ASSERT_TRUE(s->Create("persistentvolumeclaims", Pvc("other-ns", "other")).ok());  // not this watch's
  ASSERT_TRUE(s->Create("persistentvolumeclaims", Pvc("b")).ok());
  // The writer has published both events when Create returns.
  EXPECT_EQ(notified.load(), 2);
  // A third event overflows the queue of two: the watch ends, and says so.
  ASSERT_TRUE(s->Create("persistentvolumeclaims", Pvc("c")).ok());
  EXPECT_EQ(notified.load(), 3);
  EXPECT_EQ((*(*w)->Next(absl::ZeroDuration())->object)["metadata"]["name"], "a");
  EXPECT_EQ((*(*w)->Next(absl::ZeroDuration())->object)["metadata"]["name"], "b");
  EXPECT_FALSE((*w)->Next(absl::ZeroDuration()).has_value());
  EXPECT_TRUE((*w)->ended());
}

TEST_F(StoreTest, TooOldResourceVersionIsGone) {
  auto s = Open(/*history=*/3);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(s->Create("pods", Pvc("p" + std::to_string(i))).ok());
  auto w = s->Watch("pods", "", 2);
  EXPECT_EQ(w.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(w.status().message(), HasSubstr("too old resource version"));
  EXPECT_TRUE(s->Watch("pods", "", s->ResourceVersion() - 2).ok());
}

TEST_F(StoreTest, SelectorWatchSeesObjectsEnterAndLeave) {
  auto s = Open();
  auto w = s->Watch("pods", "", s->ResourceVersion(), *api::LabelSelector::Parse("app=web"));
  ASSERT_TRUE(w.ok());
  auto p = s->Create("pods", Pvc("p", "default", {{"app", "db"}}));
  Object in = *p;
  in["metadata"]["labels"]["app"] = "web";
  auto q = s->Update("pods", in);
  Object out = *q;
  out["metadata"]["labels"]["app"] = "cache";
  ASSERT_TRUE(s->Update("pods", out).ok());
  std::vector<std::string> types;
  while (auto e = (*w)->Next(absl::Milliseconds(200))) types.push_back(EventTypeName(e->type));
  EXPECT_THAT(types, ::testing::ElementsAre("ADDED", "DELETED"));
}

TEST_F(StoreTest, HistoryReplaysReplacedVersionsAsTheyWereCommitted) {
  // The history keeps a replaced version as its JSON only (nothing holds
  // the parsed object any more): a replay parses it back exactly, and a
  // selector's watch still sees the object enter and leave.
  auto s = Open();
  ASSERT_TRUE(s->Create("pods", Pvc("earlier")).ok());  // a watch from 0 would replay nothing
  const int64_t from = s->ResourceVersion();
  auto p = s->Create("pods", Pvc("p", "default", {{"app", "db"}}));
  Object in = *p;
  in["metadata"]["labels"]["app"] = "web";
  in["spec"]["x"] = 1;
  auto q = s->Update("pods", in);
  Object out = *q;
  out["metadata"]["labels"]["app"] = "cache";
  auto r = s->Update("pods", out);
  ASSERT_TRUE(r.ok()) << r.status();
  auto all = s->Watch("pods", "", from);
  ASSERT_TRUE(all.ok()) << all.status();
  std::vector<Object> seen;
  while (auto e = (*all)->Next(absl::Milliseconds(100))) seen.push_back(*e->object);
  EXPECT_THAT(seen, ::testing::ElementsAre(*p, *q, *r));
  auto web = s->Watch("pods", "", from, *api::LabelSelector::Parse("app=web"));
  ASSERT_TRUE(web.ok());
  std::vector<std::string> types;
  while (auto e = (*web)->Next(absl::Milliseconds(100))) types.push_back(EventTypeName(e->type));
  EXPECT_THAT(types, ::testing::ElementsAre("ADDED", "DELETED"));
}

TEST_F(StoreTest, ListStreamReadsStoredJsonInOrderUntilStopped) {
  auto s = Open();
  for (const auto& [name, ns] :
       std::vector<std::pair<std::string, std::string>>{{"b", "default"}, {"a", "default"}, {"c", "other"}}) {
    ASSERT_TRUE(s->Create("persistentvolumeclaims", Pvc(name, ns)).ok());
  }
  ASSERT_TRUE(s->Create("pods", Pvc("not-a-claim")).ok());
  int64_t rv = 0;
  std::vector<Object> items;
  auto each = [&](std::string_view data) {
    items.push_back(Object::parse(data));
    return true;
  };
  ASSERT_TRUE(s->ListStream(
                   "persistentvolumeclaims", "", [&](int64_t v) { rv = v; }, each)
                  .ok());
  EXPECT_EQ(rv, s->ResourceVersion());
  ASSERT_EQ(items.size(), 3u);
  EXPECT_EQ(items[0], *s->Get("persistentvolumeclaims", "default", "a"));
  EXPECT_EQ(items[1]["metadata"]["name"], "b");
  EXPECT_EQ(items[2]["metadata"]["name"], "c");
  items.clear();
  ASSERT_TRUE(s->ListStream(
                   "persistentvolumeclaims", "other", [](int64_t) {}, each)
                  .ok());
  ASSERT_EQ(items.size(), 1u);
  EXPECT_EQ(items[0]["metadata"]["name"], "c");
  int calls = 0;
  ASSERT_TRUE(s->ListStream(
                   "persistentvolumeclaims", "", [](int64_t) {},
                   [&](std::string_view) {
                     ++calls;
                     return false;
                   })
                  .ok());
  EXPECT_EQ(calls, 1) << "each returning false stops the list";
}

TEST_F(StoreTest, ConcurrentWritersShareCommitsAndGetDistinctVersions) {
  auto s = Open();
  constexpr int kThreads = 8, kEach = 200;
  std::vector<std::thread> threads;
  std::mutex mu;
  std::set<int64_t> rvs;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        auto c = s->Create("pods", Pvc("p-" + std::to_string(t) + "-" + std::to_string(i)));
        if (!c.ok()) {
          ++failures;
          continue;
        }
        std::lock_guard<std::mutex> l(mu);
        rvs.insert(Rv(*c));
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(rvs.size(), static_cast<size_t>(kThreads * kEach)) << "every write has its own version";
  EXPECT_EQ(s->List("pods", "")->items.size(), static_cast<size_t>(kThreads * kEach));
  // One failing mutation in a batch does not take the others down.
  std::vector<std::thread> racers;
  std::atomic<int> created{0}, exists{0};
  for (int t = 0; t < 8; ++t) {
    racers.emplace_back([&] {
      auto c = s->Create("pods", Pvc("contended"));
      if (c.ok()) ++created;
      if (c.status().code() == absl::StatusCode::kAlreadyExists) ++exists;
    });
  }
  for (auto& th : racers) th.join();
  EXPECT_EQ(created, 1);
  EXPECT_EQ(exists, 7);
}

TEST_F(StoreTest, SurvivesReopenAndKeepsCountingVersions) {
  int64_t rv = 0;
  {
    auto s = Open();
    ASSERT_TRUE(s->Create("pods", Pvc("a")).ok());
    ASSERT_TRUE(s->Create("pods", Pvc("a2")).ok());
    rv = s->ResourceVersion();
  }
  auto s = Open();
  EXPECT_EQ(s->ResourceVersion(), rv);
  ASSERT_TRUE(s->Get("pods", "default", "a").ok());
  auto b = s->Create("pods", Pvc("b"));
  EXPECT_EQ(Rv(*b), rv + 1);
  // History does not survive a restart: older versions are gone, the current one is fine.
  EXPECT_EQ(s->Watch("pods", "", rv - 1).status().code(), absl::StatusCode::kOutOfRange);
}

TEST_F(StoreTest, RefusesNewerSchema) {
  { Open(); }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(dir_.Join("state.db").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "UPDATE meta SET value='9' WHERE key='schema_version'", nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  auto s = Store::Open({.path = dir_.Join("state.db")});
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.status().message(), HasSubstr("schema version 9"));
}

TEST_F(StoreTest, RefusesANewerUserVersion) {
  { Open(); }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(dir_.Join("state.db").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "PRAGMA user_version=7", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  auto s = Store::Open({.path = dir_.Join("state.db")});
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.status().message(), HasSubstr("schema version 7"));
}

int UserVersion(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) return -1;
  int version = -1;
  sqlite3_exec(
      db, "PRAGMA user_version",
      [](void* out, int, char** values, char**) {
        *static_cast<int*>(out) = std::atoi(values[0]);
        return 0;
      },
      &version, nullptr);
  sqlite3_close(db);
  return version;
}

// A database exactly as berth wrote it before schema 2 (tables of schema 1,
// meta.schema_version '1', no user_version): it opens, keeps its objects and
// its resourceVersion, and is migrated.
TEST_F(StoreTest, OpensADatabaseWrittenByThePreviousSchema) {
  const std::string path = dir_.Join("state.db");
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  const char* v1 =
      "PRAGMA journal_mode=WAL;"
      "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);"
      "CREATE TABLE objects(resource TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL, uid TEXT NOT NULL, "
      "rv INTEGER NOT NULL, data TEXT NOT NULL, PRIMARY KEY(resource, namespace, name));"
      "CREATE TABLE owner_refs(owner_uid TEXT NOT NULL, resource TEXT NOT NULL, namespace TEXT NOT NULL, "
      "name TEXT NOT NULL);"
      "CREATE INDEX owner_refs_uid ON owner_refs(owner_uid);"
      "CREATE INDEX owner_refs_key ON owner_refs(resource, namespace, name);"
      "INSERT INTO meta VALUES('rv', '41');"
      "INSERT INTO meta VALUES('schema_version', '1');"
      "INSERT INTO objects VALUES('persistentvolumeclaims', 'default', 'old', 'u-1', 41, "
      "'{\"apiVersion\":\"v1\",\"kind\":\"PersistentVolumeClaim\",\"metadata\":{\"name\":\"old\","
      "\"namespace\":\"default\",\"uid\":\"u-1\",\"resourceVersion\":\"41\","
      "\"creationTimestamp\":\"2026-01-01T00:00:00Z\"},\"spec\":{}}');";
  char* err = nullptr;
  ASSERT_EQ(sqlite3_exec(db, v1, nullptr, nullptr, &err), SQLITE_OK) << (err ? err : "");
  sqlite3_close(db);
  ASSERT_EQ(UserVersion(path), 0);

  auto s = Open();
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->ResourceVersion(), 41);
  auto old = s->Get("persistentvolumeclaims", "default", "old");
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ((*old)["metadata"]["uid"], "u-1");
  auto created = s->Create("persistentvolumeclaims", Pvc("new"));
  ASSERT_TRUE(created.ok());
  EXPECT_EQ(Rv(*created), 42);
  s.reset();
  EXPECT_EQ(UserVersion(path), kSchemaVersion);
  // Opening again migrates nothing and changes nothing.
  s = Open();
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->ResourceVersion(), 42);
}

TEST_F(StoreTest, GracefulDeletionMarksAndShortensButNeverLengthens) {
  auto s = Open();
  ASSERT_TRUE(s->Create("pods", Pvc("p")).ok());
  auto marked = s->Delete("pods", "default", "p", std::nullopt, 30);
  ASSERT_TRUE(marked.ok()) << marked.status();
  EXPECT_EQ((*marked)["metadata"]["deletionGracePeriodSeconds"], 30);
  const std::string first = (*marked)["metadata"]["deletionTimestamp"];
  // Updates keep the pending deletion (no finalizers, but grace pending).
  Object updated = *s->Get("pods", "default", "p");
  updated["metadata"]["labels"]["x"] = "y";
  auto after_update = s->Update("pods", updated);
  ASSERT_TRUE(after_update.ok()) << after_update.status();
  EXPECT_EQ((*after_update)["metadata"]["deletionTimestamp"], first);
  EXPECT_EQ((*after_update)["metadata"]["deletionGracePeriodSeconds"], 30);
  // A longer grace period changes nothing; a shorter one shortens.
  auto longer = s->Delete("pods", "default", "p", std::nullopt, 60);
  ASSERT_TRUE(longer.ok());
  EXPECT_EQ((*longer)["metadata"]["deletionGracePeriodSeconds"], 30);
  auto shorter = s->Delete("pods", "default", "p", std::nullopt, 5);
  ASSERT_TRUE(shorter.ok());
  EXPECT_EQ((*shorter)["metadata"]["deletionGracePeriodSeconds"], 5);
  EXPECT_TRUE(s->Get("pods", "default", "p").ok());
  // Grace 0 removes it.
  ASSERT_TRUE(s->Delete("pods", "default", "p", std::nullopt, 0).ok());
  EXPECT_EQ(s->Get("pods", "default", "p").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(StoreTest, AGracefulDeletionMadeFinalWaitsForFinalizers) {
  auto s = Open();
  Object pod = Pvc("p");
  pod["metadata"]["finalizers"] = {"example.com/f"};
  ASSERT_TRUE(s->Create("pods", pod).ok());
  ASSERT_TRUE(s->Delete("pods", "default", "p", std::nullopt, 30).ok());
  auto final_delete = s->Delete("pods", "default", "p", std::nullopt, 0);
  ASSERT_TRUE(final_delete.ok());
  EXPECT_EQ((*final_delete)["metadata"]["deletionGracePeriodSeconds"], 0);
  Object cur = *s->Get("pods", "default", "p");
  cur["metadata"]["finalizers"] = Object::array();
  ASSERT_TRUE(s->Update("pods", cur).ok());
  EXPECT_EQ(s->Get("pods", "default", "p").status().code(), absl::StatusCode::kNotFound);
}

// ---- Object cache ----

TEST_F(StoreTest, CreateOfATakenNameFailsWithoutChangingIt) {
  auto s = Open();
  auto first = s->Create("pods", Pvc("a"));
  ASSERT_TRUE(first.ok());
  // Also when the cache does not hold it (a reopened store).
  s.reset();
  s = Open();
  Object again = Pvc("a");
  again["spec"]["x"] = 1;
  auto dup = s->Create("pods", again);
  EXPECT_EQ(dup.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(dup.status().message(), "pods \"a\" already exists");
  EXPECT_EQ(*s->Get("pods", "default", "a"), *first);
  // A name deleted earlier in the same group commit is free again.
  ASSERT_TRUE(s->Delete("pods", "default", "a").ok());
  EXPECT_TRUE(s->Create("pods", again).ok());
  // Same name and namespace in another resource is no clash.
  EXPECT_TRUE(s->Create("persistentvolumeclaims", Pvc("a")).ok());
}

}  // namespace
}  // namespace berth::store
