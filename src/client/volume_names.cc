#include "client/volume_names.h"

#include "absl/strings/str_cat.h"
#include "common/hash.h"

namespace berth::client {

std::string AttachmentName(const std::string& volume_handle, const std::string& driver, const std::string& node) {
  return absl::StrCat("csi-", Sha256Hex(absl::StrCat(volume_handle, driver, node)));
}

std::string UniqueVolumeName(const std::string& driver, const std::string& volume_handle) {
  return absl::StrCat("kubernetes.io/csi/", driver, "^", volume_handle);
}

}  // namespace berth::client
