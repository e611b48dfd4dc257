// The writes every controller makes, done one way: on a fresh copy of the
// object, only when the uid is still the one the decision was made for, and
// not at all when nothing changes (no-op writes would wake every watcher).
//
//   BERTH_RETURN_IF_ERROR(EditStatus(registry, K("volumeattachments", "storage.k8s.io"), va,
//                                    [](json& s) { s["attached"] = true; }));
//
// Conflicts surface as ABORTED and are retried by the worker with backoff.
//
// Thread-safety: stateless.
#pragma once

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "apiserver/api.h"
#include "client/object.h"
#include "nlohmann/json.hpp"

namespace berth::client {

// Reads the stored object named like `object`, applies `mutate` (false:
// nothing to do) and writes it back conditionally on its resourceVersion.
// NotFound and a different uid are success: the object the decision was
// about is gone.
inline absl::Status MutateObject(apiserver::Api& registry, const api::KindInfo& kind, const nlohmann::json& object,
                                 apiserver::Subresource sub, const std::function<bool(nlohmann::json&)>& mutate) {
  auto current = registry.Get(kind, Ns(object), Name(object));
  if (!current.ok())
    return current.status().code() == absl::StatusCode::kNotFound ? absl::OkStatus() : current.status();
  nlohmann::json obj = std::move(*current);
  if (Uid(obj) != Uid(object) || !mutate(obj)) return absl::OkStatus();
  const std::string ns = Ns(obj), name = Name(obj);  // before obj is moved
  return registry.UpdateShared(kind, ns, name, std::move(obj), sub).status();
}

// Applies `edit` to the stored object's status (the /status subresource
// where the kind has one); writes only when the status changed.
inline absl::Status EditStatus(apiserver::Api& registry, const api::KindInfo& kind, const nlohmann::json& object,
                               const std::function<void(nlohmann::json& status)>& edit) {
  const auto sub =
      apiserver::HasStatusSubresource(kind) ? apiserver::Subresource::kStatus : apiserver::Subresource::kMain;
  return MutateObject(registry, kind, object, sub, [&](nlohmann::json& obj) {
    nlohmann::json status = obj.value("status", nlohmann::json::object());
    const nlohmann::json before = status;
    edit(status);
    if (status == before) return false;
    obj["status"] = std::move(status);
    return true;
  });
}

// Adds (`present`) or removes `finalizer`, setting `annotations` in the same
// write when adding. Adding fails with FAILED_PRECONDITION when the object
// is gone, replaced (another uid) or being deleted — the caller must not go
// on as if it were protected; removing from a gone object is success.
inline absl::Status EditFinalizer(apiserver::Api& registry, const api::KindInfo& kind, const nlohmann::json& object,
                                  const std::string& finalizer, bool present,
                                  const std::map<std::string, std::string>& annotations = {}) {
  if (present) {
    auto current = registry.Get(kind, Ns(object), Name(object));
    if (!current.ok() && current.status().code() != absl::StatusCode::kNotFound) return current.status();
    if (!current.ok() || Uid(*current) != Uid(object) || Deleting(*current)) {
      if (current.ok() && Uid(*current) == Uid(object) && HasFinalizer(*current, finalizer)) return absl::OkStatus();
      return absl::FailedPreconditionError(std::string(kind.kind) + " " + Name(object) +
                                           " is gone or being deleted; not adding " + finalizer);
    }
  }
  return MutateObject(registry, kind, object, apiserver::Subresource::kMain, [&](nlohmann::json& obj) {
    bool changed = false;
    if (present) {
      for (const auto& [k, v] : annotations) {
        if (Annotation(obj, k) != v) {
          obj["metadata"]["annotations"][k] = v;
          changed = true;
        }
      }
    }
    if (HasFinalizer(obj, finalizer) != present && !(present && Deleting(obj))) {
      nlohmann::json& list = obj["metadata"]["finalizers"];
      if (present) {
        list.push_back(finalizer);
      } else {
        list.erase(std::remove(list.begin(), list.end(), nlohmann::json(finalizer)), list.end());
      }
      changed = true;
    }
    return changed;
  });
}

// RFC 3339 in UTC with seconds, as Kubernetes writes metav1.Time.
inline std::string Rfc3339(absl::Time t) { return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", t, absl::UTCTimeZone()); }
inline std::string NowRfc3339() { return Rfc3339(absl::Now()); }
// The reverse: a timestamp as objects carry it; nullopt if empty or malformed.
inline std::optional<absl::Time> ParseRfc3339(const std::string& text) {
  absl::Time t;
  std::string err;
  if (text.empty() || !absl::ParseTime(absl::RFC3339_full, text, &t, &err)) return std::nullopt;
  return t;
}

}  // namespace berth::client
