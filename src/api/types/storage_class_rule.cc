#include "api/types/storage_class_rule.h"

namespace berth::api::types {

std::string StorageClassOf(const nlohmann::json& object) {
  const auto metadata = object.find("metadata");
  if (metadata != object.end() && metadata->is_object()) {
    const auto annotations = metadata->find("annotations");
    if (annotations != metadata->end() && annotations->is_object()) {
      const auto beta = annotations->find(kBetaStorageClassAnnotation);
      if (beta != annotations->end() && beta->is_string()) return beta->get<std::string>();
    }
  }
  const auto spec = object.find("spec");
  if (spec == object.end() || !spec->is_object()) return "";
  const auto name = spec->find("storageClassName");
  return name != spec->end() && name->is_string() ? name->get<std::string>() : "";
}

}  // namespace berth::api::types
