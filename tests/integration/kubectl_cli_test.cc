// `berth serve` as a process, driven by kubectl (the target is 1.20, Debian's
// kubernetes-client; without a kubectl these tests skip and say why).
#include "api_cli_fixture.h"

namespace berth::api_cli_testing {
namespace {

TEST_F(ApiCliTest, KubectlSeesTheBerthServer) {
  if (kubectl_.empty()) GTEST_SKIP() << kubectl_missing_;
  CommandResult v = Kubectl({"version"});
  ASSERT_EQ(v.exit_code, 0) << v;
  EXPECT_THAT(v.out, HasSubstr("+berth"));
  CommandResult ns = Kubectl({"get", "ns", "-o", "name"});
  ASSERT_EQ(ns.exit_code, 0) << ns;
  EXPECT_THAT(Lines(ns.out), ::testing::Contains("namespace/default"));
}

TEST_F(ApiCliTest, KubectlCreateGetReplaceAndDeleteAClaim) {
  if (kubectl_.empty()) GTEST_SKIP() << kubectl_missing_;
  ASSERT_EQ(Kubectl({"create", "-f", Manifest("sc.yaml", StorageClassYaml())}).exit_code, 0);
  const std::string claim = Manifest("claim.yaml", ClaimYaml("data"));
  CommandResult created = Kubectl({"create", "-f", claim});
  ASSERT_EQ(created.exit_code, 0) << created;
  EXPECT_EQ(created.out, "persistentvolumeclaim/data created\n");

  CommandResult exists = Kubectl({"create", "-f", claim});
  EXPECT_NE(exists.exit_code, 0);
  EXPECT_THAT(exists.err,
              AllOf(HasSubstr("AlreadyExists"), HasSubstr("persistentvolumeclaims \"data\" already exists")));

  CommandResult table = Kubectl({"get", "pvc"});
  ASSERT_EQ(table.exit_code, 0) << table;
  const std::vector<std::string> lines = Lines(table.out);
  ASSERT_EQ(lines.size(), 2u) << table;
  EXPECT_THAT(HeaderColumns(lines[0]),
              ElementsAre("NAME", "STATUS", "VOLUME", "CAPACITY", "ACCESS MODES", "STORAGECLASS", "AGE"));
  EXPECT_THAT(Fields(lines[1]), ElementsAre("data", "Pending", "fast", MatchesRegex("[0-9]+[smhd].*")));

  CommandResult one = Kubectl({"get", "pvc", "data", "-o", "json"});
  ASSERT_EQ(one.exit_code, 0) << one;
  const json object = json::parse(one.out, nullptr, false);
  ASSERT_TRUE(object.is_object()) << one;
  EXPECT_EQ(object["spec"].value("volumeMode", ""), "Filesystem");
  EXPECT_EQ(object["spec"].value("storageClassName", ""), "fast");

  ASSERT_EQ(Kubectl({"create", "-f", Manifest("logs.yaml", ClaimYaml("logs"))}).exit_code, 0);
  CommandResult names = Kubectl({"get", "pvc", "-o", "jsonpath={.items[*].metadata.name}"});
  ASSERT_EQ(names.exit_code, 0) << names;
  EXPECT_EQ(names.out, "data logs");

  CommandResult replaced = Kubectl({"replace", "-f", Manifest("claim.yaml", ClaimYaml("data", {{"tier", "gold"}}))});
  ASSERT_EQ(replaced.exit_code, 0) << replaced;
  EXPECT_EQ(replaced.out, "persistentvolumeclaim/data replaced\n");
  EXPECT_EQ(Kubectl({"get", "pvc", "data", "-o", "jsonpath={.metadata.labels.tier}"}).out, "gold");

  CommandResult deleted = Kubectl({"delete", "pvc", "data", "logs"});
  ASSERT_EQ(deleted.exit_code, 0) << deleted;
  EXPECT_EQ(deleted.out, "persistentvolumeclaim \"data\" deleted\npersistentvolumeclaim \"logs\" deleted\n");
  CommandResult none = Kubectl({"get", "pvc"});
  EXPECT_EQ(none.exit_code, 0) << none;
  EXPECT_EQ(none.out, "");
  EXPECT_THAT(none.err, HasSubstr("No resources found in default namespace."));
}

TEST_F(ApiCliTest, KubectlApplyIsIdempotentAndAppliesEdits) {
  if (kubectl_.empty()) GTEST_SKIP() << kubectl_missing_;
  const std::string path = Manifest("claim.yaml", ClaimYaml("data"));
  EXPECT_EQ(Kubectl({"apply", "-f", path}).out, "persistentvolumeclaim/data created\n");
  EXPECT_EQ(Kubectl({"apply", "-f", path}).out, "persistentvolumeclaim/data unchanged\n");

  Manifest("claim.yaml", ClaimYaml("data", {{"tier", "gold"}}));
  CommandResult edited = Kubectl({"apply", "-f", path});
  ASSERT_EQ(edited.exit_code, 0) << edited;
  EXPECT_EQ(edited.out, "persistentvolumeclaim/data configured\n");
  EXPECT_EQ(Kubectl({"get", "pvc", "data", "-o", "jsonpath={.metadata.labels.tier}"}).out, "gold");

  // A label set by someone else survives an apply that changes another one
  // (three-way merge against last-applied-configuration).
  ASSERT_EQ(Kubectl({"label", "pvc", "data", "owner=ops"}).exit_code, 0);
  Manifest("claim.yaml", ClaimYaml("data", {{"tier", "silver"}}));
  EXPECT_EQ(Kubectl({"apply", "-f", path}).out, "persistentvolumeclaim/data configured\n");
  CommandResult labels = Kubectl({"get", "pvc", "data", "-o", "json"});
  const json object = json::parse(labels.out, nullptr, false);
  ASSERT_TRUE(object.is_object()) << labels;
  EXPECT_EQ(object["metadata"]["labels"], json({{"owner", "ops"}, {"tier", "silver"}}));
}

TEST_F(ApiCliTest, KubectlApplyThenPatchMergeUpdatesTheClaim) {
  if (kubectl_.empty()) GTEST_SKIP() << kubectl_missing_;
  ASSERT_EQ(Kubectl({"apply", "-f", Manifest("claim.yaml", ClaimYaml("data"))}).exit_code, 0);

  CommandResult merge =
      Kubectl({"patch", "pvc", "data", "--type", "merge", "-p", R"({"metadata":{"labels":{"tier":"gold"}}})"});
  ASSERT_EQ(merge.exit_code, 0) << merge;
  EXPECT_EQ(merge.out, "persistentvolumeclaim/data patched\n");
  CommandResult strategic = Kubectl({"patch", "pvc", "data", "-p", R"({"metadata":{"labels":{"zone":"a"}}})"});
  ASSERT_EQ(strategic.exit_code, 0) << strategic;
  EXPECT_EQ(strategic.out, "persistentvolumeclaim/data patched\n");
  CommandResult json_patch = Kubectl({"patch", "pvc", "data", "--type", "json", "-p",
                                      R"([{"op":"add","path":"/metadata/labels/via","value":"json"}])"});
  ASSERT_EQ(json_patch.exit_code, 0) << json_patch;
  EXPECT_EQ(json_patch.out, "persistentvolumeclaim/data patched\n");
  CommandResult label = Kubectl({"label", "pvc", "data", "owner=ops"});
  EXPECT_EQ(label.out, "persistentvolumeclaim/data labeled\n") << label;
  CommandResult annotate = Kubectl({"annotate", "pvc", "data", "note=hello"});
  EXPECT_EQ(annotate.out, "persistentvolumeclaim/data annotated\n") << annotate;

  CommandResult got = Kubectl({"get", "pvc", "data", "-o", "json"});
  const json object = json::parse(got.out, nullptr, false);
  ASSERT_TRUE(object.is_object()) << got;
  EXPECT_EQ(object["metadata"]["labels"], json({{"owner", "ops"}, {"tier", "gold"}, {"via", "json"}, {"zone", "a"}}));
  EXPECT_EQ(object["metadata"]["annotations"].value("note", ""), "hello");
  EXPECT_EQ(object["spec"]["resources"]["requests"].value("storage", ""), "1Gi");  // untouched

  CommandResult selected = Kubectl({"get", "pvc", "-l", "tier=gold,zone=a", "-o", "name"});
  EXPECT_EQ(selected.out, "persistentvolumeclaim/data\n") << selected;
  CommandResult across = Kubectl({"get", "pvc", "-A", "-o", "name"});
  EXPECT_EQ(across.out, "persistentvolumeclaim/data\n") << across;
}

TEST_F(ApiCliTest, KubectlPatchThatChangesNothingReportsNoChange) {
  if (kubectl_.empty()) GTEST_SKIP() << kubectl_missing_;
  ASSERT_EQ(Kubectl({"apply", "-f", Manifest("claim.yaml", ClaimYaml("data", {{"tier", "gold"}}))}).exit_code, 0);
  const std::string before = Kubectl({"get", "pvc", "data", "-o", "jsonpath={.metadata.resourceVersion}"}).out;
  // Kubernetes does not write an unchanged object: same resourceVersion, no
  // watch event, and kubectl says "(no change)".
  CommandResult r =
      Kubectl({"patch", "pvc", "data", "--type", "merge", "-p", R"({"metadata":{"labels":{"tier":"gold"}}})"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(r.out, "persistentvolumeclaim/data patched (no change)\n");
  EXPECT_EQ(Kubectl({"get", "pvc", "data", "-o", "jsonpath={.metadata.resourceVersion}"}).out, before);
}

TEST_F(ApiCliTest, KubectlManagesAStorageClass) {
  if (kubectl_.empty()) GTEST_SKIP() << kubectl_missing_;
  const std::string path = Manifest("sc.yaml", StorageClassYaml());
  CommandResult created = Kubectl({"create", "-f", path});
  ASSERT_EQ(created.exit_code, 0) << created;
  EXPECT_EQ(created.out, "storageclass.storage.k8s.io/fast created\n");

  CommandResult table = Kubectl({"get", "sc"});
  const std::vector<std::string> lines = Lines(table.out);
  ASSERT_EQ(lines.size(), 2u) << table;
  EXPECT_THAT(HeaderColumns(lines[0]),
              ElementsAre("NAME", "PROVISIONER", "RECLAIMPOLICY", "VOLUMEBINDINGMODE", "ALLOWVOLUMEEXPANSION", "AGE"));
  EXPECT_THAT(Fields(lines[1]), ElementsAre("fast", "local.csi.berth.io", "Delete", "Immediate", "false",
                                            MatchesRegex("[0-9]+[smhd].*")));

  // Created without last-applied-configuration: the first apply records it.
  EXPECT_EQ(Kubectl({"apply", "-f", path}).out, "storageclass.storage.k8s.io/fast configured\n");
  EXPECT_EQ(Kubectl({"apply", "-f", path}).out, "storageclass.storage.k8s.io/fast unchanged\n");

  CommandResult patched =
      Kubectl({"patch", "sc", "fast", "--type", "merge", "-p", R"({"metadata":{"labels":{"tier":"gold"}}})"});
  EXPECT_EQ(patched.out, "storageclass.storage.k8s.io/fast patched\n") << patched;
  CommandResult replaced = Kubectl({"replace", "-f", Manifest("sc.yaml", StorageClassYaml({{"tier", "silver"}}))});
  EXPECT_EQ(replaced.out, "storageclass.storage.k8s.io/fast replaced\n") << replaced;

  CommandResult got = Kubectl({"get", "sc", "fast", "-o", "json"});
  const json object = json::parse(got.out, nullptr, false);
  ASSERT_TRUE(object.is_object()) << got;
  EXPECT_EQ(object["metadata"]["labels"], json({{"tier", "silver"}}));
  EXPECT_EQ(object.value("reclaimPolicy", ""), "Delete");  // defaulted

  CommandResult deleted = Kubectl({"delete", "-f", path});
  EXPECT_EQ(deleted.out, "storageclass.storage.k8s.io \"fast\" deleted\n") << deleted;
  CommandResult gone = Kubectl({"get", "sc", "fast"});
  EXPECT_NE(gone.exit_code, 0);
  EXPECT_EQ(gone.err, "Error from server (NotFound): storageclasses.storage.k8s.io \"fast\" not found\n");
}

TEST_F(ApiCliTest, KubectlManagesAVolumeSnapshot) {
  if (kubectl_.empty()) GTEST_SKIP() << kubectl_missing_;
  const std::string path = Manifest("snap.yaml", SnapshotYaml());
  CommandResult created = Kubectl({"create", "-f", path});
  ASSERT_EQ(created.exit_code, 0) << created;
  EXPECT_EQ(created.out, "volumesnapshot.snapshot.storage.k8s.io/snap created\n");

  CommandResult table = Kubectl({"get", "vs"});
  const std::vector<std::string> lines = Lines(table.out);
  ASSERT_EQ(lines.size(), 2u) << table;
  EXPECT_THAT(HeaderColumns(lines[0]),
              ElementsAre("NAME", "READYTOUSE", "SOURCEPVC", "SOURCESNAPSHOTCONTENT", "RESTORESIZE", "SNAPSHOTCLASS",
                          "SNAPSHOTCONTENT", "CREATIONTIME", "AGE"));
  EXPECT_THAT(Fields(lines[1]), ElementsAre("snap", "data", "snapclass", MatchesRegex("[0-9]+[smhd].*")));

  CommandResult patched = Kubectl(
      {"patch", "volumesnapshot", "snap", "--type", "merge", "-p", R"({"metadata":{"labels":{"tier":"gold"}}})"});
  EXPECT_EQ(patched.out, "volumesnapshot.snapshot.storage.k8s.io/snap patched\n") << patched;
  CommandResult applied = Kubectl({"apply", "-f", Manifest("snap.yaml", SnapshotYaml({{"tier", "gold"}}))});
  EXPECT_EQ(applied.exit_code, 0) << applied;
  CommandResult replaced = Kubectl({"replace", "-f", Manifest("snap.yaml", SnapshotYaml({{"tier", "silver"}}))});
  EXPECT_EQ(replaced.out, "volumesnapshot.snapshot.storage.k8s.io/snap replaced\n") << replaced;

  CommandResult got = Kubectl({"get", "vs", "snap", "-o", "json"});
  const json object = json::parse(got.out, nullptr, false);
  ASSERT_TRUE(object.is_object()) << got;
  EXPECT_EQ(object["spec"]["source"].value("persistentVolumeClaimName", ""), "data");
  EXPECT_EQ(object["metadata"]["labels"], json({{"tier", "silver"}}));

  CommandResult deleted = Kubectl({"delete", "vs", "snap"});
  EXPECT_EQ(deleted.out, "volumesnapshot.snapshot.storage.k8s.io \"snap\" deleted\n") << deleted;
  EXPECT_NE(Kubectl({"get", "vs", "snap"}).exit_code, 0);
}

TEST_F(ApiCliTest, KubectlShowsTheServersMessageForAnInvalidClaim) {
  if (kubectl_.empty()) GTEST_SKIP() << kubectl_missing_;
  CommandResult r = Kubectl({"create", "-f", Manifest("bad.yaml", R"(apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: bad
spec:
  resources:
    requests:
      storage: 1Gi
)")});
  EXPECT_NE(r.exit_code, 0);
  // kubectl 1.20 prints a 422 from Status.details (kind, name, causes);
  // without details it says only "The request is invalid".
  EXPECT_THAT(r.err, AllOf(HasSubstr("PersistentVolumeClaim \"bad\" is invalid"),
                           HasSubstr("spec.accessModes: Required value")))
      << r;
  EXPECT_NE(Kubectl({"get", "pvc", "bad"}).exit_code, 0);
}

TEST_F(ApiCliTest, KubectlPatchOfAnImmutableFieldNamesTheField) {
  if (kubectl_.empty()) GTEST_SKIP() << kubectl_missing_;
  ASSERT_EQ(Kubectl({"create", "-f", Manifest("sc.yaml", StorageClassYaml())}).exit_code, 0);
  CommandResult sc =
      Kubectl({"patch", "sc", "fast", "--type", "merge", "-p", R"({"provisioner":"other.csi.example.com"})"});
  EXPECT_NE(sc.exit_code, 0);
  EXPECT_THAT(sc.err, AllOf(HasSubstr("StorageClass \"fast\" is invalid"), HasSubstr("provisioner: Forbidden"))) << sc;
  EXPECT_EQ(Kubectl({"get", "sc", "fast", "-o", "jsonpath={.provisioner}"}).out, "local.csi.berth.io");

  ASSERT_EQ(Kubectl({"create", "-f", Manifest("snap.yaml", SnapshotYaml())}).exit_code, 0);
  CommandResult vs = Kubectl(
      {"patch", "vs", "snap", "--type", "merge", "-p", R"({"spec":{"source":{"persistentVolumeClaimName":"other"}}})"});
  EXPECT_NE(vs.exit_code, 0);
  EXPECT_THAT(vs.err, AllOf(HasSubstr("spec.source.persistentVolumeClaimName"), HasSubstr("immutable"))) << vs;
}

TEST_F(ApiCliTest, KubectlCreateWithAnUnknownFieldIsRejected) {
  if (kubectl_.empty()) GTEST_SKIP() << kubectl_missing_;
  CommandResult r = Kubectl({"create", "-f", Manifest("unknown.yaml", R"(apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: odd
spec:
  accessModes: [ReadWriteOnce]
  bogusField: 1
  resources:
    requests:
      storage: 1Gi
)")});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, AllOf(HasSubstr("BadRequest"), HasSubstr("unknown field \"spec.bogusField\""))) << r;
  EXPECT_NE(Kubectl({"get", "pvc", "odd"}).exit_code, 0);
}

TEST_F(ApiCliTest, KubectlGetOfAMissingClaimSaysNotFound) {
  if (kubectl_.empty()) GTEST_SKIP() << kubectl_missing_;
  CommandResult r = Kubectl({"get", "pvc", "nosuch"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "Error from server (NotFound): persistentvolumeclaims \"nosuch\" not found\n");
}

TEST_F(ApiCliTest, KubectlDeleteOfAClaimWithAFinalizerLeavesItTerminating) {
  if (kubectl_.empty()) GTEST_SKIP() << kubectl_missing_;
  ASSERT_EQ(Kubectl({"create", "-f", Manifest("claim.yaml", R"(apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: held
  finalizers: [example.com/hold]
spec:
  accessModes: [ReadWriteOnce]
  resources:
    requests:
      storage: 1Gi
)")})
                .exit_code,
            0);
  CommandResult deleted = Kubectl({"delete", "pvc", "held", "--wait=false"});
  ASSERT_EQ(deleted.exit_code, 0) << deleted;
  EXPECT_EQ(deleted.out, "persistentvolumeclaim \"held\" deleted\n");
  CommandResult table = Kubectl({"get", "pvc", "held", "--no-headers"});
  EXPECT_THAT(Fields(table.out), ::testing::Contains("Terminating")) << table;
  EXPECT_THAT(Kubectl({"get", "pvc", "held", "-o", "jsonpath={.metadata.deletionTimestamp}"}).out,
              Not(::testing::IsEmpty()));

  CommandResult released =
      Kubectl({"patch", "pvc", "held", "--type", "json", "-p", R"([{"op":"remove","path":"/metadata/finalizers"}])"});
  ASSERT_EQ(released.exit_code, 0) << released;
  EXPECT_TRUE(Eventually([&] { return Kubectl({"get", "pvc", "held"}).exit_code != 0; }, absl::Seconds(30)));
}

TEST_F(ApiCliTest, KubectlWatchShowsAddedModifiedDeletedInOrder) {
  if (kubectl_.empty()) GTEST_SKIP() << kubectl_missing_;
  ASSERT_EQ(Kubectl({"create", "-f", Manifest("marker.yaml", ClaimYaml("marker"))}).exit_code, 0);
  auto watch = KubectlInBackground({"get", "pvc", "--watch-only", "--output-watch-events"}, dir_.Join("watch.log"));
  // Rows "EVENT NAME ..." for `name`, in order.
  auto events = [&](const std::string& name) {
    std::vector<std::string> out;
    for (const auto& line : Lines(watch->Output())) {
      std::vector<std::string> f = Fields(line);
      if (f.size() >= 2 && f[1] == name) out.push_back(f[0]);
    }
    return out;
  };
  ASSERT_TRUE(TouchUntilSeen(
      [&](int tick) {
        Kubectl({"label", "pvc", "marker", "--overwrite", "tick=" + std::to_string(tick)});
      },
      [&](int) { return !events("marker").empty(); }))
      << watch->Output();

  ASSERT_EQ(Kubectl({"create", "-f", Manifest("watched.yaml", ClaimYaml("watched"))}).exit_code, 0);
  ASSERT_EQ(Kubectl({"label", "pvc", "watched", "stage=labelled"}).exit_code, 0);
  ASSERT_EQ(Kubectl({"delete", "pvc", "watched"}).exit_code, 0);
  ASSERT_TRUE(Eventually([&] { return events("watched").size() >= 3; }, absl::Seconds(30))) << watch->Output();
  EXPECT_THAT(events("watched"), ElementsAre("ADDED", "MODIFIED", "DELETED")) << watch->Output();
  EXPECT_THAT(Lines(watch->Output()).front(), StartsWith("EVENT"));

  // Stopping kubectl ends its watch, and the server carries on: wait until
  // the server has closed its side of the connection (it ends the stream and
  // reads once more), then it must still be running.
  watch->Signal(SIGTERM);
  EXPECT_TRUE(watch->Wait(absl::Seconds(10)).has_value()) << "kubectl did not stop";
  EXPECT_TRUE(Eventually([&] { return OpenServerConnections(port_) == 0; }, absl::Seconds(10)))
      << OpenServerConnections(port_) << " connection(s) still open on port " << port_;
  ASSERT_FALSE(Exited()) << "berth serve died when the watching kubectl went away:\n" << server_->Output();
  CommandResult after = Kubectl({"get", "pvc", "-o", "name"});
  EXPECT_EQ(after.out, "persistentvolumeclaim/marker\n") << after;
}

// Issue 30's acceptance: kubectl lists backups and restores with their
// phases (berth serve runs no controller: the test writes the status one
// would, through /status).
TEST_F(ApiCliTest, KubectlGetListsBackupsAndRestoresWithTheirPhases) {
  if (kubectl_.empty()) GTEST_SKIP() << kubectl_missing_;
  if (curl_.empty()) GTEST_SKIP() << "curl not found on PATH";
  CommandResult created =
      Kubectl({"create", "-f",
               Manifest("backup.yaml",
                        "apiVersion: backup.berth.io/v1\nkind: Backup\nmetadata: {name: nightly}\n"
                        "spec: {includedNamespaces: [shop], storageLocation: default}\n---\n"
                        "apiVersion: backup.berth.io/v1\nkind: Restore\nmetadata: {name: shop-copy}\n"
                        "spec: {backupName: nightly, namespaceMapping: {shop: shop-copy}}\n")});
  ASSERT_EQ(created.exit_code, 0) << created;
  EXPECT_EQ(created.out, "backup.backup.berth.io/nightly created\nrestore.backup.berth.io/shop-copy created\n");

  auto set_status = [&](const std::string& resource, const std::string& name, const json& status) {
    CommandResult got = Kubectl({"get", resource, name, "-o", "json"});
    ASSERT_EQ(got.exit_code, 0) << got;
    json object = json::parse(got.out);
    object["status"] = status;
    HttpResult put = Https("PUT", "/apis/backup.berth.io/v1/" + resource + "/" + name + "/status",
                           {"Authorization: Bearer " + token_}, object.dump());
    ASSERT_EQ(put.status, 200) << put.body;
  };
  const std::string in_a_day =
      absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::Now() + absl::Hours(24) + absl::Minutes(1), absl::UTCTimeZone());
  ASSERT_NO_FATAL_FAILURE(set_status("backups", "nightly",
                                     {{"phase", "Completed"},
                                      {"warnings", 1},
                                      {"expiration", in_a_day},
                                      {"progress", {{"totalBytes", 4294967296}, {"bytesDone", 4294967296}}}}));
  ASSERT_NO_FATAL_FAILURE(set_status("restores", "shop-copy", {{"phase", "InProgress"}}));

  CommandResult backups = Kubectl({"get", "backups"});
  ASSERT_EQ(backups.exit_code, 0) << backups;
  std::vector<std::string> lines = Lines(backups.out);
  ASSERT_EQ(lines.size(), 2u) << backups;
  EXPECT_THAT(HeaderColumns(lines[0]),
              ElementsAre("NAME", "PHASE", "ERRORS", "WARNINGS", "PROGRESS", "STORAGE LOCATION", "EXPIRES", "AGE"));
  EXPECT_THAT(Fields(lines[1]),
              ElementsAre("nightly", "Completed", "0", "1", "4Gi/4Gi", "default", "24h", MatchesRegex("[0-9]+s")));

  CommandResult restores = Kubectl({"get", "restores"});
  ASSERT_EQ(restores.exit_code, 0) << restores;
  lines = Lines(restores.out);
  ASSERT_EQ(lines.size(), 2u) << restores;
  EXPECT_THAT(HeaderColumns(lines[0]),
              ElementsAre("NAME", "BACKUP", "PHASE", "STARTED", "COMPLETED", "ERRORS", "WARNINGS", "AGE"));
  // kubectl leaves the unset cells (STARTED, COMPLETED) blank.
  EXPECT_THAT(Fields(lines[1]), ElementsAre("shop-copy", "nightly", "InProgress", "0", "0", MatchesRegex("[0-9]+s")));
}

// ---- Helper definitions ----

}  // namespace
}  // namespace berth::api_cli_testing
