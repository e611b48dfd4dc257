#include "controllers/volume/provisioner.h"

#include <algorithm>
#include <functional>
#include <set>

#include "api/quantity.h"
#include "client/capability.h"
#include "client/object.h"
#include "client/secrets.h"
#include "client/writes.h"
#include "common/status.h"
#include "common/strings.h"
#include "controllers/node_affinity.h"
#include "controllers/taints.h"
#include "controllers/volume/data_source.h"
#include "controllers/volume/pv_binder.h"
#include "csi/driver_client.h"
#include "csi/grpc_status.h"
#include "spdlog/spdlog.h"

namespace berth::controllers {

using namespace ::berth::client;  // the controllers' own client library
namespace {

using nlohmann::json;

// ${pvc.name}, ${pvc.namespace}, ${pv.name} in secret references
// (`pv_name` "": the name a provisioned volume gets, pvc-<uid>).
std::string Expand(std::string text, const json& claim, const std::string& pv_name = "") {
  auto replace = [&](const std::string& from, const std::string& to) {
    for (size_t pos; (pos = text.find(from)) != std::string::npos;) text.replace(pos, from.size(), to);
  };
  replace("${pvc.name}", Name(claim));
  replace("${pvc.namespace}", Ns(claim));
  replace("${pv.name}", pv_name.empty() ? StrCat("pvc-", Uid(claim)) : pv_name);
  return text;
}

// The driver a claim was handed to (the binder's annotation).
std::string ClaimProvisioner(const json& claim) {
  std::string p = Annotation(claim, kAnnStorageProvisioner);
  return p.empty() ? Annotation(claim, kAnnBetaStorageProvisioner) : p;
}

const api::KindInfo& Claims() { return K("persistentvolumeclaims"); }

// A final error: the driver is not working on the volume any more, so
// nothing can exist for this attempt. external-provisioner's checkError
// differs from the other sidecars in one code: RESOURCE_EXHAUSTED is final
// for CreateVolume (the pool is full; nothing was made).
bool FinalError(const absl::Status& st) {
  return csi::IsFinalError(st) || st.code() == absl::StatusCode::kResourceExhausted;
}

}  // namespace

Provisioner::Provisioner(apiserver::Registry& registry, DriverDirectory& drivers, ProvisionerInformers informers,
                         Options options)
    : registry_(registry),
      drivers_(drivers),
      informers_(informers),
      options_(std::move(options)),
      own_monitor_(options_.monitor == nullptr ? std::make_unique<DriverMonitor>(drivers) : nullptr),
      monitor_(options_.monitor != nullptr ? *options_.monitor : *own_monitor_),
      events_(registry, StrCat(options_.driver, "_berth-provisioner")),
      // external-provisioner's --retry-interval-start / --retry-interval-max.
      claim_queue_(WorkQueue::Options{.base_delay = absl::Seconds(1), .max_delay = absl::Minutes(5)}),
      volume_queue_(WorkQueue::Options{.base_delay = absl::Seconds(1), .max_delay = absl::Minutes(5)}),
      source_queue_(WorkQueue::Options{.base_delay = absl::Seconds(1), .max_delay = absl::Minutes(5)}) {}

Provisioner::~Provisioner() { Stop(); }

absl::Status Provisioner::ClearSelectedNode(const json& claim, const std::string& node) {
  return MutateObject(registry_, K("persistentvolumeclaims"), claim, apiserver::Subresource::kMain, [&](json& obj) {
    if (Annotation(obj, kAnnSelectedNode) != node) return false;
    obj["metadata"]["annotations"].erase(kAnnSelectedNode);
    return true;
  });
}

void Provisioner::RegisterHandlers() {
  // A claim that clones another: when it leaves Pending (or goes), its
  // source may lose cloning-protection.
  auto source_of = [this](const json& o) {
    std::optional<DataSourceRef> ds = ClaimDataSource(o);
    if (ds && ds->kind == "PersistentVolumeClaim") source_queue_.Add(StrCat(Ns(o), "/", ds->name));
    if (HasFinalizer(o, kCloningProtectionFinalizer)) source_queue_.Add(ObjectKey(o));
  };
  informers_.claims.AddHandlers({
      .on_add =
          [this, source_of](const json& o) {
            claim_queue_.Add(ObjectKey(o));
            source_of(o);
          },
      .on_update =
          [this, source_of](const json&, const json& o) {
            claim_queue_.Add(ObjectKey(o));
            source_of(o);
          },
      .on_delete = source_of,
  });
  // A node that stops being Ready hands its unprovisioned claims back.
  informers_.nodes.AddHandlers({
      .on_add = nullptr,
      .on_update =
          [this](const json& before, const json& after) {
            const std::string ready = NodeReadyStatus(after);
            if (ready.empty() || ready == "True" || ready == NodeReadyStatus(before)) return;
            informers_.claims.Select([&](const json& c) {
              if (Annotation(c, kAnnSelectedNode) == Name(after) && Str(c, {"spec", "volumeName"}).empty()) {
                claim_queue_.Add(ObjectKey(c));
              }
              return false;
            });
          },
      .on_delete = nullptr,
  });
  informers_.volumes.AddHandlers({
      .on_add = [this](const json& o) { volume_queue_.Add(Name(o)); },
      .on_update = [this](const json&, const json& o) { volume_queue_.Add(Name(o)); },
      .on_delete = nullptr,
  });
  if (informers_.attachments != nullptr) {
    // An attachment gone: its volume's storage may be deleted now.
    informers_.attachments->AddHandlers({
        .on_add = nullptr,
        .on_update = nullptr,
        .on_delete =
            [this](const json& va) {
              if (std::string pv = Str(va, {"spec", "source", "persistentVolumeName"}); !pv.empty()) {
                volume_queue_.Add(pv);
              }
            },
    });
  }
}

void Provisioner::Start() {
  const std::string name = StrCat("provisioner ", options_.driver);
  for (int i = 0; i < options_.workers; ++i) {
    workers_.emplace_back([this, name] {
      RunWorker(claim_queue_, name + ": claim", ParkAware([this](const std::string& k) { return SyncClaim(k); }));
    });
  }
  // As many for volumes as for claims (external-provisioner runs as many
  // workers on both queues): deleting many volumes at once is as common as
  // creating them.
  for (int i = 0; i < options_.workers; ++i) {
    workers_.emplace_back([this, name] {
      RunWorker(volume_queue_, name + ": volume", ParkAware([this](const std::string& k) { return SyncVolume(k); }));
    });
  }
  workers_.emplace_back([this, name] {
    RunWorker(source_queue_, name + ": clone source", [this](const std::string& k) { return SyncCloneSource(k); });
  });
}

void Provisioner::Stop() {
  claim_queue_.ShutDown();
  volume_queue_.ShutDown();
  source_queue_.ShutDown();
  for (auto& w : workers_) w.join();
  workers_.clear();
  monitor_.Unpark(claim_queue_);
  monitor_.Unpark(volume_queue_);
}

bool Provisioner::ClassOf(const json& claim, json* storage_class) const {
  const std::string cls = ClaimClass(claim);
  if (cls.empty()) return false;
  std::shared_ptr<const json> sc = informers_.classes.GetSharedByKey(cls);
  if (!sc || Str(*sc, {"provisioner"}) != options_.driver) return false;
  *storage_class = *sc;
  return true;
}

bool Provisioner::OwnsVolume(const json& pv) const {
  if (const std::string by = Annotation(pv, kAnnProvisionedBy); !by.empty()) return by == options_.driver;
  // Statically provisioned: a CSI volume of our driver (upstream's
  // isProvisionerForVolume).
  return Str(pv, {"spec", "csi", "driver"}) == options_.driver;
}

std::map<std::string, std::string> Provisioner::Segment(const std::string& node) const {
  std::map<std::string, std::string> out;
  std::optional<json> csinode = informers_.csinodes.Get("", node);
  std::optional<json> n = informers_.nodes.Get("", node);
  if (!csinode || !n) return out;
  const json& drivers = Field(Field(*csinode, "spec"), "drivers");
  if (!drivers.is_array()) return out;
  for (const auto& d : drivers) {
    if (Str(d, {"name"}) != options_.driver) continue;
    const json& keys = Field(d, "topologyKeys");
    if (!keys.is_array()) continue;
    for (const auto& k : keys) {
      if (!k.is_string()) continue;
      std::string v = Str(*n, {"metadata", "labels", k.get<std::string>()});
      // A node without a value for every key is not (yet) a usable segment.
      if (v.empty()) return {};
      out[k.get<std::string>()] = v;
    }
  }
  return out;
}

std::string Provisioner::NodeForClaim(const json& claim) const {
  if (std::string recorded = Annotation(claim, kAnnProvisioningNode); !recorded.empty()) return recorded;
  std::string selected = Annotation(claim, kAnnSelectedNode);
  if (!selected.empty()) return selected;
  std::vector<std::string> nodes = drivers_.Nodes(options_.driver);
  if (nodes.empty() || std::find(nodes.begin(), nodes.end(), "") != nodes.end()) return "";
  // A node-local driver without a chosen node: spread claims by their uid.
  return nodes[std::hash<std::string>{}(Uid(claim)) % nodes.size()];
}

absl::StatusOr<::csi::v1::CreateVolumeRequest> Provisioner::BuildRequest(const json& claim, const json& sc,
                                                                         const std::string& node) {
  ::csi::v1::CreateVolumeRequest req;
  req.set_name(StrCat("pvc-", Uid(claim)));
  const json& spec = Field(claim, "spec");
  auto request = api::Quantity::Parse(Str(spec, {"resources", "requests", "storage"}));
  if (!request.ok()) return absl::InvalidArgumentError("the claim has no valid resources.requests.storage");
  req.mutable_capacity_range()->set_required_bytes(request->Value());
  if (auto limit = api::Quantity::Parse(Str(spec, {"resources", "limits", "storage"})); limit.ok()) {
    req.mutable_capacity_range()->set_limit_bytes(limit->Value());
  }
  std::map<std::string, std::string> reserved;
  SplitClassParameters(Field(sc, "parameters"), req.mutable_parameters(), &reserved);
  const std::string fstype = reserved["fstype"];
  const bool block = Str(spec, {"volumeMode"}) == "Block";
  const json& modes = Field(spec, "accessModes");
  if (!modes.is_array() || modes.empty()) return absl::InvalidArgumentError("the claim has no accessModes");
  BERTH_ASSIGN_OR_RETURN(const SingleNodeModes single_node, monitor_.ControllerSingleNodeModes(options_.driver, node));
  for (const auto& m : modes) {
    *req.add_volume_capabilities() = MakeVolumeCapability(m.is_string() ? m.get<std::string>() : "", single_node, block,
                                                          fstype, Field(sc, "mountOptions"));
  }
  // Provisioner secrets.
  const std::string secret_name = Expand(reserved["provisioner-secret-name"], claim);
  const std::string secret_ns = Expand(reserved["provisioner-secret-namespace"], claim);
  BERTH_ASSIGN_OR_RETURN(const SecretData secrets, CsiSecret(registry_, secret_ns, secret_name, "provisioner secret"));
  for (const auto& [k, v] : secrets) (*req.mutable_secrets())[k] = v;
  // Topology.
  std::vector<std::map<std::string, std::string>> requisite;
  const json& allowed = Field(sc, "allowedTopologies");
  if (allowed.is_array() && !allowed.empty()) {
    for (const auto& term : allowed) {
      std::vector<std::map<std::string, std::string>> segments = {{}};
      const json& exprs = Field(term, "matchLabelExpressions");
      if (!exprs.is_array()) continue;
      for (const auto& e : exprs) {
        std::vector<std::map<std::string, std::string>> next;
        for (const auto& seg : segments) {
          for (const auto& v : Field(e, "values")) {
            auto s = seg;
            s[Str(e, {"key"})] = v.is_string() ? v.get<std::string>() : "";
            next.push_back(std::move(s));
          }
        }
        segments = std::move(next);
      }
      for (auto& s : segments) requisite.push_back(std::move(s));
    }
  } else {
    std::set<std::map<std::string, std::string>> all;
    for (const auto& csinode : informers_.csinodes.List()) {
      auto seg = Segment(Name(csinode));
      if (!seg.empty()) all.insert(seg);
    }
    requisite.assign(all.begin(), all.end());
  }
  std::vector<std::map<std::string, std::string>> preferred = requisite;
  if (!node.empty()) {
    auto mine = Segment(node);
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
      const bool restricted = allowed.is_array() && !allowed.empty();
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
    const std::string claim_name = Name(claim);
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
  // Content source: checked (data_source.h) before anything is created.
  auto source = ResolveDataSource(registry_, claim, sc, HasFinalizer(claim, kProvisioningFinalizer));
  if (!source.ok()) return source.status();
  if (*source) *req.mutable_volume_content_source() = **source;
  return req;
}

absl::StatusOr<::csi::v1::CreateVolumeResponse> Provisioner::CreateVolume(const ::csi::v1::CreateVolumeRequest& request,
                                                                          const std::string& node, WorkQueue& queue,
                                                                          const std::string& key) {
  ::csi::v1::CreateVolumeResponse response;
  absl::Status st = monitor_.Call(options_.driver, node, [&](const csi::DriverClient& csi) {
    auto created = csi.CreateVolume(request, {.timeout = options_.rpc_timeout});
    if (created.ok()) response = std::move(*created);
    return created.status();
  });
  if (IsNotAFailure(st)) monitor_.Park(options_.driver, node, queue, key);
  if (!st.ok()) return st;
  return response;
}

absl::Status Provisioner::DeleteVolume(const std::string& handle, const std::string& node,
                                       const google::protobuf::Map<std::string, std::string>& secrets, WorkQueue& queue,
                                       const std::string& key) {
  ::csi::v1::DeleteVolumeRequest req;
  req.set_volume_id(handle);
  absl::Status st = monitor_.Call(options_.driver, node, [&](const csi::DriverClient& csi) {
    return csi.DeleteVolume(req, {.timeout = options_.rpc_timeout, .secrets = {secrets.begin(), secrets.end()}});
  });
  if (IsNotAFailure(st)) monitor_.Park(options_.driver, node, queue, key);
  return st;
}

absl::Status Provisioner::SetFinalizer(const json& claim, bool present, const std::string& node) {
  if (present) {
    // CreateVolume may only run under the finalizer: a claim already being
    // deleted (or replaced) is not provisioned.
    auto current = registry_.Get(K("persistentvolumeclaims"), Ns(claim), Name(claim));
    if (!current.ok()) return current.status();
    if (Uid(*current) != Uid(claim) || Deleting(*current)) {
      return absl::FailedPreconditionError(StrCat("claim ", Ns(claim), "/", Name(claim), " is being deleted"));
    }
  }
  // The node goes with the finalizer: a retry after a crash, or the clean-up
  // of a claim deleted mid-flight, must ask the same node's driver.
  return MutateObject(registry_, K("persistentvolumeclaims"), claim, apiserver::Subresource::kMain, [&](json& obj) {
    bool changed = false;
    if (present && !Deleting(obj)) {
      if (!HasFinalizer(obj, kProvisioningFinalizer)) {
        obj["metadata"]["finalizers"].push_back(kProvisioningFinalizer);
        changed = true;
      }
      if (Annotation(obj, kAnnProvisioningNode) != node) {
        if (node.empty()) {
          obj["metadata"]["annotations"].erase(kAnnProvisioningNode);
        } else {
          obj["metadata"]["annotations"][kAnnProvisioningNode] = node;
        }
        changed = true;
      }
    } else if (!present) {
      if (HasFinalizer(obj, kProvisioningFinalizer)) {
        json& f = obj["metadata"]["finalizers"];
        f.erase(std::remove(f.begin(), f.end(), json(kProvisioningFinalizer)), f.end());
        changed = true;
      }
      if (!Annotation(obj, kAnnProvisioningNode).empty()) {
        obj["metadata"]["annotations"].erase(kAnnProvisioningNode);
        changed = true;
      }
    }
    return changed;
  });
}

absl::Status Provisioner::CreatePersistentVolume(const json& claim, const json& sc,
                                                 const ::csi::v1::CreateVolumeRequest& request,
                                                 const ::csi::v1::CreateVolumeResponse& response) {
  const auto& vol = response.volume();
  int64_t bytes = vol.capacity_bytes() > 0 ? vol.capacity_bytes() : request.capacity_range().required_bytes();
  const json& spec = Field(claim, "spec");
  json pv = {
      {"apiVersion", "v1"},
      {"kind", "PersistentVolume"},
      {"metadata", {{"name", request.name()}, {"annotations", {{kAnnProvisionedBy, options_.driver}}}}},
      {"spec",
       {{"capacity", {{"storage", api::Quantity::FromBytes(bytes).ToString()}}},
        {"accessModes", Field(spec, "accessModes")},
        {"persistentVolumeReclaimPolicy", Str(sc, {"reclaimPolicy"}).empty() ? "Delete" : Str(sc, {"reclaimPolicy"})},
        {"storageClassName", Name(sc)},
        {"volumeMode", Str(spec, {"volumeMode"}).empty() ? "Filesystem" : Str(spec, {"volumeMode"})},
        {"claimRef",
         {{"kind", "PersistentVolumeClaim"},
          {"apiVersion", "v1"},
          {"namespace", Ns(claim)},
          {"name", Name(claim)},
          {"uid", Uid(claim)},
          {"resourceVersion", Str(claim, {"metadata", "resourceVersion"})}}},
        {"csi", {{"driver", options_.driver}, {"volumeHandle", vol.volume_id()}}}}}};
  if (!Field(sc, "mountOptions").is_null()) pv["spec"]["mountOptions"] = Field(sc, "mountOptions");
  json& csi = pv["spec"]["csi"];
  if (!vol.volume_context().empty()) {
    for (const auto& [k, v] : vol.volume_context()) csi["volumeAttributes"][k] = v;
  }
  const json& params = Field(sc, "parameters");
  auto param = [&](const std::string& key) { return Expand(Str(params, {StrCat(kReservedPrefix, key)}), claim); };
  if (Str(spec, {"volumeMode"}) != "Block") {
    if (std::string fs = param("fstype"); !fs.empty()) csi["fsType"] = fs;
  }
  static constexpr std::pair<const char*, const char*> kSecretRefs[] = {
      {"controller-publish", "controllerPublishSecretRef"},
      {"node-stage", "nodeStageSecretRef"},
      {"node-publish", "nodePublishSecretRef"},
      {"controller-expand", "controllerExpandSecretRef"},
      {"node-expand", "nodeExpandSecretRef"}};
  for (const auto& [prefix, field] : kSecretRefs) {
    std::string name = param(StrCat(prefix, "-secret-name"));
    if (!name.empty()) csi[field] = {{"name", name}, {"namespace", param(StrCat(prefix, "-secret-namespace"))}};
  }
  if (std::string name = param("provisioner-secret-name"); !name.empty()) {
    pv["metadata"]["annotations"]["volume.kubernetes.io/provisioner-deletion-secret-name"] = name;
    pv["metadata"]["annotations"]["volume.kubernetes.io/provisioner-deletion-secret-namespace"] =
        param("provisioner-secret-namespace");
  }
  if (vol.accessible_topology_size() > 0) {
    json terms = json::array();
    for (const auto& topo : vol.accessible_topology()) {
      json exprs = json::array();
      std::map<std::string, std::string> sorted(topo.segments().begin(), topo.segments().end());
      for (const auto& [k, v] : sorted) exprs.push_back({{"key", k}, {"operator", "In"}, {"values", {v}}});
      terms.push_back({{"matchExpressions", exprs}});
    }
    pv["spec"]["nodeAffinity"] = {{"required", {{"nodeSelectorTerms", terms}}}};
  }
  if (Str(pv, {"spec", "persistentVolumeReclaimPolicy"}) == "Delete") {
    pv["metadata"]["finalizers"] = {kProvisionerFinalizer};
  }
  auto created = registry_.Create(K("persistentvolumes"), "", pv);
  if (!created.ok() && created.status().code() != absl::StatusCode::kAlreadyExists) return created.status();
  return absl::OkStatus();
}

absl::Status Provisioner::SyncClaim(const std::string& key) {
  absl::Status st = SyncClaimOnce(key);
  if (IsNotAFailure(st)) {
    // The key is parked; tell the user once what it waits for.
    if (std::shared_ptr<const json> claim = informers_.claims.GetSharedByKey(key)) {
      events_.Record(*claim, "Warning", "ProvisioningFailed", std::string(st.message()));
    }
  }
  return st;
}

absl::Status Provisioner::SyncDeletedClaim(const json& claim, const std::string& key, bool have_class, const json& sc,
                                           bool pv_exists) {
  if (!HasFinalizer(claim, kProvisioningFinalizer)) return absl::OkStatus();
  if (pv_exists) return SetFinalizer(claim, false);  // the PV is released and reclaimed as usual
  const std::string pv_name = StrCat("pvc-", Uid(claim));
  if (!have_class) {
    // The request cannot be rebuilt (the class is gone or changed), so
    // whether a volume exists is unknown: keep the claim rather than leak.
    absl::Status blocked = absl::FailedPreconditionError(
        StrCat("the claim was deleted while its volume was being created and StorageClass \"", ClaimClass(claim),
               "\" of provisioner ", options_.driver,
               " is gone: recreate the class so the volume can be cleaned up, or remove finalizer ",
               kProvisioningFinalizer, " if no volume ", pv_name, " exists"));
    events_.Record(claim, "Warning", "ProvisioningCleanupBlocked", std::string(blocked.message()));
    return blocked;
  }
  // CreateVolume may have succeeded before we lost track: ask again
  // (idempotent by name, on the same node) and delete what exists.
  const std::string node = NodeForClaim(claim);
  auto req = BuildRequest(claim, sc, node);
  if (!req.ok() && IsNotAFailure(req.status())) {
    monitor_.Park(options_.driver, node, claim_queue_, key);
    return req.status();
  }
  if (!req.ok()) {
    events_.Record(claim, "Warning", "ProvisioningCleanupBlocked",
                   StrCat("cannot rebuild the request to clean up volume ", pv_name, ": ", req.status().message()));
    return req.status();  // e.g. a secret is missing: retried, the finalizer stays
  }
  auto resp = CreateVolume(*req, node, claim_queue_, key);
  if (resp.ok()) {
    BERTH_RETURN_IF_ERROR(DeleteVolume(resp->volume().volume_id(), node, req->secrets(), claim_queue_, key));
    events_.Record(claim, "Normal", "ProvisioningCancelled",
                   StrCat("the claim was deleted while volume ", pv_name, " was being created; deleted it"));
  } else if (!FinalError(resp.status())) {
    return resp.status();  // outcome unknown (or the driver is down): keep the finalizer
  }
  return SetFinalizer(claim, false);
}

absl::Status Provisioner::SyncClaimOnce(const std::string& key) {
  std::shared_ptr<const json> claim = informers_.claims.GetSharedByKey(key);
  // Another driver's claim (or nobody's yet): never touched, finalizers
  // included.
  if (!claim || ClaimProvisioner(*claim) != options_.driver) return absl::OkStatus();
  json sc;
  const bool have_class = ClassOf(*claim, &sc);
  const bool pending_finalizer = HasFinalizer(*claim, kProvisioningFinalizer);
  const std::string pv_name = StrCat("pvc-", Uid(*claim));
  const bool pv_exists =
      informers_.volumes.GetSharedByKey(pv_name) != nullptr || registry_.Get(K("persistentvolumes"), "", pv_name).ok();
  if (Deleting(*claim)) return SyncDeletedClaim(*claim, key, have_class, sc, pv_exists);
  if (!Str(*claim, {"spec", "volumeName"}).empty()) {
    return pending_finalizer ? SetFinalizer(*claim, false) : absl::OkStatus();
  }
  // The PV holds the claim: the binder drops the finalizer as it binds.
  if (pv_exists) return absl::OkStatus();
  if (!have_class) {
    // Handed to us, but its class is gone or names another driver now.
    // With a CreateVolume outcome pending the finalizer stays (a deletion
    // then reports what blocks it); otherwise there is nothing to do until
    // the class is back.
    if (!pending_finalizer) return absl::OkStatus();
    absl::Status st = absl::FailedPreconditionError(StrCat("storageclass.storage.k8s.io \"", ClaimClass(*claim),
                                                           "\" of provisioner ", options_.driver,
                                                           " not found while volume ", pv_name, " was being created"));
    events_.Record(*claim, "Warning", "ProvisioningFailed", std::string(st.message()));
    return st;
  }
  const bool wait_for_consumer = Str(sc, {"volumeBindingMode"}) == "WaitForFirstConsumer";
  const std::string selected = Annotation(*claim, kAnnSelectedNode);
  if (wait_for_consumer && selected.empty() && Annotation(*claim, kAnnProvisioningNode).empty()) {
    return absl::OkStatus();
  }
  if (wait_for_consumer && !selected.empty() && !pending_finalizer) {
    // The chosen node is gone (external-provisioner reschedules then too) or
    // not Ready (berth also does: the pod could not start there): let the
    // scheduler choose again. Not while a request may be in flight
    // (pending_finalizer): its outcome decides.
    std::optional<json> node = informers_.nodes.Get("", selected);
    if (!node) {
      if (auto stored = registry_.Get(K("nodes"), "", selected); stored.ok()) node = *stored;
    }
    const std::string ready = node ? NodeReadyStatus(*node) : "";
    if (!node || (!ready.empty() && ready != "True")) {
      events_.Record(*claim, "Warning", "ProvisioningFailed",
                     node
                         ? StrCat("the selected node \"", selected, "\" is not ready (Ready=", ready, "); rescheduling")
                         : StrCat("the selected node \"", selected, "\" does not exist; rescheduling"));
      return ClearSelectedNode(*claim, selected);
    }
  }
  const std::string node = NodeForClaim(*claim);
  auto req = BuildRequest(*claim, sc, node);
  if (!req.ok() && IsNotAFailure(req.status())) {
    monitor_.Park(options_.driver, node, claim_queue_, key);  // the driver is down: waits for it
    return req.status();
  }
  if (!req.ok()) {
    events_.Record(*claim, "Warning", "ProvisioningFailed",
                   StrCat("failed to provision volume with StorageClass \"", Name(sc), "\": ", req.status().message()));
    return req.status();
  }
  // A cloned claim's source may not go while we copy it.
  if (std::optional<DataSourceRef> ds = ClaimDataSource(*claim); ds && ds->kind == "PersistentVolumeClaim") {
    auto source = registry_.Get(Claims(), Ns(*claim), ds->name);
    if (!source.ok()) return source.status();
    absl::Status protected_source = EditFinalizer(registry_, Claims(), *source, kCloningProtectionFinalizer, true);
    if (!protected_source.ok()) {
      events_.Record(
          *claim, "Warning", "ProvisioningFailed",
          StrCat("failed to provision volume with StorageClass \"", Name(sc), "\": ", protected_source.message()));
      return protected_source;
    }
  }
  if (!pending_finalizer || Annotation(*claim, kAnnProvisioningNode) != node) {
    BERTH_RETURN_IF_ERROR(SetFinalizer(*claim, true, node));
  }
  events_.Record(*claim, "Normal", "Provisioning",
                 StrCat("External provisioner is provisioning volume for claim \"", key, "\""));
  auto resp = CreateVolume(*req, node, claim_queue_, key);
  if (!resp.ok()) {
    if (IsNotAFailure(resp.status())) return resp.status();  // waits for the driver (SyncClaim reports it)
    events_.Record(
        *claim, "Warning", "ProvisioningFailed",
        StrCat("failed to provision volume with StorageClass \"", Name(sc), "\": ", resp.status().message()));
    // A final error (RESOURCE_EXHAUSTED as external-provisioner, and any
    // other: nothing exists for this attempt) on a request tied to the
    // node's topology: let the scheduler choose another node.
    if (FinalError(resp.status()) && wait_for_consumer && req->has_accessibility_requirements() && !selected.empty()) {
      absl::Status cleared = ClearSelectedNode(*claim, selected);
      if (!cleared.ok()) spdlog::warn("provisioner: clearing selected-node of {}: {}", key, cleared.ToString());
    }
    if (FinalError(resp.status())) {
      // Nothing exists for this attempt: the claim is free to go (or to be
      // tried again elsewhere).
      absl::Status released = SetFinalizer(*claim, false);
      if (!released.ok()) spdlog::warn("provisioner: releasing {}: {}", key, released.ToString());
    }
    return resp.status();
  }
  BERTH_RETURN_IF_ERROR(CreatePersistentVolume(*claim, sc, *req, *resp));
  events_.Record(*claim, "Normal", "ProvisioningSucceeded", StrCat("Successfully provisioned volume ", pv_name));
  // The finalizer stays until the binder binds the claim to the PV (one
  // write fewer); a claim deleted meanwhile has it dropped above.
  return absl::OkStatus();
}

absl::Status Provisioner::SyncCloneSource(const std::string& key) {
  std::shared_ptr<const json> source = informers_.claims.GetSharedByKey(key);
  if (!source || !HasFinalizer(*source, kCloningProtectionFinalizer)) return absl::OkStatus();
  // Only the provisioner of the source's driver (the one that protected it,
  // since a clone is of the same driver) looks after it.
  const std::string pv_name = Str(*source, {"spec", "volumeName"});
  std::shared_ptr<const json> pv = pv_name.empty() ? nullptr : informers_.volumes.GetSharedByKey(pv_name);
  const std::string driver = pv ? Str(*pv, {"spec", "csi", "driver"}) : ClaimProvisioner(*source);
  if (driver != options_.driver) return absl::OkStatus();
  auto cloning = [&](const json& c) { return ClonesFrom(c, Ns(*source), Name(*source)); };
  if (!informers_.claims.Select(cloning).empty()) return absl::OkStatus();  // re-queued when they bind or go
  // The cache may not have a clone created a moment ago: confirm with the
  // store before the source loses its protection.
  auto live = registry_.List(Claims(), Ns(*source), {});
  if (!live.ok()) return live.status();
  if (std::any_of(live->items.begin(), live->items.end(), cloning)) return absl::OkStatus();
  return EditFinalizer(registry_, Claims(), *source, kCloningProtectionFinalizer, false);
}

absl::StatusOr<google::protobuf::Map<std::string, std::string>> Provisioner::DeletionSecrets(const json& pv) {
  google::protobuf::Map<std::string, std::string> secrets;
  std::string name = Annotation(pv, "volume.kubernetes.io/provisioner-deletion-secret-name");
  std::string ns = Annotation(pv, "volume.kubernetes.io/provisioner-deletion-secret-namespace");
  if (name.empty() && Annotation(pv, kAnnProvisionedBy).empty()) {
    // A static volume: the class's provisioner secret, for its claim.
    const json& ref = Field(Field(pv, "spec"), "claimRef");
    std::shared_ptr<const json> sc = informers_.classes.GetSharedByKey(Str(pv, {"spec", "storageClassName"}));
    if (sc && !ref.is_null()) {
      const json claim = {{"metadata", {{"name", Str(ref, {"name"})}, {"namespace", Str(ref, {"namespace"})}}}};
      const json& params = Field(*sc, "parameters");
      name = Expand(Str(params, {StrCat(kReservedPrefix, "provisioner-secret-name")}), claim, Name(pv));
      ns = Expand(Str(params, {StrCat(kReservedPrefix, "provisioner-secret-namespace")}), claim, Name(pv));
    }
  }
  BERTH_ASSIGN_OR_RETURN(const SecretData data, CsiSecret(registry_, ns, name, "provisioner deletion secret"));
  for (const auto& [k, v] : data) secrets[k] = v;
  return secrets;
}

absl::Status Provisioner::CheckNotAttached(const json& pv) {
  BERTH_ASSIGN_OR_RETURN(auto selector,
                         apiserver::FieldSelector::Parse(StrCat("spec.source.persistentVolumeName=", Name(pv))));
  apiserver::ListOptions options;
  options.fields = selector;
  BERTH_ASSIGN_OR_RETURN(apiserver::ListPage page,
                         registry_.List(K("volumeattachments", "storage.k8s.io"), "", options));
  if (page.items.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(StrCat("persistentvolume ", Name(pv), " is still attached to node ",
                                              Str(page.items.front(), {"spec", "nodeName"})));
}

absl::Status Provisioner::SyncVolume(const std::string& name) {
  std::optional<json> cached = informers_.volumes.Get("", name);
  if (!cached || !OwnsVolume(*cached)) return absl::OkStatus();
  // Decide on the stored object: deleting storage on a stale view loses data.
  auto fresh = registry_.Get(K("persistentvolumes"), "", name);
  if (!fresh.ok()) return fresh.status().code() == absl::StatusCode::kNotFound ? absl::OkStatus() : fresh.status();
  const json pv = *fresh;
  if (!OwnsVolume(pv)) return absl::OkStatus();
  const bool provisioned = !Annotation(pv, kAnnProvisionedBy).empty();
  const bool deleting = Deleting(pv);
  const bool finalizer = HasFinalizer(pv, kProvisionerFinalizer);
  const std::string phase = Str(pv, {"status", "phase"});
  const json& ref = Field(Field(pv, "spec"), "claimRef");
  if (Str(pv, {"spec", "persistentVolumeReclaimPolicy"}) != "Delete") {
    // Retain (possibly changed after provisioning): the storage stays.
    return finalizer ? EditFinalizer(registry_, K("persistentvolumes"), pv, kProvisionerFinalizer, false)
                     : absl::OkStatus();
  }
  if (!deleting && !finalizer) {
    // Provisioned ones are created with it (or it was removed by hand);
    // static ones get it once Bound, as upstream.
    if (phase == "Bound" || (provisioned && phase != "Released")) {
      return EditFinalizer(registry_, K("persistentvolumes"), pv, kProvisionerFinalizer, true);
    }
  }
  // Deleted without our finalizer: the storage was never ours to delete
  // (or is deleted already).
  if (deleting && !finalizer) return absl::OkStatus();
  bool reclaim = phase == "Released";
  if (deleting && phase != "Bound" && phase != "Released") {
    if (provisioned) {
      reclaim = true;  // made for a claim: deleted before it was ever bound
    } else if (Str(ref, {"uid"}).empty()) {
      // A static volume deleted while unbound: its storage is the
      // administrator's; only our finalizer goes.
      return EditFinalizer(registry_, K("persistentvolumes"), pv, kProvisionerFinalizer, false);
    } else {
      reclaim = true;  // bound before, its claim gone (confirmed below)
    }
  }
  if (!reclaim) return absl::OkStatus();
  // Released means its claim is gone: make sure against the store (a claim
  // with the referenced uid still holding it means the phase is stale).
  if (!Str(ref, {"uid"}).empty()) {
    auto claim = registry_.Get(Claims(), Str(ref, {"namespace"}), Str(ref, {"name"}));
    if (claim.ok() && Uid(*claim) == Str(ref, {"uid"})) return absl::OkStatus();
    if (!claim.ok() && claim.status().code() != absl::StatusCode::kNotFound) return claim.status();
  }
  auto fail = [&](absl::Status st) {
    events_.Record(pv, "Warning", "VolumeFailedDelete", std::string(st.message()));
    return st;
  };
  if (absl::Status attached = CheckNotAttached(pv); !attached.ok()) return fail(attached);
  auto secrets = DeletionSecrets(pv);
  if (!secrets.ok()) return fail(secrets.status());
  // A node-local volume is deleted where it lives.
  absl::Status st =
      DeleteVolume(Str(pv, {"spec", "csi", "volumeHandle"}), VolumeNode(registry_, pv), *secrets, volume_queue_, name);
  if (!st.ok()) return fail(st);
  if (!deleting) {
    auto deleted = registry_.Delete(K("persistentvolumes"), "", name,
                                    {.uid = Uid(pv),
                                     .resource_version = Str(pv, {"metadata", "resourceVersion"}),
                                     .grace_period_seconds = std::nullopt});
    if (!deleted.ok() && deleted.status().code() != absl::StatusCode::kNotFound) return deleted.status();
  }
  return EditFinalizer(registry_, K("persistentvolumes"), pv, kProvisionerFinalizer, false);
}

}  // namespace berth::controllers
