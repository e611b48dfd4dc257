#include "driver/pool/ids.h"

#include "gtest/gtest.h"

namespace berth::driver {
namespace {

TEST(IdsTest, DeterministicFixedShape) {
  const std::string a = IdForName(IdKind::kVolume, "pvc-1");
  EXPECT_EQ(a, IdForName(IdKind::kVolume, "pvc-1"));
  EXPECT_NE(a, IdForName(IdKind::kVolume, "pvc-2"));
  EXPECT_EQ(a.size(), 4u + 32u);
  EXPECT_EQ(a.rfind("vol-", 0), 0u);
  EXPECT_EQ(IdForName(IdKind::kSnapshot, "s").rfind("snap-", 0), 0u);
  EXPECT_EQ(IdForName(IdKind::kGroupSnapshot, "g").rfind("group-", 0), 0u);
  EXPECT_TRUE(*CheckId("id", a, IdKind::kVolume));
  EXPECT_FALSE(*CheckId("id", a, IdKind::kSnapshot));
}

TEST(IdsTest, WellFormedForeignIdsAreNotOurs) {
  for (const char* id : {"fake-vol-id", "some-vol-id_1.2", "vol-XYZ", "vol-0123"}) {
    auto r = CheckId("id", id, IdKind::kVolume);
    ASSERT_TRUE(r.ok()) << id;
    EXPECT_FALSE(*r) << id;
  }
}

TEST(IdsTest, DangerousIdsAreInvalid) {
  for (const std::string& id : std::vector<std::string>{"", "..", "../etc", "a/b", ".hidden", std::string("a\0b", 3),
                                                        std::string(129, 'a'), "caf\xc3\xa9", "a b", "a\\b"}) {
    EXPECT_EQ(CheckId("id", id, IdKind::kVolume).status().code(), absl::StatusCode::kInvalidArgument) << id;
  }
}

TEST(IdsTest, NamesArePrintableAsciiUpTo128) {
  EXPECT_TRUE(ValidateName("name", "pvc-0b1c2d3e-1111-2222-3333-444455556666").ok());
  EXPECT_TRUE(ValidateName("name", std::string(128, 'x')).ok());
  for (const std::string& n :
       std::vector<std::string>{"", std::string(129, 'x'), "a/b", "tab\t", std::string("nul\0", 4), "\x7f"}) {
    EXPECT_EQ(ValidateName("name", n).code(), absl::StatusCode::kInvalidArgument) << n;
  }
}

}  // namespace
}  // namespace berth::driver
