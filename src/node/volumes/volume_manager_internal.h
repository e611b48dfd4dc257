// The volume manager's private helpers, shared by its parts
// (volume_manager.cc: life cycle and queries; reconstruct.cc; desired_state.cc;
// reconciler.cc; operations.cc; volume_stats.cc). Not for other code.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <functional>
#include <system_error>

#include "absl/strings/match.h"
#include "api/quantity.h"
#include "api/types/core.h"
#include "client/capability.h"
#include "client/object.h"
#include "client/quiescence.h"
#include "client/secrets.h"
#include "client/typed.h"
#include "client/volume_names.h"
#include "client/workqueue.h"
#include "client/writes.h"
#include "common/fs.h"
#include "common/hash.h"
#include "common/status.h"
#include "common/strings.h"
#include "csi/driver_client.h"
#include "csi/grpc_status.h"
#include "csi/registration.h"
#include "csi/v1/csi.grpc.pb.h"
#include "metrics/prometheus.h"
#include "node/volumes/volume_manager.h"
#include "spdlog/spdlog.h"

namespace berth::node {
namespace internal {

namespace fs = std::filesystem;
using client::Field;
using client::Name;
using client::Ns;
using client::Str;
using client::Uid;
using nlohmann::json;
using NodeCap = ::csi::v1::NodeServiceCapability::RPC;

using client::K;
namespace types = ::berth::api::types;

inline constexpr char kCsiPluginDir[] = "/plugins/kubernetes.io/csi";
inline constexpr char kVolData[] = "vol_data.json";
inline constexpr char kPodsByNode[] = "spec.nodeName";  // the pod informer's index

// A name from an object that becomes one path component.
inline absl::Status CheckComponent(const std::string& what, const std::string& s) {
  if (s.empty() || s == "." || s == ".." || s.size() > 253 || s.find('/') != std::string::npos ||
      s.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(StrCat(what, " \"", s, "\" cannot be used in a path"));
  }
  return absl::OkStatus();
}

inline std::string Parent(const std::string& path) { return fs::path(path).parent_path().string(); }

// Removes an empty directory or a file; missing is fine; a non-empty
// directory or a mount point stays (rmdir refuses both).
inline void RemoveIfEmpty(const std::string& path) {
  if (::rmdir(path.c_str()) != 0 && errno == ENOTDIR) ::unlink(path.c_str());
}

inline bool ResizePending(const types::PersistentVolumeClaim& claim) {
  const types::PersistentVolumeClaimStatus& status = claim.status;
  if (auto it = status.allocated_resource_statuses.find("storage");
      it != status.allocated_resource_statuses.end() && it->second == "NodeResizePending") {
    return true;
  }
  for (const auto& c : status.conditions) {
    if (c.type == "FileSystemResizePending" && c.status == "True") return true;
  }
  return false;
}

// The "storage" entry of a capacity in bytes, 0 when absent.
inline int64_t StorageBytes(const api::types::ResourceList& capacity) {
  auto it = capacity.find("storage");
  return it == capacity.end() ? 0 : it->second.Value();
}

// Writes the claim's status through `edit` when it changes it.
inline absl::Status EditClaimStatus(apiserver::Api& registry, const types::PersistentVolumeClaim& claim,
                                    const std::function<void(types::PersistentVolumeClaimStatus&)>& edit) {
  const types::ObjectMeta& meta = claim.metadata;
  return client::MutateTyped<types::PersistentVolumeClaim>(
      registry, K("persistentvolumeclaims"), meta.namespace_, meta.name, meta.uid, apiserver::Subresource::kStatus,
      [&](types::PersistentVolumeClaim& fresh) {
        const types::PersistentVolumeClaimStatus before = fresh.status;
        edit(fresh.status);
        return !(fresh.status == before);
      });
}

inline void SetMap(google::protobuf::Map<std::string, std::string>* out, const std::map<std::string, std::string>& in) {
  for (const auto& [k, v] : in) (*out)[k] = v;
}

// Not a failure of the operation: it waits for the driver, and the driver's
// registration wakes the reconciler (no backoff builds up meanwhile).
inline absl::Status DriverNotRegistered(const std::string& driver) {
  return client::NotAFailure(StrCat("driver ", driver, " is not registered"));
}

// One call to the driver's Node service on this node through the CSI call
// layer (deadline, logging, kubelet's csi_operations_seconds), its error
// message prefixed with the call's name as FailedMount events show it.
inline absl::Status CallNode(client::DriverDirectory& directory, const std::string& driver, const std::string& node,
                             const char* rpc, const std::function<absl::Status(const csi::DriverClient&)>& call) {
  BERTH_ASSIGN_OR_RETURN(auto channel, directory.Channel(driver, node));
  absl::Status st = call(csi::DriverClient(channel, {.driver = driver, .metrics = &csi::CallMetrics::Kubelet()}));
  if (st.ok()) return st;
  return absl::Status(st.code(), StrCat(rpc, ": ", st.message()));
}

}  // namespace internal

namespace internal {
// Where the record of a staged / published volume lives.
inline std::string StagedRecord(const std::string& root, const std::string& staging, const std::string& pv,
                                bool block) {
  if (block) return StrCat(root, kCsiPluginDir, "/volumeDevices/", pv, "/", kVolData);
  return StrCat(Parent(staging), "/", kVolData);
}
inline std::string PublishedRecord(const std::string& target, bool block) {
  return block ? target + "." + kVolData : StrCat(Parent(target), "/", kVolData);
}
}  // namespace internal

}  // namespace berth::node
