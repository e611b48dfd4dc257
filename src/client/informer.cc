#include "client/informer.h"

#include <algorithm>
#include <random>

#include "api/json_text.h"
#include "client/quiescence.h"
#include "common/memory.h"
#include "common/strings.h"
#include "common/thread_name.h"
#include "spdlog/spdlog.h"

namespace berth::client {

std::string ObjectKey(const json& object) {
  // Read in place: copying metadata per key showed up in profiles.
  auto field = [](const json& o, std::string_view key) -> std::string_view {
    if (!o.is_object()) return {};
    auto it = o.find(key);
    return it != o.end() && it->is_string() ? std::string_view(it->get_ref<const std::string&>()) : std::string_view();
  };
  const json* md = nullptr;
  if (object.is_object()) {
    if (auto it = object.find("metadata"); it != object.end()) md = &*it;
  }
  if (md == nullptr) return "";
  const std::string_view ns = field(*md, "namespace"), name = field(*md, "name");
  return ns.empty() ? std::string(name) : StrCat(ns, "/", name);
}

std::pair<std::string, std::string> SplitKey(const std::string& key) {
  size_t slash = key.find('/');
  if (slash == std::string::npos) return {"", key};
  return {key.substr(0, slash), key.substr(slash + 1)};
}

namespace {
// `dictionary`: the packed form is a zstd frame of the MessagePack.
std::shared_ptr<const json> Unpack(const std::string& packed, const ZstdDictionary* dictionary) {
  // Packed here from a valid object: it parses (a failure would be a bug;
  // null stands in rather than an exception through a controller).
  json parsed;
  if (dictionary != nullptr) {
    absl::StatusOr<std::string> msgpack = dictionary->Decompress(packed);
    if (msgpack.ok()) {
      parsed = json::from_msgpack(*msgpack, /*strict=*/true, /*allow_exceptions=*/false);
    } else {
      parsed = json::value_t::discarded;
    }
  } else {
    parsed = json::from_msgpack(packed, /*strict=*/true, /*allow_exceptions=*/false);
  }
  if (parsed.is_discarded()) {
    spdlog::error("informer: a packed object does not unpack ({} bytes)", packed.size());
    parsed = json();
  }
  return std::make_shared<const json>(std::move(parsed));
}

std::string PackObject(const json& object) {
  std::string packed;
  api::AppendMsgpack(packed, object);
  packed.shrink_to_fit();  // held for the object's life: no slack from the string's growth
  return packed;
}

}  // namespace

Informer::Entry::Entry(std::shared_ptr<const json> object, bool compact) {
  if (!compact) {
    object_ = std::move(object);
    return;
  }
  packed_ = std::make_shared<const std::string>(PackObject(*object));
  parsed_ = object;
}

void Informer::Entry::Pack(std::string packed) {
  packed_ = std::make_shared<const std::string>(std::move(packed));
  dictionary_ = nullptr;
  parsed_ = object_;
  object_.reset();
}

std::shared_ptr<const json> Informer::Entry::Shared() const {
  if (object_) return object_;
  return parsed_.lock();
}

std::shared_ptr<const json> Informer::Entry::Get() const {
  if (std::shared_ptr<const json> alive = Shared()) return alive;
  std::shared_ptr<const json> shared = Unpack(*packed_, dictionary_.get());
  parsed_ = shared;
  return shared;
}

Informer::Taken Informer::Take(const Entry& entry) {
  Taken t{.object = entry.Shared(), .packed = nullptr, .dictionary = nullptr};
  if (!t.object) {
    t.packed = entry.packed();
    t.dictionary = entry.dictionary();
  }
  return t;
}

// Parsed outside mu_, one at a time (a list or scan of packed objects never
// holds them all parsed) and not remembered: the copies made of it are
// what the caller keeps.
std::shared_ptr<const json> Informer::ObjectOf(const Taken& t) {
  return t.object ? t.object : Unpack(*t.packed, t.dictionary.get());
}

Informer::Informer(apiserver::Api& registry, const api::KindInfo& kind, absl::Duration resync, bool compact)
    : registry_(registry), kind_(kind), resync_(resync), compact_(compact) {
  quiescence_id_ = Quiescence::Register([this](int64_t rv) {
    absl::MutexLock lock(&mu_);
    // Not started, or stopped: nothing more of it will happen.
    return !started_ || stop_ || DeliveredLocked(rv);
  });
}

Informer::~Informer() {
  Quiescence::Unregister(quiescence_id_);
  Stop();
}

void Informer::AddHandlers(Handlers handlers) {
  absl::MutexLock handlers_lock(&handlers_mu_);
  if (handlers.on_add) {
    std::vector<std::shared_ptr<const json>> cached;
    {
      absl::MutexLock lock(&mu_);
      cached.reserve(cache_.size());
      for (const auto& [key, entry] : cache_) cached.push_back(entry.Get());
    }
    for (const auto& obj : cached) handlers.on_add(*obj);
  }
  handlers_.push_back(std::move(handlers));
}

void Informer::Start() {
  {
    absl::MutexLock lock(&mu_);
    started_ = true;
  }
  thread_ = std::thread([this] {
    // "i:" and the resource, cut to the kernel's 15 bytes ("i:persistentvol").
    char name[16] = "i:";
    const std::string_view resource = kind_.resource;
    resource.copy(name + 2, sizeof(name) - 3);
    NameThisThread(name);
    Run();
  });
}

void Informer::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    // Run waits on its watch without a timeout: wake it.
    if (watch_ != nullptr) watch_->Interrupt();
  }
  if (thread_.joinable()) thread_.join();
}

bool Informer::stopping() const {
  absl::MutexLock lock(&mu_);
  return stop_;
}

bool Informer::WaitForSync(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto synced = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return synced_; };
  return mu_.AwaitWithTimeout(absl::Condition(&synced), timeout);
}

bool Informer::Delivered(int64_t rv) const {
  absl::MutexLock lock(&mu_);
  return DeliveredLocked(rv);
}

bool Informer::DeliveredLocked(int64_t rv) const {
  if (delivering_) return false;
  // Lock order: ours, then the watch's. Nothing is taken from the watch
  // while delivering_ is false (Run sets it first), so a bookmark at or past
  // `rv` means every such event was handled.
  return listed_rv_ >= rv || (watch_ != nullptr && watch_->BookmarkVersion() >= rv);
}

std::optional<json> Informer::Get(const std::string& ns, const std::string& name) const {
  return GetByKey(ns.empty() ? name : StrCat(ns, "/", name));
}

std::optional<json> Informer::GetByKey(const std::string& key) const {
  std::shared_ptr<const json> obj = GetSharedByKey(key);
  if (!obj) return std::nullopt;
  return *obj;
}

std::shared_ptr<const json> Informer::GetSharedByKey(const std::string& key) const {
  std::shared_ptr<const std::string> packed;
  std::shared_ptr<const ZstdDictionary> dictionary;
  {
    absl::MutexLock lock(&mu_);
    auto it = cache_.find(key);
    if (it == cache_.end()) return nullptr;
    if (std::shared_ptr<const json> shared = it->second.Shared()) return shared;
    packed = it->second.packed();
    dictionary = it->second.dictionary();
  }
  // Parsed without holding mu_, so readers and the informer's own delivery
  // do not wait on it; then remembered for the next reader, unless the
  // object changed meanwhile or another reader's copy came first.
  std::shared_ptr<const json> parsed = Unpack(*packed, dictionary.get());
  absl::MutexLock lock(&mu_);
  auto it = cache_.find(key);
  if (it == cache_.end() || it->second.packed() != packed) return parsed;
  if (std::shared_ptr<const json> alive = it->second.Shared()) return alive;
  it->second.SetParsed(parsed);
  return parsed;
}

size_t Informer::PackedBytes() const {
  absl::MutexLock lock(&mu_);
  size_t n = 0;
  for (const auto& [key, entry] : cache_) n += entry.packed_bytes();
  return n;
}

size_t Informer::UnpackedCount() const {
  if (!compact_) return 0;
  absl::MutexLock lock(&mu_);
  size_t n = 0;
  for (const auto& [key, entry] : cache_) n += entry.packed() == nullptr ? 1 : 0;
  return n;
}

size_t Informer::CompressedCount() const {
  absl::MutexLock lock(&mu_);
  size_t n = 0;
  for (const auto& [key, entry] : cache_) n += entry.dictionary() != nullptr ? 1 : 0;
  return n;
}

int64_t Informer::Relocations() const {
  absl::MutexLock lock(&mu_);
  return relocations_;
}

void Informer::PackReceived(size_t keep, const std::function<bool()>& busy) {
  for (size_t n = 1; received_.size() > keep; ++n) {
    if (busy && n % 256 == 0 && busy()) return;  // the rest at the next pause
    auto [key, received] = std::move(received_.front());
    received_.pop_front();
    std::shared_ptr<const json> object;
    {
      absl::MutexLock lock(&mu_);
      auto it = cache_.find(key);
      if (it == cache_.end() || !it->second.Holds(received)) continue;  // replaced or gone since
      object = it->second.held();
    }
    // Packed outside mu_: readers do not wait for it. cache_ changes on this
    // thread alone, so the entry is still the one found.
    std::string packed = PackObject(*object);
    absl::MutexLock lock(&mu_);
    if (auto it = cache_.find(key); it != cache_.end() && it->second.Holds(object.get())) {
      it->second.Pack(std::move(packed));
    }
  }
}

void Informer::CompressPacked(const std::function<bool()>& busy) {
  if (!compact_) return;
  PackReceived(0, busy);
  std::vector<std::pair<std::string, std::shared_ptr<const std::string>>> plain;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [key, entry] : cache_) {
      // A weak reference outliving its parsed copy keeps the copy's block
      // (one allocation with the control block), pinning a page of the
      // heap of whichever thread parsed it.
      entry.ForgetExpired();
      if (entry.packed() != nullptr && entry.dictionary() == nullptr) plain.emplace_back(key, entry.packed());
    }
  }
  if (plain.empty()) return;
  const std::shared_ptr<const ZstdDictionary> dictionary =
      dictionary_.Get(plain.size(), [&plain](size_t i) { return std::string_view(*plain[i].second); });
  if (dictionary == nullptr) return;
  std::vector<std::pair<size_t, std::shared_ptr<const std::string>>> frames;
  for (size_t i = 0; i < plain.size(); ++i) {
    if (i % 256 == 255 && busy()) break;  // the rest at the next pause
    std::string frame = dictionary->Compress(*plain[i].second);
    if (frame.empty() || frame.size() >= plain[i].second->size()) continue;
    frames.emplace_back(i, std::make_shared<const std::string>(std::move(frame)));
  }
  absl::MutexLock lock(&mu_);
  for (auto& [i, frame] : frames) {
    auto it = cache_.find(plain[i].first);
    // Replaced meanwhile (by a relist: events come on this thread): skip.
    if (it != cache_.end() && it->second.packed() == plain[i].second) {
      it->second.SetCompressed(std::move(frame), dictionary);
    }
  }
}

void Informer::RelocateKept() {
  // Copies, not moves: a moved string or node keeps its block where the
  // events put it.
  FreshPages fresh;
  absl::MutexLock lock(&mu_);
  std::map<std::string, Entry> cache;
  for (const auto& [key, entry] : cache_) cache.emplace_hint(cache.end(), key, entry);
  Indexes indexes = indexes_;
  cache_.swap(cache);
  indexes_.swap(indexes);
  ++relocations_;
}

std::vector<json> Informer::List(const std::string& ns) const {
  std::vector<Taken> taken;
  {
    absl::MutexLock lock(&mu_);
    const std::string prefix = ns.empty() ? "" : ns + "/";
    for (auto it = cache_.lower_bound(prefix); it != cache_.end(); ++it) {
      if (!prefix.empty() && !it->first.starts_with(prefix)) break;
      taken.push_back(Take(it->second));
    }
  }
  std::vector<json> out;
  out.reserve(taken.size());
  for (const Taken& t : taken) out.push_back(*ObjectOf(t));
  return out;
}

std::vector<json> Informer::Select(const std::function<bool(const json&)>& pred) const {
  std::vector<Taken> taken;
  {
    absl::MutexLock lock(&mu_);
    taken.reserve(cache_.size());
    for (const auto& [key, entry] : cache_) taken.push_back(Take(entry));
  }
  std::vector<json> out;
  for (const Taken& t : taken) {
    std::shared_ptr<const json> obj = ObjectOf(t);
    if (pred(*obj)) out.push_back(*obj);
  }
  return out;
}

void Informer::AddIndex(const std::string& name, IndexFunc fn) { index_funcs_[name] = std::move(fn); }

void Informer::ReindexLocked(const std::string& key, const json* before, const json* after) {
  Reindex(indexes_, key, before, after);
}

void Informer::Reindex(Indexes& indexes, const std::string& key, const json* before, const json* after) const {
  for (const auto& [name, fn] : index_funcs_) {
    auto& index = indexes[name];
    if (before != nullptr) {
      for (const auto& v : fn(*before)) {
        auto it = index.find(v);
        if (it == index.end()) continue;
        it->second.erase(key);
        if (it->second.empty()) index.erase(it);
      }
    }
    if (after != nullptr) {
      for (const auto& v : fn(*after)) index[v].insert(key);
    }
  }
}

const std::set<std::string>* Informer::IndexedLocked(const std::string& index, const std::string& value) const {
  auto idx = indexes_.find(index);
  if (idx == indexes_.end()) return nullptr;
  auto keys = idx->second.find(value);
  return keys == idx->second.end() ? nullptr : &keys->second;
}

std::vector<json> Informer::ByIndex(const std::string& index, const std::string& value) const {
  std::vector<json> out;
  for (const std::shared_ptr<const json>& o : ByIndexShared(index, value)) out.push_back(*o);
  return out;
}

std::vector<std::shared_ptr<const json>> Informer::ByIndexShared(const std::string& index,
                                                                 const std::string& value) const {
  std::vector<Taken> taken;
  {
    absl::MutexLock lock(&mu_);
    const std::set<std::string>* keys = IndexedLocked(index, value);
    if (keys == nullptr) return {};
    for (const auto& key : *keys) {
      if (auto it = cache_.find(key); it != cache_.end()) taken.push_back(Take(it->second));
    }
  }
  std::vector<std::shared_ptr<const json>> out;
  out.reserve(taken.size());
  for (const Taken& t : taken) out.push_back(ObjectOf(t));
  return out;
}

std::vector<std::string> Informer::KeysByIndex(const std::string& index, const std::string& value) const {
  absl::MutexLock lock(&mu_);
  const std::set<std::string>* keys = IndexedLocked(index, value);
  return keys == nullptr ? std::vector<std::string>{} : std::vector<std::string>(keys->begin(), keys->end());
}

std::vector<std::string> Informer::Keys() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> keys;
  keys.reserve(cache_.size());
  for (const auto& [key, entry] : cache_) keys.push_back(key);
  return keys;
}

size_t Informer::CountByIndex(const std::string& index, const std::string& value) const {
  absl::MutexLock lock(&mu_);
  const std::set<std::string>* keys = IndexedLocked(index, value);
  return keys == nullptr ? 0 : keys->size();
}

std::optional<int64_t> Informer::Relist() {
  while (!stopping()) {
    // Page by page (client-go's pager): no list of every object at once, in
    // the API server or (over HTTP) in one response. The watch resumes from
    // the first page's version; a change made while later pages were read
    // comes again on the watch, and the handlers see the newest state last.
    // Each object is indexed and (compact) packed as it comes, so a long
    // list is never held parsed whole.
    std::map<std::string, Entry> fresh;
    Indexes fresh_indexes;
    received_.clear();  // the list packs every object it brings
    int64_t listed_rv = 0;
    apiserver::ListOptions options;
    options.limit = kListPageSize;
    absl::Status failed;
    do {
      auto page = registry_.List(kind_, "", options);
      if (!page.ok()) {
        failed = page.status();
        break;
      }
      if (listed_rv == 0) listed_rv = page->resource_version;
      for (auto& item : page->items) {
        std::string key = ObjectKey(item);
        auto object = std::make_shared<const json>(std::move(item));
        auto seen = fresh.find(key);  // (pages do not overlap; were one to, the later wins)
        Reindex(fresh_indexes, key, seen == fresh.end() ? nullptr : seen->second.Get().get(), object.get());
        fresh.insert_or_assign(std::move(key), Entry(std::move(object), compact_));
      }
      options.continue_token = page->continue_token;
    } while (!options.continue_token.empty() && !stopping());
    if (!failed.ok()) {
      spdlog::warn("informer {}: list failed: {}; retrying", kind_.resource, failed.ToString());
      absl::SleepFor(absl::Seconds(1));
      continue;
    }
    if (stopping()) break;
    absl::MutexLock handlers_lock(&handlers_mu_);
    std::vector<std::string> keys;
    keys.reserve(fresh.size());
    for (const auto& [key, entry] : fresh) keys.push_back(key);
    std::map<std::string, Entry> before;
    {
      absl::MutexLock lock(&mu_);
      before.swap(cache_);
      cache_.swap(fresh);
      indexes_.swap(fresh_indexes);
      applied_since_relocation_ += cache_.size();
    }
    // `before` is this thread's alone now; cache_ changes only on this
    // thread, but other threads read it (Entry::Get under mu_).
    for (const std::string& key : keys) {
      std::shared_ptr<const json> object = GetSharedByKey(key);
      auto it = before.find(key);
      std::shared_ptr<const json> old = it == before.end() ? nullptr : it->second.Get();
      for (const auto& h : handlers_) {
        if (!old) {
          if (h.on_add) h.on_add(*object);
        } else if (h.on_update) {
          h.on_update(*old, *object);
        }
      }
    }
    for (const auto& [key, entry] : before) {
      if (std::binary_search(keys.begin(), keys.end(), key)) continue;  // keys: sorted, as the map's
      std::shared_ptr<const json> obj = entry.Get();
      for (const auto& h : handlers_) {
        if (h.on_delete) h.on_delete(*obj);
      }
    }
    // Synced only once the handlers have seen the whole first list: a caller
    // that treats "not handled yet" as "gone" (the pod workers' orphan
    // cleanup) would otherwise act on objects whose add is still on its way.
    absl::MutexLock lock(&mu_);
    synced_ = true;
    return listed_rv;
  }
  return std::nullopt;
}

void Informer::Apply(const store::Event& e) {
  const json& object = *e.object;
  const std::string key = ObjectKey(object);
  absl::MutexLock handlers_lock(&handlers_mu_);
  std::shared_ptr<const json> before;
  // Packed before mu_ is taken (readers do not wait for it), or, for an
  // object still on its way (DeferPacking), held parsed as it came (shared
  // with the event) for now.
  std::optional<Entry> entry;
  if (e.type != store::EventType::kDeleted) {
    const bool defer = compact_ && !packing_settled_(object);
    entry.emplace(e.object, compact_ && !defer);
    if (defer) received_.emplace_back(key, e.object.get());
  }
  // The object this one replaces, parsed outside mu_ when only its packed
  // form is left: cache_ changes on this thread alone, so it is still there.
  std::optional<Taken> was;
  {
    absl::MutexLock lock(&mu_);
    if (auto it = cache_.find(key); it != cache_.end()) was = Take(it->second);
  }
  if (was) before = ObjectOf(*was);
  {
    absl::MutexLock lock(&mu_);
    if (e.type == store::EventType::kDeleted) {
      ReindexLocked(key, before.get(), nullptr);
      cache_.erase(key);
    } else {
      ReindexLocked(key, before.get(), &object);
      cache_.insert_or_assign(key, std::move(*entry));
    }
  }
  for (const auto& h : handlers_) {
    if (e.type == store::EventType::kDeleted) {
      if (h.on_delete) h.on_delete(object);
    } else if (before) {
      if (h.on_update) h.on_update(*before, object);
    } else if (h.on_add) {
      h.on_add(object);
    }
  }
}

void Informer::Run() {
  // Relists back off (jittered, doubling to 5 s, reset by a watch that
  // lasted): each one replays every object to every handler, so relisting
  // in a tight loop would feed the very overload that ended the watch.
  absl::Duration backoff = absl::ZeroDuration();
  std::mt19937_64 rng(std::random_device{}());
  while (!stopping()) {
    if (backoff > absl::ZeroDuration()) {
      std::uniform_real_distribution<double> jitter(0.5, 1.5);
      const absl::Time until = absl::Now() + backoff * jitter(rng);
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithDeadline(absl::Condition(&stop_), until);
    }
    backoff = std::min(std::max(backoff * 2, absl::Milliseconds(100)), absl::Seconds(5));
    SetDelivering(true, nullptr);
    std::optional<int64_t> rv = Relist();
    if (!rv) return;
    {
      absl::MutexLock lock(&mu_);
      listed_rv_ = *rv;
    }
    auto stream = registry_.Watch(kind_, "", std::to_string(*rv), {});
    if (!stream.ok()) {
      spdlog::info("informer {}: watch from {}: {}; relisting", kind_.resource, *rv, stream.status().ToString());
      continue;
    }
    SetDelivering(false, stream->watcher.get());
    const absl::Time watch_start = absl::Now();
    absl::Time next_resync = absl::Now() + resync_;
    IdleMemoryRelease idle;
    while (!stopping()) {
      // Sleeps until an event, the watch's end, Stop() (which interrupts
      // the watch: watch_ is set before this loop checks stopping()) or the
      // next resync, waking on the way to give memory back as
      // AwaitReleasingWhenIdle does (common/memory.h); an idle informer
      // does not wake otherwise.
      const absl::Duration to_resync = next_resync - absl::Now();
      if (!stream->watcher->WaitReady(std::min(to_resync, idle.NextWait()))) {
        if (absl::Now() < next_resync) {
          // Idle: the packed objects are compressed first, so what that
          // frees goes back with the rest.
          CompressPacked([&] { return stopping() || stream->watcher->WaitReady(absl::ZeroDuration()); });
          // The frames are read without the compression tables.
          if (dictionary_.dictionary() != nullptr) dictionary_.dictionary()->ReleaseCompressor();
          size_t cached;
          {
            absl::MutexLock lock(&mu_);
            cached = cache_.size();
          }
          if (applied_since_relocation_ >= std::max(kRelocateAfter, cached / 8) &&
              !stream->watcher->WaitReady(absl::ZeroDuration())) {
            RelocateKept();
            applied_since_relocation_ = 0;
          }
          // The views were decoded on the controllers' threads: those give
          // the memory back when asked.
          if (views_.Clear() > 0) RequestIdleRelease();
          idle.Idle();
        }
      } else {
        idle.Worked();
        // Marked before anything is taken: Delivered() never sees a
        // bookmark past an event that is on its way to the handlers.
        SetDelivering(true, stream->watcher.get());
        while (auto e = stream->watcher->Next(absl::ZeroDuration())) {
          Apply(*e);
          ++applied_since_relocation_;
        }
        if (compact_) PackReceived(packing_delay_);
        SetDelivering(false, stream->watcher.get());
      }
      if (stream->watcher->ended()) {  // fell behind: relist
        if (absl::Now() - watch_start > absl::Seconds(30)) backoff = absl::ZeroDuration();
        break;
      }
      if (absl::Now() >= next_resync) {
        next_resync = absl::Now() + resync_;
        absl::MutexLock handlers_lock(&handlers_mu_);
        for (const auto& obj : List()) {
          for (const auto& h : handlers_) {
            if (h.on_update) h.on_update(obj, obj);
          }
        }
      }
    }
    SetDelivering(true, nullptr);  // the stream goes
  }
  SetDelivering(true, nullptr);
}

void Informer::SetDelivering(bool delivering, store::EventSource* watch) {
  absl::MutexLock lock(&mu_);
  delivering_ = delivering;
  watch_ = watch;
}

}  // namespace berth::client
