// The Schedule controller (Velero's schedule controller, for berth's
// backup.berth.io/v1 Schedule): makes a Backup from spec.template each time
// spec.schedule (a cron expression, common/cron.h, in UTC) comes due.
//
//   Schedule "nightly" {schedule: "0 2 * * *", template: {...}}
//     ──validate──▶ status.phase FailedValidation + validationErrors
//     ──ok──▶ Enabled; at 02:00 UTC: Backup "nightly-20261128020000"
//             (labelled backup.berth.io/schedule-name=nightly, no owner:
//             deleting the schedule keeps its backups, as Velero's default),
//             then status.lastBackup = that time
//
// When is a backup due? At the first time the cron expression gives after
// status.lastBackup, or after the schedule's creation for the first one
// (cron's meaning; Velero's default of one backup at once on creation is
// its skipImmediately: false, not followed). Due times missed while berth
// was not running are caught up with one backup when it starts, not one
// per missed time (Velero does the same). A paused schedule makes none and
// catches nothing up when resumed beyond that one backup.
//
// Crash safety: the backup is created before lastBackup is written. If the
// process stops in between, the next sync finds the backup (this
// schedule's label, created at or after the due time) and records it
// instead of making a second one.
//
// Time is the injected clock's; each schedule is re-queued for its next due
// time on the work queue's clock (tests move a FakeClock).
//
// Thread-safety: Start/Stop from one thread; syncs run on the worker.
#pragma once

#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "apiserver/api.h"
#include "client/events.h"
#include "client/informer.h"
#include "client/workqueue.h"
#include "common/clock.h"

namespace berth::controllers {

class ScheduleController {
 public:
  struct Options {
    Clock* clock = nullptr;  // null: the real clock
  };

  ScheduleController(apiserver::Api& registry, client::Informer& schedules, Options options);
  ~ScheduleController();  // Stop()

  void RegisterHandlers();
  void Start();
  void Stop();

  // Validates the schedule `name`, creates its backup when one is due and
  // re-queues it for the next due time. OK for a schedule that is gone.
  absl::Status SyncSchedule(const std::string& name);

 private:
  // Immutable after construction.
  apiserver::Api& registry_;
  client::Informer& schedules_;
  const Options options_;
  Clock& clock_;
  client::EventRecorder events_;
  client::WorkQueue queue_;  // schedule names
  std::vector<std::thread> workers_;
};

}  // namespace berth::controllers
