#include "controllers/node_affinity.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "client/object.h"

namespace berth::controllers {

using namespace ::berth::client;  // the controllers' own client library

using nlohmann::json;

namespace {

// One NodeSelectorRequirement against labels (an invalid one — wrong value
// count, non-integer Gt/Lt — does not match, as Kubernetes' conversion to a
// selector fails for it).
bool RequirementMatches(const api::types::NodeSelectorRequirement& req,
                        const std::map<std::string, std::string>& labels) {
  const std::string& op = req.operator_;
  const std::vector<std::string>& values = req.values;
  auto it = labels.find(req.key);
  const bool has = it != labels.end();
  if (op == "In") return !values.empty() && has && ContainsString(values, it->second);
  if (op == "NotIn") return !values.empty() && (!has || !ContainsString(values, it->second));
  if (op == "Exists") return values.empty() && has;
  if (op == "DoesNotExist") return values.empty() && !has;
  if (op == "Gt" || op == "Lt") {
    int64_t want = 0, have = 0;
    if (values.size() != 1 || !absl::SimpleAtoi(values[0], &want)) return false;
    if (!has || !absl::SimpleAtoi(it->second, &have)) return false;
    return op == "Gt" ? have > want : have < want;
  }
  return false;
}

// matchFields: only metadata.name, with In / NotIn and exactly one value.
bool FieldRequirementMatches(const api::types::NodeSelectorRequirement& req, const std::string& node_name) {
  if (req.key != "metadata.name" || req.values.size() != 1) return false;
  if (req.operator_ == "In") return req.values[0] == node_name;
  if (req.operator_ == "NotIn") return req.values[0] != node_name;
  return false;
}

}  // namespace

// A node's labels, with kubernetes.io/hostname defaulting to its name (the
// label kubelet always sets; embedded nodes may lack it).
std::map<std::string, std::string> NodeLabels(const json& node) {
  std::map<std::string, std::string> out;
  const json& labels = Field(Field(node, "metadata"), "labels");
  if (labels.is_object()) {
    for (const auto& [k, v] : labels.items()) {
      if (v.is_string()) out[k] = v.get<std::string>();
    }
  }
  out.emplace(kHostnameLabel, Name(node));
  return out;
}

bool ContainsString(const std::vector<std::string>& values, const std::string& v) {
  return std::find(values.begin(), values.end(), v) != values.end();
}

bool NodeSelectorMatchesLabels(const api::types::NodeSelector& selector,
                               const std::map<std::string, std::string>& labels, const std::string& node_name) {
  for (const auto& term : selector.node_selector_terms) {
    if (term.match_expressions.empty() && term.match_fields.empty()) continue;  // an empty term selects nothing
    bool all = true;
    for (const auto& e : term.match_expressions) all = all && RequirementMatches(e, labels);
    for (const auto& f : term.match_fields) all = all && FieldRequirementMatches(f, node_name);
    if (all) return true;
  }
  return false;
}

bool NodeSelectorMatchesLabels(const json& selector, const std::map<std::string, std::string>& labels,
                               const std::string& node_name) {
  api::types::NodeSelector typed;
  if (!api::types::DecodeValue(selector, typed, api::types::Path()).ok()) return false;
  return NodeSelectorMatchesLabels(typed, labels, node_name);
}

std::string HostnameOfVolume(const api::types::PersistentVolume& pv) {
  const auto& affinity = pv.spec.node_affinity;
  if (!affinity || !affinity->required || affinity->required->node_selector_terms.empty()) return "";
  for (const auto& e : affinity->required->node_selector_terms[0].match_expressions) {
    if (e.key == kHostnameLabel && !e.values.empty()) return e.values[0];
  }
  return "";
}

std::string VolumeNode(apiserver::Registry& registry, const api::types::PersistentVolume& pv) {
  if (std::string node = HostnameOfVolume(pv); !node.empty()) return node;
  if (!pv.spec.node_affinity || !pv.spec.node_affinity->required) return "";
  const api::types::NodeSelector& required = *pv.spec.node_affinity->required;
  auto nodes = registry.List(*api::FindResource("", "nodes"), "", {});
  if (!nodes.ok()) return "";
  std::string found;
  for (const auto& n : nodes->items) {
    if (!NodeSelectorMatchesLabels(required, NodeLabels(n), Name(n))) continue;
    if (!found.empty()) return "";  // not pinned to one node
    found = Name(n);
  }
  return found;
}

}  // namespace berth::controllers
