#include "node/pods/logs.h"

#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "apiserver/registry.h"
#include "client/object.h"
#include "common/testing/eventually.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "http/testing/recording_writer.h"
#include "node/pods/pod_config.h"
#include "store/store.h"

namespace berth::node::pods {
namespace {

void Append(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::app);
  out << text;
}

std::string Copy(const std::string& path, const LogOptions& options) {
  std::string out;
  EXPECT_TRUE(CopyLog(
                  path, options,
                  [&](std::string_view s) {
                    out.append(s);
                    return true;
                  },
                  [] { return false; })
                  .ok());
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
  EXPECT_EQ(CopyLog(
                dir.Join("missing.log"), {}, [](std::string_view) { return true; }, [] { return false; })
                .code(),
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
  ASSERT_TRUE(CopyLog(
                  path, {.follow = true},
                  [&](std::string_view s) {
                    out.append(s);
                    return true;
                  },
                  keep, absl::Milliseconds(1))
                  .ok());
  EXPECT_EQ(out, "first\nunfinished\nafter rotation\n");
}

// ---- The pods/log subresource, followed ----

int Threads() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

TEST(PodLogTest, FollowedLogsShareOneThreadAndEndWithTheContainerOrTheClient) {
  berth::testing::TempDir dir;
  auto store = store::Store::Open({.path = dir.Join("state.db")});
  ASSERT_TRUE(store.ok()) << store.status();
  apiserver::Registry registry(**store);
  ASSERT_TRUE(registry.Bootstrap().ok());
  const std::string log_root = dir.Join("pods");
  auto running = [] {
    return nlohmann::json{{"containerStatuses",
                           {{{"name", "c"}, {"restartCount", 0}, {"state", {{"running", nlohmann::json::object()}}}}}}};
  };
  constexpr int kPods = 5;
  std::vector<std::string> logs;
  for (int i = 0; i < kPods; ++i) {
    const std::string name = "p" + std::to_string(i);
    auto pod = registry.Create(client::K("pods"), "default",
                               {{"apiVersion", "v1"},
                                {"kind", "Pod"},
                                {"metadata", {{"name", name}}},
                                {"spec", {{"containers", {{{"name", "c"}, {"image", "busybox"}}}}}}});
    ASSERT_TRUE(pod.ok()) << pod.status();
    (*pod)["status"] = running();
    ASSERT_TRUE(registry.Update(client::K("pods"), "default", name, *pod, apiserver::Subresource::kStatus).ok());
    const std::string d = PodLogDirectory(log_root, *pod) + "/c";
    std::filesystem::create_directories(d);
    logs.push_back(d + "/0.log");
    Append(logs.back(), "2026-01-01T00:00:01Z stdout F before " + name + "\n");
  }
  auto follow = [&](int i) {
    auto req = http::ParseRequest("GET /api/v1/namespaces/default/pods/p" + std::to_string(i) +
                                  "/log?follow=true HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT_TRUE(req.ok());
    auto w = std::make_unique<http::testing::RecordingWriter>();
    // Returns at once: the handler's thread is not held.
    EXPECT_TRUE(ServePodLog(registry, log_root, "default", "p" + std::to_string(i), *req, *w).ok());
    EXPECT_EQ(w->code, 200);
    EXPECT_TRUE(w->detached);
    EXPECT_EQ(w->stream->text(), "before p" + std::to_string(i) + "\n");
    return w;
  };
  std::vector<std::unique_ptr<http::testing::RecordingWriter>> writers;
  writers.push_back(follow(0));
  const int threads = Threads();  // with the followers' thread
  for (int i = 1; i < kPods; ++i) writers.push_back(follow(i));
  EXPECT_EQ(Threads(), threads);

  for (int i = 0; i < kPods; ++i) Append(logs[i], "2026-01-01T00:00:02Z stdout F after\n");
  ASSERT_TRUE(berth::testing::Eventually([&] {
    for (const auto& w : writers) {
      if (w->stream->text().find("after\n") == std::string::npos) return false;
    }
    return true;
  }));
  // The client of p1 goes away: nothing more is written to it.
  writers[1]->stream->Hangup();
  // p0's container stops: its stream ends.
  auto p0 = registry.Get(client::K("pods"), "default", "p0");
  ASSERT_TRUE(p0.ok());
  (*p0)["status"]["containerStatuses"][0]["state"] = {{"terminated", {{"exitCode", 0}}}};
  ASSERT_TRUE(registry.Update(client::K("pods"), "default", "p0", *p0, apiserver::Subresource::kStatus).ok());
  EXPECT_TRUE(berth::testing::Eventually([&] { return writers[0]->stream->Ended(); }));
  EXPECT_FALSE(writers[2]->stream->Ended());
  // The others end when their clients go (here, all of them).
  for (auto& w : writers) w->stream->Hangup();
}

}  // namespace
}  // namespace berth::node::pods
