#include "common/thread_name.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <thread>

namespace berth {
namespace {

// The name a new thread reads back after naming itself `name`.
std::string NameSeenAfter(std::string_view name) {
  std::string seen = "unset";
  std::thread t([&seen, name] {
    NameThisThread(name);
    char buf[16];
    seen = std::string(ThisThreadName(buf));
  });
  t.join();
  return seen;
}

TEST(ThreadNameTest, AThreadNamesItselfAndAnotherThreadKeepsItsOwnName) {
  char before[16];
  const std::string main_name(ThisThreadName(before));
  EXPECT_EQ(NameSeenAfter("store writer"), "store writer");
  char after[16];
  EXPECT_EQ(std::string(ThisThreadName(after)), main_name);
}

TEST(ThreadNameTest, ANameOverTheKernelsLimitIsCutTo15Bytes) {
  EXPECT_EQ(NameSeenAfter("pv binder: claim"), "pv binder: clai");  // 16 bytes
}

TEST(ThreadNameTest, ANamedThreadRunsItsFunctionUnderItsName) {
  std::string seen;
  NamedThread("watch hub", [&seen] {
    char buf[16];
    seen = std::string(ThisThreadName(buf));
  }).join();
  EXPECT_EQ(seen, "watch hub");
}

TEST(ThreadNameTest, AnEmptyNameIsAccepted) { EXPECT_EQ(NameSeenAfter(""), ""); }

}  // namespace
}  // namespace berth
