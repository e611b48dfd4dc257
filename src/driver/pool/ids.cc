#include "driver/pool/ids.h"

#include "common/hash.h"
#include "common/strings.h"

namespace berth::driver {
namespace {

std::string_view Prefix(IdKind kind) {
  switch (kind) {
    case IdKind::kVolume:
      return "vol-";
    case IdKind::kSnapshot:
      return "snap-";
    case IdKind::kGroupSnapshot:
      return "group-";
  }
  return "";
}

constexpr size_t kHexChars = 32;

}  // namespace

std::string IdForName(IdKind kind, std::string_view name) {
  return StrCat(Prefix(kind), Sha256Hex(name).substr(0, kHexChars));
}

absl::Status ValidateName(std::string_view what, std::string_view name) {
  if (name.empty()) return absl::InvalidArgumentError(StrCat(what, " is required"));
  if (name.size() > kMaxNameLength) {
    return absl::InvalidArgumentError(StrCat(what, " is ", name.size(), " bytes, longer than ", kMaxNameLength));
  }
  for (char c : name) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u > 0x7e || c == '/' || c == '\\') {
      return absl::InvalidArgumentError(
          StrCat(what, " may only contain printable ASCII characters other than '/' and '\\'"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> CheckId(std::string_view what, std::string_view id, IdKind kind) {
  if (id.empty()) return absl::InvalidArgumentError(StrCat(what, " is required"));
  if (id.size() > kMaxIdLength) {
    return absl::InvalidArgumentError(StrCat(what, " is ", id.size(), " bytes, longer than ", kMaxIdLength));
  }
  if (id[0] == '.') return absl::InvalidArgumentError(StrCat(what, " must not start with '.'"));
  for (char c : id) {
    const bool ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
    if (!ok) {
      return absl::InvalidArgumentError(
          StrCat(what, " \"", id, "\" may only contain letters, digits, '-', '_' and '.'"));
    }
  }
  const std::string_view prefix = Prefix(kind);
  if (id.size() != prefix.size() + kHexChars || id.substr(0, prefix.size()) != prefix) {
    return false;
  }
  for (char c : id.substr(prefix.size())) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace berth::driver
