// The object kinds berth serves, with Kubernetes' API groups, versions,
// resource names, scopes and short names. This table drives REST paths,
// discovery and the CLI's name resolution.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace berth::api {

struct KindInfo {
  std::string_view group;     // "" for the core group
  std::string_view version;   // "v1"
  std::string_view kind;      // "PersistentVolumeClaim"
  std::string_view resource;  // "persistentvolumeclaims"
  std::string_view singular;  // "persistentvolumeclaim"
  bool namespaced;
  std::vector<std::string_view> short_names;

  // "v1" or "storage.k8s.io/v1".
  std::string api_version() const;
};

const std::vector<KindInfo>& AllKinds();

// By apiVersion + kind as written in a manifest; nullptr if unknown.
const KindInfo* FindKind(std::string_view api_version, std::string_view kind);
// By API group + plural resource as found in a REST path; nullptr if unknown.
const KindInfo* FindResource(std::string_view group, std::string_view resource);
// By what a user types: plural, singular, kind or short name, any case
// ("pvc", "PersistentVolumeClaims", "sc"); "name.group" narrows the group.
const KindInfo* FindByUserName(std::string_view name);

}  // namespace berth::api
