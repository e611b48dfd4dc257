#include "client/event_memory.h"

#include "absl/hash/hash.h"

namespace berth::client {

EventMemory::Key EventMemory::KeyOf(std::string_view identity) {
  // absl's hash (seeded per process) and FNV-1a: unrelated functions, so a
  // collision of one says nothing of the other.
  uint64_t fnv = 14695981039346656037ull;
  for (const unsigned char c : identity) {
    fnv ^= c;
    fnv *= 1099511628211ull;
  }
  return Key{absl::HashOf(identity), fnv};
}

EventMemory::EventMemory(size_t capacity) : capacity_(capacity) {}

const EventMemory::Event* EventMemory::Find(const Key& key) const {
  auto it = index_.find(key);
  return it == index_.end() ? nullptr : &entries_[it->second].event;
}

void EventMemory::Remember(const Key& key, Event event) {
  if (auto it = index_.find(key); it != index_.end()) {
    entries_[it->second].event = event;
    Unlink(it->second);
    PushNewest(it->second);
    return;
  }
  if (capacity_ == 0) return;
  uint32_t slot;
  if (free_ != kNone) {
    slot = free_;
    free_ = entries_[slot].older;
  } else if (entries_.size() < capacity_) {
    slot = static_cast<uint32_t>(entries_.size());
    entries_.emplace_back();
  } else {
    slot = oldest_;
    index_.erase(entries_[slot].key);
    Unlink(slot);
  }
  entries_[slot].key = key;
  entries_[slot].event = event;
  PushNewest(slot);
  index_.emplace(key, slot);
}

void EventMemory::Forget(const Key& key) {
  auto it = index_.find(key);
  if (it == index_.end()) return;
  const uint32_t slot = it->second;
  index_.erase(it);
  Unlink(slot);
  entries_[slot].older = free_;
  free_ = slot;
}

void EventMemory::Unlink(uint32_t i) {
  Entry& e = entries_[i];
  (e.newer == kNone ? newest_ : entries_[e.newer].older) = e.older;
  (e.older == kNone ? oldest_ : entries_[e.older].newer) = e.newer;
  e.newer = e.older = kNone;
}

void EventMemory::PushNewest(uint32_t i) {
  Entry& e = entries_[i];
  e.newer = kNone;
  e.older = newest_;
  if (newest_ != kNone) entries_[newest_].newer = i;
  newest_ = i;
  if (oldest_ == kNone) oldest_ = i;
}

}  // namespace berth::client
