#include "controllers/taints.h"

#include "client/object.h"

namespace berth::controllers {

using client::Field;
using client::Str;
using nlohmann::json;

json Taint::ToJson() const {
  json t = {{"key", key}, {"effect", effect}};
  if (!value.empty()) t["value"] = value;
  if (!time_added.empty()) t["timeAdded"] = time_added;
  return t;
}

std::vector<Taint> NodeTaints(const json& node) {
  std::vector<Taint> out;
  const json& taints = Field(Field(node, "spec"), "taints");
  if (!taints.is_array()) return out;
  for (const auto& t : taints) {
    if (!t.is_object()) continue;
    out.push_back({Str(t, {"key"}), Str(t, {"value"}), Str(t, {"effect"}), Str(t, {"timeAdded"})});
  }
  return out;
}

std::vector<Taint> NodeTaints(const json& node, const std::string& effect) {
  std::vector<Taint> out;
  for (auto& t : NodeTaints(node)) {
    if (t.effect == effect) out.push_back(std::move(t));
  }
  return out;
}

bool HasTaint(const json& node, const std::string& key, const std::string& effect) {
  for (const auto& t : NodeTaints(node)) {
    if (t.key == key && t.effect == effect) return true;
  }
  return false;
}

bool HasTaintKey(const json& node, const std::string& key) {
  for (const auto& t : NodeTaints(node)) {
    if (t.key == key) return true;
  }
  return false;
}

bool ToleratesTaint(const json& t, const Taint& taint) {
  if (!t.is_object()) return false;
  const std::string effect = Str(t, {"effect"}), key = Str(t, {"key"}), op = Str(t, {"operator"});
  if (!effect.empty() && effect != taint.effect) return false;
  if (!key.empty() && key != taint.key) return false;
  if (op == "Exists") return true;
  if (op.empty() || op == "Equal") return Str(t, {"value"}) == taint.value;
  return false;
}

bool Tolerates(const json& tolerations, const Taint& taint) {
  if (!tolerations.is_array()) return false;
  for (const auto& t : tolerations) {
    if (ToleratesTaint(t, taint)) return true;
  }
  return false;
}

TolerationVerdict MatchTolerations(const json& tolerations, const std::vector<Taint>& taints) {
  TolerationVerdict verdict;
  for (const Taint& taint : taints) {
    const json* used = nullptr;
    if (tolerations.is_array()) {
      for (const auto& t : tolerations) {
        if (ToleratesTaint(t, taint)) {
          used = &t;
          break;
        }
      }
    }
    if (used == nullptr) return {.tolerated = false, .for_how_long = absl::ZeroDuration()};
    const json& seconds = Field(*used, "tolerationSeconds");
    if (!seconds.is_number()) continue;
    const absl::Duration d = seconds.get<double>() <= 0 ? absl::ZeroDuration() : absl::Seconds(seconds.get<int64_t>());
    if (!verdict.for_how_long || d < *verdict.for_how_long) verdict.for_how_long = d;
  }
  return verdict;
}

const json& NodeReadyCondition(const json& node) {
  static const json* const kNull = new json();
  const json& conditions = Field(Field(node, "status"), "conditions");
  if (!conditions.is_array()) return *kNull;
  for (const auto& c : conditions) {
    if (Str(c, {"type"}) == "Ready") return c;
  }
  return *kNull;
}

std::string NodeReadyStatus(const json& node) { return Str(NodeReadyCondition(node), {"status"}); }

}  // namespace berth::controllers
