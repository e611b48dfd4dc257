// The plugin side of kubelet's plugin registration (pluginregistration v1):
// a CSI driver announces itself to a node agent by serving this on a socket
// in <kubelet-root>/plugins_registry/ — what node-driver-registrar does for
// drivers that cannot, and what berth-csi does itself with
// --registration-dir.
//
//   RegistrationService reg({.name = "local.csi.berth.io",
//                            .endpoint = "/var/lib/kubelet/plugins/local.csi.berth.io/csi.sock"});
//   auto server = CsiServer::Start({.endpoint = RegistrationSocketPath(dir, name)}, {&reg});
//
// Thread-safety: thread-safe.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "pluginregistration/v1/api.grpc.pb.h"

namespace berth::csi {

inline constexpr char kCsiPluginType[] = "CSIPlugin";

// The CSI spec's rule for a plugin name (GetPluginInfoResponse.name): at
// most 63 characters, alphanumerics, '-', '_' and '.', beginning and ending
// with an alphanumeric. Names that pass are safe as one path component.
absl::Status CheckDriverName(const std::string& name);

// <dir>/<driver>-reg.sock, the name node-driver-registrar uses.
std::string RegistrationSocketPath(const std::string& dir, const std::string& driver);

class RegistrationService final : public ::pluginregistration::Registration::Service {
 public:
  struct Info {
    std::string name;      // the CSI driver name
    std::string endpoint;  // the driver's CSI socket (absolute path)
    std::vector<std::string> versions = {"1.0.0"};
  };
  explicit RegistrationService(Info info) : info_(std::move(info)) {}

  grpc::Status GetInfo(grpc::ServerContext* ctx, const ::pluginregistration::InfoRequest* req,
                       ::pluginregistration::PluginInfo* resp) override;
  grpc::Status NotifyRegistrationStatus(grpc::ServerContext* ctx, const ::pluginregistration::RegistrationStatus* req,
                                        ::pluginregistration::RegistrationStatusResponse* resp) override;

  // The last verdict the node agent sent (nullopt before any).
  std::optional<::pluginregistration::RegistrationStatus> last_status() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const Info info_;
  mutable absl::Mutex mu_;
  std::optional<::pluginregistration::RegistrationStatus> last_ ABSL_GUARDED_BY(mu_);
};

}  // namespace berth::csi
