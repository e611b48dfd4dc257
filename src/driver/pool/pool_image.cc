#include "driver/pool/pool_image.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <filesystem>

#include "common/fs.h"
#include "common/status.h"
#include "common/strings.h"
#include "common/units.h"
#include "driver/pool/image.h"
#include "spdlog/spdlog.h"

namespace berth::driver {
namespace {

// What backs a mounted device, for messages.
std::string DescribeMountedSource(LoopDevices& loops, const std::string& source) {
  auto all = loops.List();
  if (all.ok()) {
    for (const auto& l : *all) {
      if (l.device != source) continue;
      return StrCat("a loop device backed by inode ", l.backing.ino, " on device ", major(l.backing.dev), ":",
                    minor(l.backing.dev), l.backing_deleted ? " (removed)" : "", " (the kernel names it \"",
                    l.backing_name, "\")");
    }
  }
  return "which is not one of this image's loop devices";
}

// Refuses to take `bytes` more of the filesystem holding `image` when it
// has not that much free, with every size named.
absl::Status CheckHostRoom(const std::string& image, int64_t bytes, std::string_view what) {
  const std::string dir = std::filesystem::path(image).parent_path().string();
  BERTH_ASSIGN_OR_RETURN(HostSpace host, StatHost(dir));
  if (bytes <= host.free_bytes) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      StrCat(what, " needs ", FormatByteSizeApprox(bytes), " but the filesystem holding it (", dir, ") has only ",
             FormatByteSizeApprox(host.free_bytes), " free of ", FormatByteSizeApprox(host.total_bytes),
             ". Free space there, choose a smaller --pool-size, or pass --pool-sparse to take the space only as it is "
             "written (capacity then stays within what that filesystem has free)"));
}

}  // namespace

absl::Status EnsurePoolImage(const std::string& image, int64_t size, const std::string& pool_dir, LoopDevices& loops,
                             Mounter& mounter, Formatter& formatter, bool sparse) {
  BERTH_RETURN_IF_ERROR(MakeDirs(pool_dir, 0700));
  BERTH_ASSIGN_OR_RETURN(auto mounted, mounter.Find(pool_dir));
  BERTH_ASSIGN_OR_RETURN(std::string dev, loops.Find(image));
  if (mounted) {
    if (dev.empty() || mounted->source != dev) {
      return absl::FailedPreconditionError(StrCat(
          "pool directory ", pool_dir, " has ", mounted->source, " mounted, ",
          DescribeMountedSource(loops, mounted->source), "; ",
          dev.empty() ? StrCat(image, " is not attached to any loop device") : StrCat(image, " is attached as ", dev),
          ". Unmount ", pool_dir, " or point --pool-image at the image it holds"));
    }
    spdlog::info("pool image {} is mounted at {}", image, pool_dir);
  }

  struct stat st {};
  bool created = false;
  if (::stat(image.c_str(), &st) != 0) {
    if (errno != ENOENT) return ErrnoStatus(errno, StrCat("stat ", image));
    if (size <= 0) {
      return absl::InvalidArgumentError(
          StrCat("pool image ", image, " does not exist; --pool-size is needed to create it"));
    }
    BERTH_RETURN_IF_ERROR(MakeDirs(std::filesystem::path(image).parent_path().string(), 0700));
    if (sparse) {
      if (absl::Status room = CheckHostRoom(image, size, StrCat("pool image ", image)); !room.ok()) {
        spdlog::warn("{} (sparse by request: the pool's capacity stays within what the host has free)",
                     std::string(room.message()));
      }
      BERTH_RETURN_IF_ERROR(CreateSparseImage(image, size));
    } else {
      BERTH_RETURN_IF_ERROR(CheckHostRoom(image, size, StrCat("pool image ", image)));
      if (absl::Status made = CreateAllocatedImage(image, size); !made.ok()) {
        return absl::Status(made.code(),
                            StrCat(made.message(), " (--pool-sparse takes the space only as it is written)"));
      }
    }
    spdlog::info("created pool image {} ({}, {})", image, FormatByteSizeApprox(size), sparse ? "sparse" : "allocated");
    created = true;
  }
  const bool grow = !created && size > 0 && static_cast<int64_t>(st.st_size) < size;
  if (grow) {
    if (!sparse) {
      BERTH_RETURN_IF_ERROR(CheckHostRoom(image, size - static_cast<int64_t>(st.st_size),
                                          StrCat("growing pool image ", image, " to ", FormatByteSizeApprox(size))));
    }
    BERTH_RETURN_IF_ERROR(GrowImage(image, size, /*allocate=*/!sparse));
    spdlog::info("grew pool image {} to {}", image, FormatByteSizeApprox(size));
  }
  if (!created && !sparse) {
    // Holes: made sparse by an earlier start, or punched by a discard that
    // reached the loop device. Each is a write that may fail later.
    BERTH_ASSIGN_OR_RETURN(int64_t allocated, AllocatedBytes(image));
    BERTH_ASSIGN_OR_RETURN(int64_t apparent, ImageSize(image));
    if (allocated < apparent) {
      if (absl::Status filled = AllocateImage(image); filled.ok()) {
        spdlog::info("allocated the holes of pool image {} ({} were not allocated)", image,
                     FormatByteSizeApprox(apparent - allocated));
      } else {
        spdlog::warn(
            "pool image {}: {} of {} are not allocated and cannot be now ({}); the pool serves its data, "
            "and its capacity counts what the image may still need from the host",
            image, FormatByteSizeApprox(apparent - allocated), FormatByteSizeApprox(apparent),
            std::string(filled.message()));
      }
    }
  }
  if (mounted) {
    if (grow) {
      BERTH_RETURN_IF_ERROR(loops.RefreshCapacity(dev));
      BERTH_RETURN_IF_ERROR(formatter.Grow(dev, pool_dir, mounted->fs_type));
    }
    return absl::OkStatus();
  }

  BERTH_ASSIGN_OR_RETURN(auto loop, loops.Attach(image, /*autoclear=*/true));
  if (grow) BERTH_RETURN_IF_ERROR(loops.RefreshCapacity(loop->device()));
  BERTH_ASSIGN_OR_RETURN(std::string fs, formatter.Detect(loop->device()));
  if (fs.empty()) {
    spdlog::info("formatting pool image {} as XFS (reflink)", image);
    BERTH_RETURN_IF_ERROR(formatter.Mkfs(loop->device(), "xfs"));
    fs = "xfs";
    // mkfs discards the whole device first, and the loop driver serves a
    // discard by punching holes in the image: allocate them again. (Turning
    // discards off on the device would also refuse the write-zeroes the
    // filesystems send, with an error in the kernel log.)
    if (!sparse) BERTH_RETURN_IF_ERROR(AllocateImage(image));
  }
  if (fs != "xfs" && fs != "ext4" && fs != "btrfs") {
    return absl::FailedPreconditionError(
        StrCat("pool image ", image, " holds ", fs, "; refusing to mount or format it"));
  }
  BERTH_RETURN_IF_ERROR(mounter.Mount(loop->device(), pool_dir, fs, {"noatime"}));
  if (grow) BERTH_RETURN_IF_ERROR(formatter.Grow(loop->device(), pool_dir, fs));
  spdlog::info("mounted pool image {} ({}) at {}", image, fs, pool_dir);
  return absl::OkStatus();
}

}  // namespace berth::driver
