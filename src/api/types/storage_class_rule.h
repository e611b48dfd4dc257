// The rule that names a PersistentVolumeClaim's or PersistentVolume's
// storage class, as upstream's GetPersistentVolume{,Claim}Class read it: the
// beta annotation volume.beta.kubernetes.io/storage-class when present, else
// spec.storageClassName.
//
// Kept apart from core.h so code that reads classes off JSON
// (client/object.h and everything including it) does not compile the typed
// views' templates. The typed forms, ClaimClass and VolumeClass, are in
// core.h and follow the same rule.
//
// Thread-safety: stateless.
#pragma once

#include <string>

#include "nlohmann/json.hpp"

namespace berth::api::types {

inline constexpr char kBetaStorageClassAnnotation[] = "volume.beta.kubernetes.io/storage-class";

// A claim's or volume's class from its JSON ("" when neither is set, or is
// not a string).
std::string StorageClassOf(const nlohmann::json& claim_or_volume);

}  // namespace berth::api::types
