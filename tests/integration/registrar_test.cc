// The upstream node-driver-registrar registers berth-csi with berth's node
// agent unchanged — the route a Kubernetes node takes: berth-csi serves CSI
// only (no --registration-dir), the sidecar asks it its name and serves
// pluginregistration v1 on <root>/plugins_registry/<driver>-reg.sock as it
// does for kubelet; the agent publishes the driver in CSINode, the Node's
// node ID annotation and topology labels, answers NotifyRegistrationStatus,
// and takes it all back when the sidecar's socket goes.
//
// Runs when NODE_DRIVER_REGISTRAR names the sidecar's binary (built outside
// this repository from kubernetes-csi/node-driver-registrar; see
// docs/kubernetes.md), else skips. berth-csi runs on a plain pool directory:
// registration needs only Identity and NodeGetInfo, no loop devices.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "apiserver/registry.h"
#include "client/object.h"
#include "common/testing/eventually.h"
#include "common/testing/subprocess.h"
#include "common/testing/temp_dir.h"
#include "csi/client.h"
#include "csi/v1/csi.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "node/agent.h"
#include "store/store.h"

namespace berth::node {
namespace {

namespace fs = std::filesystem;
using berth::testing::Eventually;
using client::Field;
using client::K;
using client::Str;
using nlohmann::json;
using ::testing::HasSubstr;

constexpr char kDriver[] = "local.csi.berth.io";  // berth-csi's default name
constexpr char kNode[] = "node-1";
constexpr char kNodeId[] = "berth-node-id-1";  // ≠ kNode: the entry must carry the driver's ID
constexpr char kTopologyKey[] = "topology.berth.io/node";
constexpr char kRegistered[] = "PluginRegistered:true";

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

// The HTTP status of GET http://127.0.0.1:<port><path>; 0 when nothing
// answered.
int HttpStatus(int port, const std::string& path) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_port = htons(static_cast<uint16_t>(port));
  sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sin), sizeof(sin)) != 0) {
    ::close(fd);
    return 0;
  }
  const std::string req = "GET " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  std::string raw;
  if (::write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size())) {
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof(buf))) > 0) raw.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  if (!raw.starts_with("HTTP/1.1 ") || raw.size() < 12) return 0;
  return std::stoi(raw.substr(9, 3));
}

bool IsSocket(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

class RegistrarTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* bin = std::getenv("NODE_DRIVER_REGISTRAR");
    if (bin == nullptr || *bin == '\0') {
      GTEST_SKIP() << "set NODE_DRIVER_REGISTRAR to a csi-node-driver-registrar binary to run (docs/kubernetes.md)";
    }
    registrar_bin_ = bin;
    ASSERT_EQ(::access(bin, X_OK), 0) << "NODE_DRIVER_REGISTRAR=" << bin << " is not executable";
    store_ = std::move(*store::Store::Open({.path = dir_.Join("state.db")}));
    registry_ = std::make_unique<apiserver::Registry>(*store_);
    ASSERT_TRUE(registry_->Bootstrap().ok());
    root_ = dir_.Join("kubelet");
    // Where the DaemonSet puts it: <kubelet root>/plugins/<driver>/csi.sock.
    socket_ = root_ + "/plugins/" + kDriver + "/csi.sock";
    agent_ = std::make_unique<NodeAgent>(*registry_, directory_,
                                         NodeAgent::Options{.node_name = kNode,
                                                            .root = root_,
                                                            .labels = {},
                                                            .heartbeat = absl::Seconds(1),
                                                            .workers = 1,
                                                            .volume_stats_period = absl::ZeroDuration()});
    ASSERT_TRUE(agent_->Start().ok());
    ASSERT_NO_FATAL_FAILURE(StartDriver());
  }
  void TearDown() override {
    // Each Subprocess is SIGKILLed and reaped if still running; the
    // registrar first, so the agent is not left calling a dead driver.
    if (registrar_ && HasFailure()) std::cerr << "--- registrar\n" << registrar_->Output();
    registrar_.reset();
    if (driver_ && HasFailure()) std::cerr << "--- berth-csi\n" << driver_->Output();
    if (driver_) {
      driver_->Signal(SIGTERM);
      driver_->Wait(absl::Seconds(20));
      driver_.reset();
    }
    if (agent_) agent_->Stop();
  }

  // berth-csi without --registration-dir: it serves CSI and nothing else.
  void StartDriver() {
    driver_ = std::make_unique<berth::testing::Subprocess>(
        std::vector<std::string>{BERTH_CSI_BINARY, "--endpoint", "unix://" + socket_, "--node-id", kNodeId, "--pool",
                                 dir_.Join("pool"), "--kubelet-root", root_, "--max-volumes", "9"},
        dir_.Join("berth-csi-" + std::to_string(++driver_starts_) + ".log"));
    auto ch = csi::ConnectUnix(socket_, {.timeout = absl::Seconds(30)});
    ASSERT_TRUE(ch.ok()) << ch.status() << "\n" << driver_->Output();
  }
  // The sidecar as a DaemonSet runs it, with the host paths it would be
  // given there: the CSI socket for both addresses (the pod's /csi/csi.sock
  // is the host's <root>/plugins/<driver>/csi.sock) and the node's
  // plugins_registry for its registration socket.
  void StartRegistrar() {
    health_port_ = FreePort();
    registrar_ = std::make_unique<berth::testing::Subprocess>(
        std::vector<std::string>{registrar_bin_, "--csi-address=" + socket_, "--kubelet-registration-path=" + socket_,
                                 "--plugin-registration-path=" + agent_->registration_dir(),
                                 "--http-endpoint=127.0.0.1:" + std::to_string(health_port_), "--v=5"},
        dir_.Join("registrar-" + std::to_string(++registrar_starts_) + ".log"));
  }
  std::string RegistrationSocket() const { return agent_->registration_dir() + "/" + kDriver + "-reg.sock"; }
  // The sidecar's exec probe (--mode=kubelet-registration-probe): up to
  // v2.8 it passes once kubelet's GetInfo reached the running sidecar (a
  // file it touches then beside --kubelet-registration-path); from v2.9 on
  // it always passes. Its exit code, -1 if it hangs.
  int RegistrationProbe() {
    berth::testing::Subprocess probe(
        {registrar_bin_, "--kubelet-registration-path=" + socket_, "--mode=kubelet-registration-probe"},
        dir_.Join("probe.log"));
    const int code = probe.Wait(absl::Seconds(10)).value_or(-1);
    if (code != 0) ADD_FAILURE() << "registration probe: " << probe.Output();
    return code;
  }

  json Get(const char* resource, const std::string& name, const char* group = "") {
    auto o = registry_->Get(K(resource, group), "", name);
    return o.ok() ? *o : json();
  }
  json DriverEntry() {
    json csinode = Get("csinodes", kNode, "storage.k8s.io");
    for (const auto& d : Field(Field(csinode, "spec"), "drivers")) {
      if (Str(d, {"name"}) == kDriver) return d;
    }
    return json();
  }
  std::string NodeIdAnnotation() { return Str(Get("nodes", kNode), {"metadata", "annotations", kAnnNodeId}); }
  bool Registered() { return !DriverEntry().is_null(); }
  bool RegistrarHeard(const std::string& what) {
    return Eventually([&] { return registrar_->Output().find(what) != std::string::npos; }, absl::Seconds(10));
  }
  // NodeGetInfo through the channel the controllers get from the directory.
  absl::StatusOr<std::string> NodeIdThroughDirectory() {
    auto channel = directory_.Channel(kDriver, kNode);
    if (!channel.ok()) return channel.status();
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    ctx.set_wait_for_ready(true);  // a restarted driver: reconnect first
    ::csi::v1::NodeGetInfoResponse info;
    grpc::Status st = ::csi::v1::Node::NewStub(*channel)->NodeGetInfo(&ctx, {}, &info);
    if (!st.ok()) return absl::UnavailableError(st.error_message());
    return info.node_id();
  }

  berth::testing::TempDir dir_;
  std::string registrar_bin_, root_, socket_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<apiserver::Registry> registry_;
  client::DriverDirectory directory_;
  std::unique_ptr<NodeAgent> agent_;
  std::unique_ptr<berth::testing::Subprocess> driver_, registrar_;
  int driver_starts_ = 0, registrar_starts_ = 0, health_port_ = 0;
};

TEST_F(RegistrarTest, SidecarRegistersBerthCsiWithTheNodeAgent) {
  StartRegistrar();
  ASSERT_TRUE(Eventually([&] { return Registered(); }, absl::Seconds(30)));
  // The sidecar heard the verdict (sent once the agent is done).
  ASSERT_TRUE(RegistrarHeard(kRegistered));

  // CSINode: berth-csi's node ID, topology keys and volume limit.
  json entry = DriverEntry();
  EXPECT_EQ(entry["nodeID"], kNodeId);
  EXPECT_EQ(entry["topologyKeys"], json({kTopologyKey}));
  EXPECT_EQ(entry["allocatable"]["count"], 9);
  // The Node: the node ID annotation and the topology label.
  EXPECT_EQ(json::parse(NodeIdAnnotation()), json({{kDriver, kNodeId}}));
  EXPECT_EQ(Str(Get("nodes", kNode), {"metadata", "labels", kTopologyKey}), kNodeId);
  // The agent dials the endpoint the sidecar announced (its
  // --kubelet-registration-path), and so do the controllers.
  auto driver = agent_->plugins().Get(kDriver);
  ASSERT_TRUE(driver.has_value());
  EXPECT_EQ(driver->endpoint, socket_);
  EXPECT_EQ(NodeIdThroughDirectory().value_or("?"), kNodeId);

  // The sidecar's own health checks pass.
  EXPECT_TRUE(Eventually([&] { return HttpStatus(health_port_, "/healthz") == 200; }));
  EXPECT_EQ(RegistrationProbe(), 0);
  // It asked berth-csi its name; the agent asked for the node's info.
  EXPECT_THAT(driver_->Output(), HasSubstr("method=/csi.v1.Identity/GetPluginInfo code=OK"));
  EXPECT_THAT(driver_->Output(), HasSubstr("method=/csi.v1.Node/NodeGetInfo code=OK"));
}

TEST_F(RegistrarTest, SigtermRemovesTheSocketAndTheAgentDeregistersThenARestartRegistersAgain) {
  StartRegistrar();
  ASSERT_TRUE(Eventually([&] { return Registered(); }, absl::Seconds(30)));
  ASSERT_TRUE(RegistrarHeard(kRegistered));

  // As when its pod is deleted: the sidecar removes its socket and exits.
  registrar_->Signal(SIGTERM);
  ASSERT_TRUE(registrar_->Wait(absl::Seconds(10)).has_value());
  EXPECT_FALSE(fs::exists(RegistrationSocket()));
  ASSERT_TRUE(Eventually([&] { return !Registered(); }, absl::Seconds(30)));
  EXPECT_THAT(NodeIdAnnotation(), ::testing::Not(HasSubstr(kDriver)));
  EXPECT_FALSE(agent_->plugins().Get(kDriver).has_value());
  EXPECT_FALSE(directory_.Known(kDriver));
  // Topology labels stay, as kubelet leaves them.
  EXPECT_EQ(Str(Get("nodes", kNode), {"metadata", "labels", kTopologyKey}), kNodeId);

  StartRegistrar();
  ASSERT_TRUE(Eventually([&] { return Registered(); }, absl::Seconds(30)));
  EXPECT_EQ(DriverEntry()["nodeID"], kNodeId);
  EXPECT_EQ(json::parse(NodeIdAnnotation()), json({{kDriver, kNodeId}}));
  EXPECT_TRUE(RegistrarHeard(kRegistered));
}

TEST_F(RegistrarTest, SigkilledSidecarLeavesItsSocketAndItsRestartRegistersAgain) {
  StartRegistrar();
  ASSERT_TRUE(Eventually([&] { return Registered(); }, absl::Seconds(30)));
  ASSERT_TRUE(RegistrarHeard(kRegistered));
  ASSERT_TRUE(IsSocket(RegistrationSocket()));

  // Killed outright (OOM, a node crash): the socket stays behind, nobody
  // listening. Like kubelet, the agent keeps the driver — the socket is
  // still there and berth-csi still answers.
  registrar_->Signal(SIGKILL);
  ASSERT_TRUE(registrar_->Wait(absl::Seconds(10)).has_value());
  EXPECT_TRUE(IsSocket(RegistrationSocket()));
  // A whole rescan later (one may be under way now) the driver is still there.
  const int64_t scans = agent_->plugin_watcher().Scans();
  ASSERT_TRUE(Eventually([&] { return agent_->plugin_watcher().Scans() >= scans + 2; }, absl::Seconds(30)));
  EXPECT_TRUE(Registered());
  EXPECT_TRUE(agent_->plugins().Get(kDriver).has_value());

  // The restarted sidecar removes the stale socket and binds a new one at
  // once — on ext4 mostly on the inode just freed, which the agent once took
  // for the old socket (node_test: ASocketCreatedAgainWithTheSameInode...).
  // The agent registers it again and tells the new process so.
  StartRegistrar();
  EXPECT_TRUE(RegistrarHeard(kRegistered));
  EXPECT_EQ(RegistrationProbe(), 0);
  EXPECT_TRUE(Eventually([&] { return Registered(); }, absl::Seconds(30)));
  EXPECT_EQ(DriverEntry()["nodeID"], kNodeId);
}

TEST_F(RegistrarTest, BerthCsiRestartUnderARunningSidecarKeepsTheRegistration) {
  StartRegistrar();
  ASSERT_TRUE(Eventually([&] { return Registered(); }, absl::Seconds(30)));
  ASSERT_TRUE(RegistrarHeard(kRegistered));
  ASSERT_EQ(NodeIdThroughDirectory().value_or("?"), kNodeId);

  // berth-csi's container restarts; the sidecar keeps running and does not
  // register again (it asked the driver its name once, at start). The
  // registration stays and the agent's channel reaches the new process.
  driver_->Signal(SIGTERM);
  ASSERT_EQ(driver_->Wait(absl::Seconds(30)), 0) << driver_->Output();
  ASSERT_NO_FATAL_FAILURE(StartDriver());
  EXPECT_FALSE(registrar_->Wait(absl::ZeroDuration()).has_value()) << "the sidecar exited";
  EXPECT_TRUE(Registered());
  EXPECT_EQ(NodeIdThroughDirectory().value_or("?"), kNodeId);
  EXPECT_THAT(driver_->Output(), HasSubstr("method=/csi.v1.Node/NodeGetInfo code=OK"));
}

}  // namespace
}  // namespace berth::node
