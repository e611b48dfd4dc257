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
//   berth-csi) over the run, the peak (VmHWM) and final RSS of berth up
//   (after the lists below), its RSS at rest (once it has not fallen for
//   3 s, at most 20 s later: idle threads give memory back 1 s and 6 s
//   after their last work, the store compacts what it keeps 1 s after the
//   last write), and the size of the store (state.db + its WAL), and the hit rate of
//   the store's object cache over the run (berth up's /metrics).
//   waits/claim
//              berth up's voluntary context switches (its threads' waits,
//              each a wake-up) from the start of apply to all Bound, per
//              claim (its /metrics; the node agent and berth-csi are other
//              processes): a cost this noisy machine counts steadily.
//   writes/claim, writes/commit
//              berth up's store over the same span: its writes (every
//              object: claims, volumes, events, leases) per claim, and
//              per group commit (one transaction and one fsync each; its
//              /metrics).
//
//   list first byte, list s
//              a GET of every claim (no limit, as kubectl --chunk-size=0
//              asks) once all are Bound: when its first byte came and when
//              its last did, over the API socket.
//   berth get 1st B s, berth get s
//              `berth get pvc -A` (pages of 500, each printed as it
//              arrives) over the data dir's socket: first byte, exit
//   kubectl 1st B s, kubectl s
//              `kubectl get pvc -A` (its default pages of 500) over the
//              kubeconfig's TLS address: its first byte of output and its
//              end (- without kubectl: $BERTH_KUBECTL, the Debian
//              kubernetes-client berth installs, or /usr/bin/kubectl).
//   kubectl CPU s
//              that kubectl's user + system CPU: how much of its time is
//              its own (it prints only after its last page)
//   serve apply/s
//              N / the wall time of the same `berth apply` against
//              `berth serve` (store and API server, no controllers),
//              started after berth up is stopped: the API server's own
//              rate from one client process
//
// Then, per N, berth up's CPU seconds from the start of apply to all Bound
// by thread name (the store's writer, each controller's workers, each
// informer, ...), the most first: what changed where, steadier between runs
// on a shared machine than the totals.
//
//   build/release/bench/stack_bench [--plot FILE.svg] [N ...]
//                                          (default: 1000 10000; root)
//
// --plot writes FILE.dat (one line per N) and, with gnuplot installed,
// FILE.svg: seconds to all Bound and berth up's peak and final RSS against
// N (docs/performance.md shows it).
//
// The fake driver (controllers/testing/fake_csi.h plus a Node service that
// only answers NodeGetInfo) runs in this process on a real unix socket;
// berth up, its children and the temp directory are removed at the end,
// also when a step fails, and when the bench is stopped by SIGINT, SIGTERM
// or SIGHUP (Ctrl-C, `timeout`).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench_util.h"
#include "common/strings.h"
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

// A /proc stat file (a process's or a thread's): its name, parent pid and
// CPU ticks (utime + stime). False when it cannot be read (the task ended).
struct ProcStat {
  std::string name;
  pid_t ppid = 0;
  long ticks = 0;
};
bool ReadProcStat(const fs::path& file, ProcStat* out) {
  std::ifstream in(file);
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t open = stat.find('('), close = stat.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open) return false;
  std::istringstream fields(stat.substr(close + 2));
  std::string state;
  long ppid = 0, skip = 0, utime = 0, stime = 0;
  fields >> state >> ppid;
  for (int i = 0; i < 9; ++i) fields >> skip;
  fields >> utime >> stime;
  *out = {stat.substr(open + 1, close - open - 1), static_cast<pid_t>(ppid), utime + stime};
  return true;
}

// CPU ticks of each of `pid`'s live threads, summed by the thread's name
// (berth names its threads by role: `store writer`, `pv binder: clai…`,
// `i:persistentvol…`). A thread that ended is not counted.
std::map<std::string, long> ThreadTicksByName(pid_t pid) {
  std::map<std::string, long> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path("/proc") / std::to_string(pid) / "task", ec)) {
    ProcStat st;
    if (ReadProcStat(e.path() / "stat", &st)) out[st.name] += st.ticks;
  }
  return out;
}

// This process's user + system CPU: the fake driver and the watch that
// counts claims Bound share the machine with berth up.
double SelfCpuSeconds() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

// CPU seconds (utime + stime) of `root` and its descendants now.
double TreeCpuSeconds(pid_t root) {
  std::map<pid_t, pid_t> parent;
  std::map<pid_t, long> ticks;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const pid_t pid = std::atoi(e.path().filename().c_str());
    if (pid <= 0) continue;
    ProcStat st;
    if (!ReadProcStat(e.path() / "stat", &st)) continue;
    parent[pid] = st.ppid;
    ticks[pid] = st.ticks;
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

// The signals that stop the bench. main blocks them in every thread and
// one thread waits for them (CleanUpOnSignal); a child unblocks them before
// it runs its program.
sigset_t StopSignals() {
  sigset_t set;
  ::sigemptyset(&set);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaddset(&set, sig);
  return set;
}

void UnblockSignals() {
  const sigset_t set = StopSignals();
  ::pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
}

// SIGTERM, then SIGKILL after 30 s; reaps it.
void Stop(pid_t pid) {
  ::kill(pid, SIGTERM);
  int status = 0;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (absl::Now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

// The run in progress: what a stop signal must remove (berth up or serve,
// the pool's mounts and loop devices, the temp directory).
struct Running {
  std::mutex mu;
  std::string dir;  // "" between runs
  pid_t up = -1;
};
Running running;

// Waits for a stop signal, removes the run in progress and exits 128 + the
// signal, as a shell reports a process it killed.
void CleanUpOnSignal() {
  const sigset_t set = StopSignals();
  int sig = 0;
  if (::sigwait(&set, &sig) != 0) return;
  std::fprintf(stderr, "stack_bench: signal %d, cleaning up\n", sig);
  std::lock_guard<std::mutex> lock(running.mu);
  if (running.up > 0) Stop(running.up);
  if (!running.dir.empty()) berth::bench::Cleanup(running.dir);
  std::_Exit(128 + sig);
}

pid_t Spawn(const std::vector<std::string>& argv, const std::string& log) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    UnblockSignals();
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
  long peak_kib = 0, final_kib = 0, rest_kib = 0, store_bytes = 0;
  double list_first_ms = 0, list_s = 0;
  double berth_get_first_s = 0, berth_get_s = 0;
  double kubectl_first_s = -1, kubectl_s = -1;  // -1: no kubectl
  double kubectl_cpu_s = -1;                    // user + system CPU of that kubectl
  double serve_apply_s = 0;                     // the same apply against `berth serve` alone
  double cache_hit_pct = -1;                    // of the store's object cache, over the whole run
  double waits_per_claim = -1;                  // berth up's voluntary context switches per claim
  double bench_cpu_s = 0;                       // this process (fake driver, watch), apply to all Bound
  double writes_per_claim = -1;                 // berth up's store: writes per claim, apply to all Bound
  double writes_per_commit = -1;                // berth up's store: writes per group commit, apply to all Bound
  std::vector<std::pair<double, std::string>> thread_cpu_s;  // berth up's CPU by thread name, apply to all Bound
};

// A counter's value in a Prometheus text exposition (-1: absent).
double MetricValue(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name + " ", 0) == 0) return std::atof(line.c_str() + name.size() + 1);
  }
  return -1;
}

// Runs `argv` (`kubectl get pvc -A --no-headers` with KUBECONFIG=
// `kubeconfig`, or `berth get ...`): seconds to its first byte of output and
// to its exit; false if it failed or printed fewer than `n` lines.
bool TimeList(const std::vector<std::string>& argv, const std::string& kubeconfig, int n, double* first_s,
              double* total_s, double* cpu_s = nullptr) {
  int fds[2];
  if (::pipe(fds) != 0) return false;
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const absl::Time start = absl::Now();
  const pid_t pid = ::fork();
  if (pid == 0) {
    UnblockSignals();
    ::dup2(fds[1], 1);
    ::close(fds[0]);
    ::close(fds[1]);
    if (!kubeconfig.empty()) ::setenv("KUBECONFIG", kubeconfig.c_str(), 1);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  char buf[1 << 16];
  long lines = 0;
  bool first = true;
  for (ssize_t r; (r = ::read(fds[0], buf, sizeof(buf))) > 0;) {
    if (first) *first_s = absl::ToDoubleSeconds(absl::Now() - start);
    first = false;
    for (ssize_t i = 0; i < r; ++i) lines += buf[i] == '\n';
  }
  ::close(fds[0]);
  int status = 0;
  rusage usage{};
  ::wait4(pid, &status, 0, &usage);
  *total_s = absl::ToDoubleSeconds(absl::Now() - start);
  if (cpu_s != nullptr) {
    *cpu_s = static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
             static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 && lines >= n;
}

// GET `target` over the unix socket `path` with a plain HTTP/1.1 request:
// milliseconds to the response's first byte and seconds to its end (the
// server closes the connection: "Connection: close").
bool TimeGet(const std::string& path, const std::string& target, double* first_ms, double* total_s) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof(a.sun_path), "%s", path.c_str());
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    if (fd >= 0) ::close(fd);
    return false;
  }
  const std::string req = "GET " + target + " HTTP/1.1\r\nHost: berth\r\nConnection: close\r\n\r\n";
  const absl::Time start = absl::Now();
  bool ok = ::write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size());
  char buf[1 << 16];
  bool first = true;
  while (ok) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    if (first) {
      *first_ms = absl::ToDoubleMilliseconds(absl::Now() - start);
      ok = std::string_view(buf, static_cast<size_t>(n)).starts_with("HTTP/1.1 200");
      first = false;
    }
  }
  *total_s = absl::ToDoubleSeconds(absl::Now() - start);
  ::close(fd);
  return ok && !first;
}

// One run with `n` claims in a fresh berth up.
Result Run(int n) {
  Result res;
  char tmpl[] = "/tmp/berth-stack-bench-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  const std::string data = dir + "/data", socket = dir + "/csi.sock";
  // Removes berth up (or serve) and the directory at the end of the run; a
  // stop signal meanwhile removes them through `running`.
  struct Guard {
    explicit Guard(const std::string& d) {
      std::lock_guard<std::mutex> lock(running.mu);
      running.dir = d;
    }
    void SetUp(pid_t pid) {
      std::lock_guard<std::mutex> lock(running.mu);
      running.up = pid;
    }
    // berth up, no longer running: stopped and forgotten.
    void StopUp() {
      std::lock_guard<std::mutex> lock(running.mu);
      if (running.up > 0) Stop(std::exchange(running.up, -1));
    }
    pid_t up() {
      std::lock_guard<std::mutex> lock(running.mu);
      return running.up;
    }
    ~Guard() {
      std::lock_guard<std::mutex> lock(running.mu);
      if (running.up > 0) Stop(std::exchange(running.up, -1));
      berth::bench::Cleanup(std::exchange(running.dir, ""));
    }
  } guard(dir);

  berth::controllers::testing::FakeCsiDriver driver(kDriver);
  FakeNode node;
  auto server = berth::csi::CsiServer::Start({.endpoint = socket, .socket_mode = 0600},
                                             {static_cast<::csi::v1::Identity::Service*>(&driver),
                                              static_cast<::csi::v1::Controller::Service*>(&driver), &node});
  if (!server.ok()) {
    std::fprintf(stderr, "fake driver: %s\n", std::string(server.status().message()).c_str());
    return res;
  }

  guard.SetUp(Spawn(
      {BERTH_BINARY, "--data-dir", data, "up", "--runtime", "none", "--pool-size", "512Mi", "--api-address",
       "127.0.0.1:" + std::to_string(berth::bench::FreePort(17443)), "--csi-binary", BERTH_CSI_BINARY, "--node-name",
       kNode, "--log-level", "warn", "--external-driver", std::string(kDriver) + "=unix://" + socket},
      dir + "/up.log"));
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
  // `berth apply -f file` against the API of data dir `to`; its CPU seconds
  // into *cpu_s.
  double ignored_cpu_s = 0;
  auto apply = [&](const std::string& file, const std::string& to, double* cpu_s) {
    const pid_t pid = Spawn({berth, "--data-dir", to, "apply", "-f", file}, file + ".log");
    int status = 0;
    rusage usage{};
    ::wait4(pid, &status, 0, &usage);
    *cpu_s = static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
             static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
  };
  {
    std::ofstream sc(dir + "/class.yaml");
    sc << "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: instant}\nprovisioner: " << kDriver
       << "\nvolumeBindingMode: Immediate\nreclaimPolicy: Delete\n";
  }
  if (!apply(dir + "/class.yaml", data, &ignored_cpu_s)) {
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
  // From berth up's /metrics: its own threads' waits (each a wake-up;
  // steadier than time on a shared machine, and a third of the CPU) and its
  // store's group commits (how many writes share one fsync).
  struct Counters {
    double waits = -1, commits = -1, writes = -1;
  };
  const auto counters = [&] {
    Counters c;
    auto m = client->Call("GET", "/metrics");
    if (!m.ok() || m->code != 200) return c;
    c.waits = MetricValue(m->body, "berth_process_context_switches_total{kind=\"voluntary\"}");
    c.commits = MetricValue(m->body, "berth_store_commits_total");
    c.writes = MetricValue(m->body, "berth_store_committed_writes_total");
    return c;
  };
  const Counters before = counters();
  const double up_cpu_before = TreeCpuSeconds(guard.up());
  const double bench_cpu_before = SelfCpuSeconds();
  const std::map<std::string, long> threads_before = ThreadTicksByName(guard.up());
  const absl::Time start = absl::Now();
  const bool applied = apply(claims, data, &res.apply_cpu_s);
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
  res.up_cpu_s = TreeCpuSeconds(guard.up()) - up_cpu_before;
  res.bench_cpu_s = SelfCpuSeconds() - bench_cpu_before;
  const double tick = static_cast<double>(::sysconf(_SC_CLK_TCK));
  for (const auto& [name, ticks] : ThreadTicksByName(guard.up())) {
    auto was = threads_before.find(name);
    const long spent = ticks - (was == threads_before.end() ? 0 : was->second);
    if (spent > 0) res.thread_cpu_s.emplace_back(static_cast<double>(spent) / tick, name);
  }
  std::sort(res.thread_cpu_s.rbegin(), res.thread_cpu_s.rend());
  if (const Counters after = counters(); after.waits >= 0 && before.waits >= 0) {
    res.waits_per_claim = (after.waits - before.waits) / n;
    if (after.commits > before.commits && before.writes >= 0) {
      res.writes_per_claim = (after.writes - before.writes) / n;
      res.writes_per_commit = (after.writes - before.writes) / (after.commits - before.commits);
    }
  }
  if (auto m = client->Call("GET", "/metrics"); m.ok() && m->code == 200) {
    const double hits = MetricValue(m->body, "berth_store_cache_hits_total");
    const double misses = MetricValue(m->body, "berth_store_cache_misses_total");
    if (hits >= 0 && misses >= 0 && hits + misses > 0) res.cache_hit_pct = 100 * hits / (hits + misses);
  }
  if (!TimeGet(data + "/api.sock", "/api/v1/persistentvolumeclaims", &res.list_first_ms, &res.list_s)) {
    std::fprintf(stderr, "the list of every claim failed\n");
    return res;
  }
  if (!TimeList({BERTH_BINARY, "get", "pvc", "-A", "--no-headers", "--data-dir", data}, "", n, &res.berth_get_first_s,
                &res.berth_get_s)) {
    std::fprintf(stderr, "berth get pvc -A failed or listed fewer than %d claims\n", n);
    return res;
  }
  if (const std::string kubectl = berth::bench::FindKubectl(); !kubectl.empty()) {
    if (!TimeList({kubectl, "get", "pvc", "-A", "--no-headers"}, data + "/kubeconfig", n, &res.kubectl_first_s,
                  &res.kubectl_s, &res.kubectl_cpu_s)) {
      std::fprintf(stderr, "kubectl get pvc -A failed or listed fewer than %d claims\n", n);
      return res;
    }
  }
  res.peak_kib = StatusKiB(guard.up(), "VmHWM:");
  res.final_kib = StatusKiB(guard.up(), "VmRSS:");
  {
    res.rest_kib = res.final_kib;
    const absl::Time end = absl::Now() + absl::Seconds(20);
    absl::Time fell = absl::Now();
    while (absl::Now() < end && absl::Now() - fell < absl::Seconds(3)) {
      absl::SleepFor(absl::Milliseconds(500));
      const long now = StatusKiB(guard.up(), "VmRSS:");
      if (now < res.rest_kib) {
        res.rest_kib = now;
        fell = absl::Now();
      }
    }
  }
  for (const char* f : {"/state.db", "/state.db-wal"}) {
    std::error_code ec;
    const auto size = fs::file_size(data + f, ec);
    if (!ec) res.store_bytes += static_cast<long>(size);
  }
  // berth up's work is measured; now the same apply against the API server
  // alone (`berth serve`: store and API, no controllers taking the CPU),
  // berth up stopped first so the two do not share the machine.
  guard.StopUp();
  const std::string serve_data = dir + "/serve";
  guard.SetUp(Spawn({BERTH_BINARY, "--data-dir", serve_data, "serve", "--api-address", "", "--log-level", "warn"},
                    dir + "/serve.log"));
  auto serve_client = berth::http::ApiClient::ForUnixSocket(serve_data + "/api.sock");
  for (const absl::Time begin = absl::Now();;) {
    auto r = serve_client->Call("GET", "/api/v1/namespaces/default");
    if (r.ok() && r->code == 200) break;
    if (absl::Now() - begin > absl::Seconds(30)) {
      std::fprintf(stderr, "berth serve did not answer; see %s/serve.log\n", dir.c_str());
      return res;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  const absl::Time serve_start = absl::Now();
  if (!apply(claims, serve_data, &ignored_cpu_s)) {
    std::fprintf(stderr, "berth apply against berth serve failed; see %s.log\n", claims.c_str());
    return res;
  }
  res.serve_apply_s = absl::ToDoubleSeconds(absl::Now() - serve_start);
  res.ok = true;
  return res;
}

// FILE.svg -> FILE.dat with `dat`, and FILE.svg drawn by gnuplot (if
// installed): seconds to all Bound on the left axis, RSS on the right, both
// against N on log scales.
void WritePlot(const std::string& svg, const std::string& dat) {
  const std::string base = svg.size() > 4 && svg.ends_with(".svg") ? svg.substr(0, svg.size() - 4) : svg;
  {
    std::ofstream out(base + ".dat");
    out << dat;
  }
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    std::fprintf(stderr, "no gnuplot (apt-get install gnuplot-nox): wrote %s.dat only\n", base.c_str());
    return;
  }
  const std::string script = base + ".gp";
  {
    std::ofstream gp(script);
    gp << "set terminal svg size 720,420 dynamic font 'sans,12'\n"
       << "set output '" << base << ".svg'\n"
       << "set title 'stack\\_bench: N claims applied, all Bound (berth up, instant driver)'\n"
       << "set logscale xyy2\nset xlabel 'claims (N)'\nset key left top\nset grid\n"
       << "set ylabel 'seconds to all Bound'\nset y2label 'berth up RSS (MiB)'\nset ytics nomirror\n"
       << "set y2tics\n"
       << "plot '" << base << ".dat' using 1:2 with linespoints lw 2 title 'seconds to all Bound', "
       << "'' using 1:3 axes x1y2 with linespoints lw 2 title 'peak RSS MiB', "
       << "'' using 1:4 axes x1y2 with linespoints dt 2 title 'final RSS MiB'\n";
  }
  if (std::system(("gnuplot '" + script + "'").c_str()) != 0) {
    std::fprintf(stderr, "gnuplot failed on %s\n", script.c_str());
  }
  std::remove(script.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  if (::geteuid() != 0) {
    std::fprintf(stderr, "stack_bench needs root (berth up's pool, the API socket)\n");
    return 2;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  // Blocked before any thread starts (the fake driver's gRPC threads inherit
  // the mask), so only CleanUpOnSignal takes them.
  const sigset_t stop = StopSignals();
  ::pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  std::thread(CleanUpOnSignal).detach();
  spdlog::set_level(spdlog::level::warn);  // the fake driver's per-call log lines
  std::vector<int> sizes;
  std::string plot;
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--plot" && i + 1 < argc) {
      plot = argv[++i];
    } else {
      sizes.push_back(std::atoi(argv[i]));
    }
  }
  if (sizes.empty()) sizes = {1000, 10000};
  std::printf(
      "%8s %10s %9s %10s %9s %12s %12s %9s %9s %9s %10s %11s %11s %12s %13s %14s %7s %18s %12s %16s %10s %14s %15s\n",
      "claims", "bound s", "claims/s", "apply s", "apply/s", "apply CPU s", "up CPU s", "peak MiB", "final MiB",
      "rest MiB", "store MiB", "cache hit %", "waits/claim", "writes/claim", "writes/commit", "list 1st B ms", "list s",
      "berth get 1st B s", "berth get s", "kubectl 1st B s", "kubectl s", "kubectl CPU s", "serve apply/s");
  int failures = 0;
  std::string dat = "# claims bound_s peak_MiB final_MiB claims_per_s rest_MiB\n";
  std::string threads;
  for (int n : sizes) {
    Result r = Run(n);
    if (!r.ok) {
      std::printf("%8d failed\n", n);
      ++failures;
      continue;
    }
    char kubectl[64] = "               -          -             -";
    if (r.kubectl_s >= 0) {
      std::snprintf(kubectl, sizeof(kubectl), "%16.2f %10.2f %14.2f", r.kubectl_first_s, r.kubectl_s, r.kubectl_cpu_s);
    }
    std::printf(
        "%8d %10.2f %9.0f %10.2f %9.0f %12.2f %12.2f %9.1f %9.1f %9.1f %10.1f %11.1f %11.1f %12.2f %13.1f %14.1f %7.2f "
        "%18.3f "
        "%12.2f "
        "%s %15.0f\n",
        n, r.bound_s, n / r.bound_s, r.apply_s, n / r.apply_s, r.apply_cpu_s, r.up_cpu_s, r.peak_kib / 1024.0,
        r.final_kib / 1024.0, r.rest_kib / 1024.0, static_cast<double>(r.store_bytes) / (1 << 20), r.cache_hit_pct,
        r.waits_per_claim, r.writes_per_claim, r.writes_per_commit, r.list_first_ms, r.list_s, r.berth_get_first_s,
        r.berth_get_s, kubectl, n / r.serve_apply_s);
    threads += absl::StrFormat("  %d (the bench itself: %.2f):", n, r.bench_cpu_s);
    for (size_t i = 0; i < r.thread_cpu_s.size() && i < 12; ++i) {
      threads += absl::StrFormat(" %s %.2f%s", r.thread_cpu_s[i].second, r.thread_cpu_s[i].first,
                                 i + 1 < std::min<size_t>(r.thread_cpu_s.size(), 12) ? "," : "");
    }
    threads += "\n";
    char line[160];
    std::snprintf(line, sizeof(line), "%d %.2f %.1f %.1f %.0f %.1f\n", n, r.bound_s, r.peak_kib / 1024.0,
                  r.final_kib / 1024.0, n / r.bound_s, r.rest_kib / 1024.0);
    dat += line;
  }
  // Where berth up's CPU went, by thread name: steadier to compare than the
  // totals on a shared machine (the threads not counted above ended).
  std::printf("berth up's CPU s by thread name, apply to all Bound (the most first):\n%s", threads.c_str());
  if (!plot.empty()) WritePlot(plot, dat);
  return failures == 0 ? 0 : 1;
}
