// Every watch stream of the API server, served by one thread.
//
// A watch request's handler starts the HTTP stream, Detach()es it and hands
// it here with the store watcher and how to encode events; the handler
// thread is free at once. The hub's thread writes the initial ADDED events,
// then whatever the store's watcher queues, bookmarks when asked for, and
// ends the stream at its deadline (timeoutSeconds or the server's maximum).
// It is woken by the watcher (a change was queued), by the stream (a
// backlog was written, or the client went away) and by its clock (a
// deadline or bookmark is due) — it never polls.
//
// Back-pressure: while a stream is backlogged (http::Stream::Backlogged)
// the hub takes no more of that watcher's events. The store keeps them
// (up to its watcher_queue, then it ends the watch: the client relists), and
// the HTTP server closes a connection whose writes stall for its
// io_timeout.
//
//   WatchHub hub({.bookmark_interval = absl::Seconds(30)});
//   hub.Add({.initial = ..., .watcher = ..., .encode = ..., .deadline = ...}, stream);
//
// Thread-safety: thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "http/server.h"
#include "nlohmann/json.hpp"
#include "store/store.h"

namespace berth::apiserver {

class WatchHub {
 public:
  struct Options {
    absl::Duration bookmark_interval = absl::Seconds(30);
    Clock* clock = &RealClock();
  };

  struct Watch {
    std::vector<store::Event> initial;  // sent first, as ADDED
    std::unique_ptr<store::Watcher> watcher;
    // Which objects the client wants (a field selector); null: all.
    std::function<bool(const nlohmann::json&)> filter;
    // One event as it goes on the wire (a line of JSON). `text` is the
    // object's JSON as the store wrote it when known (else null).
    std::function<std::string(const std::string& type, const nlohmann::json& object, const std::string* text)> encode;
    // A BOOKMARK event's object at a resourceVersion; null: no bookmarks.
    std::function<nlohmann::json(int64_t resource_version)> bookmark;
    // The ERROR event's object when the store ends the watch (it fell too
    // far behind, or the store is closing).
    nlohmann::json ended_status;
    absl::Time deadline = absl::InfiniteFuture();
  };

  explicit WatchHub(Options options);
  // Ends the streams still open (as at their deadline) and stops.
  ~WatchHub();

  void Add(Watch watch, std::shared_ptr<http::Stream> stream) ABSL_LOCKS_EXCLUDED(mu_);
  // Watches being served.
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Entry {
    Watch watch;
    std::shared_ptr<http::Stream> stream;
    size_t next_initial = 0;
    int64_t last_bookmark = 0;
    absl::Time next_bookmark = absl::InfiniteFuture();
    absl::Time due = absl::InfiniteFuture();  // its key in dues_
  };
  // What the watcher's and the stream's callbacks hold: they may outlive the
  // hub (the HTTP server ends streams after it), so they ring through this.
  struct Bell {
    absl::Mutex mu;
    WatchHub* hub ABSL_GUARDED_BY(mu) = nullptr;
  };

  void MarkReady(uint64_t id) ABSL_LOCKS_EXCLUDED(mu_);
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);
  // Serves one watch; false when it is over. Hub thread only, mu_ not held.
  bool Pump(Entry& e);
  bool Send(Entry& e, const std::string& type, const nlohmann::json& object, const std::string* text = nullptr);

  const Options options_;
  Clock& clock_;
  const std::shared_ptr<Bell> bell_ = std::make_shared<Bell>();

  mutable absl::Mutex mu_;
  // Entries are added under mu_ and otherwise used by the hub thread only
  // (a pointer stays valid while the thread runs it: only it erases).
  std::map<uint64_t, std::unique_ptr<Entry>> entries_ ABSL_GUARDED_BY(mu_);
  std::set<uint64_t> ready_ ABSL_GUARDED_BY(mu_);
  std::set<std::pair<absl::Time, uint64_t>> dues_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;

  std::thread thread_;
};

}  // namespace berth::apiserver
