#include "store/store.h"

#include <sqlite3.h>

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

std::string Namespace(const Object& obj) { return Str(obj.value("metadata", Object::object()), "namespace"); }
std::string Name(const Object& obj) { return Str(obj.value("metadata", Object::object()), "name"); }

std::map<std::string, std::string> Labels(const Object& obj) {
  std::map<std::string, std::string> out;
  const Object& md = obj.value("metadata", Object::object());
  if (auto it = md.find("labels"); it != md.end() && it->is_object()) {
    for (const auto& [k, v] : it->items()) {
      if (v.is_string()) out[k] = v.get<std::string>();
    }
  }
  return out;
}

bool HasFinalizers(const Object& obj) {
  const Object& md = obj.value("metadata", Object::object());
  auto it = md.find("finalizers");
  return it != md.end() && it->is_array() && !it->empty();
}

std::vector<std::string> OwnerUids(const Object& obj) {
  std::vector<std::string> out;
  const Object& md = obj.value("metadata", Object::object());
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
  sqlite3* db;
  int64_t* next_rv;
  std::vector<std::pair<Event, std::optional<Object>>> events;

  absl::StatusOr<std::optional<Object>> Load(const std::string& resource, const std::string& ns,
                                             const std::string& name) {
    Stmt s(db, "SELECT data FROM objects WHERE resource=?1 AND namespace=?2 AND name=?3");
    if (!s.ok()) return SqlError(db, "prepare load");
    s.Bind(1, resource).Bind(2, ns).Bind(3, name);
    const int rc = s.Step();
    if (rc == SQLITE_DONE) return std::optional<Object>();
    if (rc != SQLITE_ROW) return SqlError(db, "load");
    return std::optional<Object>(Object::parse(s.Text(0)));
  }

  // Stores `obj` with a fresh resourceVersion and records the event.
  absl::StatusOr<Object> Put(const std::string& resource, Object obj, EventType type,
                             std::optional<Object> before) {
    const int64_t rv = ++*next_rv;
    obj["metadata"]["resourceVersion"] = std::to_string(rv);
    const std::string ns = Namespace(obj), name = Name(obj);
    Stmt s(db,
           "INSERT OR REPLACE INTO objects(resource, namespace, name, uid, rv, data) "
           "VALUES(?1, ?2, ?3, ?4, ?5, ?6)");
    s.Bind(1, resource).Bind(2, ns).Bind(3, name).Bind(4, Str(obj["metadata"], "uid"));
    s.Bind(5, rv).Bind(6, obj.dump());
    if (s.Step() != SQLITE_DONE) return SqlError(db, "put");
    if (absl::Status st = SetOwners(resource, ns, name, OwnerUids(obj)); !st.ok()) return st;
    events.push_back({Event{type, resource, obj, rv}, std::move(before)});
    return obj;
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
    const std::string uid = Str(obj["metadata"], "uid");
    events.push_back({Event{EventType::kDeleted, resource, obj, rv}, obj});
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
      if (!loaded->has_value()) continue;
      Object dep = **loaded;
      Object before = dep;
      Object& refs = dep["metadata"]["ownerReferences"];
      Object kept = Object::array();
      for (const auto& r : refs) {
        if (!(r.contains("uid") && r["uid"] == uid)) kept.push_back(r);
      }
      refs = kept;
      if (!kept.empty()) {
        if (auto st = Put(dres, dep, EventType::kModified, before); !st.ok()) return st.status();
      } else if (auto st = DeleteOrMark(dres, dep, before, depth + 1); !st.ok()) {
        return st.status();
      }
    }
    return absl::OkStatus();
  }

  // Deletion semantics: with finalizers, only mark; otherwise remove.
  absl::StatusOr<Object> DeleteOrMark(const std::string& resource, Object obj, Object before,
                                      int depth = 0) {
    if (HasFinalizers(obj)) {
      if (!obj["metadata"].contains("deletionTimestamp")) {
        obj["metadata"]["deletionTimestamp"] = Now();
        return Put(resource, obj, EventType::kModified, before);
      }
      return obj;
    }
    const size_t at = events.size();
    if (absl::Status st = Remove(resource, obj, depth); !st.ok()) return st;
    return events[at].first.object;  // Remove records this object first, then dependents
  }
};

struct Store::Mutation {
  std::function<absl::StatusOr<Object>(Txn&)> fn;
  std::promise<absl::StatusOr<Object>> done;
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
  if (!filter_.ns.empty() && Namespace(e.object) != filter_.ns) return;
  Event out = e;
  if (!filter_.selector.empty()) {
    const bool now = filter_.selector.Matches(Labels(e.object));
    const bool was = before != nullptr && filter_.selector.Matches(Labels(*before));
    if (e.type == EventType::kAdded && !now) return;
    if (e.type == EventType::kDeleted && !was && !now) return;
    if (e.type == EventType::kModified) {
      if (!now && !was) return;
      if (now && !was) out.type = EventType::kAdded;
      if (!now && was) out.type = EventType::kDeleted;
    }
  }
  absl::MutexLock lock(&mu_);
  if (ended_) return;
  if (queue_.size() >= store_->options_.watcher_queue) {
    ended_ = true;  // too slow: the client relists
    return;
  }
  queue_.push_back(std::move(out));
}

void Watcher::End() {
  absl::MutexLock lock(&mu_);
  ended_ = true;
}

// ---- Store ----

Store::Store(Options options) : options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<Store>> Store::Open(const Options& options) {
  std::unique_ptr<Store> s(new Store(options));
  if (absl::Status st = s->Init(); !st.ok()) return st;
  return s;
}

absl::Status Store::Init() {
  const int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX;
  if (sqlite3_open_v2(options_.path.c_str(), &write_db_, flags, nullptr) != SQLITE_OK) {
    return absl::UnavailableError(StrCat("open ", options_.path, ": ",
                                         write_db_ ? sqlite3_errmsg(write_db_) : "out of memory"));
  }
  for (const char* sql : {"PRAGMA journal_mode=WAL", "PRAGMA synchronous=FULL",
                          "PRAGMA busy_timeout=10000",
                          "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL)",
                          "CREATE TABLE IF NOT EXISTS objects(resource TEXT NOT NULL, namespace TEXT "
                          "NOT NULL, name TEXT NOT NULL, uid TEXT NOT NULL, rv INTEGER NOT NULL, data "
                          "TEXT NOT NULL, PRIMARY KEY(resource, namespace, name))",
                          "CREATE TABLE IF NOT EXISTS owner_refs(owner_uid TEXT NOT NULL, resource "
                          "TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL)",
                          "CREATE INDEX IF NOT EXISTS owner_refs_uid ON owner_refs(owner_uid)",
                          "CREATE INDEX IF NOT EXISTS owner_refs_key ON owner_refs(resource, "
                          "namespace, name)",
                          "INSERT OR IGNORE INTO meta(key, value) VALUES('rv', '0')"}) {
    if (absl::Status st = Exec(write_db_, sql); !st.ok()) return st;
  }
  {
    Stmt q(write_db_, "SELECT value FROM meta WHERE key='schema_version'");
    if (q.Step() == SQLITE_ROW) {
      const int version = std::stoi(q.Text(0));
      if (version > kSchemaVersion) {
        return absl::FailedPreconditionError(
            StrCat("database ", options_.path, " has schema version ", version,
                   "; this berth understands up to ", kSchemaVersion, ": upgrade berth"));
      }
    }
  }
  if (absl::Status st = Exec(write_db_, "INSERT OR IGNORE INTO meta(key, value) VALUES('schema_version', '1')");
      !st.ok()) {
    return st;
  }
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

absl::StatusOr<Object> Store::Submit(std::function<absl::StatusOr<Object>(Txn&)> fn) {
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
    std::vector<absl::StatusOr<Object>> results;
    std::vector<std::pair<Event, std::optional<Object>>> events;
    absl::Status batch_status = Run(write_db_, "BEGIN IMMEDIATE");
    if (batch_status.ok()) {
      for (auto& m : batch) {
        Txn txn{write_db_, &next_rv_, {}};
        const int64_t rv_at = next_rv_;
        (void)Run(write_db_, "SAVEPOINT m");
        absl::StatusOr<Object> r;
        try {
          r = m->fn(txn);
        } catch (const std::exception& e) {
          r = absl::InvalidArgumentError(StrCat("malformed object: ", e.what()));
        }
        if (r.ok()) {
          (void)Run(write_db_, "RELEASE m");
          for (auto& e : txn.events) events.push_back(std::move(e));
        } else {
          (void)Run(write_db_, "ROLLBACK TO m");
          (void)Run(write_db_, "RELEASE m");
          next_rv_ = rv_at;
        }
        results.push_back(std::move(r));
      }
      Stmt s(write_db_, "UPDATE meta SET value=?1 WHERE key='rv'");
      s.Bind(1, std::to_string(next_rv_));
      if (s.Step() != SQLITE_DONE) batch_status = SqlError(write_db_, "update rv");
      if (batch_status.ok()) batch_status = Run(write_db_, "COMMIT");
      if (!batch_status.ok()) (void)Run(write_db_, "ROLLBACK");
    }
    if (!batch_status.ok()) {
      spdlog::error("store commit failed: {}", batch_status.ToString());
      next_rv_ = rv_before;
      for (auto& m : batch) m->done.set_value(batch_status);
      continue;
    }
    Publish(std::move(events));
    for (size_t i = 0; i < batch.size(); ++i) batch[i]->done.set_value(std::move(results[i]));
  }
}

void Store::Publish(std::vector<std::pair<Event, std::optional<Object>>> events) {
  absl::MutexLock lock(&watch_mu_);
  for (auto& [e, before] : events) {
    for (Watcher* w : watchers_) w->Offer(e, before ? &*before : nullptr);
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

absl::StatusOr<Object> Store::Create(const std::string& resource, Object obj) {
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
  return Submit([resource, obj = std::move(obj)](Txn& txn) -> absl::StatusOr<Object> {
    auto existing = txn.Load(resource, Namespace(obj), Name(obj));
    if (!existing.ok()) return existing.status();
    if (existing->has_value()) {
      return absl::AlreadyExistsError(StrCat(resource, " \"", Name(obj), "\" already exists"));
    }
    return txn.Put(resource, obj, EventType::kAdded, std::nullopt);
  });
}

absl::StatusOr<Object> Store::Get(const std::string& resource, const std::string& ns,
                                  const std::string& name) {
  absl::MutexLock lock(&read_mu_);
  Stmt s(read_db_, "SELECT data FROM objects WHERE resource=?1 AND namespace=?2 AND name=?3");
  s.Bind(1, resource).Bind(2, ns).Bind(3, name);
  const int rc = s.Step();
  if (rc == SQLITE_DONE) return absl::NotFoundError(StrCat(resource, " \"", name, "\" not found"));
  if (rc != SQLITE_ROW) return SqlError(read_db_, "get");
  return Object::parse(s.Text(0));
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
  return Submit([resource, obj = std::move(obj)](Txn& txn) mutable -> absl::StatusOr<Object> {
    const std::string ns = Namespace(obj), name = Name(obj);
    auto loaded = txn.Load(resource, ns, name);
    if (!loaded.ok()) return loaded.status();
    if (!loaded->has_value()) return absl::NotFoundError(StrCat(resource, " \"", name, "\" not found"));
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
    if (smd.contains("deletionTimestamp")) {
      md["deletionTimestamp"] = smd["deletionTimestamp"];
    } else {
      md.erase("deletionTimestamp");
    }
    int64_t generation = smd.value("generation", 1);
    if (obj.value("spec", Object()) != stored.value("spec", Object())) ++generation;
    md["generation"] = generation;
    if (md.contains("deletionTimestamp") && !HasFinalizers(obj)) {
      // The last finalizer is gone: the object goes.
      const size_t at = txn.events.size();
      if (absl::Status st = txn.Remove(resource, obj); !st.ok()) return st;
      return txn.events[at].first.object;
    }
    return txn.Put(resource, obj, EventType::kModified, stored);
  });
}

absl::StatusOr<Object> Store::Delete(const std::string& resource, const std::string& ns,
                                     const std::string& name,
                                     const std::optional<std::string>& expected_uid) {
  return Submit([=](Txn& txn) -> absl::StatusOr<Object> {
    auto loaded = txn.Load(resource, ns, name);
    if (!loaded.ok()) return loaded.status();
    if (!loaded->has_value()) return absl::NotFoundError(StrCat(resource, " \"", name, "\" not found"));
    Object obj = **loaded;
    if (expected_uid && Str(obj["metadata"], "uid") != *expected_uid) {
      return absl::AbortedError(StrCat("Precondition failed: UID in precondition: ", *expected_uid,
                                       ", UID in object meta: ", Str(obj["metadata"], "uid")));
    }
    if (HasFinalizers(obj)) return txn.DeleteOrMark(resource, obj, obj);
    if (absl::Status st = txn.Remove(resource, obj); !st.ok()) return st;
    return txn.events.front().first.object;
  });
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
      if (e.resource_version > from_rv) w->Offer(e, before ? &*before : nullptr);
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
