#include "driver/snapshot_adopter.h"

#include <cstdlib>

#include "common/fs.h"
#include "common/status.h"
#include "common/strings.h"
#include "common/thread_name.h"
#include "driver/pool/ids.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"

namespace berth::driver {
namespace {

using json = nlohmann::json;

constexpr char kContents[] = "/apis/snapshot.storage.k8s.io/v1/volumesnapshotcontents";
constexpr char kServiceAccountDir[] = "/var/run/secrets/kubernetes.io/serviceaccount";

// Object names are DNS subdomains; anything else never reaches a URL path.
bool IsObjectName(const std::string& name) {
  if (name.empty() || name.size() > 253) return false;
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.')) return false;
  }
  return true;
}

std::string Trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

}  // namespace

absl::StatusOr<std::unique_ptr<http::ApiClient>> InClusterApiClient() {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (host == nullptr || port == nullptr || *host == '\0') {
    return absl::FailedPreconditionError("not in a pod: KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT are not set");
  }
  const int port_number = std::atoi(port);
  if (port_number <= 0 || port_number > 65535) {
    return absl::FailedPreconditionError(StrCat("KUBERNETES_SERVICE_PORT=", port, " is not a port"));
  }
  auto token = ReadFile(StrCat(kServiceAccountDir, "/token"));
  auto ca = ReadFile(StrCat(kServiceAccountDir, "/ca.crt"));
  if (!token.ok() || !ca.ok()) {
    return absl::FailedPreconditionError(
        StrCat("no service account token or CA in ", kServiceAccountDir, " (automountServiceAccountToken)"));
  }
  return http::ApiClient::ForTcp(host, port_number, *ca, Trimmed(*token));
}

SnapshotContentAdopter::SnapshotContentAdopter(Options options, const Pool& pool, ClientFactory client, Clock& clock)
    : options_(std::move(options)), pool_(pool), client_(std::move(client)), clock_(clock) {}

SnapshotContentAdopter::~SnapshotContentAdopter() { Stop(); }

void SnapshotContentAdopter::Start() {
  thread_ = NamedThread("snapshot adopt", [this] { Loop(); });
}

void SnapshotContentAdopter::Stop() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void SnapshotContentAdopter::Loop() {
  while (true) {
    auto labelled = RunOnce();
    if (!labelled.ok()) {
      spdlog::warn("pre-provisioned snapshot contents: {} (retrying in {})", labelled.status().ToString(),
                   absl::FormatDuration(options_.period));
    }
    absl::MutexLock l(&mu_);
    if (clock_.AwaitWithDeadline(mu_, absl::Condition(&stop_), clock_.Now() + options_.period)) {
      return;
    }
  }
}

absl::StatusOr<int> SnapshotContentAdopter::RunOnce() {
  BERTH_ASSIGN_OR_RETURN(auto client, client_());
  // "!key": contents without the label (the API server filters).
  BERTH_ASSIGN_OR_RETURN(
      http::ApiResponse list,
      client->Call("GET", StrCat(kContents, "?labelSelector=%21snapshot.storage.kubernetes.io%2Fmanaged-by")));
  if (list.code == 404) return 0;  // no snapshot CRDs in this cluster
  if (list.code != 200) {
    return absl::UnavailableError(
        StrCat("listing VolumeSnapshotContents: HTTP ", list.code, ": ", http::ErrorMessage(list)));
  }
  const json body = json::parse(list.body, nullptr, false);
  if (!body.is_object() || !body.contains("items") || !body["items"].is_array()) {
    return absl::DataLossError("listing VolumeSnapshotContents: not a list");
  }
  int labelled = 0;
  absl::Status first_error;
  for (const json& item : body["items"]) {
    const json& meta = item.value("metadata", json::object());
    const json& spec = item.value("spec", json::object());
    if (spec.value("driver", "") != options_.driver_name) continue;
    const std::string name = meta.value("name", "");
    const std::string handle = spec.value("source", json::object()).value("snapshotHandle", "");
    if (handle.empty() || !IsObjectName(name)) continue;
    if (meta.contains("labels") && meta["labels"].contains(kManagedByLabel)) continue;
    auto ours = CheckId("snapshotHandle", handle, IdKind::kSnapshot);
    if (!ours.ok() || !*ours || !pool_.GetSnapshot(handle)) continue;  // another node's, or none
    json patch = {{"metadata",
                   {{"labels", {{kManagedByLabel, options_.node_name}}},
                    {"resourceVersion", meta.value("resourceVersion", "")}}}};
    auto r = client->Call("PATCH", StrCat(kContents, "/", name), patch.dump(), "application/merge-patch+json");
    if (!r.ok() || (r->code != 200 && r->code != 409 && r->code != 404)) {
      absl::Status st = r.ok() ? absl::UnavailableError(StrCat("labelling VolumeSnapshotContent ", name, ": HTTP ",
                                                               r->code, ": ", http::ErrorMessage(*r)))
                               : r.status();
      if (first_error.ok()) first_error = st;
      continue;
    }
    if (r->code == 200) {
      ++labelled;
      spdlog::info("VolumeSnapshotContent {} (snapshot {} in this node's pool) labelled {}={}", name, handle,
                   kManagedByLabel, options_.node_name);
    }
  }
  if (!first_error.ok()) return first_error;
  return labelled;
}

}  // namespace berth::driver
