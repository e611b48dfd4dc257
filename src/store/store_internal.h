// What the parts of the store (store.cc, store_reads.cc, store_writes.cc,
// store_watch.cc) share: pooled prepared statements, small helpers over
// objects, and the writer's transaction. Not for use outside src/store.
#ifndef BERTH_STORE_STORE_INTERNAL_H_
#define BERTH_STORE_STORE_INTERNAL_H_

#include <linux/futex.h>
#include <sqlite3.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "api/json_text.h"
#include "common/strings.h"
#include "store/store.h"

namespace berth::store {
namespace store_internal {

// Prepared statements kept per (connection, SQL) and reused: preparing
// (parsing SQL) was a fifth of the controllers' CPU. Each connection is used
// by one thread at a time (the writer, or readers under read_mu_), so a
// statement is handed out to one user until it is released.
class StmtPool {
 public:
  static sqlite3_stmt* Acquire(sqlite3* db, const char* sql) {
    {
      absl::MutexLock lock(&mu_);
      auto it = free_.find(Key{db, sql});
      if (it != free_.end() && !it->second.empty()) {
        sqlite3_stmt* s = it->second.back();
        it->second.pop_back();
        return s;
      }
    }
    sqlite3_stmt* s = nullptr;
    if (sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &s, nullptr) != SQLITE_OK) return nullptr;
    return s;
  }
  static void Release(sqlite3* db, const char* sql, sqlite3_stmt* s) {
    if (s == nullptr) return;
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    absl::MutexLock lock(&mu_);
    auto it = free_.find(Key{db, sql});  // the SQL text is copied once, not per statement
    if (it == free_.end()) it = free_.try_emplace(std::pair<sqlite3*, std::string>(db, sql)).first;
    auto& pool = it->second;
    // Bounded: dynamic SQL (list queries) comes in a few shapes only, but
    // nothing may grow without limit.
    if (pool.size() >= 4 || free_.size() > 256) {
      sqlite3_finalize(s);
      return;
    }
    pool.push_back(s);
  }
  // Finalizes every pooled statement of `db` (before sqlite3_close).
  static void Drop(sqlite3* db) {
    absl::MutexLock lock(&mu_);
    for (auto it = free_.begin(); it != free_.end();) {
      if (it->first.first != db) {
        ++it;
        continue;
      }
      for (sqlite3_stmt* s : it->second) sqlite3_finalize(s);
      it = free_.erase(it);
    }
  }

 private:
  using Key = std::pair<sqlite3*, std::string_view>;
  // Compares stored keys with lookups by a view of the SQL text.
  struct Less {
    using is_transparent = void;
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      return Key(a.first, a.second) < Key(b.first, b.second);
    }
  };
  static absl::Mutex mu_;
  static std::map<std::pair<sqlite3*, std::string>, std::vector<sqlite3_stmt*>, Less> free_ ABSL_GUARDED_BY(mu_);
};

// A prepared statement from the pool, returned to it on scope exit.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) : db_(db), sql_(sql), stmt_(StmtPool::Acquire(db, sql)) {}
  ~Stmt() { StmtPool::Release(db_, sql_, stmt_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  bool ok() const { return stmt_ != nullptr; }
  Stmt& Bind(int i, const std::string& s) {
    sqlite3_bind_text(stmt_, i, s.data(), static_cast<int>(s.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& Bind(int i, int64_t v) {
    sqlite3_bind_int64(stmt_, i, v);
    return *this;
  }
  // SQLITE_ROW, SQLITE_DONE or an error code.
  int Step() { return stmt_ ? sqlite3_step(stmt_) : SQLITE_ERROR; }
  std::string Text(int col) {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, col));
    return p ? std::string(p, static_cast<size_t>(sqlite3_column_bytes(stmt_, col))) : "";
  }
  // The column's text without a copy, valid until the next Step.
  std::string_view View(int col) {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, col));
    return p ? std::string_view(p, static_cast<size_t>(sqlite3_column_bytes(stmt_, col))) : std::string_view();
  }
  int64_t Int(int col) { return sqlite3_column_int64(stmt_, col); }

 private:
  sqlite3* db_;
  const char* sql_;
  sqlite3_stmt* stmt_ = nullptr;
};

absl::Status SqlError(sqlite3* db, std::string_view what);
// One statement through the pool (for the per-batch BEGIN / SAVEPOINT /
// COMMIT: sqlite3_exec would parse them every time).
absl::Status Run(sqlite3* db, const char* sql);
absl::Status Exec(sqlite3* db, const char* sql);
std::string Now();
std::string NewUid();
std::string RandomSuffix();
std::string Str(const Object& o, const char* field);
// A writer's result handed to the caller: the copy is made in the caller's
// thread, not in the writer thread every write waits for.
absl::StatusOr<Object> Copy(absl::StatusOr<std::shared_ptr<const Object>> r);
// obj.metadata, or an empty object; never a copy (obj.value("metadata", {})
// copied the whole metadata on every call, on the hot paths of every write).
const Object& Metadata(const Object& obj);
// obj.spec (null when absent), not copied.
const Object& Spec(const Object& obj);
std::string Namespace(const Object& obj);
std::string Name(const Object& obj);
std::map<std::string, std::string> Labels(const Object& obj);
bool HasFinalizers(const Object& obj);
std::vector<std::string> OwnerUids(const Object& obj);

}  // namespace store_internal

using namespace store_internal;  // NOLINT: an internal header of the store's own parts

// ---- Transactions (writer thread only) ----

struct Store::Txn {
  Store* store;
  sqlite3* db;
  int64_t* next_rv;
  const CacheWrites* batch;  // what earlier mutations of this batch wrote
  CacheWrites writes;        // what this mutation wrote (enters the cache after COMMIT)
  std::vector<Change> events;

  // The object as this transaction sees it (null: there is none): its own
  // writes, then the batch's, then the committed state (cache, else SQLite).
  absl::StatusOr<ObjectPtr> Load(const std::string& resource, const std::string& ns, const std::string& name) {
    const std::string key = CacheKey(resource, ns, name);
    if (auto it = writes.find(key); it != writes.end()) return it->second.object;
    if (auto it = batch->find(key); it != batch->end()) return it->second.object;
    if (ObjectPtr cached = store->CacheLookup(key)) return cached;
    Stmt s(db, "SELECT data FROM objects WHERE resource=?1 AND namespace=?2 AND name=?3");
    if (!s.ok()) return SqlError(db, "prepare load");
    s.Bind(1, resource).Bind(2, ns).Bind(3, name);
    const int rc = s.Step();
    if (rc == SQLITE_DONE) return ObjectPtr();
    if (rc != SQLITE_ROW) return SqlError(db, "load");
    return std::make_shared<const Object>(Object::parse(s.Text(0)));
  }

  // Stores `obj` with a fresh resourceVersion and records the event.
  // A kAdded event inserts and fails with ALREADY_EXISTS when the key is
  // taken (no lookup first: the primary key decides, inside this
  // transaction); anything else rewrites the row.
  absl::StatusOr<ObjectPtr> Put(const std::string& resource, Object obj, EventType type, ObjectPtr before) {
    const int64_t rv = ++*next_rv;
    obj["metadata"]["resourceVersion"] = std::to_string(rv);
    const std::string ns = Namespace(obj), name = Name(obj);
    auto data = std::make_shared<const std::string>(api::DumpJson(obj));
    Stmt s(db, type == EventType::kAdded
                   ? "INSERT INTO objects(resource, namespace, name, uid, rv, data) VALUES(?1, ?2, ?3, ?4, ?5, ?6)"
                   // An upsert rewrites the row in place; REPLACE deleted and
                   // re-inserted it (and its primary-key index entry) every time.
                   : "INSERT INTO objects(resource, namespace, name, uid, rv, data) VALUES(?1, ?2, ?3, ?4, ?5, ?6) "
                     "ON CONFLICT(resource, namespace, name) DO UPDATE SET uid=excluded.uid, rv=excluded.rv, "
                     "data=excluded.data");
    s.Bind(1, resource).Bind(2, ns).Bind(3, name).Bind(4, Str(obj["metadata"], "uid"));
    s.Bind(5, rv).Bind(6, *data);
    if (const int rc = s.Step(); rc != SQLITE_DONE) {
      if (type == EventType::kAdded && (sqlite3_extended_errcode(db) == SQLITE_CONSTRAINT_PRIMARYKEY ||
                                        sqlite3_extended_errcode(db) == SQLITE_CONSTRAINT_UNIQUE)) {
        return absl::AlreadyExistsError(StrCat(resource, " \"", name, "\" already exists"));
      }
      return SqlError(db, "put");
    }
    // owner_refs always mirror the stored object's ownerReferences (a new
    // object has none: Remove clears them), so rewrite them only on change.
    if (std::vector<std::string> owners = OwnerUids(obj);
        owners != (before != nullptr ? OwnerUids(*before) : std::vector<std::string>())) {
      if (absl::Status st = SetOwners(resource, ns, name, owners); !st.ok()) return st;
    }
    auto stored = std::make_shared<const Object>(std::move(obj));
    writes[CacheKey(resource, ns, name)] = {stored, data->size(),
                                            !store->options_.write_only_resources.count(resource)};
    events.push_back({Event{type, resource, stored, rv, std::move(data)}, std::move(before)});
    return stored;
  }

  absl::Status SetOwners(const std::string& resource, const std::string& ns, const std::string& name,
                         const std::vector<std::string>& owners) {
    Stmt del(db, "DELETE FROM owner_refs WHERE resource=?1 AND namespace=?2 AND name=?3");
    del.Bind(1, resource).Bind(2, ns).Bind(3, name);
    if (del.Step() != SQLITE_DONE) return SqlError(db, "owner refs");
    for (const auto& uid : owners) {
      Stmt ins(db, "INSERT INTO owner_refs(owner_uid, resource, namespace, name) VALUES(?1,?2,?3,?4)");
      ins.Bind(1, uid).Bind(2, resource).Bind(3, ns).Bind(4, name);
      if (ins.Step() != SQLITE_DONE) return SqlError(db, "owner refs");
    }
    return absl::OkStatus();
  }

  // Removes the object for good and garbage-collects its dependents.
  absl::Status Remove(const std::string& resource, Object obj, int depth = 0) {
    const int64_t rv = ++*next_rv;
    obj["metadata"]["resourceVersion"] = std::to_string(rv);
    const std::string ns = Namespace(obj), name = Name(obj);
    Stmt s(db, "DELETE FROM objects WHERE resource=?1 AND namespace=?2 AND name=?3");
    s.Bind(1, resource).Bind(2, ns).Bind(3, name);
    if (s.Step() != SQLITE_DONE) return SqlError(db, "delete");
    if (absl::Status st = SetOwners(resource, ns, name, {}); !st.ok()) return st;
    writes[CacheKey(resource, ns, name)] = {nullptr, 0};
    const std::string uid = Str(obj["metadata"], "uid");
    auto last = std::make_shared<const Object>(std::move(obj));
    events.push_back({Event{EventType::kDeleted, resource, last, rv, nullptr}, last});
    if (depth > 32) return absl::OkStatus();  // ownership cycles end here
    // Dependents: drop the reference to this owner; delete those left orphaned.
    std::vector<std::tuple<std::string, std::string, std::string>> deps;
    {
      Stmt q(db, "SELECT resource, namespace, name FROM owner_refs WHERE owner_uid=?1");
      q.Bind(1, uid);
      while (q.Step() == SQLITE_ROW) deps.emplace_back(q.Text(0), q.Text(1), q.Text(2));
    }
    for (const auto& [dres, dns, dname] : deps) {
      auto loaded = Load(dres, dns, dname);
      if (!loaded.ok()) return loaded.status();
      if (*loaded == nullptr) continue;
      Object dep = **loaded;
      Object& refs = dep["metadata"]["ownerReferences"];
      Object kept = Object::array();
      for (const auto& r : refs) {
        if (!(r.contains("uid") && r["uid"] == uid)) kept.push_back(r);
      }
      refs = kept;
      if (!kept.empty()) {
        if (auto st = Put(dres, std::move(dep), EventType::kModified, *loaded); !st.ok()) return st.status();
      } else if (auto st = DeleteOrMark(dres, std::move(dep), *loaded, depth + 1); !st.ok()) {
        return st.status();
      }
    }
    return absl::OkStatus();
  }

  // Deletion semantics: with finalizers, only mark; otherwise remove.
  absl::StatusOr<ObjectPtr> DeleteOrMark(const std::string& resource, Object obj, ObjectPtr before, int depth = 0) {
    if (HasFinalizers(obj)) {
      if (!obj["metadata"].contains("deletionTimestamp")) {
        obj["metadata"]["deletionTimestamp"] = Now();
        return Put(resource, std::move(obj), EventType::kModified, std::move(before));
      }
      return std::make_shared<const Object>(std::move(obj));
    }
    const size_t at = events.size();
    if (absl::Status st = Remove(resource, std::move(obj), depth); !st.ok()) return st;
    return events[at].event.object;  // Remove records this object first, then dependents
  }
};

// A write's result, handed from the writer thread to the caller waiting for
// it: a futex word. The caller sleeps only when the result is not there yet,
// and the writer makes a system call only when a caller sleeps.
// (std::promise::set_value runs std::call_once, pthread_once and its
// cancellation bookkeeping, on the writer's path that every write waits for:
// ~3 % of that thread's CPU in a burst. C++20's std::atomic::wait in
// libstdc++ 12 spins and yields before it sleeps, and its notify consults a
// waiter table shared by every atomic of the process.)
template <typename Result>
class WriteOutcome {
 public:
  WriteOutcome() = default;
  WriteOutcome(const WriteOutcome&) = delete;
  WriteOutcome& operator=(const WriteOutcome&) = delete;

  // Once. The caller of Set keeps this alive until Set returns (a woken
  // caller may be gone before the wake-up call is made).
  void Set(Result result) {
    result_.emplace(std::move(result));
    if (state_.exchange(kReady, std::memory_order_acq_rel) == kWaiting) {
      syscall(SYS_futex, reinterpret_cast<uint32_t*>(&state_), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
    }
  }
  // Once: waits for Set, then hands its result over.
  Result Take() {
    uint32_t seen = kEmpty;
    if (state_.compare_exchange_strong(seen, kWaiting, std::memory_order_acq_rel, std::memory_order_acquire)) {
      // Woken by Set, or spuriously (a signal, or a wake-up meant for an
      // earlier user of this address): the state says which.
      while (state_.load(std::memory_order_acquire) != kReady) {
        syscall(SYS_futex, reinterpret_cast<uint32_t*>(&state_), FUTEX_WAIT_PRIVATE, kWaiting, nullptr, nullptr, 0);
      }
    }
    return *std::move(result_);
  }
  // Whether a caller sleeps in Take (for tests).
  bool Waiting() const { return state_.load(std::memory_order_acquire) == kWaiting; }

 private:
  static constexpr uint32_t kEmpty = 0, kWaiting = 1, kReady = 2;
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) && std::atomic<uint32_t>::is_always_lock_free);
  std::optional<Result> result_;
  std::atomic<uint32_t> state_{kEmpty};
};

struct Store::Mutation {
  std::function<absl::StatusOr<ObjectPtr>(Txn&)> fn;
  // The stored text of the object fn returned, when it wrote it (set by the
  // writer before `done`).
  TextPtr text;
  WriteOutcome<absl::StatusOr<ObjectPtr>> done;
};

}  // namespace berth::store

#endif  // BERTH_STORE_STORE_INTERNAL_H_
