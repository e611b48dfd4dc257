// deploy/kubernetes/components/snapshot-metadata: the optional kustomize
// Component serving the external-snapshot-metadata sidecar (v1.0.0). Its
// files are read with yaml-cpp and its JSON patch applied to the base
// DaemonSet here, so the wiring is checked even where the only kubectl is
// Debian's 1.20, whose kustomize knows no Components: the
// SnapshotMetadataService (cbt.storage.k8s.io/v1beta1) named after the
// driver, its address the TLS Service's, which selects the DaemonSet's pods
// on the sidecar's port and keeps a client on its own node; the sidecar
// dialling berth-csi's socket with its certificate from the Secret; RBAC for
// the DaemonSet's service account. With a kubectl that renders Components
// (1.21 or newer; BERTH_KUBECTL, /usr/bin/kubectl),
// overlays/snapshot-metadata is rendered too and must give the same pod.
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "common/exec.h"
#include "common/fs.h"
#include "gtest/gtest.h"
#include "manifests.h"

#ifndef KUBECTL_BINARY
#define KUBECTL_BINARY ""
#endif

namespace berth::testing {
namespace {

const std::string kDeploy = std::string(BERTH_SOURCE_DIR) + "/deploy/kubernetes";
const std::string kComponent = kDeploy + "/components/snapshot-metadata";

std::vector<YAML::Node> LoadFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? LoadDocuments(*text) : std::vector<YAML::Node>{};
}

// A node as text with map keys sorted (kustomize reorders them).
std::string Canonical(const YAML::Node& n) {
  if (n.IsMap()) {
    std::map<std::string, std::string> fields;
    for (const auto& kv : n) fields[kv.first.as<std::string>()] = Canonical(kv.second);
    std::string out = "{";
    for (const auto& [k, v] : fields) out += k + ": " + v + ", ";
    return out + "}";
  }
  if (n.IsSequence()) {
    std::string out = "[";
    for (const auto& e : n) out += Canonical(e) + ", ";
    return out + "]";
  }
  return Str(n);
}

class SnapshotMetadataComponentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    kustomization_ = YAML::LoadFile(kComponent + "/kustomization.yaml");
    for (const auto& r : kustomization_["resources"]) {
      for (const auto& d : LoadFile(kComponent + "/" + r.as<std::string>())) objects_.push_back(d);
    }
    auto ds = OfKind(LoadFile(kDeploy + "/base/daemonset.yaml"), "DaemonSet");
    ASSERT_EQ(ds.size(), 1u);
    daemonset_ = YAML::Clone(ds[0]);
    // The component's patch, applied as kustomize applies it.
    ASSERT_EQ(kustomization_["patches"].size(), 1u);
    const YAML::Node patch = kustomization_["patches"][0];
    ASSERT_EQ(Str(patch["target"]["kind"]), "DaemonSet");
    ASSERT_EQ(Str(patch["target"]["name"]), Str(daemonset_["metadata"]["name"]));
    const YAML::Node ops = YAML::LoadFile(kComponent + "/" + Str(patch["path"]));
    ASSERT_TRUE(ops.IsSequence()) << "a JSON patch (appends keep berth-csi the first container)";
    for (const auto& op : ops) {
      ASSERT_EQ(Str(op["op"]), "add");
      const std::string path = Str(op["path"]);
      ASSERT_TRUE(path == "/spec/template/spec/containers/-" || path == "/spec/template/spec/volumes/-") << path;
      const std::string list = path == "/spec/template/spec/containers/-" ? "containers" : "volumes";
      daemonset_["spec"]["template"]["spec"][list].push_back(op["value"]);
    }
    pod_ = daemonset_["spec"]["template"]["spec"];
    sidecar_ = Container(pod_, "csi-snapshot-metadata");
    ASSERT_TRUE(sidecar_);
  }
  YAML::Node One(const std::string& kind) {
    auto all = OfKind(objects_, kind);
    EXPECT_EQ(all.size(), 1u) << kind;
    return all.empty() ? YAML::Node() : all[0];
  }
  // The container port of the sidecar named or numbered `port`, 0 if none.
  int SidecarPort(const std::string& port) {
    for (const auto& p : sidecar_["ports"]) {
      if (Str(p["name"]) == port || Str(p["containerPort"]) == port) return p["containerPort"].as<int>();
    }
    return 0;
  }

  YAML::Node kustomization_;
  std::vector<YAML::Node> objects_;
  YAML::Node daemonset_;
  YAML::Node pod_;
  YAML::Node sidecar_;
};

TEST_F(SnapshotMetadataComponentTest, IsAComponent) {
  EXPECT_EQ(Str(kustomization_["apiVersion"]), "kustomize.config.k8s.io/v1alpha1");
  EXPECT_EQ(Str(kustomization_["kind"]), "Component");
  // The overlay applies the base with it.
  const YAML::Node overlay = YAML::LoadFile(kDeploy + "/overlays/snapshot-metadata/kustomization.yaml");
  ASSERT_EQ(overlay["components"].size(), 1u);
  EXPECT_EQ(Str(overlay["components"][0]), "../../components/snapshot-metadata");
  EXPECT_EQ(Str(overlay["resources"][0]), "../../base");
}

TEST_F(SnapshotMetadataComponentTest, ServiceIsNamedAfterTheDriverAndAddressesTheService) {
  const YAML::Node sms = One("SnapshotMetadataService");
  ASSERT_TRUE(sms);
  EXPECT_EQ(Str(sms["apiVersion"]), "cbt.storage.k8s.io/v1beta1");  // sidecar v1.0.0 knows only v1beta1
  // Cluster-scoped, one per driver: the sidecar and clients get it by the
  // driver's name.
  EXPECT_FALSE(sms["metadata"]["namespace"]);
  const auto csidriver = OfKind(LoadFile(kDeploy + "/base/csidriver.yaml"), "CSIDriver");
  ASSERT_EQ(csidriver.size(), 1u);
  EXPECT_EQ(Str(sms["metadata"]["name"]), Str(csidriver[0]["metadata"]["name"]));
  // The CRD requires all three, non-empty; caCert is base64 (format: byte).
  for (const char* field : {"address", "audience", "caCert"}) EXPECT_NE(Str(sms["spec"][field]), "") << field;
  std::string ca;
  EXPECT_TRUE(absl::Base64Unescape(Str(sms["spec"]["caCert"]), &ca));

  const YAML::Node svc = One("Service");
  ASSERT_TRUE(svc);
  const std::string ns = Str(svc["metadata"]["namespace"]);
  EXPECT_EQ(ns, Str(daemonset_["metadata"]["namespace"]));
  ASSERT_EQ(svc["spec"]["ports"].size(), 1u);
  const YAML::Node port = svc["spec"]["ports"][0];
  EXPECT_EQ(Str(sms["spec"]["address"]), Str(svc["metadata"]["name"]) + "." + ns + ".svc:" + Str(port["port"]));
  // To the sidecar's gRPC port, which it serves (--port).
  const int target = SidecarPort(Str(port["targetPort"]));
  EXPECT_NE(target, 0) << Str(port["targetPort"]);
  EXPECT_EQ(Flag(sidecar_, "--port"), std::to_string(target));
}

TEST_F(SnapshotMetadataComponentTest, ServiceKeepsAClientOnItsOwnNodesSidecar) {
  const YAML::Node svc = One("Service");
  ASSERT_TRUE(svc);
  // berth-csi's snapshots are in the pool of their node: only that node's
  // berth-csi knows them.
  EXPECT_EQ(Str(svc["spec"]["internalTrafficPolicy"]), "Local");
  const YAML::Node labels = daemonset_["spec"]["template"]["metadata"]["labels"];
  ASSERT_GT(svc["spec"]["selector"].size(), 0u);
  for (const auto& kv : svc["spec"]["selector"]) {
    EXPECT_EQ(Str(labels[kv.first.as<std::string>()]), Str(kv.second)) << kv.first.as<std::string>();
  }
}

TEST_F(SnapshotMetadataComponentTest, SidecarDialsTheDriverWithItsCertificate) {
  EXPECT_EQ(Str(sidecar_["image"]), "registry.k8s.io/sig-storage/csi-snapshot-metadata:v1.0.0");
  const YAML::Node driver = Container(pod_, "berth-csi");
  ASSERT_TRUE(driver);
  // The socket berth-csi serves (--endpoint) through the same volume.
  const std::string endpoint = Flag(driver, "--endpoint").value_or("");
  ASSERT_TRUE(endpoint.starts_with("unix://")) << endpoint;
  const std::string socket = endpoint.substr(7);
  const std::string address = Flag(sidecar_, "--csi-address").value_or("");
  auto ours = Resolve(pod_, sidecar_, address);
  auto theirs = Resolve(pod_, driver, socket);
  ASSERT_TRUE(ours && theirs) << address;
  EXPECT_EQ(ours->volume, theirs->volume);
  EXPECT_EQ(ours->relative, theirs->relative);
  // Certificate and key from the Secret volume, read-only.
  std::set<std::string> volumes;
  for (const auto& v : pod_["volumes"]) volumes.insert(Str(v["name"]));
  EXPECT_EQ(volumes.size(), pod_["volumes"].size()) << "a volume name twice";
  for (const char* flag : {"--tls-cert", "--tls-key"}) {
    auto file = Resolve(pod_, sidecar_, Flag(sidecar_, flag).value_or(""));
    ASSERT_TRUE(file) << flag;
    EXPECT_EQ(Str(file->mount["readOnly"]), "true");
    bool secret = false;
    for (const auto& v : pod_["volumes"]) {
      if (Str(v["name"]) == file->volume)
        secret = Str(v["secret"]["secretName"]) == "berth-csi-snapshot-metadata-certs";
    }
    EXPECT_TRUE(secret) << flag;
    EXPECT_TRUE(file->relative == "tls.crt" || file->relative == "tls.key")
        << file->relative;  // kubernetes.io/tls keys
  }
  // Readiness on the sidecar's HTTP endpoint.
  const std::string http = Flag(sidecar_, "--http-endpoint").value_or("");
  EXPECT_EQ(Str(sidecar_["readinessProbe"]["httpGet"]["path"]), "/health");
  EXPECT_EQ(":" + std::to_string(SidecarPort(Str(sidecar_["readinessProbe"]["httpGet"]["port"]))), http);
  // No port taken twice in the pod.
  std::set<int> ports;
  size_t n = 0;
  for (const auto& c : pod_["containers"]) {
    for (const auto& p : c["ports"]) {
      ports.insert(p["containerPort"].as<int>());
      ++n;
    }
  }
  EXPECT_EQ(ports.size(), n);
  EXPECT_FALSE(sidecar_["securityContext"]["privileged"].as<bool>(false));
}

TEST_F(SnapshotMetadataComponentTest, RbacGrantsTheSidecarWhatItCalls) {
  std::string role;
  for (const auto& b : OfKind(objects_, "ClusterRoleBinding")) {
    for (const auto& s : b["subjects"]) {
      if (Str(s["name"]) == Str(pod_["serviceAccountName"]) &&
          Str(s["namespace"]) == Str(daemonset_["metadata"]["namespace"])) {
        role = Str(b["roleRef"]["name"]);
      }
    }
  }
  ASSERT_NE(role, "") << "no ClusterRoleBinding for the DaemonSet's service account";
  std::set<std::string> granted;  // group/resource:verb
  for (const auto& r : OfKind(objects_, "ClusterRole")) {
    if (Str(r["metadata"]["name"]) != role) continue;
    for (const auto& rule : r["rules"]) {
      for (const auto& g : rule["apiGroups"]) {
        for (const auto& res : rule["resources"]) {
          for (const auto& v : rule["verbs"]) {
            granted.insert(g.as<std::string>() + "/" + res.as<std::string>() + ":" + v.as<std::string>());
          }
        }
      }
    }
  }
  for (const char* need :
       {"cbt.storage.k8s.io/snapshotmetadataservices:get", "authentication.k8s.io/tokenreviews:create",
        "authorization.k8s.io/subjectaccessreviews:create", "snapshot.storage.k8s.io/volumesnapshots:get",
        "snapshot.storage.k8s.io/volumesnapshotcontents:get"}) {
    EXPECT_TRUE(granted.count(need)) << need;
  }
  for (const auto& g : granted) EXPECT_EQ(g.find(":delete"), std::string::npos) << g;
}

// kubectl 1.21+ renders the overlay to the same pod (Debian's 1.20 cannot:
// the test says so and skips).
TEST_F(SnapshotMetadataComponentTest, KustomizeRendersTheSamePod) {
  LinuxCommandRunner runner;
  std::string errors;
  const char* env = std::getenv("BERTH_KUBECTL");
  for (const std::string& kubectl :
       {std::string(KUBECTL_BINARY), std::string(env != nullptr ? env : ""), std::string("/usr/bin/kubectl"),
        std::string("/usr/local/lib/berth/kubernetes-client/usr/bin/kubectl")}) {
    if (kubectl.empty() || ::access(kubectl.c_str(), X_OK) != 0) continue;
    auto r = runner.Run({kubectl, "kustomize", kDeploy + "/overlays/snapshot-metadata"}, absl::Seconds(60));
    if (!r.ok() || r->exit_code != 0) {
      errors += kubectl + ": " + (r.ok() ? r->output : r.status().ToString()) + "\n";
      continue;
    }
    const auto docs = LoadDocuments(r->output);
    auto ds = OfKind(docs, "DaemonSet");
    ASSERT_EQ(ds.size(), 1u);
    const YAML::Node pod = ds[0]["spec"]["template"]["spec"];
    std::vector<std::string> want, got;
    for (const auto& c : pod_["containers"]) want.push_back(Str(c["name"]));
    for (const auto& c : pod["containers"]) got.push_back(Str(c["name"]));
    EXPECT_EQ(got, want);
    EXPECT_EQ(Canonical(Container(pod, "csi-snapshot-metadata")), Canonical(sidecar_));
    EXPECT_EQ(pod["volumes"].size(), pod_["volumes"].size());
    for (const char* kind : {"SnapshotMetadataService", "Service"}) EXPECT_EQ(OfKind(docs, kind).size(), 1u) << kind;
    return;
  }
  GTEST_SKIP() << "no kubectl here renders kustomize Components (1.21 or newer; set BERTH_KUBECTL):\n" << errors;
}

}  // namespace
}  // namespace berth::testing
