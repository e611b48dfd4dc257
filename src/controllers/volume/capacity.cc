#include "controllers/volume/capacity.h"

#include <algorithm>
#include <set>
#include <utility>

#include "api/quantity.h"
#include "api/types/core_node.h"
#include "api/types/storage.h"
#include "client/capability.h"
#include "client/object.h"
#include "client/typed.h"
#include "common/status.h"
#include "common/strings.h"
#include "csi/driver_client.h"
#include "spdlog/spdlog.h"

namespace berth::controllers {

using namespace ::berth::client;  // the controllers' own client library
namespace {

using nlohmann::json;
using types::CSIStorageCapacity;
using types::StorageClass;

// Work keys that are not items; item keys always contain '|'.
constexpr char kTopologyKey[] = "@topology";
constexpr char kPollKey[] = "@poll";

const api::KindInfo& CapacityKind() { return K("csistoragecapacities", "storage.k8s.io"); }

std::string ItemKey(const std::string& storage_class, const TopologySegment& segment) {
  std::string key = StrCat(storage_class, "|");
  bool first = true;
  for (const auto& [k, v] : segment) {
    key += StrCat(first ? "" : ",", k, "=", v);
    first = false;
  }
  return key;
}

// A quantity in bytes; nullopt when absent.
std::optional<int64_t> Bytes(const std::optional<api::Quantity>& q) {
  if (!q) return std::nullopt;
  return q->Value();
}

int64_t ResourceVersion(const CSIStorageCapacity& o) {
  int64_t v = 0;
  for (char c : o.metadata.resource_version) {
    if (c < '0' || c > '9') return 0;
    v = v * 10 + (c - '0');
  }
  return v;
}

bool HasOwner(const CSIStorageCapacity& o, const types::OwnerReference& owner) {
  return std::any_of(o.metadata.owner_references.begin(), o.metadata.owner_references.end(),
                     [&](const types::OwnerReference& r) { return r.uid == owner.uid; });
}

// Options::owner as a typed reference (nullopt: none, or not one).
std::optional<types::OwnerReference> OwnerOf(const json& owner) {
  if (owner.is_null()) return std::nullopt;
  types::OwnerReference ref;
  if (absl::Status st = types::DecodeValue(owner, ref, types::Path()); !st.ok()) {
    spdlog::error("capacity: the owner reference {} is not one: {}", owner.dump(), st.ToString());
    return std::nullopt;
  }
  return ref;
}

std::string Describe(const TopologySegment& segment) {
  if (segment.empty()) return "every node";
  std::string out;
  for (const auto& [k, v] : segment) out += StrCat(out.empty() ? "" : ",", k, "=", v);
  return out;
}

}  // namespace

CapacityTracker::CapacityTracker(apiserver::Registry& registry, DriverDirectory& drivers, CapacityInformers informers,
                                 Options options)
    : registry_(registry),
      drivers_(drivers),
      informers_(informers),
      options_(std::move(options)),
      owner_(OwnerOf(options_.owner)),
      events_(registry, StrCat(options_.driver, "_berth-capacity")),
      // A driver that is down is asked again soon, and never less often
      // than it is polled.
      queue_(WorkQueue::Options{.base_delay = absl::Milliseconds(50),
                                .max_delay = std::min(options_.poll_interval, absl::Minutes(5)),
                                .clock = options_.clock}) {}

CapacityTracker::~CapacityTracker() { Stop(); }

void CapacityTracker::RegisterHandlers() {
  auto topology = [this] { queue_.Add(kTopologyKey); };
  auto ours_class = [this](const json& sc) { return Str(sc, {"provisioner"}) == options_.driver; };
  informers_.classes.AddHandlers({
      .on_add =
          [=](const json& sc) {
            if (ours_class(sc)) topology();
          },
      .on_update =
          [=](const json& before, const json& after) {
            if (before != after && (ours_class(before) || ours_class(after))) topology();
          },
      .on_delete =
          [=](const json& sc) {
            if (ours_class(sc)) topology();
          },
  });
  // Only label changes move a node between segments (status updates are
  // frequent and irrelevant).
  informers_.nodes.AddHandlers({
      .on_add = [=](const json&) { topology(); },
      .on_update =
          [=](const json& before, const json& after) {
            if (Field(Field(before, "metadata"), "labels") != Field(Field(after, "metadata"), "labels")) topology();
          },
      .on_delete = [=](const json&) { topology(); },
  });
  informers_.csinodes.AddHandlers({
      .on_add = [=](const json&) { topology(); },
      .on_update =
          [=](const json& before, const json& after) {
            if (Field(before, "spec") != Field(after, "spec")) topology();
          },
      .on_delete = [=](const json&) { topology(); },
  });
  // Someone else's edits of our objects: the topology sync puts back what
  // is missing and deletes what should not be there.
  auto ours = [this](const json& o) {
    absl::StatusOr<CSIStorageCapacity> capacity = DecodeAs<CSIStorageCapacity>(o);
    return capacity.ok() && Ours(*capacity);
  };
  informers_.capacities.AddHandlers({
      .on_add =
          [=](const json& o) {
            if (ours(o)) topology();
          },
      .on_update =
          [=](const json& before, const json& after) {
            if (before != after && (ours(before) || ours(after))) topology();
          },
      .on_delete =
          [=, this](const json& o) {
            if (!ours(o)) return;
            ForgetName(Name(o));
            topology();
          },
  });
}

void CapacityTracker::Start() {
  queue_.Add(kTopologyKey);
  queue_.AddAfter(kPollKey, options_.poll_interval);
  StartWorkers(workers_, std::max(options_.workers, 1), queue_, StrCat("capacity ", options_.driver),
               [this](const std::string& k) { return Sync(k); });
}

void CapacityTracker::Stop() {
  queue_.ShutDown();
  for (auto& w : workers_) w.join();
  workers_.clear();
}

void CapacityTracker::Refresh(absl::Duration within) {
  std::vector<std::string> keys;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [key, item] : desired_) keys.push_back(key);
  }
  queue_.AddAfter(kTopologyKey, within);
  for (const auto& key : keys) queue_.AddAfter(key, within);
}

void CapacityTracker::RefreshNode(const std::string& node, absl::Duration within) {
  std::vector<std::string> keys;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [key, item] : desired_) {
      auto it = segments_.find(item.segment);
      if (it != segments_.end() && std::find(it->second.begin(), it->second.end(), node) != it->second.end()) {
        keys.push_back(key);
      }
    }
  }
  for (const auto& key : keys) queue_.AddAfter(key, within);
}

::csi::v1::GetCapacityRequest CapacityTracker::BuildRequest(const json& storage_class, const TopologySegment& segment) {
  return BuildRequest(DecodeAs<StorageClass>(storage_class).value_or(StorageClass{}), segment);
}

::csi::v1::GetCapacityRequest CapacityTracker::BuildRequest(const StorageClass& storage_class,
                                                            const TopologySegment& segment) {
  ::csi::v1::GetCapacityRequest req;
  std::map<std::string, std::string> reserved;
  SplitClassParameters(storage_class.parameters, req.mutable_parameters(), &reserved);
  const std::string fstype = reserved["fstype"];
  // The spec requires a capability; capacity does not depend on it for
  // most drivers. external-provisioner sends access mode UNKNOWN, which
  // drivers that validate capabilities (berth-csi) refuse with zero
  // capacity, so this is the mode a ReadWriteOnce claim gets.
  auto* cap = req.add_volume_capabilities();
  cap->mutable_access_mode()->set_mode(::csi::v1::VolumeCapability::AccessMode::SINGLE_NODE_WRITER);
  cap->mutable_mount()->set_fs_type(fstype);
  if (!segment.empty()) {
    auto* segments = req.mutable_accessible_topology()->mutable_segments();
    for (const auto& [k, v] : segment) (*segments)[k] = v;
  }
  return req;
}

bool CapacityTracker::Tracked(const StorageClass& storage_class) const {
  if (storage_class.provisioner != options_.driver || storage_class.metadata.Deleting()) return false;
  if (options_.immediate_binding) return true;
  return storage_class.WaitForFirstConsumer();
}

bool CapacityTracker::Ours(const CSIStorageCapacity& capacity) const {
  const types::StringMap& labels = capacity.metadata.labels;
  auto label = [&](const char* key) {
    auto it = labels.find(key);
    return it == labels.end() ? std::string() : it->second;
  };
  return capacity.metadata.namespace_ == options_.ns && label(kCapacityDriverLabel) == options_.driver &&
         label(kCapacityManagedByLabel) == options_.managed_by;
}

std::optional<std::string> CapacityTracker::KeyOf(const CSIStorageCapacity& capacity) {
  if (capacity.storage_class_name.empty() || !capacity.node_topology) return std::nullopt;
  if (!capacity.node_topology->match_expressions.empty()) return std::nullopt;
  return ItemKey(capacity.storage_class_name, capacity.node_topology->match_labels);
}

absl::StatusOr<std::map<TopologySegment, std::vector<std::string>>> CapacityTracker::Segments() const {
  std::map<TopologySegment, std::vector<std::string>> out;
  for (const json& csinode_json : informers_.csinodes.List()) {
    BERTH_ASSIGN_OR_RETURN(const types::CSINode csinode, DecodeAs<types::CSINode>(csinode_json));
    const types::CSINodeDriver* d = csinode.Driver(options_.driver);
    if (d == nullptr) continue;
    std::shared_ptr<const json> node_json = informers_.nodes.GetSharedByKey(csinode.metadata.name);
    if (!node_json) continue;  // a CSINode without its Node: left over
    BERTH_ASSIGN_OR_RETURN(const types::Node node, DecodeAs<types::Node>(*node_json));
    TopologySegment segment;
    bool complete = true;
    for (const std::string& k : d->topology_keys) {
      auto value = node.metadata.labels.find(k);
      if (value == node.metadata.labels.end()) {
        // The driver reported the key but the node's label has not
        // arrived yet: skip the node until it does.
        complete = false;
        break;
      }
      segment[k] = value->second;
    }
    if (complete) out[segment].push_back(csinode.metadata.name);
  }
  return out;
}

absl::StatusOr<bool> CapacityTracker::SupportsGetCapacity() {
  std::optional<bool> known;
  {
    absl::MutexLock lock(&mu_);
    known = get_capacity_;
  }
  // The directory caches each endpoint's answer until it re-registers.
  absl::Status last = absl::UnavailableError(StrCat("CSI driver ", options_.driver, " is not registered"));
  for (const std::string& node : drivers_.Nodes(options_.driver)) {
    auto has = drivers_.ControllerHasCapability(options_.driver, node,
                                                ::csi::v1::ControllerServiceCapability::RPC::GET_CAPACITY);
    if (!has.ok()) {
      last = has.status();
      continue;
    }
    absl::MutexLock lock(&mu_);
    if (get_capacity_ != *has) {
      spdlog::info("capacity {}: the driver {} GET_CAPACITY", options_.driver, *has ? "reports" : "does not report");
    }
    get_capacity_ = *has;
    return *has;
  }
  if (known) {
    spdlog::warn("capacity {}: ControllerGetCapabilities: {}; keeping the last answer", options_.driver,
                 last.ToString());
    return *known;
  }
  return last;
}

absl::Status CapacityTracker::Sync(const std::string& key) {
  if (key == kPollKey) {
    Refresh();
    queue_.AddAfter(kPollKey, options_.poll_interval);
    return absl::OkStatus();
  }
  if (key == kTopologyKey) return SyncTopology();
  return SyncItem(key);
}

absl::Status CapacityTracker::SyncTopology() {
  for (Informer* i : {&informers_.classes, &informers_.nodes, &informers_.csinodes, &informers_.capacities}) {
    if (!i->WaitForSync(absl::ZeroDuration())) {
      return absl::UnavailableError(StrCat("waiting for the ", i->kind().resource, " cache"));
    }
  }
  BERTH_ASSIGN_OR_RETURN(const bool supported, SupportsGetCapacity());
  std::map<std::string, Item> desired;
  std::map<TopologySegment, std::vector<std::string>> segments;
  if (supported) {
    BERTH_ASSIGN_OR_RETURN(segments, Segments());
    for (const json& sc_json : informers_.classes.List()) {
      BERTH_ASSIGN_OR_RETURN(const StorageClass sc, DecodeAs<StorageClass>(sc_json));
      if (!Tracked(sc)) continue;
      for (const auto& [segment, nodes] : segments) {
        desired.emplace(ItemKey(sc.metadata.name, segment), Item{sc.metadata.name, segment});
      }
    }
  }
  std::vector<CSIStorageCapacity> stale_written;
  std::map<std::string, std::string> written_names;  // desired item → the object we last wrote for it
  std::set<std::string> fresh;                       // items that were not desired before (all of them at start)
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [key, item] : desired) {
      if (!desired_.contains(key)) fresh.insert(key);
    }
    desired_ = desired;
    segments_ = segments;
    for (const auto& [key, obj] : written_) {
      if (desired.contains(key)) {
        written_names[key] = obj.metadata.name;
      } else {
        stale_written.push_back(obj);
      }
    }
  }
  absl::Status result;
  std::map<std::string, int> found;
  std::set<std::string> deleted, seen;
  for (const CSIStorageCapacity& o : OurObjects()) {
    std::optional<std::string> key = KeyOf(o);
    if (key && desired.contains(*key)) {
      ++found[*key];
      seen.insert(o.metadata.name);
      continue;
    }
    result.Update(DeleteObject(o, key ? "its topology segment or storage class is gone" : "it is malformed"));
    deleted.insert(o.metadata.name);
  }
  // Objects we wrote for items no longer wanted, which the cache may not
  // show yet.
  for (const CSIStorageCapacity& o : stale_written) {
    if (!deleted.contains(o.metadata.name)) {
      result.Update(DeleteObject(o, "its topology segment or storage class is gone"));
    }
  }
  // What we wrote and the cache does not show yet exists too (deleted
  // meanwhile, it is forgotten by the delete handler or found missing by
  // the next item sync).
  for (const auto& [key, name] : written_names) {
    if (!seen.contains(name)) ++found[key];
  }
  // New items are asked for (an object found for one, left by an earlier
  // run, may be out of date), missing objects created and duplicates
  // resolved by the item sync. (One we just wrote may not be in the cache
  // yet: its item sync finds it.)
  for (const auto& [key, item] : desired) {
    if (fresh.contains(key) || found[key] != 1) queue_.Add(key);
  }
  return result;
}

bool CapacityTracker::Desired(const std::string& key) const {
  absl::MutexLock lock(&mu_);
  return desired_.contains(key);
}

absl::StatusOr<::csi::v1::GetCapacityResponse> CapacityTracker::GetCapacity(
    const ::csi::v1::GetCapacityRequest& request, const std::vector<std::string>& nodes) {
  // Nodes with an endpoint of their own first; the others are reached
  // through a cluster-wide controller, if there is one.
  std::vector<std::string> registered = drivers_.Nodes(options_.driver);
  std::vector<std::string> order = nodes;
  std::stable_partition(order.begin(), order.end(), [&](const std::string& n) {
    return std::find(registered.begin(), registered.end(), n) != registered.end();
  });
  absl::Status last = absl::UnavailableError(StrCat("no node of the segment has CSI driver ", options_.driver));
  for (const std::string& node : order) {
    auto channel = drivers_.Channel(options_.driver, node);
    if (!channel.ok()) {
      last = channel.status();
      continue;
    }
    auto resp = csi::DriverClient(*channel, {.driver = options_.driver})
                    .GetCapacity(request, {.timeout = options_.rpc_timeout});
    if (resp.ok()) return resp;
    last = absl::Status(resp.status().code(),
                        StrCat("GetCapacity on node ", node, ": ", std::string(resp.status().message())));
    // Another node of the segment helps only when this one is not there.
    if (csi::Classify(last) != csi::ErrorClass::kDriverUnavailable) break;
  }
  return last;
}

std::vector<CSIStorageCapacity> CapacityTracker::OurObjects() const {
  std::vector<CSIStorageCapacity> out;
  informers_.capacities.Select([&](const json& c) {
    absl::StatusOr<CSIStorageCapacity> capacity = DecodeAs<CSIStorageCapacity>(c);
    if (!capacity.ok()) {
      // Not ours to judge: berth writes only objects that decode.
      spdlog::warn("capacity {}: {}", options_.driver, capacity.status().ToString());
    } else if (Ours(*capacity) && !capacity->metadata.Deleting()) {
      out.push_back(*std::move(capacity));
    }
    return false;
  });
  return out;
}

std::vector<CSIStorageCapacity> CapacityTracker::ObjectsFor(const std::string& key) {
  std::vector<CSIStorageCapacity> objects;
  for (auto& o : OurObjects()) {
    if (KeyOf(o) == key) objects.push_back(std::move(o));
  }
  std::optional<CSIStorageCapacity> written;
  {
    absl::MutexLock lock(&mu_);
    if (auto it = written_.find(key); it != written_.end()) written = it->second;
  }
  if (written) {
    const std::string& name = written->metadata.name;
    auto same = std::find_if(objects.begin(), objects.end(),
                             [&](const CSIStorageCapacity& o) { return o.metadata.name == name; });
    if (same != objects.end()) {
      if (ResourceVersion(*written) > ResourceVersion(*same)) *same = *written;
    } else {
      // Not in the cache: just written (the watch is behind), or deleted
      // before we noted it. The registry knows which.
      auto current = GetTyped<CSIStorageCapacity>(registry_, CapacityKind(), options_.ns, name);
      if (current.ok() && current->metadata.uid == written->metadata.uid && !current->metadata.Deleting()) {
        objects.push_back(*std::move(current));
      } else if (!current.ok() && current.status().code() == absl::StatusCode::kNotFound) {
        ForgetName(name);
      }
    }
  }
  // Keep the one we wrote last, else the oldest.
  const std::string keep = written ? written->metadata.name : "";
  std::sort(objects.begin(), objects.end(), [&](const CSIStorageCapacity& a, const CSIStorageCapacity& b) {
    if ((a.metadata.name == keep) != (b.metadata.name == keep)) return a.metadata.name == keep;
    const std::string &ta = a.metadata.creation_timestamp, &tb = b.metadata.creation_timestamp;
    return ta != tb ? ta < tb : a.metadata.name < b.metadata.name;
  });
  return objects;
}

absl::Status CapacityTracker::SyncItem(const std::string& key) {
  Item item;
  std::vector<std::string> nodes;
  {
    absl::MutexLock lock(&mu_);
    auto it = desired_.find(key);
    if (it == desired_.end()) return absl::OkStatus();  // gone: the topology sync deletes its object
    item = it->second;
    if (auto s = segments_.find(item.segment); s != segments_.end()) nodes = s->second;
  }
  std::shared_ptr<const json> sc_json = informers_.classes.GetSharedByKey(item.storage_class);
  if (!sc_json) return absl::OkStatus();
  BERTH_ASSIGN_OR_RETURN(const StorageClass sc, DecodeAs<StorageClass>(*sc_json));
  if (!Tracked(sc)) return absl::OkStatus();
  const ::csi::v1::GetCapacityRequest request = BuildRequest(sc, item.segment);
  absl::StatusOr<::csi::v1::GetCapacityResponse> response = GetCapacity(request, nodes);
  if (!response.ok()) {
    // Keep what was published: a driver that is restarting has not lost
    // its storage.
    const std::string message =
        StrCat("GetCapacity for storage class ", item.storage_class, " in segment ", Describe(item.segment),
               " failed: ", std::string(response.status().message()), "; keeping the last published capacity");
    spdlog::warn("capacity {}: {}", options_.driver, message);
    std::vector<CSIStorageCapacity> existing = ObjectsFor(key);
    events_.Record(existing.empty() ? IdentityOf(sc) : IdentityOf(existing.front()), "Warning", "GetCapacityFailed",
                   message);
    return response.status();
  }
  const ::csi::v1::GetCapacityResponse resp = *response;
  if (!Desired(key)) return absl::OkStatus();  // removed while we asked
  const int64_t capacity = std::max<int64_t>(resp.available_capacity(), 0);
  const std::optional<int64_t> maximum =
      resp.has_maximum_volume_size() ? std::optional<int64_t>(std::max<int64_t>(resp.maximum_volume_size().value(), 0))
                                     : std::nullopt;
  std::vector<CSIStorageCapacity> objects = ObjectsFor(key);
  if (objects.empty()) return CreateObject(key, item, capacity, maximum);
  absl::Status result;
  for (size_t i = 1; i < objects.size(); ++i) result.Update(DeleteObject(objects[i], "it duplicates another object"));
  result.Update(UpdateObject(key, item, objects.front(), capacity, maximum));
  return result;
}

absl::Status CapacityTracker::CreateObject(const std::string& key, const Item& item, int64_t capacity,
                                           std::optional<int64_t> maximum) {
  CSIStorageCapacity obj;
  obj.api_version = "storage.k8s.io/v1";
  obj.kind = "CSIStorageCapacity";
  obj.metadata.generate_name = "csisc-";
  obj.metadata.namespace_ = options_.ns;
  obj.metadata.labels = {{kCapacityDriverLabel, options_.driver}, {kCapacityManagedByLabel, options_.managed_by}};
  if (owner_) obj.metadata.owner_references = {*owner_};
  obj.node_topology.emplace().match_labels = item.segment;
  obj.storage_class_name = item.storage_class;
  obj.capacity = api::Quantity::FromBytes(capacity);
  if (maximum) obj.maximum_volume_size = api::Quantity::FromBytes(*maximum);
  auto created = registry_.Create(CapacityKind(), options_.ns, types::Encode(obj));
  if (!created.ok()) return created.status();
  BERTH_ASSIGN_OR_RETURN(const CSIStorageCapacity written, DecodeAs<CSIStorageCapacity>(*created));
  spdlog::debug("capacity {}: created {} for {} with {} bytes", options_.driver, written.metadata.name, key, capacity);
  Remember(key, written);
  return absl::OkStatus();
}

absl::Status CapacityTracker::UpdateObject(const std::string& key, const Item& item, const CSIStorageCapacity& existing,
                                           int64_t capacity, std::optional<int64_t> maximum) {
  auto up_to_date = [&](const CSIStorageCapacity& o) {
    return Bytes(o.capacity) == capacity && Bytes(o.maximum_volume_size) == maximum &&
           (!owner_ || HasOwner(o, *owner_));
  };
  if (up_to_date(existing)) return absl::OkStatus();
  // Edit a fresh copy, so the update carries the current resourceVersion.
  const std::string& name = existing.metadata.name;
  auto current = GetTyped<CSIStorageCapacity>(registry_, CapacityKind(), options_.ns, name);
  if (!current.ok()) {
    if (current.status().code() != absl::StatusCode::kNotFound) return current.status();
    ForgetName(name);
    return CreateObject(key, item, capacity, maximum);
  }
  CSIStorageCapacity& obj = *current;
  if (obj.metadata.uid != existing.metadata.uid || obj.metadata.Deleting()) {
    return absl::AbortedError(StrCat("CSIStorageCapacity ", name, " was replaced meanwhile"));
  }
  if (up_to_date(obj)) return absl::OkStatus();
  obj.capacity = api::Quantity::FromBytes(capacity);
  obj.maximum_volume_size.reset();
  if (maximum) obj.maximum_volume_size = api::Quantity::FromBytes(*maximum);
  if (owner_ && !HasOwner(obj, *owner_)) obj.metadata.owner_references.push_back(*owner_);
  auto updated = registry_.Update(CapacityKind(), options_.ns, name, types::Encode(obj), apiserver::Subresource::kMain);
  if (!updated.ok()) return updated.status();
  BERTH_ASSIGN_OR_RETURN(const CSIStorageCapacity written, DecodeAs<CSIStorageCapacity>(*updated));
  spdlog::debug("capacity {}: updated {} for {} to {} bytes", options_.driver, name, key, capacity);
  Remember(key, written);
  return absl::OkStatus();
}

absl::Status CapacityTracker::DeleteObject(const CSIStorageCapacity& capacity, const std::string& why) {
  const std::string& name = capacity.metadata.name;
  spdlog::debug("capacity {}: deleting {}: {}", options_.driver, name, why);
  apiserver::DeleteOptions precondition;
  precondition.uid = capacity.metadata.uid;
  auto deleted = registry_.Delete(CapacityKind(), options_.ns, name, precondition);
  if (!deleted.ok() && deleted.status().code() != absl::StatusCode::kNotFound) {
    // A failed uid precondition: someone replaced it; the next sync looks again.
    return deleted.status();
  }
  ForgetName(name);
  return absl::OkStatus();
}

void CapacityTracker::Remember(const std::string& key, const CSIStorageCapacity& written) {
  absl::MutexLock lock(&mu_);
  if (auto it = written_.find(key); it != written_.end() && it->second.metadata.name != written.metadata.name) {
    written_names_.erase(it->second.metadata.name);
  }
  written_[key] = written;
  written_names_[written.metadata.name] = key;
}

void CapacityTracker::ForgetName(const std::string& name) {
  absl::MutexLock lock(&mu_);
  ForgetNameLocked(name);
}

void CapacityTracker::ForgetNameLocked(const std::string& name) {
  mu_.AssertHeld();
  auto it = written_names_.find(name);
  if (it == written_names_.end()) return;
  if (auto w = written_.find(it->second); w != written_.end() && w->second.metadata.name == name) written_.erase(w);
  written_names_.erase(it);
}

}  // namespace berth::controllers
