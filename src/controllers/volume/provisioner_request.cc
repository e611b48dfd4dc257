// The provisioner's CreateVolume request for a claim (provisioner.h, step
// 3): which node, capacity, capabilities, parameters, secrets, topology and
// content source (a data source, or what a volume populator filled).
#include <algorithm>
#include <functional>
#include <set>

#include "api/quantity.h"
#include "api/types/core.h"
#include "api/types/core_node.h"
#include "api/types/storage.h"
#include "client/capability.h"
#include "client/object.h"
#include "client/secrets.h"
#include "client/typed.h"
#include "common/status.h"
#include "common/strings.h"
#include "controllers/volume/data_source.h"
#include "controllers/volume/provisioner.h"
#include "controllers/volume/provisioner_internal.h"

namespace berth::controllers {

using namespace ::berth::client;  // the controllers' own client library
using nlohmann::json;
using provisioner_internal::Expand;
using types::PersistentVolumeClaim;
using types::StorageClass;

absl::StatusOr<std::map<std::string, std::string>> Provisioner::Segment(const std::string& node) const {
  std::shared_ptr<const json> csinode_json = informers_.csinodes.GetSharedByKey(node);
  std::shared_ptr<const json> node_json = informers_.nodes.GetSharedByKey(node);
  if (!csinode_json || !node_json) {
    absl::MutexLock lock(&segments_mu_);
    segments_.erase(node);
    return std::map<std::string, std::string>{};
  }
  std::string node_version = Str(*node_json, {"metadata", "resourceVersion"});
  std::string csinode_version = Str(*csinode_json, {"metadata", "resourceVersion"});
  {
    absl::MutexLock lock(&segments_mu_);
    if (auto it = segments_.find(node); it != segments_.end() && it->second.node_version == node_version &&
                                        it->second.csinode_version == csinode_version) {
      return it->second.segment;
    }
  }
  auto decode = [&]() -> absl::StatusOr<std::map<std::string, std::string>> {
    BERTH_ASSIGN_OR_RETURN(const types::CSINode csinode, DecodeAs<types::CSINode>(*csinode_json));
    BERTH_ASSIGN_OR_RETURN(const types::Node n, DecodeAs<types::Node>(*node_json));
    std::map<std::string, std::string> out;
    for (const auto& d : csinode.spec.drivers) {
      if (d.name != options_.driver) continue;
      for (const auto& k : d.topology_keys) {
        auto v = n.metadata.labels.find(k);
        // A node without a value for every key is not (yet) a usable segment.
        if (v == n.metadata.labels.end() || v->second.empty()) return std::map<std::string, std::string>{};
        out[k] = v->second;
      }
    }
    return out;
  };
  BERTH_ASSIGN_OR_RETURN(auto out, decode());
  // Versions are set by the store on every write: an object with none (a
  // test's hand-made one) is decoded every time.
  if (!node_version.empty() && !csinode_version.empty()) {
    absl::MutexLock lock(&segments_mu_);
    segments_[node] = KnownSegment{std::move(node_version), std::move(csinode_version), out};
  }
  return out;
}

std::string Provisioner::NodeForClaim(const PersistentVolumeClaim& claim) const {
  if (std::string recorded = claim.metadata.Annotation(kAnnProvisioningNode); !recorded.empty()) return recorded;
  std::string selected = claim.metadata.Annotation(kAnnSelectedNode);
  if (!selected.empty()) return selected;
  std::vector<std::string> nodes = drivers_.Nodes(options_.driver);
  if (nodes.empty() || std::find(nodes.begin(), nodes.end(), "") != nodes.end()) return "";
  // A node-local driver without a chosen node: spread claims by their uid.
  return nodes[std::hash<std::string>{}(claim.metadata.uid) % nodes.size()];
}

absl::StatusOr<::csi::v1::CreateVolumeRequest> Provisioner::BuildRequest(const json& claim, const json& storage_class,
                                                                         const std::string& node) {
  BERTH_ASSIGN_OR_RETURN(const PersistentVolumeClaim typed_claim, DecodeAs<PersistentVolumeClaim>(claim));
  BERTH_ASSIGN_OR_RETURN(const StorageClass typed_class, DecodeAs<StorageClass>(storage_class));
  return BuildRequest(typed_claim, typed_class, node);
}

absl::StatusOr<::csi::v1::CreateVolumeRequest> Provisioner::BuildRequest(const PersistentVolumeClaim& claim,
                                                                         const StorageClass& sc,
                                                                         const std::string& node) {
  ::csi::v1::CreateVolumeRequest req;
  req.set_name(StrCat("pvc-", claim.metadata.uid));
  const types::PersistentVolumeClaimSpec& spec = claim.spec;
  auto request = spec.resources.requests.find("storage");
  if (request == spec.resources.requests.end()) {
    return absl::InvalidArgumentError("the claim has no valid resources.requests.storage");
  }
  req.mutable_capacity_range()->set_required_bytes(request->second.Value());
  if (auto limit = spec.resources.limits.find("storage"); limit != spec.resources.limits.end()) {
    req.mutable_capacity_range()->set_limit_bytes(limit->second.Value());
  }
  std::map<std::string, std::string> reserved;
  SplitClassParameters(sc.parameters, req.mutable_parameters(), &reserved);
  const std::string fstype = reserved["fstype"];
  const bool block = types::VolumeModeOf(spec.volume_mode) == "Block";
  if (spec.access_modes.empty()) return absl::InvalidArgumentError("the claim has no accessModes");
  BERTH_ASSIGN_OR_RETURN(const SingleNodeModes single_node, monitor_.ControllerSingleNodeModes(options_.driver, node));
  for (const auto& m : spec.access_modes) {
    *req.add_volume_capabilities() = MakeVolumeCapability(m, single_node, block, fstype, sc.mount_options);
  }
  // Provisioner secrets.
  const std::string secret_name = Expand(reserved["provisioner-secret-name"], claim.metadata);
  const std::string secret_ns = Expand(reserved["provisioner-secret-namespace"], claim.metadata);
  BERTH_ASSIGN_OR_RETURN(const SecretData secrets, CsiSecret(registry_, secret_ns, secret_name, "provisioner secret"));
  for (const auto& [k, v] : secrets) (*req.mutable_secrets())[k] = v;
  // Topology.
  std::vector<std::map<std::string, std::string>> requisite;
  const bool restricted = !sc.allowed_topologies.empty();
  if (restricted) {
    for (const auto& term : sc.allowed_topologies) {
      std::vector<std::map<std::string, std::string>> segments = {{}};
      for (const auto& e : term.match_label_expressions) {
        std::vector<std::map<std::string, std::string>> next;
        for (const auto& seg : segments) {
          for (const auto& v : e.values) {
            auto s = seg;
            s[e.key] = v;
            next.push_back(std::move(s));
          }
        }
        segments = std::move(next);
      }
      for (auto& s : segments) requisite.push_back(std::move(s));
    }
  } else {
    std::set<std::map<std::string, std::string>> all;
    // By key (a CSINode is named after its node): no copy of every CSINode
    // per claim.
    for (const std::string& csinode : informers_.csinodes.Keys()) {
      BERTH_ASSIGN_OR_RETURN(auto seg, Segment(csinode));
      if (!seg.empty()) all.insert(seg);
    }
    requisite.assign(all.begin(), all.end());
  }
  std::vector<std::map<std::string, std::string>> preferred = requisite;
  if (!node.empty()) {
    BERTH_ASSIGN_OR_RETURN(auto mine, Segment(node));
    if (mine.empty() && !requisite.empty()) {
      // The driver is topology-aware but the node has not registered it (or
      // lacks its labels): retried until it has.
      return absl::FailedPreconditionError(StrCat("node ", node, " has no topology for driver ", options_.driver,
                                                  " (its CSINode entry or topology labels are missing)"));
    }
    if (!mine.empty()) {
      // The node's segment must fall within a requisite segment (an
      // allowedTopologies term may name fewer keys than the driver has).
      auto within = [&](const std::map<std::string, std::string>& term) {
        return std::all_of(term.begin(), term.end(), [&](const auto& kv) {
          auto it = mine.find(kv.first);
          return it != mine.end() && it->second == kv.second;
        });
      };
      if (restricted) {
        if (std::none_of(requisite.begin(), requisite.end(), within)) {
          return absl::FailedPreconditionError(StrCat("node ", node, " is not in the class's allowedTopologies"));
        }
        // Preferred: the terms the node is in first, the rest after.
        std::stable_partition(preferred.begin(), preferred.end(), within);
      } else {
        if (std::find(requisite.begin(), requisite.end(), mine) == requisite.end()) requisite.push_back(mine);
        preferred = requisite;
        preferred.erase(std::remove(preferred.begin(), preferred.end(), mine), preferred.end());
        preferred.insert(preferred.begin(), mine);
      }
    }
  } else if (!preferred.empty()) {
    // Spread Immediate claims as external-provisioner does: a StatefulSet's
    // claims "<template>-<set>-<ordinal>" start at hash(prefix) + ordinal,
    // so consecutive replicas land on consecutive segments.
    std::sort(preferred.begin(), preferred.end());
    const std::string& claim_name = claim.metadata.name;
    std::string prefix = claim_name;
    uint64_t ordinal = 0;
    if (size_t dash = claim_name.rfind('-');
        dash != std::string::npos && dash + 1 < claim_name.size() &&
        std::all_of(claim_name.begin() + static_cast<long>(dash) + 1, claim_name.end(),
                    [](char c) { return c >= '0' && c <= '9'; })) {
      prefix = claim_name.substr(0, dash);
      ordinal = std::strtoull(claim_name.c_str() + dash + 1, nullptr, 10);
    }
    uint64_t h = 1469598103934665603ULL;  // FNV-1a: stable across restarts and builds
    for (unsigned char c : prefix) h = (h ^ c) * 1099511628211ULL;
    const size_t start = static_cast<size_t>((h + ordinal) % preferred.size());
    std::rotate(preferred.begin(), preferred.begin() + static_cast<long>(start), preferred.end());
  }
  if (!requisite.empty()) {
    auto* ar = req.mutable_accessibility_requirements();
    for (const auto& seg : requisite) {
      auto* t = ar->add_requisite();
      for (const auto& [k, v] : seg) (*t->mutable_segments())[k] = v;
    }
    for (const auto& seg : preferred) {
      auto* t = ar->add_preferred();
      for (const auto& [k, v] : seg) (*t->mutable_segments())[k] = v;
    }
  }
  // A populated claim's content source is what its populator filled
  // (SyncClaimOnce); a request rebuilt after that names the volume recorded
  // on the claim, so a retry or a clean-up repeats the same request.
  if (Populated(claim)) {
    for (const auto& [k, v] : options_.populator->Parameters()) (*req.mutable_parameters())[k] = v;
    if (std::string populated = claim.metadata.Annotation(kAnnPopulatedVolume); !populated.empty()) {
      req.mutable_volume_content_source()->mutable_volume()->set_volume_id(populated);
    }
    return req;
  }
  // Content source: checked (data_source.h) before anything is created.
  auto source = ResolveDataSource(registry_, claim, sc, claim.metadata.HasFinalizer(kProvisioningFinalizer));
  if (!source.ok()) return source.status();
  if (*source) *req.mutable_volume_content_source() = **source;
  return req;
}

}  // namespace berth::controllers
