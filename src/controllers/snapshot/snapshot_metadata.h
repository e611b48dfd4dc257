// Changed-block tracking through berth's API: the orchestrator's side of the
// CSI SnapshotMetadata service, for any CSI driver that serves it. Two
// subresources of a VolumeSnapshot, served by the API server (authenticated
// and authorized like any request) and answered by the driver that owns the
// snapshot:
//
//   GET /apis/snapshot.storage.k8s.io/v1/namespaces/NS/volumesnapshots/SNAP/allocated
//       GetMetadataAllocated(the snapshot's handle)
//   GET /apis/snapshot.storage.k8s.io/v1/namespaces/NS/volumesnapshots/TARGET/delta?base=BASE
//       GetMetadataDelta(BASE's handle, TARGET's handle); BASE in NS too
//
// Both answer 200 with
//   {"blockMetadataType": "FIXED_LENGTH" | "VARIABLE_LENGTH",
//    "volumeCapacityBytes": N, "blocks": [{"byteOffset": N, "sizeBytes": N}, ...]}
// the driver's whole stream in order (the CLI's -o json prints it as is).
//
// The driver is the bound content's spec.driver, called for the node the
// snapshot was cut on (the content's snapshot.berth.io/node annotation; for a
// node-local driver on exactly one node, that node), through the same
// DriverDirectory as the controllers. Errors: a snapshot or base that does
// not exist — NotFound; not bound to a content with a snapshot handle yet
// (not ready), or a base of another driver — FailedPrecondition / Invalid;
// the driver's own errors with their gRPC code (UNIMPLEMENTED: the driver
// does not serve SnapshotMetadata).
//
//   auto answer = GetSnapshotMetadata(registry, directory, ns, "target", "base");
//   if (answer.ok()) out.Send(200, "application/json", answer->dump());
//
// Thread-safety: thread-safe (the registry and the directory are).
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "apiserver/api.h"
#include "client/drivers.h"
#include "nlohmann/json.hpp"

namespace berth::controllers {

// How long the driver may take for the whole stream.
inline constexpr absl::Duration kSnapshotMetadataTimeout = absl::Minutes(5);

// The answer above for the VolumeSnapshot `ns`/`name`: its allocated blocks
// when `base` is empty, else the blocks changed since the snapshot `ns`/`base`.
absl::StatusOr<nlohmann::json> GetSnapshotMetadata(apiserver::Api& registry, client::DriverDirectory& directory,
                                                   const std::string& ns, const std::string& name,
                                                   const std::string& base);

}  // namespace berth::controllers
