// deploy/kubernetes and its overlay for Kubernetes 1.26–1.29
// (overlays/k8s-1.26), each rendered by `kubectl kustomize` (Debian's kubectl
// 1.20 when installed, as scripts/install-deps sets it up) and checked for the
// wiring that a typo would silently break on a real cluster: the CSI socket
// every sidecar dials, the driver name everywhere, kubelet's plugin and
// registration paths, mount propagation that needs no preparation of the
// node, privileges, RBAC per sidecar, pinned images, each sidecar's flags
// known to its version; and yamllint over the sources.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "common/exec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "manifests.h"

#ifndef KUBECTL_BINARY
#define KUBECTL_BINARY ""
#endif

namespace berth::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::UnorderedElementsAreArray;

constexpr char kDriver[] = "local.csi.berth.io";
constexpr char kNamespace[] = "berth-system";
constexpr char kServiceAccount[] = "berth-csi-node";
constexpr char kKubeletRoot[] = "/var/lib/kubelet";
const std::vector<std::string> kSidecars = {"csi-provisioner", "csi-snapshotter", "csi-resizer",
                                            "node-driver-registrar", "liveness-probe"};

// The renders under test, by directory below deploy/kubernetes.
const std::vector<std::string> kRenders = {"", "overlays/k8s-1.26"};

class ManifestsTest : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    kubectl_ = FindKubectl(KUBECTL_BINARY);
    if (kubectl_.empty()) return;
    LinuxCommandRunner runner;
    for (const std::string& dir : kRenders) {
      auto r = runner.Run({kubectl_, "kustomize", std::string(BERTH_SOURCE_DIR) + "/deploy/kubernetes/" + dir},
                          absl::Seconds(60));
      if (!r.ok() || r->exit_code != 0) {
        render_errors_[dir] = r.ok() ? r->output : r.status().ToString();
        continue;
      }
      docs_[dir] = LoadDocuments(r->output);
    }
  }
  void SetUp() override {
    if (kubectl_.empty()) {
      GTEST_SKIP() << "no kubectl (scripts/install-deps installs Debian's kubernetes-client); "
                      "set BERTH_KUBECTL to one";
    }
    ASSERT_TRUE(docs_.count(GetParam())) << "kubectl kustomize deploy/kubernetes/" << GetParam() << " failed:\n"
                                         << render_errors_[GetParam()];
    all_ = &docs_[GetParam()];
    auto ds = OfKind(*all_, "DaemonSet");
    ASSERT_EQ(ds.size(), 1u);
    pod_ = ds[0]["spec"]["template"]["spec"];
    driver_ = Container(pod_, "berth-csi");
    ASSERT_TRUE(driver_) << "no berth-csi container";
  }

  // The single object of `kind` (fails the test if not exactly one).
  YAML::Node One(const std::string& kind) {
    auto all = OfKind(*all_, kind);
    EXPECT_EQ(all.size(), 1u) << kind;
    return all.empty() ? YAML::Node() : all[0];
  }

  static inline std::string kubectl_;
  static inline std::map<std::string, std::string> render_errors_;
  static inline std::map<std::string, std::vector<YAML::Node>> docs_;
  const std::vector<YAML::Node>* all_ = nullptr;
  YAML::Node pod_;
  YAML::Node driver_;
};

TEST_P(ManifestsTest, RendersEveryObjectOnce) {
  std::multiset<std::string> kinds;
  for (const auto& d : *all_) kinds.insert(Str(d["kind"]));
  EXPECT_EQ(kinds,
            (std::multiset<std::string>{"Namespace", "ServiceAccount", "ClusterRole", "ClusterRole", "ClusterRole",
                                        "ClusterRole", "ClusterRoleBinding", "ClusterRoleBinding", "ClusterRoleBinding",
                                        "ClusterRoleBinding", "Role", "Role", "RoleBinding", "RoleBinding", "CSIDriver",
                                        "DaemonSet", "StorageClass", "VolumeSnapshotClass"}));
  // Namespaced objects live in berth-system; cluster-scoped ones name none.
  const std::set<std::string> cluster_scoped = {"Namespace", "ClusterRole",  "ClusterRoleBinding",
                                                "CSIDriver", "StorageClass", "VolumeSnapshotClass"};
  for (const auto& d : *all_) {
    const std::string kind = Str(d["kind"]);
    EXPECT_EQ(Str(d["metadata"]["namespace"]), cluster_scoped.count(kind) ? "" : kNamespace)
        << kind << " " << Str(d["metadata"]["name"]);
  }
  EXPECT_EQ(Str(One("Namespace")["metadata"]["name"]), kNamespace);
  EXPECT_EQ(Str(One("Namespace")["metadata"]["labels"]["pod-security.kubernetes.io/enforce"]), "privileged");
}

TEST_P(ManifestsTest, DriverNameIsTheSameEverywhere) {
  EXPECT_EQ(Str(One("CSIDriver")["metadata"]["name"]), kDriver);
  EXPECT_EQ(Str(One("StorageClass")["provisioner"]), kDriver);
  EXPECT_EQ(Str(One("VolumeSnapshotClass")["driver"]), kDriver);
  // berth-csi's --driver-name, when given, is the same (else its default is).
  EXPECT_EQ(Flag(driver_, "--driver-name").value_or(kDriver), kDriver);
  // kubelet finds the socket under plugins/<driver name>/.
  auto registrar = Container(pod_, "node-driver-registrar");
  EXPECT_EQ(Flag(registrar, "--kubelet-registration-path"),
            std::string(kKubeletRoot) + "/plugins/" + kDriver + "/csi.sock");
}

TEST_P(ManifestsTest, EverySidecarDialsTheDriversSocket) {
  auto endpoint = Flag(driver_, "--endpoint");
  ASSERT_TRUE(endpoint.has_value());
  ASSERT_TRUE(endpoint->starts_with("unix://")) << *endpoint;
  auto served = Resolve(pod_, driver_, endpoint->substr(7));
  ASSERT_TRUE(served) << "berth-csi's socket is on no volume: " << *endpoint;
  // The socket lives on the host where the registrar tells kubelet it is.
  EXPECT_EQ(served->host_path, std::string(kKubeletRoot) + "/plugins/" + kDriver + "/csi.sock");
  EXPECT_EQ(served->host_path, Flag(Container(pod_, "node-driver-registrar"), "--kubelet-registration-path"));

  for (const std::string& name : kSidecars) {
    SCOPED_TRACE(name);
    auto c = Container(pod_, name);
    ASSERT_TRUE(c) << "missing sidecar";
    auto address = Flag(c, "--csi-address");
    ASSERT_TRUE(address.has_value());
    std::string path = address->starts_with("unix://") ? address->substr(7) : *address;
    auto dialed = Resolve(pod_, c, path);
    ASSERT_TRUE(dialed) << *address << " is on no volume of the container";
    EXPECT_EQ(dialed->volume, served->volume);
    EXPECT_EQ(dialed->relative, served->relative);
  }
}

TEST_P(ManifestsTest, KubeletPathsAndMountPropagation) {
  // Staging and target paths arrive as host paths: the kubelet directory is
  // mounted at the same path, Bidirectional so mounts reach the host.
  EXPECT_EQ(Flag(driver_, "--kubelet-root").value_or(kKubeletRoot), kKubeletRoot);
  auto kubelet = Resolve(pod_, driver_, kKubeletRoot);
  ASSERT_TRUE(kubelet);
  EXPECT_EQ(kubelet->relative, "");
  EXPECT_EQ(kubelet->host_path, kKubeletRoot);
  EXPECT_EQ(Str(kubelet->mount["mountPropagation"]), "Bidirectional");

  // The pool image's mount outlives container restarts, so it must reach
  // the host: it lives in kubelet's directory for this driver, under the
  // Bidirectional kubelet mount.
  for (const char* flag : {"--pool", "--pool-image"}) {
    auto p = Flag(driver_, flag);
    ASSERT_TRUE(p.has_value()) << flag;
    auto pool = Resolve(pod_, driver_, *p);
    ASSERT_TRUE(pool) << flag << " is not on a volume: it would vanish with the container";
    EXPECT_TRUE(pool->host_path.starts_with(std::string(kKubeletRoot) + "/plugins/" + kDriver + "/"))
        << flag << " " << pool->host_path;
    EXPECT_EQ(Str(pool->mount["mountPropagation"]), "Bidirectional") << flag;
  }
  // The pool image is allocated in full (no --pool-sparse), and the pool's
  // pressure reaches the Node (--node-conditions, granted below).
  std::set<std::string> args;
  for (const auto& a : driver_["args"]) args.insert(Str(a));
  EXPECT_FALSE(args.contains("--pool-sparse"));
  EXPECT_TRUE(args.contains("--node-conditions"));
  // Loop devices appear under the host's /dev.
  auto dev = Resolve(pod_, driver_, "/dev/loop-control");
  ASSERT_TRUE(dev);
  EXPECT_EQ(dev->host_path, "/dev/loop-control");

  // Registration: the registrar's /registration is kubelet's plugins_registry.
  auto registrar = Container(pod_, "node-driver-registrar");
  auto reg = Resolve(pod_, registrar, "/registration");
  ASSERT_TRUE(reg);
  EXPECT_EQ(reg->host_path, std::string(kKubeletRoot) + "/plugins_registry");
}

TEST_P(ManifestsTest, NeedsNoPreparationOfTheNode) {
  // Bidirectional propagation needs the host path on a shared mount; on a
  // stock node only kubelet's root is one (kubelet makes it rshared). So
  // every Bidirectional mount must come from inside kubelet's root.
  for (const auto& c : pod_["containers"]) {
    for (const auto& m : c["volumeMounts"]) {
      if (Str(m["mountPropagation"]) != "Bidirectional") continue;
      auto r = Resolve(pod_, c, Str(m["mountPath"]));
      ASSERT_TRUE(r);
      EXPECT_TRUE(r->host_path == kKubeletRoot || r->host_path.starts_with(std::string(kKubeletRoot) + "/"))
          << Str(c["name"]) << " mounts " << r->host_path << " Bidirectional: not a shared mount on a stock node";
    }
  }
  // Every hostPath is one that exists on every node or is created inside
  // kubelet's root.
  for (const auto& v : pod_["volumes"]) {
    if (!v["hostPath"]) continue;
    const std::string path = Str(v["hostPath"]["path"]);
    EXPECT_TRUE(path == "/dev" || path == kKubeletRoot || path.starts_with(std::string(kKubeletRoot) + "/"))
        << "hostPath " << path;
  }
}

TEST_P(ManifestsTest, OnlyTheDriverIsPrivileged) {
  for (const auto& c : pod_["containers"]) {
    const std::string name = Str(c["name"]);
    const bool privileged = c["securityContext"] && c["securityContext"]["privileged"].as<bool>(false);
    EXPECT_EQ(privileged, name == "berth-csi") << name;
    for (const auto& m : c["volumeMounts"]) {
      // Bidirectional propagation needs a privileged container.
      if (Str(m["mountPropagation"]) == "Bidirectional") {
        EXPECT_EQ(name, "berth-csi") << Str(m["name"]);
      }
    }
  }
  EXPECT_FALSE(pod_["hostNetwork"].as<bool>(false));
  EXPECT_FALSE(pod_["hostPID"].as<bool>(false));
}

TEST_P(ManifestsTest, NodeIdentityComesFromTheDownwardApi) {
  // berth-csi's --node-id from NODE_ID = spec.nodeName, like the sidecars'
  // NODE_NAME: the provisioner compares it with the selected-node annotation.
  EXPECT_FALSE(Flag(driver_, "--node-id").has_value()) << "--node-id must come from NODE_ID";
  EXPECT_EQ(Env(driver_, "NODE_ID"), "fieldRef:spec.nodeName");
  for (const char* name : {"csi-provisioner", "csi-snapshotter"}) {
    EXPECT_EQ(Env(Container(pod_, name), "NODE_NAME"), "fieldRef:spec.nodeName") << name;
  }
  // Capacity owner lookup (--capacity-ownerref-level=1: pod -> DaemonSet).
  auto provisioner = Container(pod_, "csi-provisioner");
  EXPECT_EQ(Env(provisioner, "POD_NAME"), "fieldRef:metadata.name");
  EXPECT_EQ(Env(provisioner, "NAMESPACE"), "fieldRef:metadata.namespace");
}

TEST_P(ManifestsTest, SidecarsRunInDistributedMode) {
  auto provisioner = Container(pod_, "csi-provisioner");
  EXPECT_EQ(Flag(provisioner, "--node-deployment"), "");
  EXPECT_EQ(Flag(provisioner, "--enable-capacity"), "");
  EXPECT_EQ(Flag(provisioner, "--capacity-ownerref-level"), "1");
  EXPECT_EQ(Flag(provisioner, "--strict-topology"), "");
  EXPECT_EQ(Flag(provisioner, "--extra-create-metadata"), "");
  EXPECT_FALSE(Flag(provisioner, "--leader-election").has_value());
  auto snapshotter = Container(pod_, "csi-snapshotter");
  EXPECT_EQ(Flag(snapshotter, "--node-deployment"), "");
  EXPECT_FALSE(Flag(snapshotter, "--leader-election").has_value());
  // The resizer has no node mode: one leader, and berth-csi advertises
  // node-only expansion so that leader never calls ControllerExpandVolume
  // for a volume on another node.
  EXPECT_EQ(Flag(Container(pod_, "csi-resizer"), "--leader-election"), "");
  EXPECT_EQ(Flag(driver_, "--node-expansion-only"), "");
}

TEST_P(ManifestsTest, ProbesReachTheirServers) {
  // berth-csi's liveness is the livenessprobe sidecar's --health-port.
  std::map<std::string, int> ports;
  for (const auto& p : driver_["ports"]) ports[Str(p["name"])] = p["containerPort"].as<int>();
  const std::string liveness_port = Str(driver_["livenessProbe"]["httpGet"]["port"]);
  ASSERT_TRUE(ports.count(liveness_port)) << liveness_port;
  EXPECT_EQ(Flag(Container(pod_, "liveness-probe"), "--health-port"), std::to_string(ports[liveness_port]));
  // Readiness is berth-csi's own /healthz on --http-endpoint.
  const std::string readiness_port = Str(driver_["readinessProbe"]["httpGet"]["port"]);
  ASSERT_TRUE(ports.count(readiness_port)) << readiness_port;
  EXPECT_EQ(Str(driver_["readinessProbe"]["httpGet"]["path"]), "/healthz");
  auto http = Flag(driver_, "--http-endpoint");
  ASSERT_TRUE(http.has_value());
  EXPECT_TRUE(http->ends_with(":" + std::to_string(ports[readiness_port]))) << *http;
  EXPECT_EQ(Env(driver_, "POD_IP"), "fieldRef:status.podIP");
}

TEST_P(ManifestsTest, ImagesArePinned) {
  for (const auto& c : pod_["containers"]) {
    const std::string image = Str(c["image"]);
    SCOPED_TRACE(image);
    const size_t slash = image.rfind('/');
    const std::string last = slash == std::string::npos ? image : image.substr(slash + 1);
    const size_t colon = last.find(':');
    ASSERT_NE(colon, std::string::npos) << "untagged image";
    const std::string tag = last.substr(colon + 1);
    EXPECT_NE(tag, "latest");
    EXPECT_FALSE(tag.empty());
    if (Str(c["name"]) != "berth-csi") {
      EXPECT_TRUE(image.starts_with("registry.k8s.io/sig-storage/"));
      EXPECT_TRUE(tag.size() > 1 && tag[0] == 'v' && std::count(tag.begin(), tag.end(), '.') == 2) << "want vX.Y.Z";
    }
  }
}

// What each pinned sidecar release accepts: the flags its cmd/ registers at
// that tag (read from the sources; klog's --v is everyone's). A flag the
// release does not know makes the container exit at start.
struct SidecarRelease {
  std::string tag;
  std::set<std::string> flags;
};

const std::map<std::string, std::map<std::string, SidecarRelease>>& PinnedReleases() {
  static const auto* pinned = new std::map<std::string, std::map<std::string, SidecarRelease>>{
      {"overlays/k8s-1.26",
       {{"csi-provisioner",
         {"v4.0.1",
          {"master",
           "kubeconfig",
           "csi-address",
           "volume-name-prefix",
           "volume-name-uuid-length",
           "version",
           "retry-interval-start",
           "retry-interval-max",
           "worker-threads",
           "cloning-protection-threads",
           "capacity-threads",
           "timeout",
           "leader-election",
           "leader-election-namespace",
           "strict-topology",
           "immediate-topology",
           "extra-create-metadata",
           "metrics-address",
           "http-endpoint",
           "metrics-path",
           "enable-pprof",
           "leader-election-lease-duration",
           "leader-election-renew-deadline",
           "leader-election-retry-period",
           "default-fstype",
           "kube-api-qps",
           "kube-api-burst",
           "kube-api-capacity-qps",
           "kube-api-capacity-burst",
           "enable-capacity",
           "capacity-for-immediate-binding",
           "capacity-poll-interval",
           "capacity-ownerref-level",
           "node-deployment",
           "node-deployment-immediate-binding",
           "node-deployment-base-delay",
           "node-deployment-max-delay",
           "controller-publish-readonly",
           "prevent-volume-mode-conversion",
           "feature-gates"}}},
        {"csi-snapshotter",
         {"v7.0.2",
          {"kubeconfig",
           "csi-address",
           "resync-period",
           "snapshot-name-prefix",
           "snapshot-name-uuid-length",
           "version",
           "worker-threads",
           "timeout",
           "extra-create-metadata",
           "leader-election",
           "leader-election-namespace",
           "leader-election-lease-duration",
           "leader-election-renew-deadline",
           "leader-election-retry-period",
           "kube-api-qps",
           "kube-api-burst",
           "metrics-address",
           "http-endpoint",
           "metrics-path",
           "retry-interval-start",
           "retry-interval-max",
           "node-deployment",
           "enable-volume-group-snapshots",
           "groupsnapshot-name-prefix",
           "groupsnapshot-name-uuid-length"}}},
        {"csi-resizer",
         {"v1.10.1",
          {"master",
           "kubeconfig",
           "resync-period",
           "workers",
           "csi-address",
           "timeout",
           "version",
           "retry-interval-start",
           "retry-interval-max",
           "leader-election",
           "leader-election-namespace",
           "leader-election-lease-duration",
           "leader-election-renew-deadline",
           "leader-election-retry-period",
           "metrics-address",
           "http-endpoint",
           "metrics-path",
           "kube-api-qps",
           "kube-api-burst",
           "handle-volume-inuse-error"}}},
        {"node-driver-registrar",
         {"v2.10.1",
          {"connection-timeout", "timeout", "csi-address", "plugin-registration-path", "kubelet-registration-path",
           "health-port", "http-endpoint", "version", "mode", "enable-pprof"}}},
        {"liveness-probe",
         {"v2.12.0",
          {"probe-timeout", "csi-address", "health-port", "metrics-address", "http-endpoint", "metrics-path"}}}}},
  };
  return *pinned;
}

std::string TagOf(const YAML::Node& container) {
  const std::string image = Str(container["image"]);
  const size_t colon = image.rfind(':');
  return colon == std::string::npos ? "" : image.substr(colon + 1);
}

TEST_P(ManifestsTest, SidecarReleasesKnowTheirFlags) {
  auto pinned = PinnedReleases().find(GetParam());
  if (pinned == PinnedReleases().end()) GTEST_SKIP() << "no release table for this render";
  for (const auto& [name, release] : pinned->second) {
    SCOPED_TRACE(name);
    auto c = Container(pod_, name);
    ASSERT_TRUE(c);
    EXPECT_EQ(TagOf(c), release.tag);
    for (const auto& a : c["args"]) {
      std::string flag = Str(a);
      ASSERT_TRUE(flag.starts_with("--")) << flag;
      flag = flag.substr(2, flag.find('=') == std::string::npos ? std::string::npos : flag.find('=') - 2);
      EXPECT_TRUE(flag == "v" || release.flags.count(flag)) << "--" << flag << " unknown to " << release.tag;
    }
  }
}

TEST_P(ManifestsTest, ProvisionerHasTopologyOn) {
  // external-provisioner before v5.0.0 has its Topology gate off: PVs would
  // get no node affinity, and distributed snapshotting no node for a
  // snapshot's content.
  auto provisioner = Container(pod_, "csi-provisioner");
  const std::string tag = TagOf(provisioner);
  ASSERT_TRUE(tag.size() > 1 && tag[0] == 'v') << tag;
  if (std::stoi(tag.substr(1)) < 5) {
    EXPECT_EQ(Flag(provisioner, "--feature-gates"), "Topology=true") << tag;
  } else {
    EXPECT_FALSE(Flag(provisioner, "--feature-gates").has_value()) << tag << " has Topology on by default";
  }
}

TEST_P(ManifestsTest, CsiDriverAndClasses) {
  YAML::Node spec = One("CSIDriver")["spec"];
  EXPECT_FALSE(spec["attachRequired"].as<bool>(true));
  EXPECT_TRUE(spec["storageCapacity"].as<bool>(false));
  EXPECT_EQ(Str(spec["fsGroupPolicy"]), "File");
  ASSERT_EQ(spec["volumeLifecycleModes"].size(), 1u);
  EXPECT_EQ(Str(spec["volumeLifecycleModes"][0]), "Persistent");
  YAML::Node sc = One("StorageClass");
  EXPECT_EQ(Str(sc["volumeBindingMode"]), "WaitForFirstConsumer");
  EXPECT_TRUE(sc["allowVolumeExpansion"].as<bool>(false));
  EXPECT_EQ(Str(One("VolumeSnapshotClass")["apiVersion"]), "snapshot.storage.k8s.io/v1");
}

// (apiGroup, resource, verb, scope): scope "cluster" for a ClusterRole,
// "namespace" for a Role in berth-system.
using Grant = std::tuple<std::string, std::string, std::string, std::string>;

struct SidecarRule {
  std::string group;
  std::string resource;
  std::vector<std::string> verbs;
  std::string scope;
};

// What each sidecar needs in this deployment (see rbac.yaml's header for how
// this follows the sidecars' own rbac.yaml at the pinned versions).
const std::map<std::string, std::vector<SidecarRule>>& RequiredRules() {
  static const auto* rules = new std::map<std::string, std::vector<SidecarRule>>{
      {"csi-provisioner",
       {{"", "persistentvolumes", {"get", "list", "watch", "create", "patch", "delete"}, "cluster"},
        {"", "persistentvolumeclaims", {"get", "list", "watch", "update"}, "cluster"},
        {"storage.k8s.io", "storageclasses", {"get", "list", "watch"}, "cluster"},
        {"", "events", {"list", "watch", "create", "update", "patch"}, "cluster"},
        {"snapshot.storage.k8s.io", "volumesnapshots", {"get", "list", "watch", "update"}, "cluster"},
        {"snapshot.storage.k8s.io", "volumesnapshotcontents", {"get", "list"}, "cluster"},
        {"storage.k8s.io", "csinodes", {"get", "list", "watch"}, "cluster"},
        {"", "nodes", {"get", "list", "watch"}, "cluster"},
        {"storage.k8s.io", "volumeattachments", {"get", "list", "watch"}, "cluster"},
        {"storage.k8s.io",
         "csistoragecapacities",
         {"get", "list", "watch", "create", "update", "patch", "delete"},
         "namespace"},
        {"", "pods", {"get"}, "namespace"}}},
      {"csi-snapshotter",
       {{"", "events", {"list", "watch", "create", "update", "patch"}, "cluster"},
        {"snapshot.storage.k8s.io", "volumesnapshotclasses", {"get", "list", "watch"}, "cluster"},
        {"snapshot.storage.k8s.io", "volumesnapshotcontents", {"get", "list", "watch", "update", "patch"}, "cluster"},
        {"snapshot.storage.k8s.io", "volumesnapshotcontents/status", {"update", "patch"}, "cluster"}}},
      {"csi-resizer",
       {{"", "persistentvolumes", {"get", "list", "watch", "patch"}, "cluster"},
        {"", "persistentvolumeclaims", {"get", "list", "watch"}, "cluster"},
        {"", "pods", {"get", "list", "watch"}, "cluster"},
        {"", "persistentvolumeclaims/status", {"patch"}, "cluster"},
        {"", "events", {"list", "watch", "create", "update", "patch"}, "cluster"},
        {"storage.k8s.io", "volumeattributesclasses", {"get", "list", "watch"}, "cluster"},
        {"coordination.k8s.io", "leases", {"get", "watch", "list", "delete", "update", "create"}, "namespace"}}},
      {"node-driver-registrar", {}},
      {"liveness-probe", {}},
      // --adopt-snapshot-contents: pre-provisioned contents it labels;
      // --node-conditions: its pool's condition on the Node, and events.
      {"berth-csi",
       {{"snapshot.storage.k8s.io", "volumesnapshotcontents", {"list", "patch"}, "cluster"},
        {"", "nodes/status", {"patch"}, "cluster"},
        {"", "events", {"create"}, "cluster"}}},
  };
  return *rules;
}

TEST_P(ManifestsTest, RbacGrantsExactlyWhatTheSidecarsNeed) {
  // Everything bound to the DaemonSet's ServiceAccount.
  ASSERT_EQ(Str(pod_["serviceAccountName"]), kServiceAccount);
  auto sa = One("ServiceAccount");
  EXPECT_EQ(Str(sa["metadata"]["name"]), kServiceAccount);
  auto binds_sa = [](const YAML::Node& binding) {
    for (const auto& s : binding["subjects"]) {
      if (Str(s["kind"]) == "ServiceAccount" && Str(s["name"]) == kServiceAccount &&
          Str(s["namespace"]) == kNamespace) {
        return true;
      }
    }
    return false;
  };
  std::set<Grant> granted;
  for (const auto& [binding_kind, role_kind, scope] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"ClusterRoleBinding", "ClusterRole", "cluster"}, {"RoleBinding", "Role", "namespace"}}) {
    for (const auto& b : OfKind(*all_, binding_kind)) {
      SCOPED_TRACE(Str(b["metadata"]["name"]));
      EXPECT_TRUE(binds_sa(b)) << "binding for someone else";
      EXPECT_EQ(Str(b["roleRef"]["kind"]), role_kind);
      bool found = false;
      for (const auto& r : OfKind(*all_, role_kind)) {
        if (Str(r["metadata"]["name"]) != Str(b["roleRef"]["name"])) continue;
        found = true;
        for (const auto& rule : r["rules"]) {
          for (const auto& g : rule["apiGroups"]) {
            for (const auto& res : rule["resources"]) {
              for (const auto& v : rule["verbs"]) {
                EXPECT_NE(Str(v), "*");
                EXPECT_NE(Str(res), "*");
                granted.emplace(Str(g), Str(res), Str(v), scope);
              }
            }
          }
        }
      }
      EXPECT_TRUE(found) << "roleRef to a missing " << role_kind;
    }
  }
  std::set<Grant> required;
  for (const auto& c : pod_["containers"]) {
    const std::string name = Str(c["name"]);
    auto it = RequiredRules().find(name);
    ASSERT_NE(it, RequiredRules().end()) << "no RBAC table for container " << name;
    for (const auto& r : it->second) {
      for (const auto& v : r.verbs) {
        const Grant need{r.group, r.resource, v, r.scope};
        required.insert(need);
        // A cluster-wide grant also covers a namespaced need.
        const bool covered = granted.count(need) || granted.count(Grant{r.group, r.resource, v, "cluster"});
        EXPECT_TRUE(covered) << name << " needs " << r.group << "/" << r.resource << " " << v << " (" << r.scope << ")";
      }
    }
  }
  // Nothing beyond the needs, and nothing wider than needed.
  for (const Grant& g : granted) {
    EXPECT_TRUE(required.count(g)) << "granted but needed by no container: " << std::get<0>(g) << "/" << std::get<1>(g)
                                   << " " << std::get<2>(g) << " (" << std::get<3>(g) << ")";
  }
}

INSTANTIATE_TEST_SUITE_P(Renders, ManifestsTest, ::testing::ValuesIn(kRenders),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           return p.param.empty() ? std::string("base") : std::string("k8s_1_26");
                         });

TEST(YamllintTest, ManifestsAreLintClean) {
  const std::string yamllint = FirstExecutable({"/usr/bin/yamllint"});
  if (yamllint.empty()) GTEST_SKIP() << "no yamllint (scripts/install-deps installs it)";
  const std::string dir = std::string(BERTH_SOURCE_DIR) + "/deploy/kubernetes";
  LinuxCommandRunner runner;
  auto r = runner.Run({yamllint, "-s", "-c", dir + "/.yamllint", dir}, absl::Seconds(60));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 0) << r->output;
}

}  // namespace
}  // namespace berth::testing
