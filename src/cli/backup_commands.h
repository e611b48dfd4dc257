// berth backup / berth restore: Velero's CLI shapes over berth's
// backup.berth.io/v1 kinds (api/types/backup.h, docs/api.md).
//
//   berth backup create NAME [--include-namespaces a,b] [--selector app=db]
//                            [--ttl 24h] [--storage-location L] [--wait]
//   berth backup get [NAME]            the table `kubectl get backups` prints
//   berth backup describe NAME         spec, phase, progress, errors, volumes, events
//   berth backup delete NAME           the backup controller then removes its data
//   berth backup verify [NAME] [--storage-location L]
//   berth restore create NAME --from-backup B [--namespace-mappings a:b,c:d]
//                             [--target-node N] [--wait]
//   berth restore get [NAME] | describe NAME
//
// Everything but verify goes through the API. verify opens the location's
// repository itself (berth runs on the machine that holds it, as root) and
// re-reads every chunk: the API server never reads backup data.
//
// --wait follows the object on a watch until its phase is final: on a
// terminal one rewritten line ("InProgress 1.2Gi/4Gi"), else a line per
// change. OK when it ends Completed; FAILED_PRECONDITION naming the phase
// and the reason otherwise (the CLI's exit code 1).
//
// Thread-safety: the commands run on main's thread with its ApiClient.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "api/kinds.h"
#include "http/api_client.h"
#include "nlohmann/json.hpp"

namespace berth::cli {

struct BackupCreateOptions {
  std::string name = "";
  std::vector<std::string> include_namespaces = {};  // --include-namespaces a,b (or repeated)
  std::string selector = "";                         // --selector: a label selector of pods ("app=db,tier in (a,b)")
  std::string ttl = "";                              // --ttl: a Go duration; "": the API's default (720h0m0s)
  std::string storage_location = "";                 // --storage-location; "": the default location
  bool wait = false;
};
// Creates the Backup ("backup.backup.berth.io/NAME created"), then with
// wait follows it (WaitForBackupKind).
absl::Status BackupCreate(http::ApiClient& client, const BackupCreateOptions& options, std::ostream& out,
                          bool terminal);

struct RestoreCreateOptions {
  std::string name = "";
  std::string from_backup = "";                      // --from-backup (required)
  std::vector<std::string> namespace_mappings = {};  // --namespace-mappings old:new,... (or repeated)
  std::string target_node = "";                      // --target-node
  bool wait = false;
};
absl::Status RestoreCreate(http::ApiClient& client, const RestoreCreateOptions& options, std::ostream& out,
                           bool terminal);

// `kind`: Backup, Restore (or any backup.berth.io kind). The table kubectl
// get prints: every object, or the one named.
absl::Status BackupKindGet(http::ApiClient& client, const api::KindInfo& kind, const std::string& name,
                           std::ostream& out);
// The object for people: what was asked, where it stands, what failed.
absl::Status BackupKindDescribe(http::ApiClient& client, const api::KindInfo& kind, const std::string& name,
                                std::ostream& out);
absl::Status BackupDelete(http::ApiClient& client, const std::string& name, std::ostream& out);

// Follows `kind`/`name` until its status.phase is final (Completed,
// PartiallyFailed, Failed, FailedValidation), printing its progress.
absl::Status WaitForBackupKind(http::ApiClient& client, const api::KindInfo& kind, const std::string& name,
                               std::ostream& out, bool terminal);

// Verifies backup `name` ("" = all backups) in the repository of location
// `location` ("": the backup's location if `name` is given, else the
// default one). Prints what was checked and each problem; DATA_LOSS when
// there are problems.
absl::Status BackupVerify(http::ApiClient& client, const std::string& name, const std::string& location,
                          std::ostream& out);

// "1.2Gi/4Gi" from status.progress (bytesDone/totalBytes), "" before the
// total is known.
std::string ProgressText(const nlohmann::json& object);

}  // namespace berth::cli
