// berth-csi started exactly as deploy/kubernetes/base/daemonset.yaml starts it —
// the berth-csi container's args and env, read from the manifest — on a
// sandbox (as root: a real XFS pool image on a loop device). The only
// changes are the ones a pod gets from Kubernetes: every volumeMount's path
// maps to a sandbox directory (hostPath /dev stays /dev), the downward API
// values are filled in (spec.nodeName, status.podIP = 127.0.0.1), $(VAR)
// references are expanded, and the --http-endpoint port is replaced by a
// free one (a pod has its own network namespace; this test does not).
//
// Checks: node ID from NODE_ID, node-only expansion, /healthz and a valid
// /metrics; and, when $CSI_SANITY names a csi-sanity binary
// (kubernetes-csi/csi-test, built separately: docs/kubernetes.md), the whole
// csi-sanity suite against this process.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "common/testing/eventually.h"
#include "common/testing/subprocess.h"
#include "csi/client.h"
#include "csi/v1/csi.grpc.pb.h"
#include "driver/testing/sandbox.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "manifests.h"
#include "metrics/testing/exposition_check.h"

namespace berth::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr char kNodeName[] = "node-from-spec-nodename";

// Whether this process may grow a mounted ext4 (the ioctl needs
// CAP_SYS_RESOURCE).
bool HasCapSysResource() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with("CapEff:")) return (std::stoull(line.substr(7), nullptr, 16) >> 24) & 1;
  }
  return false;
}

int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&sin), sizeof(sin)), 0);
  socklen_t len = sizeof(sin);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&sin), &len);
  ::close(fd);
  return ntohs(sin.sin_port);
}

// GET over loopback; {code, body}, code 0 when nothing answered.
std::pair<int, std::string> HttpGet(int port, const std::string& path) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_port = htons(static_cast<uint16_t>(port));
  sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sin), sizeof(sin)) != 0) {
    ::close(fd);
    return {0, ""};
  }
  const std::string req = "GET " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  if (::write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) {
    ::close(fd);
    return {0, ""};
  }
  std::string raw;
  char buf[8192];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) raw.append(buf, static_cast<size_t>(n));
  ::close(fd);
  const size_t split = raw.find("\r\n\r\n");
  if (!raw.starts_with("HTTP/1.1 ") || split == std::string::npos) return {0, raw};
  return {std::stoi(raw.substr(9, 3)), raw.substr(split + 4)};
}

// The berth-csi container of the DaemonSet, turned into a command line and
// environment for this machine.
struct Launch {
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;
  std::string endpoint;      // unix://...
  std::string kubelet_root;  // sandbox path of --kubelet-root
  int http_port = 0;
};

Launch FromDaemonSet(const MountSandbox& sandbox) {
  std::ifstream in(std::string(BERTH_SOURCE_DIR) + "/deploy/kubernetes/base/daemonset.yaml");
  std::stringstream ss;
  ss << in.rdbuf();
  auto docs = LoadDocuments(ss.str());
  EXPECT_EQ(docs.size(), 1u);
  YAML::Node pod = docs.at(0)["spec"]["template"]["spec"];
  YAML::Node c = Container(pod, "berth-csi");
  EXPECT_TRUE(c);

  Launch l;
  // Downward API.
  for (const auto& e : c["env"]) {
    const std::string name = Str(e["name"]);
    const std::string field =
        e["valueFrom"] && e["valueFrom"]["fieldRef"] ? Str(e["valueFrom"]["fieldRef"]["fieldPath"]) : "";
    if (e["value"])
      l.env[name] = Str(e["value"]);
    else if (field == "spec.nodeName")
      l.env[name] = kNodeName;
    else if (field == "status.podIP")
      l.env[name] = "127.0.0.1";
    else
      ADD_FAILURE() << "env " << name << " from " << field << ": unknown to this test";
  }
  // Container paths -> sandbox directories (hostPath /dev stays /dev).
  std::vector<std::pair<std::string, std::string>> mounts;
  for (const auto& m : c["volumeMounts"]) {
    const std::string path = Str(m["mountPath"]);
    std::string host = sandbox.Join("vol-" + Str(m["name"]));
    auto r = Resolve(pod, c, path);
    if (r && r->host_path == "/dev")
      host = "/dev";
    else
      fs::create_directories(host);
    mounts.emplace_back(path, host);
  }
  std::sort(mounts.begin(), mounts.end(), [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  auto map_path = [&](const std::string& p) {
    for (const auto& [from, to] : mounts) {
      if (p == from || p.starts_with(from + "/")) return to + p.substr(from.size());
    }
    return p;
  };
  const std::regex var(R"(\$\(([A-Za-z_][A-Za-z0-9_]*)\))");
  l.http_port = FreePort();
  l.argv.push_back(BERTH_CSI_BINARY);
  for (const auto& a : c["args"]) {
    std::string arg = a.as<std::string>();
    // $(VAR) as kubelet expands it.
    std::smatch m;
    while (std::regex_search(arg, m, var)) {
      arg = m.prefix().str() + l.env[m[1].str()] + m.suffix().str();
    }
    const size_t eq = arg.find('=');
    if (arg.starts_with("--") && eq != std::string::npos) {
      const std::string flag = arg.substr(0, eq);
      std::string value = arg.substr(eq + 1);
      if (value.starts_with("unix://"))
        value = "unix://" + map_path(value.substr(7));
      else if (value.starts_with("/"))
        value = map_path(value);
      if (flag == "--http-endpoint") value = value.substr(0, value.rfind(':') + 1) + std::to_string(l.http_port);
      if (flag == "--endpoint") l.endpoint = value;
      if (flag == "--kubelet-root") l.kubelet_root = value;
      arg = flag + "=" + value;
    }
    l.argv.push_back(arg);
  }
  return l;
}

class DaemonSetDriverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    launch_ = FromDaemonSet(sandbox_);
    ASSERT_FALSE(launch_.endpoint.empty()) << "no --endpoint in the DaemonSet";
    ASSERT_FALSE(launch_.kubelet_root.empty()) << "no --kubelet-root in the DaemonSet";
    for (const auto& [k, v] : launch_.env) ::setenv(k.c_str(), v.c_str(), 1);
    process_ = std::make_unique<Subprocess>(launch_.argv, sandbox_.Join("berth-csi.log"));
    for (const auto& [k, v] : launch_.env) ::unsetenv(k.c_str());
    auto ch = csi::ConnectUnix(launch_.endpoint, {.timeout = absl::Seconds(60)});
    ASSERT_TRUE(ch.ok()) << ch.status() << "\n" << process_->Output();
    channel_ = *ch;
  }
  void TearDown() override {
    if (!process_) return;
    process_->Signal(SIGTERM);
    auto code = process_->Wait(absl::Seconds(60));
    EXPECT_EQ(code, 0) << process_->Output();
  }

  MountSandbox sandbox_;
  Launch launch_;
  std::unique_ptr<Subprocess> process_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(DaemonSetDriverTest, ServesHealthMetricsAndTheNodeIdFromTheEnvironment) {
  std::string joined;
  for (const auto& a : launch_.argv) joined += a + " ";
  std::cerr << "[ daemonset ] " << joined << "\n";
  EXPECT_THAT(joined, ::testing::Not(HasSubstr("--node-id")));

  auto node = ::csi::v1::Node::NewStub(channel_);
  grpc::ClientContext ctx;
  ::csi::v1::NodeGetInfoResponse info;
  ASSERT_TRUE(node->NodeGetInfo(&ctx, {}, &info).ok());
  EXPECT_EQ(info.node_id(), kNodeName);
  EXPECT_EQ(info.accessible_topology().segments().at("topology.berth.io/node"), kNodeName);

  auto controller = ::csi::v1::Controller::NewStub(channel_);
  grpc::ClientContext cctx;
  ::csi::v1::ControllerGetCapabilitiesResponse caps;
  ASSERT_TRUE(controller->ControllerGetCapabilities(&cctx, {}, &caps).ok());
  for (const auto& c : caps.capabilities()) {
    EXPECT_NE(c.rpc().type(), ::csi::v1::ControllerServiceCapability::RPC::EXPAND_VOLUME)
        << "the DaemonSet runs berth-csi with node-only expansion";
  }

  // The HTTP endpoint starts right after the CSI socket.
  std::pair<int, std::string> health;
  berth::testing::Eventually([&] {
    health = HttpGet(launch_.http_port, "/healthz");
    return health.first != 0;
  });
  EXPECT_EQ(health.first, 200) << health.second << process_->Output();
  EXPECT_EQ(health.second, "ok\n");

  auto [code, body] = HttpGet(launch_.http_port, "/metrics");
  ASSERT_EQ(code, 200);
  auto samples = metrics::testing::ParseExposition(body);
  ASSERT_TRUE(samples.ok()) << samples.status() << "\n" << body;
  EXPECT_EQ(*metrics::testing::FindSample(*samples, "berth_build_info", {{"node", kNodeName}}), 1);
  EXPECT_EQ(*metrics::testing::FindSample(*samples, "berth_pool_ready"), 1);
  EXPECT_EQ(*metrics::testing::FindSample(*samples, "berth_csi_requests_total",
                                          {{"method", "/csi.v1.Node/NodeGetInfo"}, {"code", "OK"}}),
            1);
  EXPECT_GT(*metrics::testing::FindSample(*samples, "berth_pool_size_bytes"), 0);
}

TEST_F(DaemonSetDriverTest, PassesCsiSanity) {
  const char* sanity = std::getenv("CSI_SANITY");
  if (sanity == nullptr || *sanity == '\0') {
    GTEST_SKIP() << "set CSI_SANITY to a csi-sanity binary to run the suite (docs/kubernetes.md)";
  }
  ASSERT_EQ(::access(sanity, X_OK), 0) << "CSI_SANITY=" << sanity << " is not executable";
  // csi-sanity creates and removes its staging and target directories; they
  // must lie inside the kubelet root (berth-csi confines node paths to it).
  // Volumes of 1 GiB instead of csi-sanity's 10 GiB: the pagination specs
  // keep ten volumes and their snapshots at once, more than the DaemonSet's
  // 100 GiB pool may provision (thin, but capped at its size).
  std::vector<std::string> argv = {sanity,
                                   "--csi.endpoint=" + launch_.endpoint,
                                   "--csi.stagingdir=" + launch_.kubelet_root + "/sanity-staging",
                                   "--csi.mountdir=" + launch_.kubelet_root + "/sanity-mount",
                                   "--csi.testvolumesize=1073741824",
                                   "--csi.testvolumeexpandsize=2147483648"};
  if (!HasCapSysResource()) {
    // Growing a mounted ext4 needs CAP_SYS_RESOURCE, which a privileged pod
    // has and some sandboxes drop even for root; berth-csi then says so
    // (tests/integration/driver_e2e_test covers that answer).
    std::cerr << "[ csi-sanity ] no CAP_SYS_RESOURCE here: skipping the online ext4 expansion spec\n";
    argv.push_back("--ginkgo.skip=should work if node-expand is called after node-publish");
  }
  Subprocess run(argv, sandbox_.Join("csi-sanity.log"));
  auto code = run.Wait(absl::Minutes(20));
  const std::string out = run.Output();
  std::smatch ran;
  std::regex_search(out, ran, std::regex(R"(Ran \d+ of \d+ Specs[^\n]*\n[^\n]*)"));
  std::cerr << "[ csi-sanity ] " << ran.str() << "\n";
  ASSERT_TRUE(code.has_value()) << "csi-sanity still running after 20 minutes";
  EXPECT_EQ(*code, 0) << out.substr(out.size() > 20000 ? out.size() - 20000 : 0);
  EXPECT_THAT(out, HasSubstr("SUCCESS!"));
}

}  // namespace
}  // namespace berth::testing
