// The dictionary builder's and the digested dictionary's parameters are
// zstd's experimental API (exported by Debian's libzstd 1.5.4, which berth
// builds and runs against; docs/dependencies.md).
#define ZDICT_STATIC_LINKING_ONLY
#define ZSTD_STATIC_LINKING_ONLY
#include "common/zstd.h"

#include <zdict.h>

#include <algorithm>

#include "common/memory.h"
#include "common/strings.h"

namespace berth {
namespace {

struct CCtxDeleter {
  void operator()(ZSTD_CCtx* c) const { ZSTD_freeCCtx(c); }
};
struct DCtxDeleter {
  void operator()(ZSTD_DCtx* c) const { ZSTD_freeDCtx(c); }
};

// Frames larger than this are refused before allocating (an object's text
// is bounded by the API server's request limit, far below).
constexpr unsigned long long kMaxContent = 64ull << 20;

}  // namespace

namespace {

// The calling thread's contexts, made on first use and freed by the
// thread's next ReleaseThreadMemory (common/memory.h), when it goes idle.
struct ThreadContexts {
  std::unique_ptr<ZSTD_CCtx, CCtxDeleter> cctx;
  std::unique_ptr<ZSTD_DCtx, DCtxDeleter> dctx;
};
thread_local ThreadContexts thread_contexts;
// Whether this thread has touched `thread_contexts`. Trivial, so reading it
// costs nothing: the first touch of `thread_contexts` registers its
// destructor, which allocates (glibc's 32-byte entry), and the releaser runs
// on every idle thread — one live block that kept a 52 KiB mimalloc segment
// in each of berth up's ~60 workers that never compress anything.
thread_local bool thread_has_contexts = false;

ThreadContexts& Contexts() {
  thread_has_contexts = true;
  return thread_contexts;
}

void ReleaseThreadContexts() {
  if (!thread_has_contexts) return;
  thread_contexts.cctx.reset();
  thread_contexts.dctx.reset();
}

void RegisterReleaseOnce() {
  static const bool registered = (AddThreadMemoryReleaser(&ReleaseThreadContexts), true);
  (void)registered;
}

}  // namespace

ZSTD_CCtx* ThreadZstdCCtx() {
  ThreadContexts& c = Contexts();
  if (c.cctx == nullptr) {
    RegisterReleaseOnce();
    c.cctx.reset(ZSTD_createCCtx());
  }
  return c.cctx.get();
}

ZSTD_DCtx* ThreadZstdDCtx() {
  ThreadContexts& c = Contexts();
  if (c.dctx == nullptr) {
    RegisterReleaseOnce();
    c.dctx.reset(ZSTD_createDCtx());
  }
  return c.dctx.get();
}

size_t ThreadZstdContextBytes() {
  if (!thread_has_contexts) return 0;
  return ZSTD_sizeof_CCtx(thread_contexts.cctx.get()) + ZSTD_sizeof_DCtx(thread_contexts.dctx.get());
}

std::shared_ptr<const ZstdDictionary> ZstdDictionary::Train(const std::vector<std::string_view>& samples, int level) {
  if (samples.size() < kMinSamples) return nullptr;
  std::string buffer;
  std::vector<size_t> sizes;
  sizes.reserve(samples.size());
  for (std::string_view s : samples) {
    buffer.append(s);
    sizes.push_back(s.size());
  }
  std::string dict(kCapacity, '\0');
  // fastCover, as ZDICT_trainFromBuffer uses, with its frequency table at
  // 2^16 entries instead of 2^20: 6 MiB less while training, the same
  // ratio on objects of ~1 KiB.
  ZDICT_fastCover_params_t params{};
  params.d = 8;
  params.f = 16;
  params.steps = 4;
  params.accel = 1;
  params.zParams.compressionLevel = level;
  const size_t n = ZDICT_optimizeTrainFromBuffer_fastCover(dict.data(), dict.size(), buffer.data(), sizes.data(),
                                                           static_cast<unsigned>(sizes.size()), &params);
  if (ZDICT_isError(n)) return nullptr;
  dict.resize(n);
  std::shared_ptr<ZstdDictionary> out(new ZstdDictionary(std::move(dict), level));
  // The first pass compresses with these tables; made here, a dictionary
  // zstd cannot digest is refused before anything is compressed with it.
  if (out->ddict_ == nullptr || out->Compressor() == nullptr) return nullptr;
  return out;
}

ZstdDictionary::ZstdDictionary(std::string dict, int level)
    : dict_(std::move(dict)), level_(level), ddict_(ZSTD_createDDict_byReference(dict_.data(), dict_.size())) {}

ZstdDictionary::~ZstdDictionary() { ZSTD_freeDDict(ddict_); }

std::shared_ptr<ZSTD_CDict> ZstdDictionary::Compressor() const {
  absl::MutexLock lock(&mu_);
  if (cdict_ == nullptr) {
    // Tables sized for texts of ~1 KiB after the dictionary: ZSTD_createCDict
    // sizes them for any input (768 KiB at level 3, against ~100).
    ZSTD_CDict* made = ZSTD_createCDict_advanced(dict_.data(), dict_.size(), ZSTD_dlm_byRef, ZSTD_dct_auto,
                                                 ZSTD_getCParams(level_, 1024, dict_.size()), ZSTD_defaultCMem);
    if (made == nullptr) return nullptr;
    cdict_.reset(made, [](ZSTD_CDict* c) { ZSTD_freeCDict(c); });
  }
  return cdict_;
}

void ZstdDictionary::ReleaseCompressor() const {
  std::shared_ptr<ZSTD_CDict> released;  // freed outside the lock (or by a Compress under way)
  absl::MutexLock lock(&mu_);
  released.swap(cdict_);
}

size_t ZstdDictionary::CompressorBytes() const {
  absl::MutexLock lock(&mu_);
  return cdict_ == nullptr ? 0 : ZSTD_sizeof_CDict(cdict_.get());
}

std::shared_ptr<const ZstdDictionary> ZstdDictionaryTrainer::Get(size_t count,
                                                                 const std::function<std::string_view(size_t)>& text) {
  if (dictionary_ != nullptr || count < ZstdDictionary::kMinSamples || count < 2 * tried_) return dictionary_;
  std::vector<std::string_view> samples;
  const size_t step = std::max<size_t>(1, count / kMaxSamples);
  for (size_t i = 0; i < count && samples.size() < kMaxSamples; i += step) samples.push_back(text(i));
  dictionary_ = ZstdDictionary::Train(samples);
  if (dictionary_ == nullptr) tried_ = count;
  return dictionary_;
}

std::string ZstdDictionary::Compress(std::string_view text) const {
  const std::shared_ptr<ZSTD_CDict> cdict = Compressor();
  if (cdict == nullptr) return std::string();  // out of memory
  std::string out(ZSTD_compressBound(text.size()), '\0');
  // Frames of a digested dictionary carry the content size and the
  // dictionary's id, no checksum (zstd.h).
  const size_t n =
      ZSTD_compress_usingCDict(ThreadZstdCCtx(), out.data(), out.size(), text.data(), text.size(), cdict.get());
  if (ZSTD_isError(n)) return std::string();  // cannot happen with a bound-sized buffer
  out.resize(n);
  out.shrink_to_fit();
  return out;
}

absl::StatusOr<std::string> ZstdDictionary::Decompress(std::string_view frame) const {
  const unsigned long long size = ZSTD_getFrameContentSize(frame.data(), frame.size());
  if (size == ZSTD_CONTENTSIZE_ERROR || size == ZSTD_CONTENTSIZE_UNKNOWN || size > kMaxContent) {
    return absl::DataLossError("not a zstd frame of known size");
  }
  std::string out(static_cast<size_t>(size), '\0');
  const size_t n =
      ZSTD_decompress_usingDDict(ThreadZstdDCtx(), out.data(), out.size(), frame.data(), frame.size(), ddict_);
  if (ZSTD_isError(n) || n != out.size()) {
    return absl::DataLossError(StrCat("zstd frame: ", ZSTD_isError(n) ? ZSTD_getErrorName(n) : "short"));
  }
  return out;
}

}  // namespace berth
