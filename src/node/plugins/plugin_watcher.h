// kubelet's plugin watcher: finds registration sockets in a directory
// (<kubelet-root>/plugins_registry/), asks each plugin who it is over
// pluginregistration v1 (GetInfo), hands it to the PluginHandler, and tells
// the plugin the verdict (NotifyRegistrationStatus). A socket that goes away
// deregisters its plugin; one that is created again (the plugin restarted:
// a new inode, or a create event for its name, as kubelet goes by, on a file
// whose change time differs from the one registered) registers again —
// node-driver-registrar removes its stale socket and binds a new one at
// once, and the file system may hand the new socket the old inode. (The
// change time tells the socket a scan registered apart from one created
// after it: a scan may see a new socket before its create event is read.) Names
// starting with "." are ignored, as are files that are not sockets. Failed
// registrations are retried with backoff.
//
//   PluginWatcher watcher(root + "/plugins_registry", csi_plugins);
//   BERTH_RETURN_IF_ERROR(watcher.Start());
//
// Changes are seen through inotify at once and by a periodic rescan.
//
// Thread-safety: Start/Stop from one thread; the handler is called from the
// watcher's thread only.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/backoff.h"
#include "common/clock.h"

namespace berth::node {

class PluginHandler {
 public:
  virtual ~PluginHandler() = default;
  // Checks and registers the plugin; the error's message goes back to it.
  virtual absl::Status RegisterPlugin(const std::string& name, const std::string& endpoint,
                                      const std::vector<std::string>& versions) = 0;
  virtual void DeregisterPlugin(const std::string& name) = 0;
};

class PluginWatcher {
 public:
  struct Options {
    absl::Duration rescan = absl::Seconds(2);
    absl::Duration call_timeout = absl::Seconds(10);
    absl::Duration max_retry = absl::Seconds(30);
    // Tell each plugin the verdict (kubelet does). Off for an observer that
    // only follows what the node's own agent registers.
    bool notify = true;
    // Times the rescans and the retries (nullptr: RealClock()). The grace a
    // new socket gets to start listening, and the calls' deadlines, are real
    // time: a real process binds and answers.
    Clock* clock = nullptr;
  };
  PluginWatcher(std::string dir, PluginHandler& handler) : PluginWatcher(std::move(dir), handler, Options{}) {}
  PluginWatcher(std::string dir, PluginHandler& handler, Options options);
  ~PluginWatcher();  // Stop()

  // Creates the directory (0750) if missing and starts watching.
  absl::Status Start();
  // Stops watching; registered plugins stay registered (as when kubelet stops).
  void Stop();

  // The plugins registered now: socket path → plugin name.
  std::map<std::string, std::string> Registered() const ABSL_LOCKS_EXCLUDED(mu_);
  // How many scans of the directory have finished (the first at Start, then
  // one per change or rescan period): lets a test wait for the next scan
  // instead of sleeping through a period.
  int64_t Scans() const { return scans_.load(); }

 private:
  // Which file a path names: its inode and change time (a file created at
  // the path later has a later change time, even on the same inode).
  struct FileId {
    ino_t inode = 0;
    int64_t ctime_ns = 0;
    bool operator==(const FileId&) const = default;
  };
  struct Plugin {
    std::string name;
    FileId file;
  };
  struct Retry {
    FileId file;
    absl::Time next;
  };
  void Run();
  // Drains the inotify queue, noting the names created (or moved in) in
  // created_.
  void ReadEvents();
  void Rescan();
  // Sockets under dir_ (recursively, skipping "." names): path → file.
  std::map<std::string, FileId> Sockets() const;
  // GetInfo + handler + NotifyRegistrationStatus. The plugin's name on
  // success.
  absl::StatusOr<std::string> Register(const std::string& socket);

  const std::string dir_;
  PluginHandler& handler_;
  const Options options_;
  int inotify_fd_ = -1;
  Clock& clock_;
  int wake_fd_ = -1;  // eventfd: Stop, or the next rescan or retry falling due
  std::atomic<bool> stopping_{false};
  std::thread thread_;
  // Wakes the thread for the next rescan or retry (watcher thread only, and
  // Stop once it has joined).
  ScopedTimer timer_;
  std::map<std::string, Retry> retries_;  // watcher thread only
  // 0.5 s doubling to options_.max_retry per socket, no jitter.
  ItemBackoff retry_backoff_;
  // Paths created since the last rescan (watcher thread only): a registered
  // plugin's socket among them was replaced, whatever its inode, unless it
  // is the very file registered (the same change time).
  std::set<std::string> created_;

  std::atomic<int64_t> scans_{0};

  mutable absl::Mutex mu_;
  std::map<std::string, Plugin> plugins_ ABSL_GUARDED_BY(mu_);  // socket → plugin
};

// kubelet's check of a CSI plugin's supported_versions: the highest version
// with major 1 (0.x is too old, ≥2 unknown); INVALID_ARGUMENT when none.
absl::Status CheckCsiVersions(const std::vector<std::string>& versions);

}  // namespace berth::node
