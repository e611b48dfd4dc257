#include "client/event_memory.h"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace berth::client {
namespace {

using Key = EventMemory::Key;

Key K(int i) {
  return EventMemory::KeyOf(absl::StrCat("uid-", i, "\nProvisioning\nExternal provisioner is provisioning"));
}

EventMemory::Event E(int64_t ns, int seconds) { return {.name_ns = ns, .last = absl::FromUnixSeconds(seconds)}; }

TEST(EventMemoryTest, KeysAreTheIdentity) {
  EXPECT_EQ(K(1), K(1));
  EXPECT_NE(K(1), K(2));
  std::set<std::pair<uint64_t, uint64_t>> keys;
  for (int i = 0; i < 100000; ++i) keys.emplace(K(i).a, K(i).b);
  EXPECT_EQ(keys.size(), 100000u);
  // Both halves tell them apart on their own.
  std::set<uint64_t> a, b;
  for (int i = 0; i < 100000; ++i) {
    a.insert(K(i).a);
    b.insert(K(i).b);
  }
  EXPECT_EQ(a.size(), 100000u);
  EXPECT_EQ(b.size(), 100000u);
}

TEST(EventMemoryTest, RemembersAndUpdates) {
  EventMemory memory(4);
  EXPECT_EQ(memory.Find(K(1)), nullptr);
  memory.Remember(K(1), E(100, 10));
  const EventMemory::Event* e = memory.Find(K(1));
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->name_ns, 100);
  EXPECT_EQ(e->last, absl::FromUnixSeconds(10));
  memory.Remember(K(1), E(100, 20));
  ASSERT_NE(memory.Find(K(1)), nullptr);
  EXPECT_EQ(memory.Find(K(1))->last, absl::FromUnixSeconds(20));
  EXPECT_EQ(memory.size(), 1u);
}

TEST(EventMemoryTest, ForgetsTheLeastRecentlyRememberedWhenFull) {
  EventMemory memory(3);
  for (int i = 1; i <= 3; ++i) memory.Remember(K(i), E(i, i));
  memory.Remember(K(1), E(1, 4));  // 1 is the most recent now; 2 the least
  memory.Remember(K(4), E(4, 5));
  EXPECT_EQ(memory.size(), 3u);
  EXPECT_EQ(memory.Find(K(2)), nullptr);
  for (int i : {1, 3, 4}) EXPECT_NE(memory.Find(K(i)), nullptr) << i;
  memory.Remember(K(5), E(5, 6));  // then 3
  EXPECT_EQ(memory.Find(K(3)), nullptr);
  for (int i : {1, 4, 5}) ASSERT_NE(memory.Find(K(i)), nullptr) << i;
  EXPECT_EQ(memory.Find(K(5))->name_ns, 5);
}

TEST(EventMemoryTest, ForgottenSlotsAreReused) {
  EventMemory memory(3);
  for (int i = 1; i <= 3; ++i) memory.Remember(K(i), E(i, i));
  memory.Forget(K(2));
  memory.Forget(K(2));  // again: nothing
  EXPECT_EQ(memory.size(), 2u);
  EXPECT_EQ(memory.Find(K(2)), nullptr);
  memory.Remember(K(6), E(6, 7));  // a free slot: nothing else goes
  EXPECT_EQ(memory.size(), 3u);
  for (int i : {1, 3, 6}) EXPECT_NE(memory.Find(K(i)), nullptr) << i;
  memory.Forget(K(1));  // the oldest
  memory.Forget(K(6));  // the newest
  memory.Remember(K(7), E(7, 8));
  memory.Remember(K(8), E(8, 9));
  memory.Remember(K(9), E(9, 10));  // full again: 3 is the least recent
  EXPECT_EQ(memory.Find(K(3)), nullptr);
  for (int i : {7, 8, 9}) EXPECT_NE(memory.Find(K(i)), nullptr) << i;
  EXPECT_EQ(memory.size(), 3u);
}

// Many rounds of remembering and forgetting keep it exact (an LRU kept
// beside it as the reference).
TEST(EventMemoryTest, AgreesWithAPlainLruUnderChurn) {
  constexpr size_t kCapacity = 64;
  EventMemory memory(kCapacity);
  std::vector<int> order;  // most recent first
  uint64_t state = 12345;
  auto next = [&state] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<int>(state >> 33);
  };
  for (int step = 0; step < 20000; ++step) {
    const int id = next() % 200;
    auto at = std::find(order.begin(), order.end(), id);
    if (next() % 4 == 0) {
      memory.Forget(K(id));
      if (at != order.end()) order.erase(at);
    } else {
      memory.Remember(K(id), E(id, step));
      if (at != order.end()) order.erase(at);
      order.insert(order.begin(), id);
      if (order.size() > kCapacity) order.pop_back();
    }
    ASSERT_EQ(memory.size(), order.size()) << step;
  }
  for (int id = 0; id < 200; ++id) {
    const bool kept = std::find(order.begin(), order.end(), id) != order.end();
    const EventMemory::Event* e = memory.Find(K(id));
    ASSERT_EQ(e != nullptr, kept) << id;
    if (kept) {
      EXPECT_EQ(e->name_ns, id);
    }
  }
}

TEST(EventMemoryTest, NothingIsKeptWithNoCapacity) {
  EventMemory memory(0);
  memory.Remember(K(1), E(1, 1));
  EXPECT_EQ(memory.Find(K(1)), nullptr);
  EXPECT_EQ(memory.size(), 0u);
}

}  // namespace
}  // namespace berth::client
