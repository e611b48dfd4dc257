// An object's JSON text as the store keeps it in memory (its object cache
// and watch history): plain and shared with the events in flight, or, once
// the writes stop, one zstd frame made with a dictionary of its resource
// (common/zstd.h): a bound claim's 1.1 KiB is then ~70 bytes.
//
// Thread-safety: none; the store guards each one with the lock of the
// cache or the history holding it.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/zstd.h"

namespace berth::store {

class KeptText {
 public:
  using TextPtr = std::shared_ptr<const std::string>;
  KeptText() = default;
  explicit KeptText(TextPtr plain) : plain_(std::move(plain)), size_(plain_ != nullptr ? plain_->size() : 0) {}

  // No text kept (the cache keeps none while it holds the parsed object).
  bool empty() const { return plain_ == nullptr && dict_ == nullptr; }
  // The plain text's size, compressed or not.
  size_t size() const { return size_; }
  // What this holds in memory for the text (a plain text shared with
  // others counted whole).
  size_t held_bytes() const { return compressed() ? frame_.size() : size_; }
  bool compressed() const { return dict_ != nullptr; }
  // The plain text if held (null once compressed).
  const TextPtr& plain() const { return plain_; }
  // The plain text: shared, or decompressed into a new string; DATA_LOSS
  // if the frame does not decompress.
  absl::StatusOr<TextPtr> Plain() const;
  // Lets go of the plain text for `frame`, made from it with `dict`.
  void SetCompressed(std::string frame, std::shared_ptr<const ZstdDictionary> dict);

 private:
  TextPtr plain_;
  std::string frame_;
  std::shared_ptr<const ZstdDictionary> dict_;
  size_t size_ = 0;
};

}  // namespace berth::store
