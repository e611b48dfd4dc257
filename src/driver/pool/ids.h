// Names and IDs of volumes and snapshots, and the rules that keep them from
// ever becoming dangerous paths.
//
// A CO names what it creates (CreateVolumeRequest.name, ...); berth derives
// the ID from the name: "vol-" / "snap-" / "group-" followed by the first
// 128 bits of SHA-256(name) in hex. IDs are therefore fixed-length, of a
// known alphabet, and deterministic: a CreateVolume retried after a crash
// finds what the first attempt left under the same ID.
//
// IDs that arrive in requests are checked before any lookup: empty, longer
// than 128 bytes, or containing anything but [A-Za-z0-9._-] (or starting
// with '.') is INVALID_ARGUMENT; a well-formed ID that is not of berth's
// shape simply does not exist.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace berth::driver {

inline constexpr size_t kMaxIdLength = 128;
inline constexpr size_t kMaxNameLength = 128;

enum class IdKind { kVolume, kSnapshot, kGroupSnapshot };

// The ID berth gives the object of `kind` named `name`.
std::string IdForName(IdKind kind, std::string_view name);

// INVALID_ARGUMENT unless `name` is 1..128 bytes of printable ASCII without
// '/' or '\\' (CO names such as "pvc-<uid>" or "snapshot-<uid>"). `what` names
// the field in the message.
absl::Status ValidateName(std::string_view what, std::string_view name);

// INVALID_ARGUMENT for a malformed ID (see above); otherwise whether it has
// the shape of a berth ID of `kind` (false: it cannot exist here).
absl::StatusOr<bool> CheckId(std::string_view what, std::string_view id, IdKind kind);

}  // namespace berth::driver
