// The self-contained pool: an XFS filesystem in an image file, loop-mounted
// at the pool directory (--pool-image FILE --pool-size SIZE). Nothing needs
// preparing on a new machine, and XFS gives reflinks (constant-time
// snapshots and clones) even when the host filesystem has none.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "driver/mount/filesystem.h"
#include "driver/mount/loop.h"
#include "driver/mount/mounter.h"

namespace berth::driver {

// Makes sure `image` is mounted at `pool_dir`:
//  - already mounted there from `image`: nothing to do;
//  - `pool_dir` has some other mount: FAILED_PRECONDITION;
//  - `image` missing: created with `size` bytes (INVALID_ARGUMENT if size is
//    0) and formatted XFS. Fully allocated unless `sparse`: a pool whose
//    image is sparse can run the host filesystem out of space under a
//    volume that was promised it, and the volume's writes then fail as I/O
//    errors (docs/failure-semantics.md). RESOURCE_EXHAUSTED, naming the
//    sizes, when the host filesystem cannot hold the image;
//  - `image` blank (an earlier start died before mkfs): formatted XFS;
//  - `image` holds a filesystem: mounted as it is, never formatted;
//  - `size` larger than the image: the image and its filesystem are grown
//    (the added range allocated unless `sparse`; RESOURCE_EXHAUSTED when the
//    host cannot hold it);
//  - an existing image with holes (made sparse, or punched by a discard:
//    the loop driver serves one, from mkfs or fstrim, by punching the image)
//    and not `sparse`: its holes are allocated; if the host has no room for
//    that, the pool starts anyway (its data stays readable) with a warning,
//    and the pool's capacity counts what the image may still take
//    (Pool::Options::image).
// `image` and `pool_dir` must be canonical absolute paths.
absl::Status EnsurePoolImage(const std::string& image, int64_t size, const std::string& pool_dir, LoopDevices& loops,
                             Mounter& mounter, Formatter& formatter, bool sparse = false);

}  // namespace berth::driver
