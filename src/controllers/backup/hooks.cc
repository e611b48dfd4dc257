#include "controllers/backup/hooks.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "common/status.h"
#include "common/strings.h"
#include "common/units.h"
#include "nlohmann/json.hpp"

namespace berth::controllers {
namespace {

using api::types::Pod;
using nlohmann::json;

absl::Status Invalid(const Pod& pod, const std::string& annotation, const std::string& why) {
  return absl::InvalidArgumentError(StrCat("pod ", PodRef(pod), ": annotation ", annotation, ": ", why));
}

// One field's annotation: berth's spelling, else Velero's. `key` gets the
// annotation read (berth's when neither is set), for messages.
absl::StatusOr<std::string> Field(const Pod& pod, HookPhase phase, const std::string& field, std::string* key) {
  const std::string berth = HookAnnotationPrefix(phase) + field, velero = VeleroHookAnnotationPrefix(phase) + field;
  const auto& a = pod.metadata.annotations;
  auto b = a.find(berth), v = a.find(velero);
  *key = berth;
  if (b == a.end() && v == a.end()) return std::string();
  if (b != a.end() && v != a.end() && b->second != v->second) {
    return Invalid(pod, berth,
                   StrCat("\"", b->second, "\" differs from ", velero, " \"", v->second, "\" (set one of them)"));
  }
  if (b == a.end()) *key = velero;
  return b != a.end() ? b->second : v->second;
}

// Velero's rule (parseStringSlice): a value starting with '[' is a JSON array
// of strings, anything else a single word.
absl::StatusOr<std::vector<std::string>> ParseCommand(const Pod& pod, const std::string& key,
                                                      const std::string& value) {
  const std::string text(absl::StripAsciiWhitespace(value));
  std::vector<std::string> out;
  if (absl::StartsWith(text, "[")) {
    json parsed = json::parse(text, nullptr, false);
    if (!parsed.is_array()) return Invalid(pod, key, StrCat("\"", value, "\" is not a JSON array"));
    for (const auto& e : parsed) {
      if (!e.is_string()) return Invalid(pod, key, StrCat("\"", value, "\": every element must be a string"));
      out.push_back(e.get<std::string>());
    }
    if (out.empty()) return Invalid(pod, key, "an empty command");
    if (out.front().empty()) return Invalid(pod, key, StrCat("\"", value, "\": the program is empty"));
    return out;
  }
  if (std::any_of(text.begin(), text.end(), [](unsigned char c) { return absl::ascii_isspace(c); })) {
    return Invalid(pod, key,
                   StrCat("\"", value, "\" is not a single word: write a command with arguments as a JSON array, ",
                          "e.g. [\"/bin/sh\", \"-c\", \"", text, "\"]"));
  }
  out.push_back(text);
  return out;
}

std::string Quote(const std::string& arg) {
  if (!arg.empty() && std::none_of(arg.begin(), arg.end(), [](unsigned char c) {
        return absl::ascii_isspace(c) || c == '"' || c == '\'' || c == '\\';
      })) {
    return arg;
  }
  return json(arg).dump();
}

}  // namespace

const char* HookPhaseName(HookPhase phase) { return phase == HookPhase::kPre ? "pre" : "post"; }

std::string HookAnnotationPrefix(HookPhase phase) { return StrCat(HookPhaseName(phase), ".hook.backup.berth.io/"); }
std::string VeleroHookAnnotationPrefix(HookPhase phase) {
  return StrCat(HookPhaseName(phase), ".hook.backup.velero.io/");
}

std::string PodRef(const Pod& pod) { return StrCat(pod.metadata.namespace_, "/", pod.metadata.name); }

std::string DescribeHook(const Hook& hook) {
  std::string command;
  for (const auto& arg : hook.command) command += (command.empty() ? "" : " ") + Quote(arg);
  if (command.size() > 120) command = command.substr(0, 117) + "...";
  return StrCat("[", command, "] in container ", hook.container);
}

absl::StatusOr<std::optional<Hook>> ParseHook(const Pod& pod, HookPhase phase) {
  std::string key;
  BERTH_ASSIGN_OR_RETURN(std::string command, Field(pod, phase, "command", &key));
  if (command.empty()) return std::nullopt;
  Hook hook;
  BERTH_ASSIGN_OR_RETURN(hook.command, ParseCommand(pod, key, command));

  BERTH_ASSIGN_OR_RETURN(hook.container, Field(pod, phase, "container", &key));
  const auto& containers = pod.spec.containers;
  if (containers.empty()) return Invalid(pod, HookAnnotationPrefix(phase) + "command", "the pod has no containers");
  if (hook.container.empty()) {
    hook.container = containers.front().name;
  } else if (std::none_of(containers.begin(), containers.end(),
                          [&](const auto& c) { return c.name == hook.container; })) {
    std::string names;
    for (const auto& c : containers) names += (names.empty() ? "" : ", ") + c.name;
    return Invalid(pod, key, StrCat("the pod has no container \"", hook.container, "\" (its containers: ", names, ")"));
  }

  BERTH_ASSIGN_OR_RETURN(std::string on_error, Field(pod, phase, "on-error", &key));
  if (absl::EqualsIgnoreCase(on_error, "Continue")) {
    hook.continue_on_error = true;
  } else if (!on_error.empty() && !absl::EqualsIgnoreCase(on_error, "Fail")) {
    return Invalid(pod, key, StrCat("\"", on_error, "\": want Fail or Continue"));
  }

  BERTH_ASSIGN_OR_RETURN(std::string timeout, Field(pod, phase, "timeout", &key));
  if (!timeout.empty()) {
    auto d = ParseGoDuration(timeout);
    if (!d.ok() || *d <= absl::ZeroDuration()) {
      return Invalid(pod, key, StrCat("\"", timeout, "\": want a positive duration such as 30s or 2m"));
    }
    hook.timeout = *d;
  }
  return hook;
}

absl::Status RunHooks(HookRunner& runner, const std::vector<Pod>& pods, HookPhase phase,
                      std::vector<std::string>* warnings, std::vector<Pod>* reached) {
  // Pre: every annotation of both phases parsed before anything runs, so a
  // typo in a post hook fails the backup before its pre hooks freeze
  // anything. Post: a malformed hook is one pod's failure, the others run.
  std::vector<absl::StatusOr<std::optional<Hook>>> hooks;
  hooks.reserve(pods.size());
  for (const auto& pod : pods) {
    hooks.push_back(ParseHook(pod, phase));
    if (phase == HookPhase::kPre) {
      BERTH_RETURN_IF_ERROR(hooks.back().status());
      BERTH_RETURN_IF_ERROR(ParseHook(pod, HookPhase::kPost).status());
    }
  }
  absl::Status first;
  for (size_t i = 0; i < pods.size(); ++i) {
    if (reached != nullptr) reached->push_back(pods[i]);
    absl::Status st = hooks[i].status();
    bool continue_on_error = false;
    if (st.ok()) {
      if (!*hooks[i]) continue;
      const Hook& hook = **hooks[i];
      continue_on_error = hook.continue_on_error;
      st = runner.Run(pods[i], hook);
      if (st.ok()) continue;
    }
    // A parse error names its annotation and pod already.
    const std::string what = hooks[i].ok()
                                 ? StrCat(HookPhaseName(phase), " hook of pod ", PodRef(pods[i]), ": ", st.message())
                                 : std::string(st.message());
    if (continue_on_error) {
      if (warnings != nullptr) warnings->push_back(StrCat(what, " (on-error: Continue)"));
      continue;
    }
    if (phase == HookPhase::kPre) return absl::Status(st.code(), what);
    if (first.ok()) {
      first = absl::Status(st.code(), what);
    } else if (warnings != nullptr) {
      warnings->push_back(what);
    }
  }
  return first;
}

}  // namespace berth::controllers
