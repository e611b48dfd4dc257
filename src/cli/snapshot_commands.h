// Changed-block tracking from the command line, through berth's API:
//
//   berth snapshot allocated SNAP [-n NS] [-o json]
//       GET .../namespaces/NS/volumesnapshots/SNAP/allocated
//   berth snapshot diff BASE TARGET [-n NS] [-o json]
//       GET .../namespaces/NS/volumesnapshots/TARGET/delta?base=BASE
//
// The API server answers both from the CSI driver that owns the snapshots
// (controllers/snapshot/snapshot_metadata.h); `berth up` serves them
// (ServeSnapshotMetadata below). A table for people:
//
//   OFFSET     SIZE      END
//   22020096   1048576   23068672
//   ...
//   2 ranges, 2Mi of 64Mi (VARIABLE_LENGTH)
//
// and with -o json the API's answer as it is:
//   {"blockMetadataType": "...", "volumeCapacityBytes": N, "blocks": [{"byteOffset": N, "sizeBytes": N}, ...]}
//
// Thread-safety: the commands are called from main; the served
// subresources are thread-safe.
#pragma once

#include <memory>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "apiserver/handler.h"
#include "apiserver/registry.h"
#include "cli/rest.h"
#include "client/drivers.h"
#include "http/api_client.h"
#include "nlohmann/json.hpp"

namespace berth::cli {

// `output`: "" (the table) or "json".
absl::Status SnapshotAllocated(http::ApiClient& client, const std::string& snapshot, const Target& target,
                               const std::string& output, std::ostream& out);
absl::Status SnapshotDiff(http::ApiClient& client, const std::string& base, const std::string& snapshot,
                          const Target& target, const std::string& output, std::ostream& out);

// Prints an answer as the commands do.
absl::Status PrintSnapshotMetadata(const nlohmann::json& answer, const std::string& output, std::ostream& out);

// Serves volumesnapshots/allocated and volumesnapshots/delta on `handler`,
// calling drivers through `directory`. The returned object must go before
// `directory` does; from then on both answer ServiceUnavailable (the API
// server may still be draining requests while berth up stops).
class SnapshotMetadataEndpoints {
 public:
  virtual ~SnapshotMetadataEndpoints() = default;
};
std::unique_ptr<SnapshotMetadataEndpoints> ServeSnapshotMetadata(apiserver::ApiHandler& handler,
                                                                 apiserver::Registry& registry,
                                                                 client::DriverDirectory& directory);

}  // namespace berth::cli
