// wait and delete --wait against an in-process API server, on a FakeClock:
// timeouts are reached by advancing the clock, never by sleeping.
#include <sstream>
#include <thread>

#include "apiserver/control_plane.h"
#include "cli/commands.h"
#include "common/clock.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace berth::cli {
namespace {

using nlohmann::json;

class WaitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    apiserver::ControlPlane::Options o;
    o.data_dir = dir_.path() + "/data";
    o.api_address = "";
    auto cp = apiserver::ControlPlane::Start(o);
    ASSERT_TRUE(cp.ok()) << cp.status();
    cp_ = std::move(*cp);
    client_ = http::ApiClient::ForUnixSocket(cp_->socket_path());
    // The command under test runs on a thread of its own while the test
    // patches: an ApiClient is one connection, for one thread at a time.
    command_client_ = http::ApiClient::ForUnixSocket(cp_->socket_path());
  }
  void TearDown() override {
    if (cp_) cp_->Shutdown();
  }
  // A Secret named `name` held by a finalizer of ours.
  void CreateHeldSecret(const std::string& name) {
    json s = {{"apiVersion", "v1"},
              {"kind", "Secret"},
              {"metadata", {{"name", name}, {"finalizers", {"example.com/hold"}}, {"labels", {{"phase", "one"}}}}}};
    auto r = client_->Call("POST", "/api/v1/namespaces/default/secrets", s.dump());
    ASSERT_TRUE(r.ok() && r->code == 201) << (r.ok() ? r->body : r.status().ToString());
  }
  void Patch(const std::string& name, const json& patch) {
    auto r = client_->Call("PATCH", "/api/v1/namespaces/default/secrets/" + name, patch.dump(),
                           "application/merge-patch+json");
    ASSERT_TRUE(r.ok() && r->code == 200) << (r.ok() ? r->body : r.status().ToString());
  }

  testing::TempDir dir_;
  std::unique_ptr<apiserver::ControlPlane> cp_;
  std::unique_ptr<http::ApiClient> client_;
  std::unique_ptr<http::ApiClient> command_client_;
  FakeClock clock_;
};

TEST_F(WaitTest, JsonPathWaitReturnsOnceTheValueAppears) {
  CreateHeldSecret("s");
  std::ostringstream out;
  absl::Status st = absl::UnknownError("not run");
  std::thread waiter([&] {
    st = Wait(*command_client_, "secret/s", "jsonpath={.metadata.labels.phase}=two", {}, absl::Hours(1), out, clock_);
  });
  ASSERT_TRUE(clock_.BlockUntilTimers(1));  // it looked once and sleeps
  Patch("s", {{"metadata", {{"labels", {{"phase", "two"}}}}}});
  clock_.Advance(absl::Milliseconds(100));
  waiter.join();
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ(out.str(), "secret/s condition met\n");
  Patch("s", {{"metadata", {{"finalizers", nullptr}}}});
}

TEST_F(WaitTest, WaitTimesOutOnTheClock) {
  CreateHeldSecret("s");
  std::ostringstream out;
  absl::Status st;
  std::thread waiter(
      [&] { st = Wait(*command_client_, "secret/s", "condition=Ready", {}, absl::Minutes(5), out, clock_); });
  ASSERT_TRUE(clock_.BlockUntilTimers(1));
  clock_.Advance(absl::Minutes(5));
  waiter.join();
  EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(st.message(), "timed out waiting for the condition on secrets/s");
  Patch("s", {{"metadata", {{"finalizers", nullptr}}}});
}

TEST_F(WaitTest, DeleteWaitsForTheFinalizerAndTimesOutNamingIt) {
  CreateHeldSecret("held");
  CreateHeldSecret("released");
  DeleteOptions o;
  o.args = {"secret", "held", "released"};
  o.timeout = absl::Minutes(1);
  std::ostringstream out;
  absl::Status st;
  std::thread deleter([&] { st = Delete(*command_client_, o, out, clock_); });
  ASSERT_TRUE(clock_.BlockUntilTimers(1));
  // The first is released after 30 s; the second never is.
  clock_.Advance(absl::Seconds(30));
  Patch("released", {{"metadata", {{"finalizers", nullptr}}}});
  ASSERT_TRUE(clock_.BlockUntilTimers(1));
  clock_.Advance(absl::Seconds(30));
  deleter.join();
  EXPECT_EQ(out.str(), "secret \"held\" deleted\nsecret \"released\" deleted\n");
  EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(st.message(), ::testing::HasSubstr("timed out waiting for secret/held to be deleted (finalizers: "
                                                 "[\"example.com/hold\"])"));
  EXPECT_EQ(client_->Call("GET", "/api/v1/namespaces/default/secrets/released")->code, 404);
  Patch("held", {{"metadata", {{"finalizers", nullptr}}}});
}

TEST_F(WaitTest, DeleteWithoutWaitReturnsAtOnce) {
  CreateHeldSecret("s");
  DeleteOptions o;
  o.args = {"secret/s"};
  o.wait = false;
  std::ostringstream out;
  EXPECT_TRUE(Delete(*client_, o, out, clock_).ok());
  EXPECT_EQ(out.str(), "secret \"s\" deleted\n");
  Patch("s", {{"metadata", {{"finalizers", nullptr}}}});
}

}  // namespace
}  // namespace berth::cli
