// The berth API server as a process: `berth serve` on a temporary data
// directory, driven by the berth CLI (over the unix socket, and over TLS with
// the kubeconfig), by kubectl (the target is 1.20, Debian's kubernetes-client)
// and by curl for the raw HTTP contract (bearer token, watch stream).
//
// berth comes from BERTH_BINARY. kubectl comes from KUBECTL_BINARY, else
// $BERTH_KUBECTL, /usr/local/lib/berth/kubernetes-client/usr/bin/kubectl or
// /usr/bin/kubectl; without one the kubectl tests skip (and say why). No root
// is needed: the API socket admits its own user.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/testing/subprocess.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

#ifndef KUBECTL_BINARY
#define KUBECTL_BINARY ""
#endif

namespace berth {
namespace {

namespace fs = std::filesystem;
using ::nlohmann::json;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::Not;
using ::testing::StartsWith;

// ---- Helpers (defined at the end of the file) ----

// How a finished command ended and what it printed.
struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};
std::ostream& operator<<(std::ostream& os, const CommandResult& r);

// A finished HTTP request made with curl.
struct HttpResult {
  int status = 0;
  std::string body;
};

// Runs `argv` (argv[0] found on PATH or absolute) with `env` added to the
// environment and no stdin; stderr goes through `err_path`.
CommandResult RunCommand(const std::vector<std::string>& env, const std::vector<std::string>& argv,
                         const std::string& err_path);
// The first of `candidates` that is an executable file, or "".
std::string FirstExecutable(const std::vector<std::string>& candidates);
// `name` in $PATH (absolute), or "".
std::string FindInPath(const std::string& name);
std::string ReadText(const std::string& path);
void WriteText(const std::string& path, const std::string& text);
// The non-empty lines of `text`.
std::vector<std::string> Lines(const std::string& text);
// A table header's column names (columns are two or more spaces apart).
std::vector<std::string> HeaderColumns(const std::string& header);
// A table row's words (empty cells disappear).
std::vector<std::string> Fields(const std::string& row);
// The complete JSON objects in `text`, a stream of concatenated (pretty or
// one-per-line) objects; an unfinished last object is left out.
std::vector<json> JsonStream(const std::string& text);
// Polls `done` every 20ms until it holds or `timeout` passes.
bool PollUntil(absl::Duration timeout, const std::function<bool()>& done);
// Server-side TCP connections on local `port` that the server has not closed
// yet (ESTABLISHED or CLOSE_WAIT in /proc/net/tcp; 0 if that is unreadable).
int OpenServerConnections(int port);
// Manifests.
std::string StorageClassYaml(const std::map<std::string, std::string>& labels = {});
std::string ClaimYaml(const std::string& name, const std::map<std::string, std::string>& labels = {});
std::string SnapshotYaml(const std::map<std::string, std::string>& labels = {});

constexpr char kDebianKubectl[] = "/usr/local/lib/berth/kubernetes-client/usr/bin/kubectl";

// ---- Fixture ----

class ApiCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(Home());
    server_ = std::make_unique<testing::Subprocess>(
        std::vector<std::string>{BERTH_BINARY, "--data-dir", DataDir(), "serve", "--api-address", "127.0.0.1:0"},
        dir_.Join("server.log"));
    // The kubeconfig is written (atomically) once both listeners are up.
    const bool up = PollUntil(absl::Seconds(30),
                              [&] { return (fs::exists(KubeconfigPath()) && fs::exists(SocketPath())) || Exited(); });
    ASSERT_TRUE(up && !Exited()) << "berth serve did not come up:\n" << server_->Output();

    const std::string kubeconfig = ReadText(KubeconfigPath());
    std::smatch m;
    ASSERT_TRUE(std::regex_search(kubeconfig, m, std::regex(R"(server: https://127\.0\.0\.1:(\d+))"))) << kubeconfig;
    port_ = std::stoi(m[1]);
    ASSERT_TRUE(std::regex_search(kubeconfig, m, std::regex(R"(token: (\S+))"))) << kubeconfig;
    token_ = m[1];
    ASSERT_TRUE(std::regex_search(kubeconfig, m, std::regex(R"(certificate-authority-data: (\S+))")));
    std::string ca_pem;
    ASSERT_TRUE(absl::Base64Unescape(std::string(m[1]), &ca_pem));
    WriteText(CaPath(), ca_pem);

    FindKubectl();
    curl_ = FindInPath("curl");
  }

  void TearDown() override {
    if (!server_) return;
    // Whatever a test did, the server must have survived it ...
    const std::optional<int> died = server_->Wait(absl::ZeroDuration());
    EXPECT_FALSE(died.has_value()) << "berth serve died during the test, exit status " << died.value_or(-1)
                                   << (died == 128 + SIGPIPE ? " (SIGPIPE)" : "") << ":\n"
                                   << server_->Output();
    if (died) return;
    // ... and it stops cleanly on SIGTERM.
    server_->Signal(SIGTERM);
    EXPECT_EQ(server_->Wait(absl::Seconds(30)), std::optional<int>(0)) << server_->Output();
  }

  std::string DataDir() const { return dir_.Join("data"); }
  std::string KubeconfigPath() const { return dir_.Join("data/kubeconfig"); }
  std::string SocketPath() const { return dir_.Join("data/api.sock"); }
  std::string Home() const { return dir_.Join("home"); }
  std::string CaPath() const { return dir_.Join("ca.pem"); }

  bool Exited() { return server_->Wait(absl::ZeroDuration()).has_value(); }

  // Writes a manifest into the test's directory; returns its path.
  std::string Manifest(const std::string& name, const std::string& text) {
    const std::string path = dir_.Join(name);
    WriteText(path, text);
    return path;
  }

  // The berth CLI over the unix socket (--data-dir).
  CommandResult Berth(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {BERTH_BINARY, "--data-dir", DataDir()};
    argv.insert(argv.end(), args.begin(), args.end());
    return Run({}, argv);
  }

  // The berth CLI over TCP + TLS (--kubeconfig).
  CommandResult BerthTls(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {BERTH_BINARY, "--kubeconfig", KubeconfigPath()};
    argv.insert(argv.end(), args.begin(), args.end());
    return Run({}, argv);
  }

  CommandResult Kubectl(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {kubectl_};
    argv.insert(argv.end(), args.begin(), args.end());
    return Run({"KUBECONFIG=" + KubeconfigPath()}, argv);
  }

  // A kubectl that runs until stopped; its output goes to `log`.
  std::unique_ptr<testing::Subprocess> KubectlInBackground(const std::vector<std::string>& args,
                                                           const std::string& log) {
    std::vector<std::string> argv = {"/usr/bin/env", "HOME=" + Home(), "KUBECONFIG=" + KubeconfigPath(), kubectl_};
    argv.insert(argv.end(), args.begin(), args.end());
    return std::make_unique<testing::Subprocess>(argv, log);
  }

  // One HTTPS request to the TCP listener; `headers` like "Authorization: ...".
  HttpResult Https(const std::string& method, const std::string& path, const std::vector<std::string>& headers,
                   const std::string& body = "") {
    const std::string body_file = dir_.Join(absl::StrCat("http-", ++commands_, ".body"));
    std::vector<std::string> argv = {curl_, "-sS", "--max-time", "30", "--cacert", CaPath()};
    argv.insert(argv.end(), {"-X", method, "-o", body_file, "-w", "%{http_code}"});
    for (const auto& h : headers) {
      argv.push_back("-H");
      argv.push_back(h);
    }
    if (!body.empty()) {
      argv.insert(argv.end(), {"-H", "Content-Type: application/json", "--data-binary", body});
    }
    argv.push_back(absl::StrCat("https://127.0.0.1:", port_, path));
    CommandResult r = Run({}, argv);
    HttpResult out;
    if (r.exit_code != 0 || !absl::SimpleAtoi(r.out, &out.status)) {
      ADD_FAILURE() << "curl failed: " << r;
    }
    out.body = ReadText(body_file);
    return out;
  }

  CommandResult Run(std::vector<std::string> env, const std::vector<std::string>& argv) {
    env.push_back("HOME=" + Home());
    return RunCommand(env, argv, dir_.Join(absl::StrCat("command-", ++commands_, ".err")));
  }

  // Calls `touch(1)`, `touch(2)`, ... until `seen(tick)` holds for the last
  // tick (a watch reported the change): from then on the watch is live.
  bool TouchUntilSeen(const std::function<void(int)>& touch, const std::function<bool(int)>& seen) {
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    for (int tick = 1; absl::Now() < deadline; ++tick) {
      touch(tick);
      if (PollUntil(absl::Seconds(1), [&] { return seen(tick); })) return true;
    }
    return false;
  }

  // Resolves kubectl once per process; kubectl_ stays empty (and
  // kubectl_missing_ says why) when there is none.
  void FindKubectl() {
    static const auto* const found = new std::pair<std::string, std::string>([this] {
      const char* env = std::getenv("BERTH_KUBECTL");
      const std::vector<std::string> candidates = {KUBECTL_BINARY, env != nullptr ? env : "", kDebianKubectl,
                                                   "/usr/bin/kubectl"};
      const std::string path = FirstExecutable(candidates);
      if (path.empty()) {
        const std::string why = absl::StrCat(
            "no kubectl: KUBECTL_BINARY is empty or missing, $BERTH_KUBECTL is unset or not executable, "
            "and neither ",
            kDebianKubectl, " nor /usr/bin/kubectl exists");
        return std::make_pair(std::string(), why);
      }
      const CommandResult v =
          RunCommand({"HOME=" + Home()}, {path, "version", "--client"}, dir_.Join("kubectl-version.err"));
      const std::string version = v.out.substr(0, v.out.find('\n'));
      std::cerr << "[ kubectl  ] " << path << ": " << version << "\n";
      if (!absl::StrContains(version, "v1.20")) {
        std::cerr << "[ kubectl  ] note: berth's compatibility target is kubectl v1.20"
                  << (path == kDebianKubectl || absl::StrContains(path, "kubernetes-client")
                          ? " (this is the Debian kubernetes-client path but not v1.20)"
                          : "")
                  << "; results with other versions may differ\n";
      }
      return std::make_pair(path, std::string());
    }());
    kubectl_ = found->first;
    kubectl_missing_ = found->second;
  }

  testing::TempDir dir_;  // declared first: destroyed after the processes
  std::unique_ptr<testing::Subprocess> server_;
  int port_ = 0;
  std::string token_;
  std::string kubectl_;
  std::string kubectl_missing_;
  std::string curl_;
  int commands_ = 0;
};

// ---- berth CLI ----

TEST_F(ApiCliTest, BerthCliAppliesGetsAndDeletesAClaimOverTheUnixSocket) {
  const std::string manifest = Manifest("claim.yaml", StorageClassYaml() + "---\n" + ClaimYaml("data"));

  CommandResult created = Berth({"apply", "-f", manifest});
  ASSERT_EQ(created.exit_code, 0) << created;
  EXPECT_EQ(created.out, "storageclass.storage.k8s.io/fast created\npersistentvolumeclaim/data created\n");

  // The same manifests again (they have no status): nothing to change.
  CommandResult again = Berth({"apply", "-f", manifest});
  ASSERT_EQ(again.exit_code, 0) << again;
  EXPECT_EQ(again.out, "storageclass.storage.k8s.io/fast unchanged\npersistentvolumeclaim/data unchanged\n");

  CommandResult table = Berth({"get", "pvc"});
  ASSERT_EQ(table.exit_code, 0) << table;
  const std::vector<std::string> lines = Lines(table.out);
  ASSERT_EQ(lines.size(), 2u) << table;
  EXPECT_THAT(HeaderColumns(lines[0]),
              ElementsAre("NAME", "STATUS", "VOLUME", "CAPACITY", "ACCESS MODES", "STORAGECLASS", "AGE"));
  // VOLUME, CAPACITY and ACCESS MODES are empty while the claim is pending.
  EXPECT_THAT(Fields(lines[1]), ElementsAre("data", "Pending", "fast", MatchesRegex("[0-9]+[smhd].*")));

  CommandResult as_json = Berth({"get", "pvc", "data", "-o", "json"});
  ASSERT_EQ(as_json.exit_code, 0) << as_json;
  const json claim = json::parse(as_json.out, nullptr, false);
  ASSERT_TRUE(claim.is_object()) << as_json;
  EXPECT_EQ(claim.value("kind", ""), "PersistentVolumeClaim");
  EXPECT_EQ(claim["spec"].value("volumeMode", ""), "Filesystem");  // defaulted
  EXPECT_EQ(claim["status"].value("phase", ""), "Pending");

  CommandResult missing = Berth({"get", "pvc", "nosuch"});
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_EQ(missing.out, "");
  EXPECT_THAT(Lines(missing.err),
              ElementsAre("Error from server (NotFound): persistentvolumeclaims \"nosuch\" not found"));

  CommandResult deleted = Berth({"delete", "pvc", "data", "--wait=false"});
  ASSERT_EQ(deleted.exit_code, 0) << deleted;
  EXPECT_EQ(deleted.out, "persistentvolumeclaim \"data\" deleted\n");
  CommandResult waited = Berth({"wait", "pvc/data", "--for=delete", "--timeout", "30s"});
  EXPECT_EQ(waited.exit_code, 0) << waited;
  EXPECT_EQ(waited.out, "persistentvolumeclaim/data deleted\n");
  CommandResult gone = Berth({"get", "pvc", "data"});
  EXPECT_NE(gone.exit_code, 0);
  EXPECT_THAT(gone.err, HasSubstr("not found"));

  CommandResult deleted_class = Berth({"delete", "sc", "fast"});
  EXPECT_EQ(deleted_class.exit_code, 0) << deleted_class;
  EXPECT_EQ(deleted_class.out, "storageclass.storage.k8s.io \"fast\" deleted\n");
}

TEST_F(ApiCliTest, BerthCliWaitsForAJsonpathValue) {
  ASSERT_EQ(Berth({"apply", "-f", Manifest("claim.yaml", ClaimYaml("data"))}).exit_code, 0);
  CommandResult met = Berth({"wait", "pvc/data", "--for=jsonpath={.status.phase}=Pending", "--timeout", "30s"});
  EXPECT_EQ(met.exit_code, 0) << met;
  EXPECT_EQ(met.out, "persistentvolumeclaim/data condition met\n");
  CommandResult timed_out = Berth({"wait", "pvc/data", "--for=jsonpath={.status.phase}=Bound", "--timeout", "1s"});
  EXPECT_NE(timed_out.exit_code, 0);
  EXPECT_THAT(timed_out.err, HasSubstr("timed out"));
}

TEST_F(ApiCliTest, BerthCliReportsARejectedManifestOnce) {
  CommandResult r = Berth({"apply", "-f", Manifest("bad.yaml", R"(apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: bad
spec:
  resources:
    requests:
      storage: 1Gi
)")});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(Lines(r.err), ElementsAre(AllOf(StartsWith("Error from server (Invalid): "),
                                              HasSubstr("PersistentVolumeClaim \"bad\" is invalid"),
                                              HasSubstr("spec.accessModes: Required value"))))
      << r;
}

TEST_F(ApiCliTest, BerthCliShowsNoNamespaceOnAClusterScopedObject) {
  ASSERT_EQ(Berth({"apply", "-f", Manifest("sc.yaml", StorageClassYaml())}).exit_code, 0);
  CommandResult r = Berth({"get", "sc", "fast", "-o", "json"});
  ASSERT_EQ(r.exit_code, 0) << r;
  const json object = json::parse(r.out, nullptr, false);
  ASSERT_TRUE(object.is_object()) << r;
  // As in Kubernetes: no metadata.namespace at all, not an empty one.
  EXPECT_FALSE(object["metadata"].contains("namespace")) << object["metadata"].dump();
}

TEST_F(ApiCliTest, BerthCliReachesTheApiOverTlsWithTheKubeconfig) {
  CommandResult r = BerthTls({"get", "ns", "-o", "name"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_THAT(Lines(r.out), ::testing::Contains("namespace/default"));
  CommandResult applied = BerthTls({"apply", "-f", Manifest("claim.yaml", ClaimYaml("data"))});
  EXPECT_EQ(applied.exit_code, 0) << applied;
  EXPECT_EQ(Berth({"get", "pvc", "data", "-o", "name"}).out, "persistentvolumeclaim/data\n");
}

TEST_F(ApiCliTest, BerthCliWatchSeesCreateLabelDeleteInOrder) {
  ASSERT_EQ(Berth({"apply", "-f", Manifest("marker.yaml", ClaimYaml("marker"))}).exit_code, 0);
  const std::string log = dir_.Join("watch.log");
  auto watch = std::make_unique<testing::Subprocess>(
      std::vector<std::string>{BERTH_BINARY, "--data-dir", DataDir(), "get", "pvc", "-w", "-o", "json"}, log);
  auto states = [&](const std::string& name) {
    std::vector<json> out;
    for (auto& o : JsonStream(watch->Output())) {
      if (o["metadata"].value("name", "") == name) out.push_back(std::move(o));
    }
    return out;
  };
  // Relabel the marker until the watch shows it: then it is streaming.
  ASSERT_TRUE(TouchUntilSeen(
      [&](int tick) {
        Berth({"apply", "-f", Manifest("marker.yaml", ClaimYaml("marker", {{"tick", std::to_string(tick)}}))});
      },
      [&](int tick) {
        for (const auto& o : states("marker")) {
          const json labels = o["metadata"].value("labels", json::object());
          if (labels.value("tick", "") == std::to_string(tick)) return true;
        }
        return false;
      }))
      << watch->Output();

  ASSERT_EQ(Berth({"apply", "-f", Manifest("watched.yaml", ClaimYaml("watched"))}).exit_code, 0);
  ASSERT_EQ(Berth({"apply", "-f", Manifest("watched.yaml", ClaimYaml("watched", {{"stage", "labelled"}}))}).exit_code,
            0);
  ASSERT_EQ(Berth({"delete", "pvc", "watched"}).exit_code, 0);
  ASSERT_TRUE(PollUntil(absl::Seconds(30), [&] { return states("watched").size() >= 3; })) << watch->Output();

  watch->Signal(SIGTERM);
  EXPECT_TRUE(watch->Wait(absl::Seconds(10)).has_value()) << "the watch did not stop";

  // Created (no label), labelled, deleted (its last state, a newer version).
  const std::vector<json> seen = states("watched");
  ASSERT_EQ(seen.size(), 3u) << watch->Output();
  auto stage = [](const json& o) { return o["metadata"].value("labels", json::object()).value("stage", "<none>"); };
  auto version = [](const json& o) { return std::stoll(o["metadata"].value("resourceVersion", "0")); };
  EXPECT_EQ(stage(seen[0]), "<none>");
  EXPECT_EQ(stage(seen[1]), "labelled");
  EXPECT_EQ(stage(seen[2]), "labelled");
  EXPECT_LT(version(seen[0]), version(seen[1]));
  EXPECT_LT(version(seen[1]), version(seen[2]));
  EXPECT_NE(Berth({"get", "pvc", "watched"}).exit_code, 0);
}

// ---- Raw HTTP (curl) ----

TEST_F(ApiCliTest, RawWatchStreamsAddedModifiedDeletedInOrder) {
  if (curl_.empty()) GTEST_SKIP() << "curl not found on PATH";
  ASSERT_EQ(Berth({"apply", "-f", Manifest("marker.yaml", ClaimYaml("marker"))}).exit_code, 0);
  auto watch = std::make_unique<testing::Subprocess>(
      std::vector<std::string>{curl_, "-sSN", "--unix-socket", SocketPath(),
                               "http://localhost/api/v1/namespaces/default/persistentvolumeclaims?watch=1"},
      dir_.Join("watch.log"));
  auto events = [&](const std::string& name) {
    std::vector<std::pair<std::string, json>> out;
    for (auto& e : JsonStream(watch->Output())) {
      if (e["object"]["metadata"].value("name", "") == name) {
        out.emplace_back(e.value("type", ""), e["object"]);
      }
    }
    return out;
  };
  // A watch without resourceVersion starts with the existing objects.
  ASSERT_TRUE(PollUntil(absl::Seconds(30), [&] { return !events("marker").empty(); })) << watch->Output();
  EXPECT_EQ(events("marker")[0].first, "ADDED");

  ASSERT_EQ(Berth({"apply", "-f", Manifest("watched.yaml", ClaimYaml("watched"))}).exit_code, 0);
  ASSERT_EQ(Berth({"apply", "-f", Manifest("watched.yaml", ClaimYaml("watched", {{"stage", "labelled"}}))}).exit_code,
            0);
  ASSERT_EQ(Berth({"delete", "pvc", "watched"}).exit_code, 0);
  ASSERT_TRUE(PollUntil(absl::Seconds(30), [&] { return events("watched").size() >= 3; })) << watch->Output();
  watch->Signal(SIGTERM);
  watch->Wait(absl::Seconds(10));

  const auto seen = events("watched");
  ASSERT_EQ(seen.size(), 3u) << watch->Output();
  EXPECT_EQ(seen[0].first, "ADDED");
  EXPECT_EQ(seen[1].first, "MODIFIED");
  EXPECT_EQ(seen[1].second["metadata"]["labels"].value("stage", ""), "labelled");
  EXPECT_EQ(seen[2].first, "DELETED");
}

TEST_F(ApiCliTest, TcpRequestWithoutTokenIsUnauthorizedAndCreatesNothing) {
  if (curl_.empty()) GTEST_SKIP() << "curl not found on PATH";
  HttpResult post = Https("POST", "/api/v1/namespaces", {},
                          R"({"apiVersion":"v1","kind":"Namespace","metadata":{"name":"intruder"}})");
  EXPECT_EQ(post.status, 401) << post.body;
  const json status = json::parse(post.body, nullptr, false);
  ASSERT_TRUE(status.is_object()) << post.body;
  EXPECT_EQ(status.value("kind", ""), "Status");
  EXPECT_EQ(status.value("reason", ""), "Unauthorized");
  EXPECT_EQ(Https("GET", "/api/v1/namespaces", {}).status, 401);

  CommandResult ns = Berth({"get", "ns", "intruder"});
  EXPECT_NE(ns.exit_code, 0) << "the unauthenticated POST created a namespace";
  EXPECT_THAT(ns.err, HasSubstr("not found"));
}

TEST_F(ApiCliTest, TcpRequestWithAWrongTokenIsUnauthorized) {
  if (curl_.empty()) GTEST_SKIP() << "curl not found on PATH";
  std::string almost = token_;
  almost.back() = almost.back() == '0' ? '1' : '0';
  for (const std::string& header :
       {std::string("Authorization: Bearer wrong"), "Authorization: Bearer " + almost,
        "Authorization: Bearer " + token_ + "x", "Authorization: Basic " + token_, "Authorization: " + token_}) {
    HttpResult r = Https("GET", "/api/v1/namespaces", {header});
    EXPECT_EQ(r.status, 401) << header << "\n" << r.body;
  }
  HttpResult post = Https("POST", "/api/v1/namespaces", {"Authorization: Bearer " + almost},
                          R"({"apiVersion":"v1","kind":"Namespace","metadata":{"name":"intruder"}})");
  EXPECT_EQ(post.status, 401) << post.body;
  EXPECT_NE(Berth({"get", "ns", "intruder"}).exit_code, 0);
}

TEST_F(ApiCliTest, TcpRequestWithTheTokenIsServed) {
  if (curl_.empty()) GTEST_SKIP() << "curl not found on PATH";
  HttpResult r = Https("GET", "/api/v1/namespaces", {"Authorization: Bearer " + token_});
  ASSERT_EQ(r.status, 200) << r.body;
  const json list = json::parse(r.body, nullptr, false);
  ASSERT_TRUE(list.is_object()) << r.body;
  EXPECT_EQ(list.value("kind", ""), "NamespaceList");
  std::vector<std::string> names;
  for (const auto& item : list["items"]) names.push_back(item["metadata"].value("name", ""));
  EXPECT_THAT(names, ::testing::Contains("default"));
}

TEST_F(ApiCliTest, KubeconfigAndApiSocketAreOwnerOnly) {
  // Permission bits in octal, as ls and chmod show them.
  auto mode = [](const std::string& path, bool follow) {
    struct stat st {};
    if ((follow ? ::stat(path.c_str(), &st) : ::lstat(path.c_str(), &st)) != 0) return std::string("missing");
    std::ostringstream os;
    os << (S_ISSOCK(st.st_mode)  ? "socket "
           : S_ISDIR(st.st_mode) ? "dir "
                                 : "file ")
       << std::oct << (st.st_mode & 07777);
    return os.str();
  };
  EXPECT_EQ(mode(KubeconfigPath(), false), "file 600");
  EXPECT_EQ(mode(SocketPath(), false), "socket 600");
  EXPECT_EQ(mode(DataDir(), true), "dir 700");
}

// ---- kubectl ----

TEST_F(ApiCliTest, KubectlSeesTheBerthServer) {
  if (kubectl_.empty()) GTEST_SKIP() << kubectl_missing_;
  CommandResult v = Kubectl({"version"});
  ASSERT_EQ(v.exit_code, 0) << v;
  EXPECT_THAT(v.out, HasSubstr("+berth"));
  CommandResult ns = Kubectl({"get", "ns", "-o", "name"});
  ASSERT_EQ(ns.exit_code, 0) << ns;
  EXPECT_THAT(Lines(ns.out), ::testing::Contains("namespace/default"));
}

TEST_F(ApiCliTest, KubectlCreateGetReplaceAndDeleteAClaim) {
  if (kubectl_.empty()) GTEST_SKIP() << kubectl_missing_;
  ASSERT_EQ(Kubectl({"create", "-f", Manifest("sc.yaml", StorageClassYaml())}).exit_code, 0);
  const std::string claim = Manifest("claim.yaml", ClaimYaml("data"));
  CommandResult created = Kubectl({"create", "-f", claim});
  ASSERT_EQ(created.exit_code, 0) << created;
  EXPECT_EQ(created.out, "persistentvolumeclaim/data created\n");

  CommandResult exists = Kubectl({"create", "-f", claim});
  EXPECT_NE(exists.exit_code, 0);
  EXPECT_THAT(exists.err,
              AllOf(HasSubstr("AlreadyExists"), HasSubstr("persistentvolumeclaims \"data\" already exists")));

  CommandResult table = Kubectl({"get", "pvc"});
  ASSERT_EQ(table.exit_code, 0) << table;
  const std::vector<std::string> lines = Lines(table.out);
  ASSERT_EQ(lines.size(), 2u) << table;
  EXPECT_THAT(HeaderColumns(lines[0]),
              ElementsAre("NAME", "STATUS", "VOLUME", "CAPACITY", "ACCESS MODES", "STORAGECLASS", "AGE"));
  EXPECT_THAT(Fields(lines[1]), ElementsAre("data", "Pending", "fast", MatchesRegex("[0-9]+[smhd].*")));

  CommandResult one = Kubectl({"get", "pvc", "data", "-o", "json"});
  ASSERT_EQ(one.exit_code, 0) << one;
  const json object = json::parse(one.out, nullptr, false);
  ASSERT_TRUE(object.is_object()) << one;
  EXPECT_EQ(object["spec"].value("volumeMode", ""), "Filesystem");
  EXPECT_EQ(object["spec"].value("storageClassName", ""), "fast");

  ASSERT_EQ(Kubectl({"create", "-f", Manifest("logs.yaml", ClaimYaml("logs"))}).exit_code, 0);
  CommandResult names = Kubectl({"get", "pvc", "-o", "jsonpath={.items[*].metadata.name}"});
  ASSERT_EQ(names.exit_code, 0) << names;
  EXPECT_EQ(names.out, "data logs");

  CommandResult replaced = Kubectl({"replace", "-f", Manifest("claim.yaml", ClaimYaml("data", {{"tier", "gold"}}))});
  ASSERT_EQ(replaced.exit_code, 0) << replaced;
  EXPECT_EQ(replaced.out, "persistentvolumeclaim/data replaced\n");
  EXPECT_EQ(Kubectl({"get", "pvc", "data", "-o", "jsonpath={.metadata.labels.tier}"}).out, "gold");

  CommandResult deleted = Kubectl({"delete", "pvc", "data", "logs"});
  ASSERT_EQ(deleted.exit_code, 0) << deleted;
  EXPECT_EQ(deleted.out, "persistentvolumeclaim \"data\" deleted\npersistentvolumeclaim \"logs\" deleted\n");
  CommandResult none = Kubectl({"get", "pvc"});
  EXPECT_EQ(none.exit_code, 0) << none;
  EXPECT_EQ(none.out, "");
  EXPECT_THAT(none.err, HasSubstr("No resources found in default namespace."));
}

TEST_F(ApiCliTest, KubectlApplyIsIdempotentAndAppliesEdits) {
  if (kubectl_.empty()) GTEST_SKIP() << kubectl_missing_;
  const std::string path = Manifest("claim.yaml", ClaimYaml("data"));
  EXPECT_EQ(Kubectl({"apply", "-f", path}).out, "persistentvolumeclaim/data created\n");
  EXPECT_EQ(Kubectl({"apply", "-f", path}).out, "persistentvolumeclaim/data unchanged\n");

  Manifest("claim.yaml", ClaimYaml("data", {{"tier", "gold"}}));
  CommandResult edited = Kubectl({"apply", "-f", path});
  ASSERT_EQ(edited.exit_code, 0) << edited;
  EXPECT_EQ(edited.out, "persistentvolumeclaim/data configured\n");
  EXPECT_EQ(Kubectl({"get", "pvc", "data", "-o", "jsonpath={.metadata.labels.tier}"}).out, "gold");

  // A label set by someone else survives an apply that changes another one
  // (three-way merge against last-applied-configuration).
  ASSERT_EQ(Kubectl({"label", "pvc", "data", "owner=ops"}).exit_code, 0);
  Manifest("claim.yaml", ClaimYaml("data", {{"tier", "silver"}}));
  EXPECT_EQ(Kubectl({"apply", "-f", path}).out, "persistentvolumeclaim/data configured\n");
  CommandResult labels = Kubectl({"get", "pvc", "data", "-o", "json"});
  const json object = json::parse(labels.out, nullptr, false);
  ASSERT_TRUE(object.is_object()) << labels;
  EXPECT_EQ(object["metadata"]["labels"], json({{"owner", "ops"}, {"tier", "silver"}}));
}

TEST_F(ApiCliTest, KubectlApplyThenPatchMergeUpdatesTheClaim) {
  if (kubectl_.empty()) GTEST_SKIP() << kubectl_missing_;
  ASSERT_EQ(Kubectl({"apply", "-f", Manifest("claim.yaml", ClaimYaml("data"))}).exit_code, 0);

  CommandResult merge =
      Kubectl({"patch", "pvc", "data", "--type", "merge", "-p", R"({"metadata":{"labels":{"tier":"gold"}}})"});
  ASSERT_EQ(merge.exit_code, 0) << merge;
  EXPECT_EQ(merge.out, "persistentvolumeclaim/data patched\n");
  CommandResult strategic = Kubectl({"patch", "pvc", "data", "-p", R"({"metadata":{"labels":{"zone":"a"}}})"});
  ASSERT_EQ(strategic.exit_code, 0) << strategic;
  EXPECT_EQ(strategic.out, "persistentvolumeclaim/data patched\n");
  CommandResult json_patch = Kubectl({"patch", "pvc", "data", "--type", "json", "-p",
                                      R"([{"op":"add","path":"/metadata/labels/via","value":"json"}])"});
  ASSERT_EQ(json_patch.exit_code, 0) << json_patch;
  EXPECT_EQ(json_patch.out, "persistentvolumeclaim/data patched\n");
  CommandResult label = Kubectl({"label", "pvc", "data", "owner=ops"});
  EXPECT_EQ(label.out, "persistentvolumeclaim/data labeled\n") << label;
  CommandResult annotate = Kubectl({"annotate", "pvc", "data", "note=hello"});
  EXPECT_EQ(annotate.out, "persistentvolumeclaim/data annotated\n") << annotate;

  CommandResult got = Kubectl({"get", "pvc", "data", "-o", "json"});
  const json object = json::parse(got.out, nullptr, false);
  ASSERT_TRUE(object.is_object()) << got;
  EXPECT_EQ(object["metadata"]["labels"], json({{"owner", "ops"}, {"tier", "gold"}, {"via", "json"}, {"zone", "a"}}));
  EXPECT_EQ(object["metadata"]["annotations"].value("note", ""), "hello");
  EXPECT_EQ(object["spec"]["resources"]["requests"].value("storage", ""), "1Gi");  // untouched

  CommandResult selected = Kubectl({"get", "pvc", "-l", "tier=gold,zone=a", "-o", "name"});
  EXPECT_EQ(selected.out, "persistentvolumeclaim/data\n") << selected;
  CommandResult across = Kubectl({"get", "pvc", "-A", "-o", "name"});
  EXPECT_EQ(across.out, "persistentvolumeclaim/data\n") << across;
}

TEST_F(ApiCliTest, KubectlPatchThatChangesNothingReportsNoChange) {
  if (kubectl_.empty()) GTEST_SKIP() << kubectl_missing_;
  ASSERT_EQ(Kubectl({"apply", "-f", Manifest("claim.yaml", ClaimYaml("data", {{"tier", "gold"}}))}).exit_code, 0);
  const std::string before = Kubectl({"get", "pvc", "data", "-o", "jsonpath={.metadata.resourceVersion}"}).out;
  // Kubernetes does not write an unchanged object: same resourceVersion, no
  // watch event, and kubectl says "(no change)".
  CommandResult r =
      Kubectl({"patch", "pvc", "data", "--type", "merge", "-p", R"({"metadata":{"labels":{"tier":"gold"}}})"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(r.out, "persistentvolumeclaim/data patched (no change)\n");
  EXPECT_EQ(Kubectl({"get", "pvc", "data", "-o", "jsonpath={.metadata.resourceVersion}"}).out, before);
}

TEST_F(ApiCliTest, KubectlManagesAStorageClass) {
  if (kubectl_.empty()) GTEST_SKIP() << kubectl_missing_;
  const std::string path = Manifest("sc.yaml", StorageClassYaml());
  CommandResult created = Kubectl({"create", "-f", path});
  ASSERT_EQ(created.exit_code, 0) << created;
  EXPECT_EQ(created.out, "storageclass.storage.k8s.io/fast created\n");

  CommandResult table = Kubectl({"get", "sc"});
  const std::vector<std::string> lines = Lines(table.out);
  ASSERT_EQ(lines.size(), 2u) << table;
  EXPECT_THAT(HeaderColumns(lines[0]),
              ElementsAre("NAME", "PROVISIONER", "RECLAIMPOLICY", "VOLUMEBINDINGMODE", "ALLOWVOLUMEEXPANSION", "AGE"));
  EXPECT_THAT(Fields(lines[1]), ElementsAre("fast", "local.csi.berth.io", "Delete", "Immediate", "false",
                                            MatchesRegex("[0-9]+[smhd].*")));

  // Created without last-applied-configuration: the first apply records it.
  EXPECT_EQ(Kubectl({"apply", "-f", path}).out, "storageclass.storage.k8s.io/fast configured\n");
  EXPECT_EQ(Kubectl({"apply", "-f", path}).out, "storageclass.storage.k8s.io/fast unchanged\n");

  CommandResult patched =
      Kubectl({"patch", "sc", "fast", "--type", "merge", "-p", R"({"metadata":{"labels":{"tier":"gold"}}})"});
  EXPECT_EQ(patched.out, "storageclass.storage.k8s.io/fast patched\n") << patched;
  CommandResult replaced = Kubectl({"replace", "-f", Manifest("sc.yaml", StorageClassYaml({{"tier", "silver"}}))});
  EXPECT_EQ(replaced.out, "storageclass.storage.k8s.io/fast replaced\n") << replaced;

  CommandResult got = Kubectl({"get", "sc", "fast", "-o", "json"});
  const json object = json::parse(got.out, nullptr, false);
  ASSERT_TRUE(object.is_object()) << got;
  EXPECT_EQ(object["metadata"]["labels"], json({{"tier", "silver"}}));
  EXPECT_EQ(object.value("reclaimPolicy", ""), "Delete");  // defaulted

  CommandResult deleted = Kubectl({"delete", "-f", path});
  EXPECT_EQ(deleted.out, "storageclass.storage.k8s.io \"fast\" deleted\n") << deleted;
  CommandResult gone = Kubectl({"get", "sc", "fast"});
  EXPECT_NE(gone.exit_code, 0);
  EXPECT_EQ(gone.err, "Error from server (NotFound): storageclasses.storage.k8s.io \"fast\" not found\n");
}

TEST_F(ApiCliTest, KubectlManagesAVolumeSnapshot) {
  if (kubectl_.empty()) GTEST_SKIP() << kubectl_missing_;
  const std::string path = Manifest("snap.yaml", SnapshotYaml());
  CommandResult created = Kubectl({"create", "-f", path});
  ASSERT_EQ(created.exit_code, 0) << created;
  EXPECT_EQ(created.out, "volumesnapshot.snapshot.storage.k8s.io/snap created\n");

  CommandResult table = Kubectl({"get", "vs"});
  const std::vector<std::string> lines = Lines(table.out);
  ASSERT_EQ(lines.size(), 2u) << table;
  EXPECT_THAT(HeaderColumns(lines[0]),
              ElementsAre("NAME", "READYTOUSE", "SOURCEPVC", "SOURCESNAPSHOTCONTENT", "RESTORESIZE", "SNAPSHOTCLASS",
                          "SNAPSHOTCONTENT", "CREATIONTIME", "AGE"));
  EXPECT_THAT(Fields(lines[1]), ElementsAre("snap", "data", "snapclass", MatchesRegex("[0-9]+[smhd].*")));

  CommandResult patched = Kubectl(
      {"patch", "volumesnapshot", "snap", "--type", "merge", "-p", R"({"metadata":{"labels":{"tier":"gold"}}})"});
  EXPECT_EQ(patched.out, "volumesnapshot.snapshot.storage.k8s.io/snap patched\n") << patched;
  CommandResult applied = Kubectl({"apply", "-f", Manifest("snap.yaml", SnapshotYaml({{"tier", "gold"}}))});
  EXPECT_EQ(applied.exit_code, 0) << applied;
  CommandResult replaced = Kubectl({"replace", "-f", Manifest("snap.yaml", SnapshotYaml({{"tier", "silver"}}))});
  EXPECT_EQ(replaced.out, "volumesnapshot.snapshot.storage.k8s.io/snap replaced\n") << replaced;

  CommandResult got = Kubectl({"get", "vs", "snap", "-o", "json"});
  const json object = json::parse(got.out, nullptr, false);
  ASSERT_TRUE(object.is_object()) << got;
  EXPECT_EQ(object["spec"]["source"].value("persistentVolumeClaimName", ""), "data");
  EXPECT_EQ(object["metadata"]["labels"], json({{"tier", "silver"}}));

  CommandResult deleted = Kubectl({"delete", "vs", "snap"});
  EXPECT_EQ(deleted.out, "volumesnapshot.snapshot.storage.k8s.io \"snap\" deleted\n") << deleted;
  EXPECT_NE(Kubectl({"get", "vs", "snap"}).exit_code, 0);
}

TEST_F(ApiCliTest, KubectlShowsTheServersMessageForAnInvalidClaim) {
  if (kubectl_.empty()) GTEST_SKIP() << kubectl_missing_;
  CommandResult r = Kubectl({"create", "-f", Manifest("bad.yaml", R"(apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: bad
spec:
  resources:
    requests:
      storage: 1Gi
)")});
  EXPECT_NE(r.exit_code, 0);
  // kubectl 1.20 prints a 422 from Status.details (kind, name, causes);
  // without details it says only "The request is invalid".
  EXPECT_THAT(r.err, AllOf(HasSubstr("PersistentVolumeClaim \"bad\" is invalid"),
                           HasSubstr("spec.accessModes: Required value")))
      << r;
  EXPECT_NE(Kubectl({"get", "pvc", "bad"}).exit_code, 0);
}

TEST_F(ApiCliTest, KubectlPatchOfAnImmutableFieldNamesTheField) {
  if (kubectl_.empty()) GTEST_SKIP() << kubectl_missing_;
  ASSERT_EQ(Kubectl({"create", "-f", Manifest("sc.yaml", StorageClassYaml())}).exit_code, 0);
  CommandResult sc =
      Kubectl({"patch", "sc", "fast", "--type", "merge", "-p", R"({"provisioner":"other.csi.example.com"})"});
  EXPECT_NE(sc.exit_code, 0);
  EXPECT_THAT(sc.err, AllOf(HasSubstr("StorageClass \"fast\" is invalid"), HasSubstr("provisioner: Forbidden"))) << sc;
  EXPECT_EQ(Kubectl({"get", "sc", "fast", "-o", "jsonpath={.provisioner}"}).out, "local.csi.berth.io");

  ASSERT_EQ(Kubectl({"create", "-f", Manifest("snap.yaml", SnapshotYaml())}).exit_code, 0);
  CommandResult vs = Kubectl(
      {"patch", "vs", "snap", "--type", "merge", "-p", R"({"spec":{"source":{"persistentVolumeClaimName":"other"}}})"});
  EXPECT_NE(vs.exit_code, 0);
  EXPECT_THAT(vs.err, AllOf(HasSubstr("spec.source.persistentVolumeClaimName"), HasSubstr("immutable"))) << vs;
}

TEST_F(ApiCliTest, KubectlCreateWithAnUnknownFieldIsRejected) {
  if (kubectl_.empty()) GTEST_SKIP() << kubectl_missing_;
  CommandResult r = Kubectl({"create", "-f", Manifest("unknown.yaml", R"(apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: odd
spec:
  accessModes: [ReadWriteOnce]
  bogusField: 1
  resources:
    requests:
      storage: 1Gi
)")});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, AllOf(HasSubstr("BadRequest"), HasSubstr("unknown field \"spec.bogusField\""))) << r;
  EXPECT_NE(Kubectl({"get", "pvc", "odd"}).exit_code, 0);
}

TEST_F(ApiCliTest, KubectlGetOfAMissingClaimSaysNotFound) {
  if (kubectl_.empty()) GTEST_SKIP() << kubectl_missing_;
  CommandResult r = Kubectl({"get", "pvc", "nosuch"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "Error from server (NotFound): persistentvolumeclaims \"nosuch\" not found\n");
}

TEST_F(ApiCliTest, KubectlDeleteOfAClaimWithAFinalizerLeavesItTerminating) {
  if (kubectl_.empty()) GTEST_SKIP() << kubectl_missing_;
  ASSERT_EQ(Kubectl({"create", "-f", Manifest("claim.yaml", R"(apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: held
  finalizers: [example.com/hold]
spec:
  accessModes: [ReadWriteOnce]
  resources:
    requests:
      storage: 1Gi
)")})
                .exit_code,
            0);
  CommandResult deleted = Kubectl({"delete", "pvc", "held", "--wait=false"});
  ASSERT_EQ(deleted.exit_code, 0) << deleted;
  EXPECT_EQ(deleted.out, "persistentvolumeclaim \"held\" deleted\n");
  CommandResult table = Kubectl({"get", "pvc", "held", "--no-headers"});
  EXPECT_THAT(Fields(table.out), ::testing::Contains("Terminating")) << table;
  EXPECT_THAT(Kubectl({"get", "pvc", "held", "-o", "jsonpath={.metadata.deletionTimestamp}"}).out,
              Not(::testing::IsEmpty()));

  CommandResult released =
      Kubectl({"patch", "pvc", "held", "--type", "json", "-p", R"([{"op":"remove","path":"/metadata/finalizers"}])"});
  ASSERT_EQ(released.exit_code, 0) << released;
  EXPECT_TRUE(PollUntil(absl::Seconds(30), [&] { return Kubectl({"get", "pvc", "held"}).exit_code != 0; }));
}

TEST_F(ApiCliTest, KubectlWatchShowsAddedModifiedDeletedInOrder) {
  if (kubectl_.empty()) GTEST_SKIP() << kubectl_missing_;
  ASSERT_EQ(Kubectl({"create", "-f", Manifest("marker.yaml", ClaimYaml("marker"))}).exit_code, 0);
  auto watch = KubectlInBackground({"get", "pvc", "--watch-only", "--output-watch-events"}, dir_.Join("watch.log"));
  // Rows "EVENT NAME ..." for `name`, in order.
  auto events = [&](const std::string& name) {
    std::vector<std::string> out;
    for (const auto& line : Lines(watch->Output())) {
      std::vector<std::string> f = Fields(line);
      if (f.size() >= 2 && f[1] == name) out.push_back(f[0]);
    }
    return out;
  };
  ASSERT_TRUE(TouchUntilSeen(
      [&](int tick) {
        Kubectl({"label", "pvc", "marker", "--overwrite", "tick=" + std::to_string(tick)});
      },
      [&](int) { return !events("marker").empty(); }))
      << watch->Output();

  ASSERT_EQ(Kubectl({"create", "-f", Manifest("watched.yaml", ClaimYaml("watched"))}).exit_code, 0);
  ASSERT_EQ(Kubectl({"label", "pvc", "watched", "stage=labelled"}).exit_code, 0);
  ASSERT_EQ(Kubectl({"delete", "pvc", "watched"}).exit_code, 0);
  ASSERT_TRUE(PollUntil(absl::Seconds(30), [&] { return events("watched").size() >= 3; })) << watch->Output();
  EXPECT_THAT(events("watched"), ElementsAre("ADDED", "MODIFIED", "DELETED")) << watch->Output();
  EXPECT_THAT(Lines(watch->Output()).front(), StartsWith("EVENT"));

  // Stopping kubectl ends its watch, and the server carries on: wait until
  // the server has closed its side of the connection (it ends the stream and
  // reads once more), then it must still be running.
  watch->Signal(SIGTERM);
  EXPECT_TRUE(watch->Wait(absl::Seconds(10)).has_value()) << "kubectl did not stop";
  EXPECT_TRUE(PollUntil(absl::Seconds(10), [&] { return OpenServerConnections(port_) == 0; }))
      << OpenServerConnections(port_) << " connection(s) still open on port " << port_;
  ASSERT_FALSE(Exited()) << "berth serve died when the watching kubectl went away:\n" << server_->Output();
  CommandResult after = Kubectl({"get", "pvc", "-o", "name"});
  EXPECT_EQ(after.out, "persistentvolumeclaim/marker\n") << after;
}

// ---- Helper definitions ----

std::ostream& operator<<(std::ostream& os, const CommandResult& r) {
  return os << "exit " << r.exit_code << "\n--- stdout:\n" << r.out << "--- stderr:\n" << r.err;
}

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

CommandResult RunCommand(const std::vector<std::string>& env, const std::vector<std::string>& argv,
                         const std::string& err_path) {
  // `timeout` keeps a stuck command from hanging the test binary.
  std::string command = ::access("/usr/bin/timeout", X_OK) == 0 ? "/usr/bin/timeout -k 5 120 env" : "env";
  for (const auto& e : env) command += " " + ShellQuote(e);
  for (const auto& a : argv) command += " " + ShellQuote(a);
  command += " </dev/null 2>" + ShellQuote(err_path);
  CommandResult result;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) {
    result.err = "popen failed";
    return result;
  }
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) result.out.append(buf, n);
  const int status = ::pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  result.err = ReadText(err_path);
  return result;
}

std::string FirstExecutable(const std::vector<std::string>& candidates) {
  for (const auto& c : candidates) {
    std::error_code ec;  // unreadable directories on PATH are no error
    if (!c.empty() && fs::is_regular_file(c, ec) && ::access(c.c_str(), X_OK) == 0) return c;
  }
  return "";
}

std::string FindInPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::vector<std::string> candidates;
  for (absl::string_view dir : absl::StrSplit(path != nullptr ? path : "/usr/bin:/bin", ':')) {
    if (!dir.empty()) candidates.push_back(absl::StrCat(dir, "/", name));
  }
  return FirstExecutable(candidates);
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipWhitespace())) out.emplace_back(line);
  return out;
}

std::vector<std::string> HeaderColumns(const std::string& header) {
  std::vector<std::string> out;
  static const std::regex kGap(" {2,}");
  for (std::sregex_token_iterator it(header.begin(), header.end(), kGap, -1), end; it != end; ++it) {
    std::string column = *it;
    while (!column.empty() && column.back() == ' ') column.pop_back();
    if (!column.empty()) out.push_back(column);
  }
  return out;
}

std::vector<std::string> Fields(const std::string& row) {
  std::vector<std::string> out;
  for (absl::string_view f : absl::StrSplit(row, absl::ByAnyChar(" \t\n"), absl::SkipEmpty())) out.emplace_back(f);
  return out;
}

std::vector<json> JsonStream(const std::string& text) {
  std::vector<json> out;
  int depth = 0;
  bool in_string = false, escaped = false;
  size_t start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{') {
      if (depth++ == 0) start = i;
    } else if (c == '}' && depth > 0 && --depth == 0) {
      json value = json::parse(text.substr(start, i - start + 1), nullptr, false);
      if (value.is_object()) out.push_back(std::move(value));
    }
  }
  return out;
}

bool PollUntil(absl::Duration timeout, const std::function<bool()>& done) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    if (done()) return true;
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(20));
  }
}

int OpenServerConnections(int port) {
  std::ifstream in("/proc/net/tcp");
  std::string line;
  std::getline(in, line);  // header
  int open = 0;
  while (std::getline(in, line)) {
    // "  0: 0100007F:8CA1 0100007F:D2F4 01 ..." (hex port, hex state)
    const std::vector<std::string> f = Fields(line);
    if (f.size() < 4) continue;
    const size_t colon = f[1].rfind(':');
    if (colon == std::string::npos) continue;
    const int local_port = static_cast<int>(std::strtol(f[1].c_str() + colon + 1, nullptr, 16));
    if (local_port == port && (f[3] == "01" || f[3] == "08")) ++open;
  }
  return open;
}

std::string LabelsYaml(const std::map<std::string, std::string>& labels) {
  if (labels.empty()) return "";
  std::string out = "  labels:\n";
  for (const auto& [k, v] : labels) absl::StrAppend(&out, "    ", k, ": \"", v, "\"\n");
  return out;
}

std::string StorageClassYaml(const std::map<std::string, std::string>& labels) {
  return absl::StrCat("apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata:\n  name: fast\n",
                      LabelsYaml(labels), "provisioner: local.csi.berth.io\n");
}

std::string ClaimYaml(const std::string& name, const std::map<std::string, std::string>& labels) {
  return absl::StrCat("apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: ", name, "\n",
                      LabelsYaml(labels),
                      "spec:\n  storageClassName: fast\n  accessModes: [ReadWriteOnce]\n"
                      "  resources:\n    requests:\n      storage: 1Gi\n");
}

std::string SnapshotYaml(const std::map<std::string, std::string>& labels) {
  return absl::StrCat("apiVersion: snapshot.storage.k8s.io/v1\nkind: VolumeSnapshot\nmetadata:\n  name: snap\n",
                      LabelsYaml(labels),
                      "spec:\n  volumeSnapshotClassName: snapclass\n  source:\n    persistentVolumeClaimName: data\n");
}

}  // namespace
}  // namespace berth
