// The Secrets a CSI call carries, looked up the one way every caller uses
// (the provisioner, attacher, resizer and snapshotter, and the node agent):
// a reference with an empty name means no secret; a reference to a Secret
// that cannot be read is FAILED_PRECONDITION naming the secret and its role,
// never an empty map (a driver must not be called without the credentials
// the class or PV asked for, as the sidecars and kubelet refuse too).
//
//   BERTH_ASSIGN_OR_RETURN(auto secrets, PvSecret(api, pv.spec.csi->controller_expand_secret_ref,
//                                                  "controllerExpandSecretRef"));
//
// Thread-safety: stateless; `api` must be safe to share.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "api/types/core.h"
#include "apiserver/api.h"
#include "nlohmann/json.hpp"

namespace berth::client {

using SecretData = std::map<std::string, std::string>;

// The decoded data of Secret `ns`/`name`; `role` names it in errors
// ("controller publish secret"). Empty name: no secret. A name without a
// namespace: INVALID_ARGUMENT.
absl::StatusOr<SecretData> CsiSecret(apiserver::Api& api, const std::string& ns, const std::string& name,
                                     const std::string& role);

// The secret one of a PV's spec.csi secret references names (`ref_key`, its
// JSON key, names it in errors); no reference, no secret.
absl::StatusOr<SecretData> PvSecret(apiserver::Api& api, const std::optional<api::types::SecretReference>& ref,
                                    std::string_view ref_key);

}  // namespace berth::client
