// deploy/kubernetes rendered by `kubectl kustomize` (Debian's kubectl 1.20
// when installed, as scripts/install-deps sets it up) and checked for the
// wiring that a typo would silently break on a real cluster: the CSI socket
// every sidecar dials, the driver name everywhere, kubelet's plugin and
// registration paths, mount propagation, privileges, RBAC per sidecar,
// pinned images; and yamllint over the sources.
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

class ManifestsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    kubectl_ = FindKubectl(KUBECTL_BINARY);
    if (kubectl_.empty()) return;
    LinuxCommandRunner runner;
    auto r = runner.Run({kubectl_, "kustomize", std::string(BERTH_SOURCE_DIR) + "/deploy/kubernetes"},
                        absl::Seconds(60));
    if (!r.ok() || r->exit_code != 0) {
      render_error_ = r.ok() ? r->output : r.status().ToString();
      return;
    }
    docs_ = new std::vector<YAML::Node>(LoadDocuments(r->output));
  }
  static void TearDownTestSuite() {
    delete docs_;
    docs_ = nullptr;
  }
  void SetUp() override {
    if (kubectl_.empty()) {
      GTEST_SKIP() << "no kubectl (scripts/install-deps installs Debian's kubernetes-client); "
                      "set BERTH_KUBECTL to one";
    }
    ASSERT_NE(docs_, nullptr) << "kubectl kustomize deploy/kubernetes failed:\n" << render_error_;
    auto ds = OfKind(*docs_, "DaemonSet");
    ASSERT_EQ(ds.size(), 1u);
    pod_ = ds[0]["spec"]["template"]["spec"];
    driver_ = Container(pod_, "berth-csi");
    ASSERT_TRUE(driver_) << "no berth-csi container";
  }

  // The single object of `kind` (fails the test if not exactly one).
  YAML::Node One(const std::string& kind) {
    auto all = OfKind(*docs_, kind);
    EXPECT_EQ(all.size(), 1u) << kind;
    return all.empty() ? YAML::Node() : all[0];
  }

  static inline std::string kubectl_;
  static inline std::string render_error_;
  static inline std::vector<YAML::Node>* docs_ = nullptr;
  YAML::Node pod_;
  YAML::Node driver_;
};

TEST_F(ManifestsTest, RendersEveryObjectOnce) {
  std::multiset<std::string> kinds;
  for (const auto& d : *docs_) kinds.insert(Str(d["kind"]));
  EXPECT_EQ(kinds, (std::multiset<std::string>{
                       "Namespace", "ServiceAccount", "ClusterRole", "ClusterRole", "ClusterRole",
                       "ClusterRoleBinding", "ClusterRoleBinding", "ClusterRoleBinding", "Role", "Role",
                       "RoleBinding", "RoleBinding", "CSIDriver", "DaemonSet", "StorageClass",
                       "VolumeSnapshotClass"}));
  // Namespaced objects live in berth-system; cluster-scoped ones name none.
  const std::set<std::string> cluster_scoped = {"Namespace", "ClusterRole", "ClusterRoleBinding",
                                                "CSIDriver", "StorageClass", "VolumeSnapshotClass"};
  for (const auto& d : *docs_) {
    const std::string kind = Str(d["kind"]);
    EXPECT_EQ(Str(d["metadata"]["namespace"]), cluster_scoped.count(kind) ? "" : kNamespace)
        << kind << " " << Str(d["metadata"]["name"]);
  }
  EXPECT_EQ(Str(One("Namespace")["metadata"]["name"]), kNamespace);
  EXPECT_EQ(Str(One("Namespace")["metadata"]["labels"]["pod-security.kubernetes.io/enforce"]), "privileged");
}

TEST_F(ManifestsTest, DriverNameIsTheSameEverywhere) {
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

TEST_F(ManifestsTest, EverySidecarDialsTheDriversSocket) {
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

TEST_F(ManifestsTest, KubeletPathsAndMountPropagation) {
  // Staging and target paths arrive as host paths: the kubelet directory is
  // mounted at the same path, Bidirectional so mounts reach the host.
  EXPECT_EQ(Flag(driver_, "--kubelet-root").value_or(kKubeletRoot), kKubeletRoot);
  auto kubelet = Resolve(pod_, driver_, kKubeletRoot);
  ASSERT_TRUE(kubelet);
  EXPECT_EQ(kubelet->relative, "");
  EXPECT_EQ(kubelet->host_path, kKubeletRoot);
  EXPECT_EQ(Str(kubelet->mount["mountPropagation"]), "Bidirectional");

  // The pool image's mount outlives container restarts: Bidirectional too.
  for (const char* flag : {"--pool", "--pool-image"}) {
    auto p = Flag(driver_, flag);
    ASSERT_TRUE(p.has_value()) << flag;
    auto pool = Resolve(pod_, driver_, *p);
    ASSERT_TRUE(pool) << flag << " is not on a volume: it would vanish with the container";
    EXPECT_FALSE(pool->host_path.empty()) << flag;
    EXPECT_EQ(Str(pool->mount["mountPropagation"]), "Bidirectional") << flag;
  }
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

TEST_F(ManifestsTest, OnlyTheDriverIsPrivileged) {
  for (const auto& c : pod_["containers"]) {
    const std::string name = Str(c["name"]);
    const bool privileged =
        c["securityContext"] && c["securityContext"]["privileged"].as<bool>(false);
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

TEST_F(ManifestsTest, NodeIdentityComesFromTheDownwardApi) {
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

TEST_F(ManifestsTest, SidecarsRunInDistributedMode) {
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

TEST_F(ManifestsTest, ProbesReachTheirServers) {
  // berth-csi's liveness is the livenessprobe sidecar's --health-port.
  std::map<std::string, int> ports;
  for (const auto& p : driver_["ports"]) ports[Str(p["name"])] = p["containerPort"].as<int>();
  const std::string liveness_port = Str(driver_["livenessProbe"]["httpGet"]["port"]);
  ASSERT_TRUE(ports.count(liveness_port)) << liveness_port;
  EXPECT_EQ(Flag(Container(pod_, "liveness-probe"), "--health-port"),
            std::to_string(ports[liveness_port]));
  // Readiness is berth-csi's own /healthz on --http-endpoint.
  const std::string readiness_port = Str(driver_["readinessProbe"]["httpGet"]["port"]);
  ASSERT_TRUE(ports.count(readiness_port)) << readiness_port;
  EXPECT_EQ(Str(driver_["readinessProbe"]["httpGet"]["path"]), "/healthz");
  auto http = Flag(driver_, "--http-endpoint");
  ASSERT_TRUE(http.has_value());
  EXPECT_TRUE(http->ends_with(":" + std::to_string(ports[readiness_port]))) << *http;
  EXPECT_EQ(Env(driver_, "POD_IP"), "fieldRef:status.podIP");
}

TEST_F(ManifestsTest, ImagesArePinned) {
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
      EXPECT_TRUE(tag.size() > 1 && tag[0] == 'v' && std::count(tag.begin(), tag.end(), '.') == 2)
          << "want vX.Y.Z";
    }
  }
}

TEST_F(ManifestsTest, CsiDriverAndClasses) {
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
        {"storage.k8s.io", "csistoragecapacities",
         {"get", "list", "watch", "create", "update", "patch", "delete"}, "namespace"},
        {"", "pods", {"get"}, "namespace"}}},
      {"csi-snapshotter",
       {{"", "events", {"list", "watch", "create", "update", "patch"}, "cluster"},
        {"snapshot.storage.k8s.io", "volumesnapshotclasses", {"get", "list", "watch"}, "cluster"},
        {"snapshot.storage.k8s.io", "volumesnapshotcontents", {"get", "list", "watch", "update", "patch"},
         "cluster"},
        {"snapshot.storage.k8s.io", "volumesnapshotcontents/status", {"update", "patch"}, "cluster"}}},
      {"csi-resizer",
       {{"", "persistentvolumes", {"get", "list", "watch", "patch"}, "cluster"},
        {"", "persistentvolumeclaims", {"get", "list", "watch"}, "cluster"},
        {"", "pods", {"get", "list", "watch"}, "cluster"},
        {"", "persistentvolumeclaims/status", {"patch"}, "cluster"},
        {"", "events", {"list", "watch", "create", "update", "patch"}, "cluster"},
        {"storage.k8s.io", "volumeattributesclasses", {"get", "list", "watch"}, "cluster"},
        {"coordination.k8s.io", "leases", {"get", "watch", "list", "delete", "update", "create"},
         "namespace"}}},
      {"node-driver-registrar", {}},
      {"liveness-probe", {}},
      {"berth-csi", {}},
  };
  return *rules;
}

TEST_F(ManifestsTest, RbacGrantsExactlyWhatTheSidecarsNeed) {
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
  for (const auto& [binding_kind, role_kind, scope] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"ClusterRoleBinding", "ClusterRole", "cluster"}, {"RoleBinding", "Role", "namespace"}}) {
    for (const auto& b : OfKind(*docs_, binding_kind)) {
      SCOPED_TRACE(Str(b["metadata"]["name"]));
      EXPECT_TRUE(binds_sa(b)) << "binding for someone else";
      EXPECT_EQ(Str(b["roleRef"]["kind"]), role_kind);
      bool found = false;
      for (const auto& r : OfKind(*docs_, role_kind)) {
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
        const bool covered = granted.count(need) ||
                             granted.count(Grant{r.group, r.resource, v, "cluster"});
        EXPECT_TRUE(covered) << name << " needs " << r.group << "/" << r.resource << " " << v << " ("
                             << r.scope << ")";
      }
    }
  }
  // Nothing beyond the needs, and nothing wider than needed.
  for (const Grant& g : granted) {
    EXPECT_TRUE(required.count(g)) << "granted but needed by no container: " << std::get<0>(g) << "/"
                                   << std::get<1>(g) << " " << std::get<2>(g) << " ("
                                   << std::get<3>(g) << ")";
  }
}

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
