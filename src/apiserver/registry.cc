#include "apiserver/registry.h"

#include <random>

#include "absl/strings/escaping.h"
#include "api/errors.h"
#include "api/quantity.h"
#include "api/schema.h"
#include "api/validation.h"
#include "apiserver/admission.h"
#include "common/status.h"
#include "common/strings.h"

namespace berth::apiserver {
namespace {

// 409 Conflict for an update of an object changed since it was read.
absl::Status Conflict(const api::KindInfo& kind, const std::string& name) {
  std::string group = kind.group.empty() ? "" : StrCat(".", kind.group);
  return absl::AbortedError(StrCat("Operation cannot be fulfilled on ", kind.resource, group, " \"", name,
                                   "\": the object has been modified; please apply your changes "
                                   "to the latest version and try again"));
}

// Read-modify-write loops retry on a conflict like Kubernetes'
// GuaranteedUpdate; under heavy contention on one object a writer may lose
// many group-commit rounds in a row, so the bound is generous.
constexpr int kPatchRetries = 1000;

// The namespaces every cluster keeps.
absl::Status CheckDeletable(const api::KindInfo& kind, const std::string& name) {
  if (kind.kind == "Namespace" && (name == "default" || name == "kube-system" || name == "kube-public")) {
    return absl::PermissionDeniedError(
        StrCat("namespaces \"", name, "\" is forbidden: this namespace may not be deleted"));
  }
  return absl::OkStatus();
}

// The string at `path` (one key or several), read in place; "" when a
// step is missing or the value is not a string.
std::string Str(const json& v, std::initializer_list<std::string_view> path) {
  const json* cur = &v;
  for (std::string_view key : path) {
    if (!cur->is_object()) return "";
    auto it = cur->find(key);
    if (it == cur->end()) return "";
    cur = &*it;
  }
  return cur->is_string() ? cur->get<std::string>() : "";
}
std::string Str(const json& v, std::string_view key) { return Str(v, {key}); }

std::string NameOf(const json& o) { return Str(o, {"metadata", "name"}); }

// Kubernetes' generated-name suffix: 5 characters without vowels or
// look-alike characters.
std::string RandomSuffix() {
  static constexpr char kAlphabet[] = "bcdfghjklmnpqrstvwxz2456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string out;
  for (int i = 0; i < 5; ++i) out += kAlphabet[rng() % (sizeof(kAlphabet) - 1)];
  return out;
}

// The status a kind starts with: what clients send in status is ignored on
// create, as Kubernetes' strategies do.
void ResetStatusForCreate(const api::KindInfo& kind, json& obj) {
  if (!HasStatusSubresource(kind) || kind.kind == "Node") return;
  obj.erase("status");
  if (kind.kind == "PersistentVolumeClaim" || kind.kind == "PersistentVolume" || kind.kind == "Pod") {
    obj["status"] = {{"phase", "Pending"}};
  } else if (kind.kind == "Namespace") {
    obj["status"] = {{"phase", "Active"}};
  }
}

// Status updates change status only: everything else stays as stored
// (Kubernetes' ResetObjectMetaForStatus and spec reset).
json StatusUpdate(const json& stored, json incoming) {
  json out = stored;
  if (incoming.contains("status")) {
    out["status"] = std::move(incoming["status"]);
  } else {
    out.erase("status");
  }
  out["metadata"]["resourceVersion"] = incoming["metadata"].value("resourceVersion", json());
  return out;
}

std::string EncodeContinue(const std::pair<std::string, std::string>& key, int64_t rv) {
  json token = {{"v", 1}, {"rv", rv}, {"ns", key.first}, {"name", key.second}};
  return absl::WebSafeBase64Escape(token.dump());
}

absl::StatusOr<std::pair<std::string, std::string>> DecodeContinue(const std::string& token) {
  std::string raw;
  if (!absl::WebSafeBase64Unescape(token, &raw)) return api::BadRequest("continue key is not valid");
  json t = json::parse(raw, nullptr, false);
  if (t.is_discarded() || !t.is_object() || t.value("v", 0) != 1 || !t["ns"].is_string() || !t["name"].is_string()) {
    return api::BadRequest("continue key is not valid");
  }
  return std::make_pair(t["ns"].get<std::string>(), t["name"].get<std::string>());
}

}  // namespace

bool HasStatusSubresource(const api::KindInfo& kind) {
  static constexpr std::string_view kWithStatus[] = {"PersistentVolume",
                                                     "PersistentVolumeClaim",
                                                     "Pod",
                                                     "Node",
                                                     "Namespace",
                                                     "VolumeAttachment",
                                                     "VolumeSnapshot",
                                                     "VolumeSnapshotContent",
                                                     "BackupStorageLocation",
                                                     "Backup",
                                                     "Restore",
                                                     "Schedule"};
  for (auto k : kWithStatus) {
    if (kind.kind == k) return true;
  }
  return false;
}

// ---- FieldSelector ----

absl::StatusOr<FieldSelector> FieldSelector::Parse(std::string_view text) {
  FieldSelector out;
  for (std::string_view term : Split(text, ',')) {
    if (term.empty()) continue;
    Term t;
    size_t pos;
    std::string_view key, value;
    if ((pos = term.find("!=")) != std::string_view::npos) {
      key = term.substr(0, pos);
      value = term.substr(pos + 2);
      t.equal = false;
    } else if ((pos = term.find("==")) != std::string_view::npos) {
      key = term.substr(0, pos);
      value = term.substr(pos + 2);
      t.equal = true;
    } else if ((pos = term.find('=')) != std::string_view::npos) {
      key = term.substr(0, pos);
      value = term.substr(pos + 1);
      t.equal = true;
    } else {
      return api::BadRequest(
          StrCat("invalid field selector \"", text, "\": \"", term, "\" is not key=value or key!=value"));
    }
    if (key.empty()) return api::BadRequest(StrCat("invalid field selector \"", text, "\""));
    for (std::string_view part : Split(key, '.')) t.path.emplace_back(part);
    t.value = std::string(value);
    out.terms_.push_back(std::move(t));
  }
  return out;
}

bool FieldSelector::Matches(const json& object) const {
  for (const auto& t : terms_) {
    const json* cur = &object;
    for (const auto& p : t.path) {
      if (!cur->is_object() || !cur->contains(p)) {
        cur = nullptr;
        break;
      }
      cur = &(*cur)[p];
    }
    std::string value;
    if (cur != nullptr && !cur->is_null()) value = cur->is_string() ? cur->get<std::string>() : cur->dump();
    if ((value == t.value) != t.equal) return false;
  }
  return true;
}

// ---- Registry ----

absl::Status Registry::Bootstrap() {
  const api::KindInfo& ns_kind = *api::FindResource("", "namespaces");
  for (const char* name : {"default", "kube-system", "kube-public"}) {
    auto created = Create(ns_kind, "", {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", name}}}});
    if (!created.ok() && created.status().code() != absl::StatusCode::kAlreadyExists) {
      return created.status();
    }
  }
  return absl::OkStatus();
}

// Kubernetes' DefaultStorageClass admission: a claim that names no class
// (the field absent, not "") gets the default one — the class annotated
// storageclass.kubernetes.io/is-default-class=true (the newest if several).
namespace {

// Kubernetes' StorageObjectInUseProtection admission: claims and volumes
// are born with their protection finalizer, so the controllers need not
// write it (and nothing can be removed before they have looked at it).
void AddProtectionFinalizer(const api::KindInfo& kind, json& obj) {
  const char* finalizer = kind.kind == "PersistentVolumeClaim" ? "kubernetes.io/pvc-protection"
                          : kind.kind == "PersistentVolume"    ? "kubernetes.io/pv-protection"
                                                               : nullptr;
  if (finalizer == nullptr) return;
  json& list = obj["metadata"]["finalizers"];
  if (!list.is_array()) list = json::array();
  if (std::find(list.begin(), list.end(), finalizer) == list.end()) list.push_back(finalizer);
}

}  // namespace

void Registry::SetDefaultStorageClass(json& claim) {
  json& spec = claim["spec"];
  if (!spec.is_object() || spec.contains("storageClassName")) return;
  const json& ann = claim["metadata"].value("annotations", json::object());
  if (ann.contains("volume.beta.kubernetes.io/storage-class")) return;
  auto classes = store_.List("storageclasses", "");
  if (!classes.ok()) return;
  std::string best, best_created;
  for (const auto& sc : classes->items) {
    const json md = sc.value("metadata", json::object());
    const json a = md.value("annotations", json::object());
    const bool is_default = a.value("storageclass.kubernetes.io/is-default-class", "") == "true" ||
                            a.value("storageclass.beta.kubernetes.io/is-default-class", "") == "true";
    if (!is_default) continue;
    const std::string created = md.value("creationTimestamp", "");
    if (best.empty() || created > best_created || (created == best_created && md.value("name", "") < best)) {
      best = md.value("name", "");
      best_created = created;
    }
  }
  if (!best.empty()) spec["storageClassName"] = best;
}

// Kubernetes' PersistentVolumeClaimResize admission: a claim may grow only
// if its StorageClass allows expansion.
absl::Status Registry::CheckClaimResize(const json& old, const json& updated) {
  // Read in place: .value("spec", {}) would copy the whole spec.
  auto size = [](const json& pvc) { return Str(pvc, {"spec", "resources", "requests", "storage"}); };
  if (size(old) == size(updated)) return absl::OkStatus();
  auto before = api::Quantity::Parse(size(old)), after = api::Quantity::Parse(size(updated));
  if (!before.ok() || !after.ok() || *after <= *before) return absl::OkStatus();  // validation decides
  const std::string class_name = Str(updated, {"spec", "storageClassName"});
  bool allowed = false;
  if (!class_name.empty()) {
    auto sc = store_.GetShared("storageclasses", "", class_name);
    allowed = sc.ok() && (*sc)->value("allowVolumeExpansion", false) == true;
  }
  if (!allowed) {
    return absl::PermissionDeniedError(
        StrCat("persistentvolumeclaims \"", NameOf(updated),
               "\" is forbidden: only dynamically provisioned pvc can be resized and the storageclass that "
               "provisions the pvc must support resize"));
  }
  return absl::OkStatus();
}

// At most one default BackupStorageLocation: a backup naming no location
// must not depend on which of two defaults a controller happens to read.
// Refused rather than "the newest wins" (DefaultStorageClass's rule), so the
// user sees at once that the old default stays one until they unset it.
absl::Status Registry::CheckDefaultLocation(const json& location) {
  const json& spec = location.value("spec", json::object());
  if (!spec.is_object() || spec.value("default", false) != true) return absl::OkStatus();
  auto locations = store_.List("backupstoragelocations", "");
  if (!locations.ok()) return locations.status();
  const std::string name = NameOf(location);
  for (const auto& other : locations->items) {
    const std::string other_name = NameOf(other);
    if (other_name == name) continue;
    const json& other_spec = other.value("spec", json::object());
    if (other_spec.is_object() && other_spec.value("default", false) == true) {
      return api::Invalid("BackupStorageLocation", name,
                          {{"spec.default", StrCat("Forbidden: BackupStorageLocation \"", other_name,
                                                   "\" is the default already; set its spec.default to false first")}});
    }
  }
  return absl::OkStatus();
}

absl::Status Registry::CheckNamespace(const api::KindInfo& kind, const std::string& ns) {
  if (!kind.namespaced) return absl::OkStatus();
  if (ns.empty()) return api::BadRequest(StrCat(kind.kind, " is namespaced: a namespace is required"));
  auto got = store_.GetShared("namespaces", "", ns);
  if (!got.ok()) {
    if (got.status().code() == absl::StatusCode::kNotFound) {
      return absl::NotFoundError(StrCat("namespaces \"", ns, "\" not found"));
    }
    return got.status();
  }
  if (const json& n = **got; n.contains("metadata") && n["metadata"].contains("deletionTimestamp")) {
    return absl::PermissionDeniedError(
        StrCat("unable to create new content in namespace ", ns, " because it is being terminated"));
  }
  return absl::OkStatus();
}

absl::StatusOr<json> Registry::Create(const api::KindInfo& kind, const std::string& ns, json obj) {
  BERTH_ASSIGN_OR_RETURN(std::shared_ptr<const json> created, CreateShared(kind, ns, std::move(obj)));
  return *created;
}

absl::StatusOr<std::shared_ptr<const json>> Registry::CreateShared(const api::KindInfo& kind, const std::string& ns,
                                                                   json obj) {
  return CreateAdmitted(kind, ns, std::move(obj), /*keep_status=*/false);
}

absl::StatusOr<std::shared_ptr<const json>> Registry::CreateShared(const api::KindInfo& kind, const std::string& ns,
                                                                   json obj, std::shared_ptr<const std::string>* text) {
  return CreateAdmitted(kind, ns, std::move(obj), /*keep_status=*/false, text);
}

absl::StatusOr<std::shared_ptr<const json>> Registry::CreateSharedWithStatus(const api::KindInfo& kind,
                                                                             const std::string& ns, json obj) {
  return CreateAdmitted(kind, ns, std::move(obj), /*keep_status=*/true);
}

absl::StatusOr<std::shared_ptr<const json>> Registry::CreateAdmitted(const api::KindInfo& kind, const std::string& ns,
                                                                     json obj, bool keep_status,
                                                                     std::shared_ptr<const std::string>* text) {
  BERTH_RETURN_IF_ERROR(PrepareCreate(kind, ns, obj, keep_status));
  const std::string name = Str(obj["metadata"], "name");
  return CreatedOrExists(kind, name, store_.CreateShared(std::string(kind.resource), std::move(obj), text));
}

std::vector<absl::StatusOr<json>> Registry::CreateAll(const api::KindInfo& kind,
                                                      std::vector<std::pair<std::string, json>> objects) {
  std::vector<absl::StatusOr<json>> out(objects.size(), absl::UnknownError(""));
  std::vector<json> valid;
  std::vector<size_t> at;
  for (size_t i = 0; i < objects.size(); ++i) {
    auto& [ns, obj] = objects[i];
    if (absl::Status st = PrepareCreate(kind, ns, obj); !st.ok()) {
      out[i] = st;
      continue;
    }
    valid.push_back(std::move(obj));
    at.push_back(i);
  }
  std::vector<std::string> names;
  for (const auto& o : valid) names.push_back(Str(o["metadata"], "name"));
  auto created = store_.CreateAll(std::string(kind.resource), std::move(valid));
  for (size_t k = 0; k < created.size(); ++k) {
    out[at[k]] = CreatedOrExists(kind, names[k], std::move(created[k]));
  }
  return out;
}

absl::StatusOr<json> Registry::DryRunCreate(const api::KindInfo& kind, const std::string& ns, json obj) {
  BERTH_RETURN_IF_ERROR(PrepareCreate(kind, ns, obj));
  const std::string name = Str(obj["metadata"], "name");
  if (GetShared(kind, ns, name).ok()) return ExistsError(kind, name);
  return obj;
}

absl::StatusOr<json> Registry::DryRunDelete(const api::KindInfo& kind, const std::string& ns, const std::string& name,
                                            const DeleteOptions& options) {
  BERTH_RETURN_IF_ERROR(CheckDeletable(kind, name));
  BERTH_ASSIGN_OR_RETURN(json cur, Get(kind, ns, name));
  const std::string rv = cur["metadata"].value("resourceVersion", "");
  const std::string uid = cur["metadata"].value("uid", "");
  if (options.resource_version && *options.resource_version != rv) {
    return absl::AbortedError(StrCat("Precondition failed: ResourceVersion in precondition: ",
                                     *options.resource_version, ", ResourceVersion in object meta: ", rv));
  }
  if (options.uid && *options.uid != uid) {
    return absl::AbortedError(
        StrCat("Precondition failed: UID in precondition: ", *options.uid, ", UID in object meta: ", uid));
  }
  return cur;
}

absl::Status Registry::ExistsError(const api::KindInfo& kind, const std::string& name) {
  std::string group = kind.group.empty() ? "" : StrCat(".", kind.group);
  return absl::AlreadyExistsError(StrCat(kind.resource, group, " \"", name, "\" already exists"));
}

absl::Status Registry::PrepareCreate(const api::KindInfo& kind, const std::string& ns, json& obj, bool keep_status) {
  if (!obj.is_object()) return api::BadRequest("the request body must be a JSON object");
  const std::string api_version = kind.api_version();
  if (obj.contains("apiVersion") && obj["apiVersion"] != api_version) {
    return api::BadRequest(
        StrCat("the API version in the data (",
               obj["apiVersion"].is_string() ? obj["apiVersion"].get<std::string>() : obj["apiVersion"].dump(),
               ") does not match the expected API version (", api_version, ")"));
  }
  if (obj.contains("kind") && obj["kind"] != kind.kind) {
    return api::BadRequest(StrCat("the kind in the data does not match the expected kind (", kind.kind, ")"));
  }
  obj["apiVersion"] = api_version;
  obj["kind"] = std::string(kind.kind);
  if (!obj.contains("metadata") || obj["metadata"].is_null()) obj["metadata"] = json::object();
  BERTH_RETURN_IF_ERROR(api::CheckSchema(obj, api::SchemaFor(kind)));
  json& md = obj["metadata"];
  if (kind.namespaced) {
    std::string body_ns = Str(md, "namespace");
    if (!body_ns.empty() && body_ns != ns) {
      return api::BadRequest("the namespace of the provided object does not match the namespace sent on the request");
    }
    md["namespace"] = ns;
  } else {
    md.erase("namespace");
  }
  if (Str(md, "name").empty()) {
    std::string gen = Str(md, "generateName");
    if (gen.empty()) {
      return api::Invalid(kind.kind, "", {{"metadata.name", "Required value: name or generateName is required"}});
    }
    md["name"] = gen + RandomSuffix();
  }
  for (const char* f : {"uid", "resourceVersion", "creationTimestamp", "deletionTimestamp",
                        "deletionGracePeriodSeconds", "generation", "selfLink", "managedFields"}) {
    md.erase(f);
  }
  api::Normalize(kind, obj);
  api::ApplyDefaults(kind, obj);
  if (!keep_status || !obj.contains("status")) ResetStatusForCreate(kind, obj);
  if (kind.kind == "PersistentVolumeClaim") SetDefaultStorageClass(obj);
  if (kind.kind == "Pod") AddDefaultTolerations(obj);
  if (storage_protection_admission_) AddProtectionFinalizer(kind, obj);
  BERTH_RETURN_IF_ERROR(api::Validate(kind, obj, nullptr));
  if (kind.kind == "BackupStorageLocation") BERTH_RETURN_IF_ERROR(CheckDefaultLocation(obj));
  return CheckNamespace(kind, ns);
}

absl::StatusOr<json> Registry::Get(const api::KindInfo& kind, const std::string& ns, const std::string& name) {
  BERTH_ASSIGN_OR_RETURN(std::shared_ptr<const json> got, GetShared(kind, ns, name));
  return *got;
}

absl::StatusOr<std::shared_ptr<const json>> Registry::GetShared(const api::KindInfo& kind, const std::string& ns,
                                                                const std::string& name) {
  auto got = store_.GetShared(std::string(kind.resource), kind.namespaced ? ns : "", name);
  if (!got.ok() && got.status().code() == absl::StatusCode::kNotFound) {
    std::string group = kind.group.empty() ? "" : StrCat(".", kind.group);
    return absl::NotFoundError(StrCat(kind.resource, group, " \"", name, "\" not found"));
  }
  return got;
}

absl::StatusOr<ListPage> Registry::List(const api::KindInfo& kind, const std::string& ns, const ListOptions& options) {
  store::ListPage page;
  page.limit = options.limit;
  if (!options.continue_token.empty()) {
    BERTH_ASSIGN_OR_RETURN(page.after, DecodeContinue(options.continue_token));
  }
  ListPage out;
  // Field selectors filter after the store's page; keep reading pages until
  // the limit is met so a page is never spuriously short.
  while (true) {
    BERTH_ASSIGN_OR_RETURN(store::ListResult res,
                           store_.List(std::string(kind.resource), kind.namespaced ? ns : "", options.labels, page));
    if (out.resource_version == 0) out.resource_version = res.resource_version;
    for (auto& item : res.items) {
      if (options.fields.empty() || options.fields.Matches(item)) out.items.push_back(std::move(item));
    }
    if (!res.next) return out;
    if (options.limit == 0 || out.items.size() >= options.limit) {
      out.continue_token = EncodeContinue(*res.next, res.resource_version);
      return out;
    }
    page.after = res.next;
    page.limit = options.limit - out.items.size();
  }
}

absl::StatusOr<std::shared_ptr<const json>> Registry::UpdateOnce(const api::KindInfo& kind, const std::string& ns,
                                                                 const std::string& name, json obj, Subresource sub,
                                                                 bool* unconditional, bool dry_run) {
  if (!obj.is_object()) return api::BadRequest("the request body must be a JSON object");
  const std::string api_version = kind.api_version();
  if (obj.contains("apiVersion") && obj["apiVersion"] != api_version) {
    return api::BadRequest(
        StrCat("the API version in the data does not match the expected API version (", api_version, ")"));
  }
  if (obj.contains("kind") && obj["kind"] != kind.kind) {
    return api::BadRequest(StrCat("the kind in the data does not match the expected kind (", kind.kind, ")"));
  }
  obj["apiVersion"] = api_version;
  obj["kind"] = std::string(kind.kind);
  if (!obj.contains("metadata") || !obj["metadata"].is_object()) obj["metadata"] = json::object();
  BERTH_RETURN_IF_ERROR(api::CheckSchema(obj, api::SchemaFor(kind)));
  json& md = obj["metadata"];
  if (Str(md, "name").empty()) md["name"] = name;
  if (Str(md, "name") != name) {
    return api::BadRequest(
        StrCat("the name of the object (", Str(md, "name"), ") does not match the name on the URL (", name, ")"));
  }
  if (kind.namespaced) {
    if (!Str(md, "namespace").empty() && Str(md, "namespace") != ns) {
      return api::BadRequest("the namespace of the provided object does not match the namespace sent on the request");
    }
    md["namespace"] = ns;
  } else {
    md.erase("namespace");
  }
  // The stored object, shared with the store's cache: read, never copied
  // (its metadata always holds a resourceVersion).
  BERTH_ASSIGN_OR_RETURN(std::shared_ptr<const json> stored, GetShared(kind, ns, name));
  const json& old = *stored;
  *unconditional = Str(md, "resourceVersion").empty();
  if (*unconditional) {
    md["resourceVersion"] = old["metadata"]["resourceVersion"];
  } else if (Str(md, "resourceVersion") != Str(old["metadata"], "resourceVersion")) {
    // A stale object is a conflict before anything else is judged (as in
    // Kubernetes, whose storage checks the precondition first): validating
    // it against a newer object would report rules it did not break.
    return Conflict(kind, name);
  }
  if (sub == Subresource::kStatus) {
    obj = StatusUpdate(old, std::move(obj));
    api::Normalize(kind, obj);
  } else {
    if (HasStatusSubresource(kind) && sub == Subresource::kMain) {
      if (old.contains("status")) {
        obj["status"] = old["status"];
      } else {
        obj.erase("status");
      }
    }
    // The store owns these; what a client sends is ignored.
    json& m = obj["metadata"];
    for (const char* f : {"uid", "creationTimestamp", "deletionTimestamp", "generation"}) {
      if (old["metadata"].contains(f)) {
        m[f] = old["metadata"][f];
      } else {
        m.erase(f);
      }
    }
    m.erase("managedFields");
    m.erase("selfLink");
    if (old["metadata"].contains("deletionTimestamp")) {
      const json none = json::array();
      const json& before = old["metadata"].value("finalizers", none);
      for (const auto& f : m.value("finalizers", none)) {
        if (std::find(before.begin(), before.end(), f) == before.end()) {
          return api::Invalid(
              kind.kind, name,
              {{"metadata.finalizers",
                StrCat(
                    "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers ",
                    f.dump())}});
        }
      }
    }
    api::Normalize(kind, obj);
    api::ApplyDefaults(kind, obj);
    if (kind.kind == "Pod") AddDefaultTolerations(obj);  // defaults are canonical: normalized once
  }
  BERTH_RETURN_IF_ERROR(api::Validate(kind, obj, &old));
  if (obj == old) return stored;  // nothing changes: no write, no event (as Kubernetes)
  if (kind.kind == "PersistentVolumeClaim" && sub != Subresource::kStatus) {
    BERTH_RETURN_IF_ERROR(CheckClaimResize(old, obj));
  }
  if (kind.kind == "BackupStorageLocation" && sub != Subresource::kStatus) {
    BERTH_RETURN_IF_ERROR(CheckDefaultLocation(obj));
  }
  if (dry_run) return std::make_shared<const json>(std::move(obj));
  auto updated = store_.UpdateShared(std::string(kind.resource), std::move(obj));
  if (!updated.ok() && updated.status().code() == absl::StatusCode::kAborted) return Conflict(kind, name);
  return updated;
}

absl::StatusOr<json> Registry::Update(const api::KindInfo& kind, const std::string& ns, const std::string& name,
                                      json object, Subresource sub) {
  BERTH_ASSIGN_OR_RETURN(std::shared_ptr<const json> updated,
                         UpdateImpl(kind, ns, name, std::move(object), sub, /*dry_run=*/false));
  return *updated;
}

absl::StatusOr<std::shared_ptr<const json>> Registry::UpdateShared(const api::KindInfo& kind, const std::string& ns,
                                                                   const std::string& name, json object,
                                                                   Subresource sub) {
  return UpdateImpl(kind, ns, name, std::move(object), sub, /*dry_run=*/false);
}

absl::StatusOr<json> Registry::DryRunUpdate(const api::KindInfo& kind, const std::string& ns, const std::string& name,
                                            json object, Subresource sub) {
  BERTH_ASSIGN_OR_RETURN(std::shared_ptr<const json> updated,
                         UpdateImpl(kind, ns, name, std::move(object), sub, /*dry_run=*/true));
  return *updated;
}

absl::StatusOr<std::shared_ptr<const json>> Registry::UpdateImpl(const api::KindInfo& kind, const std::string& ns,
                                                                 const std::string& name, json object, Subresource sub,
                                                                 bool dry_run) {
  // Only an update without a resourceVersion is ever retried (see below):
  // any other hands its object over instead of copying it.
  bool conditional = false;
  if (object.is_object()) {
    auto md = object.find("metadata");
    conditional = md != object.end() && md->is_object() && !Str(*md, "resourceVersion").empty();
  }
  if (conditional) {
    bool unconditional = false;
    return UpdateOnce(kind, ns, name, std::move(object), sub, &unconditional, dry_run);
  }
  for (int attempt = 0;; ++attempt) {
    bool unconditional = false;
    auto out = UpdateOnce(kind, ns, name, object, sub, &unconditional, dry_run);
    // An unconditional update lost a race with another writer between our
    // read and write: it asked for no precondition, so try again.
    if (out.ok() || !unconditional || out.status().code() != absl::StatusCode::kAborted || attempt >= kPatchRetries) {
      return out;
    }
  }
}

absl::StatusOr<json> Registry::Patch(const api::KindInfo& kind, const std::string& ns, const std::string& name,
                                     std::string_view patch, PatchType type, Subresource sub) {
  return PatchImpl(kind, ns, name, patch, type, sub, /*dry_run=*/false);
}

absl::StatusOr<json> Registry::DryRunPatch(const api::KindInfo& kind, const std::string& ns, const std::string& name,
                                           std::string_view patch, PatchType type, Subresource sub) {
  return PatchImpl(kind, ns, name, patch, type, sub, /*dry_run=*/true);
}

absl::StatusOr<json> Registry::PatchImpl(const api::KindInfo& kind, const std::string& ns, const std::string& name,
                                         std::string_view patch, PatchType type, Subresource sub, bool dry_run) {
  for (int attempt = 0;; ++attempt) {
    BERTH_ASSIGN_OR_RETURN(json old, Get(kind, ns, name));
    const std::string old_rv = old["metadata"].value("resourceVersion", "");
    BERTH_ASSIGN_OR_RETURN(json patched, ApplyPatch(old, patch, type, api::SchemaFor(kind)));
    if (!patched.is_object()) return api::BadRequest("the patch does not produce an object");
    if (!patched.contains("metadata") || !patched["metadata"].is_object()) patched["metadata"] = json::object();
    // A patch that names a resourceVersion is a precondition; otherwise the
    // patch applies to the version just read and is retried on a race.
    const bool precondition = patched["metadata"].value("resourceVersion", "") != old_rv;
    if (!precondition) patched["metadata"]["resourceVersion"] = old_rv;
    bool unconditional = false;
    auto out = UpdateOnce(kind, ns, name, std::move(patched), sub, &unconditional, dry_run);
    if (out.ok()) return **out;
    if (precondition || out.status().code() != absl::StatusCode::kAborted || attempt >= kPatchRetries) {
      return out.status();
    }
  }
}

absl::StatusOr<json> Registry::Delete(const api::KindInfo& kind, const std::string& ns, const std::string& name,
                                      const DeleteOptions& options) {
  const std::string eff_ns = kind.namespaced ? ns : "";
  BERTH_RETURN_IF_ERROR(CheckDeletable(kind, name));
  std::optional<std::string> uid = options.uid;
  if (options.resource_version) {
    BERTH_ASSIGN_OR_RETURN(json cur, Get(kind, ns, name));
    if (cur["metadata"].value("resourceVersion", "") != *options.resource_version) {
      return absl::AbortedError(
          StrCat("Precondition failed: ResourceVersion in precondition: ", *options.resource_version,
                 ", ResourceVersion in object meta: ", cur["metadata"].value("resourceVersion", "")));
    }
    // Tie the delete to exactly the version checked.
    uid = cur["metadata"].value("uid", "");
    if (options.uid && *options.uid != *uid) {
      return absl::AbortedError(
          StrCat("Precondition failed: UID in precondition: ", *options.uid, ", UID in object meta: ", *uid));
    }
  }
  if (kind.kind == "Namespace") {
    BERTH_RETURN_IF_ERROR(Get(kind, "", name).status());
    for (const auto& k : api::AllKinds()) {
      if (!k.namespaced) continue;
      BERTH_ASSIGN_OR_RETURN(auto items, store_.List(std::string(k.resource), name));
      for (const auto& item : items.items) {
        auto st = store_.Delete(std::string(k.resource), name, NameOf(item)).status();
        if (!st.ok() && st.code() != absl::StatusCode::kNotFound) return st;
      }
    }
  }
  std::optional<int64_t> grace;
  if (kind.kind == "Pod") {
    BERTH_ASSIGN_OR_RETURN(json pod, Get(kind, ns, name));
    const json spec = pod.value("spec", json::object());
    const json& tgps = spec.contains("terminationGracePeriodSeconds") ? spec["terminationGracePeriodSeconds"] : json();
    int64_t period = options.grace_period_seconds ? *options.grace_period_seconds
                                                  : (tgps.is_number_integer() ? tgps.get<int64_t>() : 30);
    const std::string phase = pod.value("status", json::object()).value("phase", "");
    // Kubernetes' CheckGracefulDelete: nothing runs an unscheduled or a
    // finished pod, so nothing needs the grace period.
    if (spec.value("nodeName", "").empty() || phase == "Succeeded" || phase == "Failed") period = 0;
    if (period < 0) period = 1;
    grace = period;
  } else if (options.grace_period_seconds && *options.grace_period_seconds == 0) {
    grace = 0;
  }
  auto out = store_.Delete(std::string(kind.resource), eff_ns, name, uid, grace);
  if (!out.ok()) {
    std::string group = kind.group.empty() ? "" : StrCat(".", kind.group);
    if (out.status().code() == absl::StatusCode::kNotFound) {
      return absl::NotFoundError(StrCat(kind.resource, group, " \"", name, "\" not found"));
    }
    if (out.status().code() == absl::StatusCode::kAborted && uid) {
      return absl::AbortedError(StrCat("Precondition failed: UID in precondition: ", *uid));
    }
  }
  return out;
}

absl::StatusOr<json> Registry::BindPod(const std::string& ns, const std::string& name, const std::string& node_name) {
  const api::KindInfo& pods = *api::FindResource("", "pods");
  if (node_name.empty()) return api::Invalid("Binding", name, {{"target.name", "Required value"}});
  for (int attempt = 0;; ++attempt) {
    BERTH_ASSIGN_OR_RETURN(json pod, Get(pods, ns, name));
    if (pod["metadata"].contains("deletionTimestamp")) {
      return absl::FailedPreconditionError(StrCat("pod ", name, " is being deleted, cannot be assigned to a host"));
    }
    std::string current = pod.value("spec", json::object()).value("nodeName", "");
    if (!current.empty()) {
      return absl::AbortedError(StrCat("Operation cannot be fulfilled on pods/binding \"", name, "\": pod ", name,
                                       " is already assigned to node \"", current, "\""));
    }
    pod["spec"]["nodeName"] = node_name;
    auto out = store_.Update("pods", std::move(pod));
    if (out.ok() || out.status().code() != absl::StatusCode::kAborted || attempt >= kPatchRetries) {
      return out;
    }
  }
}

absl::StatusOr<WatchStream> Registry::Watch(const api::KindInfo& kind, const std::string& ns,
                                            const std::string& resource_version, const api::LabelSelector& labels) {
  WatchStream out;
  const std::string resource(kind.resource);
  const std::string eff_ns = kind.namespaced ? ns : "";
  if (resource_version.empty() || resource_version == "0") {
    BERTH_ASSIGN_OR_RETURN(store::ListResult list, store_.List(resource, eff_ns, labels));
    for (auto& item : list.items) {
      out.initial.push_back(
          {store::EventType::kAdded, resource, std::make_shared<const json>(std::move(item)), 0, nullptr});
    }
    BERTH_ASSIGN_OR_RETURN(out.watcher, store_.Watch(resource, eff_ns, list.resource_version, labels));
    return out;
  }
  int64_t rv = 0;
  if (!absl::SimpleAtoi(std::string(resource_version), &rv) || rv < 0) {
    return api::BadRequest(StrCat("invalid resourceVersion \"", resource_version, "\""));
  }
  auto watcher = store_.Watch(resource, eff_ns, rv, labels);
  if (!watcher.ok() && watcher.status().code() == absl::StatusCode::kOutOfRange) {
    return absl::OutOfRangeError(StrCat("too old resource version: ", rv));
  }
  BERTH_ASSIGN_OR_RETURN(out.watcher, std::move(watcher));
  return out;
}

}  // namespace berth::apiserver
