// The HTTP server over real sockets: unix socket, HTTPS with the bearer
// token, malformed requests, streaming, shutdown.
#include "apiserver/http.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "apiserver/client.h"
#include "apiserver/control_plane.h"
#include "apiserver/tls.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace berth::apiserver {
namespace {

using nlohmann::json;

class HttpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ControlPlane::Options o;
    o.data_dir = dir_.path() + "/data";
    o.api_address = "127.0.0.1:0";
    auto cp = ControlPlane::Start(o);
    ASSERT_TRUE(cp.ok()) << cp.status();
    cp_ = std::move(*cp);
  }
  // Raw bytes over the unix socket; returns the whole answer.
  std::string RawUnix(const std::string& bytes) {
    int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un sun{};
    sun.sun_family = AF_UNIX;
    std::strncpy(sun.sun_path, cp_->socket_path().c_str(), sizeof(sun.sun_path) - 1);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&sun), sizeof(sun)), 0);
    EXPECT_EQ(::write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
    ::close(fd);
    return out;
  }

  berth::testing::TempDir dir_;
  std::unique_ptr<ControlPlane> cp_;
};

TEST_F(HttpTest, FilesAreRootOnly) {
  struct stat st;
  ASSERT_EQ(::stat(cp_->socket_path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat(cp_->kubeconfig_path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat((dir_.path() + "/data/tls/api.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(HttpTest, UnixSocketNeedsNoToken) {
  auto client = ApiClient::ForUnixSocket(cp_->socket_path());
  auto r = client->Call("GET", "/api/v1/namespaces");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->code, 200);
  // Keep-alive: a second call on the same connection.
  EXPECT_EQ(client->Call("GET", "/version")->code, 200);
}

TEST_F(HttpTest, TcpIsHttpsAndNeedsTheToken) {
  auto good = ApiClient::ForKubeconfig(cp_->kubeconfig_path());
  ASSERT_TRUE(good.ok()) << good.status();
  auto created = (*good)->Call("POST", "/api/v1/namespaces",
                               R"({"apiVersion":"v1","kind":"Namespace","metadata":{"name":"team"}})");
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ(created->code, 201);

  auto ca = EnsureServingCertificate(dir_.path() + "/data/tls");
  ASSERT_TRUE(ca.ok());
  for (const std::string& token : {std::string(""), std::string("wrong"), cp_->token() + "x"}) {
    auto bad = ApiClient::ForTcp("127.0.0.1", cp_->tcp_port(), ca->cert_pem, token);
    auto r = bad->Call("POST", "/api/v1/namespaces",
                       R"({"apiVersion":"v1","kind":"Namespace","metadata":{"name":"intruder"}})");
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->code, 401) << token;
    EXPECT_EQ(json::parse(r->body)["reason"], "Unauthorized");
  }
  // Nothing was created by the refused requests.
  auto list = (*good)->Call("GET", "/api/v1/namespaces/intruder");
  EXPECT_EQ(list->code, 404);

  // A client that does not trust the server's certificate fails the handshake.
  auto other = EnsureServingCertificate(dir_.path() + "/other-tls");
  auto untrusting = ApiClient::ForTcp("127.0.0.1", cp_->tcp_port(), other->cert_pem, cp_->token());
  EXPECT_EQ(untrusting->Call("GET", "/version").status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(HttpTest, MalformedRequestsGet400AndServerCarriesOn) {
  std::string r = RawUnix("GARBAGE\r\n\r\n");
  EXPECT_THAT(r, ::testing::StartsWith("HTTP/1.1 400"));
  r = RawUnix("GET /api/%zz HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_THAT(r, ::testing::StartsWith("HTTP/1.1 400"));
  r = RawUnix("GET /version HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_THAT(r, ::testing::StartsWith("HTTP/1.1 200"));
}

TEST_F(HttpTest, WatchStreamsOverChunkedEncodingAndShutdownEndsIt) {
  auto client = ApiClient::ForUnixSocket(cp_->socket_path());
  std::vector<std::string> seen;
  std::thread watcher([&] {
    auto w = ApiClient::ForUnixSocket(cp_->socket_path());
    auto r = w->Stream("/api/v1/namespaces?watch=1&resourceVersion=0", "application/json", [&](const std::string& line) {
      seen.push_back(json::parse(line)["object"]["metadata"]["name"]);
      return seen.size() < 5;
    });
    EXPECT_TRUE(r.ok()) << r.status();
  });
  for (const char* name : {"n1", "n2"}) {
    auto created = client->Call("POST", "/api/v1/namespaces",
                                json({{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", name}}}}).dump());
    ASSERT_EQ(created->code, 201);
  }
  watcher.join();
  // default, kube-public, kube-system (initial ADDED), then n1, n2 live.
  EXPECT_THAT(seen, ::testing::ElementsAre("default", "kube-public", "kube-system", "n1", "n2"));

  // A watch left open is ended by Shutdown, which returns promptly.
  std::thread open_watch([&] {
    auto w = ApiClient::ForUnixSocket(cp_->socket_path());
    (void)w->Stream("/api/v1/namespaces?watch=1", "application/json", [](const std::string&) { return true; });
  });
  absl::SleepFor(absl::Milliseconds(200));
  absl::Time start = absl::Now();
  cp_->Shutdown();
  open_watch.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(ParseRequestTest, QueryAndPathDecoding) {
  auto r = ParseRequest("GET /api/v1/namespaces/a%2Db/pods?labelSelector=app%3Dweb&watch HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->path, "/api/v1/namespaces/a-b/pods");
  EXPECT_EQ(r->query.at("labelSelector"), "app=web");
  EXPECT_EQ(r->query.at("watch"), "");
  EXPECT_FALSE(ParseRequest("GET /x%0 HTTP/1.1\r\n\r\n").ok());
  EXPECT_FALSE(ParseRequest("GET /x HTTP/1.1\r\nContent-Length: 5\r\n\r\nab").ok());
}

}  // namespace
}  // namespace berth::apiserver
