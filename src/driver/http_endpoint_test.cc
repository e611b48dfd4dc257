// berth-csi's /healthz and /metrics over real sockets: the driver (fake
// kernel interfaces, no root) served by CsiServer with the metrics observer,
// called over its unix socket, and scraped over loopback TCP.
#include "driver/http_endpoint.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "absl/synchronization/notification.h"
#include "common/testing/temp_dir.h"
#include "csi/client.h"
#include "csi/server.h"
#include "csi/v1/csi.grpc.pb.h"
#include "driver/driver.h"
#include "driver/metrics.h"
#include "driver/testing/fakes.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/support/byte_buffer.h"
#include "gtest/gtest.h"
#include "metrics/testing/exposition_check.h"

namespace berth::driver {
namespace {

using metrics::testing::FindSample;
using metrics::testing::ParseExposition;
using ::testing::HasSubstr;
using ::testing::StartsWith;

struct HttpAnswer {
  int code = 0;
  std::string head;
  std::string body;
};

// One GET over loopback TCP with Connection: close.
HttpAnswer Get(int port, const std::string& path, const std::string& method = "GET") {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_port = htons(static_cast<uint16_t>(port));
  sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&sin), sizeof(sin)), 0) << std::strerror(errno);
  const std::string req = method + " " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  EXPECT_EQ(::write(fd, req.data(), req.size()), static_cast<ssize_t>(req.size()));
  std::string raw;
  char buf[8192];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) raw.append(buf, static_cast<size_t>(n));
  ::close(fd);
  HttpAnswer a;
  const size_t split = raw.find("\r\n\r\n");
  EXPECT_NE(split, std::string::npos) << raw;
  a.head = raw.substr(0, split);
  a.body = raw.substr(split + 4);
  if (raw.starts_with("HTTP/1.1 ")) a.code = std::stoi(raw.substr(9, 3));
  return a;
}

class HttpEndpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DriverOptions o;
    o.endpoint = "unix://" + dir_.Join("csi.sock");
    o.node_id = "node-a";
    o.pool = dir_.Join("pool");
    o.kubelet_root = dir_.Join("kubelet");
    auto d = Driver::Open(o, {&loops_, &mounter_, &formatter_, &freezer_});
    ASSERT_TRUE(d.ok()) << d.status();
    driver_ = std::move(*d);
    metrics_ = std::make_unique<DriverMetrics>(*driver_);
    csi::ServerOptions server_options;
    server_options.endpoint = o.endpoint;
    server_options.observer = metrics_.get();
    auto server = csi::CsiServer::Start(server_options, driver_->services());
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    auto http = StartHttpEndpoint("127.0.0.1:0", *driver_, *metrics_, [s = server_.get()] { return s->Serving(); });
    ASSERT_TRUE(http.ok()) << http.status();
    http_ = std::move(*http);
    auto ch = csi::ConnectUnix(o.endpoint, {.timeout = absl::Seconds(10)});
    ASSERT_TRUE(ch.ok()) << ch.status();
    channel_ = *ch;
  }
  void TearDown() override {
    if (http_) http_->Shutdown();
    if (server_) server_->Shutdown(absl::ZeroDuration());
  }

  std::vector<metrics::testing::ParsedSample> Scrape() {
    HttpAnswer a = Get(http_->tcp_port(), "/metrics");
    EXPECT_EQ(a.code, 200);
    EXPECT_THAT(a.head, HasSubstr("Content-Type: text/plain; version=0.0.4; charset=utf-8"));
    auto samples = ParseExposition(a.body);
    EXPECT_TRUE(samples.ok()) << samples.status() << "\n" << a.body;
    return samples.ok() ? *samples : std::vector<metrics::testing::ParsedSample>{};
  }

  berth::testing::TempDir dir_;
  testing::FakeLoopDevices loops_;
  testing::FakeMounter mounter_;
  testing::FakeFormatter formatter_{loops_};
  testing::FakeFreezer freezer_;
  std::unique_ptr<Driver> driver_;
  std::unique_ptr<DriverMetrics> metrics_;
  std::unique_ptr<csi::CsiServer> server_;
  std::unique_ptr<http::HttpServer> http_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(HttpEndpointTest, HealthzIsOkWhilePoolIsUsableAndCsiIsServing) {
  HttpAnswer a = Get(http_->tcp_port(), "/healthz");
  EXPECT_EQ(a.code, 200);
  EXPECT_EQ(a.body, "ok\n");

  // The pool's scratch directory gone: the pool is not writable any more.
  std::filesystem::rename(dir_.Join("pool/tmp"), dir_.Join("pool-tmp-away"));
  a = Get(http_->tcp_port(), "/healthz");
  EXPECT_EQ(a.code, 503);
  EXPECT_THAT(a.body, HasSubstr("is not usable"));
  std::filesystem::rename(dir_.Join("pool-tmp-away"), dir_.Join("pool/tmp"));
  EXPECT_EQ(Get(http_->tcp_port(), "/healthz").code, 200);

  // The socket file removed (nobody can reach the driver any more).
  std::filesystem::remove(dir_.Join("csi.sock"));
  a = Get(http_->tcp_port(), "/healthz");
  EXPECT_EQ(a.code, 503);
  EXPECT_THAT(a.body, HasSubstr("not serving"));
}

TEST_F(HttpEndpointTest, HealthzFailsOnceShutdownBegins) {
  server_->Shutdown(absl::ZeroDuration());
  HttpAnswer a = Get(http_->tcp_port(), "/healthz");
  EXPECT_EQ(a.code, 503);
  EXPECT_THAT(a.body, HasSubstr("not serving"));
}

TEST_F(HttpEndpointTest, OtherPathsAndMethodsAreRefused) {
  EXPECT_EQ(Get(http_->tcp_port(), "/").code, 404);
  EXPECT_EQ(Get(http_->tcp_port(), "/debug/pprof").code, 404);
  EXPECT_EQ(Get(http_->tcp_port(), "/metrics", "POST").code, 405);
}

TEST_F(HttpEndpointTest, MetricsCountCallsByMethodAndCodeAndShowThePool) {
  auto controller = ::csi::v1::Controller::NewStub(channel_);
  auto identity = ::csi::v1::Identity::NewStub(channel_);
  for (int i = 0; i < 3; ++i) {
    grpc::ClientContext ctx;
    ::csi::v1::ProbeResponse resp;
    ASSERT_TRUE(identity->Probe(&ctx, {}, &resp).ok());
  }
  {
    grpc::ClientContext ctx;
    ::csi::v1::CreateVolumeRequest req;
    req.set_name("data");
    req.mutable_capacity_range()->set_required_bytes(64 << 20);
    auto* cap = req.add_volume_capabilities();
    cap->mutable_mount()->set_fs_type("ext4");
    cap->mutable_access_mode()->set_mode(::csi::v1::VolumeCapability::AccessMode::SINGLE_NODE_WRITER);
    ::csi::v1::CreateVolumeResponse resp;
    ASSERT_TRUE(controller->CreateVolume(&ctx, req, &resp).ok());
  }
  {
    grpc::ClientContext ctx;
    ::csi::v1::DeleteVolumeRequest req;  // no volume_id: INVALID_ARGUMENT
    ::csi::v1::DeleteVolumeResponse resp;
    EXPECT_EQ(controller->DeleteVolume(&ctx, req, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  {
    // A method no CSI service has: counted as "unknown", not as its path.
    grpc::GenericStub generic(channel_);
    grpc::ClientContext ctx;
    grpc::Slice empty("");
    grpc::ByteBuffer in(&empty, 1), out;
    grpc::Status st;
    absl::Notification done;
    generic.UnaryCall(&ctx, "/csi.v1.Controller/NoSuchMethod", grpc::StubOptions(), &in, &out, [&](grpc::Status s) {
      st = std::move(s);
      done.Notify();
    });
    done.WaitForNotification();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNIMPLEMENTED);
  }

  auto samples = Scrape();
  const std::string probe = "/csi.v1.Identity/Probe";
  const std::string create = "/csi.v1.Controller/CreateVolume";
  const std::string del = "/csi.v1.Controller/DeleteVolume";
  EXPECT_EQ(*FindSample(samples, "berth_csi_requests_total", {{"method", probe}, {"code", "OK"}}), 3);
  EXPECT_EQ(*FindSample(samples, "berth_csi_requests_total", {{"method", create}, {"code", "OK"}}), 1);
  EXPECT_EQ(*FindSample(samples, "berth_csi_requests_total", {{"method", del}, {"code", "INVALID_ARGUMENT"}}), 1);
  EXPECT_EQ(
      FindSample(samples, "berth_csi_requests_total", {{"method", "/csi.v1.Controller/NoSuchMethod"}}).status().code(),
      absl::StatusCode::kNotFound);
  EXPECT_EQ(*FindSample(samples, "berth_csi_request_duration_seconds_count", {{"method", probe}}), 3);
  EXPECT_EQ(*FindSample(samples, "berth_csi_request_duration_seconds_bucket", {{"method", create}, {"le", "+Inf"}}), 1);
  EXPECT_GT(*FindSample(samples, "berth_csi_request_duration_seconds_sum", {{"method", create}}), 0);

  EXPECT_EQ(*FindSample(samples, "berth_volumes"), 1);
  EXPECT_EQ(*FindSample(samples, "berth_snapshots"), 0);
  EXPECT_EQ(*FindSample(samples, "berth_pool_ready"), 1);
  EXPECT_EQ(*FindSample(samples, "berth_pool_provisioned_bytes"), 64 << 20);
  EXPECT_GT(*FindSample(samples, "berth_pool_size_bytes"), 0);
  // Ratio 1: the limit is what the filesystem holds for data.
  EXPECT_GT(*FindSample(samples, "berth_pool_reserved_bytes"), 0);
  EXPECT_EQ(*FindSample(samples, "berth_pool_limit_bytes"),
            *FindSample(samples, "berth_pool_size_bytes") - *FindSample(samples, "berth_pool_reserved_bytes"));
  EXPECT_EQ(*FindSample(samples, "berth_pool_pressure"), 0);
  EXPECT_EQ(*FindSample(samples, "berth_build_info", {{"driver", "local.csi.berth.io"}, {"node", "node-a"}}), 1);
}

TEST_F(HttpEndpointTest, MetricsAreValidBeforeAnyCall) {
  // No call served yet: the call families have HELP and TYPE but no samples,
  // which is still well-formed.
  auto samples = Scrape();
  EXPECT_EQ(*FindSample(samples, "berth_volumes"), 0);
}

TEST(NodeExpansionOnlyTest, ControllerDoesNotAdvertiseExpandVolume) {
  berth::testing::TempDir dir;
  testing::FakeLoopDevices loops;
  testing::FakeMounter mounter;
  testing::FakeFormatter formatter{loops};
  testing::FakeFreezer freezer;
  for (bool controller_expansion : {true, false}) {
    DriverOptions o;
    o.endpoint = "unix:///unused.sock";
    o.node_id = "node-a";
    o.pool = dir.Join(controller_expansion ? "pool-a" : "pool-b");
    o.kubelet_root = dir.Join("kubelet");
    o.controller_expansion = controller_expansion;
    auto d = Driver::Open(o, {&loops, &mounter, &formatter, &freezer});
    ASSERT_TRUE(d.ok()) << d.status();
    ::csi::v1::ControllerGetCapabilitiesResponse resp;
    ASSERT_TRUE((*d)->controller().ControllerGetCapabilities(nullptr, nullptr, &resp).ok());
    bool expand = false;
    for (const auto& c : resp.capabilities()) {
      expand = expand || c.rpc().type() == ::csi::v1::ControllerServiceCapability::RPC::EXPAND_VOLUME;
    }
    EXPECT_EQ(expand, controller_expansion);
  }
}

}  // namespace
}  // namespace berth::driver
