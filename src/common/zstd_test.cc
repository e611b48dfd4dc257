#include "common/zstd.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/memory.h"
#include "gtest/gtest.h"

#if defined(__SANITIZE_ADDRESS__)
#define BERTH_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define BERTH_TEST_ASAN 1
#endif
#endif
#if BERTH_TEST_ASAN
// The sanitizer runtime's (sanitizer/allocator_interface.h, which gcc's
// packages do not install).
extern "C" size_t __sanitizer_get_current_allocated_bytes();
#else
#include <malloc.h>
#endif

namespace berth {
namespace {

// A bound claim's JSON as the store writes it, `i` making its names, uid
// and version its own.
std::string Claim(int i) {
  return absl::StrCat(
      R"({"apiVersion":"v1","kind":"PersistentVolumeClaim","metadata":{"annotations":{"pv.kubernetes.io/bind-completed":"yes","pv.kubernetes.io/bound-by-controller":"yes","volume.kubernetes.io/storage-provisioner":"local.csi.berth.io"},"creationTimestamp":"2026-11-28T21:12:)",
      i % 60, R"(Z","finalizers":["kubernetes.io/pvc-protection"],"name":"claim-)", i,
      R"(","namespace":"default","resourceVersion":")", 70000 + 9 * i, R"(","uid":"087960bc-b9c5-44b6-)", 1000 + i,
      R"(-0fb366b01c89"},"spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":")", 1 + i % 5,
      R"(Gi"}},"storageClassName":"berth-local","volumeMode":"Filesystem","volumeName":"pvc-087960bc-b9c5-44b6-)",
      1000 + i,
      R"(-0fb366b01c89"},"status":{"accessModes":["ReadWriteOnce"],"capacity":{"storage":"1Gi"},"phase":"Bound"}})");
}

std::shared_ptr<const ZstdDictionary> Trained(int n) {
  std::vector<std::string> texts;
  for (int i = 0; i < n; ++i) texts.push_back(Claim(i));
  std::vector<std::string_view> samples(texts.begin(), texts.end());
  return ZstdDictionary::Train(samples);
}

TEST(ZstdDictionaryTest, SmallAlikeTextsCompressWellAndComeBackIntact) {
  auto dict = Trained(500);
  ASSERT_NE(dict, nullptr);
  EXPECT_LE(dict->size(), ZstdDictionary::kCapacity);
  size_t plain = 0, packed = 0;
  for (int i = 10000; i < 10100; ++i) {  // objects the dictionary never saw
    const std::string text = Claim(i);
    const std::string frame = dict->Compress(text);
    ASSERT_FALSE(frame.empty());
    auto back = dict->Decompress(frame);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, text);
    plain += text.size();
    packed += frame.size();
  }
  EXPECT_LT(packed * 5, plain) << packed << " of " << plain << " bytes";
}

TEST(ZstdDictionaryTest, TooFewSamplesTrainNothing) { EXPECT_EQ(Trained(ZstdDictionary::kMinSamples - 1), nullptr); }

TEST(ZstdDictionaryTest, AFrameNotOfThisDictionaryIsDataLoss) {
  auto dict = Trained(200);
  ASSERT_NE(dict, nullptr);
  EXPECT_EQ(dict->Decompress("not a frame").status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(dict->Decompress("").status().code(), absl::StatusCode::kDataLoss);
  std::string frame = dict->Compress(Claim(7));
  frame.resize(frame.size() / 2);
  EXPECT_EQ(dict->Decompress(frame).status().code(), absl::StatusCode::kDataLoss);
  // Another dictionary's frame: zstd checks the dictionary's id.
  std::vector<std::string> texts;
  for (int i = 0; i < 200; ++i)
    texts.push_back(absl::StrCat(R"({"kind":"Event","reason":"Provisioning","count":)", i, "}"));
  auto other = ZstdDictionary::Train(std::vector<std::string_view>(texts.begin(), texts.end()));
  ASSERT_NE(other, nullptr);
  EXPECT_FALSE(dict->Decompress(other->Compress(texts[3])).ok());
}

// The trainer trains once there are enough texts and keeps that dictionary.
TEST(ZstdDictionaryTest, TheTrainerTrainsOnceThereAreEnoughTexts) {
  std::vector<std::string> texts;
  for (int i = 0; i < 400; ++i) texts.push_back(Claim(i));
  auto text = [&texts](size_t i) { return std::string_view(texts[i]); };
  ZstdDictionaryTrainer trainer;
  EXPECT_EQ(trainer.Get(ZstdDictionary::kMinSamples - 1, text), nullptr) << "too few";
  auto first = trainer.Get(200, text);
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(trainer.Get(400, text), first) << "trained once";
}

// The compression tables are freed between passes and made again by the
// next Compress, which makes the same frames with them.
TEST(ZstdDictionaryTest, TheCompressionTablesAreFreedAndMadeAgain) {
  auto dict = Trained(300);
  ASSERT_NE(dict, nullptr);
  EXPECT_GT(dict->CompressorBytes(), 16u << 10);  // made by Train, for the first pass
  const std::string before = dict->Compress(Claim(7));
  dict->ReleaseCompressor();
  EXPECT_EQ(dict->CompressorBytes(), 0u);
  dict->ReleaseCompressor();             // again: nothing to free
  auto back = dict->Decompress(before);  // frames need no compression tables
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, Claim(7));
  EXPECT_EQ(dict->Compress(Claim(7)), before);
  EXPECT_GT(dict->CompressorBytes(), 16u << 10);
}

TEST(ZstdDictionaryTest, ThreadsShareOneDictionary) {
  auto dict = Trained(200);
  ASSERT_NE(dict, nullptr);
  std::atomic<bool> done{false};
  // One more thread frees the compression tables while the others compress.
  std::thread releaser([&] {
    while (!done.load()) dict->ReleaseCompressor();
  });
  std::vector<std::thread> threads;
  std::vector<int> wrong(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 300; ++i) {
        const std::string text = Claim(t * 1000 + i);
        auto back = dict->Decompress(dict->Compress(text));
        if (!back.ok() || *back != text) ++wrong[t];
      }
    });
  }
  for (auto& th : threads) th.join();
  done = true;
  releaser.join();
  EXPECT_EQ(wrong, std::vector<int>(4, 0));
}

// A thread that goes idle gives its contexts back (common/memory.h), and
// makes new ones when it works again.
TEST(ZstdDictionaryTest, AThreadGivesItsContextsBackWhenIdle) {
  auto dict = Trained(200);
  ASSERT_NE(dict, nullptr);
  std::thread([&] {
    EXPECT_EQ(ThreadZstdContextBytes(), 0u);  // none before the first use
    const std::string frame = dict->Compress(Claim(7));
    ASSERT_TRUE(dict->Decompress(frame).ok());
    EXPECT_GT(ThreadZstdContextBytes(), 64u << 10);
    ReleaseThreadMemory();
    EXPECT_EQ(ThreadZstdContextBytes(), 0u);
    auto back = dict->Decompress(dict->Compress(Claim(8)));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, Claim(8));
  }).join();
}

// The process's heap in use: the sanitizer's count under ASan, glibc's
// otherwise (tests do not link mimalloc).
size_t HeapInUse() {
#if BERTH_TEST_ASAN
  return __sanitizer_get_current_allocated_bytes();
#else
  return mallinfo2().uordblks;
#endif
}

// Every idle thread runs the releasers: one that never used zstd must not
// allocate there (a block that lives as long as the thread kept a mimalloc
// segment, 52 KiB, in each of berth up's idle workers).
TEST(ZstdDictionaryTest, AThreadThatNeverUsedZstdAllocatesNothingWhenIdle) {
  auto dict = Trained(200);
  ASSERT_NE(dict, nullptr);
  ASSERT_FALSE(dict->Compress(Claim(1)).empty());  // the releaser is registered
  std::thread([] {
    const size_t before = HeapInUse();
    ReleaseThreadMemory();
    EXPECT_EQ(HeapInUse(), before);
  }).join();
}

}  // namespace
}  // namespace berth
