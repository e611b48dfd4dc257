// Round trip of Identity.Probe over a unix socket: a berth CsiServer with the
// real IdentityService (and the call logger installed) in this process, a
// gRPC client on a connected channel, one call at a time.
//
// Prints p50/p90/p99/max and mean, once with call logging off and once with
// call logging on at info level into a sink that discards (the formatting
// cost without terminal I/O).
//
//   build/release/bench/probe_roundtrip_bench [iterations] [--same-cpu]
//
// --same-cpu pins the process (client and server threads) to CPU 0. On a
// small VM a wake-up across vCPUs costs tens of microseconds, and a unary
// gRPC round trip has at least two of them; comparing both runs separates
// berth's and gRPC's own cost from the machine's scheduling cost.
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include "berth/version.h"
#include "csi/client.h"
#include "csi/server.h"
#include "driver/identity_service.h"
#include "grpcpp/client_context.h"
#include "spdlog/sinks/null_sink.h"
#include "spdlog/spdlog.h"

namespace {

void Run(const char* label, ::csi::v1::Identity::Stub& stub, int iterations) {
  std::vector<double> us;
  us.reserve(iterations);
  for (int i = 0; i < iterations + iterations / 10; ++i) {
    grpc::ClientContext ctx;
    ::csi::v1::ProbeResponse resp;
    const auto start = std::chrono::steady_clock::now();
    grpc::Status st = stub.Probe(&ctx, {}, &resp);
    const auto end = std::chrono::steady_clock::now();
    if (!st.ok()) {
      std::fprintf(stderr, "probe failed: %s\n", st.error_message().c_str());
      std::exit(1);
    }
    if (i >= iterations / 10) {  // the first 10% warm up
      us.push_back(std::chrono::duration<double, std::micro>(end - start).count());
    }
  }
  std::sort(us.begin(), us.end());
  auto pct = [&](double p) { return us[static_cast<size_t>(p * (us.size() - 1))]; };
  const double mean = std::accumulate(us.begin(), us.end(), 0.0) / us.size();
  std::printf("%-28s n=%zu p50=%.1fus p90=%.1fus p99=%.1fus max=%.1fus mean=%.1fus\n", label, us.size(), pct(0.5),
              pct(0.9), pct(0.99), us.back(), mean);
}

}  // namespace

int main(int argc, char** argv) {
  int iterations = 20000;
  bool same_cpu = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--same-cpu") == 0) {
      same_cpu = true;
    } else {
      iterations = std::max(100, std::atoi(argv[i]));
    }
  }
  if (same_cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(0, &set);
    if (::sched_setaffinity(0, sizeof(set), &set) != 0) std::perror("sched_setaffinity");
  }
  std::printf("probe round trip over a unix socket (%s)\n", same_cpu ? "all threads on CPU 0" : "threads on any CPU");
  char tmpl[] = "/tmp/berth-bench-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) return 1;
  const std::string dir = tmpl;
  const std::string endpoint = "unix://" + dir + "/csi.sock";

  auto logger = std::make_shared<spdlog::logger>("bench", std::make_shared<spdlog::sinks::null_sink_mt>());
  spdlog::set_default_logger(logger);

  berth::driver::IdentityService identity("local.csi.berth.io", berth::kVersion, {}, [] { return true; });
  auto server = berth::csi::CsiServer::Start({.endpoint = endpoint}, {&identity});
  if (!server.ok()) {
    std::fprintf(stderr, "%s\n", server.status().ToString().c_str());
    return 1;
  }
  auto channel = berth::csi::ConnectUnix(endpoint, {});
  if (!channel.ok()) return 1;
  auto stub = ::csi::v1::Identity::NewStub(*channel);

  logger->set_level(spdlog::level::off);
  Run("probe (call log off)", *stub, iterations);
  logger->set_level(spdlog::level::info);
  Run("probe (call log to null)", *stub, iterations);

  server->reset();
  std::filesystem::remove_all(dir);
  return 0;
}
