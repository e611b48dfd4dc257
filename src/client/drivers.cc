#include "client/drivers.h"

#include <algorithm>

#include "common/status.h"
#include "common/strings.h"
#include "csi/client.h"
#include "csi/driver_client.h"

namespace berth::client {

void DriverDirectory::Add(const std::string& driver, const std::string& node, const std::string& endpoint) {
  absl::MutexLock listener_lock(&listener_mu_);
  bool is_new;
  {
    absl::MutexLock lock(&mu_);
    is_new = !endpoints_.contains(driver);
    auto& nodes = endpoints_[driver];
    if (auto it = nodes.find(node); it != nodes.end() && it->second != endpoint) {
      channels_.erase(it->second);
      capabilities_.erase(it->second);
    }
    // A driver registers when it (re)starts: its capabilities may have
    // changed, and a fresh dial connects at once where the old channel may
    // still be waiting out its reconnect backoff.
    capabilities_.erase(endpoint);
    channels_.erase(endpoint);
    nodes[node] = endpoint;
  }
  if (is_new && on_new_driver_) on_new_driver_(driver);
  for (const auto& [id, fn] : listeners_) fn(driver, node, endpoint);
}

int DriverDirectory::AddListener(Listener fn) {
  absl::MutexLock listener_lock(&listener_mu_);
  const int id = next_listener_++;
  listeners_[id] = std::move(fn);
  return id;
}

void DriverDirectory::RemoveListener(int id) {
  absl::MutexLock listener_lock(&listener_mu_);
  listeners_.erase(id);
}

void DriverDirectory::Redial(const std::string& driver, const std::string& node) {
  absl::MutexLock lock(&mu_);
  channels_.erase(EndpointLocked(driver, node));
}

std::string DriverDirectory::Endpoint(const std::string& driver, const std::string& node) const {
  absl::MutexLock lock(&mu_);
  return EndpointLocked(driver, node);
}

void DriverDirectory::SetOnNewDriver(std::function<void(const std::string& driver)> fn) {
  absl::MutexLock listener_lock(&listener_mu_);
  on_new_driver_ = std::move(fn);
  if (on_new_driver_) {
    for (const auto& driver : Drivers()) on_new_driver_(driver);
  }
}

std::vector<std::string> DriverDirectory::Drivers() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> out;
  for (const auto& [driver, nodes] : endpoints_) out.push_back(driver);
  return out;
}

void DriverDirectory::Remove(const std::string& driver, const std::string& node) {
  absl::MutexLock lock(&mu_);
  auto it = endpoints_.find(driver);
  if (it == endpoints_.end()) return;
  if (auto n = it->second.find(node); n != it->second.end()) {
    channels_.erase(n->second);
    capabilities_.erase(n->second);
    it->second.erase(n);
  }
  if (it->second.empty()) endpoints_.erase(it);
}

std::string DriverDirectory::EndpointLocked(const std::string& driver, const std::string& node) const {
  auto it = endpoints_.find(driver);
  if (it == endpoints_.end()) return "";
  if (auto n = it->second.find(node); n != it->second.end()) return n->second;
  if (auto any = it->second.find(""); any != it->second.end()) return any->second;
  return "";
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

absl::StatusOr<std::pair<std::string, std::shared_ptr<grpc::Channel>>> DriverDirectory::Dial(
    const std::string& driver, const std::string& node, absl::Duration dial_timeout) {
  std::string endpoint;
  {
    absl::MutexLock lock(&mu_);
    endpoint = EndpointLocked(driver, node);
    if (endpoint.empty()) {
      return absl::UnavailableError(
          StrCat("CSI driver ", driver, " is not registered", node.empty() ? "" : StrCat(" for node ", node)));
    }
    if (auto c = channels_.find(endpoint); c != channels_.end()) return std::pair(endpoint, c->second.channel);
  }
  // Dial outside the lock (it may wait for a starting driver).
  auto channel = csi::ConnectUnix(endpoint, {.timeout = dial_timeout});
  if (!channel.ok()) {
    return absl::UnavailableError(StrCat("CSI driver ", driver, " at ", endpoint, ": ", channel.status().message()));
  }
  absl::MutexLock lock(&mu_);
  channels_[endpoint] = Dialed{.channel = *channel, .clients = {}};
  return std::pair(endpoint, *channel);
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> DriverDirectory::Channel(const std::string& driver,
                                                                        const std::string& node,
                                                                        absl::Duration dial_timeout) {
  BERTH_ASSIGN_OR_RETURN(auto dialed, Dial(driver, node, dial_timeout));
  return std::move(dialed.second);
}

absl::StatusOr<std::shared_ptr<const csi::DriverClient>> DriverDirectory::Client(const std::string& driver,
                                                                                 const std::string& node,
                                                                                 csi::CallMetrics* metrics,
                                                                                 absl::Duration dial_timeout) {
  BERTH_ASSIGN_OR_RETURN(auto dialed, Dial(driver, node, dial_timeout));
  const std::string& endpoint = dialed.first;
  const std::shared_ptr<grpc::Channel>& channel = dialed.second;
  auto make = [&] {
    return std::make_shared<const csi::DriverClient>(channel,
                                                     csi::DriverClient::Options{.driver = driver, .metrics = metrics});
  };
  absl::MutexLock lock(&mu_);
  auto c = channels_.find(endpoint);
  // Redialled or dropped since: this once, a client of its own.
  if (c == channels_.end() || c->second.channel != channel) return make();
  std::shared_ptr<const csi::DriverClient>& client = c->second.clients[{driver, metrics}];
  if (client == nullptr) client = make();
  return client;
}

absl::StatusOr<bool> DriverDirectory::ControllerHasCapability(const std::string& driver, const std::string& node,
                                                              ::csi::v1::ControllerServiceCapability::RPC::Type rpc) {
  std::string endpoint;
  {
    absl::MutexLock lock(&mu_);
    endpoint = EndpointLocked(driver, node);
    if (auto it = capabilities_.find(endpoint); it != capabilities_.end()) {
      return std::find(it->second.begin(), it->second.end(), rpc) != it->second.end();
    }
  }
  auto channel = Channel(driver, node);
  if (!channel.ok()) return channel.status();
  auto resp = csi::DriverClient(*channel, {.driver = driver}).ControllerGetCapabilities();
  if (!resp.ok()) return resp.status();
  std::vector<int> types;
  for (const auto& c : resp->capabilities()) types.push_back(c.rpc().type());
  const bool has = std::find(types.begin(), types.end(), rpc) != types.end();
  absl::MutexLock lock(&mu_);
  capabilities_[endpoint] = std::move(types);
  return has;
}

}  // namespace berth::client
