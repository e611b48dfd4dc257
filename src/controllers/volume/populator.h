// Volume populators: a claim whose spec.dataSourceRef names a kind other
// than a VolumeSnapshot or a claim (Kubernetes' volume populators, GA in
// 1.33) is provisioned AND filled before it is bound, so no pod ever sees
// it half-written. Upstream a populator controller fills a "prime" claim and
// rebinds its PV; berth's provisioner does it in one place instead, with an
// injected VolumePopulator:
//
//   1. Check(): the source exists and is usable (before anything is made),
//   2. the provisioner's finalizer goes on (as for every claim),
//   3. Populate(): the populator fills a volume of the same CSI driver on
//      the node the claim's volume goes to and returns it as a content
//      source; the provisioner records its volume id on the claim
//      (kAnnPopulatedVolume) before it asks for anything else,
//   4. CreateVolume(pvc-<uid>, the class's parameters plus Parameters(),
//      that content source): the driver clones the filled volume,
//   5. the PV is created as always (only now can the claim bind),
//   6. Release(): the filled volume goes, then the annotation.
//
// Restart-safe: a crash before (3)'s annotation leaves at most a volume of
// the populator's, which Populate or Release of the same claim removes (a
// populator names its volumes after the claim's uid); after it, the
// recorded source lets a retry, or the clean-up of a claim deleted
// meanwhile, repeat the very same CreateVolume (a retry whose informer copy
// of the claim is older than the stored one waits for it: read before the
// record, it would fill a second volume); after (5), a bound claim still
// carrying the annotation has Release called again.
//
// Thread-safety: implementations are thread-safe (the provisioner's workers
// call them concurrently, for different claims).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "api/types/core.h"
#include "api/types/storage.h"
#include "controllers/volume/data_source.h"
#include "csi/v1/csi.pb.h"

namespace berth::controllers {

// On a claim being provisioned from a populated volume: that volume's id
// (the content source of its CreateVolume), from Populate until Release.
inline constexpr char kAnnPopulatedVolume[] = "volume.berth.io/populated-volume";

// What the provisioner asks a populator to fill, or to release.
struct PopulationRequest {
  const api::types::PersistentVolumeClaim& claim;
  const api::types::StorageClass& storage_class;
  std::string driver;      // the class's provisioner, which makes the claim's volume
  std::string node;        // the node CreateVolume goes to ("": the driver is not node-local)
  int64_t size_bytes = 0;  // the claim's requested capacity
};

class VolumePopulator {
 public:
  virtual ~VolumePopulator() = default;

  // Whether `ref` (a claim's dataSourceRef) is this populator's kind.
  virtual bool Serves(const DataSourceRef& ref) const = 0;

  // Cheap checks before anything is made: the source exists and can fill
  // this claim. FAILED_PRECONDITION (retried: the source may still come or
  // complete) or INVALID_ARGUMENT, with a message for the claim's
  // ProvisioningFailed event.
  virtual absl::Status Check(const PopulationRequest& request) = 0;

  // Fills a volume of `request.driver` on `request.node` with the source's
  // content and returns it as a CreateVolume content source. Blocks for as
  // long as the copy takes. A failed or interrupted population starts over
  // on the next call (its earlier volume is replaced). Errors as Check's,
  // and the driver's or the source's.
  virtual absl::StatusOr<::csi::v1::VolumeContentSource> Populate(const PopulationRequest& request) = 0;

  // The parameters a populated CreateVolume carries on top of the class's
  // (e.g. berth-csi's volume mode change: a filesystem cloned from a block
  // volume). Constant.
  virtual std::map<std::string, std::string> Parameters() const = 0;

  // Removes whatever Populate made or left for `request.claim`: its filled
  // volume once the claim's own volume exists, or the pieces of an
  // interrupted population of a claim deleted meanwhile. Idempotent; OK
  // when nothing is left.
  virtual absl::Status Release(const PopulationRequest& request) = 0;
};

}  // namespace berth::controllers
