#include "cli/runtime_commands.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cli/runtime_setup.h"
#include "common/exec.h"
#include "common/fs.h"
#include "common/mountinfo.h"
#include "common/status.h"
#include "common/strings.h"
#include "cri/containerd.h"
#include "cri/runtime.h"
#include "csi/endpoint.h"
#include "nlohmann/json.hpp"

namespace berth::cli {
namespace {

using http::ApiClient;
using nlohmann::json;
namespace fs = std::filesystem;

constexpr char kUidLabel[] = "io.kubernetes.pod.uid";
constexpr char kContainerLabel[] = "io.kubernetes.container.name";

std::string Escape(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out += absl::StrCat("%", absl::Hex(c, absl::kZeroPad2));
    }
  }
  return out;
}

// node → CRI endpoint, from <data>/nodes/*/runtime-endpoint.
absl::StatusOr<std::map<std::string, std::string>> NodeEndpoints(const std::string& data_dir, const std::string& only) {
  std::map<std::string, std::string> out;
  std::error_code ec;
  for (const auto& d : fs::directory_iterator(data_dir + "/nodes", ec)) {
    const std::string node = d.path().filename().string();
    if (!only.empty() && node != only) continue;
    auto text = ReadFile(RuntimeEndpointFile(data_dir, node));
    if (!text.ok()) continue;
    std::string endpoint = *text;
    while (!endpoint.empty() && (endpoint.back() == '\n' || endpoint.back() == ' ')) endpoint.pop_back();
    if (!endpoint.empty()) out[node] = endpoint;
  }
  if (out.empty()) {
    return absl::FailedPreconditionError(
        StrCat("no node in ", data_dir, only.empty() ? "" : " called " + only,
               " has a container runtime (berth up --runtime=none, or berth up never ran there)"));
  }
  return out;
}

absl::StatusOr<std::unique_ptr<cri::GrpcRuntime>> Connect(const std::string& endpoint) {
  return cri::GrpcRuntime::Connect(endpoint, {.retry_for = absl::Seconds(5)});
}

pid_t PidFrom(const std::string& file) {
  auto text = ReadFile(file);
  return text.ok() ? static_cast<pid_t>(std::atoi(text->c_str())) : -1;
}

// Starts containerd on `setup` (as berth up's supervisor would); its PID.
pid_t StartContainerd(const cri::ContainerdSetup& setup) {
  std::vector<std::string> args = cri::ContainerdArgv(setup, "/usr/bin/containerd");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string log = setup.dir + "/containerd.log";
  const pid_t pid = ::fork();
  if (pid == 0) {
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    ::umask(022);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

void StopProcess(pid_t pid, absl::Duration grace) {
  if (!ProcessAlive(pid)) return;
  ::kill(pid, SIGTERM);
  const absl::Time deadline = absl::Now() + grace;
  while (ProcessAlive(pid) && absl::Now() < deadline) {
    ::waitpid(pid, nullptr, WNOHANG);
    absl::SleepFor(absl::Milliseconds(20));
  }
  if (ProcessAlive(pid)) ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
}

// containerd shims serving `socket` (a shim whose containerd died lives on).
std::vector<pid_t> ShimsOf(const std::string& socket) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(e.path().filename().c_str()));
    if (pid <= 0) continue;
    std::ifstream f(e.path() / "cmdline");
    std::stringstream ss;
    ss << f.rdbuf();
    std::string cmd = ss.str();
    std::replace(cmd.begin(), cmd.end(), '\0', ' ');
    if (absl::StrContains(cmd, "containerd-shim") && absl::StrContains(cmd, " " + socket + " ")) out.push_back(pid);
  }
  return out;
}

}  // namespace

absl::Status Logs(ApiClient& client, const std::string& pod, const Target& target, const LogsOptions& o,
                  std::ostream& out) {
  std::string query;
  auto add = [&](const std::string& kv) { query += (query.empty() ? "?" : "&") + kv; };
  if (!o.container.empty()) add("container=" + Escape(o.container));
  if (o.follow) add("follow=true");
  if (o.previous) add("previous=true");
  if (o.timestamps) add("timestamps=true");
  if (o.tail >= 0) add(StrCat("tailLines=", o.tail));
  const std::string path =
      StrCat("/api/v1/namespaces/", Escape(NamespaceOf(client, target)), "/pods/", Escape(pod), "/log", query);
  if (!o.follow) {
    BERTH_ASSIGN_OR_RETURN(auto r, client.Call("GET", path, "", "application/json", "text/plain"));
    if (r.code != 200) return ErrorFromResponse(r);
    out << r.body << std::flush;
    return absl::OkStatus();
  }
  BERTH_ASSIGN_OR_RETURN(auto r, client.Stream(path, "text/plain", [&](const std::string& line) {
    out << line << std::flush;
    return static_cast<bool>(out);
  }));
  if (r.code != 200) return ErrorFromResponse(r);
  return absl::OkStatus();
}

absl::StatusOr<int> Exec(ApiClient& client, const std::string& data_dir, const std::string& pod_name,
                         const Target& target, const std::string& container_flag,
                         const std::vector<std::string>& command, absl::Duration timeout, std::ostream& out,
                         std::ostream& err) {
  if (command.empty()) return absl::InvalidArgumentError("you must specify at least one command for the container");
  const std::string ns = NamespaceOf(client, target);
  BERTH_ASSIGN_OR_RETURN(auto r,
                         client.Call("GET", StrCat("/api/v1/namespaces/", Escape(ns), "/pods/", Escape(pod_name))));
  if (r.code != 200) return ErrorFromResponse(r);
  json pod = json::parse(r.body, nullptr, false);
  if (!pod.is_object()) return absl::InternalError("the server's answer is not JSON");
  std::string container = container_flag;
  const json containers = pod["spec"].value("containers", json::array());
  if (container.empty()) {
    if (containers.empty()) return absl::InvalidArgumentError("the pod has no containers");
    container = containers[0].value("name", "");
    if (containers.size() > 1)
      err << "Defaulted container \"" << container << "\" out of: " << containers.size() << " containers\n";
  }
  const std::string node = pod["spec"].value("nodeName", "");
  if (node.empty()) return absl::FailedPreconditionError(StrCat("pod ", pod_name, " is not scheduled to a node yet"));
  BERTH_ASSIGN_OR_RETURN(auto endpoints, NodeEndpoints(data_dir, node));
  BERTH_ASSIGN_OR_RETURN(auto runtime, Connect(endpoints.begin()->second));
  cri::v1::ContainerFilter filter;
  (*filter.mutable_label_selector())[kUidLabel] = pod["metadata"].value("uid", "");
  (*filter.mutable_label_selector())[kContainerLabel] = container;
  filter.mutable_state()->set_state(cri::v1::CONTAINER_RUNNING);
  BERTH_ASSIGN_OR_RETURN(auto found, runtime->ListContainers(filter));
  if (found.empty()) {
    return absl::FailedPreconditionError(StrCat("container ", container, " is not running in pod ", pod_name,
                                                " (see berth describe pod ", pod_name, ")"));
  }
  BERTH_ASSIGN_OR_RETURN(auto result, runtime->ExecSync(found.front().id(), command, timeout));
  out << result.stdout() << std::flush;
  err << result.stderr() << std::flush;
  return result.exit_code();
}

absl::Status ImageImport(const std::string& data_dir, const std::vector<std::string>& files, const std::string& node,
                         std::ostream& out) {
  for (const auto& f : files) {
    if (::access(f.c_str(), R_OK) != 0) return absl::NotFoundError(StrCat("cannot read ", f));
  }
  BERTH_ASSIGN_OR_RETURN(auto endpoints, NodeEndpoints(data_dir, node));
  LinuxCommandRunner runner;
  for (const auto& [name, endpoint] : endpoints) {
    BERTH_ASSIGN_OR_RETURN(std::string socket, csi::ParseUnixEndpoint(endpoint));
    absl::Status st = cri::ImportImages(socket, files, runner);
    if (!st.ok()) {
      return absl::Status(
          st.code(), StrCat("node ", name, ": ", st.message(), " (berth image import needs a containerd runtime)"));
    }
    out << "node " << name << ": imported " << files.size() << " archive(s)\n";
  }
  return absl::OkStatus();
}

absl::Status ImageList(const std::string& data_dir, const std::string& node, std::ostream& out) {
  BERTH_ASSIGN_OR_RETURN(auto endpoints, NodeEndpoints(data_dir, node));
  out << "NODE\tIMAGE\tIMAGE ID\tSIZE\n";
  for (const auto& [name, endpoint] : endpoints) {
    BERTH_ASSIGN_OR_RETURN(auto runtime, Connect(endpoint));
    BERTH_ASSIGN_OR_RETURN(auto images, runtime->ListImages());
    for (const auto& image : images) {
      std::string id = image.id();
      if (absl::StartsWith(id, "sha256:")) id = id.substr(7, 13);
      const std::string size =
          StrCat(image.size() / (1 << 20), ".", (image.size() % (1 << 20)) * 10 / (1 << 20), "MiB");
      if (image.repo_tags().empty()) out << name << "\t<none>\t" << id << "\t" << size << "\n";
      for (const auto& tag : image.repo_tags()) out << name << "\t" << tag << "\t" << id << "\t" << size << "\n";
    }
  }
  return absl::OkStatus();
}

absl::Status ImageRemove(const std::string& data_dir, const std::vector<std::string>& images, const std::string& node,
                         std::ostream& out) {
  BERTH_ASSIGN_OR_RETURN(auto endpoints, NodeEndpoints(data_dir, node));
  for (const auto& [name, endpoint] : endpoints) {
    BERTH_ASSIGN_OR_RETURN(auto runtime, Connect(endpoint));
    for (const auto& image : images) {
      // CRI's RemoveImage removes the image with all its names; one name of
      // several goes alone (as `docker rmi`), through containerd.
      BERTH_ASSIGN_OR_RETURN(cri::v1::Image status, runtime->ImageStatus(image));
      std::string stored;
      for (const auto& tag : status.repo_tags()) {
        if (tag == image || tag == "docker.io/" + image || tag == "docker.io/library/" + image) stored = tag;
      }
      if (status.repo_tags_size() > 1 && !stored.empty()) {
        BERTH_ASSIGN_OR_RETURN(std::string socket, csi::ParseUnixEndpoint(endpoint));
        LinuxCommandRunner runner;
        absl::Status st = cri::RemoveImageName(socket, stored, runner);
        if (!st.ok()) {
          return absl::Status(st.code(), StrCat("node ", name, ": ", st.message(), " (", image,
                                                " has other names; removing one of them needs a containerd runtime)"));
        }
        out << "node " << name << ": untagged " << image << "\n";
        continue;
      }
      BERTH_RETURN_IF_ERROR(runtime->RemoveImage(image));
      out << "node " << name << ": removed " << image << "\n";
    }
  }
  return absl::OkStatus();
}

absl::Status Down(const std::string& data_dir, std::ostream& out) {
  if (!IsCanonicalAbsolutePath(data_dir))
    return absl::InvalidArgumentError("--data-dir must be a canonical absolute path");
  // berth up must be stopped: it holds this lock while it runs.
  const std::string lock_path = data_dir + "/berth-up.lock";
  const int lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CLOEXEC);
  if (lock_fd >= 0 && ::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(lock_fd);
    return absl::FailedPreconditionError(StrCat("berth up is running on ", data_dir, ": stop it first (SIGTERM)"));
  }
  absl::Status result;
  std::error_code ec;
  for (const auto& d : fs::directory_iterator(data_dir + "/containerd", ec)) {
    cri::ContainerdSetup setup{.dir = d.path().string(), .pod_cidr = ""};
    if (::access(setup.Config().c_str(), R_OK) != 0) continue;
    const std::string node = d.path().filename().string();
    // A containerd of the last berth up may still be finishing.
    StopProcess(PidFrom(setup.dir + "/containerd.pid"), absl::Seconds(15));
    const pid_t pid = StartContainerd(setup);
    auto runtime = Connect(setup.Endpoint());
    absl::Status st = runtime.status();
    if (st.ok()) {
      const absl::Time deadline = absl::Now() + absl::Seconds(30);
      while (!(st = (*runtime)->Version().status()).ok() && absl::Now() < deadline)
        absl::SleepFor(absl::Milliseconds(50));
    }
    size_t sandboxes = 0;
    if (st.ok()) {
      auto listed = (*runtime)->ListPodSandbox({});
      sandboxes = listed.ok() ? listed->size() : 0;
      st = cri::RemoveAllSandboxes(**runtime, {});
    }
    StopProcess(pid, absl::Seconds(15));
    for (pid_t shim : ShimsOf(setup.Socket())) ::kill(shim, SIGKILL);
    LinuxCommandRunner runner;
    st.Update(cri::DeleteLink(setup.Bridge(), runner));
    out << "node " << node << ": " << sandboxes << " pod sandbox(es) stopped and removed, containerd stopped"
        << (st.ok() ? "" : StrCat(" (", st.message(), ")")) << "\n";
    result.Update(st);
  }
  // Whatever is still mounted below the data directory (pod volumes, staged
  // volumes, pools), deepest first.
  auto mounts = ReadMountTable();
  if (mounts.ok()) {
    std::vector<std::string> below;
    for (const auto& m : *mounts) {
      if (absl::StartsWith(m.target, data_dir + "/")) below.push_back(m.target);
    }
    std::sort(below.begin(), below.end(), [](const auto& a, const auto& b) { return a.size() > b.size(); });
    int unmounted = 0;
    for (const auto& m : below) {
      if (::umount2(m.c_str(), 0) == 0 || ::umount2(m.c_str(), MNT_DETACH) == 0) ++unmounted;
    }
    out << unmounted << " mount(s) below " << data_dir << " unmounted\n";
  }
  if (lock_fd >= 0) ::close(lock_fd);
  return result;
}

}  // namespace berth::cli
