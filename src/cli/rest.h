// What every berth CLI command needs to talk to the API: REST paths of a
// kind, kubectl's ways of naming objects, paged lists, and server answers
// turned into statuses with kubectl's wording.
//
// Thread-safety: stateless functions; the ApiClient passed in is used from
// the calling thread only.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "api/kinds.h"
#include "http/api_client.h"
#include "nlohmann/json.hpp"

namespace berth::cli {

struct Target {
  std::string namespace_;       // -n; "" = the client's default
  bool all_namespaces = false;  // -A
};

// The namespace `t` names, or the client's default (the kubeconfig's).
std::string NamespaceOf(const http::ApiClient& client, const Target& t);

// `s` without leading and trailing ASCII whitespace.
std::string_view TrimSpace(std::string_view s);
// Percent-encodes all but RFC 3986's unreserved characters.
std::string UrlEscape(std::string_view s);
// "/api/v1/namespaces/NS/persistentvolumeclaims" ("" ns: all namespaces,
// or the cluster-scoped path).
std::string CollectionPath(const api::KindInfo& k, const std::string& ns);
std::string ObjectPath(const api::KindInfo& k, const std::string& ns, const std::string& name);
// "persistentvolumeclaim/data", "storageclass.storage.k8s.io/fast".
std::string TypedName(const api::KindInfo& k, const std::string& name);
// persistentvolumeclaim "data" (what delete prints).
std::string Quoted(const api::KindInfo& k, const std::string& name);
// The kind a user typed (pvc, pv, storageclasses ...); NOT_FOUND with
// kubectl's `the server doesn't have a resource type "foo"` otherwise.
absl::StatusOr<const api::KindInfo*> ResolveKind(std::string_view name);
// An API error answer as a status with kubectl's text:
// `Error from server (NotFound): persistentvolumeclaims "x" not found`.
// 404 → NOT_FOUND, 409 → ABORTED (conflict) or ALREADY_EXISTS,
// 400/422 → INVALID_ARGUMENT, 401/403 → PERMISSION_DENIED, 429/5xx →
// UNAVAILABLE, else INTERNAL.
absl::Status ServerError(const http::ApiResponse& r);
absl::StatusOr<nlohmann::json> ParseBody(const http::ApiResponse& r);
std::string NamespaceFor(const http::ApiClient& client, const Target& t);
// Every page of a collection; `query` is added to each request ("" or
// "labelSelector=..."). `resource_version`, if given and empty, gets the
// list's version (where a watch should start).
absl::StatusOr<std::vector<nlohmann::json>> ListAll(http::ApiClient& client, const std::string& path,
                                                    const std::string& query, std::string* resource_version = nullptr);
// The same pages of 500, each handed to `page` as it arrives (the first even
// when empty); an error `page` returns stops the listing.
absl::Status ListPages(http::ApiClient& client, const std::string& path, const std::string& query,
                       std::string* resource_version,
                       const std::function<absl::Status(std::vector<nlohmann::json> items)>& page);
// GET of one object; its ServerError otherwise.
absl::StatusOr<nlohmann::json> GetObject(http::ApiClient& client, const api::KindInfo& k, const std::string& ns,
                                         const std::string& name);

}  // namespace berth::cli
