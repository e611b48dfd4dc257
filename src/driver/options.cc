#include "driver/options.h"

#include <filesystem>

#include "common/strings.h"
#include "csi/registration.h"

namespace berth::driver {
namespace {

absl::Status ValidateAbsolutePath(const std::string& flag, const std::string& path) {
  if (path.empty() || path.front() != '/') {
    return absl::InvalidArgumentError(StrCat("--", flag, " \"", path, "\": want an absolute path"));
  }
  for (const auto& part : std::filesystem::path(path)) {
    if (part == "..") {
      return absl::InvalidArgumentError(StrCat("--", flag, " \"", path, "\": \"..\" is not allowed"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateDriverName(const std::string& name) {
  absl::Status st = csi::CheckDriverName(name);
  if (st.ok()) return st;
  return absl::InvalidArgumentError(StrCat("--driver-name: ", st.message()));
}

absl::Status ValidateDriverOptions(const DriverOptions& o) {
  if (absl::Status s = ValidateDriverName(o.driver_name); !s.ok()) return s;
  if (o.node_id.empty()) return absl::InvalidArgumentError("--node-id must not be empty");
  if (!(o.high_watermark >= 0.5 && o.high_watermark <= 1)) {
    return absl::InvalidArgumentError("--high-watermark must be between 0.5 and 1 (a fraction of a filesystem's size)");
  }
  if (o.node_id.size() > 256) {
    return absl::InvalidArgumentError("--node-id is longer than 256 bytes (the CSI limit)");
  }
  for (char c : o.node_id) {
    if (!std::isgraph(static_cast<unsigned char>(c))) {
      return absl::InvalidArgumentError(StrCat("--node-id \"", o.node_id, "\": only printable ASCII without spaces"));
    }
  }
  if (absl::Status s = ValidateAbsolutePath("pool", o.pool); !s.ok()) return s;
  if (absl::Status s = ValidateAbsolutePath("kubelet-root", o.kubelet_root); !s.ok()) return s;
  if (!(o.overprovision_ratio > 0) || o.overprovision_ratio > 1000) {
    return absl::InvalidArgumentError("--overprovision-ratio must be in (0, 1000]");
  }
  if (o.max_volumes < 0) return absl::InvalidArgumentError("--max-volumes must not be negative");
  if (!o.pool_image.empty()) {
    if (absl::Status s = ValidateAbsolutePath("pool-image", o.pool_image); !s.ok()) return s;
    if (o.pool_size_bytes < 0) return absl::InvalidArgumentError("--pool-size must be positive");
  }
  return absl::OkStatus();
}

}  // namespace berth::driver
