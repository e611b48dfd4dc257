#include "client/driver_monitor.h"

#include <vector>

#include "absl/strings/cord.h"
#include "common/strings.h"
#include "common/thread_name.h"
#include "csi/client.h"
#include "spdlog/spdlog.h"

namespace berth::client {

std::function<absl::Status(const std::string&)> ParkAware(std::function<absl::Status(const std::string&)> sync) {
  // RunWorker itself leaves a NotAFailure key's backoff alone.
  return sync;
}

DriverMonitor::DriverMonitor(DriverDirectory& directory, Clock& clock, Options options)
    : directory_(directory), clock_(clock), options_(options) {
  listener_id_ = directory_.AddListener([this](const std::string& driver, const std::string& node,
                                               const std::string& endpoint) { OnRegistered(driver, node, endpoint); });
  prober_ = NamedThread("driver prober", [this] { ProberLoop(); });
}

DriverMonitor::~DriverMonitor() {
  directory_.RemoveListener(listener_id_);
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  prober_.join();
}

std::string DriverMonitor::EndpointKey(const std::string& driver, const std::string& node) const {
  std::string endpoint = directory_.Endpoint(driver, node);
  return endpoint.empty() ? StrCat("unregistered:", driver, "/", node) : endpoint;
}

DriverMonitor::Endpoint& DriverMonitor::StateLocked(const std::string& key, const std::string& driver,
                                                    const std::string& node) {
  auto [it, inserted] = endpoints_.try_emplace(key, options_);
  if (inserted) {
    it->second.driver = driver;
    it->second.node = node;
    // Nothing to probe for a driver that is not registered: registration
    // itself releases it.
    if (Unregistered(key)) it->second.down = true;
  }
  return it->second;
}

void DriverMonitor::MarkDownLocked(Endpoint& e) {
  if (e.down) return;
  e.down = true;
  e.backoff.Reset();
  e.next_probe = clock_.Now() + e.backoff.Next();
  ++stats_.outages;
  wake_ = true;  // the prober re-plans
}

absl::Status DriverMonitor::Call(const std::string& driver, const std::string& node, const CallFn& fn) {
  const std::string key = EndpointKey(driver, node);
  {
    absl::MutexLock lock(&mu_);
    Endpoint& e = StateLocked(key, driver, node);
    if (e.down) {
      ++stats_.skipped;
      return NotAFailure(Unregistered(key) ? StrCat("waiting for CSI driver ", driver, " to register",
                                                    node.empty() ? "" : StrCat(" on node ", node))
                                           : StrCat("waiting for CSI driver ", driver, " at ", key, " to come back"));
    }
    ++stats_.calls;
  }
  auto call = [&] {
    auto client = directory_.Client(driver, node, options_.metrics, options_.dial_timeout);
    if (!client.ok()) return client.status();
    return fn(**client);
  };
  absl::Status st = call();
  if (csi::Classify(st) != csi::ErrorClass::kDriverUnavailable || IsNotAFailure(st)) return st;
  // UNAVAILABLE: the connection, or the driver's own answer? Ask it.
  if (Probe(driver, node).ok()) {
    // It answers. The failed call may have used a connection to a process
    // that has been restarted since: once more, on a fresh one. What that
    // call says is its answer.
    directory_.Redial(driver, node);
    {
      absl::MutexLock lock(&mu_);
      ++stats_.calls;
    }
    st = call();
    if (csi::Classify(st) != csi::ErrorClass::kDriverUnavailable || Probe(driver, node).ok()) return st;
  }
  absl::MutexLock lock(&mu_);
  ++stats_.connection_failures;
  Endpoint& e = StateLocked(key, driver, node);
  if (!e.down) {
    spdlog::warn("CSI driver {} at {} is unreachable ({}); its work waits until it is back", driver, key,
                 std::string(st.message()));
  }
  MarkDownLocked(e);
  return NotAFailure(
      StrCat("CSI driver ", driver, " at ", key, " is unreachable (", st.message(), "); waiting for it to come back"));
}

absl::StatusOr<bool> DriverMonitor::ControllerHasCapability(const std::string& driver, const std::string& node,
                                                            ::csi::v1::ControllerServiceCapability::RPC::Type rpc) {
  bool has = false;
  absl::Status st = Call(driver, node, [&](const csi::DriverClient&) {
    auto answer = directory_.ControllerHasCapability(driver, node, rpc);
    if (!answer.ok()) return answer.status();
    has = *answer;
    return absl::OkStatus();
  });
  if (!st.ok()) return st;
  return has;
}

absl::StatusOr<SingleNodeModes> DriverMonitor::ControllerSingleNodeModes(const std::string& driver,
                                                                         const std::string& node) {
  auto split =
      ControllerHasCapability(driver, node, ::csi::v1::ControllerServiceCapability::RPC::SINGLE_NODE_MULTI_WRITER);
  if (!split.ok()) return split.status();
  return *split ? SingleNodeModes::kSplit : SingleNodeModes::kLegacy;
}

absl::Status DriverMonitor::Probe(const std::string& driver, const std::string& node) {
  {
    absl::MutexLock lock(&mu_);
    ++stats_.probes;
  }
  absl::Status st;
  const std::string endpoint = directory_.Endpoint(driver, node);
  auto channel = endpoint.empty() ? absl::StatusOr<std::shared_ptr<grpc::Channel>>(
                                        absl::UnavailableError(StrCat("CSI driver ", driver, " is not registered")))
                                  : csi::ConnectUnix(endpoint, {.timeout = options_.probe_dial_timeout});
  if (!channel.ok()) {
    st = absl::UnavailableError(std::string(channel.status().message()));
  } else {
    auto resp = csi::DriverClient(*channel, {.driver = driver, .metrics = options_.metrics})
                    .Probe({.timeout = options_.probe_timeout});
    st = resp.status();
    if (st.ok() && resp->has_ready() && !resp->ready().value()) {
      st = absl::UnavailableError(StrCat("CSI driver ", driver, " is not ready"));
    }
  }
  if (!st.ok()) {
    absl::MutexLock lock(&mu_);
    ++stats_.failed_probes;
  }
  return st;
}

void DriverMonitor::Park(const std::string& driver, const std::string& node, WorkQueue& queue, const std::string& key) {
  {
    absl::MutexLock lock(&mu_);
    // Looked up under mu_: a registration that this lookup misses has not
    // reached OnRegistered yet (it takes mu_ after the directory changed),
    // which then releases what is parked here.
    const std::string endpoint = EndpointKey(driver, node);
    unparked_.erase(&queue);  // (a new queue at the address of a gone one)
    Endpoint& e = StateLocked(endpoint, driver, node);
    if (e.down) {
      e.parked.emplace(&queue, key);
      return;
    }
  }
  // Up again meanwhile: no need to wait.
  queue.Add(key);
}

void DriverMonitor::Unpark(WorkQueue& queue) {
  absl::MutexLock release(&release_mu_);
  absl::MutexLock lock(&mu_);
  unparked_.insert(&queue);
  for (auto& [key, e] : endpoints_) {
    for (auto it = e.parked.begin(); it != e.parked.end();) {
      it = it->first == &queue ? e.parked.erase(it) : std::next(it);
    }
  }
}

bool DriverMonitor::Up(const std::string& driver, const std::string& node) const {
  const std::string key = EndpointKey(driver, node);
  absl::MutexLock lock(&mu_);
  auto it = endpoints_.find(key);
  return it == endpoints_.end() ? !Unregistered(key) : !it->second.down;
}

DriverMonitor::Stats DriverMonitor::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void DriverMonitor::OnRegistered(const std::string& driver, const std::string& node, const std::string& endpoint) {
  std::set<std::pair<WorkQueue*, std::string>> released;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = endpoints_.begin(); it != endpoints_.end();) {
      Endpoint& e = it->second;
      // A key waiting for the driver on any node (a claim with no node
      // chosen yet: the provisioner picks one of the driver's registered
      // nodes) is released by a registration on any node.
      if (Unregistered(it->first) && e.driver == driver && (node.empty() || e.node.empty() || e.node == node)) {
        // Registered now: its keys find the endpoint when they run.
        released.merge(e.parked);
        it = endpoints_.erase(it);
        continue;
      }
      if (it->first == endpoint && e.down) {
        // A driver registers when it (re)starts, after answering the
        // registrar (NodeGetInfo): it is back. A driver that dies again at
        // once is found out by the first call that fails.
        spdlog::info("CSI driver {} at {} registered again; resuming {} waiting item(s)", driver, endpoint,
                     e.parked.size());
        e.down = false;
        released.merge(e.parked);
      }
      ++it;
    }
  }
  Release(std::move(released));
}

void DriverMonitor::Release(std::set<std::pair<WorkQueue*, std::string>> parked) {
  if (parked.empty()) return;
  absl::MutexLock release(&release_mu_);
  {
    absl::MutexLock lock(&mu_);
    // Keys of a queue Unpark-ed since they were taken out are dropped.
    for (auto it = parked.begin(); it != parked.end();) {
      it = unparked_.contains(it->first) ? parked.erase(it) : std::next(it);
    }
    stats_.resumed += static_cast<int64_t>(parked.size());
  }
  for (const auto& [queue, key] : parked) queue->Add(key);
}

void DriverMonitor::ProberLoop() {
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    // The next due probe: an endpoint whose backoff ran out.
    absl::Time due = absl::InfiniteFuture();
    for (const auto& [key, e] : endpoints_) {
      if (!e.down || Unregistered(key)) continue;
      due = std::min(due, e.next_probe);
    }
    if (due > clock_.Now()) {
      wake_ = false;
      auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || wake_; };
      clock_.AwaitWithDeadline(mu_, absl::Condition(&woken), due);
      continue;
    }
    std::vector<std::pair<std::string, std::pair<std::string, std::string>>> to_probe;
    const absl::Time now = clock_.Now();
    for (auto& [key, e] : endpoints_) {
      if (!e.down || Unregistered(key) || e.next_probe > now) continue;
      to_probe.push_back({key, {e.driver, e.node}});
    }
    for (const auto& [key, target] : to_probe) {
      mu_.Unlock();
      absl::Status st = Probe(target.first, target.second);
      std::set<std::pair<WorkQueue*, std::string>> released;
      bool up = false;
      mu_.Lock();
      auto it = endpoints_.find(key);
      if (it == endpoints_.end()) continue;
      Endpoint& e = it->second;
      if (st.ok()) {
        spdlog::info("CSI driver {} at {} answers again; resuming {} waiting item(s)", e.driver, key, e.parked.size());
        e.down = false;
        released.swap(e.parked);
        up = true;
      } else {
        e.next_probe = clock_.Now() + e.backoff.Next();
      }
      if (up) {
        mu_.Unlock();
        // The calls go on a fresh connection, not on one still backing off
        // from the outage.
        directory_.Redial(target.first, target.second);
        Release(std::move(released));
        mu_.Lock();
      }
    }
  }
}

}  // namespace berth::client
