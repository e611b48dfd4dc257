// The generic ephemeral volume controller (kube-controller-manager's
// ephemeral-volume controller): for every pod volume with
// `ephemeral.volumeClaimTemplate`, the claim `<pod>-<volume>` in the pod's
// namespace, made from the template (labels, annotations, spec) and
// controlled by the pod — so the store's garbage collector deletes it with
// the pod, and the scheduler, binder and node agent treat it as any claim.
//
//   EphemeralController c(registry, pods, claims, {});
//   c.RegisterHandlers();  // before the informers start
//   c.Start();
//
// A claim of that name the pod does not control is left alone: the pod
// gets a Warning event and the sync is retried with backoff (the scheduler
// keeps such a pod unschedulable with the same message).
//
// Thread-safety: Start/Stop from one thread; syncs run on the workers.
#pragma once

#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "apiserver/registry.h"
#include "client/events.h"
#include "client/informer.h"
#include "client/workqueue.h"

namespace berth::controllers {

using namespace ::berth::client;  // the controllers' own client library

class EphemeralController {
 public:
  struct Options {
    int workers = 2;
  };
  EphemeralController(apiserver::Registry& registry, Informer& pods, Informer& claims, Options options);
  ~EphemeralController();  // Stop()

  void RegisterHandlers();
  void Start();
  void Stop();

  // Ensures the claims of pod `key` ("ns/name").
  absl::Status SyncPod(const std::string& key);

 private:
  apiserver::Registry& registry_;
  Informer& pods_;
  Informer& claims_;
  const Options options_;
  EventRecorder events_;
  WorkQueue queue_;
  std::vector<std::thread> workers_;
};

}  // namespace berth::controllers
