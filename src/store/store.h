// The durable object store of the control plane.
//
// Objects are Kubernetes-shaped JSON documents kept in SQLite (WAL mode,
// synchronous=FULL: a write is acknowledged only once it is on disk). The
// store owns the metadata Kubernetes' storage layer owns: uid,
// resourceVersion (one counter for everything), generation,
// creationTimestamp, deletionTimestamp, and the life cycle that follows from
// finalizers and ownerReferences:
//
//   - Delete of an object with finalizers only sets deletionTimestamp; the
//     object disappears when an update removes its last finalizer.
//   - When an object disappears, dependents lose their ownerReference to it
//     and are deleted once they have no owner left (background GC).
//   - Update with a resourceVersion that is not the stored one fails with
//     ABORTED (HTTP 409 Conflict); create of an existing name with
//     ALREADY_EXISTS.
//
// Writers are group-committed: concurrent mutations queue up and one writer
// thread applies them in a single transaction (each in its own savepoint, so
// one failing mutation does not affect the others) with one fsync.
//
// Reads are served from an in-memory cache of parsed objects (bounded,
// least recently used out) so Get does not read SQLite and parse JSON. The
// writer thread keeps it exactly in step with what is committed: a batch's
// writes enter it only after COMMIT succeeds, a failed mutation or batch
// leaves it untouched, and objects read from SQLite on a miss enter it only
// if no batch was applied meanwhile (else the read may be stale). It starts
// empty on open and fills as objects are read and written. Once the writes
// stop, the cache lets go of its parsed objects and keeps their JSON text:
// a parsed object takes 4-5 times its text. The next read of one parses
// the text once and holds the result.
//
// At the same time the texts the cache and the watch history keep are
// compressed with a zstd dictionary per resource, trained on the texts
// themselves (common/zstd.h): 10,000 bound claims and their volumes keep
// ~1 MiB where their JSON is ~20 MiB.
//
// Watches replay history after a resourceVersion and then follow live
// changes. History is kept in memory (bounded); a resourceVersion older than
// the history is OUT_OF_RANGE (HTTP 410 Gone) and the client relists.
//
//   auto store = Store::Open({.path = "/var/lib/berth/state.db"});
//   auto pvc = (*store)->Create("persistentvolumeclaims", obj);
//   auto w = (*store)->Watch("persistentvolumeclaims", "default", rv, {});
//   while (auto e = (*w)->Next(absl::Seconds(1))) ...
//
// Thread-safety: thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "api/selector.h"
#include "nlohmann/json.hpp"
#include "store/kept_text.h"

struct sqlite3;

namespace berth::store {

using Object = nlohmann::json;

inline constexpr int kSchemaVersion = 2;  // the last migration in store.cc

enum class EventType { kAdded, kModified, kDeleted };
const char* EventTypeName(EventType t);  // "ADDED", "MODIFIED", "DELETED"

struct Event {
  EventType type;
  std::string resource;
  // The object after the change (the last state for DELETED); immutable and
  // shared by every watcher, the watch history and the object cache.
  std::shared_ptr<const Object> object;
  int64_t resource_version = 0;
  // The object's JSON as the store wrote it (the same bytes nlohmann's
  // dump() gives), when known: a watch over HTTP sends it as it is instead
  // of serializing the object again for every watcher.
  std::shared_ptr<const std::string> text;
};

struct ListResult {
  std::vector<Object> items;
  int64_t resource_version = 0;  // the store's version when the list was read
  // With a limit: set when more objects may follow; pass it as `after`.
  std::optional<std::pair<std::string, std::string>> next;  // {namespace, name}
};

// One page of a list: at most `limit` matching objects (0 = all) whose
// (namespace, name) sorts after `after`.
struct ListPage {
  size_t limit = 0;
  std::optional<std::pair<std::string, std::string>> after;
};

class Store;

// A watch subscription. Destroying it unsubscribes.
// A stream of watch events: the store's Watcher, or a remote watch
// (client::RemoteApi).
class EventSource {
 public:
  virtual ~EventSource() = default;
  // The next event, or nullopt after `timeout`; nullopt at once once the
  // watch ended (see ended()).
  virtual std::optional<Event> Next(absl::Duration timeout) = 0;
  // Set when the watch was ended by its source; relist and watch again.
  virtual bool ended() const = 0;
  // The resourceVersion every taken event is at or below, for a bookmark
  // (0 while events are queued or unknown).
  virtual int64_t BookmarkVersion() const = 0;
  // Waits up to `timeout` until an event can be taken or the watch ended,
  // taking nothing; true if so. (A consumer that must know when it holds a
  // taken event, the informer, marks itself before Next.)
  virtual bool WaitReady(absl::Duration timeout) = 0;
  // Makes a WaitReady in progress, and every later one, return at once
  // (false unless an event is queued or the watch ended): a consumer that
  // stops wakes its reader this way, so the reader can wait without a
  // polling timeout. Thread-safe; does not end the watch.
  virtual void Interrupt() = 0;
};

class Watcher final : public EventSource {
 public:
  ~Watcher() override;
  Watcher(const Watcher&) = delete;
  Watcher& operator=(const Watcher&) = delete;

  // The next event, or nullopt after `timeout`. Returns nullopt at once when
  // the watch was ended (see ended()).
  std::optional<Event> Next(absl::Duration timeout) override;
  // Set when the store ended this watch (it fell too far behind, or the
  // store is closing); the client should relist and watch again.
  bool ended() const override;
  // When every event up to some resourceVersion has been taken with Next(),
  // that resourceVersion (for a watch bookmark); 0 while events are queued.
  int64_t BookmarkVersion() const override;
  bool WaitReady(absl::Duration timeout) override;
  void Interrupt() override ABSL_LOCKS_EXCLUDED(mu_);
  // `notify` runs after events are queued (once per commit) and when the
  // watch ends, on the thread that published the change with the store's
  // watch lock held: it must be quick and must not call into the store (it
  // is meant to wake whoever drains this watcher with Next(0)). Replaces an
  // earlier one.
  void SetNotify(std::function<void()> notify) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  friend class Store;
  struct Filter {
    std::string resource;
    std::string ns;  // "" = all namespaces
    api::LabelSelector selector;
  };
  Watcher(Store* store, Filter filter) : store_(store), filter_(std::move(filter)) {}
  // An event as the store offers it, with the labels of the object before
  // the change (null: there was none), which a selector's watch needs to
  // turn a change of labels into ADDED or DELETED.
  struct Offered {
    const Event* event;
    const std::map<std::string, std::string>* before_labels;
  };
  // Queues those of `events` this watch wants, in order, and rings its
  // notify once: a commit's events wake whoever drains this watch once,
  // not once each.
  void Offer(std::span<const Offered> events) ABSL_LOCKS_EXCLUDED(mu_);
  // The event as this watch delivers it, or nullopt if it does not want it.
  std::optional<Event> Filtered(const Offered& o) const;
  void End() ABSL_LOCKS_EXCLUDED(mu_);
  void Progress(int64_t committed_rv) ABSL_LOCKS_EXCLUDED(mu_);

  Store* const store_;
  const Filter filter_;
  mutable absl::Mutex mu_;
  std::deque<Event> queue_ ABSL_GUARDED_BY(mu_);
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  bool interrupted_ ABSL_GUARDED_BY(mu_) = false;
  int64_t progress_rv_ ABSL_GUARDED_BY(mu_) = 0;  // all events up to this were offered
  std::function<void()> notify_ ABSL_GUARDED_BY(mu_);
};

class Store {
 public:
  struct Options {
    std::string path;               // the SQLite database file
    size_t history = 10000;         // events kept for watches
    size_t max_batch = 512;         // mutations per group commit
    size_t watcher_queue = 100000;  // events a slow watcher may lag before it is ended
    // The object cache's budget, counted in serialized (JSON) bytes; parsed
    // objects take about 4-5 times that in memory. 0 turns the cache off.
    // Objects someone else also holds (an informer's current objects) are
    // kept past it, uncounted: evicting them would free nothing, and reading
    // them back from SQLite costs a read and a parse each time.
    // A budget for bursts: once the writes stop the cache keeps only
    // `rest_cache_bytes`. `berth apply` of 10,000 claims leaves the
    // controllers a backlog of ~6,500 unread ones (~10 MiB with their
    // last-applied annotations); with 8 MiB its oldest were evicted before
    // their turn and berth up spent 15-30 % more CPU on the burst (cache
    // hits 86 % against 94 %), with 16 MiB it fits (docs/performance.md).
    size_t cache_bytes = 16 << 20;
    // Of that budget, what objects written and not read since may keep
    // before the oldest of them go: up to this share, the least recently
    // used of the objects read since are evicted first. A burst of creates
    // the controllers work through oldest first (a backlog) would otherwise
    // lose each object to plain LRU just before its turn, while the
    // objects already handled, touched last, stayed; every read and write
    // of the backlog then missed.
    double fresh_share = 0.75;
    // After writes, once the writer has had nothing to do for this long, it
    // looks over every entry kept past the budget and lets go of those only
    // the cache holds any more (a burst leaves many: objects still on their
    // way to watchers when they were evicted; inserts also recheck two
    // each), and then, with `compact_when_idle`, lets go of every cached
    // parsed object, keeping its text.
    absl::Duration shared_sweep_after = absl::Seconds(1);
    // Whether the cache holds only the text of its objects while the
    // writes stop, and that text and the history's compressed (see above):
    // at rest 10,000 bound claims and their volumes hold ~40 MiB parsed
    // and ~20 MiB of text (the cache's and the history's) without. A
    // parsed object someone else still holds (an informer's, a watch
    // event's) is taken back on the next read, not parsed again.
    bool compact_when_idle = true;
    // What the cache keeps once the writes stop (with compact_when_idle):
    // the least recently used go down to this many serialized bytes. The
    // cache is for bursts: the controllers read their
    // informers, and a burst's reads are mostly of what it writes, which
    // enters the cache as it is written; at rest, its entries are memory
    // only (the 8 MiB budget of before, kept compressed: ~4 MiB of berth
    // up's RSS after 10,000 claims). A later read of one let go is a read
    // and a parse.
    size_t rest_cache_bytes = 1 << 20;
    // Resources whose writes do not enter the cache: written far more than
    // read (events), they would evict the objects controllers read. A read
    // still caches them.
    std::set<std::string> write_only_resources = {"events"};
  };

  // Counters of the object cache (for tests and benchmarks).
  struct CacheStats {
    int64_t hits = 0;
    int64_t misses = 0;
    int64_t fills_skipped = 0;  // misses whose SQLite read raced a commit
    size_t objects = 0;
    size_t bytes = 0;           // counted against the budget
    size_t shared_objects = 0;  // kept past the budget: also held elsewhere when last looked at
    size_t shared_bytes = 0;
    size_t parsed_objects = 0;      // entries holding their parsed object (the rest hold only text)
    int64_t reparses = 0;           // hits on an entry let go of when idle whose text was parsed again
    size_t compressed_objects = 0;  // entries whose text is compressed
    size_t text_bytes = 0;          // held for the entries' texts (a plain one shared with the history counted whole)
    int64_t relocations = 0;        // times the entries and the history were copied into dense pages at rest
  };
  // The watch history (for tests, benchmarks and metrics).
  struct HistoryStats {
    size_t events = 0;
    size_t compressed_events = 0;
    size_t text_bytes = 0;  // held for the events' texts, as CacheStats::text_bytes
  };
  // The group commits (for metrics and benchmarks): how many writes share a
  // commit, and how long the commits take (BEGIN to COMMIT, the fsync
  // included), as etcd's backend commit duration tells.
  struct CommitStats {
    int64_t commits = 0;         // batches committed
    int64_t mutations = 0;       // mutations in them (failed ones, rolled back to their savepoint, included)
    int64_t failed_commits = 0;  // batches whose BEGIN, savepoints or COMMIT failed: every mutation in them failed
    double seconds = 0;          // spent committing, summed over the commits
  };
  // Writes after which a pause copies what is kept into dense pages (at
  // least; or an eighth of what is kept).
  static constexpr int64_t kRelocateAfter = 64;
  // A list that read at least this many rows lets the read connection's
  // page cache go (store_reads.cc).
  static constexpr size_t kListReleasesPageCache = 256;

  // Opens (creating if needed, mode 0600) the database. FAILED_PRECONDITION if it was
  // written by a newer schema version.
  static absl::StatusOr<std::unique_ptr<Store>> Open(const Options& options);
  ~Store();

  // `obj` needs metadata.name (or metadata.generateName); metadata.namespace
  // is the caller's choice ("" or absent for cluster-scoped objects).
  absl::StatusOr<Object> Create(const std::string& resource, Object obj);
  // Create returning the stored object shared, without a copy (for callers
  // that keep or drop it: the copy of a whole object is most of a write's
  // cost in the caller's thread).
  // With `text`: the stored object's JSON text (the bytes the store wrote
  // and the watchers get), for a caller that sends the object on.
  absl::StatusOr<std::shared_ptr<const Object>> CreateShared(const std::string& resource, Object obj,
                                                             std::shared_ptr<const std::string>* text = nullptr);
  // Creates each object as Create does (each succeeds or fails on its own),
  // submitted together so they share a group commit; returns when all are
  // done, with one result per object in order.
  std::vector<absl::StatusOr<Object>> CreateAll(const std::string& resource, std::vector<Object> objects);
  absl::StatusOr<Object> Get(const std::string& resource, const std::string& ns, const std::string& name);
  // Get without copying: the stored object, shared and immutable (it stays
  // valid, unchanged, after later writes replace it in the store).
  absl::StatusOr<std::shared_ptr<const Object>> GetShared(const std::string& resource, const std::string& ns,
                                                          const std::string& name);
  // ns "" lists all namespaces.
  absl::StatusOr<ListResult> List(const std::string& resource, const std::string& ns,
                                  const api::LabelSelector& selector = {}, const ListPage& page = {});
  // Every object of `resource` in `ns` ("" = all namespaces) as its stored
  // JSON, in (namespace, name) order, from one snapshot of the database, for
  // a list too large to hold (the API server streams it): `begin` gets the
  // snapshot's resourceVersion, then `each` every object's JSON (valid only
  // during the call) until it returns false. Reads on a connection of its
  // own, so a slow consumer holds up no other read (SQLite's WAL keeps the
  // snapshot; a checkpoint cannot pass it meanwhile). An error before
  // `begin` means nothing was streamed.
  absl::Status ListStream(const std::string& resource, const std::string& ns, const std::function<void(int64_t)>& begin,
                          const std::function<bool(std::string_view)>& each);
  // Replaces the stored object (matched by namespace/name). If
  // metadata.resourceVersion is set it must equal the stored one (else
  // ABORTED). uid, creationTimestamp and deletionTimestamp are kept from the
  // stored object; generation grows when .spec changes.
  absl::StatusOr<Object> Update(const std::string& resource, Object obj);
  // Update returning the stored object shared, as CreateShared.
  absl::StatusOr<std::shared_ptr<const Object>> UpdateShared(const std::string& resource, Object obj);
  // Deletes, or marks for deletion when finalizers remain. Returns the
  // object's last state. `expected_uid`, if set, must match (else ABORTED).
  // A `grace_period_seconds` > 0 is a graceful deletion (pods): the object
  // only gets deletionTimestamp = now + grace and deletionGracePeriodSeconds
  // and stays, whatever its finalizers, until deleted again with 0 (or
  // none); a pending graceful deletion may be shortened, never lengthened.
  absl::StatusOr<Object> Delete(const std::string& resource, const std::string& ns, const std::string& name,
                                const std::optional<std::string>& expected_uid = std::nullopt,
                                std::optional<int64_t> grace_period_seconds = std::nullopt);

  // Events for `resource` in `ns` ("" = all) matching `selector`, after
  // `from_rv` (0: only changes from now on). OUT_OF_RANGE if `from_rv` is
  // older than the kept history.
  absl::StatusOr<std::unique_ptr<Watcher>> Watch(const std::string& resource, const std::string& ns, int64_t from_rv,
                                                 const api::LabelSelector& selector = {});

  int64_t ResourceVersion() const;
  CacheStats cache_stats() const ABSL_LOCKS_EXCLUDED(cache_mu_);
  HistoryStats history_stats() const ABSL_LOCKS_EXCLUDED(watch_mu_);
  CommitStats commit_stats() const ABSL_LOCKS_EXCLUDED(commit_stats_mu_);
  // What SQLite's page cache of the read connection holds, in bytes.
  int64_t read_page_cache_bytes() const ABSL_LOCKS_EXCLUDED(read_mu_);

 private:
  struct Mutation;
  struct Txn;
  using ObjectPtr = std::shared_ptr<const Object>;
  using TextPtr = std::shared_ptr<const std::string>;
  // A write of one key waiting to enter the cache: the new object (null:
  // deleted), its serialized size and whether it may enter the cache (a
  // write of a write-mostly resource only evicts the old entry).
  struct CacheWrite {
    ObjectPtr object;
    size_t bytes = 0;
    bool admit = true;
  };
  using CacheWrites = std::unordered_map<std::string, CacheWrite>;
  // Where a cache entry is listed: fresh_ (written, not read since), lru_
  // (read since it was written, or a fill from SQLite), shared_ (kept past
  // the budget, uncounted).
  enum class CacheList { kFresh, kLru, kShared };
  // An entry holds its parsed object or, compacted while idle, its text
  // (and in `parsed` the parsed object while anyone else holds it). Not
  // both: the texts of 8 MiB of objects would add to the peak of a burst.
  struct CacheEntry {
    ObjectPtr object;
    std::weak_ptr<const Object> parsed;
    KeptText text;
    size_t bytes = 0;  // serialized size, counted against the budget (or shared_bytes_)
    CacheList list = CacheList::kLru;
    std::list<std::string>::iterator lru;  // in the list `list` names
    uint64_t serial = 0;                   // this entry, not a later one of the same key
  };
  static std::string CacheKey(std::string_view resource, std::string_view ns, std::string_view name);
  // The cached object (a hit; a compacted entry's text is parsed outside
  // the lock), or null on a miss, with the cache's epoch at the miss in
  // `miss_epoch` when given.
  ObjectPtr CacheLookup(const std::string& key, uint64_t* miss_epoch = nullptr) ABSL_LOCKS_EXCLUDED(cache_mu_);
  // The entry's parsed object, taken back from another holder if it was
  // compacted; null if it must be parsed from its text.
  ObjectPtr CacheParsedLocked(CacheEntry& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(cache_mu_);
  // Drops the entry's parsed object, which must have its text (idle).
  static void LetGoOfParsed(CacheEntry& entry);
  // Whether anything besides the cache holds the entry's parsed object.
  static bool HeldElsewhere(const CacheEntry& entry);
  // Inserts into fresh_ (a write of a key not cached: nobody has read it
  // yet) or lru_ (a fill from SQLite, or a write of a key that was cached).
  void CacheInsertLocked(const std::string& key, ObjectPtr object, size_t bytes, CacheList list)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(cache_mu_);
  // A hit: the entry becomes the most recently used of lru_.
  void CacheTouchLocked(CacheEntry& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(cache_mu_);
  void CacheEraseLocked(std::unordered_map<std::string, CacheEntry>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(cache_mu_);
  // Applies a committed batch's writes (writer thread). Returns the parsed
  // objects it let go of, for the writer to free once the batch's callers
  // are woken (freeing a JSON tree is as dear as building one).
  std::vector<ObjectPtr> CacheApply(CacheWrites writes) ABSL_LOCKS_EXCLUDED(cache_mu_);
  // Set by CacheApply while it holds cache_mu_: where entries it erases or
  // evicts leave their parsed objects. (Null otherwise: a reader's fill
  // that evicts frees at once, as nothing else would.)
  std::vector<ObjectPtr>* cache_released_ ABSL_GUARDED_BY(cache_mu_) = nullptr;
  // Once the writes stop: counts again every uncounted entry only the cache
  // holds and evicts down to the budget, or to Options::rest_cache_bytes
  // with compact_when_idle.
  void CacheSweepIdle() ABSL_LOCKS_EXCLUDED(cache_mu_);
  // Then (writer thread, Options::compact_when_idle): the cache's objects
  // are serialized and it lets go of them, and its texts and the history's
  // are compressed, a resource's dictionary trained first when there are
  // enough of its texts. Serializes and compresses outside both locks, and
  // stops early when writes arrive (the rest waits for the next pause).
  void CompactTexts() ABSL_LOCKS_EXCLUDED(cache_mu_, watch_mu_, queue_mu_);
  bool WritesWaiting() ABSL_LOCKS_EXCLUDED(queue_mu_);
  // Then, once kRelocateAfter writes or an eighth of what is kept came
  // since the last time: the cache's entries and lists and the history are
  // copied into pages of their own (common/memory.h, FreshPages), so the
  // pages the burst left them in, among its freed temporaries, go back.
  void RelocateKept() ABSL_LOCKS_EXCLUDED(cache_mu_, watch_mu_);
  int64_t relocated_at_rv_ = 0;  // writer thread only
  // Moves the uncounted entry `it` back to the counted ones, as the least
  // recently used.
  void CacheCountAgainLocked(std::unordered_map<std::string, CacheEntry>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(cache_mu_);
  // Evicts down to `budget` serialized bytes (the cache's budget unless
  // given).
  void CacheEvictLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(cache_mu_) { CacheEvictLocked(options_.cache_bytes); }
  void CacheEvictLocked(size_t budget) ABSL_EXCLUSIVE_LOCKS_REQUIRED(cache_mu_);
  explicit Store(Options options);
  absl::Status Init();
  // Brings the schema up to kSchemaVersion (see Migrations() in store.cc).
  absl::Status Migrate();
  absl::StatusOr<ObjectPtr> Submit(std::function<absl::StatusOr<ObjectPtr>(Txn&)> fn, TextPtr* text = nullptr);
  static std::function<absl::StatusOr<ObjectPtr>(Txn&)> CreateFn(const std::string& resource, Object obj);
  // A committed change as the watch history keeps it: compact, since the
  // history holds thousands of changes whose objects are long replaced.
  // The object as its serialized JSON (what SQLite holds; parsed again only
  // when a watch replays it) and, while anyone still holds it, the parsed
  // one (the current object, shared with the cache and the informers); of
  // the object before the change only its labels (all a watch with a
  // selector needs).
  struct HistoryEntry {
    EventType type;
    std::string resource;
    int64_t resource_version = 0;
    KeptText text;
    std::weak_ptr<const Object> object;
    std::optional<std::map<std::string, std::string>> before_labels;  // nullopt: no object before
    // The event as Offer takes it (the object shared if still alive, else
    // parsed from `text`); DATA_LOSS if a compressed text is damaged.
    absl::StatusOr<Event> ToEvent() const;
  };
  void WriterLoop();
  // `events`: each change with the object before it and the new object's
  // serialized JSON (null: serialized here); what they hold besides is left
  // to the caller to free (after waking the writes' callers).
  struct Change {
    Event event;
    ObjectPtr before;
  };
  void Publish(std::vector<Change>& events);
  void Unsubscribe(Watcher* w);
  friend class Watcher;

  const Options options_;
  sqlite3* write_db_ = nullptr;  // used only by the writer thread
  mutable absl::Mutex read_mu_;
  sqlite3* read_db_ ABSL_GUARDED_BY(read_mu_) = nullptr;

  // Mutation queue for group commit.
  absl::Mutex queue_mu_;
  std::deque<std::shared_ptr<Mutation>> queue_ ABSL_GUARDED_BY(queue_mu_);
  bool stopping_ ABSL_GUARDED_BY(queue_mu_) = false;
  std::unique_ptr<std::thread> writer_;

  // Committed resourceVersion, history and watchers.
  mutable absl::Mutex watch_mu_;
  int64_t committed_rv_ ABSL_GUARDED_BY(watch_mu_) = 0;
  int64_t history_start_rv_ ABSL_GUARDED_BY(watch_mu_) = 0;  // events after this are kept
  std::deque<HistoryEntry> history_ ABSL_GUARDED_BY(watch_mu_);
  std::vector<Watcher*> watchers_ ABSL_GUARDED_BY(watch_mu_);

  // The object cache: committed objects by CacheKey, in fresh_, lru_ or
  // shared_ (CacheList). epoch_ counts applied batches (a fill from SQLite is
  // dropped if it changed during the read).
  mutable absl::Mutex cache_mu_;
  std::unordered_map<std::string, CacheEntry> cache_ ABSL_GUARDED_BY(cache_mu_);
  std::list<std::string> fresh_ ABSL_GUARDED_BY(cache_mu_);   // counted, not read since written, newest first
  std::list<std::string> lru_ ABSL_GUARDED_BY(cache_mu_);     // counted, read since, most recent first
  std::list<std::string> shared_ ABSL_GUARDED_BY(cache_mu_);  // uncounted ones, next to recheck last
  size_t cache_bytes_ ABSL_GUARDED_BY(cache_mu_) = 0;         // fresh_ and lru_
  size_t fresh_bytes_ ABSL_GUARDED_BY(cache_mu_) = 0;
  size_t shared_bytes_ ABSL_GUARDED_BY(cache_mu_) = 0;
  uint64_t epoch_ ABSL_GUARDED_BY(cache_mu_) = 0;
  CacheStats stats_ ABSL_GUARDED_BY(cache_mu_);

  int64_t next_rv_ = 0;  // writer thread only
  mutable absl::Mutex commit_stats_mu_;
  CommitStats commit_stats_ ABSL_GUARDED_BY(commit_stats_mu_);
  uint64_t next_serial_ ABSL_GUARDED_BY(cache_mu_) = 0;

  // The texts' dictionaries by resource. Writer thread only.
  std::map<std::string, ZstdDictionaryTrainer> dictionaries_;
};

}  // namespace berth::store
