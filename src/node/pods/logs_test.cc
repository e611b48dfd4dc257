#include "node/pods/logs.h"

#include <filesystem>
#include <fstream>

#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace berth::node::pods {
namespace {

void Append(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::app);
  out << text;
}

std::string Copy(const std::string& path, const LogOptions& options) {
  std::string out;
  EXPECT_TRUE(CopyLog(path, options, [&](std::string_view s) { out.append(s); return true; }, [] { return false; }).ok());
  return out;
}

TEST(CriLogTest, ParsesTheRuntimesFormat) {
  auto l = ParseCriLogLine("2016-10-06T00:17:09.669794202Z stdout F hello world");
  ASSERT_TRUE(l);
  EXPECT_EQ(l->stream, "stdout");
  EXPECT_FALSE(l->partial);
  EXPECT_EQ(l->content, "hello world");
  EXPECT_EQ(absl::ToUnixNanos(l->time) % 1000000000, 669794202);
  auto p = ParseCriLogLine("2016-10-06T00:17:09.669794202Z stderr P ");
  ASSERT_TRUE(p);
  EXPECT_TRUE(p->partial);
  EXPECT_EQ(p->content, "");
  EXPECT_FALSE(ParseCriLogLine("garbage"));
  EXPECT_FALSE(ParseCriLogLine("2016-10-06T00:17:09Z stdin F x"));
}

TEST(CriLogTest, JoinsPartialLinesTailsAndTimestamps) {
  berth::testing::TempDir dir;
  const std::string path = dir.Join("0.log");
  Append(path,
         "2026-01-01T00:00:01.5Z stdout F one\n"
         "2026-01-01T00:00:02Z stdout P tw\n"
         "2026-01-01T00:00:02.1Z stdout F o\n"
         "2026-01-01T00:00:03Z stderr F three\n");
  EXPECT_EQ(Copy(path, {}), "one\ntwo\nthree\n");
  EXPECT_EQ(Copy(path, {.tail_lines = 2}), "two\nthree\n");
  EXPECT_EQ(Copy(path, {.tail_lines = 0}), "");
  EXPECT_EQ(Copy(path, {.timestamps = true, .tail_lines = 1}), "2026-01-01T00:00:03Z three\n");
  EXPECT_EQ(Copy(path, {.limit_bytes = 6}), "one\ntw");
  EXPECT_EQ(Copy(path, {.since = absl::FromUnixSeconds(1767225602)}), "two\nthree\n");
  EXPECT_EQ(CopyLog(dir.Join("missing.log"), {}, [](std::string_view) { return true; }, [] { return false; }).code(),
            absl::StatusCode::kNotFound);
}

TEST(CriLogTest, FollowsAppendsAndRotation) {
  berth::testing::TempDir dir;
  const std::string path = dir.Join("0.log");
  Append(path, "2026-01-01T00:00:01Z stdout F first\n2026-01-01T00:00:01Z stdout F unfin");  // no newline yet
  std::string out;
  int polls = 0;
  auto keep = [&] {
    ++polls;
    if (polls == 1) Append(path, "ished\n");
    if (polls == 2) {
      std::filesystem::rename(path, path + ".20260101-000000");
      Append(path, "2026-01-01T00:00:02Z stdout F after rotation\n");
    }
    return polls < 4;
  };
  ASSERT_TRUE(CopyLog(path, {.follow = true}, [&](std::string_view s) { out.append(s); return true; }, keep,
                      absl::Milliseconds(1))
                  .ok());
  EXPECT_EQ(out, "first\nunfinished\nafter rotation\n");
}

}  // namespace
}  // namespace berth::node::pods
