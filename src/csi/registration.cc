#include "csi/registration.h"

#include <cctype>

#include "common/strings.h"
#include "spdlog/spdlog.h"

namespace berth::csi {

absl::Status CheckDriverName(const std::string& name) {
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(StrCat("driver name \"", name, "\": ", why));
  };
  if (name.empty()) return bad("must not be empty");
  if (name.size() > 63) return bad("longer than 63 characters");
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') {
      return bad("only letters, digits, '-', '_' and '.' are allowed");
    }
  }
  if (!std::isalnum(static_cast<unsigned char>(name.front())) ||
      !std::isalnum(static_cast<unsigned char>(name.back()))) {
    return bad("must begin and end with a letter or digit");
  }
  return absl::OkStatus();
}

std::string RegistrationSocketPath(const std::string& dir, const std::string& driver) {
  return dir + "/" + driver + "-reg.sock";
}

grpc::Status RegistrationService::GetInfo(grpc::ServerContext*, const ::pluginregistration::InfoRequest*,
                                          ::pluginregistration::PluginInfo* resp) {
  resp->set_type(kCsiPluginType);
  resp->set_name(info_.name);
  resp->set_endpoint(info_.endpoint);
  for (const auto& v : info_.versions) resp->add_supported_versions(v);
  return grpc::Status::OK;
}

grpc::Status RegistrationService::NotifyRegistrationStatus(grpc::ServerContext*,
                                                           const ::pluginregistration::RegistrationStatus* req,
                                                           ::pluginregistration::RegistrationStatusResponse*) {
  if (req->plugin_registered()) {
    spdlog::info("registered with the node agent as {}", info_.name);
  } else {
    spdlog::error("the node agent refused to register {}: {}", info_.name, req->error());
  }
  absl::MutexLock lock(&mu_);
  last_ = *req;
  return grpc::Status::OK;
}

std::optional<::pluginregistration::RegistrationStatus> RegistrationService::last_status() const {
  absl::MutexLock lock(&mu_);
  return last_;
}

}  // namespace berth::csi
