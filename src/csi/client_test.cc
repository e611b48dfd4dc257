#include "csi/client.h"

#include <atomic>
#include <thread>

#include "common/testing/temp_dir.h"
#include "csi/server.h"
#include "csi/v1/csi.grpc.pb.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"

namespace berth::csi {
namespace {

class ReadyIdentity final : public ::csi::v1::Identity::Service {
 public:
  // ::csi::v1::Identity::Service
  grpc::Status Probe(grpc::ServerContext*, const ::csi::v1::ProbeRequest*, ::csi::v1::ProbeResponse* resp) override {
    resp->mutable_ready()->set_value(true);
    return grpc::Status::OK;
  }
};

grpc::Status ProbeOnce(::csi::v1::Identity::Stub& stub) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  ::csi::v1::ProbeResponse resp;
  return stub.Probe(&ctx, {}, &resp);
}

TEST(ConnectUnixTest, WaitsForServerThatStartsLater) {
  testing::TempDir dir;
  const std::string endpoint = "unix://" + dir.Join("late.sock");
  ReadyIdentity identity;
  std::unique_ptr<CsiServer> server;
  std::thread starter([&] {
    absl::SleepFor(absl::Milliseconds(400));
    auto s = CsiServer::Start({.endpoint = endpoint}, {&identity});
    ASSERT_TRUE(s.ok()) << s.status();
    server = std::move(*s);
  });
  const absl::Time start = absl::Now();
  auto channel = ConnectUnix(endpoint, {.timeout = absl::Seconds(15)});
  starter.join();
  ASSERT_TRUE(channel.ok()) << channel.status();
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(350));
  EXPECT_TRUE(ProbeOnce(*::csi::v1::Identity::NewStub(*channel)).ok());
}

TEST(ConnectUnixTest, TimesOutWhenNobodyListens) {
  testing::TempDir dir;
  const absl::Time start = absl::Now();
  auto channel = ConnectUnix(dir.Join("nobody.sock"), {.timeout = absl::Milliseconds(300)});
  EXPECT_EQ(channel.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(channel.status().message().find("nobody.sock"), std::string::npos);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(ConnectUnixTest, RejectsBadEndpoint) {
  EXPECT_EQ(ConnectUnix("dns:///example.com:443", {}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CallWithRetryTest, RetriesOnlyUnavailable) {
  int attempts = 0;
  grpc::Status st = CallWithRetry(
      [&] {
        ++attempts;
        return attempts < 3 ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "down") : grpc::Status::OK;
      },
      absl::Seconds(10), {.initial = absl::Milliseconds(1), .max = absl::Milliseconds(5)});
  EXPECT_TRUE(st.ok());
  EXPECT_EQ(attempts, 3);

  attempts = 0;
  st = CallWithRetry(
      [&] {
        ++attempts;
        return grpc::Status(grpc::StatusCode::NOT_FOUND, "no such volume");
      },
      absl::Seconds(10));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(attempts, 1);
}

TEST(CallWithRetryTest, GivesUpAfterTimeoutWithLastStatus) {
  std::atomic<int> attempts{0};
  const absl::Time start = absl::Now();
  grpc::Status st = CallWithRetry(
      [&] {
        ++attempts;
        return grpc::Status(grpc::StatusCode::UNAVAILABLE, "still down");
      },
      absl::Milliseconds(200), {.initial = absl::Milliseconds(10), .max = absl::Milliseconds(50)});
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(st.error_message(), "still down");
  EXPECT_GT(attempts, 1);
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
}

// The driver restarts under a connected client: calls fail with UNAVAILABLE
// while it is gone and CallWithRetry carries the client across the gap.
TEST(CallWithRetryTest, SurvivesServerRestart) {
  testing::TempDir dir;
  const std::string endpoint = "unix://" + dir.Join("restart.sock");
  ReadyIdentity identity;
  auto server = CsiServer::Start({.endpoint = endpoint}, {&identity});
  ASSERT_TRUE(server.ok()) << server.status();
  auto channel = ConnectUnix(endpoint, {.timeout = absl::Seconds(10)});
  ASSERT_TRUE(channel.ok()) << channel.status();
  auto stub = ::csi::v1::Identity::NewStub(*channel);
  ASSERT_TRUE(ProbeOnce(*stub).ok());

  server->reset();
  EXPECT_EQ(ProbeOnce(*stub).error_code(), grpc::StatusCode::UNAVAILABLE);
  std::thread restarter([&] {
    absl::SleepFor(absl::Milliseconds(300));
    auto s = CsiServer::Start({.endpoint = endpoint}, {&identity});
    ASSERT_TRUE(s.ok()) << s.status();
    *server = std::move(*s);
  });
  int attempts = 0;
  grpc::Status st = CallWithRetry(
      [&] {
        ++attempts;
        return ProbeOnce(*stub);
      },
      absl::Seconds(15), {.initial = absl::Milliseconds(20), .max = absl::Milliseconds(200)});
  restarter.join();
  EXPECT_TRUE(st.ok()) << st.error_message();
  EXPECT_GT(attempts, 1);
}

}  // namespace
}  // namespace berth::csi
