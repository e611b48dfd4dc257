// In-memory test doubles for the kernel interfaces berth-csi uses, so the
// services' decisions (never reformat, freeze around clones, refuse busy
// objects) can be tested without root. The real implementations are tested
// for real in tests/integration.
#pragma once

#include <sys/stat.h>

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "common/strings.h"
#include "driver/mount/filesystem.h"
#include "driver/mount/loop.h"
#include "driver/mount/mounter.h"

namespace berth::driver::testing {

// Devices are matched to images by the image file's identity, as the real
// ones are; a device whose image was removed or replaced reports its backing
// file as deleted.
class FakeLoopDevices final : public LoopDevices {
 public:
  // LoopDevices
  absl::StatusOr<std::vector<LoopInfo>> List() override {
    std::lock_guard<std::mutex> l(mu_);
    std::vector<LoopInfo> out;
    for (const auto& [dev, b] : devices_) {
      auto now = IdentifyFile(b.image);
      out.push_back({dev, b.id, !now.ok() || *now != b.id, b.image, false});
    }
    return out;
  }
  absl::StatusOr<std::unique_ptr<LoopHandle>> Attach(const std::string& image, bool) override {
    auto id = IdentifyFile(image);
    if (!id.ok()) return id.status();
    std::lock_guard<std::mutex> l(mu_);
    std::string dev;
    for (const auto& [d, b] : devices_) {
      if (b.id == *id) dev = d;
    }
    if (dev.empty()) {
      dev = StrCat("/dev/loop", 1000 + next_++);
      devices_[dev] = {image, *id};
    }
    return std::unique_ptr<LoopHandle>(new Handle(dev));
  }
  absl::Status Detach(const std::string& device) override {
    std::lock_guard<std::mutex> l(mu_);
    devices_.erase(device);
    return absl::OkStatus();
  }
  absl::Status RefreshCapacity(const std::string&) override { return absl::OkStatus(); }
  absl::StatusOr<int64_t> Size(const std::string& device) override {
    std::lock_guard<std::mutex> l(mu_);
    struct stat st {};
    if (::stat(devices_[device].image.c_str(), &st) != 0) return absl::NotFoundError(device);
    return static_cast<int64_t>(st.st_size);
  }
  std::string ImageOf(const std::string& device) {
    std::lock_guard<std::mutex> l(mu_);
    return devices_[device].image;
  }

 private:
  class Handle final : public LoopHandle {
   public:
    explicit Handle(std::string d) : d_(std::move(d)) {}
    const std::string& device() const override { return d_; }

   private:
    std::string d_;
  };
  struct Backing {
    std::string image;  // the path it was attached by
    FileId id;
  };
  std::mutex mu_;
  std::map<std::string, Backing> devices_;  // device -> backing file
  int next_ = 0;
};

class FakeMounter final : public Mounter {
 public:
  // Mounter
  absl::StatusOr<std::vector<MountEntry>> List() override {
    std::lock_guard<std::mutex> l(mu_);
    return mounts_;
  }
  absl::Status Mount(const std::string& source, const std::string& target, const std::string& fs_type,
                     const std::vector<std::string>& flags) override {
    std::lock_guard<std::mutex> l(mu_);
    MountEntry e{source, target, fs_type, "/", "rw", 7, static_cast<unsigned>(++minor_)};
    for (const auto& f : flags) {
      if (f == "ro") e.options = "ro";
    }
    mounts_.push_back(e);
    return absl::OkStatus();
  }
  absl::Status BindMount(const std::string& source, const std::string& target, bool read_only) override {
    std::lock_guard<std::mutex> l(mu_);
    MountEntry e{source, target, "bind", "/", read_only ? "ro" : "rw", 7, 0};
    for (const auto& m : mounts_) {
      if (m.target == source) {
        e.minor = m.minor;
        e.source = m.source;
      }
    }
    mounts_.push_back(e);
    return absl::OkStatus();
  }
  absl::Status Unmount(const std::string& target) override {
    std::lock_guard<std::mutex> l(mu_);
    for (auto it = mounts_.rbegin(); it != mounts_.rend(); ++it) {
      if (it->target == target) {
        mounts_.erase(std::next(it).base());
        break;
      }
    }
    return absl::OkStatus();
  }

 private:
  std::mutex mu_;
  std::vector<MountEntry> mounts_;
  int minor_ = 0;
};

// Filesystems live with images, as on a real disk.
class FakeFormatter final : public Formatter {
 public:
  explicit FakeFormatter(FakeLoopDevices& loops) : loops_(loops) {}

  // Formatter
  absl::StatusOr<std::string> Detect(const std::string& device) override {
    std::lock_guard<std::mutex> l(mu_);
    return fs_[loops_.ImageOf(device)];
  }
  absl::Status Mkfs(const std::string& device, const std::string& fs_type) override {
    if (on_mkfs) on_mkfs();
    std::lock_guard<std::mutex> l(mu_);
    ++mkfs_calls;
    fs_[loops_.ImageOf(device)] = fs_type;
    return absl::OkStatus();
  }
  absl::Status Grow(const std::string&, const std::string&, const std::string&) override {
    ++grow_calls;
    return absl::OkStatus();
  }
  void SetFilesystem(const std::string& image, const std::string& fs) {
    std::lock_guard<std::mutex> l(mu_);
    fs_[image] = fs;
  }

  std::atomic<int> mkfs_calls{0};
  std::atomic<int> grow_calls{0};
  std::function<void()> on_mkfs;

 private:
  FakeLoopDevices& loops_;
  std::mutex mu_;
  std::map<std::string, std::string> fs_;  // image -> filesystem
};

class FakeFreezer final : public Freezer {
 public:
  // Freezer
  absl::Status Freeze(const std::string& p) override {
    std::lock_guard<std::mutex> l(mu_);
    calls.push_back("freeze " + p);
    return absl::OkStatus();
  }
  absl::Status Thaw(const std::string& p) override {
    std::lock_guard<std::mutex> l(mu_);
    calls.push_back("thaw " + p);
    return absl::OkStatus();
  }
  std::vector<std::string> calls;

 private:
  std::mutex mu_;
};

}  // namespace berth::driver::testing
