#include "store/store.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <future>
#include <map>
#include <utility>
#include <vector>
#include <random>
#include <thread>

#include "absl/time/clock.h"
#include "common/strings.h"
#include "spdlog/spdlog.h"

namespace berth::store {
namespace {

// Prepared statements kept per (connection, SQL) and reused: preparing
// (parsing SQL) was a fifth of the controllers' CPU. Each connection is used
// by one thread at a time (the writer, or readers under read_mu_), so a
// statement is handed out to one user until it is released.
class StmtPool {
 public:
  static sqlite3_stmt* Acquire(sqlite3* db, const char* sql) {
    {
      absl::MutexLock lock(&mu_);
      auto it = free_.find({db, sql});
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
    auto& pool = free_[{db, sql}];
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
  static absl::Mutex mu_;
  static std::map<std::pair<sqlite3*, std::string>, std::vector<sqlite3_stmt*>> free_ ABSL_GUARDED_BY(mu_);
};
absl::Mutex StmtPool::mu_;
std::map<std::pair<sqlite3*, std::string>, std::vector<sqlite3_stmt*>> StmtPool::free_;

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
  int64_t Int(int col) { return sqlite3_column_int64(stmt_, col); }

 private:
  sqlite3* db_;
  const char* sql_;
  sqlite3_stmt* stmt_ = nullptr;
};

absl::Status SqlError(sqlite3* db, std::string_view what) {
  return absl::InternalError(StrCat("sqlite ", what, ": ", sqlite3_errmsg(db)));
}

// One statement through the pool (for the per-batch BEGIN / SAVEPOINT /
// COMMIT: sqlite3_exec would parse them every time).
absl::Status Run(sqlite3* db, const char* sql) {
  Stmt s(db, sql);
  if (!s.ok()) return SqlError(db, sql);
  const int rc = s.Step();
  if (rc != SQLITE_DONE && rc != SQLITE_ROW) return SqlError(db, sql);
  return absl::OkStatus();
}

absl::Status Exec(sqlite3* db, const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    absl::Status st = absl::InternalError(StrCat("sqlite: ", sql, ": ", err ? err : "?"));
    sqlite3_free(err);
    return st;
  }
  return absl::OkStatus();
}

std::string Now() {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::Now(), absl::UTCTimeZone());
}

std::string NewUid() {
  static thread_local std::mt19937_64 gen(std::random_device{}());
  const uint64_t a = gen(), b = gen();
  std::string h = fmt::format("{:016x}{:016x}", a, b);
  h[12] = '4';  // version 4
  h[16] = "89ab"[(b >> 2) & 3];
  return h.substr(0, 8) + "-" + h.substr(8, 4) + "-" + h.substr(12, 4) + "-" + h.substr(16, 4) +
         "-" + h.substr(20);
}

std::string RandomSuffix() {
  static constexpr char kAlphabet[] = "bcdfghjklmnpqrstvwxz2456789";
  static thread_local std::mt19937_64 gen(std::random_device{}());
  std::string s;
  for (int i = 0; i < 5; ++i) s.push_back(kAlphabet[gen() % (sizeof(kAlphabet) - 1)]);
  return s;
}

std::string Str(const Object& o, const char* field) {
  auto it = o.find(field);
  return it != o.end() && it->is_string() ? it->get<std::string>() : "";
}

// A writer's result handed to the caller: the copy is made in the caller's
// thread, not in the writer thread every write waits for.
absl::StatusOr<Object> Copy(absl::StatusOr<std::shared_ptr<const Object>> r) {
  if (!r.ok()) return r.status();
  return **r;
}

// obj.metadata, or an empty object; never a copy (obj.value("metadata", {})
// copied the whole metadata on every call, on the hot paths of every write).
const Object& Metadata(const Object& obj) {
  static const Object* const kEmpty = new Object(Object::object());
  if (!obj.is_object()) return *kEmpty;
  auto it = obj.find("metadata");
  return it != obj.end() && it->is_object() ? *it : *kEmpty;
}

// obj.spec (null when absent), not copied.
const Object& Spec(const Object& obj) {
  static const Object* const kNull = new Object();
  if (!obj.is_object()) return *kNull;
  auto it = obj.find("spec");
  return it != obj.end() ? *it : *kNull;
}

std::string Namespace(const Object& obj) { return Str(Metadata(obj), "namespace"); }
std::string Name(const Object& obj) { return Str(Metadata(obj), "name"); }

std::map<std::string, std::string> Labels(const Object& obj) {
  std::map<std::string, std::string> out;
  const Object& md = Metadata(obj);
  if (auto it = md.find("labels"); it != md.end() && it->is_object()) {
    for (const auto& [k, v] : it->items()) {
      if (v.is_string()) out[k] = v.get<std::string>();
    }
  }
  return out;
}

bool HasFinalizers(const Object& obj) {
  const Object& md = Metadata(obj);
  auto it = md.find("finalizers");
  return it != md.end() && it->is_array() && !it->empty();
}

std::vector<std::string> OwnerUids(const Object& obj) {
  std::vector<std::string> out;
  const Object& md = Metadata(obj);
  if (auto it = md.find("ownerReferences"); it != md.end() && it->is_array()) {
    for (const auto& ref : *it) {
      if (ref.is_object() && ref.contains("uid") && ref["uid"].is_string()) {
        out.push_back(ref["uid"].get<std::string>());
      }
    }
  }
  return out;
}

}  // namespace

const char* EventTypeName(EventType t) {
  switch (t) {
    case EventType::kAdded: return "ADDED";
    case EventType::kModified: return "MODIFIED";
    case EventType::kDeleted: return "DELETED";
  }
  return "?";
}

// ---- Transactions (writer thread only) ----

struct Store::Txn {
  Store* store;
  sqlite3* db;
  int64_t* next_rv;
  const CacheWrites* batch;  // what earlier mutations of this batch wrote
  CacheWrites writes;        // what this mutation wrote (enters the cache after COMMIT)
  std::vector<std::pair<Event, ObjectPtr>> events;

  // The object as this transaction sees it (null: there is none): its own
  // writes, then the batch's, then the committed state (cache, else SQLite).
  absl::StatusOr<ObjectPtr> Load(const std::string& resource, const std::string& ns,
                                 const std::string& name) {
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
  absl::StatusOr<ObjectPtr> Put(const std::string& resource, Object obj, EventType type,
                             ObjectPtr before) {
    const int64_t rv = ++*next_rv;
    obj["metadata"]["resourceVersion"] = std::to_string(rv);
    const std::string ns = Namespace(obj), name = Name(obj);
    const std::string data = obj.dump();
    Stmt s(db, type == EventType::kAdded
                   ? "INSERT INTO objects(resource, namespace, name, uid, rv, data) VALUES(?1, ?2, ?3, ?4, ?5, ?6)"
                   // An upsert rewrites the row in place; REPLACE deleted and
                   // re-inserted it (and its primary-key index entry) every time.
                   : "INSERT INTO objects(resource, namespace, name, uid, rv, data) VALUES(?1, ?2, ?3, ?4, ?5, ?6) "
                     "ON CONFLICT(resource, namespace, name) DO UPDATE SET uid=excluded.uid, rv=excluded.rv, "
                     "data=excluded.data");
    s.Bind(1, resource).Bind(2, ns).Bind(3, name).Bind(4, Str(obj["metadata"], "uid"));
    s.Bind(5, rv).Bind(6, data);
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
    writes[CacheKey(resource, ns, name)] = {stored, data.size(),
                                            !store->options_.write_only_resources.count(resource)};
    events.push_back({Event{type, resource, stored, rv}, std::move(before)});
    return stored;
  }

  absl::Status SetOwners(const std::string& resource, const std::string& ns,
                         const std::string& name, const std::vector<std::string>& owners) {
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
    events.push_back({Event{EventType::kDeleted, resource, last, rv}, last});
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
  absl::StatusOr<ObjectPtr> DeleteOrMark(const std::string& resource, Object obj, ObjectPtr before,
                                      int depth = 0) {
    if (HasFinalizers(obj)) {
      if (!obj["metadata"].contains("deletionTimestamp")) {
        obj["metadata"]["deletionTimestamp"] = Now();
        return Put(resource, std::move(obj), EventType::kModified, std::move(before));
      }
      return std::make_shared<const Object>(std::move(obj));
    }
    const size_t at = events.size();
    if (absl::Status st = Remove(resource, std::move(obj), depth); !st.ok()) return st;
    return events[at].first.object;  // Remove records this object first, then dependents
  }
};

struct Store::Mutation {
  std::function<absl::StatusOr<ObjectPtr>(Txn&)> fn;
  std::promise<absl::StatusOr<ObjectPtr>> done;
};

// ---- Watcher ----

Watcher::~Watcher() { store_->Unsubscribe(this); }

std::optional<Event> Watcher::Next(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !queue_.empty() || ended_; };
  mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
  if (queue_.empty()) return std::nullopt;
  Event e = std::move(queue_.front());
  queue_.pop_front();
  return e;
}

int64_t Watcher::BookmarkVersion() const {
  absl::MutexLock lock(&mu_);
  return queue_.empty() ? progress_rv_ : 0;
}

void Watcher::Progress(int64_t committed_rv) {
  absl::MutexLock lock(&mu_);
  progress_rv_ = std::max(progress_rv_, committed_rv);
}

bool Watcher::ended() const {
  absl::MutexLock lock(&mu_);
  return ended_ && queue_.empty();
}

void Watcher::Offer(const Event& e, const Object* before) {
  if (e.resource != filter_.resource) return;
  if (!filter_.ns.empty() && Namespace(*e.object) != filter_.ns) return;
  Event out = e;  // shares the object
  if (!filter_.selector.empty()) {
    const bool now = filter_.selector.Matches(Labels(*e.object));
    const bool was = before != nullptr && filter_.selector.Matches(Labels(*before));
    if (e.type == EventType::kAdded && !now) return;
    if (e.type == EventType::kDeleted && !was && !now) return;
    if (e.type == EventType::kModified) {
      if (!now && !was) return;
      if (now && !was) out.type = EventType::kAdded;
      if (!now && was) out.type = EventType::kDeleted;
    }
  }
  std::function<void()> notify;
  {
    absl::MutexLock lock(&mu_);
    if (ended_) return;
    if (queue_.size() >= store_->options_.watcher_queue) {
      ended_ = true;  // too slow: the client relists
    } else {
      queue_.push_back(std::move(out));
    }
    notify = notify_;
  }
  if (notify) notify();
}

void Watcher::End() {
  std::function<void()> notify;
  {
    absl::MutexLock lock(&mu_);
    ended_ = true;
    notify = notify_;
  }
  if (notify) notify();
}

void Watcher::SetNotify(std::function<void()> notify) {
  absl::MutexLock lock(&mu_);
  notify_ = std::move(notify);
}

// ---- Store ----

Store::Store(Options options) : options_(std::move(options)) {}

namespace {

// The schema's history, oldest first. A database records the last migration
// applied in PRAGMA user_version (and, for berths from before user_version,
// meta.schema_version, which they check); Open applies the ones after it,
// each in one transaction. Append only: a released migration never changes.
struct Migration {
  int version;
  const char* what;
  std::vector<const char*> statements;
};

const std::vector<Migration>& Migrations() {
  static const auto* const kMigrations = new std::vector<Migration>{
      {1,
       "objects, owner references, the resourceVersion counter",
       {"CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        "CREATE TABLE IF NOT EXISTS objects(resource TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL, "
        "uid TEXT NOT NULL, rv INTEGER NOT NULL, data TEXT NOT NULL, PRIMARY KEY(resource, namespace, name))",
        "CREATE TABLE IF NOT EXISTS owner_refs(owner_uid TEXT NOT NULL, resource TEXT NOT NULL, "
        "namespace TEXT NOT NULL, name TEXT NOT NULL)",
        "CREATE INDEX IF NOT EXISTS owner_refs_uid ON owner_refs(owner_uid)",
        "CREATE INDEX IF NOT EXISTS owner_refs_key ON owner_refs(resource, namespace, name)",
        "INSERT OR IGNORE INTO meta(key, value) VALUES('rv', '0')"}},
      {2,
       "the schema version is PRAGMA user_version (meta.schema_version kept for older berths to refuse)",
       {}},
  };
  return *kMigrations;
}

}  // namespace

absl::Status Store::Migrate() {
  int version = 0;
  {
    Stmt q(write_db_, "PRAGMA user_version");
    if (q.Step() != SQLITE_ROW) return SqlError(write_db_, "read user_version");
    version = static_cast<int>(std::stoll(q.Text(0)));
  }
  {
    // A database written before user_version was used has only
    // meta.schema_version; the higher of the two counts.
    Stmt t(write_db_, "SELECT 1 FROM sqlite_master WHERE type='table' AND name='meta'");
    if (t.Step() == SQLITE_ROW) {
      Stmt q(write_db_, "SELECT value FROM meta WHERE key='schema_version'");
      if (q.Step() == SQLITE_ROW) version = std::max(version, static_cast<int>(std::stoll(q.Text(0))));
    }
  }
  if (version > kSchemaVersion) {
    return absl::FailedPreconditionError(StrCat("database ", options_.path, " has schema version ", version,
                                                "; this berth understands up to ", kSchemaVersion, ": upgrade berth"));
  }
  for (const Migration& m : Migrations()) {
    if (m.version <= version) continue;
    absl::Status st = Run(write_db_, "BEGIN IMMEDIATE");
    for (const char* sql : m.statements) {
      if (st.ok()) st = Exec(write_db_, sql);
    }
    if (st.ok()) {
      Stmt u(write_db_, "INSERT INTO meta(key, value) VALUES('schema_version', ?1) "
                        "ON CONFLICT(key) DO UPDATE SET value=excluded.value");
      u.Bind(1, std::to_string(m.version));
      if (u.Step() != SQLITE_DONE) st = SqlError(write_db_, "record schema_version");
    }
    if (st.ok()) st = Exec(write_db_, StrCat("PRAGMA user_version=", m.version).c_str());
    if (st.ok()) st = Run(write_db_, "COMMIT");
    if (!st.ok()) {
      (void)Run(write_db_, "ROLLBACK");  // the error that matters is st
      return absl::Status(st.code(), StrCat("migrating ", options_.path, " to schema ", m.version, " (", m.what,
                                            "): ", st.message()));
    }
    if (version > 0) spdlog::info("store {}: migrated to schema {}: {}", options_.path, m.version, m.what);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Store>> Store::Open(const Options& options) {
  std::unique_ptr<Store> s(new Store(options));
  if (absl::Status st = s->Init(); !st.ok()) return st;
  return s;
}

absl::Status Store::Init() {
  // The database holds every object (Secrets included): create it owner-only
  // before SQLite does (SQLite would use 0644 less the umask). SQLite gives
  // its -wal and -shm files the database file's mode.
  if (int fd = ::open(options_.path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600); fd >= 0) {
    ::close(fd);
  } else {
    return absl::UnavailableError(StrCat("open ", options_.path, ": ", std::strerror(errno)));
  }
  const int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX;
  if (sqlite3_open_v2(options_.path.c_str(), &write_db_, flags, nullptr) != SQLITE_OK) {
    return absl::UnavailableError(StrCat("open ", options_.path, ": ",
                                         write_db_ ? sqlite3_errmsg(write_db_) : "out of memory"));
  }
  for (const char* sql : {"PRAGMA journal_mode=WAL", "PRAGMA synchronous=FULL", "PRAGMA busy_timeout=10000"}) {
    if (absl::Status st = Exec(write_db_, sql); !st.ok()) return st;
  }
  if (absl::Status st = Migrate(); !st.ok()) return st;
  {
    Stmt q(write_db_, "SELECT value FROM meta WHERE key='rv'");
    if (q.Step() != SQLITE_ROW) return SqlError(write_db_, "read rv");
    next_rv_ = std::stoll(q.Text(0));
  }
  {
    absl::MutexLock lock(&watch_mu_);
    committed_rv_ = next_rv_;
    history_start_rv_ = next_rv_;
  }
  {
    absl::MutexLock lock(&read_mu_);
    if (sqlite3_open_v2(options_.path.c_str(), &read_db_, SQLITE_OPEN_READONLY | SQLITE_OPEN_FULLMUTEX,
                        nullptr) != SQLITE_OK) {
      return SqlError(read_db_, "open for reading");
    }
    if (absl::Status st = Exec(read_db_, "PRAGMA busy_timeout=10000"); !st.ok()) return st;
  }
  writer_ = std::make_unique<std::thread>([this] { WriterLoop(); });
  return absl::OkStatus();
}

Store::~Store() {
  {
    absl::MutexLock lock(&queue_mu_);
    stopping_ = true;
  }
  if (writer_) writer_->join();
  {
    absl::MutexLock lock(&watch_mu_);
    for (Watcher* w : watchers_) w->End();
  }
  {
    absl::MutexLock lock(&read_mu_);
    StmtPool::Drop(read_db_);
    sqlite3_close(read_db_);
  }
  StmtPool::Drop(write_db_);
  sqlite3_close(write_db_);
}

int64_t Store::ResourceVersion() const {
  absl::MutexLock lock(&watch_mu_);
  return committed_rv_;
}

absl::StatusOr<Store::ObjectPtr> Store::Submit(std::function<absl::StatusOr<ObjectPtr>(Txn&)> fn) {
  auto m = std::make_shared<Mutation>();
  m->fn = std::move(fn);
  auto result = m->done.get_future();
  {
    absl::MutexLock lock(&queue_mu_);
    if (stopping_) return absl::UnavailableError("store is closing");
    queue_.push_back(m);
  }
  return result.get();
}

void Store::WriterLoop() {
  while (true) {
    std::vector<std::shared_ptr<Mutation>> batch;
    {
      absl::MutexLock lock(&queue_mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_) {
        return !queue_.empty() || stopping_;
      };
      queue_mu_.Await(absl::Condition(&ready));
      if (queue_.empty() && stopping_) return;
      while (!queue_.empty() && batch.size() < options_.max_batch) {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    const int64_t rv_before = next_rv_;
    std::vector<absl::StatusOr<ObjectPtr>> results;
    std::vector<std::pair<Event, ObjectPtr>> events;
    CacheWrites batch_writes;
    absl::Status batch_status = Run(write_db_, "BEGIN IMMEDIATE");
    if (batch_status.ok()) {
      for (auto& m : batch) {
        Txn txn{this, write_db_, &next_rv_, &batch_writes, {}, {}};
        const int64_t rv_at = next_rv_;
        // Each mutation in a savepoint, so a failed one leaves the batch's
        // others alone. A savepoint that cannot be opened, released or
        // rolled back fails the whole batch: its state is unknown.
        if (batch_status = Run(write_db_, "SAVEPOINT m"); !batch_status.ok()) break;
        absl::StatusOr<ObjectPtr> r;
        try {
          r = m->fn(txn);
        } catch (const std::exception& e) {
          r = absl::InvalidArgumentError(StrCat("malformed object: ", e.what()));
        }
        if (r.ok()) {
          if (batch_status = Run(write_db_, "RELEASE m"); !batch_status.ok()) break;
          for (auto& e : txn.events) events.push_back(std::move(e));
          for (auto& [key, w] : txn.writes) batch_writes[key] = std::move(w);
        } else {
          batch_status = Run(write_db_, "ROLLBACK TO m");
          if (batch_status.ok()) batch_status = Run(write_db_, "RELEASE m");
          if (!batch_status.ok()) break;
          next_rv_ = rv_at;
        }
        results.push_back(std::move(r));
      }
      if (batch_status.ok()) {
        Stmt s(write_db_, "UPDATE meta SET value=?1 WHERE key='rv'");
        s.Bind(1, std::to_string(next_rv_));
        if (s.Step() != SQLITE_DONE) batch_status = SqlError(write_db_, "update rv");
      }
      if (batch_status.ok()) batch_status = Run(write_db_, "COMMIT");
      if (!batch_status.ok()) (void)Run(write_db_, "ROLLBACK");
    }
    if (!batch_status.ok()) {
      spdlog::error("store commit failed: {}", batch_status.ToString());
      next_rv_ = rv_before;
      for (auto& m : batch) m->done.set_value(batch_status);
      continue;
    }
    // The cache follows the commit before anyone hears of it: a writer's
    // own Get and a watcher's reaction both see at least this batch.
    CacheApply(std::move(batch_writes));
    Publish(std::move(events));
    for (size_t i = 0; i < batch.size(); ++i) batch[i]->done.set_value(std::move(results[i]));
  }
}

void Store::Publish(std::vector<std::pair<Event, ObjectPtr>> events) {
  absl::MutexLock lock(&watch_mu_);
  for (auto& [e, before] : events) {
    for (Watcher* w : watchers_) w->Offer(e, before.get());
    committed_rv_ = e.resource_version;
    history_.emplace_back(std::move(e), std::move(before));
  }
  committed_rv_ = std::max(committed_rv_, next_rv_);  // also covers batches without events
  for (Watcher* w : watchers_) w->Progress(committed_rv_);
  while (history_.size() > options_.history) {
    history_start_rv_ = history_.front().first.resource_version;
    history_.pop_front();
  }
}

namespace {

// Checks a new object and sets the metadata the store owns.
absl::Status PrepareCreate(Object& obj) {
  if (!obj.is_object()) return absl::InvalidArgumentError("object must be a JSON object");
  Object& md = obj["metadata"];
  if (!md.is_object()) return absl::InvalidArgumentError("metadata must be an object");
  if (Str(md, "name").empty()) {
    const std::string gen = Str(md, "generateName");
    if (gen.empty()) return absl::InvalidArgumentError("metadata.name or metadata.generateName is required");
    md["name"] = gen + RandomSuffix();
  }
  // Cluster-scoped objects have no metadata.namespace (as in Kubernetes);
  // the table's namespace column is "" for them.
  if (md.contains("namespace") && Str(md, "namespace").empty()) md.erase("namespace");
  md["uid"] = NewUid();
  md["creationTimestamp"] = Now();
  md["generation"] = 1;
  md.erase("deletionTimestamp");
  md.erase("resourceVersion");
  return absl::OkStatus();
}

}  // namespace

std::function<absl::StatusOr<Store::ObjectPtr>(Store::Txn&)> Store::CreateFn(const std::string& resource,
                                                                            Object obj) {
  return [resource, obj = std::move(obj)](Txn& txn) -> absl::StatusOr<ObjectPtr> {
    return txn.Put(resource, obj, EventType::kAdded, nullptr);  // ALREADY_EXISTS when taken
  };
}

absl::StatusOr<Object> Store::Create(const std::string& resource, Object obj) {
  if (absl::Status st = PrepareCreate(obj); !st.ok()) return st;
  return Copy(Submit(CreateFn(resource, std::move(obj))));
}

std::vector<absl::StatusOr<Object>> Store::CreateAll(const std::string& resource,
                                                     std::vector<Object> objects) {
  std::vector<absl::StatusOr<Object>> out(objects.size(), absl::UnknownError(""));
  std::vector<std::shared_ptr<Mutation>> queued;
  std::vector<size_t> at;
  for (size_t i = 0; i < objects.size(); ++i) {
    if (absl::Status st = PrepareCreate(objects[i]); !st.ok()) {
      out[i] = st;
      continue;
    }
    auto m = std::make_shared<Mutation>();
    m->fn = CreateFn(resource, std::move(objects[i]));
    queued.push_back(std::move(m));
    at.push_back(i);
  }
  std::vector<std::future<absl::StatusOr<ObjectPtr>>> results;
  for (auto& m : queued) results.push_back(m->done.get_future());
  {
    absl::MutexLock lock(&queue_mu_);
    if (stopping_) {
      for (size_t i : at) out[i] = absl::UnavailableError("store is closing");
      return out;
    }
    // Queued together: they go into the same group commit (one fsync).
    for (auto& m : queued) queue_.push_back(std::move(m));
  }
  for (size_t k = 0; k < results.size(); ++k) out[at[k]] = Copy(results[k].get());
  return out;
}

absl::StatusOr<Object> Store::Get(const std::string& resource, const std::string& ns,
                                  const std::string& name) {
  absl::StatusOr<ObjectPtr> got = GetShared(resource, ns, name);
  if (!got.ok()) return got.status();
  return **got;
}

absl::StatusOr<std::shared_ptr<const Object>> Store::GetShared(const std::string& resource,
                                                               const std::string& ns,
                                                               const std::string& name) {
  const std::string key = CacheKey(resource, ns, name);
  uint64_t epoch;
  {
    absl::MutexLock lock(&cache_mu_);
    if (auto it = cache_.find(key); it != cache_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      ++stats_.hits;
      return it->second.object;
    }
    ++stats_.misses;
    epoch = epoch_;
  }
  std::string data;
  {
    absl::MutexLock lock(&read_mu_);
    Stmt s(read_db_, "SELECT data FROM objects WHERE resource=?1 AND namespace=?2 AND name=?3");
    s.Bind(1, resource).Bind(2, ns).Bind(3, name);
    const int rc = s.Step();
    if (rc == SQLITE_DONE) return absl::NotFoundError(StrCat(resource, " \"", name, "\" not found"));
    if (rc != SQLITE_ROW) return SqlError(read_db_, "get");
    data = s.Text(0);
  }
  auto obj = std::make_shared<const Object>(Object::parse(data));
  absl::MutexLock lock(&cache_mu_);
  // A batch applied since the miss may have changed the object after this
  // read: then the cache already holds what it wrote, or must not hold it.
  // Without one, what was read is committed state at least as new as the
  // cache's (and a newer commit still to be applied will overwrite it).
  if (epoch_ != epoch) {
    ++stats_.fills_skipped;
  } else if (!cache_.contains(key)) {
    CacheInsertLocked(key, obj, data.size());
  }
  return obj;
}

absl::StatusOr<ListResult> Store::List(const std::string& resource, const std::string& ns,
                                       const api::LabelSelector& selector, const ListPage& page) {
  absl::MutexLock lock(&read_mu_);
  ListResult out;
  // One read transaction: the list and its resourceVersion are one snapshot.
  if (absl::Status st = Run(read_db_, "BEGIN"); !st.ok()) return st;
  {
    Stmt rv(read_db_, "SELECT value FROM meta WHERE key='rv'");
    if (rv.Step() == SQLITE_ROW) out.resource_version = std::stoll(rv.Text(0));
    const auto& after = page.after;
    // Rows come in (namespace, name) order so a page ends at a stable key.
    std::string sql = "SELECT data, namespace, name FROM objects WHERE resource=?1";
    if (!ns.empty()) sql += " AND namespace=?2";
    if (after) sql += " AND (namespace > ?3 OR (namespace = ?3 AND name > ?4))";
    sql += " ORDER BY namespace, name";
    Stmt s(read_db_, sql.c_str());
    s.Bind(1, resource);
    if (!ns.empty()) s.Bind(2, ns);
    if (after) {
      s.Bind(3, after->first);
      s.Bind(4, after->second);
    }
    int rc;
    while ((rc = s.Step()) == SQLITE_ROW) {
      if (page.limit > 0 && out.items.size() == page.limit) {
        out.next = {Namespace(out.items.back()), Name(out.items.back())};
        rc = SQLITE_DONE;
        break;
      }
      Object o = Object::parse(s.Text(0));
      if (selector.empty() || selector.Matches(Labels(o))) out.items.push_back(std::move(o));
    }
    if (rc != SQLITE_DONE) {
      absl::Status st = SqlError(read_db_, "list");
      (void)Run(read_db_, "COMMIT");
      return st;
    }
  }
  (void)Run(read_db_, "COMMIT");
  return out;
}

absl::StatusOr<Object> Store::Update(const std::string& resource, Object obj) {
  if (!obj.is_object() || !obj["metadata"].is_object()) {
    return absl::InvalidArgumentError("metadata must be an object");
  }
  return Copy(Submit([resource, obj = std::move(obj)](Txn& txn) mutable -> absl::StatusOr<ObjectPtr> {
    const std::string ns = Namespace(obj), name = Name(obj);
    auto loaded = txn.Load(resource, ns, name);
    if (!loaded.ok()) return loaded.status();
    if (*loaded == nullptr) return absl::NotFoundError(StrCat(resource, " \"", name, "\" not found"));
    const Object& stored = **loaded;
    const std::string want_rv = Str(obj["metadata"], "resourceVersion");
    const std::string have_rv = Str(stored["metadata"], "resourceVersion");
    if (!want_rv.empty() && want_rv != have_rv) {
      return absl::AbortedError(StrCat(
          "Operation cannot be fulfilled on ", resource, " \"", name,
          "\": the object has been modified; please apply your changes to the latest version "
          "and try again"));
    }
    Object& md = obj["metadata"];
    const Object& smd = stored["metadata"];
    if (md.contains("uid") && !Str(md, "uid").empty() && md["uid"] != smd["uid"]) {
      return absl::AbortedError(StrCat("Precondition failed: UID in precondition: ", Str(md, "uid"),
                                       ", UID in object meta: ", Str(smd, "uid")));
    }
    md["uid"] = smd["uid"];
    md["creationTimestamp"] = smd["creationTimestamp"];
    if (std::string stored_ns = Str(smd, "namespace"); !stored_ns.empty()) {
      md["namespace"] = stored_ns;
    } else {
      md.erase("namespace");
    }
    for (const char* field : {"deletionTimestamp", "deletionGracePeriodSeconds"}) {
      if (smd.contains(field)) {
        md[field] = smd[field];
      } else {
        md.erase(field);
      }
    }
    int64_t generation = smd.value("generation", 1);
    if (Spec(obj) != Spec(stored)) ++generation;
    md["generation"] = generation;
    if (md.contains("deletionTimestamp") && !HasFinalizers(obj) &&
        md.value("deletionGracePeriodSeconds", int64_t{0}) == 0) {
      // The last finalizer is gone (and no graceful deletion is pending): the
      // object goes.
      const size_t at = txn.events.size();
      if (absl::Status st = txn.Remove(resource, std::move(obj)); !st.ok()) return st;
      return txn.events[at].first.object;
    }
    return txn.Put(resource, std::move(obj), EventType::kModified, *loaded);
  }));
}

absl::StatusOr<Object> Store::Delete(const std::string& resource, const std::string& ns,
                                     const std::string& name,
                                     const std::optional<std::string>& expected_uid,
                                     std::optional<int64_t> grace_period_seconds) {
  return Copy(Submit([=](Txn& txn) -> absl::StatusOr<ObjectPtr> {
    auto loaded = txn.Load(resource, ns, name);
    if (!loaded.ok()) return loaded.status();
    if (*loaded == nullptr) return absl::NotFoundError(StrCat(resource, " \"", name, "\" not found"));
    const Object& stored = **loaded;
    if (expected_uid && Str(stored["metadata"], "uid") != *expected_uid) {
      return absl::AbortedError(StrCat("Precondition failed: UID in precondition: ", *expected_uid,
                                       ", UID in object meta: ", Str(stored["metadata"], "uid")));
    }
    const Object& smd = stored["metadata"];
    const bool deleting = smd.contains("deletionTimestamp");
    const int64_t current_grace = smd.value("deletionGracePeriodSeconds", int64_t{0});
    if (grace_period_seconds && *grace_period_seconds > 0) {
      // Graceful: mark with the time by which the object should be gone. A
      // deletion already pending keeps its earlier deadline (a grace period
      // may only shrink, as in Kubernetes).
      if (deleting && (!smd.contains("deletionGracePeriodSeconds") || current_grace <= *grace_period_seconds)) {
        return *loaded;
      }
      Object obj = stored;
      obj["metadata"]["deletionTimestamp"] = absl::FormatTime(
          "%Y-%m-%dT%H:%M:%SZ", absl::Now() + absl::Seconds(*grace_period_seconds), absl::UTCTimeZone());
      obj["metadata"]["deletionGracePeriodSeconds"] = *grace_period_seconds;
      return txn.Put(resource, std::move(obj), EventType::kModified, *loaded);
    }
    if (HasFinalizers(stored)) {
      if (deleting && current_grace > 0) {
        // A graceful deletion made final: finalizers alone keep it now.
        Object obj = stored;
        obj["metadata"]["deletionGracePeriodSeconds"] = 0;
        return txn.Put(resource, std::move(obj), EventType::kModified, *loaded);
      }
      return txn.DeleteOrMark(resource, stored, *loaded);
    }
    if (absl::Status st = txn.Remove(resource, stored); !st.ok()) return st;
    return txn.events.front().first.object;
  }));
}

// ---- Object cache ----

std::string Store::CacheKey(std::string_view resource, std::string_view ns, std::string_view name) {
  // Length-prefixed: no separator can be forged by a name.
  return StrCat(std::to_string(resource.size()), ":", resource, std::to_string(ns.size()), ":", ns, name);
}

Store::ObjectPtr Store::CacheLookup(const std::string& key) {
  absl::MutexLock lock(&cache_mu_);
  auto it = cache_.find(key);
  if (it == cache_.end()) {
    ++stats_.misses;
    return nullptr;
  }
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  ++stats_.hits;
  return it->second.object;
}

void Store::CacheInsertLocked(const std::string& key, ObjectPtr object, size_t bytes) {
  cache_mu_.AssertHeld();
  if (bytes > options_.cache_bytes) return;  // also: the cache is off
  lru_.push_front(key);
  cache_[key] = CacheEntry{std::move(object), bytes, lru_.begin()};
  cache_bytes_ += bytes;
  while (cache_bytes_ > options_.cache_bytes) {
    auto victim = cache_.find(lru_.back());
    cache_bytes_ -= victim->second.bytes;
    cache_.erase(victim);
    lru_.pop_back();
  }
}

void Store::CacheApply(CacheWrites writes) {
  absl::MutexLock lock(&cache_mu_);
  ++epoch_;
  for (auto& [key, w] : writes) {
    if (auto it = cache_.find(key); it != cache_.end()) {
      cache_bytes_ -= it->second.bytes;
      lru_.erase(it->second.lru);
      cache_.erase(it);
    }
    if (w.object != nullptr && w.admit) CacheInsertLocked(key, std::move(w.object), w.bytes);
  }
}

Store::CacheStats Store::cache_stats() const {
  absl::MutexLock lock(&cache_mu_);
  CacheStats out = stats_;
  out.objects = cache_.size();
  out.bytes = cache_bytes_;
  return out;
}

absl::StatusOr<std::unique_ptr<Watcher>> Store::Watch(const std::string& resource,
                                                      const std::string& ns, int64_t from_rv,
                                                      const api::LabelSelector& selector) {
  std::unique_ptr<Watcher> w(new Watcher(this, {resource, ns, selector}));
  absl::MutexLock lock(&watch_mu_);
  if (from_rv > 0) {
    // A version from a list may not be published to watches yet: wait for it.
    auto caught_up = [this, from_rv]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(watch_mu_) {
      return committed_rv_ >= from_rv;
    };
    if (!watch_mu_.AwaitWithTimeout(absl::Condition(&caught_up), absl::Seconds(5))) {
      return absl::InvalidArgumentError(StrCat("resourceVersion ", from_rv,
                                               " is newer than the store's ", committed_rv_));
    }
    if (from_rv < history_start_rv_) {
      return absl::OutOfRangeError(StrCat("too old resource version: ", from_rv, " (",
                                          history_start_rv_, ")"));
    }
    for (const auto& [e, before] : history_) {
      if (e.resource_version > from_rv) w->Offer(e, before.get());
    }
  }
  w->Progress(committed_rv_);  // everything up to here is offered (or not wanted)
  watchers_.push_back(w.get());
  return w;
}

void Store::Unsubscribe(Watcher* w) {
  absl::MutexLock lock(&watch_mu_);
  std::erase(watchers_, w);
}

}  // namespace berth::store
