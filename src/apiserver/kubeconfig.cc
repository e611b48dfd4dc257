#include "apiserver/kubeconfig.h"

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "api/codec.h"
#include "common/fs.h"
#include "common/status.h"
#include "common/strings.h"

namespace berth::apiserver {

absl::StatusOr<std::unique_ptr<http::ApiClient>> ApiClientForKubeconfig(const std::string& path) {
  BERTH_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  auto docs = api::DecodeManifests(text);
  if (!docs.ok() || docs->size() != 1) {
    return absl::InvalidArgumentError(StrCat(path, ": not a kubeconfig"));
  }
  const nlohmann::json& cfg = (*docs)[0];
  const std::string current = cfg.value("current-context", "");
  auto named = [&](const char* list, const std::string& name) -> nlohmann::json {
    if (cfg.contains(list) && cfg[list].is_array()) {
      for (const auto& e : cfg[list]) {
        if (e.is_object() && e.value("name", "") == name) return e;
      }
    }
    return nlohmann::json::object();
  };
  nlohmann::json ctx = named("contexts", current).value("context", nlohmann::json::object());
  nlohmann::json cluster = named("clusters", ctx.value("cluster", "")).value("cluster", nlohmann::json::object());
  nlohmann::json user = named("users", ctx.value("user", "")).value("user", nlohmann::json::object());
  const std::string server = cluster.value("server", "");
  constexpr std::string_view kHttp = "https://";
  if (!server.starts_with(kHttp)) {
    return absl::InvalidArgumentError(StrCat(path, ": server \"", server, "\" is not https://host:port"));
  }
  std::string ca_pem;
  if (std::string data = cluster.value("certificate-authority-data", ""); !data.empty()) {
    if (!absl::Base64Unescape(data, &ca_pem)) {
      return absl::InvalidArgumentError(StrCat(path, ": certificate-authority-data is not base64"));
    }
  } else if (std::string file = cluster.value("certificate-authority", ""); !file.empty()) {
    BERTH_ASSIGN_OR_RETURN(ca_pem, ReadFile(file));
  } else {
    return absl::InvalidArgumentError(StrCat(path, ": the cluster has no certificate-authority(-data)"));
  }
  std::string hostport = server.substr(kHttp.size());
  if (size_t slash = hostport.find('/'); slash != std::string::npos) hostport.resize(slash);
  size_t colon = hostport.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(hostport.substr(colon + 1), &port)) {
    return absl::InvalidArgumentError(StrCat(path, ": server \"", server, "\" has no port"));
  }
  auto c = http::ApiClient::ForTcp(hostport.substr(0, colon), port, ca_pem, user.value("token", ""));
  if (std::string ns = ctx.value("namespace", ""); !ns.empty()) c->set_default_namespace(ns);
  return c;
}

}  // namespace berth::apiserver
