// The berth command line's flags, in kubectl's shapes: the global flags
// (--data-dir, --kubeconfig) are accepted anywhere on the line (`berth get
// pvc --data-dir D` as `berth --data-dir D get pvc`), and the commands that
// talk to the API (get, describe, apply, delete, wait, events, patch, edit,
// explain, api-resources, version, completion) are CLI11 subcommands whose
// values this class holds. main.cc adds the commands that run berth (up,
// serve, node-agent, logs, exec, image, down) beside them.
//
// Exit codes (main): 0 success, 1 any error (kubectl's), the command's own
// code for `berth exec`.
//
// Thread-safety: single-threaded (one per process).
#pragma once

#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "cli/commands.h"
#include "cli/get.h"
#include "http/api_client.h"

namespace berth::cli {

struct GlobalFlags {
  std::string data_dir = "/var/lib/berth";
  std::string kubeconfig;
};

// Adds the global flags to `app` and lets every subcommand added after this
// call hand flags it does not know up to `app` (CLI11 fallthrough).
void AddGlobalFlags(CLI::App& app, GlobalFlags& flags);

class ClientCommands {
 public:
  // Adds the API commands to `app` (after AddGlobalFlags).
  explicit ClientCommands(CLI::App& app);
  ClientCommands(const ClientCommands&) = delete;
  ClientCommands& operator=(const ClientCommands&) = delete;

  // Whether one of these commands was parsed.
  bool parsed() const;
  // Runs the parsed command; `connect` is called only by commands that
  // need the API server. `stdout_is_tty` turns on apply's progress.
  absl::Status Run(const std::function<absl::StatusOr<http::ApiClient*>()>& connect, std::ostream& out,
                   std::ostream& err, bool stdout_is_tty);

  // Parsed values, for tests.
  const GetOptions& get_options() const { return get_; }
  const DeleteOptions& delete_options() const { return delete_; }

 private:
  CLI::App& app_;
  CLI::App* get_cmd_;
  CLI::App* describe_cmd_;
  CLI::App* apply_cmd_;
  CLI::App* delete_cmd_;
  CLI::App* wait_cmd_;
  CLI::App* events_cmd_;
  CLI::App* patch_cmd_;
  CLI::App* edit_cmd_;
  CLI::App* explain_cmd_;
  CLI::App* api_resources_cmd_;
  CLI::App* version_cmd_;
  CLI::App* completion_cmd_;

  GetOptions get_;
  DeleteOptions delete_;
  Target target_;
  std::vector<std::string> args_, files_;
  std::string selector_, output_, timeout_ = "30s", delete_timeout_ = "60s";
  std::string for_condition_, for_object_, patch_, patch_type_ = "strategic", shell_;
  std::string namespaced_;  // api-resources --namespaced=true|false
  int grace_period_ = -1;
  bool force_ = false, client_only_ = false;
};

// A completion script for `shell` (bash or zsh) covering `app`'s commands,
// their flags, kinds, and object names (asked from the server as typed).
absl::StatusOr<std::string> CompletionScript(const CLI::App& app, const std::string& shell);

}  // namespace berth::cli
