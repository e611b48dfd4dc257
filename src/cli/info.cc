// berth version, api-resources and completion: what the CLI and the server
// are, and what they serve.
#include <ostream>

#include "CLI/CLI.hpp"
#include "absl/strings/str_join.h"
#include "api/codec.h"
#include "api/kinds.h"
#include "api/table.h"
#include "berth/version.h"
#include "cli/client_app.h"
#include "cli/commands.h"
#include "common/status.h"
#include "common/strings.h"

namespace berth::cli {

using http::ApiClient;
using http::ApiResponse;
using nlohmann::json;

absl::Status Version(ApiClient* client, const std::string& output, std::ostream& out) {
  if (!output.empty() && output != "json" && output != "yaml") {
    return absl::InvalidArgumentError("--output must be 'yaml' or 'json'");
  }
  json doc = {{"clientVersion",
               {{"major", "0"},
                {"minor", "1"},
                {"gitVersion", StrCat("v", berth::kVersion)},
                {"compiler", "gcc"},
                {"platform", "linux/amd64"}}}};
  absl::Status server_error;
  if (client != nullptr) {
    auto r = client->Call("GET", "/version");
    if (!r.ok()) {
      server_error = r.status();
    } else if (r->code != 200) {
      server_error = ServerError(*r);
    } else {
      auto body = ParseBody(*r);
      if (body.ok())
        doc["serverVersion"] = std::move(*body);
      else
        server_error = body.status();
    }
  }
  if (output == "json") {
    out << doc.dump(2) << "\n";
  } else if (output == "yaml") {
    out << api::EncodeYaml(doc);
  } else {
    out << "Client Version: " << doc["clientVersion"]["gitVersion"].get<std::string>() << "\n";
    if (doc.contains("serverVersion")) {
      out << "Server Version: " << doc["serverVersion"].value("gitVersion", "") << "\n";
    }
  }
  return server_error;
}

absl::Status ApiResources(ApiClient& client, const std::string& output, std::optional<bool> namespaced,
                          std::ostream& out) {
  if (!output.empty() && output != "wide" && output != "name") {
    return absl::InvalidArgumentError(StrCat("--output ", output, " is not available"));
  }
  // Discovery as kubectl reads it: the core group, then every group.
  std::vector<std::string> group_versions = {"/api/v1"};
  BERTH_ASSIGN_OR_RETURN(ApiResponse gr, client.Call("GET", "/apis"));
  if (gr.code != 200) return ServerError(gr);
  BERTH_ASSIGN_OR_RETURN(json groups, ParseBody(gr));
  for (const auto& g : groups.value("groups", json::array())) {
    group_versions.push_back(StrCat("/apis/", g["preferredVersion"].value("groupVersion", "")));
  }
  std::vector<std::vector<std::string>> lines;
  std::vector<std::string> header = {"NAME", "SHORTNAMES", "APIVERSION", "NAMESPACED", "KIND"};
  if (output == "wide") header.push_back("VERBS");
  lines.push_back(header);
  std::vector<std::string> names;
  for (const auto& path : group_versions) {
    BERTH_ASSIGN_OR_RETURN(ApiResponse r, client.Call("GET", path));
    if (r.code != 200) return ServerError(r);
    BERTH_ASSIGN_OR_RETURN(json list, ParseBody(r));
    const std::string gv = list.value("groupVersion", "v1");
    const size_t slash = gv.find('/');
    const std::string group = slash == std::string::npos ? "" : gv.substr(0, slash);
    for (const auto& res : list.value("resources", json::array())) {
      const std::string name = res.value("name", "");
      if (name.find('/') != std::string::npos) continue;  // subresources
      const bool ns = res.value("namespaced", false);
      if (namespaced && *namespaced != ns) continue;
      std::vector<std::string> shorts;
      for (const auto& s : res.value("shortNames", json::array())) shorts.push_back(s.get<std::string>());
      std::vector<std::string> verbs;
      for (const auto& v : res.value("verbs", json::array())) verbs.push_back(v.get<std::string>());
      std::vector<std::string> line = {name, absl::StrJoin(shorts, ","), gv, ns ? "true" : "false",
                                       res.value("kind", "")};
      if (output == "wide") line.push_back(StrCat("[", absl::StrJoin(verbs, " "), "]"));
      lines.push_back(std::move(line));
      names.push_back(group.empty() ? name : StrCat(name, ".", group));
    }
  }
  if (output == "name") {
    for (const auto& n : names) out << n << "\n";
    return absl::OkStatus();
  }
  out << api::Tabulate(lines);
  return absl::OkStatus();
}

namespace {

// Each subcommand (and sub-subcommand) with its flags, as "cmd|-a --b ...".
void CollectCommands(const CLI::App& app, std::vector<std::string>& out, const std::vector<std::string>& globals) {
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    std::vector<std::string> flags;
    for (const CLI::Option* o : sub->get_options()) {
      if (o->get_positional()) continue;
      for (const auto& s : o->get_snames()) flags.push_back("-" + s);
      for (const auto& l : o->get_lnames()) flags.push_back("--" + l);
    }
    flags.insert(flags.end(), globals.begin(), globals.end());
    std::vector<std::string> subs;
    for (const CLI::App* s : sub->get_subcommands([](const CLI::App*) { return true; })) subs.push_back(s->get_name());
    out.push_back(StrCat(sub->get_name(), "|", absl::StrJoin(flags, " "), " ", absl::StrJoin(subs, " ")));
  }
}

}  // namespace

absl::StatusOr<std::string> CompletionScript(const CLI::App& app, const std::string& shell) {
  if (shell != "bash" && shell != "zsh") {
    return absl::InvalidArgumentError(StrCat("Unsupported shell type \"", shell, "\"."));
  }
  std::vector<std::string> globals;
  for (const CLI::Option* o : app.get_options()) {
    for (const auto& l : o->get_lnames()) {
      if (l != "help" && l != "version") globals.push_back("--" + l);
    }
  }
  std::vector<std::string> commands, entries;
  CollectCommands(app, entries, globals);
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    commands.push_back(sub->get_name());
  std::vector<std::string> kinds;
  for (const auto& k : api::AllKinds()) {
    kinds.emplace_back(k.resource);
    for (auto s : k.short_names) kinds.emplace_back(s);
  }
  std::string script;
  if (shell == "zsh") {
    script +=
        "#compdef berth\n# zsh completion for berth: eval \"$(berth completion zsh)\" or save as _berth\n"
        "autoload -U +X bashcompinit && bashcompinit\n";
  } else {
    script += "# bash completion for berth: source <(berth completion bash)\n";
  }
  script += StrCat("__berth_commands='", absl::StrJoin(commands, " "), "'\n");
  script += StrCat("__berth_kinds='", absl::StrJoin(kinds, " "), "'\n");
  script += "__berth_flags() {\n  case \"$1\" in\n";
  for (const auto& e : entries) {
    const size_t bar = e.find('|');
    script += StrCat("    ", e.substr(0, bar), ") echo '", e.substr(bar + 1), "' ;;\n");
  }
  script += StrCat("    *) echo '", absl::StrJoin(globals, " "), "' ;;\n  esac\n}\n");
  script += R"sh(_berth() {
  local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}"
  local cmd="" kind="" i globals=() positional=0
  for ((i = 1; i < COMP_CWORD; i++)); do
    local w="${COMP_WORDS[i]}"
    case "$w" in
      --data-dir|--kubeconfig|-n|--namespace) globals+=("$w" "${COMP_WORDS[i+1]}"); ((i++)) ;;
      -*) ;;
      *) if [[ -z "$cmd" ]]; then cmd="$w"; else ((positional++)); [[ $positional -eq 1 ]] && kind="$w"; fi ;;
    esac
  done
  case "$prev" in
    --data-dir|--pool|--images-dir|-f|--filename|--kubeconfig|--csi-binary)
      COMPREPLY=($(compgen -f -- "$cur")); return ;;
    -o|--output)
      COMPREPLY=($(compgen -W 'wide yaml json name jsonpath= custom-columns=' -- "$cur")); return ;;
  esac
  if [[ "$cur" == -* || ( -n "$cmd" && "$cmd" != get && "$cmd" != describe && "$cmd" != delete && "$cmd" != edit &&
        "$cmd" != patch && "$cmd" != explain && "$cmd" != wait && "$cmd" != completion && "$cmd" != image ) ]]; then
    COMPREPLY=($(compgen -W "$(__berth_flags "$cmd")" -- "$cur")); return
  fi
  if [[ -z "$cmd" ]]; then COMPREPLY=($(compgen -W "$__berth_commands" -- "$cur")); return; fi
  case "$cmd" in
    completion) COMPREPLY=($(compgen -W 'bash zsh' -- "$cur")); return ;;
    image) COMPREPLY=($(compgen -W "$(__berth_flags image)" -- "$cur")); return ;;
  esac
  if [[ -z "$kind" ]]; then COMPREPLY=($(compgen -W "$__berth_kinds" -- "$cur")); return; fi
  # Object names, asked from the server with the flags typed so far.
  local names
  names=$(berth "${globals[@]}" get "$kind" -o 'jsonpath={.items[*].metadata.name}' 2>/dev/null)
  COMPREPLY=($(compgen -W "$names" -- "$cur"))
}
complete -o default -F _berth berth
)sh";
  return script;
}

}  // namespace berth::cli
