// Volume and pool health: what berth-csi knows of failures below a volume,
// for NodeGetVolumeStats, ControllerGetVolume/ListVolumes (VolumeCondition)
// and the driver's readiness.
//
// Three sources, each cheap enough for kubelet's stats period:
//   - the kernel log (/dev/kmsg), followed by KernelLogWatcher: lines that
//     name a loop device with an error ("I/O error, dev loop3, ...",
//     "Buffer I/O error on dev loop3", "EXT4-fs error (device loop3)",
//     "XFS (loop3): ... shut down") are charged to the file backing that
//     device at the moment the line is read (device and inode, as loop.h
//     matches images), so a device number reused later by another volume is
//     never blamed;
//   - ext4's own error count (/sys/fs/ext4/<dev>/errors_count), which the
//     superblock keeps across mounts until fsck clears it;
//   - an fsync of the mount's root directory, which a shut-down XFS or an
//     ext4 whose journal aborted refuses.
//
//   HealthRegistry health;
//   KernelLogWatcher watcher(health, loops);   // reads from now on
//   watcher.Start();
//   if (auto fault = health.FaultOf(image_id)) ... // "I/O error, dev loop3, ..."
//
// Thread-safety: HealthRegistry is thread-safe; KernelLogWatcher's
// Start/Stop from one thread.
#pragma once

#include <atomic>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "driver/mount/loop.h"

namespace berth::driver {

// Faults recorded against image files.
class HealthRegistry {
 public:
  // Records `message` against `image` (the first fault and the count are
  // kept; later lines only count).
  void Record(const FileId& image, std::string message) ABSL_LOCKS_EXCLUDED(mu_);
  // "the kernel logged N error(s) on its device, the first: <line>", or
  // nothing.
  std::optional<std::string> FaultOf(const FileId& image) const ABSL_LOCKS_EXCLUDED(mu_);
  // Forgets `image`'s faults (a new device was attached to it after its
  // filesystem was checked).
  void Clear(const FileId& image) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Fault {
    std::string first;
    int64_t count = 0;
  };
  mutable absl::Mutex mu_;
  std::map<FileId, Fault> faults_ ABSL_GUARDED_BY(mu_);
};

// The loop device a kernel log message reports an error on ("loop3"), or
// "" when it reports none (also for the block layer's "operation not
// supported error" notices, after which it falls back and nothing is lost).
// Exposed for tests.
std::string LoopDeviceWithError(std::string_view message);

// The text of one /dev/kmsg record ("6,1234,5678,-;text\n...") without
// its prefix and continuation lines.
std::string_view KmsgText(std::string_view record);

// Follows /dev/kmsg from the moment Start() is called and records errors on
// loop devices in `registry` against their backing files.
class KernelLogWatcher {
 public:
  KernelLogWatcher(HealthRegistry& registry, LoopDevices& loops) : registry_(registry), loops_(loops) {}
  ~KernelLogWatcher() { Stop(); }

  // Opens /dev/kmsg (at its end) and starts the reading thread. Logs and
  // does nothing when the log cannot be read (no CAP_SYSLOG): the other
  // sources still work.
  void Start();
  void Stop();

  // One record, as the thread handles it (tests).
  void Handle(std::string_view record);

 private:
  void Loop();

  HealthRegistry& registry_;
  LoopDevices& loops_;
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// ext4's count of errors on `device` (/dev/loop3 → /sys/fs/ext4/loop3/
// errors_count), 0 when it is not a mounted ext4.
int64_t Ext4ErrorCount(const std::string& device);

// The block device holding the filesystem `path` is on ("/dev/loop3"),
// from stat(2)'s st_dev and /sys/dev/block; "" when there is none.
std::string BlockDeviceOf(const std::string& path);

// "" when an fsync of `dir` succeeds, else why not.
std::string FsyncFailure(const std::string& dir);

}  // namespace berth::driver
