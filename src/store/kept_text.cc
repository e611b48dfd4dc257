#include "store/kept_text.h"

#include <utility>

namespace berth::store {

absl::StatusOr<KeptText::TextPtr> KeptText::Plain() const {
  if (!compressed()) return plain_;
  absl::StatusOr<std::string> text = dict_->Decompress(frame_);
  if (!text.ok()) return text.status();
  return std::make_shared<const std::string>(std::move(*text));
}

void KeptText::SetCompressed(std::string frame, std::shared_ptr<const ZstdDictionary> dict) {
  frame_ = std::move(frame);
  dict_ = std::move(dict);
  plain_.reset();
}

}  // namespace berth::store
