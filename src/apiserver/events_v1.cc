#include "apiserver/events_v1.h"

#include <utility>

#include "api/errors.h"
#include "api/kinds.h"
#include "api/schema.h"
#include "common/status.h"
#include "common/strings.h"

namespace berth::apiserver::eventsv1 {
namespace {

using nlohmann::json;

struct Rename {
  const char* core;
  const char* v1;
};
// Fields whose names differ; the rest of kShared keep theirs.
constexpr Rename kRenamed[] = {
    {"involvedObject", "regarding"},
    {"message", "note"},
    {"reportingComponent", "reportingController"},
    {"source", "deprecatedSource"},
    {"firstTimestamp", "deprecatedFirstTimestamp"},
    {"lastTimestamp", "deprecatedLastTimestamp"},
    {"count", "deprecatedCount"},
};
constexpr const char* kShared[] = {"metadata", "eventTime", "series",  "action",
                                   "reason",   "type",      "related", "reportingInstance"};
constexpr int kPatchRetries = 100;

const api::KindInfo& CoreEvent() { return *api::FindResource("", "events"); }

bool Set(const json& o, const char* field) {
  auto it = o.find(field);
  return it != o.end() && !it->is_null() && !(it->is_string() && it->get<std::string>().empty()) &&
         !(it->is_number_integer() && it->get<int64_t>() == 0) && !(it->is_object() && it->empty());
}

}  // namespace

json FromCore(const json& core) {
  json out = {{"apiVersion", kApiVersion}, {"kind", "Event"}};
  for (const char* f : kShared) {
    if (auto it = core.find(f); it != core.end()) out[f] = *it;
  }
  for (const auto& r : kRenamed) {
    if (auto it = core.find(r.core); it != core.end()) out[r.v1] = *it;
  }
  return out;
}

absl::StatusOr<json> ToCore(const json& v1) {
  if (!v1.is_object()) return api::BadRequest("the request body must be a JSON object");
  json out = {{"apiVersion", "v1"}, {"kind", "Event"}};
  for (const auto& [key, value] : v1.items()) {
    if (key == "apiVersion") {
      if (value != kApiVersion) {
        return api::BadRequest(StrCat("the API version in the data (", value.dump(),
                                      ") does not match the expected API version (", kApiVersion, ")"));
      }
      continue;
    }
    if (key == "kind") {
      if (value != "Event") return api::BadRequest("the kind in the data does not match the expected kind (Event)");
      continue;
    }
    bool known = false;
    for (const char* f : kShared) {
      if (key == f) {
        out[key] = value;
        known = true;
      }
    }
    for (const auto& r : kRenamed) {
      if (key == r.v1) {
        out[r.core] = value;
        known = true;
      }
    }
    if (!known) return api::BadRequest(StrCat("strict decoding error: unknown field \"", key, "\""));
  }
  return out;
}

absl::Status ValidateCreate(const json& v1) {
  api::FieldErrors errs;
  for (const char* f : {"eventTime", "reportingController", "reportingInstance", "action", "reason"}) {
    if (!Set(v1, f)) errs.push_back({f, "Required value"});
  }
  const std::string type = v1.value("type", json()).is_string() ? v1["type"].get<std::string>() : "";
  if (type != "Normal" && type != "Warning") {
    errs.push_back({"type", StrCat("Invalid value: \"\": has invalid value: ", type)});
  }
  for (const auto& r : kRenamed) {
    const std::string_view name = r.v1;
    if (name.starts_with("deprecated") && Set(v1, r.v1)) {
      errs.push_back({r.core, "Invalid value: \"\": needs to be unset"});
    }
  }
  if (errs.empty()) return absl::OkStatus();
  const json md = v1.value("metadata", json::object());
  return api::Invalid("Event", md.is_object() ? md.value("name", "") : "", errs);
}

absl::StatusOr<json> Patch(Registry& registry, const std::string& ns, const std::string& name, std::string_view patch,
                           PatchType type) {
  const api::KindInfo& kind = CoreEvent();
  for (int attempt = 0;; ++attempt) {
    BERTH_ASSIGN_OR_RETURN(json stored, registry.Get(kind, ns, name));
    const std::string rv = stored["metadata"].value("resourceVersion", "");
    // The v1 form has no schema of its own: strategic merge treats its
    // fields (scalars and objects) as a merge patch does.
    BERTH_ASSIGN_OR_RETURN(json patched, ApplyPatch(FromCore(stored), patch, type, api::SchemaFor(kind)));
    BERTH_ASSIGN_OR_RETURN(json core, ToCore(patched));
    if (!core.contains("metadata") || !core["metadata"].is_object()) core["metadata"] = json::object();
    const bool precondition = core["metadata"].value("resourceVersion", "") != rv;
    if (!precondition) core["metadata"]["resourceVersion"] = rv;
    auto updated = registry.Update(kind, ns, name, std::move(core), Subresource::kMain);
    if (updated.ok()) return FromCore(*updated);
    if (precondition || updated.status().code() != absl::StatusCode::kAborted || attempt >= kPatchRetries) {
      return updated.status();
    }
  }
}

}  // namespace berth::apiserver::eventsv1
