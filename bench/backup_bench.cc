// Backup repository figures (src/backup/): a sparse volume image with data
// in three quarters of it (half random, half compressible text), then
//   1. a full backup given the allocated ranges (SEEK_DATA/SEEK_HOLE);
//   2. --percent of the volume rewritten in whole 1 MiB blocks at random
//      (clustered writes: a database's pages, a log), and an incremental
//      backup given just the changed ranges over backup 1;
//   3. --percent of the volume's 4 KiB blocks rewritten at random places
//      (scattered writes, as bench/snapshot_metadata_bench), and an
//      incremental backup given just those ranges over backup 2;
//   4. a full read-and-dedup backup: every range, no base (a driver without
//      changed-block tracking);
// then Verify of everything and a restore of backup 3 (base slices and
// packed blocks) into a new file, compared with the source. Page caches are
// dropped before each backup so reads come from the disk. Time, bytes read,
// bytes added (chunks, compressed) and the repository's growth on disk
// (chunks, manifest and file system overhead) per step.
//
//   build/release/bench/backup_bench [--size-gib N] [--percent P] [--dir D] [--zstd-level L]
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "backup/repository.h"
#include "common/fd.h"

namespace {

using berth::Fd;
using berth::backup::ByteRange;
using berth::backup::Repository;
using berth::backup::VolumeSource;
using berth::backup::VolumeStats;
using Clock = std::chrono::steady_clock;

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kBlock = 4096;

double Secs(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
double MiB(int64_t b) { return static_cast<double>(b) / static_cast<double>(kMiB); }

void Check(const absl::Status& st, const char* what) {
  if (!st.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, st.ToString().c_str());
    std::exit(1);
  }
}

void PwriteAll(int fd, const std::string& data, int64_t offset) {
  if (::pwrite(fd, data.data(), data.size(), offset) != static_cast<ssize_t>(data.size())) {
    std::perror("pwrite");
    std::exit(1);
  }
}

void FillRandom(std::string& buf, std::mt19937_64& gen) {
  for (size_t i = 0; i + 8 <= buf.size(); i += 8) {
    const uint64_t v = gen();
    std::memcpy(buf.data() + i, &v, 8);
  }
}

// Text that compresses about 3-4x, like logs: a random line number and
// level in a fixed frame.
void FillText(std::string& buf, std::mt19937_64& gen) {
  static const char* kLevels[] = {"INFO", "WARN", "DEBUG", "ERROR"};
  size_t pos = 0;
  while (pos < buf.size()) {
    char line[128];
    const int n = std::snprintf(
        line, sizeof(line), "2024-05-%02d %s request %llu served in %llu us by worker %llu\n",
        static_cast<int>(gen() % 28 + 1), kLevels[gen() % 4], static_cast<unsigned long long>(gen() % 100000000),
        static_cast<unsigned long long>(gen() % 100000), static_cast<unsigned long long>(gen() % 64));
    const size_t take = std::min(buf.size() - pos, static_cast<size_t>(n));
    std::memcpy(buf.data() + pos, line, take);
    pos += take;
  }
}

std::vector<ByteRange> Allocated(int fd, int64_t size) {
  std::vector<ByteRange> out;
  for (off_t pos = 0; pos < size;) {
    const off_t data = ::lseek(fd, pos, SEEK_DATA);
    if (data < 0) break;
    const off_t hole = ::lseek(fd, data, SEEK_HOLE);
    out.push_back({data, hole - data});
    pos = hole;
  }
  return out;
}

void DropCache(int fd) {
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
}

struct Step {
  VolumeStats stats;
  double secs = 0;
  int64_t grown = 0;  // the repository's growth on disk
};

// Bytes allocated to the files under `dir`.
int64_t DiskUsage(const std::string& dir) {
  int64_t total = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    struct stat st {};
    if (::lstat(e.path().c_str(), &st) == 0) total += st.st_blocks * 512;
  }
  return total;
}

Step RunBackup(Repository& repo, const std::string& name, const std::string& image, int64_t size,
               std::vector<ByteRange> ranges, const std::string& base) {
  Fd fd(::open(image.c_str(), O_RDONLY | O_CLOEXEC));
  DropCache(fd.get());
  std::optional<berth::backup::Manifest> base_manifest;
  if (!base.empty()) {
    auto m = repo.ReadManifest(base);
    Check(m.status(), "ReadManifest");
    base_manifest = std::move(*m);
  }
  const int64_t before = DiskUsage(repo.root());
  const auto start = Clock::now();
  auto writer = repo.StartBackup(name);
  Check(writer.status(), "StartBackup");
  VolumeSource src;
  src.name = "default/data";
  src.fd = fd.get();
  src.size_bytes = size;
  src.ranges = std::move(ranges);
  src.base = base_manifest ? &*base_manifest : nullptr;
  auto stats = (*writer)->AddVolume(src);
  Check(stats.status(), "AddVolume");
  Check((*writer)->Commit().status(), "Commit");
  const double secs = Secs(Clock::now() - start);
  return {*stats, secs, DiskUsage(repo.root()) - before};
}

void Print(const char* what, const Step& s, int64_t size, const Step* first) {
  std::printf(
      "%-44s %7.2f s  read %8.1f MiB (%lld whole chunks, %lld runs of blocks)  added %8.1f MiB in %5lld chunks;"
      " repository grew %8.1f MiB (%5.2f %% of volume)",
      what, s.secs, MiB(s.stats.bytes_read), static_cast<long long>(s.stats.chunks_read),
      static_cast<long long>(s.stats.pieces_read), MiB(s.stats.bytes_added),
      static_cast<long long>(s.stats.chunks_added), MiB(s.grown),
      100.0 * static_cast<double>(s.grown) / static_cast<double>(size));
  if (first != nullptr) std::printf("  time %.3f of the first", s.secs / first->secs);
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  int64_t size_gib = 4;
  double percent = 1.0;
  std::string parent = std::filesystem::temp_directory_path().string();
  int level = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--size-gib") == 0) size_gib = std::atoll(argv[i + 1]);
    if (std::strcmp(argv[i], "--percent") == 0) percent = std::atof(argv[i + 1]);
    if (std::strcmp(argv[i], "--dir") == 0) parent = argv[i + 1];
    if (std::strcmp(argv[i], "--zstd-level") == 0) level = std::atoi(argv[i + 1]);
  }
  std::string tmpl = parent + "/berth-backup-bench-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  const std::string dir = tmpl;
  const std::string image = dir + "/volume.img";
  const int64_t size = size_gib << 30;
  const int64_t mibs = size / kMiB;
  std::mt19937_64 gen(42);

  // Data in three of every four 64 MiB regions; 1 MiB random, 1 MiB text.
  {
    Fd fd(::open(image.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    if (::ftruncate(fd.get(), size) != 0) return 1;
    std::string buf(kMiB, '\0');
    for (int64_t m = 0; m < mibs; ++m) {
      if ((m / 64) % 4 == 3) continue;
      if (m % 2 == 0) {
        FillRandom(buf, gen);
      } else {
        FillText(buf, gen);
      }
      PwriteAll(fd.get(), buf, m * kMiB);
    }
    ::fsync(fd.get());
  }
  Fd probe(::open(image.c_str(), O_RDONLY | O_CLOEXEC));
  const std::vector<ByteRange> allocated = Allocated(probe.get(), size);
  int64_t allocated_bytes = 0;
  for (const auto& r : allocated) allocated_bytes += r.length;
  std::printf("volume: %lld GiB, %.0f MiB allocated in %zu ranges; chunk size %lld KiB, zstd level %d; %s\n",
              static_cast<long long>(size_gib), MiB(allocated_bytes), allocated.size(),
              static_cast<long long>(berth::backup::kDefaultChunkSize / 1024), level, dir.c_str());

  berth::backup::RepositoryOptions options;
  options.zstd_level = level;
  auto repo = Repository::Create(dir + "/repo", options);
  Check(repo.status(), "Create");

  const Step full = RunBackup(**repo, "full", image, size, allocated, "");
  Print("1. full backup, allocated ranges", full, size, nullptr);

  // 2. Clustered: percent % of the volume in whole 1 MiB blocks.
  std::vector<ByteRange> changed;
  {
    Fd fd(::open(image.c_str(), O_WRONLY | O_CLOEXEC));
    std::string buf(kMiB, '\0');
    const int64_t n = static_cast<int64_t>(static_cast<double>(mibs) * percent / 100.0);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t m = static_cast<int64_t>(gen() % static_cast<uint64_t>(mibs));
      FillRandom(buf, gen);
      PwriteAll(fd.get(), buf, m * kMiB);
      changed.push_back({m * kMiB, kMiB});
    }
    ::fsync(fd.get());
  }
  const Step clustered = RunBackup(**repo, "inc-clustered", image, size, changed, "full");
  Print("2. incremental, 1 % rewritten in 1 MiB blocks", clustered, size, &full);

  // 3. Scattered: percent % of the 4 KiB blocks, each at a random place.
  changed.clear();
  {
    Fd fd(::open(image.c_str(), O_WRONLY | O_CLOEXEC));
    std::string buf(kBlock, '\0');
    const int64_t blocks = size / kBlock;
    const int64_t n = static_cast<int64_t>(static_cast<double>(blocks) * percent / 100.0);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t b = static_cast<int64_t>(gen() % static_cast<uint64_t>(blocks));
      FillRandom(buf, gen);
      PwriteAll(fd.get(), buf, b * kBlock);
      changed.push_back({b * kBlock, kBlock});
    }
    ::fsync(fd.get());
  }
  const Step scattered = RunBackup(**repo, "inc-scattered", image, size, changed, "inc-clustered");
  Print("3. incremental, 1 % of 4 KiB blocks scattered", scattered, size, &full);

  const Step dedup = RunBackup(**repo, "full-dedup", image, size, {{0, size}}, "");
  Print("4. full read-and-dedup (all ranges, no base)", dedup, size, &full);

  auto start = Clock::now();
  auto report = (*repo)->Verify();
  Check(report.status(), "Verify");
  std::printf("verify of 4 backups: %.2f s, %lld chunks, %.0f MiB, %s\n", Secs(Clock::now() - start),
              static_cast<long long>(report->chunks_checked), MiB(report->bytes_checked),
              report->ok() ? "clean" : report->Describe().c_str());

  const std::string target = dir + "/restored.img";
  start = Clock::now();
  auto restored = (*repo)->RestoreVolume("inc-scattered", "default/data", target);
  Check(restored.status(), "RestoreVolume");
  const double restore_secs = Secs(Clock::now() - start);
  bool equal = true;
  {
    Fd a(::open(image.c_str(), O_RDONLY | O_CLOEXEC)), b(::open(target.c_str(), O_RDONLY | O_CLOEXEC));
    std::string x(kMiB, '\0'), y(kMiB, '\0');
    for (int64_t off = 0; off < size && equal; off += kMiB) {
      equal = ::pread(a.get(), x.data(), kMiB, off) == kMiB && ::pread(b.get(), y.data(), kMiB, off) == kMiB && x == y;
    }
  }
  struct stat st {};
  ::stat(target.c_str(), &st);
  std::printf(
      "restore of backup 3: %.2f s, %.0f MiB written from %lld chunks, %.0f MiB allocated in the target, "
      "content %s\n",
      restore_secs, MiB(restored->bytes_written), static_cast<long long>(restored->chunks_read),
      MiB(st.st_blocks * 512), equal ? "equal" : "DIFFERENT");

  std::filesystem::remove_all(dir);
  return equal && report->ok() ? 0 : 1;
}
