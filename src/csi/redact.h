// Rendering CSI messages for logs with every secret removed.
//
// Which fields are secret is not a list kept here: the CSI proto marks them
// with the field option `(csi.v1.csi_secret) = true`, and RedactedDebugString
// reads that option from the descriptors. A secret field is printed as
// "***stripped***" wherever it occurs: at the top level, inside nested
// messages, inside repeated messages and inside map values that are messages.
//
//   csi::v1::CreateVolumeRequest req;
//   (*req.mutable_secrets())["password"] = "hunter2";
//   RedactedDebugString(req);  // {"name":"pvc-1","secrets":"***stripped***"}
//
// Thread-safety: stateless; safe from any thread.
#pragma once

#include <string>

#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"

namespace berth::csi {

inline constexpr char kStripped[] = "***stripped***";

// Compact JSON-like text of `message` (fields that are set, map keys sorted)
// with every csi_secret field replaced by "***stripped***".
std::string RedactedDebugString(const google::protobuf::Message& message);

// True if `field` is marked (csi.v1.csi_secret) = true.
bool IsSecretField(const google::protobuf::FieldDescriptor& field);

}  // namespace berth::csi
