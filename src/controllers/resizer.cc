#include "controllers/resizer.h"

#include <algorithm>

#include "api/quantity.h"
#include "common/status.h"
#include "common/strings.h"
#include "client/capability.h"
#include "controllers/node_affinity.h"
#include "client/object.h"
#include "client/writes.h"
#include "csi/grpc_status.h"
#include "csi/v1/csi.grpc.pb.h"
#include "grpcpp/client_context.h"
#include "spdlog/spdlog.h"

namespace berth::controllers {

using namespace ::berth::client;  // the controllers' own client library
namespace {

using nlohmann::json;

std::optional<api::Quantity> Size(const std::string& text) {
  auto q = api::Quantity::Parse(text);
  if (!q.ok()) return std::nullopt;
  return *q;
}



// Sets (or with status "" removes) a claim condition of `type`.
void SetCondition(json& status, const std::string& type, const std::string& value, const std::string& message = "") {
  json conditions = json::array();
  if (status.contains("conditions") && status["conditions"].is_array()) {
    for (const auto& c : status["conditions"]) {
      if (Str(c, {"type"}) != type) conditions.push_back(c);
    }
  }
  if (!value.empty()) {
    // An unchanged condition keeps its timestamps: rewriting them would turn
    // every retry into a write and a watch event (a hot loop).
    json c = {{"type", type}, {"status", value}, {"lastTransitionTime", NowRfc3339()}, {"lastProbeTime", nullptr}};
    if (status.contains("conditions") && status["conditions"].is_array()) {
      for (const auto& old : status["conditions"]) {
        if (Str(old, {"type"}) == type && Str(old, {"status"}) == value) c = old;
      }
    }
    if (!message.empty()) c["message"] = message;
    conditions.push_back(c);
  }
  if (conditions.empty()) {
    status.erase("conditions");
  } else {
    status["conditions"] = conditions;
  }
}

bool HasCondition(const json& claim, const std::string& type) {
  const json& conditions = Field(Field(claim, "status"), "conditions");
  if (!conditions.is_array()) return false;
  for (const auto& c : conditions) {
    if (Str(c, {"type"}) == type && Str(c, {"status"}) == "True") return true;
  }
  return false;
}

bool FinalError(const absl::Status& st) {
  return st.code() == absl::StatusCode::kInvalidArgument || st.code() == absl::StatusCode::kOutOfRange ||
         st.code() == absl::StatusCode::kNotFound || st.code() == absl::StatusCode::kUnimplemented;
}

}  // namespace

Resizer::Resizer(apiserver::Registry& registry, DriverDirectory& drivers, Informer& claims, Informer& volumes,
                 Options options)
    : registry_(registry),
      drivers_(drivers),
      claims_(claims),
      volumes_(volumes),
      options_(std::move(options)),
      events_(registry, StrCat(options_.driver, "_berth-resizer")) {}

Resizer::~Resizer() { Stop(); }

void Resizer::RegisterHandlers() {
  claims_.AddHandlers({
      .on_add = [this](const json& o) { queue_.Add(ObjectKey(o)); },
      .on_update = [this](const json&, const json& o) { queue_.Add(ObjectKey(o)); },
      .on_delete = nullptr,
  });
}

void Resizer::Start() {
  for (int i = 0; i < options_.workers; ++i) {
    workers_.emplace_back([this] {
      RunWorker(queue_, StrCat("resizer ", options_.driver, ": claim"),
                [this](const std::string& k) { return SyncClaim(k); });
    });
  }
}

void Resizer::Stop() {
  queue_.ShutDown();
  for (auto& w : workers_) w.join();
  workers_.clear();
}

absl::Status Resizer::SyncClaim(const std::string& key) {
  std::optional<json> cached = claims_.GetByKey(key);
  if (!cached || Str(*cached, {"status", "phase"}) != "Bound") return absl::OkStatus();
  // Decide on fresh copies: the claim and volume caches may lag each other
  // (a volume already grown next to a claim not yet marked pending).
  auto [ns, name] = SplitKey(key);
  auto fresh_claim = registry_.Get(K("persistentvolumeclaims"), ns, name);
  if (!fresh_claim.ok()) {
    return fresh_claim.status().code() == absl::StatusCode::kNotFound ? absl::OkStatus() : fresh_claim.status();
  }
  std::optional<json> claim = *fresh_claim;
  const std::string pv_name = Str(*claim, {"spec", "volumeName"});
  if (pv_name.empty() || !volumes_.Get("", pv_name)) return absl::OkStatus();
  auto fresh_pv = registry_.Get(K("persistentvolumes"), "", pv_name);
  if (!fresh_pv.ok()) return absl::OkStatus();
  std::optional<json> pv = *fresh_pv;
  if (Str(*pv, {"spec", "csi", "driver"}) != options_.driver) return absl::OkStatus();
  // Only the volume that is really this claim's (not one that names it by
  // name only, or an older claim of the same name).
  if (Str(*pv, {"spec", "claimRef", "uid"}) != Uid(*claim)) return absl::OkStatus();
  auto desired = Size(Str(*claim, {"spec", "resources", "requests", "storage"}));
  auto status_size = Size(Str(*claim, {"status", "capacity", "storage"}));
  auto pv_size = Size(Str(*pv, {"spec", "capacity", "storage"}));
  if (!desired || !pv_size) return absl::OkStatus();
  if (status_size && *status_size >= *desired) return absl::OkStatus();  // nothing asked
  if (HasCondition(*claim, "FileSystemResizePending")) return absl::OkStatus();  // the node's turn
  const std::string resize_status = Str(*claim, {"status", "allocatedResourceStatuses", "storage"});
  const std::string allocated = Str(*claim, {"status", "allocatedResources", "storage"});
  if (resize_status == "ControllerResizeInfeasible" && allocated == desired->ToString()) {
    return absl::OkStatus();  // the same request failed for good; wait for a new size
  }
  if (*pv_size >= *desired && resize_status == "ControllerResizeInProgress") {
    // A restart between growing the volume and recording the node's turn:
    // whether the node must grow the filesystem is unknown, so hand it to
    // the node (NodeExpandVolume on a grown filesystem is a no-op).
    return EditStatus(registry_, K("persistentvolumeclaims"), *claim, [&](json& s) {
      SetCondition(s, "Resizing", "");
      SetCondition(s, "FileSystemResizePending", "True",
                   "Waiting for user to (re-)start a pod to finish file system resize of volume on node.");
      s["allocatedResourceStatuses"]["storage"] = "NodeResizePending";
    });
  }
  if (*pv_size >= *desired) {
    // The volume already has it (e.g. a statically sized PV): the claim
    // catches up.
    return EditStatus(registry_, K("persistentvolumeclaims"), *claim, [&](json& s) {
      if (HasCondition(json({{"status", s}}), "FileSystemResizePending")) return;  // raced: the node's turn
      s["capacity"]["storage"] = pv_size->ToString();
      SetCondition(s, "Resizing", "");
      if (s.contains("allocatedResourceStatuses")) s["allocatedResourceStatuses"].erase("storage");
    });
  }
  const std::string node = VolumeNode(registry_, *pv);
  BERTH_RETURN_IF_ERROR(EditStatus(registry_, K("persistentvolumeclaims"), *claim, [&](json& s) {
    SetCondition(s, "Resizing", "True");
    s["allocatedResources"]["storage"] = desired->ToString();
    s["allocatedResourceStatuses"]["storage"] = "ControllerResizeInProgress";
  }));
  BERTH_ASSIGN_OR_RETURN(bool can_expand, drivers_.ControllerHasCapability(
                                             options_.driver, node,
                                             ::csi::v1::ControllerServiceCapability::RPC::EXPAND_VOLUME));
  int64_t new_bytes = desired->Value();
  bool node_expansion = true;
  if (can_expand) {
    ::csi::v1::ControllerExpandVolumeRequest req;
    req.set_volume_id(Str(*pv, {"spec", "csi", "volumeHandle"}));
    req.mutable_capacity_range()->set_required_bytes(desired->Value());
    *req.mutable_volume_capability() = PvVolumeCapability(*pv);
    if (std::string secret = Str(*pv, {"spec", "csi", "controllerExpandSecretRef", "name"}); !secret.empty()) {
      auto s = registry_.Get(K("secrets"), Str(*pv, {"spec", "csi", "controllerExpandSecretRef", "namespace"}), secret);
      if (s.ok()) {
        for (const auto& [k, v] : DecodedSecretData(*s)) (*req.mutable_secrets())[k] = v;
      }
    }
    BERTH_ASSIGN_OR_RETURN(auto channel, drivers_.Channel(options_.driver, node));
    auto stub = ::csi::v1::Controller::NewStub(channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + options_.rpc_timeout));
    ::csi::v1::ControllerExpandVolumeResponse resp;
    grpc::Status gst = stub->ControllerExpandVolume(&ctx, req, &resp);
    if (!gst.ok()) {
      absl::Status st = csi::FromGrpcStatus(gst);
      events_.Record(*claim, "Warning", "VolumeResizeFailed", StrCat("resize volume \"", pv_name, "\" failed: ", st.message()));
      if (FinalError(st)) {
        (void)EditStatus(registry_, K("persistentvolumeclaims"), *claim, [&](json& s) {
          SetCondition(s, "Resizing", "");
          s["allocatedResourceStatuses"]["storage"] = "ControllerResizeInfeasible";
        });
      }
      return st;
    }
    new_bytes = std::max<int64_t>(resp.capacity_bytes(), desired->Value());
    node_expansion = resp.node_expansion_required();
  }
  const std::string new_size = api::Quantity::FromBytes(new_bytes).ToString();
  {
    auto current = registry_.Get(K("persistentvolumes"), "", pv_name);
    if (!current.ok()) return current.status();
    json obj = *current;
    auto have = Size(Str(obj, {"spec", "capacity", "storage"}));
    if (!have || *have < api::Quantity::FromBytes(new_bytes)) {
      obj["spec"]["capacity"]["storage"] = new_size;
      BERTH_RETURN_IF_ERROR(
          registry_.Update(K("persistentvolumes"), "", pv_name, obj, apiserver::Subresource::kMain).status());
    }
  }
  if (node_expansion) {
    events_.Record(*claim, "Normal", "FileSystemResizeRequired",
                   "Require file system resize of volume on node");
    return EditStatus(registry_, K("persistentvolumeclaims"), *claim, [&](json& s) {
      SetCondition(s, "Resizing", "");
      SetCondition(s, "FileSystemResizePending", "True",
                   "Waiting for user to (re-)start a pod to finish file system resize of volume on node.");
      s["allocatedResourceStatuses"]["storage"] = "NodeResizePending";
    });
  }
  events_.Record(*claim, "Normal", "VolumeResizeSuccessful", StrCat("resize volume \"", pv_name, "\" successful"));
  return EditStatus(registry_, K("persistentvolumeclaims"), *claim, [&](json& s) {
    SetCondition(s, "Resizing", "");
    s["capacity"]["storage"] = new_size;
    if (s.contains("allocatedResourceStatuses")) s["allocatedResourceStatuses"].erase("storage");
    if (s.contains("allocatedResourceStatuses") && s["allocatedResourceStatuses"].empty()) {
      s.erase("allocatedResourceStatuses");
    }
  });
}

}  // namespace berth::controllers
