// Kubernetes' name rules, with Kubernetes' messages.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace berth::api {

// A lowercase RFC 1123 subdomain (most object names): at most 253
// characters of [a-z0-9.-], each dot-separated part starting and ending
// alphanumeric. INVALID_ARGUMENT with `field` and Kubernetes' wording.
absl::Status ValidateDns1123Subdomain(std::string_view field, std::string_view name);

// A lowercase RFC 1123 label (namespace names): at most 63 characters of
// [a-z0-9-], starting and ending alphanumeric.
absl::Status ValidateDns1123Label(std::string_view field, std::string_view name);

}  // namespace berth::api
