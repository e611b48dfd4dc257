// The API as its clients see it: the verbs on Kubernetes-shaped objects that
// controllers and node agents use. Registry implements it in process;
// client::RemoteApi implements it over the API's socket for a node agent
// that runs as its own process.
//
// Thread-safety: implementations are thread-safe.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "api/kinds.h"
#include "api/selector.h"
#include "apiserver/patch.h"
#include "nlohmann/json.hpp"
#include "store/store.h"

namespace berth::apiserver {

using nlohmann::json;

// A field selector: "metadata.name=x,spec.nodeName!=" (=, ==, !=) over
// dotted JSON paths of the object.
class FieldSelector {
 public:
  static absl::StatusOr<FieldSelector> Parse(std::string_view text);
  bool Matches(const json& object) const;
  bool empty() const { return terms_.empty(); }

 private:
  struct Term {
    std::vector<std::string> path;
    std::string value;
    bool equal;
  };
  std::vector<Term> terms_;
};

struct ListOptions {
  api::LabelSelector labels;
  FieldSelector fields;
  size_t limit = 0;  // 0: everything
  std::string continue_token;
};

struct ListPage {
  std::vector<json> items;
  int64_t resource_version = 0;
  std::string continue_token;  // empty on the last page
};

struct DeleteOptions {
  std::optional<std::string> uid;               // preconditions.uid
  std::optional<std::string> resource_version;  // preconditions.resourceVersion
  // gracePeriodSeconds; for pods unset means spec.terminationGracePeriodSeconds.
  std::optional<int64_t> grace_period_seconds;
};

// kMain and kStatus are the API's object and /status. kMainAndStatus is for
// in-process controllers only (no URL reaches it): one write that changes
// both, validated as both would be — e.g. the binder's claim volumeName and
// phase Bound, which Kubernetes writes in two round trips.
enum class Subresource { kMain, kStatus, kMainAndStatus };

// A watch: `initial` (synthetic ADDED events for a watch from "" or "0"),
// then the events of `watcher`.
struct WatchStream {
  std::vector<store::Event> initial;
  std::unique_ptr<store::EventSource> watcher;
};

// Whether the kind has a /status subresource (its status is written only
// there, and reset on create).
bool HasStatusSubresource(const api::KindInfo& kind);

class Api {
 public:
  virtual ~Api() = default;

  // `ns` is the request's namespace ("" for cluster-scoped kinds).
  virtual absl::StatusOr<json> Create(const api::KindInfo& kind, const std::string& ns, json object) = 0;
  // Create and Update for a caller that needs the written object only to
  // read it, if at all: without a copy where the implementation keeps
  // objects shared.
  virtual absl::StatusOr<std::shared_ptr<const json>> CreateShared(const api::KindInfo& kind, const std::string& ns,
                                                                   json object) {
    auto created = Create(kind, ns, std::move(object));
    if (!created.ok()) return created.status();
    return std::make_shared<const json>(std::move(*created));
  }
  virtual absl::StatusOr<std::shared_ptr<const json>> UpdateShared(const api::KindInfo& kind, const std::string& ns,
                                                                   const std::string& name, json object,
                                                                   Subresource sub) {
    auto updated = Update(kind, ns, name, std::move(object), sub);
    if (!updated.ok()) return updated.status();
    return std::make_shared<const json>(std::move(*updated));
  }
  // Creates each (namespace, object) as Create does, each succeeding or
  // failing on its own; one result per object.
  virtual std::vector<absl::StatusOr<json>> CreateAll(const api::KindInfo& kind,
                                                      std::vector<std::pair<std::string, json>> objects) = 0;
  virtual absl::StatusOr<json> Get(const api::KindInfo& kind, const std::string& ns, const std::string& name) = 0;
  // Get without a copy where the implementation keeps objects shared.
  virtual absl::StatusOr<std::shared_ptr<const json>> GetShared(const api::KindInfo& kind, const std::string& ns,
                                                                const std::string& name) = 0;
  virtual absl::StatusOr<ListPage> List(const api::KindInfo& kind, const std::string& ns,
                                        const ListOptions& options) = 0;
  // PUT. Without metadata.resourceVersion the update is unconditional.
  virtual absl::StatusOr<json> Update(const api::KindInfo& kind, const std::string& ns, const std::string& name,
                                      json object, Subresource sub) = 0;
  virtual absl::StatusOr<json> Patch(const api::KindInfo& kind, const std::string& ns, const std::string& name,
                                     std::string_view patch, PatchType type, Subresource sub) = 0;
  // Returns the object's last state (with deletionTimestamp while finalizers
  // or a pod's grace period keep it).
  virtual absl::StatusOr<json> Delete(const api::KindInfo& kind, const std::string& ns, const std::string& name,
                                      const DeleteOptions& options = {}) = 0;
  // A watch from `resource_version` ("" or "0": start with ADDED events for
  // the current objects, as Kubernetes does). OUT_OF_RANGE (410) when older
  // than the kept history.
  virtual absl::StatusOr<WatchStream> Watch(const api::KindInfo& kind, const std::string& ns,
                                            const std::string& resource_version, const api::LabelSelector& labels) = 0;
};

}  // namespace berth::apiserver
