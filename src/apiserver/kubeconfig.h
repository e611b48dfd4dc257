// A client for the API a kubeconfig names (berth's own or a real cluster's).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "http/api_client.h"

namespace berth::apiserver {

// The current context of a kubeconfig: server https://HOST:PORT verified
// against certificate-authority-data (or certificate-authority), a bearer
// token, and the context's namespace.
absl::StatusOr<std::unique_ptr<http::ApiClient>> ApiClientForKubeconfig(const std::string& path);

}  // namespace berth::apiserver
