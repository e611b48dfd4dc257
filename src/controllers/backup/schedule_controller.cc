#include "controllers/backup/schedule_controller.h"

#include <algorithm>
#include <optional>
#include <set>

#include "api/types/backup.h"
#include "client/object.h"
#include "client/typed.h"
#include "client/writes.h"
#include "common/cron.h"
#include "common/status.h"
#include "common/strings.h"
#include "spdlog/spdlog.h"

namespace berth::controllers {
namespace {

using client::K;
using nlohmann::json;
namespace types = ::berth::api::types;

const api::KindInfo& Schedules() { return K("schedules", types::kBackupGroup); }
const api::KindInfo& Backups() { return K("backups", types::kBackupGroup); }

// What the API server cannot judge from the field alone. The cron
// expression is checked there too; a stored schedule written before that
// rule, or by a newer berth, still gets a clear status here.
std::vector<std::string> Validate(const types::Schedule& schedule) {
  std::vector<std::string> errors;
  if (absl::StatusOr<CronSchedule> cron = CronSchedule::Parse(schedule.spec.schedule); !cron.ok()) {
    errors.push_back(StrCat("invalid schedule: ", cron.status().message()));
  }
  const auto& t = schedule.spec.template_;
  for (const auto& ns : t.included_namespaces) {
    if (std::find(t.excluded_namespaces.begin(), t.excluded_namespaces.end(), ns) != t.excluded_namespaces.end()) {
      errors.push_back(StrCat("invalid template: namespace ", ns, " is both included and excluded"));
    }
  }
  return errors;
}

}  // namespace

ScheduleController::ScheduleController(apiserver::Api& registry, client::Informer& schedules, Options options)
    : registry_(registry),
      schedules_(schedules),
      options_(options),
      clock_(options_.clock != nullptr ? *options_.clock : RealClock()),
      events_(registry, "schedule-controller"),
      queue_(client::WorkQueue::Options{.clock = &clock_}) {}

ScheduleController::~ScheduleController() { Stop(); }

void ScheduleController::RegisterHandlers() {
  schedules_.AddHandlers({
      .on_add = [this](const json& o) { queue_.Add(client::Name(o)); },
      // Status writes come back here too; a sync with nothing to do writes
      // nothing, so this does not loop.
      .on_update = [this](const json&, const json& o) { queue_.Add(client::Name(o)); },
      .on_delete = nullptr,
  });
}

void ScheduleController::Start() {
  client::StartWorkers(workers_, 1, queue_, "schedule controller",
                       [this](const std::string& name) { return SyncSchedule(name); });
}

void ScheduleController::Stop() {
  queue_.ShutDown();
  for (auto& w : workers_) w.join();
  workers_.clear();
}

absl::Status ScheduleController::SyncSchedule(const std::string& name) {
  std::shared_ptr<const json> stored = schedules_.GetSharedByKey(name);
  if (!stored || client::Deleting(*stored)) return absl::OkStatus();
  BERTH_ASSIGN_OR_RETURN(types::Schedule schedule, client::DecodeAs<types::Schedule>(*stored));
  const std::string uid = schedule.metadata.uid;

  const std::vector<std::string> errors = Validate(schedule);
  const std::string phase = errors.empty() ? "Enabled" : "FailedValidation";
  if (schedule.status.phase != phase || schedule.status.validation_errors != errors) {
    BERTH_RETURN_IF_ERROR(client::MutateTyped<types::Schedule>(
        registry_, Schedules(), "", name, uid, apiserver::Subresource::kStatus, [&](types::Schedule& s) {
          s.status.phase = phase;
          s.status.validation_errors = errors;
          return true;
        }));
    if (!errors.empty()) {
      events_.Record(client::IdentityOf(schedule), "Warning", "FailedValidation", errors.front());
    }
  }
  if (!errors.empty() || schedule.spec.paused) return absl::OkStatus();

  const CronSchedule cron = *CronSchedule::Parse(schedule.spec.schedule);  // validated above
  std::optional<absl::Time> last = client::ParseRfc3339(schedule.status.last_backup);
  if (!last) last = client::ParseRfc3339(schedule.metadata.creation_timestamp);
  if (!last) {
    return absl::InternalError(StrCat("schedule ", name, " has neither status.lastBackup nor a creationTimestamp"));
  }
  const absl::Time due = cron.Next(*last);
  const absl::Time now = clock_.Now();
  if (due > now) {
    queue_.AddAfter(name, due - now);
    return absl::OkStatus();
  }

  // Due (or overdue: berth was down). A backup of this schedule created at
  // or after the due time is this run's, made before a crash; else make it.
  absl::Time made = now;
  std::string backup_name;
  apiserver::ListOptions mine;
  BERTH_ASSIGN_OR_RETURN(mine.labels,
                         api::LabelSelector::Parse(StrCat(types::kScheduleNameLabel, "=", schedule.metadata.name)));
  BERTH_ASSIGN_OR_RETURN(apiserver::ListPage page, registry_.List(Backups(), "", mine));
  for (const json& b : page.items) {
    std::optional<absl::Time> created = client::ParseRfc3339(client::Str(b, {"metadata", "creationTimestamp"}));
    // Whole seconds: creationTimestamp has no fraction, `due` never has.
    if (created && *created >= due && (backup_name.empty() || *created > made)) {
      made = *created;
      backup_name = client::Name(b);
    }
  }
  if (backup_name.empty()) {
    types::Backup backup;
    backup.api_version = std::string(types::kBackupApiVersion);
    backup.kind = std::string(types::Backup::kKind);
    backup.metadata.name =
        StrCat(schedule.metadata.name, "-", absl::FormatTime("%Y%m%d%H%M%S", now, absl::UTCTimeZone()));
    backup.metadata.labels[std::string(types::kScheduleNameLabel)] = schedule.metadata.name;
    backup.spec = schedule.spec.template_;
    auto created = registry_.Create(Backups(), "", types::Encode(backup));
    if (!created.ok() && created.status().code() != absl::StatusCode::kAlreadyExists) {
      events_.Record(client::IdentityOf(schedule), "Warning", "FailedBackup",
                     StrCat("creating backup ", backup.metadata.name, ": ", created.status().message()));
      return created.status();
    }
    backup_name = backup.metadata.name;
    made = absl::FromUnixSeconds(absl::ToUnixSeconds(now));
    spdlog::info("schedule {}: created backup {}", name, backup_name);
    events_.Record(client::IdentityOf(schedule), "Normal", "BackupCreated", StrCat("Created backup ", backup_name));
  }
  const std::string made_text = client::Rfc3339(made);
  BERTH_RETURN_IF_ERROR(client::MutateTyped<types::Schedule>(registry_, Schedules(), "", name, uid,
                                                             apiserver::Subresource::kStatus, [&](types::Schedule& s) {
                                                               if (s.status.last_backup == made_text) return false;
                                                               s.status.last_backup = made_text;
                                                               return true;
                                                             }));
  const absl::Time next = cron.Next(made);
  queue_.AddAfter(name, std::max(absl::ZeroDuration(), next - clock_.Now()));
  return absl::OkStatus();
}

}  // namespace berth::controllers
