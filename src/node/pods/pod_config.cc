#include "node/pods/pod_config.h"

#include <sys/stat.h>

#include <filesystem>
#include <vector>

#include "absl/strings/match.h"
#include "api/quantity.h"
#include "client/object.h"
#include "common/fs.h"
#include "common/status.h"
#include "common/strings.h"
#include "node/pods/pod_actions.h"
#include "node/pods/pod_status.h"
#include "node/pods/runtime_pod.h"

namespace berth::node::pods {
namespace {

using nlohmann::json;
namespace v1 = cri::v1;

const json& Obj(const json& o, const char* key) { return client::Field(o, key); }

bool Bool(const json& o, const char* key) {
  const json& v = client::Field(o, key);
  return v.is_boolean() && v.get<bool>();
}

std::optional<int64_t> Int(const json& o, const char* key) {
  const json& v = client::Field(o, key);
  if (v.is_number_integer()) return v.get<int64_t>();
  return std::nullopt;
}

v1::NamespaceOption Namespaces(const json& spec) {
  v1::NamespaceOption ns;
  ns.set_network(Bool(spec, "hostNetwork") ? v1::NODE : v1::POD);
  ns.set_pid(Bool(spec, "hostPID") ? v1::NODE : (Bool(spec, "shareProcessNamespace") ? v1::POD : v1::CONTAINER));
  ns.set_ipc(Bool(spec, "hostIPC") ? v1::NODE : v1::POD);
  return ns;
}

std::vector<int64_t> SupplementalGroups(const json& pod_sc) {
  std::vector<int64_t> groups;
  if (const json& g = Obj(pod_sc, "supplementalGroups"); g.is_array()) {
    for (const auto& x : g) {
      if (x.is_number_integer()) groups.push_back(x.get<int64_t>());
    }
  }
  if (auto fs_group = Int(pod_sc, "fsGroup")) groups.push_back(*fs_group);
  return groups;
}

// A hostname from the pod: spec.hostname, else the name cut to 63
// characters without a trailing '-' or '.'.
std::string Hostname(const json& pod) {
  std::string h = client::Str(pod, {"spec", "hostname"});
  if (h.empty()) h = client::Name(pod);
  if (h.size() > 63) h.resize(63);
  while (!h.empty() && (h.back() == '-' || h.back() == '.')) h.pop_back();
  return h;
}

absl::StatusOr<int64_t> Milli(const json& list, const char* name) {
  const json& v = client::Field(list, name);
  if (v.is_null()) return 0;
  BERTH_ASSIGN_OR_RETURN(api::Quantity q, api::Quantity::Parse(v.is_string() ? v.get<std::string>() : v.dump()));
  return q.MilliValue();
}

absl::StatusOr<int64_t> Bytes(const json& list, const char* name) {
  const json& v = client::Field(list, name);
  if (v.is_null()) return 0;
  BERTH_ASSIGN_OR_RETURN(api::Quantity q, api::Quantity::Parse(v.is_string() ? v.get<std::string>() : v.dump()));
  return q.Value();
}

// A downward API value (env valueFrom.fieldRef).
absl::StatusOr<std::string> FieldValue(const ContainerInputs& in, const std::string& path) {
  const json& pod = *in.pod;
  auto keyed = [&](const char* prefix, const char* field) -> std::optional<std::string> {
    if (!absl::StartsWith(path, prefix) || !absl::EndsWith(path, "']")) return std::nullopt;
    const std::string key = path.substr(strlen(prefix), path.size() - strlen(prefix) - 2);
    const json& m = client::Field(client::Field(pod, "metadata"), field);
    return m.is_object() && m.contains(key) && m[key].is_string() ? m[key].get<std::string>() : "";
  };
  if (path == "metadata.name") return client::Name(pod);
  if (path == "metadata.namespace") return client::Ns(pod);
  if (path == "metadata.uid") return client::Uid(pod);
  if (path == "spec.nodeName") return in.node;
  if (path == "spec.serviceAccountName") return client::Str(pod, {"spec", "serviceAccountName"});
  if (path == "status.podIP" || path == "status.podIPs") return in.pod_ip;
  if (path == "status.hostIP" || path == "status.hostIPs") return in.host_ip;
  if (auto v = keyed("metadata.labels['", "labels")) return *v;
  if (auto v = keyed("metadata.annotations['", "annotations")) return *v;
  return absl::InvalidArgumentError(StrCat("unsupported fieldPath \"", path, "\""));
}

absl::Status AddMounts(const ContainerInputs& in, const json& c, v1::ContainerConfig& cfg) {
  const std::string cname = c.value("name", "");
  const json& mounts = Obj(c, "volumeMounts");
  for (const auto& m : mounts.is_array() ? mounts : json::array()) {
    const std::string vname = m.value("name", "");
    auto v = in.volumes.find(vname);
    if (v == in.volumes.end()) {
      return absl::NotFoundError(StrCat("cannot find volume \"", vname, "\" to mount into container \"", cname, "\""));
    }
    if (v->second.block) {
      return absl::InvalidArgumentError(
          StrCat("volume \"", vname, "\" is a block volume: use volumeDevices, not volumeMounts, in container \"",
                 cname, "\""));
    }
    std::string host = v->second.path;
    if (const std::string sub = m.value("subPath", ""); !sub.empty()) {
      // The subpath must stay inside the volume, symlinks resolved.
      if (sub.front() == '/' || absl::StrContains("/" + sub + "/", "/../")) {
        return absl::InvalidArgumentError(StrCat("subPath \"", sub, "\" must be a relative path without \"..\""));
      }
      host = StrCat(v->second.path, "/", sub);
      std::error_code ec;
      if (!std::filesystem::exists(host, ec)) {
        if (v->second.read_only) {
          return absl::NotFoundError(
              StrCat("subPath \"", sub, "\" does not exist in read-only volume \"", vname, "\""));
        }
        BERTH_RETURN_IF_ERROR(MakeDirs(host, 0750));
      }
      const auto root = std::filesystem::canonical(v->second.path, ec);
      const auto target = std::filesystem::canonical(host, ec);
      if (ec || !absl::StartsWith(target.string() + "/", root.string() + "/")) {
        return absl::InvalidArgumentError(
            StrCat("subPath \"", sub, "\" of volume \"", vname, "\" leads outside the volume"));
      }
      host = target.string();
    }
    v1::Mount* mount = cfg.add_mounts();
    mount->set_container_path(m.value("mountPath", ""));
    mount->set_host_path(host);
    mount->set_readonly(m.value("readOnly", false) || v->second.read_only);
    const std::string prop = m.value("mountPropagation", "");
    mount->set_propagation(prop == "HostToContainer" ? v1::PROPAGATION_HOST_TO_CONTAINER
                           : prop == "Bidirectional" ? v1::PROPAGATION_BIDIRECTIONAL
                                                     : v1::PROPAGATION_PRIVATE);
  }
  const json& devices = Obj(c, "volumeDevices");
  for (const auto& d : devices.is_array() ? devices : json::array()) {
    const std::string vname = d.value("name", "");
    auto v = in.volumes.find(vname);
    if (v == in.volumes.end() || !v->second.block) {
      return absl::NotFoundError(
          StrCat("cannot find block volume \"", vname, "\" for device in container \"", cname, "\""));
    }
    v1::Device* dev = cfg.add_devices();
    dev->set_container_path(d.value("devicePath", ""));
    dev->set_host_path(v->second.path);
    dev->set_permissions(v->second.read_only ? "mr" : "mrw");
  }
  return absl::OkStatus();
}

absl::Status AddResources(const ContainerInputs& in, const json& c, v1::LinuxContainerResources& r) {
  const json& res = Obj(c, "resources");
  const json& limits = Obj(res, "limits");
  json requests = Obj(res, "requests").is_object() ? Obj(res, "requests") : json::object();
  // A limit without a request requests the limit (API defaulting).
  for (const char* name : {"cpu", "memory"}) {
    if (!requests.contains(name) && limits.is_object() && limits.contains(name)) requests[name] = limits[name];
  }
  BERTH_ASSIGN_OR_RETURN(int64_t cpu_limit, Milli(limits, "cpu"));
  BERTH_ASSIGN_OR_RETURN(int64_t cpu_request, Milli(requests, "cpu"));
  BERTH_ASSIGN_OR_RETURN(int64_t memory_limit, Bytes(limits, "memory"));
  BERTH_ASSIGN_OR_RETURN(int64_t memory_request, Bytes(requests, "memory"));
  constexpr int64_t kPeriod = 100000;  // µs
  if (cpu_limit > 0) {
    r.set_cpu_period(kPeriod);
    r.set_cpu_quota(std::max<int64_t>(1000, cpu_limit * kPeriod / 1000));
  }
  r.set_cpu_shares(std::max<int64_t>(2, cpu_request * 1024 / 1000));
  if (memory_limit > 0) r.set_memory_limit_in_bytes(memory_limit);
  const std::string qos = QosClass(*in.pod);
  int64_t oom = 1000;
  if (qos == "Guaranteed") {
    oom = -997;
  } else if (qos == "Burstable") {
    oom = in.node_memory_bytes > 0 ? 1000 - (1000 * memory_request) / in.node_memory_bytes : 999;
    oom = std::clamp<int64_t>(oom, 3, 999);
  }
  r.set_oom_score_adj(oom);
  return absl::OkStatus();
}

absl::Status AddSecurity(const ContainerInputs& in, const json& c, v1::LinuxContainerSecurityContext& s) {
  const json& spec = Obj(*in.pod, "spec");
  const json& pod_sc = Obj(spec, "securityContext");
  const json& sc = Obj(c, "securityContext");
  auto pick = [&](const char* key) { return Int(sc, key) ? Int(sc, key) : Int(pod_sc, key); };
  const auto uid = pick("runAsUser");
  const auto gid = pick("runAsGroup");
  if (uid) s.mutable_run_as_user()->set_value(*uid);
  if (gid) s.mutable_run_as_group()->set_value(*gid);
  const json& non_root = client::Field(sc, "runAsNonRoot").is_boolean() ? client::Field(sc, "runAsNonRoot")
                                                                        : client::Field(pod_sc, "runAsNonRoot");
  if (non_root.is_boolean() && non_root.get<bool>()) {
    const std::string who = StrCat("(pod: \"", client::Name(*in.pod), "_", client::Ns(*in.pod), "(",
                                   client::Uid(*in.pod), ")\", container: ", c.value("name", ""), ")");
    if (uid && *uid == 0) return absl::InvalidArgumentError("container's runAsUser breaks non-root policy " + who);
    if (!uid) {
      if (in.image_uid == 0 || (in.image_uid < 0 && (in.image_user.empty() || in.image_user == "root"))) {
        return absl::InvalidArgumentError("container has runAsNonRoot and image will run as root " + who);
      }
      if (in.image_uid < 0) {
        return absl::InvalidArgumentError(StrCat("container has runAsNonRoot and image has non-numeric user (",
                                                 in.image_user, "), cannot verify user is non-root ", who));
      }
    }
  }
  s.set_readonly_rootfs(Bool(sc, "readOnlyRootFilesystem"));
  s.set_privileged(Bool(sc, "privileged"));
  if (const json& ape = client::Field(sc, "allowPrivilegeEscalation"); ape.is_boolean())
    s.set_no_new_privs(!ape.get<bool>());
  const json& caps = Obj(sc, "capabilities");
  for (const char* which : {"add", "drop"}) {
    const json& list = Obj(caps, which);
    for (const auto& cap : list.is_array() ? list : json::array()) {
      if (!cap.is_string()) continue;
      if (std::string_view(which) == "add") {
        s.mutable_capabilities()->add_add_capabilities(cap.get<std::string>());
      } else {
        s.mutable_capabilities()->add_drop_capabilities(cap.get<std::string>());
      }
    }
  }
  for (int64_t g : SupplementalGroups(pod_sc)) s.add_supplemental_groups(g);
  *s.mutable_namespace_options() = Namespaces(spec);
  return absl::OkStatus();
}

}  // namespace

std::string PodLogDirectory(const std::string& log_root, const json& pod) {
  return StrCat(log_root, "/", client::Ns(pod), "_", client::Name(pod), "_", client::Uid(pod));
}

v1::PodSandboxConfig SandboxConfig(const json& pod, uint32_t attempt, const std::string& node,
                                   const std::string& log_root) {
  v1::PodSandboxConfig c;
  c.mutable_metadata()->set_name(client::Name(pod));
  c.mutable_metadata()->set_namespace_(client::Ns(pod));
  c.mutable_metadata()->set_uid(client::Uid(pod));
  c.mutable_metadata()->set_attempt(attempt);
  c.set_hostname(Hostname(pod));
  c.set_log_directory(PodLogDirectory(log_root, pod));
  const json& md = Obj(pod, "metadata");
  for (const char* field : {"labels", "annotations"}) {
    const json& m = Obj(md, field);
    if (!m.is_object()) continue;
    for (auto it = m.begin(); it != m.end(); ++it) {
      if (!it->is_string()) continue;
      auto& target = std::string_view(field) == "labels" ? *c.mutable_labels() : *c.mutable_annotations();
      target[it.key()] = it->get<std::string>();
    }
  }
  auto& labels = *c.mutable_labels();
  labels[kPodNameLabel] = client::Name(pod);
  labels[kPodNamespaceLabel] = client::Ns(pod);
  labels[kPodUidLabel] = client::Uid(pod);
  labels[kNodeLabel] = node;
  const json& spec = Obj(pod, "spec");
  const json& pod_sc = Obj(spec, "securityContext");
  v1::LinuxSandboxSecurityContext* sc = c.mutable_linux()->mutable_security_context();
  *sc->mutable_namespace_options() = Namespaces(spec);
  if (auto uid = Int(pod_sc, "runAsUser")) sc->mutable_run_as_user()->set_value(*uid);
  if (auto gid = Int(pod_sc, "runAsGroup")) sc->mutable_run_as_group()->set_value(*gid);
  for (int64_t g : SupplementalGroups(pod_sc)) sc->add_supplemental_groups(g);
  for (const char* field : {"initContainers", "containers"}) {
    const json& list = Obj(spec, field);
    for (const auto& ctr : list.is_array() ? list : json::array()) {
      if (Bool(Obj(ctr, "securityContext"), "privileged")) sc->set_privileged(true);
    }
  }
  const json& sysctls = Obj(pod_sc, "sysctls");
  for (const auto& s : sysctls.is_array() ? sysctls : json::array()) {
    (*c.mutable_linux()->mutable_sysctls())[s.value("name", "")] = s.value("value", "");
  }
  return c;
}

std::string ExpandVars(const std::string& in, const std::map<std::string, std::string>& vars) {
  std::string out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '$' || i + 1 >= in.size()) {
      out.push_back(in[i]);
      continue;
    }
    if (in[i + 1] == '$') {
      out.push_back('$');
      ++i;
      continue;
    }
    if (in[i + 1] == '(') {
      const size_t close = in.find(')', i + 2);
      if (close != std::string::npos) {
        const std::string name = in.substr(i + 2, close - i - 2);
        auto v = vars.find(name);
        out += v != vars.end() ? v->second : in.substr(i, close - i + 1);
        i = close;
        continue;
      }
    }
    out.push_back('$');
  }
  return out;
}

absl::StatusOr<v1::ContainerConfig> ContainerConfig(const ContainerInputs& in) {
  const json& c = *in.container;
  const std::string name = c.value("name", "");
  v1::ContainerConfig cfg;
  cfg.mutable_metadata()->set_name(name);
  cfg.mutable_metadata()->set_attempt(static_cast<uint32_t>(in.restart_count));
  cfg.mutable_image()->set_image(in.image_ref.empty() ? c.value("image", "") : in.image_ref);
  cfg.mutable_image()->set_user_specified_image(c.value("image", ""));

  std::map<std::string, std::string> vars;
  const json& env = Obj(c, "env");
  for (const auto& e : env.is_array() ? env : json::array()) {
    const std::string key = e.value("name", "");
    std::string value;
    if (const json& from = Obj(e, "valueFrom"); from.is_object()) {
      if (const json& ref = Obj(from, "fieldRef"); ref.is_object()) {
        BERTH_ASSIGN_OR_RETURN(value, FieldValue(in, ref.value("fieldPath", "")));
      } else {
        return absl::InvalidArgumentError(
            StrCat("env ", key, ": only valueFrom.fieldRef is supported by berth's node agent"));
      }
    } else {
      value = ExpandVars(e.value("value", ""), vars);
    }
    vars[key] = value;
    v1::KeyValue* kv = cfg.add_envs();
    kv->set_key(key);
    kv->set_value(value);
  }
  for (const char* field : {"command", "args"}) {
    const json& list = Obj(c, field);
    for (const auto& a : list.is_array() ? list : json::array()) {
      if (!a.is_string()) continue;
      (std::string_view(field) == "command" ? cfg.add_command() : cfg.add_args())
          ->assign(ExpandVars(a.get<std::string>(), vars));
    }
  }
  cfg.set_working_dir(c.value("workingDir", ""));
  BERTH_RETURN_IF_ERROR(AddMounts(in, c, cfg));

  auto& labels = *cfg.mutable_labels();
  labels[kContainerNameLabel] = name;
  labels[kPodNameLabel] = client::Name(*in.pod);
  labels[kPodNamespaceLabel] = client::Ns(*in.pod);
  labels[kPodUidLabel] = client::Uid(*in.pod);
  labels[kNodeLabel] = in.node;
  auto& annotations = *cfg.mutable_annotations();
  annotations[kContainerHashAnnotation] = ContainerHash(c);
  annotations[kRestartCountAnnotation] = std::to_string(in.restart_count);
  const json& grace = client::Field(Obj(*in.pod, "spec"), "terminationGracePeriodSeconds");
  annotations[kGracePeriodAnnotation] = grace.is_number_integer() ? std::to_string(grace.get<int64_t>()) : "30";
  annotations[kTerminationMessagePathAnnotation] = c.value("terminationMessagePath", "/dev/termination-log");
  annotations[kTerminationMessagePolicyAnnotation] = c.value("terminationMessagePolicy", "File");
  cfg.set_log_path(StrCat(name, "/", in.restart_count, ".log"));
  cfg.set_stdin(c.value("stdin", false));
  cfg.set_stdin_once(c.value("stdinOnce", false));
  cfg.set_tty(c.value("tty", false));
  BERTH_RETURN_IF_ERROR(AddResources(in, c, *cfg.mutable_linux()->mutable_resources()));
  BERTH_RETURN_IF_ERROR(AddSecurity(in, c, *cfg.mutable_linux()->mutable_security_context()));
  return cfg;
}

}  // namespace berth::node::pods
