// What the provisioner's files share (provisioner.cc: the claims;
// provisioner_volumes.cc: the volumes; provisioner_request.cc: the
// CreateVolume request). Not for other users.
#pragma once

#include <string>

#include "api/types/meta.h"
#include "api/types/storage.h"
#include "client/capability.h"  // kReservedPrefix
#include "common/strings.h"

namespace berth::controllers::provisioner_internal {

// ${pvc.name}, ${pvc.namespace}, ${pv.name} in secret references
// (`pv_name` "": the name a provisioned volume gets, pvc-<uid>).
inline std::string Expand(std::string text, const api::types::ObjectMeta& claim, const std::string& pv_name = "") {
  auto replace = [&](const std::string& from, const std::string& to) {
    for (size_t pos; (pos = text.find(from)) != std::string::npos;) text.replace(pos, from.size(), to);
  };
  replace("${pvc.name}", claim.name);
  replace("${pvc.namespace}", claim.namespace_);
  replace("${pv.name}", pv_name.empty() ? StrCat("pvc-", claim.uid) : pv_name);
  return text;
}

// A class parameter reserved for the sidecars ("fstype" for
// csi.storage.k8s.io/fstype), "" when unset.
inline std::string ReservedParameter(const api::types::StorageClass& sc, const std::string& key) {
  auto it = sc.parameters.find(StrCat(client::kReservedPrefix, key));
  return it == sc.parameters.end() ? "" : it->second;
}

}  // namespace berth::controllers::provisioner_internal
