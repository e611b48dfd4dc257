#include "controllers/snapshot/snapshot_util.h"

#include <algorithm>
#include <map>
#include <utility>

#include "client/object.h"
#include "client/writes.h"
#include "common/status.h"
#include "common/strings.h"

namespace berth::controllers::snapshot_util {

using namespace ::berth::client;  // the controllers' own client library

namespace {

const api::KindInfo& ClassesKind() { return *api::FindResource(kGroup, "volumesnapshotclasses"); }

// ${...} tokens of a secret reference template.
absl::StatusOr<std::string> Resolve(const std::string& text, const std::map<std::string, std::string>& vars) {
  std::string out;
  size_t pos = 0;
  while (true) {
    const size_t open = text.find("${", pos);
    if (open == std::string::npos) {
      out.append(text, pos);
      return out;
    }
    const size_t close = text.find('}', open);
    if (close == std::string::npos) return absl::InvalidArgumentError(StrCat("\"", text, "\": unterminated ${"));
    const std::string key = text.substr(open + 2, close - open - 2);
    auto it = vars.find(key);
    if (it == vars.end()) {
      return absl::InvalidArgumentError(StrCat("\"", text, "\": ${", key, "} cannot be resolved here"));
    }
    out.append(text, pos, open - pos);
    out += it->second;
    pos = close + 1;
  }
}

}  // namespace

const api::KindInfo& ContentsKind() { return *api::FindResource(kGroup, "volumesnapshotcontents"); }

bool Ready(const json& o) { return Field(Field(o, "status"), "readyToUse") == true; }

bool RemoveFinalizer(json& o, const std::string& f) {
  if (!HasFinalizer(o, f)) return false;
  json& list = o["metadata"]["finalizers"];
  list.erase(std::remove(list.begin(), list.end(), json(f)), list.end());
  return true;
}
bool SetAnnotation(json& o, const std::string& key, const std::string& value) {
  if (Annotation(o, key) == value) return false;
  o["metadata"]["annotations"][key] = value;
  return true;
}

absl::StatusOr<std::optional<json>> Edit(apiserver::Registry& registry, const api::KindInfo& kind,
                                         const std::string& ns, const std::string& name, const std::string& uid,
                                         apiserver::Subresource sub, const std::function<bool(json&)>& edit) {
  auto current = registry.Get(kind, ns, name);
  if (!current.ok()) {
    if (current.status().code() == absl::StatusCode::kNotFound) return std::optional<json>();
    return current.status();
  }
  json obj = *current;
  if (Uid(obj) != uid) return std::optional<json>();
  if (!edit(obj)) return std::optional<json>(std::move(obj));
  auto updated = registry.Update(kind, ns, name, std::move(obj), sub);
  if (!updated.ok()) {
    if (updated.status().code() == absl::StatusCode::kNotFound) return std::optional<json>();
    return updated.status();
  }
  return std::optional<json>(*updated);
}

bool SetError(json& o, const std::string& message) {
  json& status = o["status"];
  if (!status.is_object()) status = json::object();
  if (Str(status, {"error", "message"}) == message) return false;
  status["error"] = {{"time", NowRfc3339()}, {"message", message}};
  status["readyToUse"] = false;
  return true;
}

absl::StatusOr<SecretRef> ClassSecret(const json& cls, const std::string& which, const std::string& content_name,
                                      const json* snapshot) {
  const json& params = Field(cls, "parameters");
  const std::string name_key = StrCat(kReservedPrefix, which, "-secret-name");
  const std::string ns_key = StrCat(kReservedPrefix, which, "-secret-namespace");
  const bool has_name = Field(params, name_key).is_string(), has_ns = Field(params, ns_key).is_string();
  if (has_name != has_ns) {
    return absl::InvalidArgumentError(
        StrCat("either name and namespace for ", which, " secrets specified, both must be specified"));
  }
  if (!has_name) return SecretRef{};
  const std::string name_template = Str(params, {name_key}), ns_template = Str(params, {ns_key});
  if (name_template.empty() || ns_template.empty()) {
    return absl::InvalidArgumentError(
        StrCat(which, " secrets specified in parameters but value of either namespace or name is empty"));
  }
  std::map<std::string, std::string> vars = {{"volumesnapshotcontent.name", content_name}};
  if (snapshot != nullptr) vars["volumesnapshot.namespace"] = Ns(*snapshot);
  BERTH_ASSIGN_OR_RETURN(std::string ns, Resolve(ns_template, vars));
  if (snapshot != nullptr) vars["volumesnapshot.name"] = Name(*snapshot);
  BERTH_ASSIGN_OR_RETURN(std::string name, Resolve(name_template, vars));
  if (ns.empty() || name.empty()) return absl::InvalidArgumentError(StrCat(which, " secret resolves to an empty name"));
  return SecretRef{std::move(name), std::move(ns)};
}

std::optional<json> GetClass(apiserver::Registry& registry, const Informer& classes, const std::string& name) {
  if (name.empty()) return std::nullopt;
  if (auto cls = classes.Get("", name)) return cls;
  auto got = registry.Get(ClassesKind(), "", name);
  if (!got.ok()) return std::nullopt;
  return *got;
}

}  // namespace berth::controllers::snapshot_util
