// A cache of one kind's objects kept current from the registry — list, then
// watch from the list's resourceVersion, relist when the watch expires (410)
// or ends — with handlers called on every change and on a periodic resync
// (client-go's shared informer, in process).
//
//   Informer claims(registry, *api::FindResource("", "persistentvolumeclaims"));
//   claims.AddHandlers({.on_add = [&](const json& o) { queue.Add(Key(o)); }, ...});
//   claims.Start();
//   claims.WaitForSync(absl::Seconds(10));
//   std::optional<json> pvc = claims.Get("default", "data");
//
// Handlers run on the informer's thread, one at a time, after the cache was
// updated; they must be quick (typically: put a key on a work queue).
//
// Thread-safety: thread-safe. Handlers added after Start first see every
// cached object as an add (a controller started later, e.g. for a driver
// that registered late); a handler must not call AddHandlers.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "api/kinds.h"
#include "api/types/fields.h"
#include "apiserver/api.h"
#include "client/typed_views.h"
#include "common/zstd.h"
#include "nlohmann/json.hpp"

namespace berth::client {

using nlohmann::json;

// "namespace/name", or "name" for cluster-scoped objects.
std::string ObjectKey(const json& object);
std::pair<std::string, std::string> SplitKey(const std::string& key);

class Informer {
 public:
  // Objects per page of the informer's list (client-go's pager: 500).
  static constexpr size_t kListPageSize = 500;

  struct Handlers {
    std::function<void(const json&)> on_add;
    std::function<void(const json& before, const json& after)> on_update;
    std::function<void(const json&)> on_delete;
  };

  // `compact`: the cache holds each object packed (MessagePack, about a
  // seventh of its parsed size) and parses it when asked for it, unless
  // the parsed object is still alive elsewhere (a watch event, the store's
  // object cache, a caller): then that one is shared. For kinds that grow
  // with the cluster and are scanned rarely (claims, volumes); a Select or
  // List over a compact informer parses every object no one else holds.
  Informer(apiserver::Api& registry, const api::KindInfo& kind, absl::Duration resync = absl::Minutes(5),
           bool compact = false);
  ~Informer();  // Stop()

  void AddHandlers(Handlers handlers) ABSL_LOCKS_EXCLUDED(handlers_mu_, mu_);
  // An index: `fn` maps an object to the values it is found under (client-
  // go's indexers), so lookups by them need not scan the cache. Before Start.
  using IndexFunc = std::function<std::vector<std::string>(const json&)>;
  void AddIndex(const std::string& name, IndexFunc fn);
  void Start();
  void Stop();
  // True once the first list is in the cache and every handler has been
  // called for it.
  bool WaitForSync(absl::Duration timeout);
  // Whether every change of this kind up to resourceVersion `rv` (e.g. the
  // store's current one) has reached the cache and the handlers. Tests use
  // it to let the system settle (controllers/testing/settle.h).
  bool Delivered(int64_t rv) const;

  std::optional<json> Get(const std::string& ns, const std::string& name) const;
  std::optional<json> GetByKey(const std::string& key) const;
  // The cached object without a copy (null if absent); it never changes
  // (a later event replaces it in the cache).
  std::shared_ptr<const json> GetSharedByKey(const std::string& key) const;
  // `object` (one of this informer's: GetSharedByKey, ByIndexShared)
  // decoded as T, shared: decoded once while it is among the recently used
  // (client/typed_views.h), so every sync that reads it shares one decode.
  // For kinds read far more often than they change (StorageClasses).
  template <typename T>
  absl::StatusOr<std::shared_ptr<const T>> Decoded(const std::shared_ptr<const json>& object) const {
    if (std::shared_ptr<const void> kept = views_.Find(object, typeid(T))) {
      return std::static_pointer_cast<const T>(std::move(kept));
    }
    absl::StatusOr<T> typed = api::types::Decode<T>(*object);
    if (!typed.ok()) return typed.status();
    auto view = std::make_shared<const T>(std::move(*typed));
    views_.Keep(object, typeid(T), view);
    return view;
  }
  TypedViews::Counts TypedViewCounts() const { return views_.counts(); }

  // ns "" = all namespaces.
  std::vector<json> List(const std::string& ns = "") const;
  // The objects for which `pred` is true (only those are copied).
  std::vector<json> Select(const std::function<bool(const json&)>& pred) const;
  // The objects `index` files under `value` (an unknown index: none).
  std::vector<json> ByIndex(const std::string& index, const std::string& value) const;
  // The same without a copy (GetSharedByKey's objects).
  std::vector<std::shared_ptr<const json>> ByIndexShared(const std::string& index, const std::string& value) const;
  // Their keys only ("ns/name", or the name of a cluster-scoped object),
  // in key order, and how many there are: nothing copied or parsed.
  std::vector<std::string> KeysByIndex(const std::string& index, const std::string& value) const;
  size_t CountByIndex(const std::string& index, const std::string& value) const;
  // Every cached object's key, in key order: nothing copied or parsed.
  std::vector<std::string> Keys() const;

  const api::KindInfo& kind() const { return kind_; }

  // Bytes the cache holds for its objects: for a compact informer the
  // packed sizes, otherwise 0 (parsed sizes are not counted). For benches.
  size_t PackedBytes() const;
  // How many of a compact informer's objects are compressed (tests).
  size_t CompressedCount() const;
  // Times its cache was copied into pages of its own when idle (tests).
  int64_t Relocations() const;
  // A compact informer packs an object from its watch at once when
  // `settled` says it will likely stay as it is (or `settled` is null:
  // every object is held); otherwise it holds the object parsed until a
  // newer version replaces it, `limit` newer ones held so have come, or the
  // informer is idle. A claim changes four or five times on its way to
  // Bound: only the version that stays is worth packing. Before Start.
  void DeferPacking(std::function<bool(const json&)> settled, size_t limit = kPackingDelay) {
    packing_settled_ = settled ? std::move(settled) : [](const json&) { return false; };
    packing_delay_ = limit;
  }
  static constexpr size_t kPackingDelay = 8192;
  // A compact informer's objects not packed yet (tests).
  size_t UnpackedCount() const;

 private:
  // One cached object: the parsed object itself, or (compact) its packed
  // form and a weak reference to the last parsed copy handed out. Once the
  // informer has been idle a second, its packed objects are compressed
  // with a zstd dictionary trained on them (a bound claim's ~0.75 KiB of
  // MessagePack is then ~60 bytes).
  class Entry {
   public:
    Entry() = default;
    // compact: packed now; otherwise held parsed (and, in a compact
    // informer, packed later: Pack).
    Entry(std::shared_ptr<const json> object, bool compact);
    // Packs the object held parsed (`packed`: its MessagePack); a weak
    // reference to it stays.
    void Pack(std::string packed);
    // Whether the entry holds `object` parsed, not packed yet.
    bool Holds(const json* object) const { return object_ && object_.get() == object; }
    const std::shared_ptr<const json>& held() const { return object_; }
    // The parsed object (never null): shared, or parsed again.
    std::shared_ptr<const json> Get() const;
    // The parsed object if one is held or still alive, else null (then
    // packed() is to be parsed).
    std::shared_ptr<const json> Shared() const;
    const std::shared_ptr<const std::string>& packed() const { return packed_; }
    // The dictionary packed() is compressed with (null: plain MessagePack).
    const std::shared_ptr<const ZstdDictionary>& dictionary() const { return dictionary_; }
    void SetCompressed(std::shared_ptr<const std::string> frame, std::shared_ptr<const ZstdDictionary> dictionary) {
      packed_ = std::move(frame);
      dictionary_ = std::move(dictionary);
    }
    // Remembers `parsed` as the parsed copy of packed().
    void SetParsed(const std::shared_ptr<const json>& parsed) const { parsed_ = parsed; }
    void ForgetExpired() {
      if (parsed_.expired()) parsed_.reset();
    }
    size_t packed_bytes() const { return packed_ ? packed_->size() : 0; }

   private:
    std::shared_ptr<const json> object_;         // not compact
    std::shared_ptr<const std::string> packed_;  // compact: MessagePack, or its zstd frame
    std::shared_ptr<const ZstdDictionary> dictionary_;
    mutable std::weak_ptr<const json> parsed_;
  };
  // An object read under mu_: shared already, or its packed form, to be
  // parsed outside the lock (ObjectOf).
  struct Taken {
    std::shared_ptr<const json> object;
    std::shared_ptr<const std::string> packed;
    std::shared_ptr<const ZstdDictionary> dictionary;
  };
  static Taken Take(const Entry& entry);
  static std::shared_ptr<const json> ObjectOf(const Taken& t);

  void Run();
  // Compresses the packed objects not compressed yet (informer thread, when
  // idle), training the dictionary first if there is none and enough
  // objects; stops early once `busy` says events wait.
  void CompressPacked(const std::function<bool()>& busy) ABSL_LOCKS_EXCLUDED(mu_);
  // Then, once kRelocateAfter events or an eighth of the cache came since
  // the last time: the cache's keys and entries and the indexes are copied
  // into pages of their own (common/memory.h, FreshPages), so the pages the
  // events left them in, among their freed temporaries, go back.
  void RelocateKept() ABSL_LOCKS_EXCLUDED(mu_);
  static constexpr size_t kRelocateAfter = 64;
  size_t applied_since_relocation_ = 0;  // informer thread only
  // Lists and replaces the cache (handlers for the differences); returns
  // the list's resourceVersion, or nullopt when stopping.
  std::optional<int64_t> Relist();
  void Apply(const store::Event& e);
  // Packs what the informer received but has not packed, past the newest
  // `keep` (informer thread; compact only); stops early once `busy` (if
  // given) says events wait.
  void PackReceived(size_t keep, const std::function<bool()>& busy = nullptr) ABSL_LOCKS_EXCLUDED(mu_);
  // Without DeferPacking: packed as they come.
  std::function<bool(const json&)> packing_settled_ = [](const json&) { return true; };
  size_t packing_delay_ = kPackingDelay;
  // The objects from the watch held parsed in cache_ for now, oldest first
  // (informer thread only): their keys, and the object as it was held,
  // compared by address only (one replaced since is skipped; were its
  // address reused by its replacement, that is packed early, no harm).
  std::deque<std::pair<std::string, const json*>> received_;
  // Moves `key` in every index from where `before` filed it to where `after`
  // files it (either may be null).
  void ReindexLocked(const std::string& key, const json* before, const json* after) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The keys `index` files under `value`; null if none.
  const std::set<std::string>* IndexedLocked(const std::string& index, const std::string& value) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // index → value → keys.
  using Indexes = std::map<std::string, std::map<std::string, std::set<std::string>>>;
  void Reindex(Indexes& indexes, const std::string& key, const json* before, const json* after) const;
  bool stopping() const;
  void SetDelivering(bool delivering, store::EventSource* watch) ABSL_LOCKS_EXCLUDED(mu_);
  bool DeliveredLocked(int64_t rv) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  apiserver::Api& registry_;
  const api::KindInfo& kind_;
  const absl::Duration resync_;
  const bool compact_;
  // Held while the cache changes and the handlers hear of it, so a handler
  // added meanwhile sees each object either in its replay or as an event.
  absl::Mutex handlers_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::vector<Handlers> handlers_ ABSL_GUARDED_BY(handlers_mu_);
  std::map<std::string, IndexFunc> index_funcs_;  // immutable after Start()
  std::thread thread_;

  mutable absl::Mutex mu_;
  // Objects are shared with the store's watch events (never copied in), or
  // packed (compact_). Entry::Get and SetParsed run under mu_ (they set
  // parsed_); readers parse outside it (Take, ObjectOf, GetSharedByKey).
  std::map<std::string, Entry> cache_ ABSL_GUARDED_BY(mu_);
  Indexes indexes_ ABSL_GUARDED_BY(mu_);
  bool synced_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // For Delivered: set while the informer lists or may hold events taken
  // from its watch that its handlers have not heard of yet.
  bool delivering_ ABSL_GUARDED_BY(mu_) = true;
  int64_t listed_rv_ ABSL_GUARDED_BY(mu_) = 0;
  store::EventSource* watch_ ABSL_GUARDED_BY(mu_) = nullptr;  // the live watch, owned by Run()
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  int64_t relocations_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t quiescence_id_ = 0;  // client/quiescence.h
  // The packed objects' dictionary (informer thread; entries share it).
  ZstdDictionaryTrainer dictionary_;
  // Decoded's views, dropped when the informer is idle.
  mutable TypedViews views_;
};

}  // namespace berth::client
