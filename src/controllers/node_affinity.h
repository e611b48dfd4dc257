// Node selection by labels: core/v1 NodeSelector matching (PV nodeAffinity,
// pod required node affinity) and finding the node a node-local volume
// lives on — shared by the scheduler, the binder and every controller that
// must call a node-local driver on the right node.
//
// Thread-safety: stateless (VolumeNode reads the registry).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "api/types/core.h"
#include "apiserver/registry.h"
#include "nlohmann/json.hpp"

namespace berth::controllers {

inline constexpr char kHostnameLabel[] = "kubernetes.io/hostname";

// A node's labels, with kubernetes.io/hostname defaulting to its name (the
// label kubelet always sets; embedded nodes may lack it).
std::map<std::string, std::string> NodeLabels(const nlohmann::json& node);

// Does a node with `labels` and `node_name` satisfy a core/v1 NodeSelector
// (terms ORed; within a term, matchExpressions on labels and matchFields on
// metadata.name ANDed; In, NotIn, Exists, DoesNotExist, Gt, Lt)? As in
// Kubernetes, an empty term list or an empty term matches nothing, and an
// invalid requirement fails its term.
bool NodeSelectorMatchesLabels(const api::types::NodeSelector& selector,
                               const std::map<std::string, std::string>& labels, const std::string& node_name);
// The same on a selector as JSON (one that does not decode matches nothing).
bool NodeSelectorMatchesLabels(const nlohmann::json& selector, const std::map<std::string, std::string>& labels,
                               const std::string& node_name);

// The node a volume is pinned to: the one node whose labels satisfy the
// PV's required nodeAffinity (kubernetes.io/hostname answered without a
// lookup). "" when the PV has no affinity or several/no nodes match — then
// the driver's cluster-wide endpoint serves it.
std::string VolumeNode(apiserver::Registry& registry, const api::types::PersistentVolume& pv);
// The node a node-local volume names without a lookup: the
// kubernetes.io/hostname value of its required nodeAffinity's first term
// ("" if none).
std::string HostnameOfVolume(const api::types::PersistentVolume& pv);

bool ContainsString(const std::vector<std::string>& values, const std::string& v);

}  // namespace berth::controllers
