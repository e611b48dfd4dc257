// A test fixture running `berth up` as a process (root: loop devices,
// mounts) on one node (node_, "testnode" unless a test sets it before
// StartUp) in a MountSandbox, driven with the berth
// CLI and the API socket; everything it started is stopped and everything
// mounted below the sandbox unmounted, also when a test fails.
// Needs BERTH_BINARY and BERTH_CSI_BINARY defined.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/fs.h"
#include "common/testing/eventually.h"
#include "common/testing/subprocess.h"
#include "driver/testing/sandbox.h"
#include "gtest/gtest.h"
#include "http/api_client.h"
#include "nlohmann/json.hpp"

namespace berth::testing {

// The file's bytes, "" when it cannot be read. With read(2), not a stream:
// libstdc++'s filebuf throws when a read fails, as reading
// /proc/<pid>/cmdline does (ESRCH) when the process exits meanwhile.
inline std::string ReadWholeFile(const std::string& path) {
  absl::StatusOr<std::string> text = ::berth::ReadFile(path);
  return text.ok() ? *std::move(text) : std::string();
}

// How often `needle` occurs in `haystack`.
inline size_t CountOf(const std::string& haystack, const std::string& needle) {
  size_t n = 0;
  for (size_t at = haystack.find(needle); at != std::string::npos; at = haystack.find(needle, at + 1)) ++n;
  return n;
}

class BerthUpFixture : public ::testing::Test {
 protected:
  using json = nlohmann::json;

  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "berth up needs root (loop devices, mounts)";
    data_ = sandbox_.Join("data");
  }
  void TearDown() override {
    StopUp(SIGKILL);
    // Node agents and berth-csi get SIGTERM when berth up dies; let them go
    // before the sandbox unmounts what is left.
    std::error_code ec;
    for (const auto& node : std::filesystem::directory_iterator(data_ + "/nodes", ec)) {
      for (const char* file : {"agent.pid", "berth-csi.pid"}) {
        std::ifstream in(node.path() / file);
        pid_t pid = -1;
        if (in >> pid && pid > 1) {
          if (!Eventually([&] { return ::kill(pid, 0) != 0; }, absl::Seconds(15))) ::kill(pid, SIGKILL);
        }
      }
      if (HasFailure()) {
        std::ifstream log(node.path() / "agent.log");
        std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
        if (text.size() > 6000) text = text.substr(text.size() - 6000);
        std::cout << "---- " << node.path().filename().string() << "/agent.log (tail)\n" << text << "----\n";
      }
    }
  }

  void StartUp(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv = {BERTH_BINARY,
                                     "--data-dir",
                                     data_,
                                     "up",
                                     "--pool-size",
                                     pool_size_,
                                     "--api-address",
                                     api_address_,
                                     "--csi-binary",
                                     BERTH_CSI_BINARY,
                                     "--node-name",
                                     node_,
                                     "--volume-stats-period",
                                     "1"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    up_ = std::make_unique<Subprocess>(argv, sandbox_.Join("up-" + std::to_string(++starts_) + ".log"));
    ASSERT_TRUE(Eventually(
        [&] { return up_->Output().find("berth is up") != std::string::npos || up_->Wait(absl::ZeroDuration()); },
        absl::Seconds(120)))
        << up_->Output();
    ASSERT_FALSE(up_->Wait(absl::ZeroDuration()).has_value()) << up_->Output();
    client_ = http::ApiClient::ForUnixSocket(data_ + "/api.sock");
  }
  std::optional<int> StopUp(int sig) {
    if (!up_) return std::nullopt;
    up_->Signal(sig);
    auto rc = up_->Wait(absl::Seconds(60));
    up_.reset();
    return rc;
  }
  // The berth CLI on this data directory: its exit code (-1: still running
  // after `timeout`, then killed) and what it printed (stdout and stderr).
  std::pair<int, std::string> RunBerth(const std::vector<std::string>& args,
                                       absl::Duration timeout = absl::Seconds(180)) {
    std::vector<std::string> argv = {BERTH_BINARY, "--data-dir", data_};
    argv.insert(argv.end(), args.begin(), args.end());
    Subprocess cli(argv, sandbox_.Join("cli.log"));
    auto rc = cli.Wait(timeout);
    return {rc.value_or(-1), cli.Output()};
  }
  // The same; fails the test unless it exits 0.
  void Berth(const std::vector<std::string>& args) {
    auto [rc, out] = RunBerth(args);
    ASSERT_EQ(rc, 0) << out;
  }
  std::string WriteFile(const std::string& name, const std::string& content) {
    const std::string path = sandbox_.Join(name);
    std::ofstream(path) << content;
    return path;
  }

  json Get(const std::string& path) {
    auto r = client_->Call("GET", path);
    if (!r.ok() || r->code != 200) return json();
    return json::parse(r->body, nullptr, false);
  }
  json Pod(const std::string& name) { return Get("/api/v1/namespaces/default/pods/" + name); }
  json Claim(const std::string& name) { return Get("/api/v1/namespaces/default/persistentvolumeclaims/" + name); }
  bool Running(const std::string& pod) {
    return Pod(pod).value("status", json::object()).value("phase", "") == "Running";
  }
  bool Mounted(const std::string& path) {
    for (const auto& m : sandbox_.Mounts()) {
      if (m == path) return true;
    }
    return false;
  }
  // Mounts made for volumes (kubelet paths), not the pools'.
  std::vector<std::string> VolumeMounts() {
    std::vector<std::string> out;
    for (const auto& m : sandbox_.Mounts()) {
      if (m.find("/kubelet/") != std::string::npos) out.push_back(m);
    }
    return out;
  }
  // Where the node agent publishes the claim's volume for the pod.
  std::string TargetOf(const std::string& pod, const std::string& claim) {
    const json p = Pod(pod), c = Claim(claim);
    return data_ + "/nodes/" + node_ + "/kubelet/pods/" + p["metadata"]["uid"].get<std::string>() +
           "/volumes/kubernetes.io~csi/" + c["spec"]["volumeName"].get<std::string>() + "/mount";
  }
  // Waits until the node's CSINode lists `driver`.
  void WaitForDriverRegistered(const std::string& driver) {
    ASSERT_TRUE(Eventually(
        [&] {
          const json csinode = Get("/apis/storage.k8s.io/v1/csinodes/" + node_);
          if (csinode.is_null()) return false;
          for (const auto& d : csinode["spec"]["drivers"]) {
            if (d.value("name", "") == driver) return true;
          }
          return false;
        },
        absl::Seconds(60)));
  }

  // The HTTPS port of <data>/kubeconfig (with api_address_ set), 0 if none.
  int ApiPort() {
    const std::string text = ReadWholeFile(data_ + "/kubeconfig");
    const size_t at = text.find("server: https://127.0.0.1:");
    return at == std::string::npos ? 0 : std::atoi(text.c_str() + at + 26);
  }

  MountSandbox sandbox_;
  std::string data_;
  std::string node_ = "testnode";  // --node-name
  // --api-address: "" serves the API socket only (no token, TLS key or
  // kubeconfig); "127.0.0.1:0" adds HTTPS for kubectl on a free port.
  std::string api_address_;
  std::unique_ptr<Subprocess> up_;
  std::unique_ptr<http::ApiClient> client_;
  int starts_ = 0;
  std::string pool_size_ = "1Gi";  // set before StartUp()
};

}  // namespace berth::testing
