// berth-csi as a process: flags, serving Identity over its socket, and the
// SIGTERM/SIGINT shutdown contract (drain, remove the socket, exit 0).
#include <signal.h>

#include <filesystem>
#include <fstream>

#include "common/testing/subprocess.h"
#include "common/testing/temp_dir.h"
#include "csi/client.h"
#include "csi/v1/csi.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"

namespace berth {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class BerthCsiProcessTest : public ::testing::Test {
 protected:
  std::string Socket() const { return dir_.Join("plugins/csi.sock"); }

  std::unique_ptr<testing::Subprocess> StartDriver(std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {BERTH_CSI_BINARY, "--endpoint",     "unix://" + Socket(), "--node-id", "n1",
                                     "--pool",         dir_.Join("pool")};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return std::make_unique<testing::Subprocess>(argv, dir_.Join("driver.log"));
  }

  std::shared_ptr<grpc::Channel> Connect() {
    auto ch = csi::ConnectUnix("unix://" + Socket(), {.timeout = absl::Seconds(20)});
    EXPECT_TRUE(ch.ok()) << ch.status();
    return ch.ok() ? *ch : nullptr;
  }

  testing::TempDir dir_;
};

TEST_F(BerthCsiProcessTest, AnswersIdentityOverItsSocket) {
  auto driver = StartDriver();
  auto channel = Connect();
  ASSERT_NE(channel, nullptr) << driver->Output();
  auto identity = ::csi::v1::Identity::NewStub(channel);

  {
    grpc::ClientContext ctx;
    ::csi::v1::GetPluginInfoResponse resp;
    ASSERT_TRUE(identity->GetPluginInfo(&ctx, {}, &resp).ok());
    EXPECT_EQ(resp.name(), "local.csi.berth.io");
    EXPECT_FALSE(resp.vendor_version().empty());
  }
  {
    grpc::ClientContext ctx;
    ::csi::v1::GetPluginCapabilitiesResponse resp;
    EXPECT_TRUE(identity->GetPluginCapabilities(&ctx, {}, &resp).ok());
  }
  {
    grpc::ClientContext ctx;
    ::csi::v1::ProbeResponse resp;
    ASSERT_TRUE(identity->Probe(&ctx, {}, &resp).ok());
    EXPECT_TRUE(resp.ready().value());
  }
  EXPECT_TRUE(fs::is_directory(dir_.Join("pool")));

  driver->Signal(SIGTERM);
  EXPECT_EQ(driver->Wait(absl::Seconds(20)), 0) << driver->Output();
  EXPECT_FALSE(fs::exists(Socket()));
  EXPECT_THAT(driver->Output(), HasSubstr("method=/csi.v1.Identity/Probe code=OK"));
}

TEST_F(BerthCsiProcessTest, SigintAlsoShutsDownCleanly) {
  auto driver = StartDriver({"--driver-name", "other.example.com"});
  auto channel = Connect();
  ASSERT_NE(channel, nullptr) << driver->Output();
  grpc::ClientContext ctx;
  ::csi::v1::GetPluginInfoResponse resp;
  ASSERT_TRUE(::csi::v1::Identity::NewStub(channel)->GetPluginInfo(&ctx, {}, &resp).ok());
  EXPECT_EQ(resp.name(), "other.example.com");
  driver->Signal(SIGINT);
  EXPECT_EQ(driver->Wait(absl::Seconds(20)), 0) << driver->Output();
  EXPECT_FALSE(fs::exists(Socket()));
}

TEST_F(BerthCsiProcessTest, RefusesRegularFileAtEndpointAndKeepsIt) {
  fs::create_directories(dir_.Join("plugins"));
  std::ofstream(Socket()) << "keep me";
  auto driver = StartDriver();
  EXPECT_EQ(driver->Wait(absl::Seconds(20)), 1) << driver->Output();
  EXPECT_THAT(driver->Output(), HasSubstr("not a socket"));
  EXPECT_TRUE(fs::is_regular_file(Socket()));
}

TEST_F(BerthCsiProcessTest, BadFlagsExitWithUsageError) {
  for (std::vector<std::string> extra :
       {std::vector<std::string>{"--driver-name", "-bad-"}, std::vector<std::string>{"--pool-size", "ten"},
        std::vector<std::string>{"--log-level", "chatty"}}) {
    auto driver = StartDriver(extra);
    EXPECT_EQ(driver->Wait(absl::Seconds(20)), 2) << extra[0] << ": " << driver->Output();
  }
  testing::Subprocess version({BERTH_CSI_BINARY, "--version"}, dir_.Join("v.log"));
  EXPECT_EQ(version.Wait(absl::Seconds(20)), 0);
  EXPECT_THAT(version.Output(), HasSubstr("berth-csi "));
}

}  // namespace
}  // namespace berth
