// One pod's sync (kubelet's SyncPod / KillPod over the CRI): see
// pod_workers.h for the rules.
#include <sys/mount.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <thread>

#include "absl/strings/match.h"
#include "api/quantity.h"
#include "client/object.h"
#include "client/writes.h"
#include "common/fs.h"
#include "common/status.h"
#include "common/strings.h"
#include "node/pods/admission.h"
#include "node/pods/pod_actions.h"
#include "node/pods/pod_workers.h"
#include "spdlog/spdlog.h"

namespace berth::node::pods {
namespace {

using nlohmann::json;
namespace v1 = cri::v1;
namespace fs = std::filesystem;

// kubelet's killContainer grace period: deletionGracePeriodSeconds, else
// terminationGracePeriodSeconds, else 30; never below 2 s.
absl::Duration GracePeriod(const json& pod) {
  int64_t seconds = 30;
  const json& deletion = client::Field(client::Field(pod, "metadata"), "deletionGracePeriodSeconds");
  const json& termination = client::Field(client::Field(pod, "spec"), "terminationGracePeriodSeconds");
  if (deletion.is_number_integer()) {
    seconds = deletion.get<int64_t>();
  } else if (termination.is_number_integer()) {
    seconds = termination.get<int64_t>();
  }
  return absl::Seconds(std::max<int64_t>(2, seconds));
}

// "name_namespace(uid)", as kubelet names pods in messages.
std::string PodDesc(const json& pod) {
  return StrCat(client::Name(pod), "_", client::Ns(pod), "(", client::Uid(pod), ")");
}

bool Terminal(const json& pod) {
  const std::string phase = client::Str(pod, {"status", "phase"});
  return phase == "Succeeded" || phase == "Failed";
}

// kubelet's default imagePullPolicy: Always for :latest or no tag, else
// IfNotPresent.
std::string PullPolicy(const json& c) {
  std::string p = c.value("imagePullPolicy", "");
  if (!p.empty()) return p;
  const std::string image = c.value("image", "");
  if (absl::StrContains(image, "@")) return "IfNotPresent";
  const size_t slash = image.rfind('/');
  const size_t colon = image.rfind(':');
  if (colon == std::string::npos || (slash != std::string::npos && colon < slash)) return "Always";
  return image.substr(colon + 1) == "latest" ? "Always" : "IfNotPresent";
}

// The highest N of <dir>/N.log plus one (a restarted runtime that lost its
// containers must not write over an earlier log), 0 without any.
int NextLogIndex(const std::string& dir) {
  int next = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!absl::EndsWith(name, ".log")) continue;
    const std::string n = name.substr(0, name.size() - 4);
    if (n.empty() || n.find_first_not_of("0123456789") != std::string::npos || n.size() > 6) continue;
    next = std::max(next, std::stoi(n) + 1);
  }
  return next;
}

bool IsDnsLabel(const std::string& s) {
  if (s.empty() || s.size() > 63) return false;
  for (char c : s) {
    if (!(std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '-')) {
      return false;
    }
  }
  return s.front() != '-' && s.back() != '-';
}

bool IsMountPoint(const std::string& path) {
  struct stat self {
  }, parent{};
  if (::stat(path.c_str(), &self) != 0 || ::stat((path + "/..").c_str(), &parent) != 0) return false;
  return self.st_dev != parent.st_dev;
}

}  // namespace

std::string PodWorkers::EmptyDirPath(const std::string& uid, const std::string& volume) const {
  return StrCat(options_.root, "/pods/", uid, "/volumes/kubernetes.io~empty-dir/", volume);
}

absl::StatusOr<RuntimePod> PodWorkers::GetRuntimePod(const std::string& uid) {
  RuntimePod rp;
  rp.uid = uid;
  v1::PodSandboxFilter sf;
  (*sf.mutable_label_selector())[kPodUidLabel] = uid;
  (*sf.mutable_label_selector())[kNodeLabel] = options_.node_name;
  BERTH_ASSIGN_OR_RETURN(auto sandboxes, runtime_.ListPodSandbox(sf));
  for (const auto& sb : sandboxes) {
    SandboxState s{.id = sb.id(),
                   .attempt = sb.metadata().attempt(),
                   .ready = sb.state() == v1::SANDBOX_READY,
                   .created_at = FromUnixNanos(sb.created_at())};
    rp.ns = sb.metadata().namespace_();
    rp.name = sb.metadata().name();
    if (s.ready) {
      auto status = runtime_.PodSandboxStatus(sb.id());
      if (absl::IsNotFound(status.status())) continue;
      if (!status.ok()) return status.status();
      if (!status->network().ip().empty()) s.ips.push_back(status->network().ip());
      for (const auto& ip : status->network().additional_ips()) s.ips.push_back(ip.ip());
    }
    rp.sandboxes.push_back(std::move(s));
  }
  std::sort(rp.sandboxes.begin(), rp.sandboxes.end(),
            [](const SandboxState& a, const SandboxState& b) { return a.created_at > b.created_at; });
  v1::ContainerFilter cf;
  (*cf.mutable_label_selector())[kPodUidLabel] = uid;
  (*cf.mutable_label_selector())[kNodeLabel] = options_.node_name;
  BERTH_ASSIGN_OR_RETURN(auto containers, runtime_.ListContainers(cf));
  for (const auto& c : containers) {
    auto st = runtime_.ContainerStatus(c.id());
    if (absl::IsNotFound(st.status())) continue;
    if (!st.ok()) return st.status();
    ContainerState cs{.id = c.id(),
                      .name = st->metadata().name(),
                      .sandbox_id = c.pod_sandbox_id(),
                      .state = st->state(),
                      .created_at = FromUnixNanos(st->created_at()),
                      .started_at = FromUnixNanos(st->started_at()),
                      .finished_at = FromUnixNanos(st->finished_at()),
                      .exit_code = st->exit_code(),
                      .reason = st->reason(),
                      .message = st->message(),
                      .image = st->image().image(),
                      .image_ref = st->image_ref()};
    const auto& ann = st->annotations();
    if (auto it = ann.find(kRestartCountAnnotation); it != ann.end()) cs.restart_count = std::atoi(it->second.c_str());
    if (auto it = ann.find(kContainerHashAnnotation); it != ann.end()) cs.hash = it->second;
    rp.containers.push_back(std::move(cs));
  }
  std::sort(rp.containers.begin(), rp.containers.end(),
            [](const ContainerState& a, const ContainerState& b) { return a.created_at > b.created_at; });
  return rp;
}

absl::Status PodWorkers::SyncPod(const std::string& uid) {
  const bool listed = pods_->WaitForSync(absl::ZeroDuration());  // before the lookup, or it may race the list
  const std::optional<json> pod = PodByUid(uid);
  PodState state;
  {
    absl::MutexLock lock(&mu_);
    if (auto it = states_.find(uid); it != states_.end()) state = it->second;
  }
  BERTH_ASSIGN_OR_RETURN(RuntimePod rp, GetRuntimePod(uid));
  auto save = [&](bool running) {
    absl::MutexLock lock(&mu_);
    if (pod) states_[uid] = state;
    running ? (void)running_.insert(uid) : (void)running_.erase(uid);
  };

  if (!pod && !listed) {
    // Not known yet is not gone: until the informer has its first list (and
    // its handlers have run), a pod the runtime runs may simply not have
    // arrived. As kubelet's housekeeping waits for its sources to be ready.
    return absl::UnavailableError("the pod informer has not listed the pods yet");
  }
  if (!pod) {
    // Gone from the API (force-deleted, or deleted while the agent was
    // down): nothing of it may run. As kubelet, with the least grace period
    // (2 s): kubectl's --grace-period=0 --force asked for none, and an
    // orphan found in the runtime has no spec left to ask.
    json last = state.last_pod.value_or(json{{"metadata", {{"name", rp.name}, {"namespace", rp.ns}, {"uid", uid}}}});
    last["metadata"]["deletionGracePeriodSeconds"] = 0;
    if (!rp.empty()) {
      spdlog::info("node {}: pod {}/{} ({}) is gone from the API: stopping and removing what runs of it",
                   options_.node_name, rp.ns, rp.name, uid);
    }
    if (rp.AnyRunning()) BERTH_RETURN_IF_ERROR(KillPod(last, rp));
    save(false);
    volumes_.Wake();
    BERTH_RETURN_IF_ERROR(RemovePod(uid, rp));
    std::error_code ec;
    if (!client::Name(last).empty()) {
      const std::string logs = PodLogDirectory(options_.log_root, last);
      if (CheckPathInside(options_.log_root, logs).ok()) fs::remove_all(logs, ec);
    }
    absl::MutexLock lock(&mu_);
    states_.erase(uid);
    for (auto it = backoffs_.lower_bound(uid + "/"); it != backoffs_.end() && absl::StartsWith(it->first, uid + "/");) {
      crash_backoff_.Forget(it->first);
      it = backoffs_.erase(it);
    }
    for (const auto& c : rp.containers) exits_.erase(c.id);
    return absl::OkStatus();
  }

  if (client::Deleting(*pod) || Terminal(*pod)) {
    if (rp.AnyRunning()) {
      BERTH_RETURN_IF_ERROR(KillPod(*pod, rp));
      BERTH_ASSIGN_OR_RETURN(rp, GetRuntimePod(uid));
    }
    state.killed = true;
    save(false);
    volumes_.Wake();
    WriteStatus(*pod, rp, state, client::Deleting(*pod));
    return absl::OkStatus();
  }

  // Admission: a pod asking for what this node cannot do fails at once.
  if (rp.empty()) {
    if (auto unsupported = UnsupportedPodFields(*pod); !unsupported.empty()) {
      std::string message = "berth's node agent cannot run this pod: ";
      for (size_t i = 0; i < unsupported.size(); ++i) message += (i ? ", " : "") + unsupported[i];
      events_.Record(*pod, "Warning", "UnsupportedPodSpec", message);
      save(false);
      volumes_.Wake();
      return client::EditStatus(registry_, client::K("pods"), *pod, [&](json& status) {
        status["phase"] = "Failed";
        status["reason"] = "UnsupportedPodSpec";
        status["message"] = message;
        if (!status.contains("startTime")) status["startTime"] = ApiTime(clock_.Now());
      });
    }
  }
  if (!volumes_.PodVolumesReady(uid)) {
    WriteStatus(*pod, rp, state, false);
    save(rp.AnyRunning());
    EnqueueAt(uid, clock_.Now() + options_.volume_poll);
    return absl::OkStatus();
  }
  absl::Status st = RunPod(*pod, rp, state);
  auto after = GetRuntimePod(uid);
  if (after.ok()) rp = std::move(*after);
  // Dead instances beyond the newest two of a name go (kubelet's container
  // GC keeps one dead instance for `logs --previous`).
  std::map<std::string, int> kept;
  for (const auto& c : rp.containers) {
    if (++kept[c.name] <= 2 || !c.exited()) continue;
    if (runtime_.RemoveContainer(c.id).ok()) {
      std::error_code ec;
      fs::remove(StrCat(PodLogDirectory(options_.log_root, *pod), "/", c.name, "/", c.restart_count, ".log"), ec);
    }
  }
  save(rp.AnyRunning());
  WriteStatus(*pod, rp, state, false);
  return st;
}

absl::Status PodWorkers::RunPod(const json& pod, const RuntimePod& rp, PodState& state) {
  const PodActions a = ComputePodActions(pod, rp);
  if (a.create_sandbox && !a.sandbox_id.empty()) {
    events_.Record(pod, "Normal", "SandboxChanged", "Pod sandbox changed, it will be killed and re-created.");
  }
  if (a.kill_pod) {
    BERTH_RETURN_IF_ERROR(KillPod(pod, rp));
    if (!a.create_sandbox) return absl::OkStatus();
    // A new sandbox runs the init containers again.
    for (const auto& init : SpecList(pod, "initContainers")) {
      for (const auto& c : rp.containers) {
        if (c.name == init.value("name", "")) (void)runtime_.RemoveContainer(c.id);
      }
    }
  } else {
    for (const auto& [id, why] : a.kill) {
      spdlog::info("node {}: pod {}: {}", options_.node_name, PodDesc(pod), why);
      absl::Status st = runtime_.StopContainer(id, GracePeriod(pod));
      if (!st.ok() && !absl::IsNotFound(st)) return st;
    }
  }

  std::string sandbox_id = a.sandbox_id;
  std::string pod_ip = rp.sandboxes.empty() || rp.sandboxes.front().ips.empty() ? "" : rp.sandboxes.front().ips.front();
  const v1::PodSandboxConfig sandbox_config = SandboxConfig(pod, a.attempt, options_.node_name, options_.log_root);
  if (a.create_sandbox) {
    BERTH_RETURN_IF_ERROR(MakeDirs(sandbox_config.log_directory(), 0755));
    auto id = runtime_.RunPodSandbox(sandbox_config, "");
    if (!id.ok()) {
      events_.Record(pod, "Warning", "FailedCreatePodSandBox",
                     StrCat("Failed to create pod sandbox: ", id.status().message()));
      return id.status();
    }
    sandbox_id = *id;
    auto status = runtime_.PodSandboxStatus(sandbox_id);
    if (!status.ok()) return status.status();
    pod_ip = status->network().ip();
  }
  if (a.next_init >= 0) {
    return StartContainer(pod, SpecList(pod, "initContainers")[a.next_init], true, sandbox_id, sandbox_config, rp,
                          pod_ip, state);
  }
  absl::Status result;
  for (int idx : a.start) {
    result.Update(
        StartContainer(pod, SpecList(pod, "containers")[idx], false, sandbox_id, sandbox_config, rp, pod_ip, state));
  }
  return result;
}

absl::Status PodWorkers::StartContainer(const json& pod, const json& c, bool init, const std::string& sandbox_id,
                                        const v1::PodSandboxConfig& sandbox_config, const RuntimePod& rp,
                                        const std::string& pod_ip, PodState& state) {
  const std::string name = c.value("name", "");
  const std::string uid = client::Uid(pod);
  const ContainerState* prev = rp.Find(name);
  if (prev != nullptr && prev->exited()) {
    const std::string key = uid + "/" + name;
    const absl::Time since = ExitSeen(*prev);
    absl::Time until;
    if (InBackoff(key, since, &until)) {
      const absl::Duration current = until - since;  // the backoff's length
      state.waiting[name] = {"CrashLoopBackOff", StrCat("back-off ", absl::FormatDuration(current),
                                                        " restarting failed container=", name, " pod=", PodDesc(pod))};
      events_.Record(pod, "Warning", "BackOff",
                     StrCat("Back-off restarting failed container ", name, " in pod ", PodDesc(pod)));
      EnqueueAt(uid, until);
      return absl::OkStatus();
    }
    NextBackoff(key, since);
  }
  Waiting why;
  auto image = EnsureImage(pod, c, sandbox_config, &why);
  if (!image.ok()) {
    state.waiting[name] = why;
    return absl::OkStatus();  // retried when its backoff ends (EnsureImage schedules it)
  }
  auto fail = [&](const char* reason, const absl::Status& st) {
    state.waiting[name] = {reason, std::string(st.message())};
    events_.Record(pod, "Warning", "Failed", StrCat("Error: ", st.message()));
    return st;
  };
  auto volumes = Volumes(pod);
  if (!volumes.ok()) return fail("CreateContainerConfigError", volumes.status());
  ContainerInputs in{.pod = &pod,
                     .container = &c,
                     .init = init,
                     .restart_count = prev != nullptr ? prev->restart_count + 1
                                                      : NextLogIndex(StrCat(sandbox_config.log_directory(), "/", name)),
                     .node = options_.node_name,
                     .image_ref = image->id(),
                     .volumes = std::move(*volumes),
                     .pod_ip = pod_ip,
                     .host_ip = options_.host_ip,
                     .node_memory_bytes = node_memory_bytes_,
                     .image_uid = image->has_uid() ? image->uid().value() : -1,
                     .image_user = image->username()};
  auto config = ContainerConfig(in);
  if (!config.ok()) return fail("CreateContainerConfigError", config.status());
  auto id = runtime_.CreateContainer(sandbox_id, *config, sandbox_config);
  if (!id.ok()) return fail("CreateContainerError", id.status());
  events_.Record(pod, "Normal", "Created", StrCat("Created container ", name));
  if (absl::Status st = runtime_.StartContainer(*id); !st.ok()) return fail("RunContainerError", st);
  events_.Record(pod, "Normal", "Started", StrCat("Started container ", name));
  state.waiting.erase(name);
  return absl::OkStatus();
}

absl::StatusOr<v1::Image> PodWorkers::EnsureImage(const json& pod, const json& c,
                                                  const v1::PodSandboxConfig& sandbox_config, Waiting* why) {
  const std::string image = c.value("image", "");
  const std::string policy = PullPolicy(c);
  BERTH_ASSIGN_OR_RETURN(v1::Image present, runtime_.ImageStatus(image));
  const bool have = !present.id().empty();
  if (policy == "Never" && !have) {
    *why = {"ErrImageNeverPull", StrCat("Container image \"", image, "\" is not present with pull policy of Never")};
    events_.Record(pod, "Warning", "ErrImageNeverPull", why->message);
    return absl::FailedPreconditionError(why->message);
  }
  if (have && policy != "Always") {
    events_.Record(pod, "Normal", "Pulled", StrCat("Container image \"", image, "\" already present on machine"));
    return present;
  }
  const std::string key = StrCat(client::Uid(pod), "/pull/", image);
  absl::Time until;
  if (InBackoff(key, absl::InfinitePast(), &until)) {
    *why = {"ImagePullBackOff", StrCat("Back-off pulling image \"", image, "\"")};
    events_.Record(pod, "Normal", "BackOff", why->message);
    EnqueueAt(client::Uid(pod), until);
    return absl::UnavailableError(why->message);
  }
  events_.Record(pod, "Normal", "Pulling", StrCat("Pulling image \"", image, "\""));
  auto ref = runtime_.PullImage(image, sandbox_config);
  if (!ref.ok()) {
    NextBackoff(key, clock_.Now());
    if (absl::Time next; InBackoff(key, absl::InfinitePast(), &next)) EnqueueAt(client::Uid(pod), next);
    *why = {"ErrImagePull", StrCat("Failed to pull image \"", image, "\": ", ref.status().message())};
    events_.Record(pod, "Warning", "Failed", why->message);
    return ref.status();
  }
  events_.Record(pod, "Normal", "Pulled", StrCat("Successfully pulled image \"", image, "\""));
  return runtime_.ImageStatus(*ref);
}

absl::StatusOr<std::map<std::string, VolumePath>> PodWorkers::Volumes(const json& pod) {
  const std::string uid = client::Uid(pod);
  std::map<std::string, VolumePath> out = volumes_.PodVolumePaths(uid);
  for (const auto& v : SpecList(pod, "volumes")) {
    const std::string name = v.value("name", "");
    if (const json& ed = client::Field(v, "emptyDir"); ed.is_object()) {
      if (!IsDnsLabel(name)) return absl::InvalidArgumentError(StrCat("volume name \"", name, "\" is not a DNS label"));
      const std::string path = EmptyDirPath(uid, name);
      BERTH_RETURN_IF_ERROR(MakeDirs(path, 0750));
      if (ed.value("medium", "") == "Memory" && !IsMountPoint(path)) {
        std::string options = "mode=0777";
        if (ed.contains("sizeLimit")) {
          auto size = api::Quantity::Parse(ed["sizeLimit"].is_string() ? ed["sizeLimit"].get<std::string>()
                                                                       : ed["sizeLimit"].dump());
          if (!size.ok()) return size.status();
          options += StrCat(",size=", size->Value());
        }
        if (::mount("tmpfs", path.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, options.c_str()) != 0) {
          return ErrnoStatus(errno, StrCat("mounting the memory-backed emptyDir \"", name, "\""));
        }
      }
      ::chmod(path.c_str(), 0777);  // as kubelet: any user of the pod may write
      out[name] = {.path = path};
    } else if (const json& hp = client::Field(v, "hostPath"); hp.is_object()) {
      const std::string path = hp.value("path", "");
      const std::string type = hp.value("type", "");
      if (!IsCanonicalAbsolutePath(path))
        return absl::InvalidArgumentError(StrCat("hostPath \"", path, "\" is not canonical"));
      if (type == "DirectoryOrCreate") BERTH_RETURN_IF_ERROR(MakeDirs(path, 0755));
      std::error_code ec;
      if ((type == "Directory" || type == "DirectoryOrCreate") && !fs::is_directory(path, ec)) {
        return absl::NotFoundError(StrCat("hostPath type check failed: ", path, " is not a directory"));
      }
      out[name] = {.path = path, .read_only = client::Field(v, "hostPath").value("readOnly", false)};
    }
  }
  return out;
}

absl::Status PodWorkers::KillPod(const json& pod, const RuntimePod& rp) {
  const absl::Duration grace = GracePeriod(pod);
  std::vector<std::thread> stoppers;
  std::vector<absl::Status> results(rp.containers.size());
  for (size_t i = 0; i < rp.containers.size(); ++i) {
    const ContainerState& c = rp.containers[i];
    if (c.exited()) continue;
    if (c.running()) events_.Record(pod, "Normal", "Killing", StrCat("Stopping container ", c.name));
    stoppers.emplace_back([&, i] { results[i] = runtime_.StopContainer(rp.containers[i].id, grace); });
  }
  for (auto& t : stoppers) t.join();
  absl::Status result;
  for (const auto& st : results) {
    if (!st.ok() && !absl::IsNotFound(st)) result.Update(st);
  }
  BERTH_RETURN_IF_ERROR(result);
  for (const auto& sb : rp.sandboxes) {
    absl::Status st = runtime_.StopPodSandbox(sb.id);
    if (!st.ok() && !absl::IsNotFound(st)) return st;
  }
  return absl::OkStatus();
}

absl::Status PodWorkers::RemovePod(const std::string& uid, const RuntimePod& rp) {
  for (const auto& c : rp.containers) {
    absl::Status st = runtime_.RemoveContainer(c.id);
    if (!st.ok() && !absl::IsNotFound(st)) return st;
  }
  for (const auto& sb : rp.sandboxes) {
    absl::Status st = runtime_.RemovePodSandbox(sb.id);
    if (!st.ok() && !absl::IsNotFound(st)) return st;
  }
  // emptyDir volumes (unmounted first when memory-backed).
  const std::string dir = StrCat(options_.root, "/pods/", uid, "/volumes/kubernetes.io~empty-dir");
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string path = e.path().string();
    if (IsMountPoint(path) && ::umount2(path.c_str(), 0) != 0 && errno != EINVAL) {
      return ErrnoStatus(errno, "unmounting emptyDir " + path);
    }
    if (!IsMountPoint(path)) fs::remove_all(path, ec);
  }
  ::rmdir(dir.c_str());
  ::rmdir(StrCat(options_.root, "/pods/", uid, "/volumes").c_str());
  ::rmdir(StrCat(options_.root, "/pods/", uid).c_str());
  return absl::OkStatus();
}

void PodWorkers::WriteStatus(const json& pod, const RuntimePod& rp, const PodState& state, bool terminal) {
  StatusInputs in{.pod = &pod,
                  .runtime = &rp,
                  .waiting = state.waiting,
                  .runtime_name = runtime_name(),
                  .terminal = terminal,
                  .host_ip = options_.host_ip,
                  .now = clock_.Now()};
  if (in.runtime_name.empty()) in.runtime_name = "containerd";
  // Most syncs change nothing: compare on the cached copy first.
  if (GeneratePodStatus(in) == pod.value("status", json::object())) return;
  absl::Status st = client::EditStatus(registry_, client::K("pods"), pod, [&](json& status) {
    json current = pod;
    current["status"] = status;
    StatusInputs fresh = in;
    fresh.pod = &current;
    status = GeneratePodStatus(fresh);
  });
  if (!st.ok()) {
    spdlog::warn("node {}: pod {} status: {}", options_.node_name, PodDesc(pod), st.ToString());
    queue_.AddRateLimited(client::Uid(pod));
  }
}

}  // namespace berth::node::pods
