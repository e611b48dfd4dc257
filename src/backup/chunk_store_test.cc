#include "backup/chunk_store.h"

#include <zstd.h>

#include <filesystem>
#include <string>

#include "backup/manifest.h"
#include "common/fs.h"
#include "common/hash.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace berth::backup {
namespace {

using ::testing::HasSubstr;

class ChunkStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(ChunkStore::CreateLayout(dir_.Join("chunks")).ok()); }

  berth::testing::TempDir dir_;
  ChunkStore store_{dir_.Join("chunks"), 3};
};

TEST_F(ChunkStoreTest, StoresUnderItsHashAndReadsBack) {
  const std::string content(100000, 'x');
  absl::StatusOr<ChunkStore::PutResult> put = store_.Put(content);
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(put->hash, Sha256Hex(content));
  EXPECT_TRUE(put->added);
  EXPECT_GT(put->stored_bytes, 0);
  EXPECT_LT(put->stored_bytes, 1000);  // compressed
  EXPECT_EQ(store_.PathOf(put->hash), dir_.Join("chunks/" + put->hash.substr(0, 2) + "/" + put->hash + ".zst"));
  EXPECT_TRUE(std::filesystem::exists(store_.PathOf(put->hash)));
  absl::StatusOr<std::string> back = store_.Get(put->hash, kMaxChunkSize);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, content);
}

TEST_F(ChunkStoreTest, SecondPutOfSameContentAddsNothing) {
  ASSERT_TRUE(store_.Put("same").ok());
  absl::StatusOr<ChunkStore::PutResult> again = store_.Put("same");
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->added);
  EXPECT_EQ(again->stored_bytes, 0);
}

TEST_F(ChunkStoreTest, MissingChunkIsNotFound) {
  const std::string hash = Sha256Hex("never stored");
  absl::StatusOr<std::string> got = store_.Get(hash, kMaxChunkSize);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(got.status().message(), HasSubstr(hash));
}

TEST_F(ChunkStoreTest, FlippedByteIsDataLossNamingTheChunk) {
  absl::StatusOr<ChunkStore::PutResult> put = store_.Put(std::string(50000, 'y') + "tail");
  ASSERT_TRUE(put.ok());
  std::string raw = *ReadFile(store_.PathOf(put->hash));
  raw[raw.size() / 2] ^= 0x01;
  ASSERT_TRUE(WriteFileAtomic(store_.PathOf(put->hash), raw).ok());
  absl::StatusOr<std::string> got = store_.Get(put->hash, kMaxChunkSize);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(got.status().message(), HasSubstr(put->hash));
}

TEST_F(ChunkStoreTest, ValidFrameWithOtherContentIsDataLoss) {
  absl::StatusOr<ChunkStore::PutResult> put = store_.Put("original");
  ASSERT_TRUE(put.ok());
  const std::string other = "imposter";
  std::string frame(ZSTD_compressBound(other.size()), '\0');
  frame.resize(ZSTD_compress(frame.data(), frame.size(), other.data(), other.size(), 1));
  ASSERT_TRUE(WriteFileAtomic(store_.PathOf(put->hash), frame).ok());
  absl::StatusOr<std::string> got = store_.Get(put->hash, kMaxChunkSize);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(got.status().message(), HasSubstr("does not match its hash"));
}

TEST_F(ChunkStoreTest, ChunkClaimingMoreThanItsSizeIsRefusedBeforeAllocating) {
  absl::StatusOr<ChunkStore::PutResult> put = store_.Put(std::string(8192, 'z'));
  ASSERT_TRUE(put.ok());
  absl::StatusOr<std::string> got = store_.Get(put->hash, 4096);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss);
}

TEST_F(ChunkStoreTest, OversizedPutIsInvalid) {
  EXPECT_EQ(store_.Put(std::string(kMaxChunkSize + 1, 'a')).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace berth::backup
