// The whole stack as a user drives it (issue 31): `berth up --runtime none`
// (release build) with an instant fake CSI driver registered through
// --external-driver, an Immediate StorageClass for it, N claims applied with
// `berth apply -f FILE` (the CLI as a process, over the data dir's socket),
// and a watch that counts claims Bound. Prints, per N:
//
//   claims/s   N / (first claim Bound ... last claim Bound, timed from the
//              start of `berth apply`)
//   apply/s    N / the wall time of `berth apply` alone
//   the CPU seconds of berth apply and of berth up (and its node agent,
//   berth-csi) over the run, the peak (VmHWM) and final RSS of berth up,
//   and the size of the store (state.db + its WAL).
//
//   build/release/bench/stack_bench [N ...]     (default: 1000 10000; root)
//
// The fake driver (controllers/testing/fake_csi.h plus a Node service that
// only answers NodeGetInfo) runs in this process on a real unix socket;
// berth up, its children and the temp directory are removed at the end,
// also when a step fails.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "controllers/testing/fake_csi.h"
#include "csi/server.h"
#include "http/api_client.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr char kDriver[] = "fake.csi.berth.io";
constexpr char kNode[] = "bench";

// NodeGetInfo for the node agent's registration; nothing is ever staged.
class FakeNode : public ::csi::v1::Node::Service {
 public:
  grpc::Status NodeGetInfo(grpc::ServerContext*, const ::csi::v1::NodeGetInfoRequest*,
                           ::csi::v1::NodeGetInfoResponse* out) override {
    out->set_node_id(kNode);
    return grpc::Status::OK;
  }
  grpc::Status NodeGetCapabilities(grpc::ServerContext*, const ::csi::v1::NodeGetCapabilitiesRequest*,
                                   ::csi::v1::NodeGetCapabilitiesResponse*) override {
    return grpc::Status::OK;
  }
};

// Fields of /proc/PID/status in KiB ("VmRSS:", "VmHWM:").
long StatusKiB(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) == 0) return std::atol(line.c_str() + field.size());
  }
  return 0;
}

// CPU seconds (utime + stime) of `root` and its descendants now.
double TreeCpuSeconds(pid_t root) {
  std::map<pid_t, pid_t> parent;
  std::map<pid_t, long> ticks;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const pid_t pid = std::atoi(e.path().filename().c_str());
    if (pid <= 0) continue;
    std::ifstream in(e.path() / "stat");
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream fields(stat.substr(close + 2));
    std::string state;
    long ppid = 0, skip = 0, utime = 0, stime = 0;
    fields >> state >> ppid;
    for (int i = 0; i < 9; ++i) fields >> skip;
    fields >> utime >> stime;
    parent[pid] = static_cast<pid_t>(ppid);
    ticks[pid] = utime + stime;
  }
  long total = 0;
  for (const auto& [pid, t] : ticks) {
    for (pid_t p = pid; p > 1; p = parent.count(p) ? parent[p] : 0) {
      if (p == root) {
        total += t;
        break;
      }
    }
  }
  return static_cast<double>(total) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// berth's pool images are loop-mounted by berth-csi: unmount and detach what
// lies below `dir`, then remove it (as up_bench does).
void Cleanup(const std::string& dir) {
  std::string cmd =
      "for i in 1 2 3; do awk -v d='" + dir +
      "' 'index($5, d\"/\")==1 {print length($5), $5}' /proc/self/mountinfo | sort -rn | cut -d' ' -f2- | "
      "xargs -r -n1 umount -l; done; for f in /sys/block/loop*/loop/backing_file; do "
      "case \"$(cat $f 2>/dev/null)\" in '" +
      dir + "'/*) losetup -d /dev/$(basename $(dirname $(dirname $f)));; esac; done; rm -rf '" + dir + "'";
  if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "cleanup of %s incomplete\n", dir.c_str());
}

// A free loopback TCP port (bound, read, closed).
int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  int port = 17443;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  ::close(fd);
  return port;
}

pid_t Spawn(const std::vector<std::string>& argv, const std::string& log) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (!std::freopen(log.c_str(), "w", stdout) || !std::freopen(log.c_str(), "a", stderr)) ::_exit(126);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  return pid;
}

struct Result {
  bool ok = false;
  double apply_s = 0, bound_s = 0, apply_cpu_s = 0, up_cpu_s = 0;
  long peak_kib = 0, final_kib = 0, store_bytes = 0;
};

// One run with `n` claims in a fresh berth up.
Result Run(int n) {
  Result res;
  char tmpl[] = "/tmp/berth-stack-bench-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  const std::string data = dir + "/data", socket = dir + "/csi.sock";
  struct Guard {
    std::string dir;
    pid_t up = -1;
    ~Guard() {
      if (up > 0) {
        ::kill(up, SIGTERM);
        int status = 0;
        const absl::Time deadline = absl::Now() + absl::Seconds(30);
        while (::waitpid(up, &status, WNOHANG) == 0) {
          if (absl::Now() > deadline) {
            ::kill(up, SIGKILL);
            ::waitpid(up, &status, 0);
            break;
          }
          absl::SleepFor(absl::Milliseconds(20));
        }
      }
      Cleanup(dir);
    }
  } guard{dir};

  berth::controllers::testing::FakeCsiDriver driver(kDriver);
  FakeNode node;
  auto server = berth::csi::CsiServer::Start({.endpoint = socket, .socket_mode = 0600},
                                             {static_cast<::csi::v1::Identity::Service*>(&driver),
                                              static_cast<::csi::v1::Controller::Service*>(&driver), &node});
  if (!server.ok()) {
    std::fprintf(stderr, "fake driver: %s\n", std::string(server.status().message()).c_str());
    return res;
  }

  guard.up =
      Spawn({BERTH_BINARY, "--data-dir", data, "up", "--runtime", "none", "--pool-size", "512Mi", "--api-address",
             "127.0.0.1:" + std::to_string(FreePort()), "--csi-binary", BERTH_CSI_BINARY, "--node-name", kNode,
             "--log-level", "warn", "--external-driver", std::string(kDriver) + "=unix://" + socket},
            dir + "/up.log");
  auto client = berth::http::ApiClient::ForUnixSocket(data + "/api.sock");
  // Ready: the fake driver registered on the node.
  for (const absl::Time start = absl::Now();;) {
    auto r = client->Call("GET", std::string("/apis/storage.k8s.io/v1/csinodes/") + kNode);
    if (r.ok() && r->code == 200 && r->body.find(kDriver) != std::string::npos) break;
    if (absl::Now() - start > absl::Seconds(60)) {
      std::fprintf(stderr, "berth up did not register the fake driver; see %s/up.log\n", dir.c_str());
      return res;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  const std::string berth = BERTH_BINARY;
  auto apply = [&](const std::string& file) {
    const pid_t pid = Spawn({berth, "--data-dir", data, "apply", "-f", file}, file + ".log");
    int status = 0;
    rusage usage{};
    ::wait4(pid, &status, 0, &usage);
    res.apply_cpu_s = static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                      static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
  };
  {
    std::ofstream sc(dir + "/class.yaml");
    sc << "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: instant}\nprovisioner: " << kDriver
       << "\nvolumeBindingMode: Immediate\nreclaimPolicy: Delete\n";
  }
  if (!apply(dir + "/class.yaml")) {
    std::fprintf(stderr, "applying the class failed; see %s/class.yaml.log\n", dir.c_str());
    return res;
  }
  const std::string claims = dir + "/claims.yaml";
  {
    std::ofstream out(claims);
    for (int i = 0; i < n; ++i) {
      out << "---\napiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: claim-" << i
          << "\nspec:\n  storageClassName: instant\n  accessModes: [ReadWriteOnce]\n  resources:\n    requests:\n"
             "      storage: 1Gi\n";
    }
  }

  // The watch, from the (empty) list's version: claims seen Bound.
  auto list = client->Call("GET", "/api/v1/namespaces/default/persistentvolumeclaims?limit=1");
  if (!list.ok() || list->code != 200) return res;
  const std::string rv = json::parse(list->body)["metadata"].value("resourceVersion", "");
  auto watcher = berth::http::ApiClient::ForUnixSocket(data + "/api.sock");
  std::atomic<bool> all_bound{false};
  absl::Time last_bound;
  std::thread watch([&] {
    std::set<std::string> bound;
    auto r = watcher->Stream("/api/v1/namespaces/default/persistentvolumeclaims?watch=true&resourceVersion=" + rv,
                             "application/json", [&](const std::string& line) {
                               if (line.find("\"Bound\"") == std::string::npos) return true;
                               json e = json::parse(line, nullptr, false);
                               if (e.is_discarded()) return true;
                               const json& o = e["object"];
                               if (o["status"].value("phase", "") != "Bound") return true;
                               bound.insert(o["metadata"].value("name", ""));
                               if (bound.size() < static_cast<size_t>(n)) return true;
                               last_bound = absl::Now();
                               all_bound = true;
                               return false;
                             });
    if (!r.ok()) std::fprintf(stderr, "watch: %s\n", std::string(r.status().message()).c_str());
  });
  const double up_cpu_before = TreeCpuSeconds(guard.up);
  const absl::Time start = absl::Now();
  const bool applied = apply(claims);
  res.apply_s = absl::ToDoubleSeconds(absl::Now() - start);
  if (!applied) std::fprintf(stderr, "berth apply failed; see %s.log\n", claims.c_str());
  const absl::Duration limit = absl::Seconds(60) + absl::Milliseconds(20) * n;
  while (applied && !all_bound && absl::Now() - start < limit) absl::SleepFor(absl::Milliseconds(10));
  watcher->CancelStream();
  watch.join();
  if (!all_bound) {
    if (applied) std::fprintf(stderr, "not all %d claims Bound within %.0f s\n", n, absl::ToDoubleSeconds(limit));
    return res;
  }
  res.bound_s = absl::ToDoubleSeconds(last_bound - start);
  res.up_cpu_s = TreeCpuSeconds(guard.up) - up_cpu_before;
  res.peak_kib = StatusKiB(guard.up, "VmHWM:");
  res.final_kib = StatusKiB(guard.up, "VmRSS:");
  for (const char* f : {"/state.db", "/state.db-wal"}) {
    std::error_code ec;
    const auto size = fs::file_size(data + f, ec);
    if (!ec) res.store_bytes += static_cast<long>(size);
  }
  res.ok = true;
  return res;
}

}  // namespace

int main(int argc, char** argv) {
  if (::geteuid() != 0) {
    std::fprintf(stderr, "stack_bench needs root (berth up's pool, the API socket)\n");
    return 2;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  spdlog::set_level(spdlog::level::warn);  // the fake driver's per-call log lines
  std::vector<int> sizes;
  for (int i = 1; i < argc; ++i) sizes.push_back(std::atoi(argv[i]));
  if (sizes.empty()) sizes = {1000, 10000};
  std::printf("%8s %10s %9s %10s %9s %12s %12s %9s %9s %10s\n", "claims", "bound s", "claims/s", "apply s", "apply/s",
              "apply CPU s", "up CPU s", "peak MiB", "final MiB", "store MiB");
  int failures = 0;
  for (int n : sizes) {
    Result r = Run(n);
    if (!r.ok) {
      std::printf("%8d failed\n", n);
      ++failures;
      continue;
    }
    std::printf("%8d %10.2f %9.0f %10.2f %9.0f %12.2f %12.2f %9.1f %9.1f %10.1f\n", n, r.bound_s, n / r.bound_s,
                r.apply_s, n / r.apply_s, r.apply_cpu_s, r.up_cpu_s, r.peak_kib / 1024.0, r.final_kib / 1024.0,
                static_cast<double>(r.store_bytes) / (1 << 20));
  }
  return failures == 0 ? 0 : 1;
}
