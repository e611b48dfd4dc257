#include "client/typed_views.h"

#include <utility>
#include <vector>

namespace berth::client {

namespace {

bool SameObject(const std::weak_ptr<const nlohmann::json>& kept, const std::shared_ptr<const nlohmann::json>& object) {
  return !kept.expired() && !kept.owner_before(object) && !object.owner_before(kept);
}

}  // namespace

std::shared_ptr<const void> TypedViews::Find(const std::shared_ptr<const nlohmann::json>& object,
                                             std::type_index type) {
  absl::MutexLock lock(&mu_);
  auto it = slots_.find(object.get());
  if (it == slots_.end() || it->second.type != type || !SameObject(it->second.object, object)) {
    ++misses_;
    return nullptr;
  }
  ages_.splice(ages_.begin(), ages_, it->second.age);
  ++hits_;
  return it->second.view;
}

void TypedViews::Keep(const std::shared_ptr<const nlohmann::json>& object, std::type_index type,
                      std::shared_ptr<const void> view) {
  std::vector<Slot> dropped;  // freed after the lock (declared before it)
  dropped.reserve(2);         // nothing below throws once the map and the list agree
  absl::MutexLock lock(&mu_);
  if (auto it = slots_.find(object.get()); it != slots_.end()) {
    dropped.push_back(std::move(it->second));
    it->second = Slot{object, type, std::move(view), dropped.back().age};
    ages_.splice(ages_.begin(), ages_, it->second.age);
  } else {
    ages_.push_front(object.get());
    try {
      slots_.emplace(object.get(), Slot{object, type, std::move(view), ages_.begin()});
    } catch (...) {
      ages_.pop_front();
      throw;
    }
  }
  while (slots_.size() > capacity_) {
    auto oldest = slots_.find(ages_.back());
    dropped.push_back(std::move(oldest->second));
    slots_.erase(oldest);
    ages_.pop_back();
  }
}

size_t TypedViews::Clear() {
  std::unordered_map<const nlohmann::json*, Slot> slots;
  std::list<const nlohmann::json*> ages;
  absl::MutexLock lock(&mu_);
  slots.swap(slots_);
  ages.swap(ages_);
  return slots.size();
}

TypedViews::Counts TypedViews::counts() const {
  absl::MutexLock lock(&mu_);
  return {hits_, misses_, slots_.size()};
}

}  // namespace berth::client
