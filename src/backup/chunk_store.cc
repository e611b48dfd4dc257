#include "backup/chunk_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <cerrno>
#include <memory>
#include <random>

#include "backup/manifest.h"
#include "common/fd.h"
#include "common/fs.h"
#include "common/hash.h"
#include "common/status.h"
#include "common/strings.h"
#include "common/zstd.h"

namespace berth::backup {
namespace {

std::string ChunkTempSuffix() {
  static thread_local std::mt19937_64 gen(std::random_device{}());
  return StrCat(".tmp-", fmt::format("{:016x}", gen()));
}

absl::Status WriteAllTo(int fd, std::string_view data, const std::string& path) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, StrCat("write ", path));
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

}  // namespace

ChunkStore::ChunkStore(std::string dir, int zstd_level) : dir_(std::move(dir)), zstd_level_(zstd_level) {}

absl::Status ChunkStore::CreateLayout(const std::string& dir) {
  BERTH_RETURN_IF_ERROR(MakeDirs(dir));
  for (int i = 0; i < 256; ++i) {
    const std::string sub = StrCat(dir, "/", fmt::format("{:02x}", i));
    if (::mkdir(sub.c_str(), 0750) != 0 && errno != EEXIST) return ErrnoStatus(errno, StrCat("mkdir ", sub));
  }
  return FsyncDir(dir);
}

std::string ChunkStore::DirOf(std::string_view hash) const { return StrCat(dir_, "/", hash.substr(0, 2)); }

std::string ChunkStore::PathOf(std::string_view hash) const {
  return StrCat(dir_, "/", hash.substr(0, 2), "/", hash, ".zst");
}

absl::StatusOr<bool> ChunkStore::Exists(std::string_view hash) const {
  const std::string path = PathOf(hash);
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) return true;
  if (errno == ENOENT) return false;
  return ErrnoStatus(errno, StrCat("stat ", path));
}

absl::StatusOr<ChunkStore::PutResult> ChunkStore::Put(std::string_view content) const {
  if (static_cast<int64_t>(content.size()) > kMaxChunkSize) {
    return absl::InvalidArgumentError(StrCat("chunk of ", content.size(), " bytes exceeds ", kMaxChunkSize));
  }
  PutResult result;
  result.hash = Sha256Hex(content);
  BERTH_ASSIGN_OR_RETURN(const bool exists, Exists(result.hash));
  if (exists) return result;

  ZSTD_CCtx* cctx = ThreadZstdCCtx();
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, zstd_level_);
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
  std::string compressed(ZSTD_compressBound(content.size()), '\0');
  const size_t n = ZSTD_compress2(cctx, compressed.data(), compressed.size(), content.data(), content.size());
  if (ZSTD_isError(n)) return absl::InternalError(StrCat("zstd compression: ", ZSTD_getErrorName(n)));
  compressed.resize(n);

  const std::string path = PathOf(result.hash);
  const std::string tmp = StrCat(DirOf(result.hash), "/.", result.hash, ".zst", ChunkTempSuffix());
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0640));
  if (!fd.ok()) return ErrnoStatus(errno, StrCat("create ", tmp));
  absl::Status st = WriteAllTo(fd.get(), compressed, tmp);
  if (st.ok() && ::fsync(fd.get()) != 0) st = ErrnoStatus(errno, StrCat("fsync ", tmp));
  if (::close(fd.release()) != 0 && st.ok()) st = ErrnoStatus(errno, StrCat("close ", tmp));
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) st = ErrnoStatus(errno, StrCat("rename ", tmp));
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    return st;
  }
  result.added = true;
  result.stored_bytes = static_cast<int64_t>(n);
  return result;
}

absl::StatusOr<std::string> ChunkStore::Get(std::string_view hash, int64_t max_size) const {
  const std::string path = PathOf(hash);
  absl::StatusOr<std::string> compressed = ReadFile(path);
  if (!compressed.ok()) {
    if (absl::IsNotFound(compressed.status())) return absl::NotFoundError(StrCat("chunk ", hash, " is missing"));
    return compressed.status();
  }
  auto corrupt = [&hash](std::string_view why) {
    return absl::DataLossError(StrCat("chunk ", hash, " is corrupt: ", why));
  };
  const unsigned long long size = ZSTD_getFrameContentSize(compressed->data(), compressed->size());
  if (size == ZSTD_CONTENTSIZE_ERROR || size == ZSTD_CONTENTSIZE_UNKNOWN) return corrupt("not a zstd frame");
  if (size > static_cast<unsigned long long>(max_size)) {
    return corrupt(StrCat("claims ", size, " bytes, more than its ", max_size));
  }
  std::string content(size, '\0');
  const size_t n =
      ZSTD_decompressDCtx(ThreadZstdDCtx(), content.data(), content.size(), compressed->data(), compressed->size());
  if (ZSTD_isError(n)) return corrupt(ZSTD_getErrorName(n));
  if (n != size) return corrupt(StrCat("decompressed to ", n, " bytes, its header says ", size));
  if (Sha256Hex(content) != hash) return corrupt("its content does not match its hash");
  return content;
}

absl::Status ChunkStore::SyncDirs(const std::set<std::string>& dirs) {
  for (const std::string& d : dirs) BERTH_RETURN_IF_ERROR(FsyncDir(d));
  return absl::OkStatus();
}

}  // namespace berth::backup
