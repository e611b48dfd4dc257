#include "controllers/volume/capacity.h"

#include <algorithm>
#include <set>
#include <utility>

#include "api/quantity.h"
#include "client/capability.h"
#include "client/object.h"
#include "common/status.h"
#include "common/strings.h"
#include "csi/driver_client.h"
#include "spdlog/spdlog.h"

namespace berth::controllers {

using namespace ::berth::client;  // the controllers' own client library
namespace {

using nlohmann::json;

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

// A quantity field ("capacity", "maximumVolumeSize") in bytes; nullopt when
// absent or unreadable.
std::optional<int64_t> Bytes(const json& capacity, std::string_view field) {
  const json& q = Field(capacity, field);
  if (!q.is_string()) return std::nullopt;
  auto parsed = api::Quantity::Parse(q.get<std::string>());
  if (!parsed.ok()) return std::nullopt;
  return parsed->Value();
}

int64_t ResourceVersion(const json& o) {
  const std::string rv = Str(o, {"metadata", "resourceVersion"});
  int64_t v = 0;
  for (char c : rv) {
    if (c < '0' || c > '9') return 0;
    v = v * 10 + (c - '0');
  }
  return v;
}

bool HasOwner(const json& o, const json& owner) {
  const json& refs = Field(Field(o, "metadata"), "ownerReferences");
  if (!refs.is_array()) return false;
  const std::string uid = Str(owner, {"uid"});
  return std::any_of(refs.begin(), refs.end(), [&](const json& r) { return Str(r, {"uid"}) == uid; });
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
  informers_.capacities.AddHandlers({
      .on_add =
          [=, this](const json& o) {
            if (Ours(o)) topology();
          },
      .on_update =
          [=, this](const json& before, const json& after) {
            if (before != after && (Ours(before) || Ours(after))) topology();
          },
      .on_delete =
          [=, this](const json& o) {
            if (!Ours(o)) return;
            ForgetName(Name(o));
            topology();
          },
  });
}

void CapacityTracker::Start() {
  queue_.Add(kTopologyKey);
  queue_.AddAfter(kPollKey, options_.poll_interval);
  const std::string name = StrCat("capacity ", options_.driver);
  for (int i = 0; i < std::max(options_.workers, 1); ++i) {
    workers_.emplace_back([this, name] { RunWorker(queue_, name, [this](const std::string& k) { return Sync(k); }); });
  }
}

void CapacityTracker::Stop() {
  queue_.ShutDown();
  for (auto& w : workers_) w.join();
  workers_.clear();
}

void CapacityTracker::Refresh() {
  std::vector<std::string> keys;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [key, item] : desired_) keys.push_back(key);
  }
  queue_.Add(kTopologyKey);
  for (const auto& key : keys) queue_.Add(key);
}

void CapacityTracker::RefreshNode(const std::string& node) {
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
  for (const auto& key : keys) queue_.Add(key);
}

::csi::v1::GetCapacityRequest CapacityTracker::BuildRequest(const json& storage_class, const TopologySegment& segment) {
  ::csi::v1::GetCapacityRequest req;
  std::map<std::string, std::string> reserved;
  SplitClassParameters(Field(storage_class, "parameters"), req.mutable_parameters(), &reserved);
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

bool CapacityTracker::Tracked(const json& storage_class) const {
  if (Str(storage_class, {"provisioner"}) != options_.driver || Deleting(storage_class)) return false;
  if (options_.immediate_binding) return true;
  return Str(storage_class, {"volumeBindingMode"}) == "WaitForFirstConsumer";
}

bool CapacityTracker::Ours(const json& capacity) const {
  return Ns(capacity) == options_.ns &&
         Str(capacity, {"metadata", "labels", kCapacityDriverLabel}) == options_.driver &&
         Str(capacity, {"metadata", "labels", kCapacityManagedByLabel}) == options_.managed_by;
}

std::optional<std::string> CapacityTracker::KeyOf(const json& capacity) {
  const std::string storage_class = Str(capacity, {"storageClassName"});
  const json& topology = Field(capacity, "nodeTopology");
  if (storage_class.empty() || !topology.is_object()) return std::nullopt;
  if (const json& exprs = Field(topology, "matchExpressions"); !exprs.is_null() && !exprs.empty()) {
    return std::nullopt;
  }
  TopologySegment segment;
  const json& labels = Field(topology, "matchLabels");
  if (labels.is_object()) {
    for (const auto& [k, v] : labels.items()) {
      if (!v.is_string()) return std::nullopt;
      segment[k] = v.get<std::string>();
    }
  } else if (!labels.is_null()) {
    return std::nullopt;
  }
  return ItemKey(storage_class, segment);
}

std::map<TopologySegment, std::vector<std::string>> CapacityTracker::Segments() const {
  std::map<TopologySegment, std::vector<std::string>> out;
  for (const json& csinode : informers_.csinodes.List()) {
    const json& entries = Field(Field(csinode, "spec"), "drivers");
    if (!entries.is_array()) continue;
    for (const json& d : entries) {
      if (Str(d, {"name"}) != options_.driver) continue;
      std::optional<json> node = informers_.nodes.Get("", Name(csinode));
      if (!node) break;  // a CSINode without its Node: left over
      TopologySegment segment;
      bool complete = true;
      const json& keys = Field(d, "topologyKeys");
      if (keys.is_array()) {
        for (const json& k : keys) {
          if (!k.is_string()) continue;
          const json& value = Field(Field(Field(*node, "metadata"), "labels"), k.get<std::string>());
          if (!value.is_string()) {
            // The driver reported the key but the node's label has not
            // arrived yet: skip the node until it does.
            complete = false;
            break;
          }
          segment[k.get<std::string>()] = value.get<std::string>();
        }
      }
      if (complete) out[segment].push_back(Name(csinode));
      break;
    }
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
    segments = Segments();
    for (const json& sc : informers_.classes.Select([this](const json& c) { return Tracked(c); })) {
      for (const auto& [segment, nodes] : segments) {
        desired.emplace(ItemKey(Name(sc), segment), Item{Name(sc), segment});
      }
    }
  }
  std::vector<json> stale_written;
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
        written_names[key] = Name(obj);
      } else {
        stale_written.push_back(obj);
      }
    }
  }
  absl::Status result;
  std::map<std::string, int> found;
  std::set<std::string> deleted, seen;
  for (const json& o : informers_.capacities.Select([this](const json& c) { return Ours(c) && !Deleting(c); })) {
    std::optional<std::string> key = KeyOf(o);
    if (key && desired.contains(*key)) {
      ++found[*key];
      seen.insert(Name(o));
      continue;
    }
    result.Update(DeleteObject(o, key ? "its topology segment or storage class is gone" : "it is malformed"));
    deleted.insert(Name(o));
  }
  // Objects we wrote for items no longer wanted, which the cache may not
  // show yet.
  for (const json& o : stale_written) {
    if (!deleted.contains(Name(o))) result.Update(DeleteObject(o, "its topology segment or storage class is gone"));
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

std::vector<json> CapacityTracker::ObjectsFor(const std::string& key) {
  std::vector<json> objects =
      informers_.capacities.Select([&](const json& c) { return Ours(c) && !Deleting(c) && KeyOf(c) == key; });
  std::optional<json> written;
  {
    absl::MutexLock lock(&mu_);
    if (auto it = written_.find(key); it != written_.end()) written = it->second;
  }
  if (written) {
    auto same = std::find_if(objects.begin(), objects.end(), [&](const json& o) { return Name(o) == Name(*written); });
    if (same != objects.end()) {
      if (ResourceVersion(*written) > ResourceVersion(*same)) *same = *written;
    } else {
      // Not in the cache: just written (the watch is behind), or deleted
      // before we noted it. The registry knows which.
      auto current = registry_.Get(CapacityKind(), options_.ns, Name(*written));
      if (current.ok() && Uid(*current) == Uid(*written) && !Deleting(*current)) {
        objects.push_back(*current);
      } else if (!current.ok() && current.status().code() == absl::StatusCode::kNotFound) {
        ForgetName(Name(*written));
      }
    }
  }
  // Keep the one we wrote last, else the oldest.
  const std::string keep = written ? Name(*written) : "";
  std::sort(objects.begin(), objects.end(), [&](const json& a, const json& b) {
    if ((Name(a) == keep) != (Name(b) == keep)) return Name(a) == keep;
    const std::string ta = Str(a, {"metadata", "creationTimestamp"}), tb = Str(b, {"metadata", "creationTimestamp"});
    return ta != tb ? ta < tb : Name(a) < Name(b);
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
  std::optional<json> sc = informers_.classes.Get("", item.storage_class);
  if (!sc || !Tracked(*sc)) return absl::OkStatus();
  const ::csi::v1::GetCapacityRequest request = BuildRequest(*sc, item.segment);
  absl::StatusOr<::csi::v1::GetCapacityResponse> response = GetCapacity(request, nodes);
  if (!response.ok()) {
    // Keep what was published: a driver that is restarting has not lost
    // its storage.
    const std::string message =
        StrCat("GetCapacity for storage class ", item.storage_class, " in segment ", Describe(item.segment),
               " failed: ", std::string(response.status().message()), "; keeping the last published capacity");
    spdlog::warn("capacity {}: {}", options_.driver, message);
    std::vector<json> existing = ObjectsFor(key);
    events_.Record(existing.empty() ? *sc : existing.front(), "Warning", "GetCapacityFailed", message);
    return response.status();
  }
  const ::csi::v1::GetCapacityResponse resp = *response;
  if (!Desired(key)) return absl::OkStatus();  // removed while we asked
  const int64_t capacity = std::max<int64_t>(resp.available_capacity(), 0);
  const std::optional<int64_t> maximum =
      resp.has_maximum_volume_size() ? std::optional<int64_t>(std::max<int64_t>(resp.maximum_volume_size().value(), 0))
                                     : std::nullopt;
  std::vector<json> objects = ObjectsFor(key);
  if (objects.empty()) return CreateObject(key, item, capacity, maximum);
  absl::Status result;
  for (size_t i = 1; i < objects.size(); ++i) result.Update(DeleteObject(objects[i], "it duplicates another object"));
  result.Update(UpdateObject(key, item, objects.front(), capacity, maximum));
  return result;
}

absl::Status CapacityTracker::CreateObject(const std::string& key, const Item& item, int64_t capacity,
                                           std::optional<int64_t> maximum) {
  json match_labels = json::object();
  for (const auto& [k, v] : item.segment) match_labels[k] = v;
  json obj = {{"apiVersion", "storage.k8s.io/v1"},
              {"kind", "CSIStorageCapacity"},
              {"metadata",
               {{"generateName", "csisc-"},
                {"namespace", options_.ns},
                {"labels", {{kCapacityDriverLabel, options_.driver}, {kCapacityManagedByLabel, options_.managed_by}}}}},
              {"nodeTopology", {{"matchLabels", match_labels}}},
              {"storageClassName", item.storage_class},
              {"capacity", api::Quantity::FromBytes(capacity).ToString()}};
  if (maximum) obj["maximumVolumeSize"] = api::Quantity::FromBytes(*maximum).ToString();
  if (!options_.owner.is_null()) obj["metadata"]["ownerReferences"] = json::array({options_.owner});
  auto created = registry_.Create(CapacityKind(), options_.ns, obj);
  if (!created.ok()) return created.status();
  const json written = *created;
  spdlog::debug("capacity {}: created {} for {} with {} bytes", options_.driver, Name(written), key, capacity);
  Remember(key, written);
  return absl::OkStatus();
}

absl::Status CapacityTracker::UpdateObject(const std::string& key, const Item& item, const json& existing,
                                           int64_t capacity, std::optional<int64_t> maximum) {
  auto up_to_date = [&](const json& o) {
    return Bytes(o, "capacity") == capacity && Bytes(o, "maximumVolumeSize") == maximum &&
           (maximum || Field(o, "maximumVolumeSize").is_null()) &&
           (options_.owner.is_null() || HasOwner(o, options_.owner));
  };
  if (up_to_date(existing)) return absl::OkStatus();
  // Edit a fresh copy, so the update carries the current resourceVersion.
  auto current = registry_.Get(CapacityKind(), options_.ns, Name(existing));
  if (!current.ok()) {
    if (current.status().code() != absl::StatusCode::kNotFound) return current.status();
    ForgetName(Name(existing));
    return CreateObject(key, item, capacity, maximum);
  }
  json obj = *current;
  if (Uid(obj) != Uid(existing) || Deleting(obj)) {
    return absl::AbortedError(StrCat("CSIStorageCapacity ", Name(existing), " was replaced meanwhile"));
  }
  if (up_to_date(obj)) return absl::OkStatus();
  obj["capacity"] = api::Quantity::FromBytes(capacity).ToString();
  if (maximum) {
    obj["maximumVolumeSize"] = api::Quantity::FromBytes(*maximum).ToString();
  } else {
    obj.erase("maximumVolumeSize");
  }
  if (!options_.owner.is_null() && !HasOwner(obj, options_.owner)) {
    obj["metadata"]["ownerReferences"].push_back(options_.owner);
  }
  auto updated = registry_.Update(CapacityKind(), options_.ns, Name(obj), obj, apiserver::Subresource::kMain);
  if (!updated.ok()) return updated.status();
  const json written = *updated;
  spdlog::debug("capacity {}: updated {} for {} to {} bytes", options_.driver, Name(written), key, capacity);
  Remember(key, written);
  return absl::OkStatus();
}

absl::Status CapacityTracker::DeleteObject(const json& capacity, const std::string& why) {
  spdlog::debug("capacity {}: deleting {}: {}", options_.driver, Name(capacity), why);
  apiserver::DeleteOptions precondition;
  precondition.uid = Uid(capacity);
  auto deleted = registry_.Delete(CapacityKind(), options_.ns, Name(capacity), precondition);
  if (!deleted.ok() && deleted.status().code() != absl::StatusCode::kNotFound) {
    // A failed uid precondition: someone replaced it; the next sync looks again.
    return deleted.status();
  }
  ForgetName(Name(capacity));
  return absl::OkStatus();
}

void CapacityTracker::Remember(const std::string& key, const json& written) {
  absl::MutexLock lock(&mu_);
  if (auto it = written_.find(key); it != written_.end() && Name(it->second) != Name(written)) {
    written_names_.erase(Name(it->second));
  }
  written_[key] = written;
  written_names_[Name(written)] = key;
}

void CapacityTracker::ForgetName(const std::string& name) {
  absl::MutexLock lock(&mu_);
  ForgetNameLocked(name);
}

void CapacityTracker::ForgetNameLocked(const std::string& name) {
  mu_.AssertHeld();
  auto it = written_names_.find(name);
  if (it == written_names_.end()) return;
  if (auto w = written_.find(it->second); w != written_.end() && Name(w->second) == name) written_.erase(w);
  written_names_.erase(it);
}

}  // namespace berth::controllers
