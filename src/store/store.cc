// The store: opening the database, the schema and its migrations, and the
// writer thread that commits mutations in batches. Reads and the object
// cache are in store_reads.cc, the writes in store_writes.cc, watches in
// store_watch.cc.
#include "store/store.h"

#include "store/store_internal.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

#include <map>
#include <random>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "api/json_text.h"
#include "common/memory.h"
#include "common/strings.h"
#include "common/thread_name.h"
#include "common/zstd.h"
#include "spdlog/spdlog.h"
namespace berth::store {
namespace store_internal {

absl::Mutex StmtPool::mu_;
std::map<std::pair<sqlite3*, std::string>, std::vector<sqlite3_stmt*>, StmtPool::Less> StmtPool::free_;

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

std::string Now() { return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::Now(), absl::UTCTimeZone()); }

std::string NewUid() {
  static thread_local std::mt19937_64 gen(std::random_device{}());
  const uint64_t a = gen(), b = gen();
  std::string h = fmt::format("{:016x}{:016x}", a, b);
  h[12] = '4';  // version 4
  h[16] = "89ab"[(b >> 2) & 3];
  return h.substr(0, 8) + "-" + h.substr(8, 4) + "-" + h.substr(12, 4) + "-" + h.substr(16, 4) + "-" + h.substr(20);
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

}  // namespace store_internal

const char* EventTypeName(EventType t) {
  switch (t) {
    case EventType::kAdded:
      return "ADDED";
    case EventType::kModified:
      return "MODIFIED";
    case EventType::kDeleted:
      return "DELETED";
  }
  return "?";
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
      {2, "the schema version is PRAGMA user_version (meta.schema_version kept for older berths to refuse)", {}},
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
      Stmt u(write_db_,
             "INSERT INTO meta(key, value) VALUES('schema_version', ?1) "
             "ON CONFLICT(key) DO UPDATE SET value=excluded.value");
      u.Bind(1, std::to_string(m.version));
      if (u.Step() != SQLITE_DONE) st = SqlError(write_db_, "record schema_version");
    }
    if (st.ok()) st = Exec(write_db_, StrCat("PRAGMA user_version=", m.version).c_str());
    if (st.ok()) st = Run(write_db_, "COMMIT");
    if (!st.ok()) {
      (void)Run(write_db_, "ROLLBACK");  // the error that matters is st
      return absl::Status(
          st.code(), StrCat("migrating ", options_.path, " to schema ", m.version, " (", m.what, "): ", st.message()));
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
    return absl::UnavailableError(
        StrCat("open ", options_.path, ": ", write_db_ ? sqlite3_errmsg(write_db_) : "out of memory"));
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
    if (sqlite3_open_v2(options_.path.c_str(), &read_db_, SQLITE_OPEN_READONLY | SQLITE_OPEN_FULLMUTEX, nullptr) !=
        SQLITE_OK) {
      return SqlError(read_db_, "open for reading");
    }
    if (absl::Status st = Exec(read_db_, "PRAGMA busy_timeout=10000"); !st.ok()) return st;
  }
  writer_ = std::make_unique<std::thread>(NamedThread("store writer", [this] { WriterLoop(); }));
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

absl::StatusOr<Store::ObjectPtr> Store::Submit(std::function<absl::StatusOr<ObjectPtr>(Txn&)> fn, TextPtr* text) {
  auto m = std::make_shared<Mutation>();
  m->fn = std::move(fn);
  {
    absl::MutexLock lock(&queue_mu_);
    if (stopping_) return absl::UnavailableError("store is closing");
    queue_.push_back(m);
  }
  absl::StatusOr<ObjectPtr> result = m->done.Take();
  if (text != nullptr && result.ok()) *text = std::move(m->text);  // written before `done` was set
  return result;
}

void Store::WriterLoop() {
  bool sweep_due = false;  // written since the cache's uncounted entries were last looked over
  while (true) {
    std::vector<std::shared_ptr<Mutation>> batch;
    bool idle = false;
    {
      absl::MutexLock lock(&queue_mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_) { return !queue_.empty() || stopping_; };
      if (sweep_due) {
        idle = !queue_mu_.AwaitWithTimeout(absl::Condition(&ready), options_.shared_sweep_after);
      } else {
        queue_mu_.Await(absl::Condition(&ready));
      }
      if (!idle && queue_.empty() && stopping_) return;
      while (!idle && !queue_.empty() && batch.size() < options_.max_batch) {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    if (idle) {  // quiet after writes: once, then wait for the next write
      sweep_due = false;
      CacheSweepIdle();
      if (options_.compact_when_idle) {
        CompactTexts();
        // The frames are read without the compression tables.
        for (const auto& [resource, trainer] : dictionaries_) {
          if (trainer.dictionary() != nullptr) trainer.dictionary()->ReleaseCompressor();
        }
        int64_t kept = 0;
        {
          absl::MutexLock lock(&cache_mu_);
          kept += static_cast<int64_t>(cache_.size());
        }
        {
          absl::MutexLock lock(&watch_mu_);
          kept += static_cast<int64_t>(history_.size());
        }
        if (next_rv_ - relocated_at_rv_ >= std::max(kRelocateAfter, kept / 8) && !WritesWaiting()) {
          RelocateKept();
          relocated_at_rv_ = next_rv_;
          // What the compaction let go of was mostly built by other threads
          // (handlers, controllers' workers): freed here, it waits in their
          // heaps until they next release, which for one idle since before
          // the last writes would be never.
          RequestIdleRelease();
        }
      }
      // SQLite's page caches (up to 2 MiB per connection) fill again from
      // the OS's page cache on the next burst.
      sqlite3_db_release_memory(write_db_);
      {
        absl::MutexLock lock(&read_mu_);
        sqlite3_db_release_memory(read_db_);
      }
      // The texts and objects this thread made and let go of go back now,
      // not at its next write (mimalloc's pages are its own to free).
      ReleaseThreadMemory();
      continue;
    }
    sweep_due = true;
    const int64_t rv_before = next_rv_;
    const absl::Time commit_start = absl::Now();
    std::vector<absl::StatusOr<ObjectPtr>> results;
    std::vector<Change> events;
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
          for (const Change& c : txn.events) {
            if (c.event.object == *r) m->text = c.event.text;
          }
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
    {
      absl::MutexLock lock(&commit_stats_mu_);
      ++(batch_status.ok() ? commit_stats_.commits : commit_stats_.failed_commits);
      if (batch_status.ok()) commit_stats_.mutations += static_cast<int64_t>(batch.size());
      commit_stats_.seconds += absl::ToDoubleSeconds(absl::Now() - commit_start);
    }
    if (!batch_status.ok()) {
      spdlog::error("store commit failed: {}", batch_status.ToString());
      next_rv_ = rv_before;
      for (auto& m : batch) m->done.Set(batch_status);
      continue;
    }
    // The cache follows the commit before anyone hears of it: a writer's
    // own Get and a watcher's reaction both see at least this batch.
    std::vector<ObjectPtr> released = CacheApply(std::move(batch_writes));
    Publish(events);
    for (size_t i = 0; i < batch.size(); ++i) batch[i]->done.Set(std::move(results[i]));
    // What the cache let go of is freed now, off the path the callers
    // waited on (batch, released, events: here, at the end of the loop).
  }
}

void Store::Publish(std::vector<Change>& events) {
  absl::MutexLock lock(&watch_mu_);
  std::vector<std::optional<std::map<std::string, std::string>>> before_labels(events.size());
  std::vector<Watcher::Offered> offered;
  offered.reserve(events.size());
  for (size_t i = 0; i < events.size(); ++i) {
    Change& c = events[i];
    if (c.before != nullptr) before_labels[i] = Labels(*c.before);
    // A deletion's last state was not written: serialized here, once, for
    // the history and every watcher.
    if (c.event.text == nullptr) c.event.text = std::make_shared<const std::string>(api::DumpJson(*c.event.object));
    offered.push_back({&c.event, before_labels[i] ? &*before_labels[i] : nullptr});
  }
  // The whole commit to each watcher at once: one wake-up per watcher.
  if (!offered.empty()) {
    for (Watcher* w : watchers_) w->Offer(offered);
  }
  for (size_t i = 0; i < events.size(); ++i) {
    Change& c = events[i];
    history_.push_back(HistoryEntry{c.event.type, std::move(c.event.resource), c.event.resource_version,
                                    KeptText(std::move(c.event.text)), c.event.object, std::move(before_labels[i])});
  }
  if (!events.empty()) committed_rv_ = events.back().event.resource_version;
  committed_rv_ = std::max(committed_rv_, next_rv_);  // also covers batches without events
  for (Watcher* w : watchers_) w->Progress(committed_rv_);
  while (history_.size() > options_.history) {
    history_start_rv_ = history_.front().resource_version;
    history_.pop_front();
  }
}

absl::StatusOr<Event> Store::HistoryEntry::ToEvent() const {
  absl::StatusOr<TextPtr> plain = text.Plain();
  if (!plain.ok()) return plain.status();
  ObjectPtr shared = object.lock();
  if (shared == nullptr) shared = std::make_shared<const Object>(Object::parse(**plain));
  return Event{type, resource, std::move(shared), resource_version, std::move(*plain)};
}

bool Store::WritesWaiting() {
  absl::MutexLock lock(&queue_mu_);
  return !queue_.empty() || stopping_;
}

namespace {

// The resource of a cache key (CacheKey: "<length>:<resource>...").
std::string_view KeyResource(std::string_view key) {
  const size_t colon = key.find(':');
  size_t n = 0;
  std::from_chars(key.data(), key.data() + colon, n);
  return key.substr(colon + 1, n);
}

}  // namespace

void Store::LetGoOfParsed(CacheEntry& entry) {
  // One held elsewhere stays found through `parsed`; no weak reference is
  // kept to one only the cache held (see CompactTexts).
  entry.parsed =
      entry.object.use_count() > 1 ? std::weak_ptr<const Object>(entry.object) : std::weak_ptr<const Object>();
  entry.object.reset();
}

void Store::CompactTexts() {
  struct Pending {
    TextPtr text;
    std::string resource;
    std::string frame;  // once compressed
    std::shared_ptr<const ZstdDictionary> dict;
  };
  // Every plain text kept, once: an object written lately has one text in
  // both the cache and the history. (Held here, a text's address stays its
  // own.) And the cache's entries still holding their parsed object.
  std::unordered_map<const std::string*, Pending> pending;
  std::vector<std::pair<std::string, uint64_t>> unwritten;  // key, serial
  {
    absl::MutexLock lock(&cache_mu_);
    for (auto& [key, entry] : cache_) {
      // A weak reference outliving its object keeps the object's block (one
      // allocation with the control block), pinning a page of the heap of
      // whichever thread parsed it.
      if (entry.parsed.expired()) entry.parsed.reset();
      if (entry.text.empty()) {
        if (entry.object != nullptr) unwritten.emplace_back(key, entry.serial);
        continue;
      }
      if (entry.object != nullptr) LetGoOfParsed(entry);  // read again since: its text is still here
      const TextPtr& t = entry.text.plain();
      if (t != nullptr) pending.try_emplace(t.get(), Pending{t, std::string(KeyResource(key)), {}, nullptr});
    }
  }
  {
    absl::MutexLock lock(&watch_mu_);
    for (const HistoryEntry& h : history_) {
      const TextPtr& t = h.text.plain();
      if (t != nullptr) pending.try_emplace(t.get(), Pending{t, h.resource, {}, nullptr});
    }
  }
  std::map<std::string, std::vector<Pending*>> by_resource;
  for (auto& [address, item] : pending) by_resource[item.resource].push_back(&item);
  // Dictionaries first, from the texts kept (the history's, mostly): the
  // cache's objects are then compressed as they are serialized.
  for (auto& [resource, items] : by_resource) {
    const std::vector<Pending*>& texts = items;  // clang before 16 cannot capture a structured binding
    dictionaries_[resource].Get(texts.size(), [&texts](size_t i) { return std::string_view(*texts[i]->text); });
  }
  auto dictionary_of = [this](std::string_view resource) -> std::shared_ptr<const ZstdDictionary> {
    auto it = dictionaries_.find(std::string(resource));
    return it != dictionaries_.end() ? it->second.dictionary() : nullptr;
  };
  // The cache's parsed objects: serialized (as the store wrote them: SQLite
  // holds the same bytes), compressed and let go of, a few hundred at a
  // time, so what is made before it is freed stays small. What they cost
  // parsed is what this frees: 4-5 times their text, 20 times a frame.
  constexpr size_t kChunk = 256;
  for (size_t at = 0; at < unwritten.size(); at += kChunk) {
    if (WritesWaiting()) return;  // the rest at the next pause
    const size_t end = std::min(at + kChunk, unwritten.size());
    std::vector<ObjectPtr> objects(end - at);
    {
      absl::MutexLock lock(&cache_mu_);
      for (size_t i = at; i < end; ++i) {
        auto it = cache_.find(unwritten[i].first);
        if (it != cache_.end() && it->second.serial == unwritten[i].second && it->second.text.empty()) {
          objects[i - at] = it->second.object;
        }
      }
    }
    std::vector<KeptText> texts(end - at);
    for (size_t i = at; i < end; ++i) {
      ObjectPtr& object = objects[i - at];
      if (object == nullptr) continue;
      KeptText& kept = texts[i - at];
      kept = KeptText(std::make_shared<const std::string>(api::DumpJson(*object)));
      object.reset();  // (held here, it would look held elsewhere below)
      if (auto dict = dictionary_of(KeyResource(unwritten[i].first))) {
        std::string frame = dict->Compress(*kept.plain());
        if (!frame.empty() && frame.size() < kept.size()) kept.SetCompressed(std::move(frame), std::move(dict));
      }
    }
    absl::MutexLock lock(&cache_mu_);
    for (size_t i = at; i < end; ++i) {
      auto it = cache_.find(unwritten[i].first);
      if (texts[i - at].empty() || it == cache_.end() || it->second.serial != unwritten[i].second ||
          !it->second.text.empty() || it->second.object == nullptr) {
        continue;
      }
      it->second.text = std::move(texts[i - at]);
      LetGoOfParsed(it->second);
    }
  }
  // The plain texts kept before: compressed, then each entry that still
  // holds the text it had takes the frame.
  size_t steps = 0;
  for (auto& [resource, items] : by_resource) {
    std::shared_ptr<const ZstdDictionary> dict = dictionary_of(resource);
    if (dict == nullptr) continue;
    for (Pending* item : items) {
      if (++steps % kChunk == 0 && WritesWaiting()) return;
      std::string frame = dict->Compress(*item->text);
      if (frame.empty() || frame.size() >= item->text->size()) continue;
      item->frame = std::move(frame);
      item->dict = dict;
    }
  }
  auto compress = [&pending](KeptText& text) {
    if (text.plain() == nullptr) return;
    auto it = pending.find(text.plain().get());
    if (it != pending.end() && it->second.dict != nullptr) text.SetCompressed(it->second.frame, it->second.dict);
  };
  {
    absl::MutexLock lock(&cache_mu_);
    for (auto& [key, entry] : cache_) compress(entry.text);
  }
  absl::MutexLock lock(&watch_mu_);
  for (HistoryEntry& h : history_) {
    compress(h.text);
    // (As the cache's: an expired weak reference pins its object's block.)
    if (h.object.expired()) h.object.reset();
  }
}

Store::HistoryStats Store::history_stats() const {
  absl::MutexLock lock(&watch_mu_);
  HistoryStats out;
  out.events = history_.size();
  for (const HistoryEntry& h : history_) {
    out.compressed_events += h.text.compressed() ? 1 : 0;
    out.text_bytes += h.text.held_bytes();
  }
  return out;
}

}  // namespace berth::store
