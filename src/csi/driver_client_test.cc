#include "csi/driver_client.h"

#include <atomic>
#include <map>
#include <string>

#include "absl/synchronization/mutex.h"
#include "common/testing/log_capture.h"
#include "common/testing/temp_dir.h"
#include "csi/client.h"
#include "csi/server.h"
#include "gmock/gmock.h"
#include "grpcpp/server_context.h"
#include "gtest/gtest.h"
#include "metrics/testing/exposition_check.h"

namespace berth::csi {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A controller and node whose answers a test chooses.
class FakeDriver final : public ::csi::v1::Controller::Service, public ::csi::v1::Node::Service {
 public:
  std::atomic<grpc::StatusCode> answer{grpc::StatusCode::OK};
  std::atomic<bool> hang{false};  // until the caller's deadline cancels the call

  std::map<std::string, std::string> last_secrets() const {
    absl::MutexLock lock(&mu_);
    return last_secrets_;
  }

  // ::csi::v1::Controller::Service
  grpc::Status CreateVolume(grpc::ServerContext* ctx, const ::csi::v1::CreateVolumeRequest* req,
                            ::csi::v1::CreateVolumeResponse* resp) override {
    {
      absl::MutexLock lock(&mu_);
      last_secrets_ = {req->secrets().begin(), req->secrets().end()};
    }
    if (hang) {
      const absl::Time give_up = absl::Now() + absl::Seconds(20);
      while (!ctx->IsCancelled() && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(2));
      return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
    }
    if (answer != grpc::StatusCode::OK) return grpc::Status(answer, "the driver says no");
    resp->mutable_volume()->set_volume_id("vol-" + req->name());
    resp->mutable_volume()->set_capacity_bytes(req->capacity_range().required_bytes());
    return grpc::Status::OK;
  }
  grpc::Status DeleteVolume(grpc::ServerContext*, const ::csi::v1::DeleteVolumeRequest*,
                            ::csi::v1::DeleteVolumeResponse*) override {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "no such volume");
  }
  // ::csi::v1::Node::Service
  grpc::Status NodeStageVolume(grpc::ServerContext*, const ::csi::v1::NodeStageVolumeRequest*,
                               ::csi::v1::NodeStageVolumeResponse*) override {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "no such volume");
  }

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, std::string> last_secrets_ ABSL_GUARDED_BY(mu_);
};

class DriverClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = CsiServer::Start({.endpoint = Endpoint()}, {static_cast<::csi::v1::Controller::Service*>(&driver_),
                                                              static_cast<::csi::v1::Node::Service*>(&driver_)});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    auto channel = ConnectUnix(Endpoint(), {.timeout = absl::Seconds(10)});
    ASSERT_TRUE(channel.ok()) << channel.status();
    channel_ = *channel;
  }
  void TearDown() override {
    if (server_) server_->Shutdown(absl::Seconds(1));
  }
  std::string Endpoint() const { return "unix://" + dir_.Join("csi.sock"); }
  DriverClient Client() { return DriverClient(channel_, {.driver = "test.csi.berth.io", .metrics = &metrics_}); }

  static ::csi::v1::CreateVolumeRequest Create() {
    ::csi::v1::CreateVolumeRequest req;
    req.set_name("pvc-1");
    req.mutable_capacity_range()->set_required_bytes(1 << 20);
    return req;
  }

  testing::TempDir dir_;
  FakeDriver driver_;
  std::unique_ptr<CsiServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  CallMetrics metrics_{"csi_sidecar_operations_seconds", "test", false};
};

TEST_F(DriverClientTest, AnswersAndCountsWithTheSidecarsLabels) {
  auto created = Client().CreateVolume(Create());
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ(created->volume().volume_id(), "vol-pvc-1");
  EXPECT_EQ(metrics_.Count("test.csi.berth.io", "/csi.v1.Controller/CreateVolume", grpc::StatusCode::OK), 1u);

  std::string text;
  metrics_.Write(&text);
  ASSERT_TRUE(metrics::testing::CheckExposition(text).ok()) << text;
  EXPECT_THAT(text, HasSubstr("# TYPE csi_sidecar_operations_seconds histogram"));
  EXPECT_THAT(text, HasSubstr("csi_sidecar_operations_seconds_count{driver_name=\"test.csi.berth.io\","
                              "method_name=\"/csi.v1.Controller/CreateVolume\",grpc_status_code=\"OK\"} 1"));
  // csi-lib-utils' buckets: 0.1 s up to 600 s.
  EXPECT_THAT(text, HasSubstr("le=\"0.1\""));
  EXPECT_THAT(text, HasSubstr("le=\"600\""));
}

TEST_F(DriverClientTest, DeadlineExceededIsNotFinalAndCounted) {
  driver_.hang = true;
  const absl::Time start = absl::Now();
  auto created = Client().CreateVolume(Create(), {.timeout = absl::Milliseconds(200)});
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(created.status().code(), absl::StatusCode::kDeadlineExceeded) << created.status();
  EXPECT_EQ(Classify(created.status()), ErrorClass::kNonFinal);
  EXPECT_GE(took, absl::Milliseconds(190));
  EXPECT_LT(took, absl::Seconds(10));  // the per-call override, not the 1 min default
  EXPECT_EQ(metrics_.Count("test.csi.berth.io", "/csi.v1.Controller/CreateVolume", grpc::StatusCode::DEADLINE_EXCEEDED),
            1u);
  std::string text;
  metrics_.Write(&text);
  EXPECT_THAT(text, HasSubstr("grpc_status_code=\"DeadlineExceeded\""));
}

TEST_F(DriverClientTest, UnavailableIsDriverUnavailable) {
  driver_.answer = grpc::StatusCode::UNAVAILABLE;
  auto created = Client().CreateVolume(Create());
  EXPECT_EQ(created.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Classify(created.status()), ErrorClass::kDriverUnavailable);
  EXPECT_EQ(metrics_.Count("test.csi.berth.io", "/csi.v1.Controller/CreateVolume", grpc::StatusCode::UNAVAILABLE), 1u);
}

TEST_F(DriverClientTest, NoServerAtAllIsDriverUnavailable) {
  server_->Shutdown(absl::Seconds(1));
  server_.reset();
  auto created = Client().CreateVolume(Create(), {.timeout = absl::Seconds(5)});
  EXPECT_EQ(Classify(created.status()), ErrorClass::kDriverUnavailable) << created.status();
}

TEST_F(DriverClientTest, FinalErrorKeepsTheDriversCodeAndMessage) {
  driver_.answer = grpc::StatusCode::INVALID_ARGUMENT;
  auto created = Client().CreateVolume(Create());
  EXPECT_EQ(created.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(created.status().message(), "the driver says no");
  EXPECT_EQ(Classify(created.status()), ErrorClass::kFinal);
  driver_.answer = grpc::StatusCode::RESOURCE_EXHAUSTED;
  EXPECT_EQ(Classify(Client().CreateVolume(Create()).status()), ErrorClass::kNonFinal);
}

TEST_F(DriverClientTest, NotFoundOfARemovalIsDoneButNotOfAnythingElse) {
  ::csi::v1::DeleteVolumeRequest del;
  del.set_volume_id("gone");
  EXPECT_TRUE(Client().DeleteVolume(del).ok());
  // Counted with the driver's own code, as the sidecars do.
  EXPECT_EQ(metrics_.Count("test.csi.berth.io", "/csi.v1.Controller/DeleteVolume", grpc::StatusCode::NOT_FOUND), 1u);
  ::csi::v1::NodeStageVolumeRequest stage;
  stage.set_volume_id("gone");
  EXPECT_EQ(Client().NodeStageVolume(stage).code(), absl::StatusCode::kNotFound);
}

TEST_F(DriverClientTest, SecretsReachTheDriverButNeverTheLog) {
  testing::LogCapture log;  // at trace: the debug lines are rendered too
  auto created = Client().CreateVolume(Create(), {.secrets = {{"password", "S3cr3t-ok"}}});
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ(driver_.last_secrets(), (std::map<std::string, std::string>{{"password", "S3cr3t-ok"}}));
  driver_.answer = grpc::StatusCode::INTERNAL;
  EXPECT_FALSE(Client().CreateVolume(Create(), {.secrets = {{"password", "S3cr3t-failed"}}}).ok());
  server_->Shutdown(absl::Seconds(1));  // the server's log lines are written too
  server_.reset();

  const std::string text = log.text();
  EXPECT_THAT(text, HasSubstr("csi call driver=test.csi.berth.io method=/csi.v1.Controller/CreateVolume timeout=1m"));
  EXPECT_THAT(text, HasSubstr("code=OK"));
  EXPECT_THAT(text, HasSubstr(R"(response={"volume":{"capacity_bytes":1048576)"));
  EXPECT_THAT(text, HasSubstr("code=INTERNAL"));
  EXPECT_THAT(text, HasSubstr(R"("secrets":"***stripped***")"));
  EXPECT_THAT(text, Not(HasSubstr("S3cr3t")));
}

TEST_F(DriverClientTest, SecretsForARequestWithoutThemAreRefused) {
  auto caps = Client().ControllerGetCapabilities({.secrets = {{"k", "v"}}});
  EXPECT_EQ(caps.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(DefaultTimeoutTest, PerCallKind) {
  EXPECT_EQ(DefaultTimeout("/csi.v1.Identity/Probe"), absl::Seconds(10));
  EXPECT_EQ(DefaultTimeout("CreateVolume"), absl::Minutes(1));
  EXPECT_EQ(DefaultTimeout("/csi.v1.Controller/ControllerExpandVolume"), absl::Minutes(2));
  EXPECT_EQ(DefaultTimeout("GetCapacity"), absl::Seconds(30));
  EXPECT_EQ(DefaultTimeout("NodeStageVolume"), absl::Minutes(2));
  EXPECT_EQ(DefaultTimeout("NodeGetInfo"), absl::Seconds(30));
}

TEST(GoCodeNameTest, AsGrpcGoPrintsThem) {
  EXPECT_EQ(GoCodeName(grpc::StatusCode::OK), "OK");
  EXPECT_EQ(GoCodeName(grpc::StatusCode::CANCELLED), "Canceled");
  EXPECT_EQ(GoCodeName(grpc::StatusCode::UNAUTHENTICATED), "Unauthenticated");
}

}  // namespace
}  // namespace berth::csi
