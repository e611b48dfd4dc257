#include "cli/snapshot_commands.h"

#include <iomanip>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "cli/commands.h"
#include "common/status.h"
#include "common/strings.h"
#include "common/units.h"
#include "controllers/snapshot/snapshot_metadata.h"

namespace berth::cli {
namespace {

using nlohmann::json;

constexpr char kSnapshots[] = "/apis/snapshot.storage.k8s.io/v1/namespaces/";

absl::Status CheckOutput(const std::string& output) {
  if (output.empty() || output == "json") return absl::OkStatus();
  return absl::InvalidArgumentError(
      StrCat("unable to match a printer suitable for the output format \"", output, "\", allowed formats are: json"));
}

absl::Status Fetch(http::ApiClient& client, const std::string& path, const std::string& output, std::ostream& out) {
  BERTH_RETURN_IF_ERROR(CheckOutput(output));
  BERTH_ASSIGN_OR_RETURN(http::ApiResponse r, client.Call("GET", path));
  if (r.code != 200) return ErrorFromResponse(r);
  json answer = json::parse(r.body, nullptr, false);
  if (!answer.is_object()) return absl::InternalError("the server's answer is not a JSON object");
  return PrintSnapshotMetadata(answer, output, out);
}

// Lets the served subresources use the directory until the endpoints go.
class Endpoints final : public SnapshotMetadataEndpoints {
 public:
  explicit Endpoints(client::DriverDirectory& directory) : directory_(&directory) {}
  ~Endpoints() override { Stop(); }

  // A call to the driver holds mu_ (shared), so Stop waits for calls in
  // progress (bounded by their deadline) and no call starts after.
  void Stop() {
    absl::MutexLock lock(&mu_);
    directory_ = nullptr;
  }

  absl::StatusOr<json> Get(apiserver::Api& registry, const std::string& ns, const std::string& name,
                           const std::string& base) {
    absl::ReaderMutexLock lock(&mu_);
    if (directory_ == nullptr) return absl::UnavailableError("berth up is stopping");
    return controllers::GetSnapshotMetadata(registry, *directory_, ns, name, base);
  }

 private:
  absl::Mutex mu_;
  client::DriverDirectory* directory_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::Status SnapshotAllocated(http::ApiClient& client, const std::string& snapshot, const Target& target,
                               const std::string& output, std::ostream& out) {
  return Fetch(client,
               StrCat(kSnapshots, UrlEscape(NamespaceOf(client, target)), "/volumesnapshots/", UrlEscape(snapshot),
                      "/allocated"),
               output, out);
}

absl::Status SnapshotDiff(http::ApiClient& client, const std::string& base, const std::string& snapshot,
                          const Target& target, const std::string& output, std::ostream& out) {
  return Fetch(client,
               StrCat(kSnapshots, UrlEscape(NamespaceOf(client, target)), "/volumesnapshots/", UrlEscape(snapshot),
                      "/delta?base=", UrlEscape(base)),
               output, out);
}

absl::Status PrintSnapshotMetadata(const json& answer, const std::string& output, std::ostream& out) {
  BERTH_RETURN_IF_ERROR(CheckOutput(output));
  if (output == "json") {
    out << answer.dump(4) << "\n";
    return absl::OkStatus();
  }
  const json blocks = answer.value("blocks", json::array());
  int64_t total = 0;
  out << std::left << std::setw(14) << "OFFSET" << std::setw(14) << "SIZE"
      << "END\n";
  for (const auto& b : blocks) {
    const int64_t offset = b.value("byteOffset", int64_t{0});
    const int64_t size = b.value("sizeBytes", int64_t{0});
    total += size;
    out << std::setw(14) << offset << std::setw(14) << size << offset + size << "\n";
  }
  out << blocks.size() << (blocks.size() == 1 ? " range, " : " ranges, ") << FormatByteSize(total) << " of "
      << FormatByteSize(answer.value("volumeCapacityBytes", int64_t{0})) << " ("
      << answer.value("blockMetadataType", "UNKNOWN") << ")\n";
  return absl::OkStatus();
}

std::unique_ptr<SnapshotMetadataEndpoints> ServeSnapshotMetadata(apiserver::ApiHandler& handler,
                                                                 apiserver::Registry& registry,
                                                                 client::DriverDirectory& directory) {
  auto endpoints = std::make_shared<Endpoints>(directory);
  auto serve = [&registry, endpoints](http::ResponseWriter& out, const std::string& ns, const std::string& name,
                                      const std::string& base) -> absl::Status {
    BERTH_ASSIGN_OR_RETURN(json answer, endpoints->Get(registry, ns, name, base));
    out.Send(200, "application/json", answer.dump());
    return absl::OkStatus();
  };
  handler.AddSubresource("volumesnapshots", "allocated",
                         [serve](const http::HttpRequest&, http::ResponseWriter& out, const std::string& ns,
                                 const std::string& name) { return serve(out, ns, name, ""); });
  handler.AddSubresource("volumesnapshots", "delta",
                         [serve](const http::HttpRequest& req, http::ResponseWriter& out, const std::string& ns,
                                 const std::string& name) -> absl::Status {
                           auto it = req.query.find("base");
                           if (it == req.query.end() || it->second.empty()) {
                             return absl::InvalidArgumentError("delta needs ?base=<volume snapshot name>");
                           }
                           return serve(out, ns, name, it->second);
                         });
  // The handlers keep `endpoints` alive; the caller's handle only switches
  // them off.
  class Handle final : public SnapshotMetadataEndpoints {
   public:
    explicit Handle(std::shared_ptr<Endpoints> e) : e_(std::move(e)) {}
    ~Handle() override { e_->Stop(); }

   private:
    std::shared_ptr<Endpoints> e_;
  };
  return std::make_unique<Handle>(endpoints);
}

}  // namespace berth::cli
