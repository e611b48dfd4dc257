#include "csi/server.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/synchronization/notification.h"
#include "common/testing/log_capture.h"
#include "common/testing/temp_dir.h"
#include "csi/client.h"
#include "csi/v1/csi.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"

namespace berth::csi {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

// Identity whose Probe can be made slow, to test draining on shutdown.
class TestIdentity final : public ::csi::v1::Identity::Service {
 public:
  absl::Notification probe_started;
  std::atomic<int> probe_ms{0};
  std::atomic<bool> probe_until_cancelled{false};

  // ::csi::v1::Identity::Service
  grpc::Status GetPluginInfo(grpc::ServerContext*, const ::csi::v1::GetPluginInfoRequest*,
                             ::csi::v1::GetPluginInfoResponse* resp) override {
    resp->set_name("test.csi.berth.io");
    resp->set_vendor_version("1.0.0");
    return grpc::Status::OK;
  }
  grpc::Status Probe(grpc::ServerContext* ctx, const ::csi::v1::ProbeRequest*,
                     ::csi::v1::ProbeResponse* resp) override {
    if (!probe_started.HasBeenNotified()) probe_started.Notify();
    if (probe_until_cancelled) {
      const absl::Time give_up = absl::Now() + absl::Seconds(20);
      while (!ctx->IsCancelled() && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(5));
      return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
    }
    absl::SleepFor(absl::Milliseconds(probe_ms.load()));
    resp->mutable_ready()->set_value(true);
    return grpc::Status::OK;
  }
};

// A controller that answers CreateVolume; every other RPC is UNIMPLEMENTED.
class TestController final : public ::csi::v1::Controller::Service {
 public:
  // ::csi::v1::Controller::Service
  grpc::Status CreateVolume(grpc::ServerContext*, const ::csi::v1::CreateVolumeRequest* req,
                            ::csi::v1::CreateVolumeResponse* resp) override {
    resp->mutable_volume()->set_volume_id(req->name());
    resp->mutable_volume()->set_capacity_bytes(1 << 20);
    return grpc::Status::OK;
  }
};

class CsiServerTest : public ::testing::Test {
 protected:
  std::string Endpoint() const { return "unix://" + dir_.Join("csi/csi.sock"); }
  std::string SocketPath() const { return dir_.Join("csi/csi.sock"); }

  std::shared_ptr<grpc::Channel> Connect() {
    auto ch = ConnectUnix(Endpoint(), {.timeout = absl::Seconds(10)});
    EXPECT_TRUE(ch.ok()) << ch.status();
    return ch.ok() ? *ch : nullptr;
  }

  testing::TempDir dir_;
  TestIdentity identity_;
  TestController controller_;
  ::csi::v1::Node::Service node_;  // all UNIMPLEMENTED
};

TEST_F(CsiServerTest, ServesServicesWithSocketMode0660) {
  auto server = CsiServer::Start({.endpoint = Endpoint()}, {&identity_, &controller_});
  ASSERT_TRUE(server.ok()) << server.status();
  struct stat st {};
  ASSERT_EQ(::stat(SocketPath().c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0660);

  auto stub = ::csi::v1::Identity::NewStub(Connect());
  grpc::ClientContext ctx;
  ::csi::v1::GetPluginInfoResponse resp;
  ASSERT_TRUE(stub->GetPluginInfo(&ctx, {}, &resp).ok());
  EXPECT_EQ(resp.name(), "test.csi.berth.io");
}

TEST_F(CsiServerTest, BareAbsolutePathEndpointAndCustomMode) {
  auto server = CsiServer::Start({.endpoint = SocketPath(), .socket_mode = 0600}, {&identity_});
  ASSERT_TRUE(server.ok()) << server.status();
  struct stat st {};
  ASSERT_EQ(::stat(SocketPath().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600);
}

TEST_F(CsiServerTest, EveryCallIsLoggedAndSecretsNeverAre) {
  testing::LogCapture log;
  auto server = CsiServer::Start({.endpoint = Endpoint()}, {&identity_, &controller_, &node_});
  ASSERT_TRUE(server.ok()) << server.status();
  auto channel = Connect();

  ::csi::v1::CreateVolumeRequest create;
  create.set_name("pvc-123");
  (*create.mutable_secrets())["password"] = "S3cr3t-create";
  (*create.mutable_parameters())["fsType"] = "xfs";
  {
    grpc::ClientContext ctx;
    ::csi::v1::CreateVolumeResponse resp;
    ASSERT_TRUE(::csi::v1::Controller::NewStub(channel)->CreateVolume(&ctx, create, &resp).ok());
  }
  ::csi::v1::NodeStageVolumeRequest stage;
  stage.set_volume_id("pvc-123");
  (*stage.mutable_secrets())["key"] = "S3cr3t-stage";
  {
    grpc::ClientContext ctx;
    ::csi::v1::NodeStageVolumeResponse resp;
    EXPECT_EQ(::csi::v1::Node::NewStub(channel)->NodeStageVolume(&ctx, stage, &resp).error_code(),
              grpc::StatusCode::UNIMPLEMENTED);
  }
  server->get()->Shutdown(absl::Seconds(1));  // all log lines are written

  const std::string text = log.text();
  EXPECT_THAT(text, HasSubstr("method=/csi.v1.Controller/CreateVolume code=OK"));
  EXPECT_THAT(text, HasSubstr(R"("parameters":{"fsType":"xfs"})"));
  EXPECT_THAT(text, HasSubstr(R"("secrets":"***stripped***")"));
  EXPECT_THAT(text, HasSubstr(R"(response={"volume":{"capacity_bytes":1048576)"));
  EXPECT_THAT(text, HasSubstr("method=/csi.v1.Node/NodeStageVolume code=UNIMPLEMENTED"));
  EXPECT_THAT(text, HasSubstr(R"(request={"volume_id":"pvc-123","secrets":"***stripped***"})"));
  EXPECT_THAT(text, Not(HasSubstr("S3cr3t")));
  EXPECT_THAT(text, HasSubstr("duration="));
}

TEST_F(CsiServerTest, ShutdownLetsInFlightCallsFinishAndRemovesSocket) {
  identity_.probe_ms = 400;
  auto server = CsiServer::Start({.endpoint = Endpoint()}, {&identity_});
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = ::csi::v1::Identity::NewStub(Connect());

  grpc::Status in_flight;
  ::csi::v1::ProbeResponse resp;
  std::thread caller([&] {
    grpc::ClientContext ctx;
    in_flight = stub->Probe(&ctx, {}, &resp);
  });
  identity_.probe_started.WaitForNotification();
  server->get()->Shutdown(absl::Seconds(10));
  caller.join();

  EXPECT_TRUE(in_flight.ok()) << in_flight.error_message();
  EXPECT_TRUE(resp.ready().value());
  EXPECT_FALSE(fs::exists(SocketPath()));

  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  ::csi::v1::ProbeResponse after;
  EXPECT_EQ(stub->Probe(&ctx, {}, &after).error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(CsiServerTest, ShutdownCancelsCallsStillRunningAfterGrace) {
  identity_.probe_until_cancelled = true;
  auto server = CsiServer::Start({.endpoint = Endpoint()}, {&identity_});
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = ::csi::v1::Identity::NewStub(Connect());
  grpc::Status in_flight;
  std::thread caller([&] {
    grpc::ClientContext ctx;
    ::csi::v1::ProbeResponse resp;
    in_flight = stub->Probe(&ctx, {}, &resp);
  });
  identity_.probe_started.WaitForNotification();
  const absl::Time start = absl::Now();
  server->get()->Shutdown(absl::Milliseconds(200));
  caller.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_FALSE(in_flight.ok());
  EXPECT_FALSE(fs::exists(SocketPath()));
}

TEST_F(CsiServerTest, RefusesRegularFileAtSocketPath) {
  fs::create_directories(dir_.Join("csi"));
  std::ofstream(SocketPath()) << "not a socket";
  auto server = CsiServer::Start({.endpoint = Endpoint()}, {&identity_});
  EXPECT_EQ(server.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(fs::is_regular_file(SocketPath()));
}

TEST_F(CsiServerTest, ReplacesStaleSocketOfCrashedRunButNotLiveOne) {
  {
    // What a crashed run leaves: a bound socket file nobody listens on.
    fs::create_directories(dir_.Join("csi"));
    int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    SocketPath().copy(addr.sun_path, sizeof(addr.sun_path) - 1);
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    ::close(fd);
    ASSERT_TRUE(fs::is_socket(SocketPath()));
  }
  auto first = CsiServer::Start({.endpoint = Endpoint()}, {&identity_});
  ASSERT_TRUE(first.ok()) << first.status();
  // A second server must not steal a socket that is being served.
  auto second = CsiServer::Start({.endpoint = Endpoint()}, {&identity_});
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(fs::is_socket(SocketPath()));
  grpc::ClientContext ctx;
  ::csi::v1::GetPluginInfoResponse resp;
  EXPECT_TRUE(::csi::v1::Identity::NewStub(Connect())->GetPluginInfo(&ctx, {}, &resp).ok());
}

TEST_F(CsiServerTest, RejectsBadEndpoint) {
  EXPECT_EQ(CsiServer::Start({.endpoint = "tcp://127.0.0.1:1"}, {&identity_}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace berth::csi
