// Kubernetes Events from controllers: `Record(object, "Warning",
// "ProvisioningFailed", message)` creates a core/v1 Event about the object,
// or bumps count and lastTimestamp of the same event (same object, reason
// and message) as kubelet's and the controllers' recorders do — at most
// once per repeat interval, for the last kMaxRemembered events recorded.
//
// Record returns at once: a writer thread writes the queued events, all
// that are waiting in one group commit, so a controller's worker does not
// wait for an fsync per event (client-go's broadcaster is asynchronous
// too). One writer thread serves every recorder of the process (berth up
// has ~20, one or more per controller), a batch of one recorder at a time
// in turn; it exists while a recorder does. Destruction writes what is
// still queued, on the destroying thread.
//
// Thread-safety: thread-safe. Failures to write an event are logged and
// dropped, and so are events beyond kMaxQueued waiting to be written:
// events are diagnostics, never a reason to fail or slow a reconcile.
#pragma once

#include <cstdint>
#include <deque>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "apiserver/api.h"
#include "client/event_memory.h"
#include "nlohmann/json.hpp"

namespace berth::client {

class EventWriter;  // events.cc

class EventRecorder {
 public:
  // The same event (object, reason, message) recorded again within
  // `repeat_interval` of the last write is dropped.
  EventRecorder(apiserver::Api& registry, std::string component, absl::Duration repeat_interval = absl::Seconds(10));
  ~EventRecorder();
  EventRecorder(const EventRecorder&) = delete;
  EventRecorder& operator=(const EventRecorder&) = delete;

  void Record(const nlohmann::json& object, const std::string& type, const std::string& reason,
              const std::string& message) ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until every event recorded before the call is written (or dropped).
  void Flush() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // The events remembered for aggregation: client-go's event correlator
  // keeps an LRU of 4096 (maxLruCacheEntries); one evicted is written anew
  // when it recurs.
  static constexpr size_t kMaxRemembered = 4096;
  static constexpr size_t kMaxQueued = 20000;
  static constexpr size_t kMaxBatch = 512;
  // An event to write: a new one, or a bump of `existing` (created afresh
  // if that is gone). Held as its fields: the JSON is built by the writer,
  // so a burst of queued events costs a few hundred bytes each.
  struct Pending {
    EventMemory::Key key;  // of (uid, reason, message)
    std::string ns;
    std::string existing;
    std::string name;     // of the event
    int64_t name_ns = 0;  // what `name` (or `existing`) was made from
    std::string timestamp;
    std::string type;
    std::string reason;
    std::string message;
    std::string object_kind, object_api_version, object_name, object_ns, object_uid, object_rv;
  };

  friend class EventWriter;  // events.cc: the thread that calls WriteBatch

  // Writes up to kMaxBatch queued events; returns whether more are queued.
  bool WriteBatch() ABSL_LOCKS_EXCLUDED(mu_);
  void Write(std::deque<Pending> batch) ABSL_LOCKS_EXCLUDED(mu_);
  // Forgets the event `key` if it is still the one made from `name_ns`.
  void Forget(const EventMemory::Key& key, int64_t name_ns) ABSL_LOCKS_EXCLUDED(mu_);
  nlohmann::json EventOf(const Pending& p) const;

  apiserver::Api& registry_;
  const std::string component_;
  const absl::Duration repeat_interval_;
  absl::Mutex mu_;
  // (uid, reason, message) → the event, for aggregation.
  EventMemory remembered_ ABSL_GUARDED_BY(mu_){kMaxRemembered};
  std::deque<Pending> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t queued_ ABSL_GUARDED_BY(mu_) = 0;   // events ever queued
  uint64_t written_ ABSL_GUARDED_BY(mu_) = 0;  // of those, written or dropped
  uint64_t quiescence_id_ = 0;                 // client/quiescence.h
  EventWriter* const writer_;                  // the process's, held while we exist
};

}  // namespace berth::client
