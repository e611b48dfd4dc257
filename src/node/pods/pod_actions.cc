#include "node/pods/pod_actions.h"

#include "absl/strings/match.h"
#include "client/object.h"
#include "common/hash.h"

namespace berth::node::pods {
namespace {

using nlohmann::json;

const json& Containers(const json& pod, const char* field) {
  static const json kEmpty = json::array();
  const json& spec = client::Field(pod, "spec");
  const json& list = client::Field(spec, field);
  return list.is_array() ? list : kEmpty;
}

bool HostNetwork(const json& pod) {
  const json& v = client::Field(client::Field(pod, "spec"), "hostNetwork");
  return v.is_boolean() && v.get<bool>();
}

// kubelet's isInitContainerFailed.
bool InitFailed(const ContainerState& s) {
  if (absl::StrContains(s.reason, "OOMKilled")) return true;
  if (s.exited() && s.exit_code != 0) return true;
  return s.state == cri::v1::CONTAINER_UNKNOWN;
}

// kubelet's findNextInitContainerToRun: (status of the failed init
// container or null, index of the next one to run or -1, done).
struct InitProgress {
  const ContainerState* failed = nullptr;
  int next = -1;
  bool done = false;
};

InitProgress NextInitContainer(const json& pod, const RuntimePod& rt) {
  const json& inits = Containers(pod, "initContainers");
  if (inits.empty()) return {.done = true};
  // A running regular container means initialization is over.
  for (const auto& c : Containers(pod, "containers")) {
    const ContainerState* s = rt.Find(c.value("name", ""));
    if (s != nullptr && s->running()) return {.done = true};
  }
  for (int i = static_cast<int>(inits.size()) - 1; i >= 0; --i) {
    const ContainerState* s = rt.Find(inits[i].value("name", ""));
    if (s != nullptr && InitFailed(*s)) return {.failed = s, .next = i, .done = false};
  }
  for (int i = static_cast<int>(inits.size()) - 1; i >= 0; --i) {
    const ContainerState* s = rt.Find(inits[i].value("name", ""));
    if (s == nullptr) continue;
    if (s->running()) return {};
    if (s->exited()) {
      if (i == static_cast<int>(inits.size()) - 1) return {.done = true};
      return {.next = i + 1};
    }
  }
  return {.next = 0};
}

bool ContainerSucceeded(const json& c, const RuntimePod& rt) {
  const ContainerState* s = rt.Find(c.value("name", ""));
  return s != nullptr && s->exited() && s->exit_code == 0;
}

}  // namespace

std::string RestartPolicy(const json& pod) {
  const std::string p = client::Str(pod, {"spec", "restartPolicy"});
  return p.empty() ? "Always" : p;
}

std::string ContainerHash(const json& container) { return Sha256Hex(container.dump()).substr(0, 16); }

bool ShouldContainerBeRestarted(const json& container, const json& pod, const RuntimePod& rt) {
  if (client::Deleting(pod)) return false;
  const ContainerState* s = rt.Find(container.value("name", ""));
  if (s == nullptr) return true;
  if (s->running()) return false;
  if (s->state == cri::v1::CONTAINER_UNKNOWN || s->state == cri::v1::CONTAINER_CREATED) return true;
  const std::string policy = RestartPolicy(pod);
  if (policy == "Never") return false;
  if (policy == "OnFailure" && s->exit_code == 0) return false;
  return true;
}

bool SandboxChanged(const json& pod, const RuntimePod& rt, uint32_t* attempt, std::string* sandbox_id) {
  *attempt = 0;
  sandbox_id->clear();
  if (rt.sandboxes.empty()) return true;
  int ready = 0;
  for (const auto& s : rt.sandboxes) ready += s.ready ? 1 : 0;
  const SandboxState& newest = rt.sandboxes.front();
  *sandbox_id = newest.id;
  *attempt = newest.attempt + 1;
  if (ready > 1 || !newest.ready) return true;
  if (!HostNetwork(pod) && newest.ips.empty()) return true;
  *attempt = newest.attempt;
  return false;
}

PodActions ComputePodActions(const json& pod, const RuntimePod& rt) {
  PodActions a;
  a.create_sandbox = SandboxChanged(pod, rt, &a.attempt, &a.sandbox_id);
  a.kill_pod = a.create_sandbox;
  const json& containers = Containers(pod, "containers");
  const json& inits = Containers(pod, "initContainers");
  const bool restart_on_failure = RestartPolicy(pod) != "Never";

  if (a.create_sandbox) {
    // A pod that should not restart and already ran something gets no new
    // sandbox: it is over.
    if (!restart_on_failure && !rt.sandboxes.empty() && !rt.containers.empty()) {
      a.create_sandbox = false;
      return a;
    }
    std::vector<int> to_start;
    for (int i = 0; i < static_cast<int>(containers.size()); ++i) {
      if (RestartPolicy(pod) == "OnFailure" && ContainerSucceeded(containers[i], rt)) continue;
      to_start.push_back(i);
    }
    if (to_start.empty() && NextInitContainer(pod, rt).done) {
      a.create_sandbox = false;
      return a;
    }
    if (!inits.empty()) {
      a.next_init = 0;
      return a;
    }
    a.start = std::move(to_start);
    return a;
  }

  const InitProgress init = NextInitContainer(pod, rt);
  if (!init.done) {
    if (init.next >= 0) {
      if (init.failed != nullptr && !restart_on_failure) {
        a.kill_pod = true;
      } else {
        if (init.failed != nullptr && init.failed->state == cri::v1::CONTAINER_UNKNOWN) {
          a.kill.push_back({init.failed->id, "init container is in an unknown state, killing it before restart"});
        }
        a.next_init = init.next;
      }
    }
    return a;
  }

  int keep = 0;
  for (int i = 0; i < static_cast<int>(containers.size()); ++i) {
    const json& c = containers[i];
    const ContainerState* s = rt.Find(c.value("name", ""));
    if (s == nullptr || !s->running()) {
      if (ShouldContainerBeRestarted(c, pod, rt)) {
        a.start.push_back(i);
        if (s != nullptr && s->state == cri::v1::CONTAINER_UNKNOWN) {
          a.kill.push_back({s->id, "container is in an unknown state, killing it before restart"});
        }
      }
      continue;
    }
    if (!s->hash.empty() && s->hash != ContainerHash(c)) {
      // The spec changed (an image update): restart whatever the policy.
      a.kill.push_back({s->id, "Container " + c.value("name", "") + " definition changed, will be restarted"});
      a.start.push_back(i);
      continue;
    }
    ++keep;
  }
  if (keep == 0 && a.start.empty()) a.kill_pod = true;
  return a;
}

}  // namespace berth::node::pods
