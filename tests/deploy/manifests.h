// Test helpers over Kubernetes manifests parsed with yaml-cpp: finding
// objects and containers, reading flags, and following a path inside a
// container through its volumeMounts to the volume (and host path) behind it.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "common/exec.h"
#include "yaml-cpp/yaml.h"

namespace berth::testing {

// Every non-empty document of a multi-document YAML text.
inline std::vector<YAML::Node> LoadDocuments(const std::string& text) {
  std::vector<YAML::Node> out;
  for (const YAML::Node& d : YAML::LoadAll(text)) {
    if (d.IsMap()) out.push_back(d);
  }
  return out;
}

inline std::vector<YAML::Node> OfKind(const std::vector<YAML::Node>& docs, const std::string& kind) {
  std::vector<YAML::Node> out;
  for (const auto& d : docs) {
    if (d["kind"].as<std::string>("") == kind) out.push_back(d);
  }
  return out;
}

inline std::string Str(const YAML::Node& n) { return n && n.IsScalar() ? n.as<std::string>() : ""; }

// The container `name` of a pod spec (a null node if absent).
inline YAML::Node Container(const YAML::Node& pod_spec, const std::string& name) {
  for (const auto& c : pod_spec["containers"]) {
    if (Str(c["name"]) == name) return c;
  }
  return YAML::Node();
}

// The value of "--flag=value" (or "--flag value") among a container's args;
// "" for a bare "--flag"; nullopt when absent.
inline std::optional<std::string> Flag(const YAML::Node& container, const std::string& flag) {
  std::vector<std::string> args;
  for (const auto& a : container["args"]) args.push_back(a.as<std::string>());
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == flag) {
      if (i + 1 < args.size() && !args[i + 1].starts_with("-")) return args[i + 1];
      return std::string();
    }
    if (args[i].starts_with(flag + "=")) return args[i].substr(flag.size() + 1);
  }
  return std::nullopt;
}

// The env var `name` of a container: its literal value, or "fieldRef:<path>".
inline std::optional<std::string> Env(const YAML::Node& container, const std::string& name) {
  for (const auto& e : container["env"]) {
    if (Str(e["name"]) != name) continue;
    if (e["value"]) return Str(e["value"]);
    if (e["valueFrom"] && e["valueFrom"]["fieldRef"]) {
      return "fieldRef:" + Str(e["valueFrom"]["fieldRef"]["fieldPath"]);
    }
    return std::string();
  }
  return std::nullopt;
}

// Where a path inside a container comes from: the volume mounted at the
// longest mountPath prefix, the rest of the path below it, and that mount.
struct MountedPath {
  std::string volume;     // volume name
  std::string relative;   // path below the mount point ("" = the mount point)
  YAML::Node mount;       // the volumeMount
  std::string host_path;  // hostPath of the volume + relative, if a hostPath
};

inline std::optional<MountedPath> Resolve(const YAML::Node& pod_spec, const YAML::Node& container,
                                          const std::string& path) {
  std::optional<MountedPath> best;
  size_t best_len = 0;
  for (const auto& m : container["volumeMounts"]) {
    std::string mp = Str(m["mountPath"]);
    while (mp.size() > 1 && mp.back() == '/') mp.pop_back();
    const bool inside = path == mp || path.starts_with(mp + "/");
    if (!inside || mp.size() < best_len) continue;
    best_len = mp.size();
    best = MountedPath{Str(m["name"]), path == mp ? "" : path.substr(mp.size() + 1), m, ""};
  }
  if (!best) return std::nullopt;
  for (const auto& v : pod_spec["volumes"]) {
    if (Str(v["name"]) == best->volume && v["hostPath"]) {
      best->host_path = Str(v["hostPath"]["path"]) + (best->relative.empty() ? "" : "/" + best->relative);
    }
  }
  return best;
}

// The first executable among `candidates` (empty entries skipped), or "".
inline std::string FirstExecutable(const std::vector<std::string>& candidates) {
  for (const auto& c : candidates) {
    if (!c.empty() && ::access(c.c_str(), X_OK) == 0) return c;
  }
  return "";
}

// kubectl as api_cli_test finds it: KUBECTL_BINARY, $BERTH_KUBECTL, Debian's
// kubernetes-client unpacked by scripts/install-deps, /usr/bin/kubectl.
inline std::string FindKubectl(const std::string& configured) {
  const char* env = std::getenv("BERTH_KUBECTL");
  return FirstExecutable({configured, env != nullptr ? env : "",
                          "/usr/local/lib/berth/kubernetes-client/usr/bin/kubectl", "/usr/bin/kubectl"});
}

}  // namespace berth::testing
