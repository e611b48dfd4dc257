#include "driver/pool/pool.h"

#include <dirent.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/time/clock.h"
#include "common/fs.h"
#include "common/status.h"
#include "common/strings.h"
#include "common/units.h"
#include "driver/fault.h"
#include "driver/health.h"
#include "driver/pool/image.h"
#include "spdlog/spdlog.h"

namespace berth::driver {
namespace {

constexpr int64_t kMiB = 1 << 20;

// Names of the regular files in `dir` ending in `suffix`, without it.
absl::StatusOr<std::vector<std::string>> Stems(const std::string& dir, std::string_view suffix) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return ErrnoStatus(errno, StrCat("open directory ", dir));
  std::vector<std::string> out;
  while (dirent* e = ::readdir(d)) {
    std::string_view name = e->d_name;
    if (name.size() > suffix.size() && name[0] != '.' && name.ends_with(suffix)) {
      out.emplace_back(name.substr(0, name.size() - suffix.size()));
    }
  }
  ::closedir(d);
  return out;
}

int64_t NowNanos() { return absl::ToUnixNanos(absl::Now()); }

}  // namespace

int64_t RoundUpToMiB(int64_t bytes) { return (bytes + kMiB - 1) / kMiB * kMiB; }

Pool::Pool(Options options) : options_(std::move(options)) {}

std::string Pool::Path(std::string_view sub) const { return StrCat(options_.dir, "/", sub); }

std::string Pool::VolumeImagePath(const std::string& id) const { return StrCat(options_.dir, "/volumes/", id, ".img"); }

std::string Pool::SnapshotImagePath(const std::string& id) const {
  return StrCat(options_.dir, "/snapshots/", id, ".img");
}

absl::StatusOr<std::unique_ptr<Pool>> Pool::Open(const Options& options) {
  if (!(options.overprovision_ratio > 0)) {
    return absl::InvalidArgumentError("overprovision ratio must be positive");
  }
  std::unique_ptr<Pool> pool(new Pool(options));
  for (const char* sub : {"volumes", "snapshots", "groups", "tmp"}) {
    BERTH_RETURN_IF_ERROR(MakeDirs(pool->Path(sub), 0700));
  }
  if (!(options.high_watermark > 0 && options.high_watermark <= 1)) {
    return absl::InvalidArgumentError("high watermark must be in (0, 1]");
  }
  BERTH_RETURN_IF_ERROR(pool->Load());
  BERTH_RETURN_IF_ERROR(pool->MeasureMetadataReserve());
  BERTH_ASSIGN_OR_RETURN(pool->reflink_, ProbeReflink(pool->Path("tmp")));
  spdlog::info(
      "pool {}: reflink {} ({})", options.dir, pool->reflink_ ? "supported" : "not supported",
      pool->reflink_ ? "snapshots and clones share blocks, constant time" : "snapshots and clones copy data, O(data)");
  return pool;
}

absl::Status Pool::Load() {
  // 1. Scratch space: anything there belongs to an interrupted operation.
  {
    const std::string tmp = Path("tmp");
    DIR* d = ::opendir(tmp.c_str());
    if (d != nullptr) {
      while (dirent* e = ::readdir(d)) {
        std::string_view name = e->d_name;
        if (name == "." || name == "..") continue;
        spdlog::warn("pool {}: removing leftover {}/{}", options_.dir, tmp, name);
        ::unlinkat(::dirfd(d), e->d_name, 0);
      }
      ::closedir(d);
    }
  }
  absl::MutexLock lock(&mu_);
  // 2. Records, and images without records (never acknowledged).
  auto load_volume = [this](const std::string& id, const std::string& text)
                         ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    BERTH_ASSIGN_OR_RETURN(VolumeRecord r, VolumeFromJson(text));
    if (r.id != id) return absl::DataLossError(StrCat("record ", id, " names id ", r.id));
    if (r.deleting) {
      spdlog::warn("pool {}: finishing interrupted deletion of volume {}", options_.dir, id);
      BERTH_RETURN_IF_ERROR(RemoveFileDurably(VolumeImagePath(id)));
      return RemoveFileDurably(Path(StrCat("volumes/", id, ".json")));
    }
    volumes_[id] = std::move(r);
    return absl::OkStatus();
  };
  auto load_snapshot = [this](const std::string& id, const std::string& text)
                           ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    BERTH_ASSIGN_OR_RETURN(SnapshotRecord r, SnapshotFromJson(text));
    if (r.id != id) return absl::DataLossError(StrCat("record ", id, " names id ", r.id));
    if (r.deleting) {
      spdlog::warn("pool {}: finishing interrupted deletion of snapshot {}", options_.dir, id);
      BERTH_RETURN_IF_ERROR(RemoveFileDurably(SnapshotImagePath(id)));
      return RemoveFileDurably(Path(StrCat("snapshots/", id, ".json")));
    }
    snapshots_[id] = std::move(r);
    return absl::OkStatus();
  };
  auto load_dir = [this](const std::string& sub, const auto& load, const auto& known)
                      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    const std::string dir = Path(sub);
    BERTH_RETURN_IF_ERROR(RemoveTempFiles(dir).status());
    BERTH_ASSIGN_OR_RETURN(auto record_ids, Stems(dir, ".json"));
    for (const auto& id : record_ids) {
      BERTH_ASSIGN_OR_RETURN(std::string text, ReadFile(StrCat(dir, "/", id, ".json")));
      if (absl::Status st = load(id, text); !st.ok()) {
        return absl::Status(st.code(), StrCat("pool ", options_.dir, ": ", sub, "/", id, ".json: ", st.message()));
      }
    }
    BERTH_ASSIGN_OR_RETURN(auto image_ids, Stems(dir, ".img"));
    for (const auto& id : image_ids) {
      if (!known(id)) {
        spdlog::warn("pool {}: removing {}/{}.img, created but never recorded", options_.dir, sub, id);
        BERTH_RETURN_IF_ERROR(RemoveFileDurably(StrCat(dir, "/", id, ".img")));
      }
    }
    return absl::OkStatus();
  };
  BERTH_RETURN_IF_ERROR(load_dir("volumes", load_volume,
                                 [this](const std::string& id)
                                     ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return volumes_.contains(id); }));
  BERTH_RETURN_IF_ERROR(load_dir("snapshots", load_snapshot,
                                 [this](const std::string& id)
                                     ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return snapshots_.contains(id); }));
  const std::string groups = Path("groups");
  BERTH_RETURN_IF_ERROR(RemoveTempFiles(groups).status());
  BERTH_ASSIGN_OR_RETURN(auto group_ids, Stems(groups, ".json"));
  for (const auto& id : group_ids) {
    BERTH_ASSIGN_OR_RETURN(std::string text, ReadFile(StrCat(groups, "/", id, ".json")));
    BERTH_ASSIGN_OR_RETURN(GroupSnapshotRecord r, GroupSnapshotFromJson(text));
    groups_[id] = std::move(r);
  }
  spdlog::info("pool {}: {} volume(s), {} snapshot(s), {} group snapshot(s)", options_.dir, volumes_.size(),
               snapshots_.size(), groups_.size());
  return absl::OkStatus();
}

bool Pool::Writable() const {
  struct statvfs vfs {};
  if (::statvfs(options_.dir.c_str(), &vfs) != 0) return false;
  if (vfs.f_flag & ST_RDONLY) return false;
  return ::access(Path("tmp").c_str(), W_OK) == 0;
}

absl::Status Pool::MeasureMetadataReserve() {
  struct statvfs vfs {};
  if (::statvfs(options_.dir.c_str(), &vfs) != 0) return ErrnoStatus(errno, StrCat("statvfs ", options_.dir));
  const int64_t total = static_cast<int64_t>(vfs.f_blocks) * static_cast<int64_t>(vfs.f_frsize);
  const int64_t used = static_cast<int64_t>(vfs.f_blocks - vfs.f_bfree) * static_cast<int64_t>(vfs.f_frsize);
  int64_t images = 0;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, v] : volumes_) images += AllocatedBytes(VolumeImagePath(id)).value_or(0);
    for (const auto& [id, s] : snapshots_) images += AllocatedBytes(SnapshotImagePath(id)).value_or(0);
  }
  // What the filesystem uses besides the images: XFS's per-group headers
  // and the space it sets aside for its btrees (2.4 % of a 2 GiB pool, 0.9 %
  // of 20 GiB), or, for a directory pool, everything else on it. Shared
  // (reflinked) blocks count once in `used` but in every image, so the
  // measure can come out low; the floor covers a fresh XFS pool.
  const int64_t measured = std::max<int64_t>(0, used - images) + total / 100;
  const int64_t floor = std::min<int64_t>(total / 40, 64 * kMiB + total / 100);
  metadata_reserve_ = std::min(total, std::max(measured, floor));
  return absl::OkStatus();
}

int64_t Pool::ProvisionedLocked() const {
  int64_t provisioned = reserved_bytes_;
  for (const auto& [id, v] : volumes_) provisioned += v.capacity_bytes;
  for (const auto& [id, s] : snapshots_) provisioned += s.size_bytes;
  return provisioned;
}

absl::StatusOr<Pool::Capacity> Pool::GetCapacity() const {
  struct statvfs vfs {};
  if (::statvfs(options_.dir.c_str(), &vfs) != 0) {
    return ErrnoStatus(errno, StrCat("statvfs ", options_.dir));
  }
  Capacity c;
  c.total_bytes = static_cast<int64_t>(vfs.f_blocks) * static_cast<int64_t>(vfs.f_frsize);
  c.used_bytes = static_cast<int64_t>(vfs.f_blocks - vfs.f_bfree) * static_cast<int64_t>(vfs.f_frsize);
  c.reserved_bytes = metadata_reserve_;
  c.limit_bytes = static_cast<int64_t>(
      std::floor(static_cast<double>(c.total_bytes - c.reserved_bytes) * options_.overprovision_ratio));
  if (!options_.image.empty()) {
    const std::string host_dir = std::filesystem::path(options_.image).parent_path().string();
    BERTH_ASSIGN_OR_RETURN(HostSpace host, StatHost(host_dir));
    BERTH_ASSIGN_OR_RETURN(c.image_bytes, ImageSize(options_.image));
    BERTH_ASSIGN_OR_RETURN(c.image_allocated_bytes, AllocatedBytes(options_.image));
    c.has_host = true;
    c.host_total_bytes = host.total_bytes;
    c.host_free_bytes = host.free_bytes;
  }
  absl::MutexLock lock(&mu_);
  c.provisioned_bytes = ProvisionedLocked();
  c.available_bytes = std::max<int64_t>(0, c.limit_bytes - c.provisioned_bytes);
  const double mark = options_.high_watermark;
  if (c.has_host && c.image_allocated_bytes < c.image_bytes) {
    // Every block the pool filesystem takes beyond those it holds now may
    // land in a hole of the image, and what is provisioned may take up to
    // provisioned + reserve in all.
    const int64_t holes = c.image_bytes - c.image_allocated_bytes;
    const int64_t growth = std::max<int64_t>(0, c.provisioned_bytes + c.reserved_bytes - c.used_bytes);
    c.host_owed_bytes = std::min(holes, growth);
    const int64_t margin = static_cast<int64_t>(static_cast<double>(c.host_total_bytes) * (1 - mark));
    const int64_t room = c.host_free_bytes - c.host_owed_bytes - margin;
    const std::string host_dir = std::filesystem::path(options_.image).parent_path().string();
    if (c.host_free_bytes < c.host_owed_bytes) {
      c.pressure_reason = "HostOvercommitted";
      c.pressure_message =
          StrCat("the pool image ", options_.image, " may still need ", FormatByteSizeApprox(c.host_owed_bytes),
                 " for what is provisioned, but ", host_dir, " has only ", FormatByteSizeApprox(c.host_free_bytes),
                 " free: writes to volumes can fail; free space on the host");
    } else if (room < c.available_bytes) {
      c.available_bytes = std::max<int64_t>(0, room);
      if (room <= 0) {
        c.pressure_reason = "HostNearlyFull";
        c.pressure_message =
            StrCat("the sparse pool image ", options_.image, " is on ", host_dir, ", which has ",
                   FormatByteSizeApprox(c.host_free_bytes), " free of ", FormatByteSizeApprox(c.host_total_bytes), "; ",
                   FormatByteSizeApprox(c.host_owed_bytes), " of it are promised to what is provisioned and ",
                   FormatByteSizeApprox(margin), " are kept free (high watermark ", static_cast<int>(mark * 100), "%)");
      }
    }
  }
  const bool shared_or_over = options_.image.empty() || options_.overprovision_ratio > 1;
  if (c.pressure_reason.empty() && shared_or_over &&
      static_cast<double>(c.used_bytes) >= static_cast<double>(c.total_bytes) * mark) {
    c.pressure_reason = "PoolNearlyFull";
    c.pressure_message = StrCat(
        "pool ", options_.dir, " has ", FormatByteSizeApprox(c.used_bytes), " of ", FormatByteSizeApprox(c.total_bytes),
        " in use, past its high watermark of ", static_cast<int>(mark * 100), "%",
        options_.overprovision_ratio > 1 ? " (overprovisioned: its volumes may not all fit)" : "");
  }
  if (!c.pressure_reason.empty()) c.available_bytes = 0;
  return c;
}

Pool::Health Pool::CheckHealth() const {
  if (!Writable()) return {false, StrCat("pool ", options_.dir, " is not a writable directory")};
  if (std::string failure = FsyncFailure(Path("tmp")); !failure.empty()) {
    return {false, StrCat("pool filesystem at ", options_.dir, " fails writes (", failure,
                          "): it may have shut down after an I/O error")};
  }
  return {true, "pool is healthy"};
}

absl::Status Pool::Reserve(int64_t bytes, std::string_view what) {
  BERTH_ASSIGN_OR_RETURN(Capacity c, GetCapacity());
  if (!c.pressure_reason.empty()) {
    return absl::ResourceExhaustedError(StrCat("pool ", options_.dir, " cannot provision ", FormatByteSizeApprox(bytes),
                                               " for ", what, ": ", c.pressure_message));
  }
  absl::MutexLock lock(&mu_);
  // GetCapacity's figures may be stale by now; recompute under the lock.
  const int64_t provisioned = ProvisionedLocked();
  // The host's room is what it can back beyond what was provisioned then.
  const int64_t host_room = c.available_bytes + c.provisioned_bytes - provisioned;
  if (c.has_host && c.host_owed_bytes > 0 && bytes > host_room) {
    return absl::ResourceExhaustedError(
        StrCat("pool ", options_.dir, " cannot provision ", FormatByteSizeApprox(bytes), " for ", what,
               ": its sparse image ", options_.image, " is on a host filesystem with ",
               FormatByteSizeApprox(c.host_free_bytes), " free of ", FormatByteSizeApprox(c.host_total_bytes),
               ", which can back only ", FormatByteSizeApprox(std::max<int64_t>(0, host_room)), " more"));
  }
  if (provisioned + bytes > c.limit_bytes) {
    return absl::ResourceExhaustedError(StrCat(
        "pool ", options_.dir, " cannot provision ", FormatByteSizeApprox(bytes), " for ", what, ": ",
        FormatByteSizeApprox(provisioned), " of ", FormatByteSizeApprox(c.limit_bytes), " (pool size ",
        FormatByteSizeApprox(c.total_bytes), " less ", FormatByteSizeApprox(c.reserved_bytes),
        " for filesystem metadata, x overprovision ratio ", options_.overprovision_ratio, ") already provisioned, ",
        FormatByteSizeApprox(std::max<int64_t>(0, c.limit_bytes - provisioned)), " left"));
  }
  reserved_bytes_ += bytes;
  return absl::OkStatus();
}

void Pool::Unreserve(int64_t bytes) {
  absl::MutexLock lock(&mu_);
  reserved_bytes_ -= bytes;
}

std::optional<VolumeRecord> Pool::GetVolume(const std::string& id) const {
  absl::MutexLock lock(&mu_);
  auto it = volumes_.find(id);
  if (it == volumes_.end()) return std::nullopt;
  return it->second;
}

std::vector<VolumeRecord> Pool::ListVolumes() const {
  absl::MutexLock lock(&mu_);
  std::vector<VolumeRecord> out;
  for (const auto& [id, v] : volumes_) out.push_back(v);
  return out;
}

std::optional<SnapshotRecord> Pool::GetSnapshot(const std::string& id) const {
  absl::MutexLock lock(&mu_);
  auto it = snapshots_.find(id);
  if (it == snapshots_.end()) return std::nullopt;
  return it->second;
}

std::vector<SnapshotRecord> Pool::ListSnapshots() const {
  absl::MutexLock lock(&mu_);
  std::vector<SnapshotRecord> out;
  for (const auto& [id, s] : snapshots_) out.push_back(s);
  return out;
}

std::optional<GroupSnapshotRecord> Pool::GetGroupSnapshot(const std::string& id) const {
  absl::MutexLock lock(&mu_);
  auto it = groups_.find(id);
  if (it == groups_.end()) return std::nullopt;
  return it->second;
}

absl::StatusOr<VolumeRecord> Pool::CreateVolume(const NewVolume& spec, const Quiesce& quiesce) {
  if (GetVolume(spec.id).has_value()) {
    return absl::AlreadyExistsError(StrCat("volume ", spec.id, " already exists"));
  }
  std::string source_image;
  if (!spec.source_snapshot_id.empty()) {
    if (!GetSnapshot(spec.source_snapshot_id)) {
      return absl::NotFoundError(StrCat("source snapshot ", spec.source_snapshot_id, " not found"));
    }
    source_image = SnapshotImagePath(spec.source_snapshot_id);
  } else if (!spec.source_volume_id.empty()) {
    if (!GetVolume(spec.source_volume_id)) {
      return absl::NotFoundError(StrCat("source volume ", spec.source_volume_id, " not found"));
    }
    source_image = VolumeImagePath(spec.source_volume_id);
  }
  BERTH_RETURN_IF_ERROR(Reserve(spec.capacity_bytes, StrCat("volume ", spec.name)));

  const std::string tmp = Path(StrCat("tmp/", spec.id, ".img"));
  const std::string final_path = VolumeImagePath(spec.id);
  auto fail = [&](absl::Status st) {
    ::unlink(tmp.c_str());
    Unreserve(spec.capacity_bytes);
    return st;
  };
  ::unlink(tmp.c_str());
  absl::Status st;
  if (source_image.empty()) {
    st = CreateSparseImage(tmp, spec.capacity_bytes);
  } else {
    auto clone = [&] { return CopyImage(source_image, tmp, reflink_); };
    st = quiesce ? quiesce(clone) : clone();
    if (st.ok()) st = GrowImage(tmp, spec.capacity_bytes);
  }
  if (!st.ok()) return fail(st);
  BERTH_CRASH_POINT("create-volume/image-in-tmp");
  if (::rename(tmp.c_str(), final_path.c_str()) != 0) {
    return fail(ErrnoStatus(errno, StrCat("rename ", tmp, " to ", final_path)));
  }
  if (st = FsyncDir(Path("volumes")); !st.ok()) return fail(st);
  BERTH_CRASH_POINT("create-volume/image-in-place");

  VolumeRecord r;
  r.id = spec.id;
  r.name = spec.name;
  r.capacity_bytes = spec.capacity_bytes;
  r.access_type = spec.access_type;
  r.fs_type = spec.fs_type;
  r.parameters = spec.parameters;
  r.source_snapshot_id = spec.source_snapshot_id;
  r.source_volume_id = spec.source_volume_id;
  r.created_unix_nanos = NowNanos();
  if (auto s = GetSnapshot(spec.source_snapshot_id); s && !spec.source_snapshot_id.empty()) {
    r.formatted = s->formatted;
  } else if (auto v = GetVolume(spec.source_volume_id); v && !spec.source_volume_id.empty()) {
    r.formatted = v->formatted;
  }
  if (st = WriteFileAtomic(Path(StrCat("volumes/", spec.id, ".json")), ToJson(r)); !st.ok()) {
    ::unlink(final_path.c_str());
    return fail(st);
  }
  BERTH_CRASH_POINT("create-volume/recorded");
  absl::MutexLock lock(&mu_);
  reserved_bytes_ -= spec.capacity_bytes;
  volumes_[r.id] = r;
  return r;
}

absl::Status Pool::DeleteVolume(const std::string& id) {
  std::optional<VolumeRecord> r = GetVolume(id);
  if (!r) return absl::OkStatus();
  r->deleting = true;
  const std::string record_path = Path(StrCat("volumes/", id, ".json"));
  BERTH_RETURN_IF_ERROR(WriteFileAtomic(record_path, ToJson(*r)));
  BERTH_CRASH_POINT("delete-volume/marked");
  BERTH_RETURN_IF_ERROR(RemoveFileDurably(VolumeImagePath(id)));
  BERTH_CRASH_POINT("delete-volume/image-removed");
  BERTH_RETURN_IF_ERROR(RemoveFileDurably(record_path));
  absl::MutexLock lock(&mu_);
  volumes_.erase(id);
  return absl::OkStatus();
}

absl::Status Pool::UpdateVolume(const VolumeRecord& record) {
  if (!GetVolume(record.id)) return absl::NotFoundError(StrCat("volume ", record.id, " not found"));
  BERTH_RETURN_IF_ERROR(WriteFileAtomic(Path(StrCat("volumes/", record.id, ".json")), ToJson(record)));
  absl::MutexLock lock(&mu_);
  volumes_[record.id] = record;
  return absl::OkStatus();
}

absl::StatusOr<VolumeRecord> Pool::ExpandVolume(const std::string& id, int64_t new_capacity) {
  std::optional<VolumeRecord> r = GetVolume(id);
  if (!r) return absl::NotFoundError(StrCat("volume ", id, " not found"));
  if (new_capacity <= r->capacity_bytes) return *r;
  const int64_t delta = new_capacity - r->capacity_bytes;
  BERTH_RETURN_IF_ERROR(Reserve(delta, StrCat("expanding volume ", id)));
  absl::Status st = GrowImage(VolumeImagePath(id), new_capacity);
  if (st.ok()) {
    BERTH_CRASH_POINT("expand-volume/image-grown");
    VolumeRecord updated = *r;
    updated.capacity_bytes = new_capacity;
    st = WriteFileAtomic(Path(StrCat("volumes/", id, ".json")), ToJson(updated));
    if (st.ok()) {
      absl::MutexLock lock(&mu_);
      reserved_bytes_ -= delta;
      volumes_[id] = updated;
      return updated;
    }
  }
  Unreserve(delta);
  return st;
}

absl::StatusOr<SnapshotRecord> Pool::CreateSnapshot(const std::string& id, const std::string& name,
                                                    const std::string& source_volume_id,
                                                    const std::map<std::string, std::string>& params,
                                                    const std::string& group_snapshot_id, const Quiesce& quiesce) {
  if (GetSnapshot(id)) return absl::AlreadyExistsError(StrCat("snapshot ", id, " already exists"));
  std::optional<VolumeRecord> source = GetVolume(source_volume_id);
  if (!source) return absl::NotFoundError(StrCat("source volume ", source_volume_id, " not found"));
  BERTH_RETURN_IF_ERROR(Reserve(source->capacity_bytes, StrCat("snapshot ", name)));

  const std::string tmp = Path(StrCat("tmp/", id, ".img"));
  const std::string final_path = SnapshotImagePath(id);
  auto fail = [&](absl::Status st) {
    ::unlink(tmp.c_str());
    Unreserve(source->capacity_bytes);
    return st;
  };
  ::unlink(tmp.c_str());
  auto clone = [&] { return CopyImage(VolumeImagePath(source_volume_id), tmp, reflink_); };
  absl::Status st = quiesce ? quiesce(clone) : clone();
  if (!st.ok()) return fail(st);
  BERTH_CRASH_POINT("create-snapshot/image-in-tmp");
  if (::rename(tmp.c_str(), final_path.c_str()) != 0) {
    return fail(ErrnoStatus(errno, StrCat("rename ", tmp, " to ", final_path)));
  }
  if (st = FsyncDir(Path("snapshots")); !st.ok()) return fail(st);

  SnapshotRecord r;
  r.id = id;
  r.name = name;
  r.source_volume_id = source_volume_id;
  r.size_bytes = source->capacity_bytes;
  r.access_type = source->access_type;
  r.fs_type = source->fs_type;
  r.parameters = params;
  r.group_snapshot_id = group_snapshot_id;
  r.created_unix_nanos = NowNanos();
  r.formatted = source->formatted;
  if (st = WriteFileAtomic(Path(StrCat("snapshots/", id, ".json")), ToJson(r)); !st.ok()) {
    ::unlink(final_path.c_str());
    return fail(st);
  }
  BERTH_CRASH_POINT("create-snapshot/recorded");
  absl::MutexLock lock(&mu_);
  reserved_bytes_ -= source->capacity_bytes;
  snapshots_[id] = r;
  return r;
}

absl::Status Pool::DeleteSnapshot(const std::string& id) {
  std::optional<SnapshotRecord> r = GetSnapshot(id);
  if (!r) return absl::OkStatus();
  r->deleting = true;
  const std::string record_path = Path(StrCat("snapshots/", id, ".json"));
  BERTH_RETURN_IF_ERROR(WriteFileAtomic(record_path, ToJson(*r)));
  BERTH_CRASH_POINT("delete-snapshot/marked");
  BERTH_RETURN_IF_ERROR(RemoveFileDurably(SnapshotImagePath(id)));
  BERTH_RETURN_IF_ERROR(RemoveFileDurably(record_path));
  absl::MutexLock lock(&mu_);
  snapshots_.erase(id);
  return absl::OkStatus();
}

absl::Status Pool::SaveGroupSnapshot(const GroupSnapshotRecord& record) {
  BERTH_RETURN_IF_ERROR(WriteFileAtomic(Path(StrCat("groups/", record.id, ".json")), ToJson(record)));
  absl::MutexLock lock(&mu_);
  groups_[record.id] = record;
  return absl::OkStatus();
}

absl::Status Pool::DeleteGroupSnapshot(const std::string& id) {
  BERTH_RETURN_IF_ERROR(RemoveFileDurably(Path(StrCat("groups/", id, ".json"))));
  absl::MutexLock lock(&mu_);
  groups_.erase(id);
  return absl::OkStatus();
}

}  // namespace berth::driver
