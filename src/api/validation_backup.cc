// Validation of backup.berth.io/v1 (types/backup.h). Velero checks most of
// these in its controllers and marks the object FailedValidation; berth
// refuses them at the API instead — a bad ttl, path or schedule is the
// writer's mistake, best reported to the writer (HTTP 422) while they are
// still looking. What needs other objects (the named location exists, the
// backup is Completed) is left to the controllers, as in Velero. The one
// cross-object rule, at most one default location, is the registry's.
#include <string>
#include <string_view>

#include "api/names.h"
#include "api/selector.h"
#include "api/validation_internal.h"
#include "common/cron.h"
#include "common/strings.h"
#include "common/units.h"

namespace berth::api::validation_internal {
namespace {

// Names in includedNamespaces / excludedNamespaces: namespaces, or "*".
void NamespaceList(Errors& errs, const std::string& field, const json& list) {
  if (!list.is_array()) return;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string name = String(list[i]);
    if (name == "*") continue;
    errs.FromStatus(ValidateDns1123Label(StrCat(field, "[", i, "]"), name));
  }
}

// A Go duration of at least zero, or nothing.
void Duration(Errors& errs, const std::string& field, const json& value) {
  if (value.is_null() || String(value).empty()) return;
  absl::StatusOr<absl::Duration> d = ParseGoDuration(String(value));
  if (!d.ok()) {
    errs.InvalidValue(field, value, StrCat("must be a duration such as 720h0m0s or 30s (", d.status().message(), ")"));
  } else if (*d < absl::ZeroDuration()) {
    errs.InvalidValue(field, value, "must not be negative");
  }
}

void Phase(Errors& errs, const std::string& field, const json& value, const std::vector<std::string_view>& phases) {
  Enum(errs, field, value, phases);
}

// A BackupSpec at `prefix` ("spec" or "spec.template").
void BackupSpec(Errors& errs, const std::string& prefix, const json& spec) {
  NamespaceList(errs, StrCat(prefix, ".includedNamespaces"), Get(spec, "includedNamespaces"));
  NamespaceList(errs, StrCat(prefix, ".excludedNamespaces"), Get(spec, "excludedNamespaces"));
  if (const json& sel = Get(spec, "labelSelector"); !sel.is_null()) {
    if (absl::StatusOr<LabelSelector> parsed = LabelSelector::FromJson(sel); !parsed.ok()) {
      errs.Add(StrCat(prefix, ".labelSelector"), StrCat("Invalid value: ", std::string(parsed.status().message())));
    }
  }
  Duration(errs, StrCat(prefix, ".ttl"), Get(spec, "ttl"));
  if (std::string loc = String(Get(spec, "storageLocation")); !loc.empty()) {
    errs.FromStatus(ValidateDns1123Subdomain(StrCat(prefix, ".storageLocation"), loc));
  }
}

}  // namespace

void ValidateBackupStorageLocation(const json& obj, Errors& errs) {
  const json& spec = Get(obj, "spec");
  Enum(errs, "spec.provider", Get(spec, "provider"), {"filesystem"}, /*required=*/true);
  const json& config = Get(spec, "config");
  const json& path = Get(config, "path");
  if (String(path).empty()) {
    errs.Required("spec.config[path]", "the directory of the repository");
  } else {
    const std::string p = String(path);
    // Lexically canonical: what the location names is the directory the
    // repository is in, compared as text by everything that reads it
    // (another berth up, the CLI's verify), so no aliases of one path.
    bool canonical = p.front() == '/' && (p.size() == 1 || p.back() != '/') && p.find("//") == std::string::npos;
    for (std::string_view part : Split(p, '/')) {
      if (part == "." || part == "..") canonical = false;
    }
    if (!canonical) {
      errs.InvalidValue("spec.config[path]", path,
                        "must be an absolute path without trailing '/', '//', '.' or '..' components");
    }
  }
  for (const auto& [key, value] : config.items()) {  // null: no items
    if (key != "path") errs.Forbidden(StrCat("spec.config[", key, "]"), "the filesystem provider takes only path");
  }
  Enum(errs, "spec.accessMode", Get(spec, "accessMode"), {"ReadWrite", "ReadOnly"});
  Phase(errs, "status.phase", Path(obj, {"status", "phase"}), {"Available", "Unavailable"});
}

void ValidateBackup(const json& obj, Errors& errs) {
  BackupSpec(errs, "spec", Get(obj, "spec"));
  Phase(errs, "status.phase", Path(obj, {"status", "phase"}),
        {"New", "FailedValidation", "InProgress", "Completed", "PartiallyFailed", "Failed", "Deleting"});
}

void ValidateRestore(const json& obj, Errors& errs) {
  const json& spec = Get(obj, "spec");
  const std::string backup = String(Get(spec, "backupName"));
  const std::string schedule = String(Get(spec, "scheduleName"));
  if (backup.empty() == schedule.empty()) {
    errs.Add("spec", "Invalid value: \"object\": exactly one of backupName and scheduleName must be set");
  }
  if (!backup.empty()) errs.FromStatus(ValidateDns1123Subdomain("spec.backupName", backup));
  if (!schedule.empty()) errs.FromStatus(ValidateDns1123Subdomain("spec.scheduleName", schedule));
  NamespaceList(errs, "spec.includedNamespaces", Get(spec, "includedNamespaces"));
  for (const auto& [from, to] : Get(spec, "namespaceMapping").items()) {
    errs.FromStatus(ValidateDns1123Label(StrCat("spec.namespaceMapping[", from, "]"), from));
    errs.FromStatus(ValidateDns1123Label(StrCat("spec.namespaceMapping[", from, "]"), String(to)));
  }
  if (std::string node = String(Get(spec, "targetNode")); !node.empty()) {
    errs.FromStatus(ValidateDns1123Subdomain("spec.targetNode", node));
  }
  Phase(errs, "status.phase", Path(obj, {"status", "phase"}),
        {"New", "FailedValidation", "InProgress", "Completed", "PartiallyFailed", "Failed"});
}

void ValidateSchedule(const json& obj, Errors& errs) {
  const json& spec = Get(obj, "spec");
  const json& schedule = Get(spec, "schedule");
  if (String(schedule).empty()) {
    errs.Required("spec.schedule", "a cron expression such as \"0 2 * * *\", or \"@every 6h\"");
  } else if (absl::StatusOr<CronSchedule> cron = CronSchedule::Parse(String(schedule)); !cron.ok()) {
    errs.InvalidValue("spec.schedule", schedule, std::string(cron.status().message()));
  }
  BackupSpec(errs, "spec.template", Get(spec, "template"));
  Phase(errs, "status.phase", Path(obj, {"status", "phase"}), {"New", "Enabled", "FailedValidation"});
}

}  // namespace berth::api::validation_internal
