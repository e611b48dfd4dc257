// The store's reads (get and list) and the object cache in front of them.
#include "store/store.h"

#include <sqlite3.h>

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "common/memory.h"
#include "common/status.h"
#include "spdlog/spdlog.h"
#include "store/store_internal.h"

namespace berth::store {

// ---- Reads ----

absl::StatusOr<Object> Store::Get(const std::string& resource, const std::string& ns, const std::string& name) {
  absl::StatusOr<ObjectPtr> got = GetShared(resource, ns, name);
  if (!got.ok()) return got.status();
  return **got;
}

absl::StatusOr<std::shared_ptr<const Object>> Store::GetShared(const std::string& resource, const std::string& ns,
                                                               const std::string& name) {
  const std::string key = CacheKey(resource, ns, name);
  uint64_t epoch = 0;
  if (ObjectPtr cached = CacheLookup(key, &epoch)) return cached;
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
    CacheInsertLocked(key, obj, data.size(), CacheList::kLru);
  }
  return obj;
}

absl::StatusOr<ListResult> Store::List(const std::string& resource, const std::string& ns,
                                       const api::LabelSelector& selector, const ListPage& page) {
  absl::MutexLock lock(&read_mu_);
  ListResult out;
  size_t rows = 0;  // read, matched or not
  // One read transaction: the list and its resourceVersion are one snapshot.
  if (absl::Status st = Run(read_db_, "BEGIN"); !st.ok()) return st;
  {
    Stmt rv(read_db_, "SELECT value FROM meta WHERE key='rv'");
    if (rv.Step() == SQLITE_ROW) out.resource_version = std::stoll(rv.Text(0));
    const auto& after = page.after;
    // Rows come in (namespace, name) order so a page ends at a stable key.
    std::string sql = "SELECT data, namespace, name FROM objects WHERE resource=?1";
    if (!ns.empty()) sql += " AND namespace=?2";
    // A row value: SQLite seeks the primary key to the page's start. The
    // equivalent OR of two comparisons made it scan the namespace from its
    // first row (a page near the end of 100,000 claims in one namespace:
    // 16 ms against 1 ms; a pass over all 200 pages: 2.8 s against 0.36 s).
    if (after) sql += " AND (namespace, name) > (?3, ?4)";
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
      ++rows;
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
  // A long list fills the connection's page cache (up to 2 MiB) in this
  // thread's heap, where it stayed after the last read of a burst (the
  // writer lets its caches go only after writes): given back now, as the
  // next long list reads its pages afresh anyway. Short lists (a class,
  // a namespace's few objects) keep theirs for the next read.
  if (rows >= kListReleasesPageCache) sqlite3_db_release_memory(read_db_);
  return out;
}

absl::Status Store::ListStream(const std::string& resource, const std::string& ns,
                               const std::function<void(int64_t)>& begin,
                               const std::function<bool(std::string_view)>& each) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(options_.path.c_str(), &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nullptr) != SQLITE_OK) {
    absl::Status st = SqlError(db, "open for a list");
    sqlite3_close(db);
    return st;
  }
  struct Close {
    sqlite3* db;
    ~Close() {
      StmtPool::Drop(db);
      sqlite3_close(db);
    }
  } close{db};
  BERTH_RETURN_IF_ERROR(Exec(db, "PRAGMA busy_timeout=10000"));
  // One read transaction: the rows and the resourceVersion are one snapshot.
  BERTH_RETURN_IF_ERROR(Run(db, "BEGIN"));
  int64_t rv = 0;
  {
    Stmt q(db, "SELECT value FROM meta WHERE key='rv'");
    if (q.Step() != SQLITE_ROW) return SqlError(db, "read rv");
    rv = std::stoll(q.Text(0));
  }
  std::string sql = "SELECT data FROM objects WHERE resource=?1";
  if (!ns.empty()) sql += " AND namespace=?2";
  sql += " ORDER BY namespace, name";
  Stmt s(db, sql.c_str());
  s.Bind(1, resource);
  if (!ns.empty()) s.Bind(2, ns);
  begin(rv);
  int rc;
  while ((rc = s.Step()) == SQLITE_ROW) {
    if (!each(s.View(0))) return absl::OkStatus();
  }
  if (rc != SQLITE_DONE) return SqlError(db, "list");
  return absl::OkStatus();
}

// ---- Object cache ----

std::string Store::CacheKey(std::string_view resource, std::string_view ns, std::string_view name) {
  // Length-prefixed: no separator can be forged by a name.
  return StrCat(resource.size(), ":", resource, ns.size(), ":", ns, name);
}

Store::ObjectPtr Store::CacheLookup(const std::string& key, uint64_t* miss_epoch) {
  KeptText text;
  uint64_t serial;
  {
    absl::MutexLock lock(&cache_mu_);
    auto it = cache_.find(key);
    if (it == cache_.end()) {
      ++stats_.misses;
      if (miss_epoch != nullptr) *miss_epoch = epoch_;
      return nullptr;
    }
    CacheTouchLocked(it->second);
    ++stats_.hits;
    if (ObjectPtr held = CacheParsedLocked(it->second)) return held;
    text = it->second.text;
    serial = it->second.serial;
  }
  // Compacted and let go by everyone: decompress and parse its text
  // (outside the lock: a parse takes 10-25 us) and hold the result again,
  // unless a write replaced the entry meanwhile (then the parse is still
  // the object as it was when this read began, as a miss's SQLite read
  // would be).
  absl::StatusOr<TextPtr> plain = text.Plain();
  ObjectPtr parsed;
  if (plain.ok()) parsed = std::make_shared<const Object>(Object::parse(**plain));
  absl::MutexLock lock(&cache_mu_);
  auto it = cache_.find(key);
  const bool same = it != cache_.end() && it->second.serial == serial;
  if (!plain.ok()) {
    // Cannot happen but by a fault in memory: the entry goes, and this read
    // is a miss (SQLite holds the object).
    spdlog::error("store: the cached text of {} does not decompress ({}); dropped", key, plain.status().ToString());
    --stats_.hits;
    ++stats_.misses;
    if (same) CacheEraseLocked(it);
    if (miss_epoch != nullptr) *miss_epoch = epoch_;
    return nullptr;
  }
  ++stats_.reparses;
  if (same) {
    if (ObjectPtr raced = CacheParsedLocked(it->second)) return raced;  // another reader parsed it first
    it->second.object = parsed;
  }
  return parsed;
}

Store::ObjectPtr Store::CacheParsedLocked(CacheEntry& entry) {
  cache_mu_.AssertHeld();
  if (entry.object == nullptr) entry.object = entry.parsed.lock();
  return entry.object;
}

bool Store::HeldElsewhere(const CacheEntry& entry) {
  return entry.object != nullptr ? entry.object.use_count() > 1 : !entry.parsed.expired();
}

void Store::CacheTouchLocked(CacheEntry& entry) {
  cache_mu_.AssertHeld();
  switch (entry.list) {
    case CacheList::kLru:
      lru_.splice(lru_.begin(), lru_, entry.lru);
      break;
    case CacheList::kFresh:
      lru_.splice(lru_.begin(), fresh_, entry.lru);
      fresh_bytes_ -= entry.bytes;
      entry.list = CacheList::kLru;
      break;
    case CacheList::kShared:
      break;
  }
}

void Store::CacheEraseLocked(std::unordered_map<std::string, CacheEntry>::iterator it) {
  cache_mu_.AssertHeld();
  switch (it->second.list) {
    case CacheList::kShared:
      shared_bytes_ -= it->second.bytes;
      shared_.erase(it->second.lru);
      break;
    case CacheList::kFresh:
      fresh_bytes_ -= it->second.bytes;
      cache_bytes_ -= it->second.bytes;
      fresh_.erase(it->second.lru);
      break;
    case CacheList::kLru:
      cache_bytes_ -= it->second.bytes;
      lru_.erase(it->second.lru);
      break;
  }
  if (cache_released_ != nullptr && it->second.object != nullptr) {
    cache_released_->push_back(std::move(it->second.object));
  }
  cache_.erase(it);
}

void Store::CacheInsertLocked(const std::string& key, ObjectPtr object, size_t bytes, CacheList list) {
  cache_mu_.AssertHeld();
  if (bytes > options_.cache_bytes) return;  // also: the cache is off
  std::list<std::string>& into = list == CacheList::kFresh ? fresh_ : lru_;
  into.push_front(key);
  cache_[key] = CacheEntry{std::move(object), {}, KeptText(), bytes, list, into.begin(), ++next_serial_};
  cache_bytes_ += bytes;
  if (list == CacheList::kFresh) fresh_bytes_ += bytes;
  // Shared entries whose other holders let go count again: two rechecked
  // per insert, so the uncounted set is looked over every few inserts per
  // entry and what only the cache holds stays near the budget.
  for (int i = 0; i < 2 && !shared_.empty(); ++i) {
    auto it = cache_.find(shared_.back());
    if (HeldElsewhere(it->second)) {
      shared_.splice(shared_.begin(), shared_, it->second.lru);
      continue;
    }
    CacheCountAgainLocked(it);
  }
  CacheEvictLocked();
}

void Store::CacheCountAgainLocked(std::unordered_map<std::string, CacheEntry>::iterator it) {
  cache_mu_.AssertHeld();
  shared_.erase(it->second.lru);
  shared_bytes_ -= it->second.bytes;
  it->second.list = CacheList::kLru;
  lru_.push_back(it->first);  // as the least recently used
  it->second.lru = std::prev(lru_.end());
  cache_bytes_ += it->second.bytes;
}

void Store::CacheEvictLocked(size_t budget) {
  cache_mu_.AssertHeld();
  // Evict the least recently used of the entries read since they were
  // written, or the oldest of those not read yet once they take more than
  // their share (Options::fresh_share) or are all that is left. An object
  // someone else holds (HeldElsewhere: an informer's current object, a
  // reader's) is moved to the uncounted set instead, as evicting it would
  // free nothing.
  const auto fresh_limit = static_cast<size_t>(static_cast<double>(budget) * options_.fresh_share);
  while (cache_bytes_ > budget) {
    const bool from_fresh = lru_.empty() || fresh_bytes_ > fresh_limit;
    std::list<std::string>& from = from_fresh ? fresh_ : lru_;
    auto victim = cache_.find(from.back());
    from.pop_back();
    cache_bytes_ -= victim->second.bytes;
    if (from_fresh) fresh_bytes_ -= victim->second.bytes;
    if (HeldElsewhere(victim->second)) {
      victim->second.list = CacheList::kShared;
      shared_.push_front(victim->first);
      victim->second.lru = shared_.begin();
      shared_bytes_ += victim->second.bytes;
    } else {
      if (cache_released_ != nullptr && victim->second.object != nullptr) {
        cache_released_->push_back(std::move(victim->second.object));
      }
      cache_.erase(victim);
    }
  }
}

void Store::CacheSweepIdle() {
  absl::MutexLock lock(&cache_mu_);
  for (auto key = shared_.begin(); key != shared_.end();) {
    auto it = cache_.find(*key);
    ++key;  // (counting it again unlinks it)
    if (!HeldElsewhere(it->second)) CacheCountAgainLocked(it);
  }
  CacheEvictLocked(options_.compact_when_idle ? std::min(options_.rest_cache_bytes, options_.cache_bytes)
                                              : options_.cache_bytes);
}

void Store::RelocateKept() {
  // Copies, not moves: a moved string or node keeps its block where the
  // burst put it.
  FreshPages fresh;
  {
    absl::MutexLock lock(&cache_mu_);
    std::unordered_map<std::string, CacheEntry> cache;
    cache.reserve(cache_.size());
    std::list<std::string> lists[3];
    bool complete = true;
    std::list<std::string>* const from[3] = {&fresh_, &lru_, &shared_};
    for (int i = 0; i < 3 && complete; ++i) {
      for (const std::string& key : *from[i]) {
        auto it = cache_.find(key);
        if (it == cache_.end()) {
          complete = false;
          break;
        }
        lists[i].push_back(key);
        CacheEntry copy = it->second;
        copy.lru = std::prev(lists[i].end());
        cache.emplace(key, std::move(copy));
      }
    }
    // Every entry is in one list; if not, nothing is changed.
    if (complete && cache.size() == cache_.size()) {
      cache_.swap(cache);
      fresh_.swap(lists[0]);
      lru_.swap(lists[1]);
      shared_.swap(lists[2]);
      ++stats_.relocations;
    }
  }
  absl::MutexLock lock(&watch_mu_);
  std::deque<HistoryEntry> history(history_.begin(), history_.end());
  history_.swap(history);
}

std::vector<Store::ObjectPtr> Store::CacheApply(CacheWrites writes) {
  std::vector<ObjectPtr> released;
  absl::MutexLock lock(&cache_mu_);
  cache_released_ = &released;
  ++epoch_;
  for (auto& [key, w] : writes) {
    // A key cached before is being worked on: among the ones read. A new
    // one (or one evicted since) waits in fresh_ for its first reader.
    CacheList list = CacheList::kFresh;
    if (auto it = cache_.find(key); it != cache_.end()) {
      list = CacheList::kLru;
      CacheEraseLocked(it);
    }
    if (w.object != nullptr && w.admit) CacheInsertLocked(key, std::move(w.object), w.bytes, list);
  }
  cache_released_ = nullptr;
  return released;
}

int64_t Store::read_page_cache_bytes() const {
  absl::MutexLock lock(&read_mu_);
  int current = 0, highest = 0;
  sqlite3_db_status(read_db_, SQLITE_DBSTATUS_CACHE_USED, &current, &highest, 0);
  return current;
}

Store::CommitStats Store::commit_stats() const {
  absl::MutexLock lock(&commit_stats_mu_);
  return commit_stats_;
}

Store::CacheStats Store::cache_stats() const {
  absl::MutexLock lock(&cache_mu_);
  CacheStats out = stats_;
  out.objects = cache_.size() - shared_.size();
  out.bytes = cache_bytes_;
  out.shared_objects = shared_.size();
  out.shared_bytes = shared_bytes_;
  for (const auto& [key, entry] : cache_) {
    out.parsed_objects += entry.object != nullptr ? 1 : 0;
    out.compressed_objects += entry.text.compressed() ? 1 : 0;
    out.text_bytes += entry.text.held_bytes();
  }
  return out;
}

}  // namespace berth::store
