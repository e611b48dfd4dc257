// events.k8s.io/v1 Events, served from the core/v1 Events berth stores: as
// in kube-apiserver, both versions are one resource ("events"), stored once
// and converted on the way in and out, so an event written through one
// version is read, listed and watched through the other.
//
//   core/v1             events.k8s.io/v1
//   involvedObject  ↔   regarding
//   message         ↔   note
//   reportingComponent ↔ reportingController
//   source          ↔   deprecatedSource
//   firstTimestamp  ↔   deprecatedFirstTimestamp
//   lastTimestamp   ↔   deprecatedLastTimestamp
//   count           ↔   deprecatedCount
//   (eventTime, series, action, reason, type, related, reportingInstance: same)
//
// client-go's tools/events (kube-scheduler, newer controllers) writes these:
// POST, then strategic merge PATCHes of `series`.
//
// Thread-safety: stateless functions.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "apiserver/patch.h"
#include "apiserver/registry.h"
#include "nlohmann/json.hpp"

namespace berth::apiserver::eventsv1 {

inline constexpr char kGroup[] = "events.k8s.io";
inline constexpr char kVersion[] = "v1";
inline constexpr char kApiVersion[] = "events.k8s.io/v1";

// A stored core/v1 Event as events.k8s.io/v1 (fields it lacks stay absent).
nlohmann::json FromCore(const nlohmann::json& core);

// An events.k8s.io/v1 Event as core/v1. BadRequest (400, strict decoding)
// for a field events.k8s.io/v1 does not have or a wrong apiVersion/kind.
absl::StatusOr<nlohmann::json> ToCore(const nlohmann::json& v1);

// The stricter rules kube-apiserver applies to an Event created through
// events.k8s.io/v1 (ValidateEventCreate): eventTime, reportingController,
// reportingInstance, action and reason required, type Normal or Warning,
// the deprecated fields unset. Invalid (422) naming the fields.
absl::Status ValidateCreate(const nlohmann::json& v1);

// PATCH of an events.k8s.io/v1 Event: the patch applies to the v1 form of
// the stored event, the result is stored as core/v1 (retried on a
// conflicting write, as Registry::Patch is). Returns the v1 form.
absl::StatusOr<nlohmann::json> Patch(Registry& registry, const std::string& ns, const std::string& name,
                                     std::string_view patch, PatchType type);

}  // namespace berth::apiserver::eventsv1
