// berth's own containerd: the files it runs on and the command that starts
// it. `berth up` runs one containerd per node (each node has its own pod
// network), never the host's system containerd: root, state, socket, CNI
// configuration and IP allocations all live under one directory,
// <data>/containerd/<node>/:
//
//   config.toml          written by berth at every start (version 2 format)
//   containerd.sock      the gRPC socket (CRI: runtime.v1) + .ttrpc
//   root/ state/         containerd's content, snapshots (overlayfs), metadata
//   cni/net.d/10-berth.conflist   bridge + host-local, written by berth
//   cni/ipam/            host-local's allocations
//   containerd.log, containerd.pid
//
//   ContainerdSetup setup{.dir = ..., .pod_cidr = "10.88.0.0/24", ...};
//   BERTH_RETURN_IF_ERROR(WriteContainerdFiles(setup));
//   supervisor.Add({.argv = ContainerdArgv(setup), ...});
//   ... once setup.Socket() answers:
//   BERTH_RETURN_IF_ERROR(ImportImages(setup.Socket(), {"pause.tar", "toolbox.tar"}, runner));
//
// Containers keep running when containerd stops (each has its shim); a new
// containerd on the same directory finds them again.
//
// Thread-safety: plain functions over values; thread-safe.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/exec.h"
#include "cri/runtime.h"

namespace berth::cri {

// The sandbox image berth builds (bench and tests name it too).
inline constexpr char kPauseImage[] = "berth.local/pause:1";
inline constexpr char kToolboxImage[] = "berth.local/toolbox:1";

struct ContainerdSetup {
  std::string dir{};       // canonical, absolute; the socket path must fit in a sockaddr_un
  std::string pod_cidr{};  // this node's pod subnet, e.g. "10.88.0.0/24"
  std::string sandbox_image = kPauseImage;
  std::string cni_bin_dir = "/usr/lib/cni";
  // containerd's restrict_oom_score_adj: containers never get an OOM score
  // below containerd's own. Needed where berth runs without CAP_SYS_RESOURCE
  // (some sandboxed or nested environments), which cannot lower a score;
  // see DefaultRestrictOomScoreAdj().
  bool restrict_oom_score_adj = false;

  std::string Config() const { return dir + "/config.toml"; }
  std::string Socket() const { return dir + "/containerd.sock"; }
  std::string Endpoint() const { return "unix://" + Socket(); }
  std::string CniConfDir() const { return dir + "/cni/net.d"; }
  std::string IpamDir() const { return dir + "/cni/ipam"; }
  // The bridge (at most 15 characters, unique per directory) and the CNI
  // network name.
  std::string Bridge() const;
};

// True when this process cannot lower OOM scores (no CAP_SYS_RESOURCE).
bool DefaultRestrictOomScoreAdj();

// INVALID_ARGUMENT when the directory or CIDR is unusable (naming it).
absl::Status CheckContainerdSetup(const ContainerdSetup& setup);

// The texts of config.toml and the CNI conflist.
std::string ContainerdConfigToml(const ContainerdSetup& setup);
std::string CniConflist(const ContainerdSetup& setup);

// Creates the directories and (re)writes both files atomically.
absl::Status WriteContainerdFiles(const ContainerdSetup& setup);

// containerd's command line (`binary` found in the fixed system PATH when
// not absolute).
std::vector<std::string> ContainerdArgv(const ContainerdSetup& setup, const std::string& binary = "containerd");

// Imports image archives (docker-archive or OCI layout tar, several images
// each) into the CRI's namespace (k8s.io) of the containerd on `socket`,
// unpacked for overlayfs, with containerd's `ctr`. A failed import is
// FAILED_PRECONDITION with ctr's message.
absl::Status ImportImages(const std::string& socket, const std::vector<std::string>& archives, CommandRunner& runner,
                          absl::Duration timeout = absl::Minutes(5));

// Removes the name `name` (as containerd stores it: docker.io/library/x:1)
// from the CRI's namespace of the containerd on `socket`, and only it: the
// image and its other names stay (CRI's RemoveImage removes an image with
// every name it has). FAILED_PRECONDITION with ctr's message on failure.
absl::Status RemoveImageName(const std::string& socket, const std::string& name, CommandRunner& runner);

// Stops and removes every pod sandbox of `runtime` whose labels include
// `labels` (all of them when empty), and with them their containers, network
// namespaces and IPs. Returns the first error after trying them all.
absl::Status RemoveAllSandboxes(Runtime& runtime, const std::map<std::string, std::string>& labels);

// Deletes the network interface `name` (the bridge the CNI bridge plugin
// made); OK when it does not exist.
absl::Status DeleteLink(const std::string& name, CommandRunner& runner);

// Splits an IPv4 CIDR into `n` equal subnets (as few bits as needed), the
// i-th for node i. INVALID_ARGUMENT for IPv6, malformed CIDRs, or subnets
// smaller than /28.
absl::StatusOr<std::vector<std::string>> SplitPodCidr(const std::string& cidr, int n);

}  // namespace berth::cri
