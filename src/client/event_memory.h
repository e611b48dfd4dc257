// The events an EventRecorder remembers for aggregation (client/events.h):
// the last `capacity` events recorded, each by its identity (the involved
// object's uid, the reason and the message), with its name and when it was
// last written.
//
// An entry is fixed in size, held in one array and one hash table, where a
// list node, a map node and two strings per event cost ~460 bytes in the
// heaps of whichever workers recorded it, and kept those heaps' pages
// resident once the workers went idle (berth up after 10,000 claims: 3 MiB
// live in the binder's and the provisioner's workers). The identity is kept
// as two unrelated 64-bit hashes of it: two events taken for one (about
// 1 in 10^31 among 4,096 remembered) would write one of them once less
// within the repeat interval. The name is kept as the nanoseconds it was made from
// (EventRecorder names an event <object>.<nanoseconds in hex>).
//
//   EventMemory memory(4096);
//   const EventMemory::Key key = EventMemory::KeyOf(id);
//   if (const EventMemory::Event* e = memory.Find(key)) ...
//   memory.Remember(key, name_ns, now);
//
// Thread-safety: not thread-safe (the recorder holds its lock).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"

namespace berth::client {

class EventMemory {
 public:
  struct Key {
    uint64_t a = 0, b = 0;
    friend bool operator==(const Key&, const Key&) = default;
    template <typename H>
    friend H AbslHashValue(H h, const Key& k) {
      return H::combine(std::move(h), k.a, k.b);
    }
  };
  struct Event {
    int64_t name_ns = 0;  // the event's name is <object>.<name_ns in hex>
    absl::Time last;      // when it was last written
  };

  static Key KeyOf(std::string_view identity);

  explicit EventMemory(size_t capacity);

  // The event remembered as `key`, or null. Does not change the order.
  // Valid until the next Remember or Forget.
  const Event* Find(const Key& key) const;
  // Remembers `key` as `event`, the most recent; when full, the least
  // recently remembered is forgotten.
  void Remember(const Key& key, Event event);
  void Forget(const Key& key);
  size_t size() const { return index_.size(); }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  struct Entry {
    Key key;
    Event event;
    uint32_t newer = kNone, older = kNone;  // in the order; `older` links the free slots
  };
  void Unlink(uint32_t i);
  void PushNewest(uint32_t i);

  const size_t capacity_;
  std::vector<Entry> entries_;  // grows up to capacity_; never shrinks
  absl::flat_hash_map<Key, uint32_t> index_;
  uint32_t newest_ = kNone, oldest_ = kNone, free_ = kNone;
};

}  // namespace berth::client
