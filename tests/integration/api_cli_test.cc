// `berth serve` as a process, driven by the berth CLI over the unix socket
// and over TLS with the kubeconfig, and by curl for the raw HTTP contract
// (bearer token, watch stream, owner-only files).
#include "api_cli_fixture.h"

namespace berth::api_cli_testing {
namespace {

TEST_F(ApiCliTest, BerthCliAppliesGetsAndDeletesAClaimOverTheUnixSocket) {
  const std::string manifest = Manifest("claim.yaml", StorageClassYaml() + "---\n" + ClaimYaml("data"));

  CommandResult created = Berth({"apply", "-f", manifest});
  ASSERT_EQ(created.exit_code, 0) << created;
  EXPECT_EQ(created.out, "storageclass.storage.k8s.io/fast created\npersistentvolumeclaim/data created\n");

  // The same manifests again (they have no status): nothing to change.
  CommandResult again = Berth({"apply", "-f", manifest});
  ASSERT_EQ(again.exit_code, 0) << again;
  EXPECT_EQ(again.out, "storageclass.storage.k8s.io/fast unchanged\npersistentvolumeclaim/data unchanged\n");

  CommandResult table = Berth({"get", "pvc"});
  ASSERT_EQ(table.exit_code, 0) << table;
  const std::vector<std::string> lines = Lines(table.out);
  ASSERT_EQ(lines.size(), 2u) << table;
  EXPECT_THAT(HeaderColumns(lines[0]),
              ElementsAre("NAME", "STATUS", "VOLUME", "CAPACITY", "ACCESS MODES", "STORAGECLASS", "AGE"));
  // VOLUME, CAPACITY and ACCESS MODES are empty while the claim is pending.
  EXPECT_THAT(Fields(lines[1]), ElementsAre("data", "Pending", "fast", MatchesRegex("[0-9]+[smhd].*")));

  CommandResult as_json = Berth({"get", "pvc", "data", "-o", "json"});
  ASSERT_EQ(as_json.exit_code, 0) << as_json;
  const json claim = json::parse(as_json.out, nullptr, false);
  ASSERT_TRUE(claim.is_object()) << as_json;
  EXPECT_EQ(claim.value("kind", ""), "PersistentVolumeClaim");
  EXPECT_EQ(claim["spec"].value("volumeMode", ""), "Filesystem");  // defaulted
  EXPECT_EQ(claim["status"].value("phase", ""), "Pending");

  CommandResult missing = Berth({"get", "pvc", "nosuch"});
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_EQ(missing.out, "");
  EXPECT_THAT(Lines(missing.err),
              ElementsAre("Error from server (NotFound): persistentvolumeclaims \"nosuch\" not found"));

  CommandResult deleted = Berth({"delete", "pvc", "data", "--wait=false"});
  ASSERT_EQ(deleted.exit_code, 0) << deleted;
  EXPECT_EQ(deleted.out, "persistentvolumeclaim \"data\" deleted\n");
  CommandResult waited = Berth({"wait", "pvc/data", "--for=delete", "--timeout", "30s"});
  EXPECT_EQ(waited.exit_code, 0) << waited;
  EXPECT_EQ(waited.out, "persistentvolumeclaim/data deleted\n");
  CommandResult gone = Berth({"get", "pvc", "data"});
  EXPECT_NE(gone.exit_code, 0);
  EXPECT_THAT(gone.err, HasSubstr("not found"));

  CommandResult deleted_class = Berth({"delete", "sc", "fast"});
  EXPECT_EQ(deleted_class.exit_code, 0) << deleted_class;
  EXPECT_EQ(deleted_class.out, "storageclass.storage.k8s.io \"fast\" deleted\n");
}

TEST_F(ApiCliTest, BerthCliWaitsForAJsonpathValue) {
  ASSERT_EQ(Berth({"apply", "-f", Manifest("claim.yaml", ClaimYaml("data"))}).exit_code, 0);
  CommandResult met = Berth({"wait", "pvc/data", "--for=jsonpath={.status.phase}=Pending", "--timeout", "30s"});
  EXPECT_EQ(met.exit_code, 0) << met;
  EXPECT_EQ(met.out, "persistentvolumeclaim/data condition met\n");
  CommandResult timed_out = Berth({"wait", "pvc/data", "--for=jsonpath={.status.phase}=Bound", "--timeout", "1s"});
  EXPECT_NE(timed_out.exit_code, 0);
  EXPECT_THAT(timed_out.err, HasSubstr("timed out"));
}

TEST_F(ApiCliTest, BerthCliReportsARejectedManifestOnce) {
  CommandResult r = Berth({"apply", "-f", Manifest("bad.yaml", R"(apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: bad
spec:
  resources:
    requests:
      storage: 1Gi
)")});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(Lines(r.err), ElementsAre(AllOf(StartsWith("Error from server (Invalid): "),
                                              HasSubstr("PersistentVolumeClaim \"bad\" is invalid"),
                                              HasSubstr("spec.accessModes: Required value"))))
      << r;
}

TEST_F(ApiCliTest, BerthCliShowsNoNamespaceOnAClusterScopedObject) {
  ASSERT_EQ(Berth({"apply", "-f", Manifest("sc.yaml", StorageClassYaml())}).exit_code, 0);
  CommandResult r = Berth({"get", "sc", "fast", "-o", "json"});
  ASSERT_EQ(r.exit_code, 0) << r;
  const json object = json::parse(r.out, nullptr, false);
  ASSERT_TRUE(object.is_object()) << r;
  // As in Kubernetes: no metadata.namespace at all, not an empty one.
  EXPECT_FALSE(object["metadata"].contains("namespace")) << object["metadata"].dump();
}

TEST_F(ApiCliTest, BerthCliReachesTheApiOverTlsWithTheKubeconfig) {
  CommandResult r = BerthTls({"get", "ns", "-o", "name"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_THAT(Lines(r.out), ::testing::Contains("namespace/default"));
  CommandResult applied = BerthTls({"apply", "-f", Manifest("claim.yaml", ClaimYaml("data"))});
  EXPECT_EQ(applied.exit_code, 0) << applied;
  EXPECT_EQ(Berth({"get", "pvc", "data", "-o", "name"}).out, "persistentvolumeclaim/data\n");
}

TEST_F(ApiCliTest, BerthCliWatchSeesCreateLabelDeleteInOrder) {
  ASSERT_EQ(Berth({"apply", "-f", Manifest("marker.yaml", ClaimYaml("marker"))}).exit_code, 0);
  const std::string log = dir_.Join("watch.log");
  auto watch = std::make_unique<testing::Subprocess>(
      std::vector<std::string>{BERTH_BINARY, "--data-dir", DataDir(), "get", "pvc", "-w", "-o", "json"}, log);
  auto states = [&](const std::string& name) {
    std::vector<json> out;
    for (auto& o : JsonStream(watch->Output())) {
      if (o["metadata"].value("name", "") == name) out.push_back(std::move(o));
    }
    return out;
  };
  // Relabel the marker until the watch shows it: then it is streaming.
  ASSERT_TRUE(TouchUntilSeen(
      [&](int tick) {
        Berth({"apply", "-f", Manifest("marker.yaml", ClaimYaml("marker", {{"tick", std::to_string(tick)}}))});
      },
      [&](int tick) {
        for (const auto& o : states("marker")) {
          const json labels = o["metadata"].value("labels", json::object());
          if (labels.value("tick", "") == std::to_string(tick)) return true;
        }
        return false;
      }))
      << watch->Output();

  ASSERT_EQ(Berth({"apply", "-f", Manifest("watched.yaml", ClaimYaml("watched"))}).exit_code, 0);
  ASSERT_EQ(Berth({"apply", "-f", Manifest("watched.yaml", ClaimYaml("watched", {{"stage", "labelled"}}))}).exit_code,
            0);
  ASSERT_EQ(Berth({"delete", "pvc", "watched"}).exit_code, 0);
  ASSERT_TRUE(Eventually([&] { return states("watched").size() >= 3; }, absl::Seconds(30))) << watch->Output();

  watch->Signal(SIGTERM);
  EXPECT_TRUE(watch->Wait(absl::Seconds(10)).has_value()) << "the watch did not stop";

  // Created (no label), labelled, deleted (its last state, a newer version).
  const std::vector<json> seen = states("watched");
  ASSERT_EQ(seen.size(), 3u) << watch->Output();
  auto stage = [](const json& o) { return o["metadata"].value("labels", json::object()).value("stage", "<none>"); };
  auto version = [](const json& o) { return std::stoll(o["metadata"].value("resourceVersion", "0")); };
  EXPECT_EQ(stage(seen[0]), "<none>");
  EXPECT_EQ(stage(seen[1]), "labelled");
  EXPECT_EQ(stage(seen[2]), "labelled");
  EXPECT_LT(version(seen[0]), version(seen[1]));
  EXPECT_LT(version(seen[1]), version(seen[2]));
  EXPECT_NE(Berth({"get", "pvc", "watched"}).exit_code, 0);
}

// ---- Raw HTTP (curl) ----

TEST_F(ApiCliTest, RawWatchStreamsAddedModifiedDeletedInOrder) {
  if (curl_.empty()) GTEST_SKIP() << "curl not found on PATH";
  ASSERT_EQ(Berth({"apply", "-f", Manifest("marker.yaml", ClaimYaml("marker"))}).exit_code, 0);
  auto watch = std::make_unique<testing::Subprocess>(
      std::vector<std::string>{curl_, "-sSN", "--unix-socket", SocketPath(),
                               "http://localhost/api/v1/namespaces/default/persistentvolumeclaims?watch=1"},
      dir_.Join("watch.log"));
  auto events = [&](const std::string& name) {
    std::vector<std::pair<std::string, json>> out;
    for (auto& e : JsonStream(watch->Output())) {
      if (e["object"]["metadata"].value("name", "") == name) {
        out.emplace_back(e.value("type", ""), e["object"]);
      }
    }
    return out;
  };
  // A watch without resourceVersion starts with the existing objects.
  ASSERT_TRUE(Eventually([&] { return !events("marker").empty(); }, absl::Seconds(30))) << watch->Output();
  EXPECT_EQ(events("marker")[0].first, "ADDED");

  ASSERT_EQ(Berth({"apply", "-f", Manifest("watched.yaml", ClaimYaml("watched"))}).exit_code, 0);
  ASSERT_EQ(Berth({"apply", "-f", Manifest("watched.yaml", ClaimYaml("watched", {{"stage", "labelled"}}))}).exit_code,
            0);
  ASSERT_EQ(Berth({"delete", "pvc", "watched"}).exit_code, 0);
  ASSERT_TRUE(Eventually([&] { return events("watched").size() >= 3; }, absl::Seconds(30))) << watch->Output();
  watch->Signal(SIGTERM);
  watch->Wait(absl::Seconds(10));

  const auto seen = events("watched");
  ASSERT_EQ(seen.size(), 3u) << watch->Output();
  EXPECT_EQ(seen[0].first, "ADDED");
  EXPECT_EQ(seen[1].first, "MODIFIED");
  EXPECT_EQ(seen[1].second["metadata"]["labels"].value("stage", ""), "labelled");
  EXPECT_EQ(seen[2].first, "DELETED");
}

TEST_F(ApiCliTest, TcpRequestWithoutTokenIsUnauthorizedAndCreatesNothing) {
  if (curl_.empty()) GTEST_SKIP() << "curl not found on PATH";
  HttpResult post = Https("POST", "/api/v1/namespaces", {},
                          R"({"apiVersion":"v1","kind":"Namespace","metadata":{"name":"intruder"}})");
  EXPECT_EQ(post.status, 401) << post.body;
  const json status = json::parse(post.body, nullptr, false);
  ASSERT_TRUE(status.is_object()) << post.body;
  EXPECT_EQ(status.value("kind", ""), "Status");
  EXPECT_EQ(status.value("reason", ""), "Unauthorized");
  EXPECT_EQ(Https("GET", "/api/v1/namespaces", {}).status, 401);

  CommandResult ns = Berth({"get", "ns", "intruder"});
  EXPECT_NE(ns.exit_code, 0) << "the unauthenticated POST created a namespace";
  EXPECT_THAT(ns.err, HasSubstr("not found"));
}

TEST_F(ApiCliTest, TcpRequestWithAWrongTokenIsUnauthorized) {
  if (curl_.empty()) GTEST_SKIP() << "curl not found on PATH";
  std::string almost = token_;
  almost.back() = almost.back() == '0' ? '1' : '0';
  for (const std::string& header :
       {std::string("Authorization: Bearer wrong"), "Authorization: Bearer " + almost,
        "Authorization: Bearer " + token_ + "x", "Authorization: Basic " + token_, "Authorization: " + token_}) {
    HttpResult r = Https("GET", "/api/v1/namespaces", {header});
    EXPECT_EQ(r.status, 401) << header << "\n" << r.body;
  }
  HttpResult post = Https("POST", "/api/v1/namespaces", {"Authorization: Bearer " + almost},
                          R"({"apiVersion":"v1","kind":"Namespace","metadata":{"name":"intruder"}})");
  EXPECT_EQ(post.status, 401) << post.body;
  EXPECT_NE(Berth({"get", "ns", "intruder"}).exit_code, 0);
}

TEST_F(ApiCliTest, TcpRequestWithTheTokenIsServed) {
  if (curl_.empty()) GTEST_SKIP() << "curl not found on PATH";
  HttpResult r = Https("GET", "/api/v1/namespaces", {"Authorization: Bearer " + token_});
  ASSERT_EQ(r.status, 200) << r.body;
  const json list = json::parse(r.body, nullptr, false);
  ASSERT_TRUE(list.is_object()) << r.body;
  EXPECT_EQ(list.value("kind", ""), "NamespaceList");
  std::vector<std::string> names;
  for (const auto& item : list["items"]) names.push_back(item["metadata"].value("name", ""));
  EXPECT_THAT(names, ::testing::Contains("default"));
}

TEST_F(ApiCliTest, KubeconfigAndApiSocketAreOwnerOnly) {
  // Permission bits in octal, as ls and chmod show them.
  auto mode = [](const std::string& path, bool follow) {
    struct stat st {};
    if ((follow ? ::stat(path.c_str(), &st) : ::lstat(path.c_str(), &st)) != 0) return std::string("missing");
    std::ostringstream os;
    os << (S_ISSOCK(st.st_mode)  ? "socket "
           : S_ISDIR(st.st_mode) ? "dir "
                                 : "file ")
       << std::oct << (st.st_mode & 07777);
    return os.str();
  };
  EXPECT_EQ(mode(KubeconfigPath(), false), "file 600");
  EXPECT_EQ(mode(SocketPath(), false), "socket 600");
  EXPECT_EQ(mode(DataDir(), true), "dir 700");
}

// ---- kubectl ----

}  // namespace
}  // namespace berth::api_cli_testing
