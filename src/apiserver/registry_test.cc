#include "apiserver/registry.h"

#include "api/errors.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace berth::apiserver {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

const api::KindInfo& Kind(std::string_view resource, std::string_view group = "") {
  return *api::FindResource(group, resource);
}

json Claim(const std::string& name, const std::string& size = "1Gi") {
  return {{"apiVersion", "v1"},
          {"kind", "PersistentVolumeClaim"},
          {"metadata", {{"name", name}}},
          {"spec", {{"accessModes", {"ReadWriteOnce"}}, {"resources", {{"requests", {{"storage", size}}}}}}},
          {"status", {{"phase", "Bound"}}}};
}

class RegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = store::Store::Open({.path = dir_.path() + "/state.db"});
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = std::move(*s);
    registry_ = std::make_unique<Registry>(*store_);
    ASSERT_TRUE(registry_->Bootstrap().ok());
  }
  berth::testing::TempDir dir_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<Registry> registry_;
};

TEST_F(RegistryTest, CreateAppliesDefaultsResetsStatusAndNeedsTheNamespace) {
  auto pvc = registry_->Create(Kind("persistentvolumeclaims"), "default", Claim("data"));
  ASSERT_TRUE(pvc.ok()) << pvc.status();
  EXPECT_EQ((*pvc)["status"], json({{"phase", "Pending"}}));  // client status ignored
  EXPECT_EQ((*pvc)["spec"]["volumeMode"], "Filesystem");
  EXPECT_EQ((*pvc)["metadata"]["namespace"], "default");
  EXPECT_FALSE((*pvc)["metadata"]["uid"].get<std::string>().empty());

  auto again = registry_->Create(Kind("persistentvolumeclaims"), "default", Claim("data"));
  EXPECT_EQ(api::ToHttpError(again.status()).code, 409);
  EXPECT_EQ(again.status().message(), "persistentvolumeclaims \"data\" already exists");

  auto nowhere = registry_->Create(Kind("persistentvolumeclaims"), "nosuch", Claim("data"));
  EXPECT_EQ(api::ToHttpError(nowhere.status()).code, 404);
  EXPECT_EQ(nowhere.status().message(), "namespaces \"nosuch\" not found");

  json other_ns = Claim("x");
  other_ns["metadata"]["namespace"] = "kube-system";
  EXPECT_EQ(api::ToHttpError(registry_->Create(Kind("persistentvolumeclaims"), "default", other_ns).status()).code,
            400);
}

TEST_F(RegistryTest, CreateWithStatusKeepsTheStatusGivenAndIsAdmittedOtherwiseAsCreate) {
  auto kept = registry_->CreateSharedWithStatus(Kind("persistentvolumeclaims"), "default", Claim("data"));
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ((**kept)["status"], json({{"phase", "Bound"}}));
  EXPECT_EQ((**kept)["spec"]["volumeMode"], "Filesystem");
  EXPECT_EQ(registry_->Get(Kind("persistentvolumeclaims"), "default", "data")->at("status"), (**kept)["status"]);

  json without = Claim("plain");
  without.erase("status");
  auto initial = registry_->CreateSharedWithStatus(Kind("persistentvolumeclaims"), "default", without);
  ASSERT_TRUE(initial.ok()) << initial.status();
  EXPECT_EQ((**initial)["status"], json({{"phase", "Pending"}}));

  auto again = registry_->CreateSharedWithStatus(Kind("persistentvolumeclaims"), "default", Claim("data"));
  EXPECT_EQ(again.status().message(), "persistentvolumeclaims \"data\" already exists");
  auto nowhere = registry_->CreateSharedWithStatus(Kind("persistentvolumeclaims"), "nosuch", Claim("x"));
  EXPECT_EQ(api::ToHttpError(nowhere.status()).code, 404);
}

TEST_F(RegistryTest, CreateAllAdmitsEachObjectOnItsOwn) {
  ASSERT_TRUE(registry_->Create(Kind("persistentvolumeclaims"), "default", Claim("taken")).ok());
  json bad = Claim("bad");
  bad["kind"] = "Pod";
  auto results = registry_->CreateAll(Kind("persistentvolumeclaims"), {{"default", Claim("a")},
                                                                       {"default", Claim("taken")},
                                                                       {"nosuch", Claim("b")},
                                                                       {"default", bad},
                                                                       {"kube-system", Claim("c")}});
  ASSERT_EQ(results.size(), 5u);
  ASSERT_TRUE(results[0].ok()) << results[0].status();
  EXPECT_EQ((*results[0])["status"], json({{"phase", "Pending"}})) << "the same admission as Create";
  EXPECT_EQ(results[1].status().message(), "persistentvolumeclaims \"taken\" already exists");
  EXPECT_EQ(api::ToHttpError(results[2].status()).code, 404);
  EXPECT_EQ(api::ToHttpError(results[3].status()).code, 400);
  ASSERT_TRUE(results[4].ok()) << results[4].status();
  EXPECT_EQ((*results[4])["metadata"]["namespace"], "kube-system");
  EXPECT_TRUE(registry_->Get(Kind("persistentvolumeclaims"), "default", "a").ok());
  EXPECT_TRUE(registry_->Get(Kind("persistentvolumeclaims"), "kube-system", "c").ok());
  EXPECT_EQ(registry_->Get(Kind("persistentvolumeclaims"), "nosuch", "b").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(RegistryTest, GenerateNameAndKindMismatch) {
  json c = Claim("");
  c["metadata"].erase("name");
  c["metadata"]["generateName"] = "data-";
  auto pvc = registry_->Create(Kind("persistentvolumeclaims"), "default", c);
  ASSERT_TRUE(pvc.ok()) << pvc.status();
  EXPECT_THAT((*pvc)["metadata"]["name"].get<std::string>(), ::testing::MatchesRegex("data-[a-z0-9]{5}"));
  json wrong = Claim("w");
  wrong["kind"] = "PersistentVolume";
  EXPECT_EQ(api::ToHttpError(registry_->Create(Kind("persistentvolumeclaims"), "default", wrong).status()).code, 400);
}

TEST_F(RegistryTest, MainUpdateKeepsStatusAndStatusUpdateKeepsSpec) {
  auto pvc = registry_->Create(Kind("persistentvolumeclaims"), "default", Claim("data"));
  ASSERT_TRUE(pvc.ok());
  json status_change = *pvc;
  status_change["status"] = {{"phase", "Bound"}, {"capacity", {{"storage", "1Gi"}}}};
  status_change["metadata"]["labels"] = {{"ignored", "yes"}};
  auto bound =
      registry_->Update(Kind("persistentvolumeclaims"), "default", "data", status_change, Subresource::kStatus);
  ASSERT_TRUE(bound.ok()) << bound.status();
  EXPECT_EQ((*bound)["status"]["phase"], "Bound");
  EXPECT_FALSE((*bound)["metadata"].contains("labels"));  // metadata from /status is ignored

  json main_change = *bound;
  main_change["status"] = {{"phase", "Lost"}};
  main_change["metadata"]["labels"] = {{"app", "db"}};
  auto relabeled =
      registry_->Update(Kind("persistentvolumeclaims"), "default", "data", main_change, Subresource::kMain);
  ASSERT_TRUE(relabeled.ok()) << relabeled.status();
  EXPECT_EQ((*relabeled)["status"]["phase"], "Bound");
  EXPECT_EQ((*relabeled)["metadata"]["labels"]["app"], "db");
}

TEST_F(RegistryTest, MainAndStatusUpdateWritesBothInOneVersion) {
  auto pvc = registry_->Create(Kind("persistentvolumeclaims"), "default", Claim("data"));
  ASSERT_TRUE(pvc.ok());
  json both = *pvc;
  both["spec"]["volumeName"] = "pv-1";
  both["status"] = {{"phase", "Bound"}, {"capacity", {{"storage", "1Gi"}}}};
  auto bound = registry_->Update(Kind("persistentvolumeclaims"), "default", "data", both, Subresource::kMainAndStatus);
  ASSERT_TRUE(bound.ok()) << bound.status();
  EXPECT_EQ((*bound)["spec"]["volumeName"], "pv-1");
  EXPECT_EQ((*bound)["status"]["phase"], "Bound");
  EXPECT_EQ(std::stoll((*bound)["metadata"]["resourceVersion"].get<std::string>()),
            std::stoll((*pvc)["metadata"]["resourceVersion"].get<std::string>()) + 1)
      << "one write";
  // Validated as a main update is: an immutable spec field is refused and
  // nothing is written, status included.
  json immutable = *bound;
  immutable["spec"]["accessModes"] = {"ReadOnlyMany"};
  immutable["status"]["phase"] = "Lost";
  EXPECT_EQ(
      api::ToHttpError(
          registry_->Update(Kind("persistentvolumeclaims"), "default", "data", immutable, Subresource::kMainAndStatus)
              .status())
          .code,
      422);
  EXPECT_EQ((*registry_->Get(Kind("persistentvolumeclaims"), "default", "data"))["status"]["phase"], "Bound");
  // The resize admission applies too: no class allows this claim to grow.
  json grow = *bound;
  grow["spec"]["resources"]["requests"]["storage"] = "2Gi";
  auto grown = registry_->Update(Kind("persistentvolumeclaims"), "default", "data", grow, Subresource::kMainAndStatus);
  EXPECT_EQ(api::ToHttpError(grown.status()).code, 403) << grown.status();
}

TEST_F(RegistryTest, ClaimGrowsOnlyWhenItsClassAllowsExpansion) {
  for (bool allow : {false, true}) {
    std::string cls = allow ? "expandable" : "fixed";
    ASSERT_TRUE(
        registry_
            ->Create(Kind("storageclasses", "storage.k8s.io"), "",
                     {{"metadata", {{"name", cls}}}, {"provisioner", "x.csi.io"}, {"allowVolumeExpansion", allow}})
            .ok());
    json c = Claim("on-" + cls);
    c["spec"]["storageClassName"] = cls;
    ASSERT_TRUE(registry_->Create(Kind("persistentvolumeclaims"), "default", c).ok());
    ASSERT_TRUE(registry_
                    ->Patch(Kind("persistentvolumeclaims"), "default", "on-" + cls, R"({"status":{"phase":"Bound"}})",
                            PatchType::kMerge, Subresource::kStatus)
                    .ok());
    auto grown = registry_->Patch(Kind("persistentvolumeclaims"), "default", "on-" + cls,
                                  R"({"spec":{"resources":{"requests":{"storage":"2Gi"}}}})", PatchType::kMerge,
                                  Subresource::kMain);
    if (allow) {
      ASSERT_TRUE(grown.ok()) << grown.status();
      EXPECT_EQ((*grown)["spec"]["resources"]["requests"]["storage"], "2Gi");
    } else {
      EXPECT_EQ(api::ToHttpError(grown.status()).code, 403);
      EXPECT_THAT(grown.status().message(), HasSubstr("storageclass that provisions the pvc must support resize"));
    }
  }
}

TEST_F(RegistryTest, ClaimWithoutAClassGetsTheDefaultOne) {
  for (const char* name : {"plain", "the-default"}) {
    json sc = {{"metadata", {{"name", name}}}, {"provisioner", "x.csi.io"}};
    if (std::string(name) == "the-default") {
      sc["metadata"]["annotations"] = {{"storageclass.kubernetes.io/is-default-class", "true"}};
    }
    ASSERT_TRUE(registry_->Create(Kind("storageclasses", "storage.k8s.io"), "", sc).ok());
  }
  auto unnamed = registry_->Create(Kind("persistentvolumeclaims"), "default", Claim("a"));
  ASSERT_TRUE(unnamed.ok());
  EXPECT_EQ((*unnamed)["spec"]["storageClassName"], "the-default");
  json explicit_none = Claim("b");
  explicit_none["spec"]["storageClassName"] = "";  // "" means: no class, static binding only
  auto none = registry_->Create(Kind("persistentvolumeclaims"), "default", explicit_none);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ((*none)["spec"]["storageClassName"], "");
}

TEST_F(RegistryTest, AtMostOneDefaultBackupStorageLocation) {
  const api::KindInfo& bsl = Kind("backupstoragelocations", "backup.berth.io");
  auto location = [](const std::string& name, bool is_default) {
    return json{{"metadata", {{"name", name}}},
                {"spec", {{"provider", "filesystem"}, {"config", {{"path", "/srv/" + name}}}, {"default", is_default}}},
                {"status", {{"phase", "Available"}}}};
  };
  auto first = registry_->Create(bsl, "", location("default", true));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE(first->contains("status"));  // the controller's to write
  ASSERT_TRUE(registry_->Create(bsl, "", location("other", false)).ok());

  auto second = registry_->Create(bsl, "", location("second", true));
  EXPECT_EQ(api::ToHttpError(second.status()).code, 422);
  EXPECT_EQ(second.status().message(),
            "BackupStorageLocation \"second\" is invalid: spec.default: Forbidden: BackupStorageLocation "
            "\"default\" is the default already; set its spec.default to false first");
  auto promoted = registry_->Update(bsl, "", "other", location("other", true), Subresource::kMain);
  EXPECT_EQ(api::ToHttpError(promoted.status()).code, 422);

  // Unset the old default first, then the other may become it; the default
  // itself may be rewritten as it is.
  ASSERT_TRUE(registry_->Update(bsl, "", "default", location("default", false), Subresource::kMain).ok());
  ASSERT_TRUE(registry_->Update(bsl, "", "other", location("other", true), Subresource::kMain).ok());
  json renamed_path = location("other", true);
  renamed_path["spec"]["config"]["path"] = "/srv/moved";
  EXPECT_TRUE(registry_->Update(bsl, "", "other", renamed_path, Subresource::kMain).ok());
}

TEST_F(RegistryTest, BackupStatusIsItsControllersAndTtlDefaults) {
  const api::KindInfo& backups = Kind("backups", "backup.berth.io");
  auto created = registry_->Create(
      backups, "", {{"metadata", {{"name", "b"}}}, {"spec", json::object()}, {"status", {{"phase", "Completed"}}}});
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_FALSE(created->contains("status"));
  EXPECT_EQ((*created)["spec"]["ttl"], "720h0m0s");
  json in_progress = *created;
  in_progress["status"] = {{"phase", "InProgress"}, {"progress", {{"totalBytes", 10}, {"bytesDone", 5}}}};
  auto status = registry_->Update(backups, "", "b", in_progress, Subresource::kStatus);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ((*status)["status"]["progress"]["bytesDone"], 5);
  json spec_edit = *status;
  spec_edit["spec"]["storageLocation"] = "default";
  spec_edit["status"] = {{"phase", "Completed"}};
  auto main = registry_->Update(backups, "", "b", spec_edit, Subresource::kMain);
  ASSERT_TRUE(main.ok()) << main.status();
  EXPECT_EQ((*main)["spec"]["storageLocation"], "default");
  EXPECT_EQ((*main)["status"]["phase"], "InProgress");  // a main update keeps the status
}

TEST_F(RegistryTest, StaleResourceVersionConflictsAndUnconditionalUpdateDoesNot) {
  auto pvc = registry_->Create(Kind("persistentvolumeclaims"), "default", Claim("data"));
  ASSERT_TRUE(pvc.ok());
  json first = *pvc;
  first["metadata"]["labels"] = {{"a", "1"}};
  ASSERT_TRUE(registry_->Update(Kind("persistentvolumeclaims"), "default", "data", first, Subresource::kMain).ok());
  json stale = *pvc;  // still the old resourceVersion
  stale["metadata"]["labels"] = {{"a", "2"}};
  auto conflict = registry_->Update(Kind("persistentvolumeclaims"), "default", "data", stale, Subresource::kMain);
  EXPECT_EQ(api::ToHttpError(conflict.status()).code, 409);
  EXPECT_THAT(conflict.status().message(), HasSubstr("the object has been modified"));
  stale["metadata"].erase("resourceVersion");
  EXPECT_TRUE(registry_->Update(Kind("persistentvolumeclaims"), "default", "data", stale, Subresource::kMain).ok());
}

TEST_F(RegistryTest, ImmutableSpecIs422NamingTheField) {
  auto pvc = registry_->Create(Kind("persistentvolumeclaims"), "default", Claim("data"));
  ASSERT_TRUE(pvc.ok());
  auto patched =
      registry_->Patch(Kind("persistentvolumeclaims"), "default", "data",
                       R"({"spec":{"accessModes":["ReadWriteMany"]}})", PatchType::kMerge, Subresource::kMain);
  EXPECT_EQ(api::ToHttpError(patched.status()).code, 422);
  EXPECT_THAT(patched.status().message(), HasSubstr("spec: Forbidden: spec is immutable after creation"));
  // The stored object is unchanged.
  EXPECT_EQ((*registry_->Get(Kind("persistentvolumeclaims"), "default", "data"))["spec"]["accessModes"],
            json({"ReadWriteOnce"}));
  auto unknown = registry_->Patch(Kind("persistentvolumeclaims"), "default", "data", R"({"spec":{"sise":"1Gi"}})",
                                  PatchType::kMerge, Subresource::kMain);
  EXPECT_EQ(api::ToHttpError(unknown.status()).code, 400);
  EXPECT_THAT(unknown.status().message(), HasSubstr("unknown field \"spec.sise\""));
}

TEST_F(RegistryTest, ConcurrentPatchesAllApply) {
  ASSERT_TRUE(registry_->Create(Kind("persistentvolumeclaims"), "default", Claim("data")).ok());
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10; ++i) {
        auto st = registry_->Patch(
            Kind("persistentvolumeclaims"), "default", "data",
            json({{"metadata", {{"labels", {{"t" + std::to_string(t) + "-" + std::to_string(i), "x"}}}}}}).dump(),
            PatchType::kMerge, Subresource::kMain);
        EXPECT_TRUE(st.ok()) << st.status();
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ((*registry_->Get(Kind("persistentvolumeclaims"), "default", "data"))["metadata"]["labels"].size(), 80u);
}

TEST_F(RegistryTest, FinalizersDelayDeleteAndNoNewFinalizersWhileDeleting) {
  json c = Claim("data");
  c["metadata"]["finalizers"] = {"kubernetes.io/pvc-protection"};
  ASSERT_TRUE(registry_->Create(Kind("persistentvolumeclaims"), "default", c).ok());
  auto deleting = registry_->Delete(Kind("persistentvolumeclaims"), "default", "data");
  ASSERT_TRUE(deleting.ok());
  EXPECT_TRUE((*deleting)["metadata"].contains("deletionTimestamp"));
  auto add = registry_->Patch(Kind("persistentvolumeclaims"), "default", "data",
                              R"({"metadata":{"finalizers":["kubernetes.io/pvc-protection","more"]}})",
                              PatchType::kMerge, Subresource::kMain);
  EXPECT_EQ(api::ToHttpError(add.status()).code, 422);
  auto removed = registry_->Patch(Kind("persistentvolumeclaims"), "default", "data",
                                  R"({"metadata":{"finalizers":null}})", PatchType::kMerge, Subresource::kMain);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(registry_->Get(Kind("persistentvolumeclaims"), "default", "data").status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(RegistryTest, AStaleObjectConflictsBeforeItIsValidated) {
  json claim = Claim("data");
  claim["metadata"]["finalizers"] = {"a/keep", "b/keep"};
  auto created = registry_->Create(Kind("persistentvolumeclaims"), "default", claim);
  ASSERT_TRUE(created.ok()) << created.status();
  ASSERT_TRUE(registry_->Delete(Kind("persistentvolumeclaims"), "default", "data").ok());
  auto deleting = registry_->Get(Kind("persistentvolumeclaims"), "default", "data");
  ASSERT_TRUE(deleting.ok());
  // Another writer removes a finalizer...
  json removed = *deleting;
  removed["metadata"]["finalizers"] = {"b/keep"};
  ASSERT_TRUE(registry_->Update(Kind("persistentvolumeclaims"), "default", "data", removed, Subresource::kMain).ok());
  // ...so this writer's copy, read before, seems to add one back: it is a
  // 409 Conflict to retry on the fresh object, not a 422.
  json stale = *deleting;
  stale["metadata"]["finalizers"] = {"a/keep"};
  auto st = registry_->Update(Kind("persistentvolumeclaims"), "default", "data", stale, Subresource::kMain);
  EXPECT_EQ(st.status().code(), absl::StatusCode::kAborted) << st.status();
  EXPECT_EQ(api::ToHttpError(st.status()).code, 409);
}

TEST_F(RegistryTest, DeletePreconditionsAndNamespaceCascade) {
  ASSERT_TRUE(registry_->Create(Kind("namespaces"), "", {{"metadata", {{"name", "team"}}}}).ok());
  auto pvc = registry_->Create(Kind("persistentvolumeclaims"), "team", Claim("data"));
  ASSERT_TRUE(pvc.ok());
  auto wrong =
      registry_->Delete(Kind("persistentvolumeclaims"), "team", "data",
                        {.uid = "nope", .resource_version = std::nullopt, .grace_period_seconds = std::nullopt});
  EXPECT_EQ(api::ToHttpError(wrong.status()).code, 409);
  ASSERT_TRUE(registry_->Delete(Kind("namespaces"), "", "team").ok());
  EXPECT_EQ(registry_->Get(Kind("persistentvolumeclaims"), "team", "data").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(api::ToHttpError(registry_->Delete(Kind("namespaces"), "", "default").status()).code, 403);
}

TEST_F(RegistryTest, ListPagesWithLimitAndContinueAndFieldSelector) {
  for (int i = 0; i < 7; ++i) {
    json c = Claim("c" + std::to_string(i));
    c["metadata"]["labels"] = {{"even", i % 2 == 0 ? "yes" : "no"}};
    ASSERT_TRUE(registry_->Create(Kind("persistentvolumeclaims"), "default", c).ok());
  }
  ListOptions opts;
  opts.limit = 3;
  std::vector<std::string> names;
  int pages = 0;
  while (true) {
    auto page = registry_->List(Kind("persistentvolumeclaims"), "default", opts);
    ASSERT_TRUE(page.ok()) << page.status();
    ++pages;
    for (const auto& i : page->items) names.push_back(i["metadata"]["name"]);
    if (page->continue_token.empty()) break;
    opts.continue_token = page->continue_token;
  }
  EXPECT_EQ(pages, 3);
  EXPECT_THAT(names, ::testing::ElementsAre("c0", "c1", "c2", "c3", "c4", "c5", "c6"));
  ListOptions by_field;
  by_field.fields = *FieldSelector::Parse("metadata.name=c3");
  auto one = registry_->List(Kind("persistentvolumeclaims"), "", by_field);
  ASSERT_EQ(one->items.size(), 1u);
  ListOptions bad;
  bad.continue_token = "garbage!";
  EXPECT_EQ(api::ToHttpError(registry_->List(Kind("persistentvolumeclaims"), "default", bad).status()).code, 400);
}

TEST_F(RegistryTest, WatchFromZeroStartsWithAddedAndTooOldIsGone) {
  ASSERT_TRUE(registry_->Create(Kind("persistentvolumeclaims"), "default", Claim("a")).ok());
  auto w = registry_->Watch(Kind("persistentvolumeclaims"), "default", "0", {});
  ASSERT_TRUE(w.ok());
  ASSERT_EQ(w->initial.size(), 1u);
  ASSERT_TRUE(registry_->Create(Kind("persistentvolumeclaims"), "default", Claim("b")).ok());
  auto e = w->watcher->Next(absl::Seconds(5));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ((*e->object)["metadata"]["name"], "b");

  // A store with a tiny history forgets old versions: 410.
  berth::testing::TempDir dir;
  auto small = store::Store::Open({.path = dir.path() + "/s.db", .history = 2});
  Registry r(**small);
  ASSERT_TRUE(r.Bootstrap().ok());
  for (int i = 0; i < 5; ++i)
    ASSERT_TRUE(r.Create(Kind("persistentvolumeclaims"), "default", Claim("x" + std::to_string(i))).ok());
  auto gone = r.Watch(Kind("persistentvolumeclaims"), "default", "1", {});
  EXPECT_EQ(api::ToHttpError(gone.status()).code, 410);
}

TEST_F(RegistryTest, BindPodOnce) {
  json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", {{"name", "p"}}},
              {"spec", {{"containers", {{{"name", "c"}, {"image", "busybox"}}}}}}};
  ASSERT_TRUE(registry_->Create(Kind("pods"), "default", pod).ok());
  auto bound = registry_->BindPod("default", "p", "node-1");
  ASSERT_TRUE(bound.ok()) << bound.status();
  EXPECT_EQ((*bound)["spec"]["nodeName"], "node-1");
  EXPECT_EQ(api::ToHttpError(registry_->BindPod("default", "p", "node-2").status()).code, 409);
  // nodeName cannot be changed by an update either.
  auto moved = registry_->Patch(Kind("pods"), "default", "p", R"({"spec":{"nodeName":"node-2"}})", PatchType::kMerge,
                                Subresource::kMain);
  EXPECT_EQ(api::ToHttpError(moved.status()).code, 422);
}

TEST_F(RegistryTest, SecretStringDataBecomesData) {
  json secret = {{"apiVersion", "v1"},
                 {"kind", "Secret"},
                 {"metadata", {{"name", "s"}}},
                 {"stringData", {{"password", "hunter2"}}}};
  auto created = registry_->Create(Kind("secrets"), "default", secret);
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ((*created)["data"]["password"], "aHVudGVyMg==");
  EXPECT_FALSE(created->contains("stringData"));
}

TEST_F(RegistryTest, StorageProtectionAdmissionAddsFinalizersAtCreate) {
  auto plain = registry_->Create(Kind("persistentvolumeclaims"), "default", Claim("plain"));
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE((*plain)["metadata"].contains("finalizers"));
  registry_->EnableStorageProtectionAdmission(true);
  auto protected_claim = registry_->Create(Kind("persistentvolumeclaims"), "default", Claim("guarded"));
  ASSERT_TRUE(protected_claim.ok());
  EXPECT_EQ((*protected_claim)["metadata"]["finalizers"], json({"kubernetes.io/pvc-protection"}));
  json pv = {
      {"metadata", {{"name", "pv1"}, {"finalizers", {"example.com/x"}}}},
      {"spec",
       {{"capacity", {{"storage", "1Gi"}}}, {"accessModes", {"ReadWriteOnce"}}, {"hostPath", {{"path", "/tmp/x"}}}}}};
  auto created = registry_->Create(Kind("persistentvolumes"), "", pv);
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ((*created)["metadata"]["finalizers"], json({"example.com/x", "kubernetes.io/pv-protection"}));
}

}  // namespace
}  // namespace berth::apiserver
