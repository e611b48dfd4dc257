// berth-csi assembled: the pool, the kernel interfaces and the five CSI
// services, plus the repair pass that runs at every start.
//
//   LinuxLoopDevices loops; LinuxMounter mounter; ...
//   auto driver = Driver::Open(options, {&loops, &mounter, &formatter, &freezer});
//   CsiServer::Start({.endpoint = options.endpoint}, (*driver)->services());
//
// Thread-safety: thread-safe once opened.
#pragma once

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "driver/context.h"
#include "driver/controller_service.h"
#include "driver/group_controller_service.h"
#include "driver/health.h"
#include "driver/identity_service.h"
#include "driver/node_service.h"
#include "driver/snapshot_metadata_service.h"
#include "grpcpp/impl/service_type.h"

namespace berth::driver {

class Driver {
 public:
  struct Deps {
    LoopDevices* loops;
    Mounter* mounter;
    Formatter* formatter;
    Freezer* freezer;
  };

  // Mounts the pool image (if configured), opens and repairs the pool, and
  // repairs node state: detaches loop devices of pool images that nothing
  // uses and removes group-snapshot members whose group was never recorded.
  static absl::StatusOr<std::unique_ptr<Driver>> Open(DriverOptions options, Deps deps);

  std::vector<grpc::Service*> services();
  Pool& pool() { return *pool_; }
  // The options in force (pool and kubelet root canonical).
  const DriverOptions& options() const { return ctx_.options; }
  ControllerService& controller() { return *controller_; }
  NodeService& node() { return *node_; }
  GroupControllerService& group_controller() { return *group_; }
  SnapshotMetadataService& snapshot_metadata() { return *snapshot_metadata_; }

  // Probe: ready while the pool is healthy (DriverContext::PoolFault): mounted
  // if it is an image, writable, fsync working, no kernel errors on its
  // loop device.
  absl::StatusOr<bool> Ready();

  // Follows the kernel log for I/O errors on loop devices (health.h) until
  // the driver is destroyed.
  void WatchKernelLog();
  HealthRegistry& health() { return health_; }
  const DriverContext& context() const { return ctx_; }

 private:
  Driver() = default;
  absl::Status Repair();

  std::unique_ptr<Pool> pool_;
  HealthRegistry health_;
  DriverContext ctx_;
  std::unique_ptr<KernelLogWatcher> kernel_log_;
  std::unique_ptr<IdentityService> identity_;
  std::unique_ptr<ControllerService> controller_;
  std::unique_ptr<NodeService> node_;
  std::unique_ptr<GroupControllerService> group_;
  std::unique_ptr<SnapshotMetadataService> snapshot_metadata_;
};

}  // namespace berth::driver
