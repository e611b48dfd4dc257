#include "cli/rest.h"

#include <cctype>
#include <cstdio>

#include "common/status.h"
#include "common/strings.h"

namespace berth::cli {

using http::ApiClient;
using http::ApiResponse;
using nlohmann::json;

std::string NamespaceOf(const http::ApiClient& client, const Target& t) {
  return t.namespace_.empty() ? client.default_namespace() : t.namespace_;
}

std::string_view TrimSpace(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string UrlEscape(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof(buf), "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

std::string CollectionPath(const api::KindInfo& k, const std::string& ns) {
  std::string base = k.group.empty() ? std::string("/api/v1") : StrCat("/apis/", k.group, "/", k.version);
  if (k.namespaced && !ns.empty()) return StrCat(base, "/namespaces/", UrlEscape(ns), "/", k.resource);
  return StrCat(base, "/", k.resource);
}

std::string ObjectPath(const api::KindInfo& k, const std::string& ns, const std::string& name) {
  return StrCat(CollectionPath(k, ns), "/", UrlEscape(name));
}

std::string TypedName(const api::KindInfo& k, const std::string& name) {
  return k.group.empty() ? StrCat(k.singular, "/", name) : StrCat(k.singular, ".", k.group, "/", name);
}

std::string Quoted(const api::KindInfo& k, const std::string& name) {
  return k.group.empty() ? StrCat(k.singular, " \"", name, "\"") : StrCat(k.singular, ".", k.group, " \"", name, "\"");
}

absl::StatusOr<const api::KindInfo*> ResolveKind(std::string_view name) {
  const api::KindInfo* k = api::FindByUserName(name);
  if (k == nullptr) return absl::NotFoundError(StrCat("the server doesn't have a resource type \"", name, "\""));
  return k;
}

absl::Status ServerError(const ApiResponse& r) {
  std::string reason;
  json body = json::parse(r.body, nullptr, false);
  if (body.is_object() && body.contains("reason") && body["reason"].is_string()) reason = body["reason"];
  std::string msg = http::ErrorMessage(r);
  std::string text = reason.empty() ? msg : StrCat("Error from server (", reason, "): ", msg);
  switch (r.code) {
    case 404:
      return absl::NotFoundError(text);
    case 409:
      return reason == "AlreadyExists" ? absl::AlreadyExistsError(text) : absl::AbortedError(text);
    case 400:
    case 422:
      return absl::InvalidArgumentError(text);
    case 401:
    case 403:
      return absl::PermissionDeniedError(text);
    case 429:
    case 503:
      return absl::UnavailableError(text);
    default:
      return absl::InternalError(text);
  }
}

absl::StatusOr<json> ParseBody(const ApiResponse& r) {
  json body = json::parse(r.body, nullptr, false);
  if (body.is_discarded()) return absl::InternalError("the server's answer is not JSON");
  return body;
}

std::string NamespaceFor(const ApiClient& client, const Target& t) {
  return t.namespace_.empty() ? client.default_namespace() : t.namespace_;
}

absl::Status ListPages(ApiClient& client, const std::string& path, const std::string& query,
                       std::string* resource_version,
                       const std::function<absl::Status(std::vector<json> items)>& page) {
  std::string cont;
  while (true) {
    std::string target = StrCat(path, "?limit=500", query.empty() ? "" : "&", query);
    if (!cont.empty()) target += StrCat("&continue=", UrlEscape(cont));
    BERTH_ASSIGN_OR_RETURN(ApiResponse r, client.Call("GET", target));
    if (r.code != 200) return ServerError(r);
    BERTH_ASSIGN_OR_RETURN(json list, ParseBody(r));
    if (resource_version != nullptr && resource_version->empty()) {
      *resource_version = list["metadata"].value("resourceVersion", "");
    }
    std::vector<json> items;
    items.reserve(list["items"].size());
    for (auto& item : list["items"]) items.push_back(std::move(item));
    BERTH_RETURN_IF_ERROR(page(std::move(items)));
    cont = list["metadata"].value("continue", "");
    if (cont.empty()) return absl::OkStatus();
  }
}

absl::StatusOr<std::vector<json>> ListAll(ApiClient& client, const std::string& path, const std::string& query,
                                          std::string* resource_version) {
  std::vector<json> all;
  BERTH_RETURN_IF_ERROR(ListPages(client, path, query, resource_version, [&](std::vector<json> items) {
    for (auto& item : items) all.push_back(std::move(item));
    return absl::OkStatus();
  }));
  return all;
}

absl::StatusOr<json> GetObject(ApiClient& client, const api::KindInfo& k, const std::string& ns,
                               const std::string& name) {
  BERTH_ASSIGN_OR_RETURN(ApiResponse r, client.Call("GET", ObjectPath(k, ns, name)));
  if (r.code != 200) return ServerError(r);
  return ParseBody(r);
}

}  // namespace berth::cli
