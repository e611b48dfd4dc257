// zstd for berth's own uses: per-thread contexts (the backup repository's
// chunks) and dictionaries for many small, alike texts (the store's objects
// at rest).
//
// A dictionary trained on a resource's own objects is what makes small
// texts compress: a bound claim's 1.1 KiB of JSON is ~70 bytes with one and
// ~500 without, as a lone object repeats little of itself (zstd's
// dictionary builder, ZDICT_trainFromBuffer, from 1,000 of them).
//
//   auto dict = ZstdDictionary::Train(samples);  // null: zstd could not
//   std::string frame = dict->Compress(text);
//   absl::StatusOr<std::string> back = dict->Decompress(frame);
//
// Thread-safety: a ZstdDictionary is immutable and thread-safe.
#pragma once

#include <zstd.h>

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace berth {

// One compression and one decompression context per thread: a context
// holds up to megabytes of tables, too many to allocate per call. Made on
// first use; freed when the thread goes idle (its ReleaseThreadMemory,
// common/memory.h), so a worker that once read a compressed object does not
// keep one for good. The pointer is valid until then.
ZSTD_CCtx* ThreadZstdCCtx();
ZSTD_DCtx* ThreadZstdDCtx();
// What the calling thread's contexts hold now, in bytes (tests).
size_t ThreadZstdContextBytes();

class ZstdDictionary {
 public:
  // Samples fewer than this train nothing useful.
  static constexpr size_t kMinSamples = 64;
  // The dictionary's size at most: 16 KiB holds the keys, annotations and
  // values a kind's objects share (more gains little on objects of ~1 KiB).
  static constexpr size_t kCapacity = 16 << 10;

  // A dictionary trained on `samples`; null when there are too few or zstd
  // cannot train on them (e.g. all the same).
  static std::shared_ptr<const ZstdDictionary> Train(const std::vector<std::string_view>& samples, int level = 3);
  ~ZstdDictionary();
  ZstdDictionary(const ZstdDictionary&) = delete;
  ZstdDictionary& operator=(const ZstdDictionary&) = delete;

  // One zstd frame with its content size (no checksum: the frames live in
  // memory only, beside a durable plain copy). Makes the compression tables
  // if they were released.
  std::string Compress(std::string_view text) const;
  // Frees the compression tables (~400 KiB at level 3 for a full
  // dictionary) until the next Compress makes them again (in ~0.1 ms): for
  // a holder that compresses in passes, at the end of each, as the frames
  // are decompressed without them. A Compress under way keeps its tables.
  void ReleaseCompressor() const;
  // What the compression tables hold now, in bytes; 0 when released (tests).
  size_t CompressorBytes() const;
  // DATA_LOSS if `frame` is not one of this dictionary's frames.
  absl::StatusOr<std::string> Decompress(std::string_view frame) const;
  size_t size() const { return dict_.size(); }

 private:
  ZstdDictionary(std::string dict, int level);
  std::shared_ptr<ZSTD_CDict> Compressor() const;
  const std::string dict_;
  const int level_;
  mutable absl::Mutex mu_;
  mutable std::shared_ptr<ZSTD_CDict> cdict_ ABSL_GUARDED_BY(mu_);
  ZSTD_DDict* const ddict_;
};

// At most one dictionary for a growing set of alike texts (a resource's
// objects): trained once there are ZstdDictionary::kMinSamples, on up to
// kMaxSamples spread over them; when zstd cannot train on them, tried
// again once there are twice as many. Not thread-safe.
class ZstdDictionaryTrainer {
 public:
  static constexpr size_t kMaxSamples = 1000;  // ~1 MiB of claims: tens of ms, once
  // The dictionary, trained now from `count` texts (`text(i)`, valid during
  // the call) if there is none yet and it is due; null without one.
  std::shared_ptr<const ZstdDictionary> Get(size_t count, const std::function<std::string_view(size_t)>& text);
  const std::shared_ptr<const ZstdDictionary>& dictionary() const { return dictionary_; }

 private:
  std::shared_ptr<const ZstdDictionary> dictionary_;
  size_t tried_ = 0;  // texts there were when zstd could not train
};

}  // namespace berth
