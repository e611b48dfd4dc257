#include "node/pods/pod_status.h"

#include <algorithm>
#include <set>
#include <vector>

#include "absl/strings/str_join.h"
#include "api/quantity.h"
#include "client/object.h"
#include "common/status.h"
#include "common/strings.h"
#include "node/pods/pod_actions.h"

namespace berth::node::pods {
namespace {

using nlohmann::json;

const json* StatusByName(const json& statuses, const std::string& name) {
  if (!statuses.is_array()) return nullptr;
  for (const auto& s : statuses) {
    if (s.value("name", "") == name) return &s;
  }
  return nullptr;
}

bool Has(const json& o, const char* a, const char* b) {
  return o.is_object() && o.contains(a) && o[a].is_object() && o[a].contains(b) && !o[a][b].is_null();
}

json ConvertContainer(const ContainerState& cs, const json* old, const std::string& runtime_name) {
  const std::string cid = runtime_name + "://" + cs.id;
  json s = {{"name", cs.name},    {"restartCount", cs.restart_count},
            {"image", cs.image},  {"imageID", cs.image_ref},
            {"containerID", cid}, {"ready", false},
            {"started", false}};
  switch (cs.state) {
    case cri::v1::CONTAINER_RUNNING:
      s["state"] = {{"running", {{"startedAt", ApiTime(cs.started_at)}}}};
      s["started"] = true;
      s["ready"] = true;  // no readiness probes: ready while running
      break;
    case cri::v1::CONTAINER_CREATED:
      s["state"] = {{"waiting", json::object()}};
      break;
    case cri::v1::CONTAINER_EXITED: {
      json t = {{"exitCode", cs.exit_code},
                {"startedAt", cs.started_at == absl::InfinitePast() ? json(nullptr) : json(ApiTime(cs.started_at))},
                {"finishedAt", cs.finished_at == absl::InfinitePast() ? json(nullptr) : json(ApiTime(cs.finished_at))},
                {"containerID", cid}};
      if (!cs.reason.empty()) t["reason"] = cs.reason;
      if (!cs.message.empty()) t["message"] = cs.message;
      s["state"] = {{"terminated", t}};
      break;
    }
    default:
      if (old != nullptr && Has(*old, "state", "running")) {
        // It ran and the runtime lost it: terminated with an unknown outcome.
        s["state"] = {{"terminated",
                       {{"exitCode", 137},
                        {"reason", "ContainerStatusUnknown"},
                        {"message", "The container could not be located when the pod was terminated"}}}};
        s["restartCount"] = old->value("restartCount", 0) + 1;
      } else {
        s["state"] = {{"waiting", json::object()}};
      }
  }
  return s;
}

// kubelet's convertToAPIContainerStatuses.
json ContainerStatuses(const StatusInputs& in, const json& specs, const json& old_statuses, bool has_init,
                       bool is_init) {
  const json& pod = *in.pod;
  const RuntimePod& rt = *in.runtime;
  std::map<std::string, json> statuses;
  const char* default_reason = has_init ? "PodInitializing" : "ContainerCreating";
  for (const auto& c : specs) {
    const std::string name = c.value("name", "");
    json s = {{"name", name},
              {"image", c.value("image", "")},
              {"imageID", ""},
              {"ready", false},
              {"started", false},
              {"restartCount", 0},
              {"state", {{"waiting", {{"reason", default_reason}}}}}};
    if (const json* old = StatusByName(old_statuses, name)) {
      if (Has(*old, "state", "terminated")) {
        s = *old;
      } else {
        s["restartCount"] = old->value("restartCount", 0);
        if (old->contains("lastState")) s["lastState"] = (*old)["lastState"];
      }
    }
    statuses[name] = std::move(s);
  }
  std::map<std::string, int> seen;
  for (const auto& cs : rt.containers) {  // newest first
    auto it = statuses.find(cs.name);
    if (it == statuses.end() || seen[cs.name] >= 2) continue;
    const json* old = StatusByName(old_statuses, cs.name);
    json converted = ConvertContainer(cs, old, in.runtime_name);
    if (seen[cs.name] == 0) {
      // An init container is ready once it succeeded, not while it runs.
      if (is_init) converted["ready"] = cs.exited() && cs.exit_code == 0;
      it->second = std::move(converted);
    } else {
      it->second["lastState"] = converted["state"];
    }
    ++seen[cs.name];
  }
  for (const auto& c : specs) {
    const std::string name = c.value("name", "");
    if (is_init) {
      const ContainerState* s = rt.Find(name);
      if (s != nullptr && s->exited() && s->exit_code == 0) continue;
    }
    if (!ShouldContainerBeRestarted(c, pod, rt)) continue;
    auto w = in.waiting.find(name);
    if (w == in.waiting.end()) continue;
    json& s = statuses[name];
    if (Has(s, "state", "terminated")) s["lastState"] = s["state"];
    json waiting = {{"reason", w->second.reason}};
    if (!w->second.message.empty()) waiting["message"] = w->second.message;
    s["state"] = {{"waiting", waiting}};
    s["ready"] = false;
    s["started"] = false;
  }
  for (auto& [name, s] : statuses) {
    if (!s.contains("lastState")) s["lastState"] = json::object();
  }
  json out = json::array();
  if (is_init) {
    for (const auto& c : specs) out.push_back(statuses[c.value("name", "")]);
  } else {
    for (auto& [name, s] : statuses) out.push_back(std::move(s));  // by name, as kubelet sorts them
  }
  return out;
}

std::string Names(const std::vector<std::string>& names) { return "[" + absl::StrJoin(names, " ") + "]"; }

json Condition(const std::string& type, bool status, const std::string& reason = "", const std::string& message = "") {
  json c = {{"type", type}, {"status", status ? "True" : "False"}, {"lastProbeTime", nullptr}};
  if (!reason.empty()) c["reason"] = reason;
  if (!message.empty()) c["message"] = message;
  return c;
}

bool Ready(const json* s) { return s != nullptr && s->value("ready", false); }

json ContainersReadyCondition(const json& pod, const json& statuses, const std::string& phase) {
  std::vector<std::string> unknown, unready;
  for (const auto& c : SpecList(pod, "containers")) {
    const json* s = StatusByName(statuses, c.value("name", ""));
    if (s == nullptr) {
      unknown.push_back(c.value("name", ""));
    } else if (!Ready(s)) {
      unready.push_back(c.value("name", ""));
    }
  }
  if (phase == "Succeeded" && unknown.empty()) return Condition("ContainersReady", false, "PodCompleted");
  if (phase == "Failed") return Condition("ContainersReady", false, "PodFailed");
  std::vector<std::string> messages;
  if (!unknown.empty()) messages.push_back("containers with unknown status: " + Names(unknown));
  if (!unready.empty()) messages.push_back("containers with unready status: " + Names(unready));
  if (!messages.empty())
    return Condition("ContainersReady", false, "ContainersNotReady", absl::StrJoin(messages, ", "));
  return Condition("ContainersReady", true);
}

bool AnyRegularStarted(const json& pod, const json& statuses) {
  for (const auto& c : SpecList(pod, "containers")) {
    const json* s = StatusByName(statuses, c.value("name", ""));
    if (s != nullptr &&
        (Has(*s, "state", "running") || Has(*s, "state", "terminated") || Has(*s, "lastState", "terminated"))) {
      return true;
    }
  }
  return false;
}

json InitializedCondition(const json& pod, const json& init_statuses, const json& statuses, const std::string& phase) {
  std::vector<std::string> unknown, incomplete;
  for (const auto& c : SpecList(pod, "initContainers")) {
    const json* s = StatusByName(init_statuses, c.value("name", ""));
    if (s == nullptr) {
      unknown.push_back(c.value("name", ""));
    } else if (!Ready(s)) {
      incomplete.push_back(c.value("name", ""));
    }
  }
  if (phase == "Succeeded" && unknown.empty()) return Condition("Initialized", true, "PodCompleted");
  if (AnyRegularStarted(pod, statuses)) return Condition("Initialized", true);
  std::vector<std::string> messages;
  if (!unknown.empty()) messages.push_back("containers with unknown status: " + Names(unknown));
  if (!incomplete.empty()) messages.push_back("containers with incomplete status: " + Names(incomplete));
  if (!messages.empty())
    return Condition("Initialized", false, "ContainersNotInitialized", absl::StrJoin(messages, ", "));
  return Condition("Initialized", true);
}

// Requests (or limits, when no request) of cpu and memory of one container.
bool HasResource(const json& resources, const char* list, const char* name) {
  const json& l = client::Field(resources, list);
  return l.is_object() && l.contains(name);
}

}  // namespace

const json& SpecList(const json& pod, const char* field) {
  static const json kEmpty = json::array();
  const json& list = client::Field(client::Field(pod, "spec"), field);
  return list.is_array() ? list : kEmpty;
}

std::string ApiTime(absl::Time t) { return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", t, absl::UTCTimeZone()); }

std::string PodPhase(const json& pod, const json& statuses, const json& init_statuses, bool terminal) {
  int pending_init = 0, failed_init = 0;
  for (const auto& c : SpecList(pod, "initContainers")) {
    const json* s = StatusByName(init_statuses, c.value("name", ""));
    if (s == nullptr) {
      ++pending_init;
    } else if (Has(*s, "state", "running")) {
      ++pending_init;
    } else if (Has(*s, "state", "terminated")) {
      if ((*s)["state"]["terminated"].value("exitCode", 0) != 0) ++failed_init;
    } else if (Has(*s, "state", "waiting")) {
      if (Has(*s, "lastState", "terminated")) {
        if ((*s)["lastState"]["terminated"].value("exitCode", 0) != 0) ++failed_init;
      } else {
        ++pending_init;
      }
    } else {
      ++pending_init;
    }
  }
  int unknown = 0, running = 0, waiting = 0, stopped = 0, succeeded = 0;
  for (const auto& c : SpecList(pod, "containers")) {
    const json* s = StatusByName(statuses, c.value("name", ""));
    if (s == nullptr) {
      ++unknown;
    } else if (Has(*s, "state", "running")) {
      ++running;
    } else if (Has(*s, "state", "terminated")) {
      ++stopped;
      if ((*s)["state"]["terminated"].value("exitCode", 0) == 0) ++succeeded;
    } else if (Has(*s, "state", "waiting")) {
      if (Has(*s, "lastState", "terminated")) {
        ++stopped;
      } else {
        ++waiting;
      }
    } else {
      ++unknown;
    }
  }
  const std::string policy = RestartPolicy(pod);
  if (failed_init > 0 && policy == "Never") return "Failed";
  if ((pending_init > 0 && !AnyRegularStarted(pod, statuses)) || waiting > 0) return "Pending";
  if (running > 0 && unknown == 0) return "Running";
  if (running == 0 && stopped > 0 && unknown == 0) {
    if (terminal) return stopped == succeeded ? "Succeeded" : "Failed";
    if (policy == "Always") return "Running";
    if (stopped == succeeded) return "Succeeded";
    if (policy == "Never") return "Failed";
    return "Running";
  }
  return "Pending";
}

std::string QosClass(const json& pod) {
  bool any = false, guaranteed = true;
  std::vector<const json*> all;
  for (const char* field : {"initContainers", "containers"}) {
    for (const auto& c : SpecList(pod, field)) all.push_back(&c);
  }
  for (const json* c : all) {
    const json& r = client::Field(*c, "resources");
    for (const char* res : {"cpu", "memory"}) {
      const bool req = HasResource(r, "requests", res), lim = HasResource(r, "limits", res);
      any = any || req || lim;
      if (!lim) {
        guaranteed = false;
        continue;
      }
      if (req) {
        auto a = api::Quantity::Parse(r["requests"][res].get<std::string>());
        auto b = api::Quantity::Parse(r["limits"][res].get<std::string>());
        if (!a.ok() || !b.ok() || !(*a == *b)) guaranteed = false;
      }
    }
  }
  if (!any) return "BestEffort";
  return guaranteed ? "Guaranteed" : "Burstable";
}

json GeneratePodStatus(const StatusInputs& in) {
  const json& pod = *in.pod;
  const RuntimePod& rt = *in.runtime;
  const json old = pod.value("status", json::object());
  const std::string now = ApiTime(in.now);
  json s = old.is_object() ? old : json::object();

  const bool has_init = !SpecList(pod, "initContainers").empty();
  s["containerStatuses"] =
      ContainerStatuses(in, SpecList(pod, "containers"), client::Field(old, "containerStatuses"), has_init, false);
  if (has_init) {
    s["initContainerStatuses"] =
        ContainerStatuses(in, SpecList(pod, "initContainers"), client::Field(old, "initContainerStatuses"), true, true);
  }
  std::string phase = PodPhase(pod, s["containerStatuses"], client::Field(s, "initContainerStatuses"), in.terminal);
  const std::string old_phase = old.value("phase", "");
  if (old_phase == "Succeeded" || old_phase == "Failed") phase = old_phase;  // never out of a terminal phase
  s["phase"] = phase;

  // Conditions: kubelet's own, recomputed; everyone else's kept.
  static const std::set<std::string> kKubelet = {"PodReadyToStartContainers", "Initialized", "ContainersReady",
                                                 "Ready"};
  const json old_conditions = old.value("conditions", json::array());
  json conditions = json::array();
  bool scheduled = false;
  for (const auto& c : old_conditions) {
    if (kKubelet.count(c.value("type", ""))) continue;
    scheduled = scheduled || c.value("type", "") == "PodScheduled";
    conditions.push_back(c);
  }
  uint32_t attempt = 0;
  std::string sandbox;
  const bool sandbox_ok = !SandboxChanged(pod, rt, &attempt, &sandbox);
  const json ready = ContainersReadyCondition(pod, s["containerStatuses"], phase);
  json pod_ready = ready;
  pod_ready["type"] = "Ready";
  for (json c : {Condition("PodReadyToStartContainers", sandbox_ok),
                 InitializedCondition(pod, client::Field(s, "initContainerStatuses"), s["containerStatuses"], phase),
                 ready, pod_ready}) {
    c["lastTransitionTime"] = now;
    for (const auto& o : old_conditions) {
      if (o.value("type", "") == c["type"] && o.value("status", "") == c["status"] &&
          o.contains("lastTransitionTime")) {
        c["lastTransitionTime"] = o["lastTransitionTime"];
      }
    }
    conditions.push_back(std::move(c));
  }
  if (!scheduled) {
    json c = Condition("PodScheduled", true);
    c["lastTransitionTime"] = now;
    conditions.push_back(std::move(c));
  }
  s["conditions"] = std::move(conditions);

  // The newest ready sandbox's IPs; kept once the sandbox is gone.
  if (!rt.sandboxes.empty() && rt.sandboxes.front().ready && !rt.sandboxes.front().ips.empty()) {
    json ips = json::array();
    for (const auto& ip : rt.sandboxes.front().ips) ips.push_back({{"ip", ip}});
    s["podIP"] = rt.sandboxes.front().ips.front();
    s["podIPs"] = std::move(ips);
  }
  if (!in.host_ip.empty() && client::Field(client::Field(pod, "spec"), "hostNetwork") == json(true)) {
    s["podIP"] = in.host_ip;
    s["podIPs"] = json::array({{{"ip", in.host_ip}}});
  }
  if (!in.host_ip.empty()) {
    s["hostIP"] = in.host_ip;
    s["hostIPs"] = json::array({{{"ip", in.host_ip}}});
  }
  if (!s.contains("startTime")) s["startTime"] = now;
  s["qosClass"] = QosClass(pod);
  return s;
}

}  // namespace berth::node::pods
