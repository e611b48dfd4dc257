#include "common/fs.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"

namespace berth {
namespace {

namespace fs = std::filesystem;

TEST(WriteFileAtomicTest, WritesReplacesAndSetsMode) {
  testing::TempDir dir;
  const std::string p = dir.Join("state.json");
  ASSERT_TRUE(WriteFileAtomic(p, "one").ok());
  EXPECT_EQ(*ReadFile(p), "one");
  ASSERT_TRUE(WriteFileAtomic(p, "two", 0640).ok());
  EXPECT_EQ(*ReadFile(p), "two");
  struct stat st {};
  ASSERT_EQ(::stat(p.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640);
  // No temp file is left behind.
  int entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir.path())) ++entries;
  EXPECT_EQ(entries, 1);
}

TEST(WriteFileAtomicTest, FailsCleanlyInMissingDirectory) {
  testing::TempDir dir;
  EXPECT_EQ(WriteFileAtomic(dir.Join("nope/x"), "x").code(), absl::StatusCode::kNotFound);
}

TEST(ReadFileTest, MissingIsNotFound) {
  testing::TempDir dir;
  EXPECT_EQ(ReadFile(dir.Join("missing")).status().code(), absl::StatusCode::kNotFound);
}

TEST(RemoveTempFilesTest, RemovesOnlyInterruptedWrites) {
  testing::TempDir dir;
  std::ofstream(dir.Join(".vol.json.tmp-0123")) << "half";
  std::ofstream(dir.Join("vol.json")) << "whole";
  std::ofstream(dir.Join(".hidden")) << "keep";
  auto removed = RemoveTempFiles(dir.path());
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(*removed, 1);
  EXPECT_TRUE(fs::exists(dir.Join("vol.json")));
  EXPECT_TRUE(fs::exists(dir.Join(".hidden")));
  EXPECT_FALSE(fs::exists(dir.Join(".vol.json.tmp-0123")));
}

TEST(MakeDirsTest, CreatesNestedAndRefusesFiles) {
  testing::TempDir dir;
  ASSERT_TRUE(MakeDirs(dir.Join("a/b/c")).ok());
  EXPECT_TRUE(fs::is_directory(dir.Join("a/b/c")));
  EXPECT_TRUE(MakeDirs(dir.Join("a/b/c")).ok());
  std::ofstream(dir.Join("f")) << "x";
  EXPECT_FALSE(MakeDirs(dir.Join("f")).ok());
}

TEST(CanonicalPathTest, Rules) {
  EXPECT_TRUE(IsCanonicalAbsolutePath("/"));
  EXPECT_TRUE(IsCanonicalAbsolutePath("/var/lib/kubelet/pods/x"));
  for (const char* bad : {"", "relative", "/a/", "/a//b", "/a/./b", "/a/../b", "/.."}) {
    EXPECT_FALSE(IsCanonicalAbsolutePath(bad)) << bad;
  }
}

TEST(CheckPathInsideTest, InsideCanonicalAndNoSymlinks) {
  testing::TempDir dir;
  const std::string root = dir.Join("kubelet");
  fs::create_directories(root + "/pods/p1");
  EXPECT_TRUE(CheckPathInside(root, root + "/pods/p1/mount").ok());
  EXPECT_TRUE(CheckPathInside(root, root + "/pods/new/deeper").ok());
  EXPECT_EQ(CheckPathInside(root, root).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckPathInside(root, root + "x/y").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckPathInside(root, dir.Join("elsewhere")).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckPathInside(root, root + "/pods/../../etc").code(), absl::StatusCode::kInvalidArgument);
  fs::create_directory_symlink("/etc", root + "/pods/evil");
  absl::Status st = CheckPathInside(root, root + "/pods/evil/passwd");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("symlink"), std::string::npos);
}

TEST(IsEmptyDirTest, Works) {
  testing::TempDir dir;
  EXPECT_TRUE(*IsEmptyDir(dir.path()));
  std::ofstream(dir.Join("x")) << "x";
  EXPECT_FALSE(*IsEmptyDir(dir.path()));
}

TEST(NarrowToOwnerTest, NarrowsWideModesAndReportsTheOldOne) {
  testing::TempDir dir;
  const std::string d = dir.Join("data"), f = dir.Join("data/state.db"), g = dir.Join("data/key");
  ASSERT_EQ(::mkdir(d.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(d.c_str(), 0755), 0);
  ASSERT_TRUE(WriteFileAtomic(f, "x", 0600).ok());
  ASSERT_EQ(::chmod(f.c_str(), 0644), 0);
  ASSERT_TRUE(WriteFileAtomic(g, "x", 0400).ok());
  ASSERT_TRUE(WriteFileAtomic(dir.Join("data/other"), "x", 0600).ok());
  ASSERT_EQ(::symlink("other", dir.Join("data/link").c_str()), 0);

  auto narrowed = NarrowToOwner(d);
  ASSERT_TRUE(narrowed.ok()) << narrowed.status();
  EXPECT_EQ(narrowed->value_or(0), 0755u);
  narrowed = NarrowToOwner(f);
  ASSERT_TRUE(narrowed.ok());
  EXPECT_EQ(narrowed->value_or(0), 0644u);
  struct stat st {};
  ASSERT_EQ(::stat(d.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  ASSERT_EQ(::stat(f.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);

  // Already private, a symlink, or missing: nothing to report.
  EXPECT_EQ(*NarrowToOwner(g), std::nullopt);
  ASSERT_EQ(::stat(g.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0400u);  // never widened
  EXPECT_EQ(*NarrowToOwner(dir.Join("data/link")), std::nullopt);
  EXPECT_EQ(*NarrowToOwner(dir.Join("data/missing")), std::nullopt);
}

}  // namespace
}  // namespace berth
