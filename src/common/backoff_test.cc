#include "common/backoff.h"

#include <vector>

#include "gtest/gtest.h"

namespace berth {
namespace {

TEST(BackoffTest, DoublesUpToMaxWithoutJitter) {
  Backoff b({.initial = absl::Milliseconds(100), .max = absl::Milliseconds(700), .jitter = 0}, [] { return 0.5; });
  std::vector<absl::Duration> got;
  for (int i = 0; i < 5; ++i) got.push_back(b.Next());
  EXPECT_EQ(got, (std::vector<absl::Duration>{absl::Milliseconds(100), absl::Milliseconds(200), absl::Milliseconds(400),
                                              absl::Milliseconds(700), absl::Milliseconds(700)}));
}

TEST(BackoffTest, JitterSpreadsAroundNominal) {
  double r = 0.0;
  Backoff b({.initial = absl::Seconds(1), .max = absl::Seconds(100), .jitter = 0.5}, [&r] { return r; });
  r = 0.0;  // lowest: 1 - 0.5
  EXPECT_EQ(b.Next(), absl::Milliseconds(500));
  r = 0.75;  // 1 + 0.5 * 0.5 of nominal 2s
  EXPECT_EQ(b.Next(), absl::Milliseconds(2500));
}

TEST(BackoffTest, ResetStartsOver) {
  Backoff b({.initial = absl::Milliseconds(10), .jitter = 0});
  b.Next();
  b.Next();
  EXPECT_EQ(b.nominal(), absl::Milliseconds(40));
  b.Reset();
  EXPECT_EQ(b.Next(), absl::Milliseconds(10));
}

TEST(BackoffTest, RandomJitterStaysInBounds) {
  Backoff b({.initial = absl::Milliseconds(100), .max = absl::Seconds(1), .jitter = 0.2});
  absl::Duration nominal = absl::Milliseconds(100);
  for (int i = 0; i < 50; ++i) {
    absl::Duration d = b.Next();
    EXPECT_GE(d, nominal * 0.8);
    EXPECT_LE(d, std::min(absl::Seconds(1), nominal * 1.2));
    nominal = std::min(absl::Seconds(1), nominal * 2);
  }
}

// A Backoff kept by value in a container is moved; its random jitter must
// read the moved-to object's generator (under ASan, reading the old one's
// is a use after scope).
TEST(BackoffTest, AMovedBackoffStillJitters) {
  std::vector<Backoff> moved;
  {
    Backoff b({.initial = absl::Milliseconds(100), .max = absl::Seconds(1), .jitter = 0.2});
    moved.push_back(std::move(b));
  }
  for (int i = 0; i < 20; ++i) moved.push_back(Backoff({.initial = absl::Milliseconds(100), .jitter = 0.2}));
  const absl::Duration d = moved.front().Next();
  EXPECT_GE(d, absl::Milliseconds(80));
  EXPECT_LE(d, absl::Milliseconds(120));
}

}  // namespace
}  // namespace berth

namespace berth {
namespace {

TEST(ItemBackoffTest, EachKeyDoublesOnItsOwnAndForgetResetsIt) {
  ItemBackoff b({.base = absl::Seconds(1), .max = absl::Seconds(10), .jitter = 0}, [] { return 0.5; });
  EXPECT_EQ(b.When("a"), absl::Seconds(1));
  EXPECT_EQ(b.When("a"), absl::Seconds(2));
  EXPECT_EQ(b.When("b"), absl::Seconds(1));
  EXPECT_EQ(b.When("a"), absl::Seconds(4));
  EXPECT_EQ(b.When("a"), absl::Seconds(8));
  EXPECT_EQ(b.When("a"), absl::Seconds(10));
  EXPECT_EQ(b.Failures("a"), 5);
  b.Forget("a");
  EXPECT_EQ(b.Failures("a"), 0);
  EXPECT_EQ(b.When("a"), absl::Seconds(1));
  EXPECT_EQ(b.Failures("b"), 1);
}

TEST(ItemBackoffTest, JitterStaysWithinItsFractionAndTheCap) {
  ItemBackoff b({.base = absl::Seconds(4), .max = absl::Seconds(5), .jitter = 0.25});
  for (int i = 0; i < 100; ++i) {
    const absl::Duration d = b.When("k" + std::to_string(i));
    EXPECT_GE(d, absl::Seconds(3));
    EXPECT_LE(d, absl::Seconds(5));
  }
}

TEST(TokenBucketTest, BurstThenQpsOnTheClock) {
  FakeClock clock;
  TokenBucket bucket(2, 3, clock);
  EXPECT_EQ(bucket.Reserve(), absl::ZeroDuration());
  EXPECT_EQ(bucket.Reserve(), absl::ZeroDuration());
  EXPECT_EQ(bucket.Reserve(), absl::ZeroDuration());
  EXPECT_EQ(bucket.Reserve(), absl::Milliseconds(500));
  EXPECT_EQ(bucket.Reserve(), absl::Seconds(1));
  clock.Advance(absl::Seconds(10));  // refills to the burst, not beyond
  EXPECT_EQ(bucket.Reserve(), absl::ZeroDuration());
  EXPECT_EQ(bucket.Reserve(), absl::ZeroDuration());
  EXPECT_EQ(bucket.Reserve(), absl::ZeroDuration());
  EXPECT_EQ(bucket.Reserve(), absl::Milliseconds(500));
}

TEST(TokenBucketTest, ZeroQpsIsUnlimited) {
  FakeClock clock;
  TokenBucket bucket(0, 1, clock);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(bucket.Reserve(), absl::ZeroDuration());
}

}  // namespace
}  // namespace berth
