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

}  // namespace

absl::Status EnsurePoolImage(const std::string& image, int64_t size, const std::string& pool_dir, LoopDevices& loops,
                             Mounter& mounter, Formatter& formatter) {
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
    BERTH_RETURN_IF_ERROR(CreateSparseImage(image, size));
    spdlog::info("created pool image {} ({})", image, FormatByteSize(size));
    created = true;
  }
  const bool grow = !created && size > 0 && static_cast<int64_t>(st.st_size) < size;
  if (grow) {
    BERTH_RETURN_IF_ERROR(GrowImage(image, size));
    spdlog::info("grew pool image {} to {}", image, FormatByteSize(size));
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
