// Typed views of an informer's objects (api/types/), decoded once per
// object and shared by every sync that reads it (Informer::Decoded).
//
// Read so: StorageClasses. Every sync of a claim decoded its class — about
// five times per claim on its way to Bound — though a class hardly ever
// changes. Claims and volumes are decoded per sync as before: each version
// is read about twice, close together, and when they were read through
// here the decodes saved were paid back in allocation (views outliving
// their syncs, freed on other threads; docs/performance.md).
//
//   std::shared_ptr<const void> kept = views.Find(object, typeid(T));
//   if (kept == nullptr) views.Keep(object, typeid(T), kept = Decode(...));
//
// Only the `capacity` most recently used views are kept, and Clear() drops
// them all (the informer does when it falls idle after changes of its own
// objects). For informers that hold their objects parsed: a compact one
// parses an object nobody holds anew at each read, and a new object is
// a miss.
//
// A view is found by its object's address and checked against the
// object's owner (a weak reference kept with it): a new object at a dead
// one's address never gets the dead one's view.
//
// Thread-safety: thread-safe.
#pragma once

#include <list>
#include <memory>
#include <typeindex>
#include <unordered_map>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "nlohmann/json.hpp"

namespace berth::client {

class TypedViews {
 public:
  // Far more than the classes of any cluster.
  static constexpr size_t kDefaultCapacity = 256;

  explicit TypedViews(size_t capacity = kDefaultCapacity) : capacity_(capacity) {}

  // The view of `object` kept as `type`, or null.
  std::shared_ptr<const void> Find(const std::shared_ptr<const nlohmann::json>& object, std::type_index type)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Keeps `view` as `object`'s (replacing one kept as another type), and
  // drops the least recently used past the capacity.
  void Keep(const std::shared_ptr<const nlohmann::json>& object, std::type_index type, std::shared_ptr<const void> view)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Drops every view; returns how many there were.
  size_t Clear() ABSL_LOCKS_EXCLUDED(mu_);

  struct Counts {
    int64_t hits = 0;
    int64_t misses = 0;
    size_t kept = 0;
  };
  Counts counts() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Slot {
    std::weak_ptr<const nlohmann::json> object;
    std::type_index type;
    std::shared_ptr<const void> view;
    std::list<const nlohmann::json*>::iterator age;
  };

  const size_t capacity_;
  mutable absl::Mutex mu_;
  std::unordered_map<const nlohmann::json*, Slot> slots_ ABSL_GUARDED_BY(mu_);
  std::list<const nlohmann::json*> ages_ ABSL_GUARDED_BY(mu_);  // most recently used first
  int64_t hits_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t misses_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace berth::client
