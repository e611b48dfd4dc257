#include "client/secrets.h"

#include "absl/strings/str_cat.h"
#include "client/object.h"

namespace berth::client {

absl::StatusOr<SecretData> CsiSecret(apiserver::Api& api, const std::string& ns, const std::string& name,
                                     const std::string& role) {
  if (name.empty()) return SecretData{};
  if (ns.empty()) return absl::InvalidArgumentError(absl::StrCat(role, " \"", name, "\" has no namespace"));
  auto secret = api.Get(K("secrets"), ns, name);
  if (!secret.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot get ", role, " ", ns, "/", name, ": ", secret.status().message()));
  }
  return DecodedSecretData(*secret);
}

absl::StatusOr<SecretData> PvSecret(apiserver::Api& api, const std::optional<api::types::SecretReference>& ref,
                                    std::string_view ref_key) {
  if (!ref) return SecretData{};
  return CsiSecret(api, ref->namespace_, ref->name, absl::StrCat("secret (", std::string(ref_key), ")"));
}

}  // namespace berth::client
