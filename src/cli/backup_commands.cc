#include "cli/backup_commands.h"

#include <map>
#include <optional>
#include <ostream>
#include <set>

#include "absl/time/clock.h"
#include "api/selector.h"
#include "api/table.h"
#include "api/types/backup.h"
#include "backup/repository.h"
#include "cli/commands.h"
#include "cli/rest.h"
#include "common/status.h"
#include "common/strings.h"
#include "common/units.h"

namespace berth::cli {
namespace {

using http::ApiClient;
using http::ApiResponse;
using nlohmann::json;
namespace types = ::berth::api::types;

const api::KindInfo& BackupKind(std::string_view resource) { return *api::FindResource(types::kBackupGroup, resource); }

// "a,b" and repeated flags alike: every non-empty item.
std::vector<std::string> Items(const std::vector<std::string>& values) {
  std::vector<std::string> out;
  for (const std::string& v : values) {
    for (std::string_view item : Split(v, ',')) {
      item = TrimSpace(item);
      if (!item.empty()) out.emplace_back(item);
    }
  }
  return out;
}

// A selector as text ("app=db,tier in (a,b)") as a LabelSelector object:
// single-value equalities as matchLabels, the rest as matchExpressions.
absl::StatusOr<json> SelectorObject(const std::string& text) {
  BERTH_ASSIGN_OR_RETURN(api::LabelSelector parsed, api::LabelSelector::Parse(text));
  json out = json::object();
  for (const auto& r : parsed.requirements()) {
    if (r.op == api::LabelSelector::Op::kIn && r.values.size() == 1) {
      out["matchLabels"][r.key] = r.values[0];
      continue;
    }
    static constexpr const char* kOps[] = {"In", "NotIn", "Exists", "DoesNotExist"};
    json e = {{"key", r.key}, {"operator", kOps[static_cast<int>(r.op)]}};
    if (!r.values.empty()) e["values"] = r.values;
    out["matchExpressions"].push_back(std::move(e));
  }
  return out;
}

absl::Status CreateObject(ApiClient& client, const api::KindInfo& kind, const json& object, std::ostream& out) {
  BERTH_ASSIGN_OR_RETURN(ApiResponse r, client.Call("POST", CollectionPath(kind, ""), object.dump()));
  if (r.code != 201 && r.code != 200) return ServerError(r);
  out << TypedName(kind, object["metadata"].value("name", "")) << " created\n";
  return absl::OkStatus();
}

std::string Phase(const json& o) {
  const std::string phase = o.value("status", json::object()).value("phase", "");
  return phase.empty() ? "New" : phase;
}

bool Final(std::string_view phase) {
  return phase == "Completed" || phase == "PartiallyFailed" || phase == "Failed" || phase == "FailedValidation";
}

// "InProgress 1.2Gi/4Gi", or the phase alone before the total is known.
std::string ProgressLine(const json& o) {
  const std::string progress = ProgressText(o);
  return progress.empty() ? Phase(o) : StrCat(Phase(o), " ", progress);
}

// Why an object ended as it did, for the error of --wait.
std::string Outcome(const api::KindInfo& kind, const json& o) {
  const json status = o.value("status", json::object());
  std::string out = StrCat(kind.singular, " ", o["metadata"].value("name", ""), " ended ", Phase(o));
  if (const std::string reason = status.value("failureReason", ""); !reason.empty()) out += ": " + reason;
  for (const auto& e : status.value("validationErrors", json::array())) {
    if (e.is_string()) out += StrCat("\n", e.get<std::string>());
  }
  if (status.value("errors", 0) > 0) out += StrCat(" (", status.value("errors", 0), " errors)");
  return out;
}

std::string Or(const std::string& s, std::string_view fallback) { return s.empty() ? std::string(fallback) : s; }

std::string JoinList(const json& list) {
  std::string out;
  if (!list.is_array()) return out;
  for (const auto& v : list) {
    if (v.is_string()) out += (out.empty() ? "" : ", ") + v.get<std::string>();
  }
  return out;
}

// The human form of a LabelSelector object ("app=db,tier in (a)").
std::string SelectorText(const json& sel) {
  if (!sel.is_object() || sel.empty()) return "";
  auto parsed = api::LabelSelector::FromJson(sel);
  return parsed.ok() ? parsed->ToString() : sel.dump();
}

// "Label:   value" lines, the values in one column (indented labels too).
class Fields {
 public:
  explicit Fields(std::ostream& out, int indent = 0) : out_(out), indent_(indent) {}
  void Add(std::string_view label, const std::string& value) {
    std::string l = StrCat(std::string(static_cast<size_t>(indent_), ' '), label, ":");
    if (l.size() < 24) l.resize(24, ' ');
    out_ << l << (l.back() == ' ' ? "" : " ") << value << "\n";
  }

 private:
  std::ostream& out_;
  int indent_;
};

// What a backup's or restore's status says of its outcome: progress (items
// counted under `done_key`), errors, warnings, the failure reason and the
// validation errors.
void DescribeOutcome(Fields& f, std::ostream& out, const json& o, const char* done_key) {
  const json status = o.value("status", json::object());
  const json progress = status.value("progress", json::object());
  std::string items;
  if (progress.contains("totalItems")) {
    items = StrCat(progress.value(done_key, 0), " of ", progress.value("totalItems", 0), " items");
  }
  f.Add("Progress", Or(StrCat(ProgressText(o), ProgressText(o).empty() || items.empty() ? "" : ", ", items), "<n/a>"));
  f.Add("Errors", StrCat(status.value("errors", 0)));
  f.Add("Warnings", StrCat(status.value("warnings", 0)));
  if (const std::string reason = status.value("failureReason", ""); !reason.empty()) f.Add("Failure reason", reason);
  if (const json errors = status.value("validationErrors", json::array()); errors.is_array() && !errors.empty()) {
    out << "Validation errors:\n";
    for (const auto& e : errors) out << "  " << (e.is_string() ? e.get<std::string>() : e.dump()) << "\n";
  }
}

void DescribeBackupBody(const json& o, std::ostream& out) {
  const json spec = o.value("spec", json::object());
  const json status = o.value("status", json::object());
  Fields f(out);
  f.Add("Phase", Phase(o));
  out << "\nSpec:\n";
  Fields s(out, 2);
  s.Add("Included namespaces", Or(JoinList(spec.value("includedNamespaces", json::array())), "*"));
  s.Add("Excluded namespaces", Or(JoinList(spec.value("excludedNamespaces", json::array())), "<none>"));
  s.Add("Label selector", Or(SelectorText(spec.value("labelSelector", json::object())), "<none>"));
  s.Add("Storage location", Or(spec.value("storageLocation", ""), "<default>"));
  s.Add("TTL", spec.value("ttl", ""));
  out << "\n";
  f.Add("Started", Or(status.value("startTimestamp", ""), "<n/a>"));
  f.Add("Completed", Or(status.value("completionTimestamp", ""), "<n/a>"));
  f.Add("Expiration", Or(status.value("expiration", ""), "<n/a>"));
  DescribeOutcome(f, out, o, "itemsBackedUp");
  if (const json problems = status.value("problems", json::array()); problems.is_array() && !problems.empty()) {
    out << "Problems:\n";
    for (const auto& p : problems) out << "  " << (p.is_string() ? p.get<std::string>() : p.dump()) << "\n";
  }
  const json volumes = status.value("volumes", json::array());
  if (!volumes.is_array() || volumes.empty()) {
    f.Add("Volumes", "<none>");
    return;
  }
  std::vector<std::vector<std::string>> rows = {
      {"CLAIM", "VOLUME", "NODE", "PHASE", "SIZE", "READ", "ADDED", "SNAPSHOT", "BASE", "MESSAGE"}};
  for (const json& v : volumes) {
    auto bytes = [&](const char* key) {
      return v.contains(key) ? FormatByteSizeApprox(v.value(key, int64_t{0})) : std::string("-");
    };
    rows.push_back({StrCat(v.value("namespace", ""), "/", v.value("persistentVolumeClaim", "")),
                    Or(v.value("persistentVolume", ""), "-"), Or(v.value("node", ""), "-"),
                    Or(v.value("phase", ""), "-"), bytes("sizeBytes"), bytes("bytesRead"), bytes("bytesAdded"),
                    Or(v.value("snapshotName", ""), Or(v.value("groupSnapshot", ""), "-")),
                    Or(v.value("baseBackup", ""), "-"), v.value("message", "")});
  }
  out << "Volumes:\n";
  std::string table = api::Tabulate(rows);
  for (std::string_view line : Split(table, '\n')) {
    if (!line.empty()) out << "  " << TrimRight(line) << "\n";
  }
}

void DescribeRestoreBody(const json& o, std::ostream& out) {
  const json spec = o.value("spec", json::object());
  const json status = o.value("status", json::object());
  Fields f(out);
  f.Add("Phase", Phase(o));
  out << "\nSpec:\n";
  Fields s(out, 2);
  if (spec.contains("backupName")) s.Add("Backup", spec.value("backupName", ""));
  if (spec.contains("scheduleName")) s.Add("Schedule", spec.value("scheduleName", ""));
  s.Add("Included namespaces", Or(JoinList(spec.value("includedNamespaces", json::array())), "*"));
  std::string mapping;
  const json mapping_map = spec.value("namespaceMapping", json::object());
  for (const auto& [from, to] : mapping_map.items()) {
    mapping += StrCat(mapping.empty() ? "" : ", ", from, " -> ", to.is_string() ? to.get<std::string>() : to.dump());
  }
  s.Add("Namespace mapping", Or(mapping, "<none>"));
  s.Add("Target node", Or(spec.value("targetNode", ""), "<the scheduler's choice>"));
  out << "\n";
  f.Add("Started", Or(status.value("startTimestamp", ""), "<n/a>"));
  f.Add("Completed", Or(status.value("completionTimestamp", ""), "<n/a>"));
  DescribeOutcome(f, out, o, "itemsRestored");
}

}  // namespace

std::string ProgressText(const json& object) {
  const json progress = object.value("status", json::object()).value("progress", json::object());
  if (!progress.is_object() || !progress.contains("totalBytes") || !progress["totalBytes"].is_number()) return "";
  return StrCat(FormatByteSizeApprox(progress.value("bytesDone", int64_t{0})), "/",
                FormatByteSizeApprox(progress["totalBytes"].get<int64_t>()));
}

namespace {

// Creates the backup.berth.io object `name` of `kind` with `spec` and, with
// `wait`, follows it to its end.
absl::Status CreateAndFollow(ApiClient& client, const char* resource, std::string_view kind, const std::string& name,
                             const json& spec, bool wait, std::ostream& out, bool terminal) {
  const json object = {
      {"apiVersion", types::kBackupApiVersion}, {"kind", kind}, {"metadata", {{"name", name}}}, {"spec", spec}};
  BERTH_RETURN_IF_ERROR(CreateObject(client, BackupKind(resource), object, out));
  if (!wait) return absl::OkStatus();
  return WaitForBackupKind(client, BackupKind(resource), name, out, terminal);
}

}  // namespace

absl::Status BackupCreate(ApiClient& client, const BackupCreateOptions& o, std::ostream& out, bool terminal) {
  json spec = json::object();
  if (auto ns = Items(o.include_namespaces); !ns.empty()) spec["includedNamespaces"] = ns;
  if (!o.selector.empty()) {
    auto selector = SelectorObject(o.selector);
    if (!selector.ok()) return absl::InvalidArgumentError(StrCat("--selector: ", selector.status().message()));
    spec["labelSelector"] = *selector;
  }
  if (!o.ttl.empty()) {
    // Written as Go writes it ("24h" -> "24h0m0s"), which is what the API
    // keeps and `get -o yaml` shows.
    absl::StatusOr<absl::Duration> ttl = ParseGoDuration(o.ttl);
    if (!ttl.ok()) return absl::InvalidArgumentError(StrCat("--ttl: ", ttl.status().message()));
    spec["ttl"] = FormatGoDuration(*ttl);
  }
  if (!o.storage_location.empty()) spec["storageLocation"] = o.storage_location;
  return CreateAndFollow(client, "backups", types::Backup::kKind, o.name, spec, o.wait, out, terminal);
}

absl::Status RestoreCreate(ApiClient& client, const RestoreCreateOptions& o, std::ostream& out, bool terminal) {
  if (o.from_backup.empty()) return absl::InvalidArgumentError("--from-backup is required");
  json spec = {{"backupName", o.from_backup}};
  for (const std::string& item : Items(o.namespace_mappings)) {
    size_t colon = item.find(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == item.size()) {
      return absl::InvalidArgumentError(
          StrCat("--namespace-mappings: \"", item, "\" is not OLD:NEW (e.g. --namespace-mappings shop:shop-copy)"));
    }
    spec["namespaceMapping"][item.substr(0, colon)] = item.substr(colon + 1);
  }
  if (!o.target_node.empty()) spec["targetNode"] = o.target_node;
  return CreateAndFollow(client, "restores", types::Restore::kKind, o.name, spec, o.wait, out, terminal);
}

absl::Status BackupKindGet(ApiClient& client, const api::KindInfo& kind, const std::string& name, std::ostream& out) {
  std::vector<json> objects;
  if (name.empty()) {
    BERTH_ASSIGN_OR_RETURN(objects, ListAll(client, CollectionPath(kind, ""), ""));
    if (objects.empty()) {
      out << "No resources found\n";
      return absl::OkStatus();
    }
  } else {
    BERTH_ASSIGN_OR_RETURN(json o, GetObject(client, kind, "", name));
    objects.push_back(std::move(o));
  }
  out << api::RenderTable(api::BuildTable(kind, objects, absl::Now(), ""), /*wide=*/false, /*with_namespace=*/false);
  return absl::OkStatus();
}

absl::Status BackupKindDescribe(ApiClient& client, const api::KindInfo& kind, const std::string& name,
                                std::ostream& out) {
  BERTH_ASSIGN_OR_RETURN(json o, GetObject(client, kind, "", name));
  const json md = o.value("metadata", json::object());
  Fields f(out);
  f.Add("Name", md.value("name", ""));
  std::string labels;
  const json label_map = md.value("labels", json::object());
  for (const auto& [k, v] : label_map.items()) {
    labels += StrCat(labels.empty() ? "" : ",", k, "=", v.is_string() ? v.get<std::string>() : v.dump());
  }
  f.Add("Labels", Or(labels, "<none>"));
  f.Add("Created", md.value("creationTimestamp", ""));
  if (md.contains("deletionTimestamp")) f.Add("Deleting since", md.value("deletionTimestamp", ""));
  if (kind.kind == "Restore") {
    DescribeRestoreBody(o, out);
  } else {
    DescribeBackupBody(o, out);
  }
  out << "\n" << EventsSection(client, kind, o);
  return absl::OkStatus();
}

absl::Status BackupDelete(ApiClient& client, const std::string& name, std::ostream& out) {
  const api::KindInfo& kind = BackupKind("backups");
  BERTH_ASSIGN_OR_RETURN(ApiResponse r, client.Call("DELETE", ObjectPath(kind, "", name)));
  if (r.code != 200 && r.code != 202) return ServerError(r);
  out << "Request to delete " << Quoted(kind, name)
      << " submitted: the backup controller removes its data from the repository, then the object\n";
  return absl::OkStatus();
}

absl::Status WaitForBackupKind(ApiClient& client, const api::KindInfo& kind, const std::string& name, std::ostream& out,
                               bool terminal) {
  std::string shown;
  // One line per state: rewritten in place on a terminal, appended else.
  auto show = [&](const json& o) {
    const std::string line = ProgressLine(o);
    if (line == shown) return;
    shown = line;
    if (terminal) {
      out << "\r\033[K" << line << std::flush;
    } else {
      out << line << "\n" << std::flush;
    }
  };
  auto finish = [&](const json& o) -> absl::Status {
    if (terminal) out << "\n" << std::flush;
    if (Phase(o) == "Completed") return absl::OkStatus();
    return absl::FailedPreconditionError(Outcome(kind, o));
  };
  const std::string query =
      StrCat("fieldSelector=", UrlEscape(StrCat("metadata.name=", name)), "&watch=1&allowWatchBookmarks=false");
  // Read, then watch from what was read; read again whenever the watch ends
  // (the server closes watches now and then, as Kubernetes does).
  for (;;) {
    BERTH_ASSIGN_OR_RETURN(ApiResponse r, client.Call("GET", ObjectPath(kind, "", name)));
    if (r.code != 200) return ServerError(r);
    BERTH_ASSIGN_OR_RETURN(json o, ParseBody(r));
    show(o);
    if (Final(Phase(o))) return finish(o);
    const std::string rv = o["metadata"].value("resourceVersion", "");
    std::optional<json> ended;
    absl::Status stream_error;
    bool deleted = false;
    BERTH_ASSIGN_OR_RETURN(
        ApiResponse streamed,
        client.Stream(StrCat(CollectionPath(kind, ""), "?", query, "&resourceVersion=", rv), "application/json",
                      [&](const std::string& line) {
                        json e = json::parse(line, nullptr, false);
                        if (!e.is_object()) return true;
                        const std::string type = e.value("type", "");
                        if (type == "ERROR") {
                          stream_error = absl::UnavailableError(e["object"].value("message", "the watch ended"));
                          return false;
                        }
                        if (type == "DELETED") {
                          deleted = true;
                          return false;
                        }
                        if (type != "ADDED" && type != "MODIFIED") return true;
                        show(e["object"]);
                        if (Final(Phase(e["object"]))) {
                          ended = e["object"];
                          return false;
                        }
                        return true;
                      }));
    if (ended) return finish(*ended);
    if (deleted) {
      if (terminal) out << "\n";
      return absl::NotFoundError(StrCat(kind.singular, " ", name, " was deleted before it ended"));
    }
    if (streamed.code != 200) return ServerError(streamed);
    if (!stream_error.ok() && stream_error.message().find("too old") == std::string_view::npos) return stream_error;
  }
}

absl::Status BackupVerify(ApiClient& client, const std::string& name, const std::string& location, std::ostream& out) {
  std::string location_name = location;
  if (location_name.empty() && !name.empty()) {
    BERTH_ASSIGN_OR_RETURN(json backup, GetObject(client, BackupKind("backups"), "", name));
    location_name = backup.value("spec", json::object()).value("storageLocation", "");
  }
  json bsl;
  if (location_name.empty()) {
    BERTH_ASSIGN_OR_RETURN(std::vector<json> all,
                           ListAll(client, CollectionPath(BackupKind("backupstoragelocations"), ""), ""));
    for (json& l : all) {
      if (l.value("spec", json::object()).value("default", false) == true) bsl = std::move(l);
    }
    if (bsl.is_null()) {
      return absl::NotFoundError(
          "no default BackupStorageLocation: name one with --storage-location, or start berth up with "
          "--backup-location DIR");
    }
  } else {
    BERTH_ASSIGN_OR_RETURN(bsl, GetObject(client, BackupKind("backupstoragelocations"), "", location_name));
  }
  const std::string path =
      bsl.value("spec", json::object()).value("config", json::object()).value("path", std::string());
  const std::string bsl_name = bsl["metadata"].value("name", "");
  if (path.empty()) return absl::FailedPreconditionError(StrCat("BackupStorageLocation ", bsl_name, " has no path"));
  auto repo = backup::Repository::Open(path);
  if (!repo.ok()) {
    return absl::Status(repo.status().code(), StrCat("BackupStorageLocation ", bsl_name, " (", path,
                                                     "): opening the repository: ", repo.status().message()));
  }
  std::optional<std::string_view> which;
  if (!name.empty()) which = name;
  BERTH_ASSIGN_OR_RETURN(backup::VerifyReport report, (*repo)->Verify(which));
  out << "Verified " << report.backups_checked << (report.backups_checked == 1 ? " backup" : " backups") << " in "
      << bsl_name << " (" << path << "): " << report.chunks_checked << " chunks, "
      << FormatByteSizeApprox(report.bytes_checked) << "\n";
  if (report.ok()) {
    out << "OK\n";
    return absl::OkStatus();
  }
  out << report.Describe();
  const size_t problems = report.problems.size() + report.manifests.size();
  return absl::DataLossError(
      StrCat(problems, problems == 1 ? " problem" : " problems", " found in the repository at ", path));
}

}  // namespace berth::cli
