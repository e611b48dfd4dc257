#include "node/pods/admission.h"

#include <set>

#include "client/object.h"
#include "common/strings.h"

namespace berth::node::pods {

using nlohmann::json;

std::vector<std::string> UnsupportedPodFields(const json& pod) {
  std::vector<std::string> out;
  const json& spec = client::Field(pod, "spec");
  auto has = [](const json& o, const char* key) {
    const json& v = client::Field(o, key);
    return !v.is_null() && !(v.is_array() && v.empty()) && !(v.is_object() && v.empty());
  };
  static const std::set<std::string> kVolumes = {"name", "persistentVolumeClaim", "ephemeral", "emptyDir", "hostPath"};
  const json& volumes = client::Field(spec, "volumes");
  for (size_t i = 0; volumes.is_array() && i < volumes.size(); ++i) {
    for (const auto& [key, value] : volumes[i].items()) {
      if (!kVolumes.count(key)) {
        out.push_back(StrCat("spec.volumes[", i, "].", key,
                             " (volume type; supported: persistentVolumeClaim, "
                             "ephemeral, emptyDir, hostPath)"));
      }
    }
  }
  for (const char* field : {"ephemeralContainers", "readinessGates"}) {
    if (has(spec, field)) out.push_back(StrCat("spec.", field));
  }
  for (const char* list : {"initContainers", "containers"}) {
    const json& cs = client::Field(spec, list);
    for (size_t i = 0; cs.is_array() && i < cs.size(); ++i) {
      const std::string f = StrCat("spec.", list, "[", i, "].");
      for (const char* probe : {"livenessProbe", "readinessProbe", "startupProbe"}) {
        if (has(cs[i], probe)) out.push_back(f + probe + " (probes)");
      }
      if (has(cs[i], "lifecycle")) out.push_back(f + "lifecycle (hooks)");
      if (has(cs[i], "envFrom")) out.push_back(f + "envFrom");
      if (std::string_view(list) == "initContainers" && has(cs[i], "restartPolicy")) {
        out.push_back(f + "restartPolicy (sidecar containers)");
      }
      const json& env = client::Field(cs[i], "env");
      for (size_t j = 0; env.is_array() && j < env.size(); ++j) {
        const json& from = client::Field(env[j], "valueFrom");
        if (!from.is_object()) continue;
        for (const auto& [key, value] : from.items()) {
          if (key != "fieldRef") out.push_back(StrCat(f, "env[", j, "].valueFrom.", key, " (only fieldRef)"));
        }
      }
      const json& ports = client::Field(cs[i], "ports");
      for (size_t j = 0; ports.is_array() && j < ports.size(); ++j) {
        const json& hp = client::Field(ports[j], "hostPort");
        if (hp.is_number_integer() && hp.get<int64_t>() != 0) out.push_back(StrCat(f, "ports[", j, "].hostPort"));
      }
    }
  }
  return out;
}

}  // namespace berth::node::pods
