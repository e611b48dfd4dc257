#include "driver/options.h"

#include <cctype>
#include <filesystem>

#include "common/strings.h"

namespace berth::driver {
namespace {

absl::Status ValidateAbsolutePath(const std::string& flag, const std::string& path) {
  if (path.empty() || path.front() != '/') {
    return absl::InvalidArgumentError(
        StrCat("--", flag, " \"", path, "\": want an absolute path"));
  }
  for (const auto& part : std::filesystem::path(path)) {
    if (part == "..") {
      return absl::InvalidArgumentError(
          StrCat("--", flag, " \"", path, "\": \"..\" is not allowed"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateDriverName(const std::string& name) {
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(StrCat("--driver-name \"", name, "\": ", why));
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

absl::Status ValidateDriverOptions(const DriverOptions& o) {
  if (absl::Status s = ValidateDriverName(o.driver_name); !s.ok()) return s;
  if (o.node_id.empty()) return absl::InvalidArgumentError("--node-id must not be empty");
  if (o.node_id.size() > 256) {
    return absl::InvalidArgumentError("--node-id is longer than 256 bytes (the CSI limit)");
  }
  for (char c : o.node_id) {
    if (!std::isgraph(static_cast<unsigned char>(c))) {
      return absl::InvalidArgumentError(
          StrCat("--node-id \"", o.node_id, "\": only printable ASCII without spaces"));
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
