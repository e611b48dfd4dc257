// What berth-csi's services share: configuration, the pool, the kernel
// interfaces, and the per-object operation locks.
#pragma once

#include <map>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "csi/v1/csi.pb.h"
#include "driver/health.h"
#include "driver/mount/filesystem.h"
#include "driver/mount/loop.h"
#include "driver/mount/mounter.h"
#include "driver/operation_locks.h"
#include "driver/options.h"
#include "driver/pool/pool.h"

namespace berth::driver {

// The topology key berth-csi reports; its value is the node ID.
inline constexpr char kTopologyKey[] = "topology.berth.io/node";

// Not owned pointers; all outlive the services. Thread-safety: the members
// are thread-safe.
struct DriverContext {
  DriverOptions options;  // kubelet_root and pool are canonical
  Pool* pool = nullptr;
  LoopDevices* loops = nullptr;
  Mounter* mounter = nullptr;
  Formatter* formatter = nullptr;
  Freezer* freezer = nullptr;
  HealthRegistry* health = nullptr;  // may be null: no kernel log faults
  OperationLocks locks;

  // Why the pool cannot be trusted with writes, or "" (pool not mounted
  // where an image is configured, not writable, fsync failing, kernel
  // errors on the pool image's loop device).
  std::string PoolFault() const;

  // Why the volume is abnormal, or "": the pool's fault, a missing image,
  // kernel errors on its loop device, ext4's recorded errors, a staged
  // filesystem that refuses an fsync (shut down, journal aborted).
  std::string VolumeFault(const VolumeRecord& r) const;

 private:
  std::string LookForPoolFault() const;
  std::string RecentPoolFault() const;  // PoolFault, at most a second old
  mutable absl::Mutex pool_fault_mu_;
  mutable std::string pool_fault_ ABSL_GUARDED_BY(pool_fault_mu_);
  mutable absl::Time pool_fault_at_ ABSL_GUARDED_BY(pool_fault_mu_) = absl::InfinitePast();

 public:
  // {topology.berth.io/node: <node id>}
  ::csi::v1::Topology NodeTopology() const;

  // Runs a clone of `source` with its filesystem frozen when it is staged
  // here as a mounted filesystem (thaw guaranteed, also on error).
  Quiesce QuiesceFor(const VolumeRecord& source);
};

// Freezes every path in `paths` (in order), runs `fn`, thaws all that were
// frozen (in reverse order) whatever `fn` returned. A failed freeze thaws
// what was frozen and returns the error without running `fn`.
absl::Status WithFrozen(Freezer& freezer, const std::vector<std::string>& paths,
                        const std::function<absl::Status()>& fn);

// ---- Checks on CSI messages shared by the services ----

// The filesystem a capability asks for, "ext4" when it names none.
std::string RequestedFsType(const ::csi::v1::VolumeCapability& cap);

// INVALID_ARGUMENT unless `cap` names an access type and a mode berth-csi
// supports (single-node modes: volumes are local to one node) and a
// supported filesystem.
absl::Status CheckCapability(const ::csi::v1::VolumeCapability& cap);

// CheckCapability for GetCapacity: a capability without an access type or
// with access mode UNKNOWN (or none) constrains only what it names.
absl::Status CheckCapabilityForCapacity(const ::csi::v1::VolumeCapability& cap);

// Whether `cap` can be served by the volume `r` (same access type, same
// filesystem); a message saying why not otherwise.
absl::Status CheckCapabilityFits(const ::csi::v1::VolumeCapability& cap, const VolumeRecord& r);

bool IsReadOnlyMode(const ::csi::v1::VolumeCapability& cap);

// A volume ID from a request: INVALID_ARGUMENT when malformed (see ids.h),
// NOT_FOUND when it cannot be one of this pool's.
absl::Status CheckVolumeId(std::string_view field, const std::string& id);

// Fills a CSI Volume message from a record.
void FillVolume(const VolumeRecord& r, const DriverContext& ctx, ::csi::v1::Volume* out);
void FillSnapshot(const SnapshotRecord& r, ::csi::v1::Snapshot* out);

}  // namespace berth::driver
