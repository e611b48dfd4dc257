#include "cri/containerd.h"

#include <arpa/inet.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>

#include "common/fs.h"
#include "common/hash.h"
#include "common/status.h"
#include "common/strings.h"
#include "nlohmann/json.hpp"

namespace berth::cri {
namespace {

struct Ipv4Cidr {
  uint32_t base = 0;  // host order
  int prefix = 0;
};

absl::StatusOr<Ipv4Cidr> ParseCidr(const std::string& cidr) {
  const size_t slash = cidr.find('/');
  if (slash == std::string::npos) {
    return absl::InvalidArgumentError(StrCat("pod CIDR \"", cidr, "\": want an IPv4 CIDR such as 10.88.0.0/16"));
  }
  in_addr addr{};
  if (::inet_pton(AF_INET, cidr.substr(0, slash).c_str(), &addr) != 1) {
    return absl::InvalidArgumentError(
        StrCat("pod CIDR \"", cidr, "\": not an IPv4 address (IPv6 pod networks are not supported)"));
  }
  int prefix = -1;
  const std::string p = cidr.substr(slash + 1);
  if (p.empty() || p.size() > 2 || p.find_first_not_of("0123456789") != std::string::npos ||
      (prefix = std::stoi(p)) > 32) {
    return absl::InvalidArgumentError(StrCat("pod CIDR \"", cidr, "\": bad prefix length"));
  }
  Ipv4Cidr out{.base = ntohl(addr.s_addr), .prefix = prefix};
  const uint32_t mask = prefix == 0 ? 0 : ~uint32_t{0} << (32 - prefix);
  if ((out.base & ~mask) != 0) {
    return absl::InvalidArgumentError(StrCat("pod CIDR \"", cidr, "\": host bits are set"));
  }
  return out;
}

std::string FormatCidr(uint32_t base, int prefix) {
  in_addr addr{.s_addr = htonl(base)};
  char buf[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &addr, buf, sizeof(buf));
  return StrCat(buf, "/", prefix);
}

// A path that goes into TOML and JSON strings unescaped.
bool PlainPath(const std::string& path) {
  for (unsigned char c : path) {
    if (c < 0x20 || c == '"' || c == '\\' || c == 0x7f) return false;
  }
  return true;
}

}  // namespace

std::string ContainerdSetup::Bridge() const { return "berth-" + Sha256Hex(dir).substr(0, 8); }

bool DefaultRestrictOomScoreAdj() {
  // CapEff in /proc/self/status; CAP_SYS_RESOURCE is bit 24.
  auto status = ReadFile("/proc/self/status");
  if (!status.ok()) return false;
  const size_t at = status->find("CapEff:");
  if (at == std::string::npos) return false;
  const uint64_t caps = std::strtoull(status->c_str() + at + 7, nullptr, 16);
  return (caps & (uint64_t{1} << 24)) == 0;
}

absl::Status CheckContainerdSetup(const ContainerdSetup& setup) {
  if (!IsCanonicalAbsolutePath(setup.dir) || !PlainPath(setup.dir)) {
    return absl::InvalidArgumentError(StrCat("containerd directory \"", setup.dir,
                                             "\": want a canonical absolute path without quotes or backslashes"));
  }
  // sockaddr_un, with room for containerd's ".ttrpc" socket beside it.
  if (setup.Socket().size() + 6 >= sizeof(sockaddr_un::sun_path)) {
    return absl::InvalidArgumentError(StrCat("containerd socket path ", setup.Socket(),
                                             " is too long for a unix socket (", sizeof(sockaddr_un::sun_path) - 7,
                                             " characters at most): use a shorter --data-dir"));
  }
  BERTH_ASSIGN_OR_RETURN(Ipv4Cidr cidr, ParseCidr(setup.pod_cidr));
  if (cidr.prefix > 28) {
    return absl::InvalidArgumentError(StrCat("pod CIDR ", setup.pod_cidr, " is too small (at most /28 per node)"));
  }
  if (!PlainPath(setup.cni_bin_dir) || !PlainPath(setup.sandbox_image)) {
    return absl::InvalidArgumentError("CNI plugin directory and sandbox image must not contain quotes or backslashes");
  }
  return absl::OkStatus();
}

std::string ContainerdConfigToml(const ContainerdSetup& s) {
  // Version 2 of containerd's config. Only what berth needs differs from
  // the defaults: everything under `dir`, no TCP listeners, the CRI plugin
  // with the overlayfs snapshotter, runc v2 shims, berth's sandbox image and
  // CNI configuration, and network namespaces under the state directory.
  // Snapshotters berth does not use are disabled (they probe the host).
  return StrCat(R"(# Written by berth at every start; edits are overwritten.
version = 2
root = ")",
                s.dir, R"(/root"
state = ")",
                s.dir, R"(/state"
oom_score = 0
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = ")",
                s.Socket(), R"("

[ttrpc]
  address = ")",
                s.Socket(), R"(.ttrpc"

[debug]
  address = ""
  level = "info"

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = ")",
                s.dir, R"(/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = ")",
                s.sandbox_image, R"("
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  restrict_oom_score_adj = )",
                s.restrict_oom_score_adj ? "true" : "false", R"(
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = ")",
                s.dir, R"(/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = ")",
                s.cni_bin_dir, R"("
    conf_dir = ")",
                s.CniConfDir(), R"("
    max_conf_num = 1
)");
}

std::string CniConflist(const ContainerdSetup& s) {
  using nlohmann::json;
  // bridge: one Linux bridge per node with the subnet's first address
  // (isGateway), so the host reaches its pods and pods reach each other;
  // no masquerading (pods are not given a way out, and the host's iptables
  // stay untouched). host-local hands out the addresses, its records under
  // `dir`. containerd adds the loopback plugin itself.
  json conf = {
      {"cniVersion", "0.4.0"},
      {"name", s.Bridge()},
      {"plugins", json::array({{{"type", "bridge"},
                                {"bridge", s.Bridge()},
                                {"isGateway", true},
                                {"ipMasq", false},
                                {"hairpinMode", true},
                                {"ipam",
                                 {{"type", "host-local"},
                                  {"ranges", json::array({json::array({{{"subnet", s.pod_cidr}}})})},
                                  {"routes", json::array({{{"dst", "0.0.0.0/0"}}})},
                                  {"dataDir", s.IpamDir()}}}}})},
  };
  return conf.dump(2) + "\n";
}

absl::Status WriteContainerdFiles(const ContainerdSetup& setup) {
  BERTH_RETURN_IF_ERROR(CheckContainerdSetup(setup));
  for (const std::string& d :
       {setup.dir, setup.dir + "/root", setup.dir + "/state", setup.CniConfDir(), setup.IpamDir()}) {
    BERTH_RETURN_IF_ERROR(MakeDirs(d, 0700));
  }
  BERTH_RETURN_IF_ERROR(WriteFileAtomic(setup.Config(), ContainerdConfigToml(setup), 0600));
  return WriteFileAtomic(setup.CniConfDir() + "/10-berth.conflist", CniConflist(setup), 0600);
}

std::vector<std::string> ContainerdArgv(const ContainerdSetup& setup, const std::string& binary) {
  return {binary, "--config", setup.Config()};
}

absl::Status ImportImages(const std::string& socket, const std::vector<std::string>& archives, CommandRunner& runner,
                          absl::Duration timeout) {
  for (const std::string& archive : archives) {
    std::vector<std::string> argv = {"ctr",    "--address", socket,          "--namespace", "k8s.io",
                                     "images", "import",    "--snapshotter", "overlayfs",   archive};
    BERTH_ASSIGN_OR_RETURN(CommandResult r, runner.Run(argv, timeout));
    if (r.exit_code != 0) {
      return absl::FailedPreconditionError(
          StrCat("importing ", archive, ": ", JoinArgv(argv), " exited ", r.exit_code, ": ", r.output));
    }
  }
  return absl::OkStatus();
}

absl::Status RemoveImageName(const std::string& socket, const std::string& name, CommandRunner& runner) {
  std::vector<std::string> argv = {"ctr", "--address", socket, "--namespace", "k8s.io", "images", "rm", name};
  BERTH_ASSIGN_OR_RETURN(CommandResult r, runner.Run(argv, absl::Minutes(1)));
  if (r.exit_code != 0) {
    return absl::FailedPreconditionError(
        StrCat("removing ", name, ": ", JoinArgv(argv), " exited ", r.exit_code, ": ", r.output));
  }
  return absl::OkStatus();
}

absl::Status RemoveAllSandboxes(Runtime& runtime, const std::map<std::string, std::string>& labels) {
  v1::PodSandboxFilter filter;
  for (const auto& [k, v] : labels) (*filter.mutable_label_selector())[k] = v;
  BERTH_ASSIGN_OR_RETURN(std::vector<v1::PodSandbox> sandboxes, runtime.ListPodSandbox(filter));
  absl::Status result;
  for (const auto& sb : sandboxes) {
    absl::Status st = runtime.StopPodSandbox(sb.id());
    if (st.ok() || absl::IsNotFound(st)) st = runtime.RemovePodSandbox(sb.id());
    if (!st.ok() && !absl::IsNotFound(st)) result.Update(st);
  }
  return result;
}

absl::Status DeleteLink(const std::string& name, CommandRunner& runner) {
  if (::access(StrCat("/sys/class/net/", name).c_str(), F_OK) != 0) return absl::OkStatus();
  std::vector<std::string> argv = {"ip", "link", "delete", name};
  BERTH_ASSIGN_OR_RETURN(CommandResult r, runner.Run(argv, absl::Seconds(30)));
  if (r.exit_code != 0 && ::access(StrCat("/sys/class/net/", name).c_str(), F_OK) == 0) {
    return absl::InternalError(StrCat(JoinArgv(argv), " exited ", r.exit_code, ": ", r.output));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> SplitPodCidr(const std::string& cidr, int n) {
  if (n < 1) return absl::InvalidArgumentError("SplitPodCidr: n must be positive");
  BERTH_ASSIGN_OR_RETURN(Ipv4Cidr c, ParseCidr(cidr));
  int bits = 0;
  while ((1 << bits) < n) ++bits;
  const int prefix = c.prefix + bits;
  if (prefix > 28) {
    return absl::InvalidArgumentError(
        StrCat("--pod-cidr ", cidr, " is too small for ", n, " nodes (each node needs at least a /28)"));
  }
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(FormatCidr(c.base + (static_cast<uint32_t>(i) << (32 - prefix)), prefix));
  }
  return out;
}

}  // namespace berth::cri
