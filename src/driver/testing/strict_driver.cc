// The strict driver's core: the call envelope (capabilities, one call in
// flight per volume, faults), violations, state on disk, Identity and
// Controller. The Node service is in strict_node.cc.
#include "driver/testing/strict_driver.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "common/fs.h"
#include "common/hash.h"
#include "common/status.h"
#include "common/strings.h"
#include "csi/grpc_status.h"
#include "driver/testing/strict_internal.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/message_differencer.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"

namespace berth::driver::testing {
namespace {

namespace fs = std::filesystem;
using namespace strict_internal;
using ::csi::v1::ControllerServiceCapability;
using ::csi::v1::NodeServiceCapability;
using ::csi::v1::PluginCapability;
using ::csi::v1::VolumeCapability;
using nlohmann::json;
using AccessMode = ::csi::v1::VolumeCapability::AccessMode;

constexpr int kStateVersion = 1;

struct OpName {
  StrictOp op;
  const char* name;
};
constexpr OpName kOpNames[] = {
    {StrictOp::kCreate, "create"},
    {StrictOp::kDelete, "delete"},
    {StrictOp::kControllerPublish, "controller-publish"},
    {StrictOp::kControllerUnpublish, "controller-unpublish"},
    {StrictOp::kControllerExpand, "controller-expand"},
    {StrictOp::kStage, "stage"},
    {StrictOp::kUnstage, "unstage"},
    {StrictOp::kPublish, "publish"},
    {StrictOp::kUnpublish, "unpublish"},
    {StrictOp::kStats, "stats"},
    {StrictOp::kNodeExpand, "node-expand"},
};

constexpr std::pair<const char*, absl::StatusCode> kCodes[] = {
    {"CANCELLED", absl::StatusCode::kCancelled},
    {"UNKNOWN", absl::StatusCode::kUnknown},
    {"INVALID_ARGUMENT", absl::StatusCode::kInvalidArgument},
    {"DEADLINE_EXCEEDED", absl::StatusCode::kDeadlineExceeded},
    {"NOT_FOUND", absl::StatusCode::kNotFound},
    {"ALREADY_EXISTS", absl::StatusCode::kAlreadyExists},
    {"PERMISSION_DENIED", absl::StatusCode::kPermissionDenied},
    {"RESOURCE_EXHAUSTED", absl::StatusCode::kResourceExhausted},
    {"FAILED_PRECONDITION", absl::StatusCode::kFailedPrecondition},
    {"ABORTED", absl::StatusCode::kAborted},
    {"OUT_OF_RANGE", absl::StatusCode::kOutOfRange},
    {"UNIMPLEMENTED", absl::StatusCode::kUnimplemented},
    {"INTERNAL", absl::StatusCode::kInternal},
    {"UNAVAILABLE", absl::StatusCode::kUnavailable},
    {"DATA_LOSS", absl::StatusCode::kDataLoss},
    {"UNAUTHENTICATED", absl::StatusCode::kUnauthenticated},
};

std::string CapText(const VolumeCapability& cap) {
  google::protobuf::TextFormat::Printer printer;
  printer.SetSingleLineMode(true);
  std::string out;
  printer.PrintToString(cap, &out);
  return out;
}
VolumeCapability CapFrom(const json& text) {
  VolumeCapability cap;
  if (text.is_string()) google::protobuf::TextFormat::ParseFromString(text.get<std::string>(), &cap);
  return cap;
}

bool SingleNodeMultiWriterMode(AccessMode::Mode m) {
  return m == AccessMode::SINGLE_NODE_SINGLE_WRITER || m == AccessMode::SINGLE_NODE_MULTI_WRITER;
}
bool MultiNodeMode(AccessMode::Mode m) {
  return m == AccessMode::MULTI_NODE_READER_ONLY || m == AccessMode::MULTI_NODE_SINGLE_WRITER ||
         m == AccessMode::MULTI_NODE_MULTI_WRITER;
}

// Runs `fn` when it goes out of scope (the end of a call's in-flight mark).
class Deferred {
 public:
  explicit Deferred(std::function<void()> fn) : fn_(std::move(fn)) {}
  ~Deferred() {
    if (fn_) fn_();
  }
  Deferred(const Deferred&) = delete;
  Deferred& operator=(const Deferred&) = delete;

 private:
  std::function<void()> fn_;
};

}  // namespace

// Volume IDs are ours: "vol-" + 32 hex digits of the name's SHA-256. An ID
// from a request is only ever looked up, never used as a path unchecked.
std::string StrictVolumeId(const std::string& name) { return "vol-" + Sha256Hex(name).substr(0, 32); }

absl::StatusOr<StrictFault> ParseStrictFault(std::string_view text) {
  std::vector<std::string> parts;
  for (std::string_view p : Split(text, ':')) parts.emplace_back(p);
  if (parts.size() < 2 || parts.size() > 4) {
    return absl::InvalidArgumentError(StrCat("--fault \"", text, "\": want op:CODE[:count[:before|after]]"));
  }
  StrictFault f;
  bool known_op = false;
  for (const auto& [op, name] : kOpNames) {
    if (parts[0] == name) {
      f.op = op;
      known_op = true;
    }
  }
  if (!known_op) return absl::InvalidArgumentError(StrCat("--fault \"", text, "\": unknown RPC \"", parts[0], "\""));
  bool known_code = false;
  for (const auto& [name, code] : kCodes) {
    if (parts[1] == name) {
      f.code = code;
      known_code = true;
    }
  }
  if (!known_code) return absl::InvalidArgumentError(StrCat("--fault \"", text, "\": unknown code \"", parts[1], "\""));
  if (parts.size() > 2 && (!absl::SimpleAtoi(absl::string_view(parts[2]), &f.count) || f.count < 1)) {
    return absl::InvalidArgumentError(StrCat("--fault \"", text, "\": the count must be a positive number"));
  }
  if (parts.size() > 3) {
    if (parts[3] != "before" && parts[3] != "after") {
      return absl::InvalidArgumentError(StrCat("--fault \"", text, "\": want before or after"));
    }
    f.after = parts[3] == "after";
  }
  return f;
}

StrictDriver::StrictDriver(Options options, driver::Mounter& mounter)
    : options_(std::move(options)), mounter_(mounter) {}

StrictDriver::~StrictDriver() = default;

absl::StatusOr<std::unique_ptr<StrictDriver>> StrictDriver::Open(Options options, driver::Mounter& mounter) {
  if (!IsCanonicalAbsolutePath(options.state_dir)) {
    return absl::InvalidArgumentError(
        StrCat("--state-dir \"", options.state_dir, "\": want a canonical absolute path"));
  }
  if (options.node_id.empty()) return absl::InvalidArgumentError("--node-id is required");
  BERTH_RETURN_IF_ERROR(MakeDirs(options.state_dir + "/volumes", 0700));
  std::unique_ptr<StrictDriver> d(new StrictDriver(std::move(options), mounter));
  d->identity_ = std::make_unique<IdentityImpl>(*d);
  d->controller_ = std::make_unique<ControllerImpl>(*d);
  d->node_ = std::make_unique<NodeImpl>(*d);
  {
    absl::MutexLock lock(&d->violations_mu_);
    d->faults_ = d->options_.faults;
  }
  absl::MutexLock lock(&d->mu_);
  BERTH_RETURN_IF_ERROR(d->Load());
  return d;
}

std::vector<grpc::Service*> StrictDriver::services() { return {identity_.get(), controller_.get(), node_.get()}; }

// ---- violations, faults, the call envelope ----

absl::Status StrictDriver::Violation(std::string_view rpc, std::string_view volume, std::string_view what,
                                     absl::StatusCode code) {
  const std::string line = StrCat(rpc, " ", volume.empty() ? "-" : volume, ": ", what);
  spdlog::error("CO violation: {}", line);
  absl::MutexLock lock(&violations_mu_);
  violations_.push_back(line);
  if (!options_.violations_file.empty()) {
    int fd = ::open(options_.violations_file.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0) {
      const std::string out = line + "\n";
      if (::write(fd, out.data(), out.size()) != static_cast<ssize_t>(out.size())) {
        spdlog::error("writing {}: {}", options_.violations_file, std::strerror(errno));
      }
      ::fsync(fd);
      ::close(fd);
    } else {
      spdlog::error("opening {}: {}", options_.violations_file, std::strerror(errno));
    }
  }
  return absl::Status(code, StrCat("CO violation: ", what));
}

std::vector<std::string> StrictDriver::Violations() const {
  absl::MutexLock lock(&violations_mu_);
  return violations_;
}

int StrictDriver::Calls(const std::string& rpc, absl::StatusCode code) const {
  absl::MutexLock lock(&violations_mu_);
  auto it = calls_.find({rpc, code});
  return it == calls_.end() ? 0 : it->second;
}

std::optional<std::string> StrictDriver::MissingCapability(StrictOp op) const {
  switch (op) {
    case StrictOp::kControllerPublish:
    case StrictOp::kControllerUnpublish:
      if (!options_.publish_unpublish) return "the controller capability PUBLISH_UNPUBLISH_VOLUME";
      break;
    case StrictOp::kControllerExpand:
      if (!options_.expand) return "the controller capability EXPAND_VOLUME";
      break;
    case StrictOp::kStage:
    case StrictOp::kUnstage:
      if (!options_.stage_unstage) return "the node capability STAGE_UNSTAGE_VOLUME";
      break;
    case StrictOp::kStats:
      if (!options_.volume_stats) return "the node capability GET_VOLUME_STATS";
      break;
    case StrictOp::kNodeExpand:
      if (!options_.node_expand) return "the node capability EXPAND_VOLUME";
      break;
    default:
      break;
  }
  return std::nullopt;
}

std::optional<StrictFault> StrictDriver::TakeFault(StrictOp op, bool after) {
  absl::MutexLock lock(&violations_mu_);
  for (auto& f : faults_) {
    if (f.op == op && f.after == after && f.count > 0) {
      --f.count;
      return f;
    }
  }
  return std::nullopt;
}

grpc::Status StrictDriver::Serve(const char* rpc, StrictOp op, const std::string& volume_id,
                                 const std::function<absl::Status(Call&)>& body) {
  absl::Status st = [&]() -> absl::Status {
    if (auto missing = MissingCapability(op)) {
      return Violation(rpc, volume_id, StrCat(rpc, " was called, but the driver does not advertise ", *missing));
    }
    // Stats are read-only and kubelet gathers them beside its operations,
    // so only they may overlap another call on the volume.
    std::string marked;
    if (!volume_id.empty() && op != StrictOp::kStats) {
      absl::MutexLock lock(&flight_mu_);
      if (auto it = in_flight_.find(volume_id); it != in_flight_.end()) {
        return Violation(
            rpc, volume_id,
            StrCat(rpc, " while ", it->second,
                   " is in flight on the same volume (the CO keeps at most one call in flight per volume)"),
            absl::StatusCode::kAborted);
      }
      in_flight_[volume_id] = rpc;
      marked = volume_id;
    }
    Deferred unmark(marked.empty() ? std::function<void()>() : [this, marked] {
      absl::MutexLock lock(&flight_mu_);
      in_flight_.erase(marked);
    });
    if (!marked.empty() && options_.in_flight_hook) options_.in_flight_hook(rpc);
    if (auto f = TakeFault(op, false)) return absl::Status(f->code, StrCat("injected fault: ", rpc, " did nothing"));
    Call call;
    absl::Status result = body(call);
    if (!result.ok()) return result;
    if (auto f = TakeFault(op, true)) {
      Unconfirm(op, volume_id, call.confirmed);
      return absl::Status(
          f->code, StrCat("injected fault: ", rpc, " did its work but answers ", absl::StatusCodeToString(f->code)));
    }
    return result;
  }();
  {
    absl::MutexLock lock(&violations_mu_);
    ++calls_[{rpc, st.code()}];
  }
  return csi::ToGrpcStatus(st);
}

grpc::Status StrictDriver::Unadvertised(const char* rpc, const std::string& capability) {
  absl::Status st = Violation(rpc, "", StrCat(rpc, " was called, but the driver does not advertise ", capability));
  absl::MutexLock lock(&violations_mu_);
  ++calls_[{rpc, st.code()}];
  return csi::ToGrpcStatus(st);
}

void StrictDriver::Unconfirm(StrictOp op, const std::string& volume, const std::string& key) {
  absl::MutexLock lock(&mu_);
  auto it = volumes_.find(volume);
  if (it == volumes_.end()) return;
  Volume& v = it->second;
  if (op == StrictOp::kControllerPublish) {
    if (auto a = v.attached.find(key); a != v.attached.end()) a->second.confirmed = false;
  } else if (op == StrictOp::kStage) {
    if (v.staged) v.staged->confirmed = false;
  } else if (op == StrictOp::kPublish) {
    if (auto t = v.targets.find(key); t != v.targets.end()) t->second.confirmed = false;
  }
  if (absl::Status st = Save(); !st.ok()) spdlog::error("saving the state: {}", st.ToString());
}

// ---- shared checks ----

absl::Status StrictDriver::CheckSet(std::string_view rpc, const std::string& volume, const char* field,
                                    const std::string& value) {
  if (!value.empty()) return absl::OkStatus();
  return Violation(rpc, volume, StrCat("the REQUIRED field ", field, " is not set"),
                   absl::StatusCode::kInvalidArgument);
}

absl::Status StrictDriver::CheckAbsolute(std::string_view rpc, const std::string& volume, const char* field,
                                         const std::string& path) {
  if (path.empty() || path[0] != '/') {
    return Violation(rpc, volume, StrCat(field, " \"", path, "\" is not an absolute path"),
                     absl::StatusCode::kInvalidArgument);
  }
  if (!IsCanonicalAbsolutePath(path)) {
    return absl::InvalidArgumentError(StrCat(field, " \"", path, "\": this driver takes canonical paths only"));
  }
  return absl::OkStatus();
}

absl::Status StrictDriver::CheckCapability(std::string_view rpc, const std::string& volume, const Volume* v,
                                           const VolumeCapability* cap) {
  if (cap == nullptr) {
    return Violation(rpc, volume, "the REQUIRED field volume_capability is not set",
                     absl::StatusCode::kInvalidArgument);
  }
  if (!cap->has_block() && !cap->has_mount()) {
    return Violation(rpc, volume, "volume_capability has no access_type (block or mount)",
                     absl::StatusCode::kInvalidArgument);
  }
  const AccessMode::Mode mode = cap->access_mode().mode();
  if (mode == AccessMode::UNKNOWN) {
    return Violation(rpc, volume, "volume_capability has no access_mode", absl::StatusCode::kInvalidArgument);
  }
  if (SingleNodeMultiWriterMode(mode)) {
    return Violation(rpc, volume,
                     StrCat("access mode ", AccessMode::Mode_Name(mode),
                            " needs the SINGLE_NODE_MULTI_WRITER capability, which the driver does not advertise"));
  }
  if (MultiNodeMode(mode)) {
    return absl::InvalidArgumentError(
        StrCat("access mode ", AccessMode::Mode_Name(mode), ": a volume of this driver lives on one node"));
  }
  if (v != nullptr && cap->has_block() != v->block) {
    return absl::FailedPreconditionError(StrCat("volume ", v->id, " is a ", v->block ? "block" : "mount",
                                                " volume; the request asks for ",
                                                cap->has_block() ? "block" : "mount"));
  }
  return absl::OkStatus();
}

absl::Status StrictDriver::CheckPublishContext(std::string_view rpc, const Volume& v,
                                               const google::protobuf::Map<std::string, std::string>& got) {
  if (!options_.publish_unpublish) {
    if (got.empty()) return absl::OkStatus();
    return Violation(rpc, v.id,
                     StrCat("publish_context ", Describe(ToMap(got)),
                            " is set, but the driver has no PUBLISH_UNPUBLISH_VOLUME (it SHALL be left unset)"));
  }
  auto a = v.attached.find(options_.node_id);
  if (a == v.attached.end()) {
    return Violation(rpc, v.id,
                     StrCat(rpc, " before ControllerPublishVolume to node ", options_.node_id, " succeeded"));
  }
  if (!a->second.confirmed) {
    return Violation(rpc, v.id,
                     StrCat(rpc, " after a ControllerPublishVolume to node ", options_.node_id,
                            " that did not return success (the CO must see it succeed first)"));
  }
  if (ToMap(got) != a->second.publish_context) {
    return Violation(rpc, v.id,
                     StrCat("publish_context ", Describe(ToMap(got)), " differs from ",
                            Describe(a->second.publish_context), ", which ControllerPublishVolume returned"));
  }
  return absl::OkStatus();
}

absl::Status StrictDriver::CheckVolumeContext(std::string_view rpc, const Volume& v,
                                              const google::protobuf::Map<std::string, std::string>& got) {
  for (const auto& [k, val] : v.context) {
    auto it = got.find(k);
    if (it == got.end() || it->second != val) {
      return Violation(rpc, v.id,
                       StrCat("volume_context ", Describe(ToMap(got)), " does not match ", Describe(v.context),
                              ", which CreateVolume returned"));
    }
  }
  for (const auto& [k, val] : got) {
    // Kubernetes adds its own keys (pod info on mount, the provisioner's
    // identity); they are tolerated, anything else must match.
    if (v.context.contains(k) || absl::StartsWith(k, "csi.storage.k8s.io/") ||
        absl::StartsWith(k, "storage.kubernetes.io/")) {
      continue;
    }
    return Violation(rpc, v.id,
                     StrCat("volume_context key \"", k, "\" was not returned by CreateVolume (it MUST match)"));
  }
  return absl::OkStatus();
}

// ---- state ----

std::string StrictDriver::VolumePath(const Volume& v) const {
  return StrCat(options_.state_dir, "/volumes/", v.id, v.block ? ".img" : "");
}

absl::StatusOr<StrictDriver::Volume*> StrictDriver::Find(const std::string& id) {
  auto it = WellFormedId(id) ? volumes_.find(id) : volumes_.end();
  if (it == volumes_.end()) return absl::NotFoundError(StrCat("volume \"", id, "\" does not exist"));
  return &it->second;
}

absl::Status StrictDriver::Save() {
  json out = {{"version", kStateVersion}, {"attachSeq", attach_seq_}, {"volumes", json::array()}};
  for (const auto& [id, v] : volumes_) {
    json vol = {{"id", v.id},
                {"name", v.name},
                {"capacity", v.capacity},
                {"nodeCapacity", v.node_capacity},
                {"block", v.block},
                {"parameters", v.parameters},
                {"context", v.context},
                {"capabilities", json::array()},
                {"attached", json::object()},
                {"targets", json::object()}};
    for (const auto& c : v.capabilities) vol["capabilities"].push_back(CapText(c));
    for (const auto& [node, a] : v.attached) {
      vol["attached"][node] = {{"publishContext", a.publish_context},
                               {"readonly", a.readonly},
                               {"capability", CapText(a.capability)},
                               {"confirmed", a.confirmed}};
    }
    if (v.staged) {
      vol["staged"] = {
          {"path", v.staged->path}, {"capability", CapText(v.staged->capability)}, {"confirmed", v.staged->confirmed}};
    }
    for (const auto& [path, t] : v.targets) {
      vol["targets"][path] = {{"staging", t.staging},
                              {"readonly", t.readonly},
                              {"capability", CapText(t.capability)},
                              {"confirmed", t.confirmed}};
    }
    out["volumes"].push_back(std::move(vol));
  }
  return WriteFileAtomic(options_.state_dir + "/state.json", out.dump(1), 0600);
}

absl::Status StrictDriver::Load() {
  auto text = ReadFile(options_.state_dir + "/state.json");
  if (!text.ok()) return text.status().code() == absl::StatusCode::kNotFound ? absl::OkStatus() : text.status();
  const json in = json::parse(*text, nullptr, false);
  if (!in.is_object() || in.value("version", 0) != kStateVersion) {
    return absl::FailedPreconditionError(
        StrCat(options_.state_dir, "/state.json is not a version ", kStateVersion, " strict driver state"));
  }
  attach_seq_ = in.value("attachSeq", uint64_t{0});
  auto strings = [](const json& j) {
    std::map<std::string, std::string> m;
    if (j.is_object()) {
      for (const auto& [k, v] : j.items()) m[k] = v.is_string() ? v.get<std::string>() : "";
    }
    return m;
  };
  const json volumes = in.value("volumes", json::array());
  for (const json& vol : volumes) {
    Volume v;
    v.id = vol.value("id", "");
    if (!WellFormedId(v.id)) continue;
    v.name = vol.value("name", "");
    v.capacity = vol.value("capacity", int64_t{0});
    v.node_capacity = vol.value("nodeCapacity", int64_t{0});
    v.block = vol.value("block", false);
    v.parameters = strings(vol.value("parameters", json::object()));
    v.context = strings(vol.value("context", json::object()));
    const json capabilities = vol.value("capabilities", json::array());
    for (const auto& c : capabilities) v.capabilities.push_back(CapFrom(c));
    const json attached = vol.value("attached", json::object()), targets = vol.value("targets", json::object());
    for (const auto& [node, a] : attached.items()) {
      v.attached[node] = Attachment{.publish_context = strings(a.value("publishContext", json::object())),
                                    .readonly = a.value("readonly", false),
                                    .capability = CapFrom(a.value("capability", json())),
                                    .confirmed = a.value("confirmed", false)};
    }
    if (vol.contains("staged")) {
      const json& s = vol["staged"];
      v.staged = Staging{.path = s.value("path", ""),
                         .capability = CapFrom(s.value("capability", json())),
                         .confirmed = s.value("confirmed", false)};
    }
    for (const auto& [path, t] : targets.items()) {
      v.targets[path] = Target{.staging = t.value("staging", ""),
                               .readonly = t.value("readonly", false),
                               .capability = CapFrom(t.value("capability", json())),
                               .confirmed = t.value("confirmed", false)};
    }
    volumes_[v.id] = std::move(v);
  }
  return absl::OkStatus();
}

std::vector<StrictDriver::VolumeView> StrictDriver::Volumes() const {
  absl::MutexLock lock(&mu_);
  std::vector<VolumeView> out;
  for (const auto& [id, v] : volumes_) {
    VolumeView view{.id = v.id,
                    .name = v.name,
                    .path = VolumePath(v),
                    .block = v.block,
                    .capacity = v.capacity,
                    .attached_nodes = {},
                    .staged_at = v.staged ? v.staged->path : "",
                    .published_at = {}};
    for (const auto& [node, a] : v.attached) view.attached_nodes.insert(node);
    for (const auto& [path, t] : v.targets) view.published_at.insert(path);
    out.push_back(std::move(view));
  }
  return out;
}

// ---- capabilities ----

std::string StrictDriver::TopologyKey() const { return "topology.strict.csi.berth.io/node"; }

std::vector<PluginCapability> StrictDriver::PluginCapabilities() const {
  std::vector<PluginCapability> out;
  PluginCapability c;
  c.mutable_service()->set_type(PluginCapability::Service::CONTROLLER_SERVICE);
  out.push_back(c);
  if (options_.topology) {
    c.mutable_service()->set_type(PluginCapability::Service::VOLUME_ACCESSIBILITY_CONSTRAINTS);
    out.push_back(c);
  }
  if (options_.expand) {
    PluginCapability e;
    e.mutable_volume_expansion()->set_type(PluginCapability::VolumeExpansion::ONLINE);
    out.push_back(e);
  }
  return out;
}

std::vector<ControllerServiceCapability> StrictDriver::ControllerCapabilities() const {
  std::vector<ControllerServiceCapability::RPC::Type> types = {ControllerServiceCapability::RPC::CREATE_DELETE_VOLUME,
                                                               ControllerServiceCapability::RPC::LIST_VOLUMES,
                                                               ControllerServiceCapability::RPC::GET_CAPACITY};
  if (options_.publish_unpublish) types.push_back(ControllerServiceCapability::RPC::PUBLISH_UNPUBLISH_VOLUME);
  if (options_.expand) types.push_back(ControllerServiceCapability::RPC::EXPAND_VOLUME);
  std::vector<ControllerServiceCapability> out;
  for (auto t : types) {
    ControllerServiceCapability c;
    c.mutable_rpc()->set_type(t);
    out.push_back(c);
  }
  return out;
}

std::vector<NodeServiceCapability> StrictDriver::NodeCapabilities() const {
  std::vector<NodeServiceCapability::RPC::Type> types;
  if (options_.stage_unstage) types.push_back(NodeServiceCapability::RPC::STAGE_UNSTAGE_VOLUME);
  if (options_.volume_stats) types.push_back(NodeServiceCapability::RPC::GET_VOLUME_STATS);
  if (options_.node_expand) types.push_back(NodeServiceCapability::RPC::EXPAND_VOLUME);
  std::vector<NodeServiceCapability> out;
  for (auto t : types) {
    NodeServiceCapability c;
    c.mutable_rpc()->set_type(t);
    out.push_back(c);
  }
  return out;
}

}  // namespace berth::driver::testing
