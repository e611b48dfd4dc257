#include "apiserver/admission.h"

#include <string>

namespace berth::apiserver {
namespace {

using nlohmann::json;

constexpr char kTaintNotReady[] = "node.kubernetes.io/not-ready";
constexpr char kTaintUnreachable[] = "node.kubernetes.io/unreachable";

std::string Text(const json& o, const char* key) {
  auto it = o.find(key);
  return it != o.end() && it->is_string() ? it->get<std::string>() : "";
}

// Does `toleration` cover NoExecute taints with `key` (whatever their value:
// the plugin looks at key and effect only, as upstream)?
bool Covers(const json& toleration, const char* key) {
  if (!toleration.is_object()) return false;
  const std::string k = Text(toleration, "key"), effect = Text(toleration, "effect");
  return (k.empty() || k == key) && (effect.empty() || effect == "NoExecute");
}

}  // namespace

void AddDefaultTolerations(json& pod) {
  if (!pod.is_object() || !pod.contains("spec") || !pod["spec"].is_object()) return;
  json& spec = pod["spec"];
  if (spec.contains("tolerations") && !spec["tolerations"].is_array() && !spec["tolerations"].is_null()) return;
  bool not_ready = false, unreachable = false;
  if (spec.contains("tolerations") && spec["tolerations"].is_array()) {
    for (const auto& t : spec["tolerations"]) {
      not_ready = not_ready || Covers(t, kTaintNotReady);
      unreachable = unreachable || Covers(t, kTaintUnreachable);
    }
  }
  if (not_ready && unreachable) return;
  json& list = spec["tolerations"];
  if (!list.is_array()) list = json::array();
  for (auto [missing, key] : {std::pair{!not_ready, kTaintNotReady}, std::pair{!unreachable, kTaintUnreachable}}) {
    if (!missing) continue;
    list.push_back({{"key", key},
                    {"operator", "Exists"},
                    {"effect", "NoExecute"},
                    {"tolerationSeconds", kDefaultTolerationSeconds}});
  }
}

}  // namespace berth::apiserver
