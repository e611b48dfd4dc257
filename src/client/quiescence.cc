#include "client/quiescence.h"

#include <map>
#include <utility>

#include "absl/synchronization/mutex.h"

namespace berth::client {
namespace {

struct Registry {
  absl::Mutex mu;
  std::map<uint64_t, Quiescence::IdleFn> probes ABSL_GUARDED_BY(mu);
  uint64_t next ABSL_GUARDED_BY(mu) = 1;
};

Registry& Instance() {
  static auto* registry = new Registry();  // never destroyed: used until exit
  return *registry;
}

}  // namespace

uint64_t Quiescence::Register(IdleFn idle) {
  Registry& r = Instance();
  absl::MutexLock lock(&r.mu);
  const uint64_t id = r.next++;
  r.probes.emplace(id, std::move(idle));
  return id;
}

void Quiescence::Unregister(uint64_t id) {
  Registry& r = Instance();
  absl::MutexLock lock(&r.mu);
  r.probes.erase(id);
}

bool Quiescence::AllIdle(int64_t rv) {
  Registry& r = Instance();
  absl::MutexLock lock(&r.mu);
  for (const auto& [id, idle] : r.probes) {
    if (!idle(rv)) return false;
  }
  return true;
}

}  // namespace berth::client
