// Pre-provisioned snapshots on a cluster with distributed snapshotting.
//
// There, each node's csi-snapshotter acts only on the VolumeSnapshotContents
// labelled snapshot.storage.kubernetes.io/managed-by=<its node>, and the
// snapshot-controller sets that label only on the contents it creates for a
// dynamic snapshot (the node of the source volume's PV). A content a user
// writes for an existing snapshot (spec.source.snapshotHandle) carries no
// label, so no csi-snapshotter ever asks the driver about it and its
// VolumeSnapshot never becomes ready.
//
// The adopter runs in each node's berth-csi: it lists the contents of this
// driver that have a snapshot handle and no managed-by label, and labels
// those whose snapshot this node's pool holds with this node's name, so
// that this node's csi-snapshotter takes them over (ListSnapshots for their
// status, DeleteSnapshot when they go). A handle is looked up only when it
// has the shape of berth's snapshot IDs; a handle no node holds stays
// unlabelled (csi-snapshotter would fail it anyway). The label write carries
// the content's resourceVersion, so a concurrent change wins and the next
// pass looks again.
//
//   SnapshotContentAdopter adopter({.driver_name = ..., .node_name = ...}, pool,
//                                  [] { return InClusterApiClient(); });
//   adopter.Start();  // a pass now, then every `period`
//
// Thread-safety: Start/Stop from one thread; RunOnce is thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "driver/pool/pool.h"
#include "http/api_client.h"

namespace berth::driver {

// The label csi-snapshotter (--node-deployment) selects contents by.
inline constexpr char kManagedByLabel[] = "snapshot.storage.kubernetes.io/managed-by";

// A client for the cluster's API server from inside a pod: the service
// account's token and CA (/var/run/secrets/kubernetes.io/serviceaccount) and
// KUBERNETES_SERVICE_HOST/PORT. FAILED_PRECONDITION naming what is missing.
absl::StatusOr<std::unique_ptr<http::ApiClient>> InClusterApiClient();

class SnapshotContentAdopter {
 public:
  struct Options {
    std::string driver_name;
    std::string node_name;  // the Node object's name (the value of the label)
    absl::Duration period = absl::Seconds(10);
  };
  // A new client per pass: a projected service account token is rotated,
  // and re-reading it each time picks that up.
  using ClientFactory = std::function<absl::StatusOr<std::unique_ptr<http::ApiClient>>()>;

  SnapshotContentAdopter(Options options, const Pool& pool, ClientFactory client, Clock& clock = RealClock());
  ~SnapshotContentAdopter();  // Stop()

  // Runs RunOnce now and then every period on a thread of its own, logging
  // failures (the next pass retries).
  void Start();
  void Stop();

  // One pass. Returns how many contents were labelled.
  absl::StatusOr<int> RunOnce();

 private:
  void Loop();

  const Options options_;
  const Pool& pool_;
  const ClientFactory client_;
  Clock& clock_;
  std::thread thread_;

  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace berth::driver
