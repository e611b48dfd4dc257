#include "controllers/snapshot/snapshot_util.h"

#include <map>
#include <utility>

#include "client/object.h"
#include "client/typed.h"
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
const api::KindInfo& SnapshotsKind() { return *api::FindResource(kGroup, "volumesnapshots"); }

bool SetAnnotation(api::types::ObjectMeta& meta, const std::string& key, const std::string& value) {
  if (meta.Annotation(key) == value) return false;
  meta.annotations[key] = value;
  return true;
}

absl::StatusOr<SecretRef> ClassSecret(const VolumeSnapshotClass& cls, const std::string& which,
                                      const std::string& content_name, const VolumeSnapshot* snapshot) {
  const auto name_param = cls.parameters.find(StrCat(kReservedPrefix, which, "-secret-name"));
  const auto ns_param = cls.parameters.find(StrCat(kReservedPrefix, which, "-secret-namespace"));
  const bool has_name = name_param != cls.parameters.end(), has_ns = ns_param != cls.parameters.end();
  if (has_name != has_ns) {
    return absl::InvalidArgumentError(
        StrCat("either name and namespace for ", which, " secrets specified, both must be specified"));
  }
  if (!has_name) return SecretRef{};
  const std::string& name_template = name_param->second;
  const std::string& ns_template = ns_param->second;
  if (name_template.empty() || ns_template.empty()) {
    return absl::InvalidArgumentError(
        StrCat(which, " secrets specified in parameters but value of either namespace or name is empty"));
  }
  std::map<std::string, std::string> vars = {{"volumesnapshotcontent.name", content_name}};
  if (snapshot != nullptr) vars["volumesnapshot.namespace"] = snapshot->metadata.namespace_;
  BERTH_ASSIGN_OR_RETURN(std::string ns, Resolve(ns_template, vars));
  if (snapshot != nullptr) vars["volumesnapshot.name"] = snapshot->metadata.name;
  BERTH_ASSIGN_OR_RETURN(std::string name, Resolve(name_template, vars));
  if (ns.empty() || name.empty()) return absl::InvalidArgumentError(StrCat(which, " secret resolves to an empty name"));
  return SecretRef{std::move(name), std::move(ns)};
}

absl::StatusOr<std::optional<VolumeSnapshotClass>> GetClass(apiserver::Registry& registry, const Informer& classes,
                                                            const std::string& name) {
  if (name.empty()) return std::nullopt;
  std::shared_ptr<const json> cls = classes.GetSharedByKey(name);
  if (!cls) {
    auto got = registry.GetShared(ClassesKind(), "", name);
    if (!got.ok()) return std::nullopt;
    cls = *std::move(got);
  }
  BERTH_ASSIGN_OR_RETURN(VolumeSnapshotClass typed, DecodeAs<VolumeSnapshotClass>(*cls));
  return typed;
}

}  // namespace berth::controllers::snapshot_util
