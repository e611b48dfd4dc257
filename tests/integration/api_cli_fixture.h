// The fixture of the API tests that run `berth serve` as a process
// (api_cli_test.cc: the berth CLI, curl and the unix socket;
// kubectl_cli_test.cc: kubectl), and their helpers (api_cli_helpers.cc).
//
// berth comes from BERTH_BINARY. kubectl comes from KUBECTL_BINARY, else
// $BERTH_KUBECTL, /usr/local/lib/berth/kubernetes-client/usr/bin/kubectl or
// /usr/bin/kubectl; without one the kubectl tests skip (and say why). No root
// is needed: the API socket admits its own user.
#pragma once

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
#include "commands.h"
#include "common/testing/eventually.h"
#include "common/testing/subprocess.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

#ifndef KUBECTL_BINARY
#define KUBECTL_BINARY ""
#endif

namespace berth::api_cli_testing {

namespace fs = std::filesystem;
using ::nlohmann::json;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::Not;
using ::testing::StartsWith;

// ---- Helpers (api_cli_helpers.cc) ----

// How a finished command ended and what it printed; RunCommand runs one.
using testing::CommandResult;
using testing::Eventually;
using testing::RunCommand;

// A finished HTTP request made with curl.
struct HttpResult {
  int status = 0;
  std::string body;
};

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
// Server-side TCP connections on local `port` that the server has not closed
// yet (ESTABLISHED or CLOSE_WAIT in /proc/net/tcp; 0 if that is unreadable).
int OpenServerConnections(int port);
// Manifests.
std::string StorageClassYaml(const std::map<std::string, std::string>& labels = {});
std::string ClaimYaml(const std::string& name, const std::map<std::string, std::string>& labels = {});
std::string SnapshotYaml(const std::map<std::string, std::string>& labels = {});

inline constexpr char kDebianKubectl[] = "/usr/local/lib/berth/kubernetes-client/usr/bin/kubectl";

// ---- Fixture ----

class ApiCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(Home());
    server_ = std::make_unique<testing::Subprocess>(
        std::vector<std::string>{BERTH_BINARY, "--data-dir", DataDir(), "serve", "--api-address", "127.0.0.1:0"},
        dir_.Join("server.log"));
    // The kubeconfig is written (atomically) once both listeners are up.
    const bool up = Eventually([&] { return (fs::exists(KubeconfigPath()) && fs::exists(SocketPath())) || Exited(); },
                               absl::Seconds(30));
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
    return RunCommand(dir_.path(), argv, env);
  }

  // Calls `touch(1)`, `touch(2)`, ... until `seen(tick)` holds for the last
  // tick (a watch reported the change): from then on the watch is live.
  bool TouchUntilSeen(const std::function<void(int)>& touch, const std::function<bool(int)>& seen) {
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    for (int tick = 1; absl::Now() < deadline; ++tick) {
      touch(tick);
      if (Eventually([&] { return seen(tick); }, absl::Seconds(1))) return true;
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
      const CommandResult v = RunCommand(dir_.path(), {path, "version", "--client"}, {"HOME=" + Home()});
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

}  // namespace berth::api_cli_testing
