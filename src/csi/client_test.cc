#include "csi/client.h"

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

}  // namespace
}  // namespace berth::csi
