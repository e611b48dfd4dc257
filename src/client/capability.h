// Kubernetes volume fields → CSI request fields, shared by the provisioner,
// the attacher and the node agent so every call describes a volume the same
// way (external-provisioner / external-attacher / kubelet's csi plugin).
//
//   ::csi::v1::VolumeCapability cap = PvVolumeCapability(pv);
//
// Thread-safety: stateless.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "api/types/core.h"
#include "client/object.h"
#include "csi/v1/csi.pb.h"
#include "nlohmann/json.hpp"

namespace berth::client {

// Class parameters with this prefix are for the sidecars (fstype, secret
// references), never passed to the driver.
inline constexpr std::string_view kReservedPrefix = "csi.storage.k8s.io/";

// Splits StorageClass / VolumeSnapshotClass `parameters` into what the
// driver gets (`driver`, may be null) and the reserved keys without their
// prefix (`reserved`, may be null).
inline void SplitClassParameters(const std::map<std::string, std::string>& parameters,
                                 google::protobuf::Map<std::string, std::string>* driver,
                                 std::map<std::string, std::string>* reserved) {
  for (const auto& [k, v] : parameters) {
    if (std::string_view(k).starts_with(kReservedPrefix)) {
      if (reserved != nullptr) (*reserved)[k.substr(kReservedPrefix.size())] = v;
    } else if (driver != nullptr) {
      (*driver)[k] = v;
    }
  }
}

// Whether the driver knows the access modes of CSI 1.5's
// SINGLE_NODE_MULTI_WRITER capability (SINGLE_NODE_SINGLE_WRITER and
// SINGLE_NODE_MULTI_WRITER). A driver that does not must never see them.
enum class SingleNodeModes { kLegacy, kSplit };

// A Kubernetes access mode ("ReadWriteOnce"...) as a CSI access mode, as
// Kubernetes' ToCSIAccessMode: for a driver with the SINGLE_NODE_MULTI_WRITER
// capability ReadWriteOnce → SINGLE_NODE_MULTI_WRITER and ReadWriteOncePod →
// SINGLE_NODE_SINGLE_WRITER; for any other, both → SINGLE_NODE_WRITER.
// Unknown values map like ReadWriteOnce.
inline ::csi::v1::VolumeCapability::AccessMode::Mode CsiAccessMode(const std::string& mode, SingleNodeModes modes) {
  using Mode = ::csi::v1::VolumeCapability::AccessMode;
  if (mode == "ReadOnlyMany") return Mode::MULTI_NODE_READER_ONLY;
  if (mode == "ReadWriteMany") return Mode::MULTI_NODE_MULTI_WRITER;
  if (modes == SingleNodeModes::kLegacy) return Mode::SINGLE_NODE_WRITER;
  if (mode == "ReadWriteOncePod") return Mode::SINGLE_NODE_SINGLE_WRITER;
  return Mode::SINGLE_NODE_MULTI_WRITER;
}

// One capability with `access_mode`: block, or a mount with `fstype` and
// `mount_options`.
inline ::csi::v1::VolumeCapability MakeVolumeCapability(const std::string& access_mode, SingleNodeModes modes,
                                                        bool block, const std::string& fstype,
                                                        const std::vector<std::string>& mount_options) {
  ::csi::v1::VolumeCapability cap;
  cap.mutable_access_mode()->set_mode(CsiAccessMode(access_mode, modes));
  if (block) {
    cap.mutable_block();
    return cap;
  }
  auto* mount = cap.mutable_mount();
  mount->set_fs_type(fstype);
  for (const auto& f : mount_options) mount->add_mount_flags(f);
  return cap;
}

// The capability a bound PV is used with: its first access mode (as kubelet
// and external-attacher choose, with ReadWriteOncePod taking precedence),
// volumeMode, spec.csi.fsType and spec.mountOptions.
inline ::csi::v1::VolumeCapability PvVolumeCapability(const api::types::PersistentVolume& pv,
                                                      SingleNodeModes single_node) {
  const api::types::PersistentVolumeSpec& spec = pv.spec;
  std::string mode = spec.access_modes.empty() ? "ReadWriteOnce" : spec.access_modes[0];
  for (const auto& m : spec.access_modes) {
    if (m == "ReadWriteOncePod") mode = "ReadWriteOncePod";
  }
  return MakeVolumeCapability(mode, single_node, api::types::VolumeModeOf(spec.volume_mode) == "Block",
                              spec.csi ? spec.csi->fs_type : "", spec.mount_options);
}

}  // namespace berth::client
