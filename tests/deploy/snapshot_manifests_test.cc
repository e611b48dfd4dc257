// deploy/kubernetes/snapshot-controller (and its k8s-1.26 overlay), rendered
// by `kubectl kustomize`: the snapshot.storage.k8s.io/v1 CRDs berth writes
// itself, and the snapshot-controller in distributed mode with the rights it
// needs. The CRDs' field trees must agree with berth's own schema of those
// kinds (src/api/schema_kinds.cc) — two descriptions of one API written
// independently, so a slip in either shows.
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "api/kinds.h"
#include "api/schema.h"
#include "common/exec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "manifests.h"

#ifndef KUBECTL_BINARY
#define KUBECTL_BINARY ""
#endif

namespace berth::testing {
namespace {

// snapshot-controller render -> the DaemonSet render of the same release.
const std::map<std::string, std::string> kRenders = {
    {"snapshot-controller", ""},
    {"overlays/k8s-1.26/snapshot-controller", "overlays/k8s-1.26"},
};

std::vector<YAML::Node> Render(const std::string& dir, std::string* error) {
  LinuxCommandRunner runner;
  const std::string kubectl = FindKubectl(KUBECTL_BINARY);
  auto r = runner.Run({kubectl, "kustomize", std::string(BERTH_SOURCE_DIR) + "/deploy/kubernetes/" + dir},
                      absl::Seconds(60));
  if (!r.ok() || r->exit_code != 0) {
    *error = r.ok() ? r->output : r.status().ToString();
    return {};
  }
  return LoadDocuments(r->output);
}

class SnapshotManifestsTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (FindKubectl(KUBECTL_BINARY).empty()) {
      GTEST_SKIP() << "no kubectl (scripts/install-deps installs Debian's kubernetes-client); "
                      "set BERTH_KUBECTL to one";
    }
    std::string error;
    docs_ = Render(GetParam(), &error);
    ASSERT_FALSE(docs_.empty()) << GetParam() << ": " << error;
    driver_docs_ = Render(kRenders.at(GetParam()), &error);
    ASSERT_FALSE(driver_docs_.empty()) << error;
  }

  YAML::Node Crd(const std::string& plural) {
    for (const auto& d : OfKind(docs_, "CustomResourceDefinition")) {
      if (Str(d["metadata"]["name"]) == plural + ".snapshot.storage.k8s.io") return d;
    }
    ADD_FAILURE() << "no CRD " << plural;
    return YAML::Node();
  }

  std::vector<YAML::Node> docs_;
  std::vector<YAML::Node> driver_docs_;
};

TEST_P(SnapshotManifestsTest, DefinesTheV1Api) {
  std::multiset<std::string> kinds;
  for (const auto& d : docs_) kinds.insert(Str(d["kind"]));
  EXPECT_EQ(kinds, (std::multiset<std::string>{"CustomResourceDefinition", "CustomResourceDefinition",
                                               "CustomResourceDefinition", "ServiceAccount", "ClusterRole",
                                               "ClusterRoleBinding", "Role", "RoleBinding", "Deployment"}));
  struct Want {
    std::string plural, kind, scope;
    std::vector<std::string> short_names;
    bool status;
  };
  for (const Want& w :
       std::vector<Want>{{"volumesnapshotclasses", "VolumeSnapshotClass", "Cluster", {"vsclass", "vsclasses"}, false},
                         {"volumesnapshots", "VolumeSnapshot", "Namespaced", {"vs"}, true},
                         {"volumesnapshotcontents", "VolumeSnapshotContent", "Cluster", {"vsc", "vscs"}, true}}) {
    SCOPED_TRACE(w.plural);
    YAML::Node crd = Crd(w.plural);
    ASSERT_TRUE(crd);
    EXPECT_EQ(Str(crd["apiVersion"]), "apiextensions.k8s.io/v1");
    // The API server refuses CRDs of *.k8s.io groups without it.
    EXPECT_TRUE(Str(crd["metadata"]["annotations"]["api-approved.kubernetes.io"]).starts_with("https://"));
    EXPECT_EQ(Str(crd["spec"]["group"]), "snapshot.storage.k8s.io");
    EXPECT_EQ(Str(crd["spec"]["scope"]), w.scope);
    EXPECT_EQ(Str(crd["spec"]["names"]["kind"]), w.kind);
    EXPECT_EQ(Str(crd["spec"]["names"]["listKind"]), w.kind + "List");
    EXPECT_EQ(Str(crd["spec"]["names"]["plural"]), w.plural);
    std::vector<std::string> short_names;
    for (const auto& n : crd["spec"]["names"]["shortNames"]) short_names.push_back(Str(n));
    EXPECT_EQ(short_names, w.short_names);
    ASSERT_EQ(crd["spec"]["versions"].size(), 1u);
    YAML::Node v1 = crd["spec"]["versions"][0];
    EXPECT_EQ(Str(v1["name"]), "v1");
    EXPECT_TRUE(v1["served"].as<bool>(false));
    EXPECT_TRUE(v1["storage"].as<bool>(false));
    EXPECT_EQ(static_cast<bool>(v1["subresources"]["status"]), w.status);
  }
}

// The CRD's schema node and berth's schema node describe the same field.
void ExpectSameTree(const YAML::Node& crd, const api::Schema& ours, const std::string& path) {
  using T = api::Schema::Type;
  const std::string type = Str(crd["type"]);
  switch (ours.type) {
    case T::kString:
      EXPECT_EQ(type, "string") << path;
      return;
    case T::kInt:
      EXPECT_EQ(type, "integer") << path;
      return;
    case T::kBool:
      EXPECT_EQ(type, "boolean") << path;
      return;
    case T::kTime:
      EXPECT_EQ(type, "string") << path;
      EXPECT_EQ(Str(crd["format"]), "date-time") << path;
      return;
    case T::kQuantity:
      EXPECT_TRUE(crd["x-kubernetes-int-or-string"].as<bool>(false)) << path;
      return;
    case T::kMap:
      EXPECT_EQ(type, "object") << path;
      ASSERT_TRUE(crd["additionalProperties"]) << path;
      ExpectSameTree(crd["additionalProperties"], *ours.elem, path + ".*");
      return;
    case T::kObject: {
      EXPECT_EQ(type, "object") << path;
      if (path == ".metadata") return;  // the API server's own schema
      std::set<std::string> crd_fields, our_fields;
      for (const auto& p : crd["properties"]) crd_fields.insert(p.first.as<std::string>());
      for (const auto& [name, field] : ours.fields) our_fields.insert(name);
      EXPECT_EQ(crd_fields, our_fields) << path;
      for (const auto& [name, field] : ours.fields) {
        if (crd["properties"][name]) ExpectSameTree(crd["properties"][name], *field, path + "." + name);
      }
      return;
    }
    default:
      ADD_FAILURE() << path << ": berth's schema type " << static_cast<int>(ours.type)
                    << " has no CRD counterpart in this test";
  }
}

TEST_P(SnapshotManifestsTest, SchemasAgreeWithBerthsApi) {
  for (const auto& [plural, kind] :
       std::vector<std::pair<std::string, std::string>>{{"volumesnapshotclasses", "VolumeSnapshotClass"},
                                                        {"volumesnapshots", "VolumeSnapshot"},
                                                        {"volumesnapshotcontents", "VolumeSnapshotContent"}}) {
    SCOPED_TRACE(kind);
    const api::KindInfo* info = api::FindKind("snapshot.storage.k8s.io/v1", kind);
    ASSERT_NE(info, nullptr);
    YAML::Node crd = Crd(plural);
    ASSERT_TRUE(crd);
    ExpectSameTree(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"], api::SchemaFor(*info), "");
  }
}

TEST_P(SnapshotManifestsTest, ControllerRunsDistributedWithTheRightsItNeeds) {
  auto deployments = OfKind(docs_, "Deployment");
  ASSERT_EQ(deployments.size(), 1u);
  YAML::Node pod = deployments[0]["spec"]["template"]["spec"];
  YAML::Node c = Container(pod, "snapshot-controller");
  ASSERT_TRUE(c);
  EXPECT_EQ(Flag(c, "--enable-distributed-snapshotting"), "");
  EXPECT_EQ(Flag(c, "--leader-election"), "true");
  const std::string ns = Str(deployments[0]["metadata"]["namespace"]);
  const std::string sa = Str(pod["serviceAccountName"]);

  // The same release as the csi-snapshotter it works with.
  auto ds = OfKind(driver_docs_, "DaemonSet");
  ASSERT_EQ(ds.size(), 1u);
  auto tag = [](const YAML::Node& container) {
    const std::string image = Str(container["image"]);
    return image.substr(image.rfind(':') + 1);
  };
  EXPECT_EQ(tag(c), tag(Container(ds[0]["spec"]["template"]["spec"], "csi-snapshotter")));

  // (group, resource, verb, scope) granted to its ServiceAccount.
  std::set<std::tuple<std::string, std::string, std::string, std::string>> granted;
  for (const auto& [binding_kind, role_kind, scope] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"ClusterRoleBinding", "ClusterRole", "cluster"}, {"RoleBinding", "Role", ns}}) {
    for (const auto& b : OfKind(docs_, binding_kind)) {
      bool ours = false;
      for (const auto& s : b["subjects"]) {
        ours = ours || (Str(s["kind"]) == "ServiceAccount" && Str(s["name"]) == sa && Str(s["namespace"]) == ns);
      }
      ASSERT_TRUE(ours) << Str(b["metadata"]["name"]);
      for (const auto& r : OfKind(docs_, role_kind)) {
        if (Str(r["metadata"]["name"]) != Str(b["roleRef"]["name"])) continue;
        for (const auto& rule : r["rules"]) {
          for (const auto& g : rule["apiGroups"]) {
            for (const auto& res : rule["resources"]) {
              for (const auto& v : rule["verbs"]) granted.emplace(Str(g), Str(res), Str(v), scope);
            }
          }
        }
      }
    }
  }
  const std::string snap = "snapshot.storage.k8s.io";
  const std::vector<std::tuple<std::string, std::string, std::vector<std::string>, std::string>> need = {
      {"", "persistentvolumes", {"get", "list", "watch"}, "cluster"},
      {"", "persistentvolumeclaims", {"get", "list", "watch", "update"}, "cluster"},
      // Distributed mode: the node of a volume's PV names the content's node.
      {"", "nodes", {"get", "list", "watch"}, "cluster"},
      {"", "events", {"list", "watch", "create", "update", "patch"}, "cluster"},
      {snap, "volumesnapshotclasses", {"get", "list", "watch"}, "cluster"},
      {snap, "volumesnapshotcontents", {"create", "get", "list", "watch", "update", "delete", "patch"}, "cluster"},
      {snap, "volumesnapshotcontents/status", {"patch"}, "cluster"},
      {snap, "volumesnapshots", {"get", "list", "watch", "update", "patch", "delete"}, "cluster"},
      {snap, "volumesnapshots/status", {"update", "patch"}, "cluster"},
      {"coordination.k8s.io", "leases", {"get", "watch", "list", "delete", "update", "create"}, ns},
  };
  size_t needed = 0;
  for (const auto& [group, resource, verbs, scope] : need) {
    for (const auto& v : verbs) {
      ++needed;
      EXPECT_TRUE(granted.count({group, resource, v, scope}))
          << group << "/" << resource << " " << v << " (" << scope << ")";
    }
  }
  EXPECT_EQ(granted.size(), needed) << "rights beyond what the controller needs";
}

INSTANTIATE_TEST_SUITE_P(Renders, SnapshotManifestsTest,
                         ::testing::Values("snapshot-controller", "overlays/k8s-1.26/snapshot-controller"),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           return p.param == "snapshot-controller" ? std::string("base") : std::string("k8s_1_26");
                         });

}  // namespace
}  // namespace berth::testing
