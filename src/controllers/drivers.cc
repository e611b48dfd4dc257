#include "controllers/drivers.h"

#include "common/strings.h"
#include "csi/client.h"

namespace berth::controllers {

void DriverDirectory::Add(const std::string& driver, const std::string& node, const std::string& endpoint) {
  absl::MutexLock lock(&mu_);
  auto& nodes = endpoints_[driver];
  if (auto it = nodes.find(node); it != nodes.end() && it->second != endpoint) channels_.erase(it->second);
  nodes[node] = endpoint;
}

void DriverDirectory::Remove(const std::string& driver, const std::string& node) {
  absl::MutexLock lock(&mu_);
  auto it = endpoints_.find(driver);
  if (it == endpoints_.end()) return;
  if (auto n = it->second.find(node); n != it->second.end()) {
    channels_.erase(n->second);
    it->second.erase(n);
  }
  if (it->second.empty()) endpoints_.erase(it);
}

std::vector<std::string> DriverDirectory::Nodes(const std::string& driver) const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> out;
  if (auto it = endpoints_.find(driver); it != endpoints_.end()) {
    for (const auto& [node, endpoint] : it->second) out.push_back(node);
  }
  return out;
}

bool DriverDirectory::Known(const std::string& driver) const {
  absl::MutexLock lock(&mu_);
  return endpoints_.contains(driver);
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> DriverDirectory::Channel(const std::string& driver,
                                                                       const std::string& node) {
  std::string endpoint;
  {
    absl::MutexLock lock(&mu_);
    auto it = endpoints_.find(driver);
    if (it != endpoints_.end()) {
      if (auto n = it->second.find(node); n != it->second.end()) {
        endpoint = n->second;
      } else if (auto any = it->second.find(""); any != it->second.end()) {
        endpoint = any->second;
      }
    }
    if (endpoint.empty()) {
      return absl::UnavailableError(StrCat("CSI driver ", driver, " is not registered",
                                           node.empty() ? "" : StrCat(" for node ", node)));
    }
    if (auto c = channels_.find(endpoint); c != channels_.end()) return c->second;
  }
  // Dial outside the lock (it may wait for a starting driver).
  auto channel = csi::ConnectUnix(endpoint, {.timeout = absl::Seconds(5)});
  if (!channel.ok()) {
    return absl::UnavailableError(StrCat("CSI driver ", driver, " at ", endpoint, ": ", channel.status().message()));
  }
  absl::MutexLock lock(&mu_);
  channels_[endpoint] = *channel;
  return *channel;
}

}  // namespace berth::controllers
