#include "api/kinds.h"

#include <set>

#include "api/names.h"
#include "gtest/gtest.h"

namespace berth::api {
namespace {

TEST(KindsTest, ManifestAndRestLookups) {
  const KindInfo* pvc = FindKind("v1", "PersistentVolumeClaim");
  ASSERT_NE(pvc, nullptr);
  EXPECT_TRUE(pvc->namespaced);
  EXPECT_EQ(pvc->resource, "persistentvolumeclaims");
  const KindInfo* sc = FindKind("storage.k8s.io/v1", "StorageClass");
  ASSERT_NE(sc, nullptr);
  EXPECT_FALSE(sc->namespaced);
  EXPECT_EQ(FindResource("snapshot.storage.k8s.io", "volumesnapshots")->kind, "VolumeSnapshot");
  EXPECT_EQ(FindKind("storage.k8s.io/v1beta1", "StorageClass"), nullptr);
  EXPECT_EQ(FindKind("v1", "Deployment"), nullptr);
}

TEST(KindsTest, UserNamesAndShortNames) {
  EXPECT_EQ(FindByUserName("pvc")->kind, "PersistentVolumeClaim");
  EXPECT_EQ(FindByUserName("PersistentVolumes")->kind, "PersistentVolume");
  EXPECT_EQ(FindByUserName("sc")->kind, "StorageClass");
  EXPECT_EQ(FindByUserName("vs")->kind, "VolumeSnapshot");
  EXPECT_EQ(FindByUserName("vsc")->kind, "VolumeSnapshotContent");
  EXPECT_EQ(FindByUserName("vsclass")->kind, "VolumeSnapshotClass");
  EXPECT_EQ(FindByUserName("va")->kind, "VolumeAttachment");
  EXPECT_EQ(FindByUserName("bsl")->kind, "BackupStorageLocation");
  EXPECT_EQ(FindByUserName("backups")->kind, "Backup");
  EXPECT_EQ(FindByUserName("restore")->kind, "Restore");
  EXPECT_EQ(FindByUserName("schedules.backup.berth.io")->kind, "Schedule");
  EXPECT_FALSE(FindByUserName("backup")->namespaced);
  EXPECT_EQ(FindByUserName("storageclasses.storage.k8s.io")->kind, "StorageClass");
  EXPECT_EQ(FindByUserName("storageclasses.example.com"), nullptr);
  EXPECT_EQ(FindByUserName("deployments"), nullptr);
}

TEST(KindsTest, NamesAreUnique) {
  std::set<std::string_view> seen;
  for (const auto& k : AllKinds()) {
    for (auto n : k.short_names) EXPECT_TRUE(seen.insert(n).second) << n;
    EXPECT_TRUE(seen.insert(k.resource).second) << k.resource;
  }
}

TEST(NamesTest, SubdomainAndLabelRulesWithKubernetesMessages) {
  EXPECT_TRUE(ValidateDns1123Subdomain("metadata.name", "pvc-1.example").ok());
  absl::Status st = ValidateDns1123Subdomain("metadata.name", "My_PVC");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("metadata.name: Invalid value: \"My_PVC\": a lowercase RFC 1123 subdomain"),
            std::string::npos);
  EXPECT_FALSE(ValidateDns1123Subdomain("metadata.name", "").ok());
  EXPECT_FALSE(ValidateDns1123Subdomain("metadata.name", "a..b").ok());
  EXPECT_FALSE(ValidateDns1123Subdomain("metadata.name", std::string(254, 'a')).ok());
  EXPECT_TRUE(ValidateDns1123Label("metadata.namespace", "kube-system").ok());
  EXPECT_FALSE(ValidateDns1123Label("metadata.namespace", "a.b").ok());
  EXPECT_FALSE(ValidateDns1123Label("metadata.namespace", std::string(64, 'a')).ok());
}

}  // namespace
}  // namespace berth::api
