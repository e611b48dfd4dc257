// The hand-off of a write's result from the store's writer thread to the
// caller waiting for it (store_internal::WriteOutcome).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "store/store_internal.h"

namespace berth::store {
namespace {

using Outcome = WriteOutcome<absl::StatusOr<std::string>>;

TEST(WriteOutcomeTest, AResultSetBeforeTheCallerAsksIsTakenWithoutWaiting) {
  Outcome o;
  o.Set(std::string("written"));
  EXPECT_FALSE(o.Waiting());
  absl::StatusOr<std::string> r = o.Take();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, "written");
}

TEST(WriteOutcomeTest, ACallerThatAskedFirstSleepsUntilTheResultIsSet) {
  Outcome o;
  absl::StatusOr<std::string> taken = absl::UnknownError("not taken");
  std::thread caller([&] { taken = o.Take(); });
  // The caller is asleep in Take before the result exists.
  while (!o.Waiting()) std::this_thread::yield();
  EXPECT_EQ(taken.status().message(), "not taken");
  o.Set(absl::AlreadyExistsError("claim \"a\" already exists"));
  caller.join();
  EXPECT_EQ(taken.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(taken.status().message(), "claim \"a\" already exists");
}

TEST(WriteOutcomeTest, EveryCallerGetsItsOwnResultAcrossRacingHandOffs) {
  // Set and Take race in either order, as the writer and its callers do:
  // each caller must get exactly the result set for it, never another's or
  // none, and none may sleep for good.
  constexpr int kRounds = 2000;
  for (int round = 0; round < kRounds; ++round) {
    std::vector<std::shared_ptr<Outcome>> outcomes;
    for (int i = 0; i < 4; ++i) outcomes.push_back(std::make_shared<Outcome>());
    std::vector<std::string> got(outcomes.size());
    std::vector<std::thread> callers;
    for (size_t i = 0; i < outcomes.size(); ++i) {
      callers.emplace_back([&, i, o = outcomes[i]] {
        absl::StatusOr<std::string> r = o->Take();
        got[i] = r.ok() ? *r : std::string(r.status().message());
      });
    }
    for (size_t i = 0; i < outcomes.size(); ++i) outcomes[i]->Set(std::to_string(round) + "/" + std::to_string(i));
    for (auto& t : callers) t.join();
    for (size_t i = 0; i < outcomes.size(); ++i) ASSERT_EQ(got[i], std::to_string(round) + "/" + std::to_string(i));
  }
}

}  // namespace
}  // namespace berth::store
