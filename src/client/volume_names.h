// Names of CSI volumes that the attach-detach controller and the node agent
// must agree on, as kube-controller-manager and kubelet do.
//
// Thread-safety: stateless; safe to call concurrently.
#pragma once

#include <string>

namespace berth::client {

// VolumeAttachment name for a volume handle, driver and node (kubelet's and
// the attach-detach controller's getAttachmentName).
std::string AttachmentName(const std::string& volume_handle, const std::string& driver, const std::string& node);
// "kubernetes.io/csi/<driver>^<handle>": a CSI volume's name in Node
// status.volumesAttached / volumesInUse.
std::string UniqueVolumeName(const std::string& driver, const std::string& volume_handle);

}  // namespace berth::client
