#include "cli/client_app.h"

#include <cstdlib>
#include <iostream>

#include "common/status.h"
#include "common/strings.h"

namespace berth::cli {

void AddGlobalFlags(CLI::App& app, GlobalFlags& flags) {
  app.add_option("--data-dir", flags.data_dir, "berth's data directory (API socket, state)")->capture_default_str();
  app.add_option("--kubeconfig", flags.kubeconfig, "talk to the API over TCP with this kubeconfig");
  // Subcommands inherit this: what they do not know goes to the parent,
  // so the global flags may come after the command.
  app.fallthrough();
}

namespace {

void AddNamespace(CLI::App* cmd, Target& t, bool all) {
  cmd->add_option("-n,--namespace", t.namespace_, "namespace (default: the context's)");
  if (all) cmd->add_flag("-A,--all-namespaces", t.all_namespaces, "across all namespaces");
}

absl::StatusOr<absl::Duration> ParseTimeout(const std::string& flag, const std::string& text) {
  absl::Duration d;
  if (!absl::ParseDuration(text, &d) || d < absl::ZeroDuration()) {
    // kubectl also takes plain seconds.
    int64_t seconds = 0;
    if (absl::SimpleAtoi(text, &seconds) && seconds >= 0) return absl::Seconds(seconds);
    return absl::InvalidArgumentError(StrCat(flag, " must be a duration like 30s, 5m or 1h"));
  }
  return d;
}

}  // namespace

ClientCommands::ClientCommands(CLI::App& app) : app_(app) {
  // get
  get_cmd_ = app.add_subcommand("get", "list objects or show some (kubectl get)");
  get_cmd_->add_option("args", get_.args, "KIND[,KIND...] [NAME...] | KIND/NAME...")->required();
  get_cmd_->add_option("-o,--output", get_.output,
                       "wide|yaml|json|name|jsonpath=TEMPLATE|custom-columns=HEADER:PATH,...");
  get_cmd_->add_option("-l,--selector", get_.label_selector, "label selector (app=web,tier!=db, env in (a,b))");
  get_cmd_->add_option("--field-selector", get_.field_selector, "field selector (status.phase=Bound,metadata.name!=x)");
  get_cmd_->add_option("--sort-by", get_.sort_by, "sort by a JSONPath ({.metadata.name}, .spec.capacity.storage)");
  get_cmd_->add_flag("-w,--watch", get_.watch, "after listing, watch for changes");
  get_cmd_->add_flag("--watch-only", get_.watch_only, "watch for changes without listing first");
  get_cmd_->add_flag("--no-headers", get_.no_headers, "tables and custom columns without their header line");
  get_cmd_->add_flag("--ignore-not-found", get_.ignore_not_found, "a name that does not exist is not an error");
  AddNamespace(get_cmd_, get_.target, true);

  // describe
  describe_cmd_ = app.add_subcommand("describe", "show objects in detail, with their events");
  describe_cmd_->add_option("args", args_, "KIND [NAME...] | KIND/NAME...")->required();
  describe_cmd_->add_option("-l,--selector", selector_, "label selector");
  AddNamespace(describe_cmd_, target_, true);

  // apply
  apply_cmd_ = app.add_subcommand("apply", "create or update objects from manifests");
  apply_cmd_->add_option("-f,--filename", files_, "FILE, DIR or - (stdin)")->required();
  AddNamespace(apply_cmd_, target_, false);

  // delete
  delete_cmd_ = app.add_subcommand("delete", "delete objects by name, selector, --all or from manifests");
  delete_cmd_->add_option("args", delete_.args, "KIND [NAME...] | KIND/NAME...");
  delete_cmd_->add_option("-f,--filename", delete_.files, "FILE, DIR or -");
  delete_cmd_->add_flag("--all", delete_.all, "every object of the kind in the namespace");
  delete_cmd_->add_option("-l,--selector", delete_.label_selector, "label selector");
  delete_cmd_->add_flag("--wait{true}", delete_.wait, "wait until the objects are gone (default true; --wait=false)");
  delete_cmd_->add_option("--timeout", delete_timeout_, "how long --wait waits")->capture_default_str();
  delete_cmd_->add_option(
      "--grace-period", grace_period_,
      "seconds a pod's containers get to stop after SIGTERM (-1: the pod's own; 0 only with --force)");
  delete_cmd_->add_flag("--force", force_, "with --grace-period=0: remove at once, without waiting for the node");
  delete_cmd_->add_flag("--ignore-not-found", delete_.ignore_not_found, "a missing object is not an error");
  AddNamespace(delete_cmd_, delete_.target, true);

  // wait
  wait_cmd_ = app.add_subcommand("wait", "wait for a condition on an object");
  wait_cmd_->add_option("args", args_, "KIND/NAME | KIND NAME")->required();
  wait_cmd_->add_option("--for", for_condition_, "delete | condition=NAME[=VALUE] | jsonpath='{...}'=VALUE")
      ->required();
  wait_cmd_->add_option("--timeout", timeout_, "give up after this long")->capture_default_str();
  AddNamespace(wait_cmd_, target_, false);

  // events
  events_cmd_ = app.add_subcommand("events", "list events, oldest first");
  events_cmd_->add_option("--for", for_object_, "only events about KIND/NAME");
  AddNamespace(events_cmd_, target_, true);

  // patch
  patch_cmd_ = app.add_subcommand("patch", "change fields of an object");
  patch_cmd_->add_option("args", args_, "KIND NAME | KIND/NAME")->required();
  patch_cmd_->add_option("-p,--patch", patch_, "the patch (JSON or YAML)")->required();
  patch_cmd_->add_option("--type", patch_type_, "strategic|merge|json")->capture_default_str();
  patch_cmd_->add_option("-o,--output", output_, "print the patched object: yaml|json|name|...");
  AddNamespace(patch_cmd_, target_, false);

  // edit
  edit_cmd_ = app.add_subcommand("edit", "edit an object with $KUBE_EDITOR or $EDITOR (default vi)");
  edit_cmd_->add_option("args", args_, "KIND NAME | KIND/NAME")->required();
  AddNamespace(edit_cmd_, target_, false);

  // explain
  explain_cmd_ = app.add_subcommand("explain", "the fields of a kind (KIND[.FIELD...])");
  explain_cmd_->add_option("what", for_object_, "pvc, pvc.spec, persistentvolume.spec.csi ...")->required();

  // api-resources
  api_resources_cmd_ = app.add_subcommand("api-resources", "the kinds the server serves");
  api_resources_cmd_->add_option("-o,--output", output_, "wide|name");
  api_resources_cmd_->add_option("--namespaced", namespaced_, "true|false: only namespaced or cluster-scoped kinds");

  // version
  version_cmd_ = app.add_subcommand("version", "the client's and the server's versions");
  version_cmd_->add_flag("--client", client_only_, "the client's only (no server needed)");
  version_cmd_->add_option("-o,--output", output_, "json|yaml");

  // completion
  completion_cmd_ = app.add_subcommand("completion", "a shell completion script: source <(berth completion bash)");
  completion_cmd_->add_option("shell", shell_, "bash|zsh")->required();
}

bool ClientCommands::parsed() const {
  for (const CLI::App* c : {get_cmd_, describe_cmd_, apply_cmd_, delete_cmd_, wait_cmd_, events_cmd_, patch_cmd_,
                            edit_cmd_, explain_cmd_, api_resources_cmd_, version_cmd_, completion_cmd_}) {
    if (c->parsed()) return true;
  }
  return false;
}

absl::Status ClientCommands::Run(const std::function<absl::StatusOr<http::ApiClient*>()>& connect, std::ostream& out,
                                 std::ostream& err, bool stdout_is_tty) {
  if (completion_cmd_->parsed()) {
    BERTH_ASSIGN_OR_RETURN(std::string script, CompletionScript(app_, shell_));
    out << script;
    return absl::OkStatus();
  }
  if (explain_cmd_->parsed()) return Explain(for_object_, out);
  if (version_cmd_->parsed() && client_only_) return Version(nullptr, output_, out);

  BERTH_ASSIGN_OR_RETURN(http::ApiClient * client, connect());
  if (get_cmd_->parsed()) return Get(*client, get_, out, err);
  if (describe_cmd_->parsed()) return Describe(*client, args_, target_, selector_, out);
  if (apply_cmd_->parsed()) return Apply(*client, files_, target_, out, stdout_is_tty);
  if (delete_cmd_->parsed()) {
    BERTH_ASSIGN_OR_RETURN(delete_.timeout, ParseTimeout("--timeout", delete_timeout_));
    // kubectl's rules: --force alone means 0; 0 without --force means 1.
    std::optional<int64_t> grace;
    if (grace_period_ >= 0) grace = grace_period_;
    if (force_ && !grace) grace = 0;
    if (grace && *grace == 0 && !force_) grace = 1;
    if (grace && *grace == 0) {
      err << "warning: Immediate deletion does not wait for confirmation that the running resource has been "
             "terminated. The resource may continue to run on the cluster indefinitely.\n";
    }
    delete_.grace_period_seconds = grace;
    return Delete(*client, delete_, out);
  }
  if (wait_cmd_->parsed()) {
    BERTH_ASSIGN_OR_RETURN(absl::Duration timeout, ParseTimeout("--timeout", timeout_));
    if (args_.size() > 2) return absl::InvalidArgumentError("wait takes one object: KIND/NAME or KIND NAME");
    const std::string object = args_.size() == 2 ? StrCat(args_[0], "/", args_[1]) : args_[0];
    return Wait(*client, object, for_condition_, target_, timeout, out);
  }
  if (events_cmd_->parsed()) return Events(*client, target_, for_object_, out);
  if (patch_cmd_->parsed()) return Patch(*client, args_, patch_, patch_type_, target_, output_, out);
  if (edit_cmd_->parsed()) {
    const char* editor = std::getenv("KUBE_EDITOR");
    if (editor == nullptr || *editor == '\0') editor = std::getenv("EDITOR");
    return Edit(*client, args_, target_, editor != nullptr && *editor != '\0' ? editor : "vi", out, err);
  }
  if (api_resources_cmd_->parsed()) {
    std::optional<bool> ns;
    if (namespaced_ == "true") ns = true;
    if (namespaced_ == "false") ns = false;
    if (!namespaced_.empty() && !ns) return absl::InvalidArgumentError("--namespaced must be true or false");
    return ApiResources(*client, output_, ns, out);
  }
  if (version_cmd_->parsed()) return Version(client, output_, out);
  return absl::InternalError("no command");
}

}  // namespace berth::cli
