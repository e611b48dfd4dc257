#include "backup/manifest.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace berth::backup {
namespace {

using ::testing::HasSubstr;

const std::string kHashA(64, 'a');
const std::string kHashB(64, 'b');

Manifest Sample() {
  Manifest m;
  m.name = "nightly-1";
  m.created_unix_nanos = 1700000000000000000;
  m.objects.push_back({{"kind", "PersistentVolumeClaim"}, {"metadata", {{"name", "data"}}}});
  VolumeManifest v;
  v.name = "default/data";
  v.size_bytes = (int64_t{5} << 20) + 4096;
  v.chunk_size = int64_t{1} << 20;
  v.base_backup = "nightly-0";
  v.extents = {{0, 1 << 20, kHashA}, {int64_t{5} << 20, 4096, kHashB}};
  m.volumes.push_back(v);
  return m;
}

TEST(ManifestTest, RoundTripsThroughJson) {
  const Manifest m = Sample();
  absl::StatusOr<Manifest> back = ManifestFromJson(ManifestToJson(m), "nightly-1");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->name, m.name);
  EXPECT_EQ(back->created_unix_nanos, m.created_unix_nanos);
  EXPECT_EQ(back->objects, m.objects);
  ASSERT_EQ(back->volumes.size(), 1u);
  EXPECT_EQ(back->volumes[0].extents, m.volumes[0].extents);
  EXPECT_EQ(back->volumes[0].base_backup, "nightly-0");
  EXPECT_EQ(back->volumes[0].StoredBytes(), (1 << 20) + 4096);
}

TEST(ManifestTest, BackupNamesThatCouldEscapeAreRejected) {
  for (const char* bad : {"", "..", ".", "../etc", "a/b", ".hidden", "-x", "a b", "a\nb", "x/../../y"}) {
    EXPECT_EQ(ValidateBackupName(bad).code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(ValidateBackupName(std::string(254, 'a')).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ValidateBackupName("nightly-2024.01.01_a").ok());
  EXPECT_TRUE(ValidateBackupName(std::string(253, 'a')).ok());
}

TEST(ManifestTest, NewerFormatIsRefusedAsPrecondition) {
  std::string text = ManifestToJson(Sample());
  text.replace(text.find("\"format\":1"), 10, "\"format\":" + std::to_string(kManifestFormat + 1));
  absl::StatusOr<Manifest> m = ManifestFromJson(text, "nightly-1");
  EXPECT_EQ(m.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(m.status().message(), HasSubstr("newer berth"));
}

TEST(ManifestTest, TruncatedManifestIsDataLossNamingTheBackup) {
  const std::string text = ManifestToJson(Sample());
  absl::StatusOr<Manifest> m = ManifestFromJson(text.substr(0, text.size() / 2), "nightly-1");
  EXPECT_EQ(m.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(m.status().message(), HasSubstr("\"nightly-1\""));
}

TEST(ManifestTest, ManifestOfAnotherBackupIsDataLoss) {
  absl::StatusOr<Manifest> m = ManifestFromJson(ManifestToJson(Sample()), "nightly-2");
  EXPECT_EQ(m.status().code(), absl::StatusCode::kDataLoss);
}

TEST(ManifestTest, BrokenExtentsAreDataLoss) {
  auto with = [](auto mutate) {
    Manifest m = Sample();
    mutate(m.volumes[0]);
    return ManifestFromJson(ManifestToJson(m), "nightly-1").status();
  };
  EXPECT_EQ(with([](VolumeManifest& v) { v.extents[1].offset = 4096; }).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(with([](VolumeManifest& v) { v.extents[0].length = 0; }).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(with([](VolumeManifest& v) { v.extents[1].length = 8192; }).code(), absl::StatusCode::kDataLoss);
  // A slice reaching past the end of the largest chunk the volume may have.
  EXPECT_EQ(with([](VolumeManifest& v) { v.extents[0].chunk_offset = 4096; }).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(with([](VolumeManifest& v) { v.extents[1].chunk_offset = -4096; }).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(with([](VolumeManifest& v) { v.extents[0].hash = "../../x"; }).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(with([](VolumeManifest& v) { std::swap(v.extents[0], v.extents[1]); }).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(with([](VolumeManifest& v) { v.extents[1].offset = int64_t{6} << 20; }).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(with([](VolumeManifest& v) { v.chunk_size = 3 << 20; }).code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(with([](VolumeManifest&) {}).ok());
}

TEST(ManifestTest, SlicesNeedFormatTwoAndWholeChunksStayFormatOne) {
  // Whole chunks only: format 1, readable by a berth that knows no slices.
  const std::string whole = ManifestToJson(Sample());
  EXPECT_THAT(whole, HasSubstr("\"format\":1"));

  // An incremental backup's cut: the base chunk's first 8 KiB, a changed 4
  // KiB block from a packed chunk, the base chunk's rest.
  Manifest m = Sample();
  m.volumes[0].extents = {{0, 8192, kHashA},
                          {8192, 4096, kHashB, 12288},
                          {12288, (1 << 20) - 12288, kHashA, 12288},
                          {int64_t{5} << 20, 4096, kHashB}};
  const std::string sliced = ManifestToJson(m);
  EXPECT_THAT(sliced, HasSubstr("\"format\":2"));
  absl::StatusOr<Manifest> back = ManifestFromJson(sliced, "nightly-1");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->volumes[0].extents, m.volumes[0].extents);
  EXPECT_EQ(back->volumes[0].StoredBytes(), (1 << 20) + 4096);

  // The same slices claimed as format 1 are malformed, not misread.
  std::string lying = sliced;
  lying.replace(lying.find("\"format\":2"), 10, "\"format\":1");
  absl::StatusOr<Manifest> refused = ManifestFromJson(lying, "nightly-1");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(refused.status().message(), HasSubstr("extent is not [offset, length, hash]"));
}

TEST(ManifestTest, DuplicateVolumeIsDataLoss) {
  Manifest m = Sample();
  m.volumes.push_back(m.volumes[0]);
  EXPECT_EQ(ManifestFromJson(ManifestToJson(m), "nightly-1").status().code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace berth::backup
