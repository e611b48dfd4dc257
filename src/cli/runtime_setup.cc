#include "cli/runtime_setup.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <unistd.h>

#include <filesystem>

#include "absl/strings/match.h"
#include "common/exec.h"
#include "common/fs.h"
#include "common/status.h"
#include "common/strings.h"
#include "cri/runtime.h"
#include "csi/endpoint.h"
#include "spdlog/spdlog.h"

namespace berth::cli {

absl::Status ValidateRuntimeOptions(const RuntimeOptions& o, int nodes) {
  if (o.runtime != "containerd" && o.runtime != "none") {
    return absl::InvalidArgumentError(StrCat("--runtime \"", o.runtime, "\": want containerd or none"));
  }
  if (!o.endpoint.empty()) {
    if (o.runtime == "none")
      return absl::InvalidArgumentError("--container-runtime-endpoint needs a runtime, not --runtime=none");
    if (auto p = csi::ParseUnixEndpoint(o.endpoint); !p.ok()) {
      return absl::InvalidArgumentError(StrCat("--container-runtime-endpoint: ", p.status().message()));
    }
    if (nodes > 1) {
      return absl::InvalidArgumentError(
          "--container-runtime-endpoint serves one node; simulated nodes each get berth's containerd");
    }
  }
  if (o.runtime == "containerd" && o.endpoint.empty()) {
    if (auto split = cri::SplitPodCidr(o.pod_cidr, nodes); !split.ok()) {
      return absl::InvalidArgumentError(StrCat("--pod-cidr: ", split.status().message()));
    }
  }
  if (!o.images_dir.empty() && !IsCanonicalAbsolutePath(o.images_dir)) {
    return absl::InvalidArgumentError(StrCat("--images-dir \"", o.images_dir, "\": want a canonical absolute path"));
  }
  return absl::OkStatus();
}

std::string RuntimeEndpointFile(const std::string& data_dir, const std::string& node) {
  return StrCat(data_dir, "/nodes/", node, "/runtime-endpoint");
}

absl::StatusOr<std::unique_ptr<NodeRuntimes>> NodeRuntimes::Prepare(const RuntimeOptions& options,
                                                                    const std::string& data_dir,
                                                                    const std::vector<std::string>& nodes,
                                                                    Supervisor& supervisor) {
  BERTH_RETURN_IF_ERROR(ValidateRuntimeOptions(options, static_cast<int>(nodes.size())));
  std::unique_ptr<NodeRuntimes> r(new NodeRuntimes());
  r->images_dir_ = options.images_dir.empty() ? ExecutableDir() + "/images" : options.images_dir;
  std::vector<std::string> cidrs;
  if (options.runtime == "containerd" && options.endpoint.empty()) {
    if (::access("/usr/bin/containerd", X_OK) != 0 || ::access("/usr/bin/ctr", X_OK) != 0) {
      return absl::FailedPreconditionError(
          "containerd not found (/usr/bin/containerd, /usr/bin/ctr): run scripts/install-deps, or berth up "
          "--runtime=none");
    }
    for (const char* image : {"pause.tar", "toolbox.tar"}) {
      if (::access(StrCat(r->images_dir_, "/", image).c_str(), R_OK) != 0) {
        return absl::FailedPreconditionError(
            StrCat("berth's image ", r->images_dir_, "/", image, " is missing (built with berth; --images-dir)"));
      }
    }
    BERTH_ASSIGN_OR_RETURN(cidrs, cri::SplitPodCidr(options.pod_cidr, static_cast<int>(nodes.size())));
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    const std::string& node = nodes[i];
    const std::string file = RuntimeEndpointFile(data_dir, node);
    BERTH_RETURN_IF_ERROR(MakeDirs(StrCat(data_dir, "/nodes/", node), 0750));
    if (options.runtime == "none") {
      r->endpoints_[node] = "";
      (void)RemoveFileDurably(file);
      continue;
    }
    std::string endpoint = options.endpoint;
    if (endpoint.empty()) {
      cri::ContainerdSetup setup{.dir = StrCat(data_dir, "/containerd/", node), .pod_cidr = cidrs[i]};
      setup.restrict_oom_score_adj = cri::DefaultRestrictOomScoreAdj();
      BERTH_RETURN_IF_ERROR(cri::WriteContainerdFiles(setup));
      supervisor.Add({.name = "containerd/" + node,
                      .argv = cri::ContainerdArgv(setup, "/usr/bin/containerd"),
                      .log_file = setup.dir + "/containerd.log",
                      .pid_file = setup.dir + "/containerd.pid",
                      // containerd makes the containers' root file systems:
                      // a umask of berth's 077 would hide them from non-root
                      // container users.
                      .umask = 022});
      endpoint = setup.Endpoint();
      r->containerds_[node] = std::move(setup);
    }
    r->endpoints_[node] = endpoint;
    BERTH_RETURN_IF_ERROR(WriteFileAtomic(file, endpoint + "\n", 0600));
  }
  return r;
}

std::string NodeRuntimes::Endpoint(const std::string& node) const {
  auto it = endpoints_.find(node);
  return it == endpoints_.end() ? "" : it->second;
}

absl::Status NodeRuntimes::WaitReady(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (const auto& [node, endpoint] : endpoints_) {
    if (endpoint.empty()) continue;
    // Dial only once the socket is there: a first dial that fails puts the
    // channel into gRPC's reconnect backoff (seconds at a cold start).
    BERTH_ASSIGN_OR_RETURN(std::string socket, csi::ParseUnixEndpoint(endpoint));
    while (::access(socket.c_str(), F_OK) != 0 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
    BERTH_ASSIGN_OR_RETURN(auto runtime, cri::GrpcRuntime::Connect(endpoint, {.retry_for = absl::ZeroDuration()}));
    absl::Status answered;
    while (!(answered = runtime->Version().status()).ok() && absl::Now() < deadline)
      absl::SleepFor(absl::Milliseconds(20));
    if (!answered.ok()) {
      return absl::DeadlineExceededError(
          StrCat("the container runtime of node ", node, " at ", endpoint, " did not answer: ", answered.message()));
    }
    auto own = containerds_.find(node);
    if (own == containerds_.end()) continue;
    LinuxCommandRunner runner;
    const absl::Time started = absl::Now();
    BERTH_RETURN_IF_ERROR(
        cri::ImportImages(own->second.Socket(), {images_dir_ + "/pause.tar", images_dir_ + "/toolbox.tar"}, runner));
    spdlog::info("node {}: containerd on {}, images imported in {}", node, endpoint,
                 absl::FormatDuration(absl::Now() - started));
  }
  return absl::OkStatus();
}

std::string HostIp() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return "";
  std::string out;
  for (ifaddrs* i = list; i != nullptr && out.empty(); i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET || (i->ifa_flags & IFF_LOOPBACK)) continue;
    const std::string name = i->ifa_name;
    if (absl::StartsWith(name, "berth-") || absl::StartsWith(name, "veth") || absl::StartsWith(name, "cni")) continue;
    char buf[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, buf, sizeof(buf));
    out = buf;
  }
  ::freeifaddrs(list);
  return out;
}

}  // namespace berth::cli
