// berth up on real volumes: N claim + pod pairs (default 100) created at
// once through the API; prints the time until every pod is Running (each
// volume provisioned, attached, formatted, staged and published by
// berth-csi on loop devices) and the RSS of the whole stack at that point
// (berth up + its berth-csi children). Root only. Cleans up after itself.
//
// With `containerd` as third argument the pods run for real (berth's own
// containerd, the toolbox image, `sleep`): Running means the container
// runs. It also prints the cold start (berth up started → ready), the RSS
// of berth up with containerd and of the shims and pods, and the idle RSS
// and CPU of berth up + containerd (its tree: berth-csi too) over 30 s once
// everything runs, by process name, and the CPU of the shims meanwhile;
// then each process's RSS, PSS and anonymous memory (0 pairs: the idle
// footprint of an empty berth up).
//
//   build/release/bench/up_bench [pairs] [nodes] [none|containerd]
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench_util.h"
#include "http/api_client.h"
#include "nlohmann/json.hpp"

namespace {

using nlohmann::json;

// The pids whose command line contains every one of `words`.
std::vector<pid_t> PidsWith(const std::vector<std::string>& words) {
  std::vector<pid_t> out;
  DIR* d = ::opendir("/proc");
  while (dirent* e = d ? ::readdir(d) : nullptr) {
    const pid_t pid = std::atoi(e->d_name);
    if (pid <= 0) continue;
    // read(2), not a stream: libstdc++'s filebuf throws when the process
    // exits between open and read (ESRCH).
    std::string cmd = berth::bench::ReadWhole(std::string("/proc/") + e->d_name + "/cmdline");
    bool all = !cmd.empty();
    for (const auto& w : words) all = all && cmd.find(w) != std::string::npos;
    if (all) out.push_back(pid);
  }
  if (d) ::closedir(d);
  return out;
}

// CPU time (utime + stime, clock ticks) of `root` and each of its
// descendants, by pid.
std::map<pid_t, long> TreeCpuTicks(pid_t root);

// Rss, Pss and Anonymous of `pid` in KiB from /proc/PID/smaps_rollup (Pss
// counts a page shared by n processes — the shared libraries, the berth
// binary of berth up and its node agents — as 1/n: the sum over processes is
// what they take together, where the sum of RSS counts shared pages again
// in each).
struct Memory {
  long rss = 0, pss = 0, anon = 0;
};
Memory ProcessMemory(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/smaps_rollup");
  std::string line;
  Memory m;
  while (std::getline(in, line)) {
    if (line.rfind("Rss:", 0) == 0) m.rss = std::atol(line.c_str() + 4);
    if (line.rfind("Pss:", 0) == 0) m.pss = std::atol(line.c_str() + 4);
    if (line.rfind("Anonymous:", 0) == 0) m.anon = std::atol(line.c_str() + 10);
  }
  return m;
}

// The command name of `pid` (/proc/PID/comm).
std::string Comm(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  std::getline(in, name);
  return name;
}

// RSS in KiB of `root` and all its descendants.
long TreeRssKiB(pid_t root) {
  std::map<pid_t, pid_t> parent;
  std::map<pid_t, long> rss;
  DIR* d = ::opendir("/proc");
  while (dirent* e = d ? ::readdir(d) : nullptr) {
    const pid_t pid = std::atoi(e->d_name);
    if (pid <= 0) continue;
    std::ifstream in(std::string("/proc/") + e->d_name + "/status");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("PPid:", 0) == 0) parent[pid] = std::atoi(line.c_str() + 5);
      if (line.rfind("VmRSS:", 0) == 0) rss[pid] = std::atol(line.c_str() + 6);
    }
  }
  if (d) ::closedir(d);
  long total = 0;
  for (const auto& [pid, kib] : rss) {
    for (pid_t p = pid; p > 1; p = parent.count(p) ? parent[p] : 0) {
      if (p == root) {
        total += kib;
        break;
      }
    }
  }
  return total;
}

std::map<pid_t, long> TreeCpuTicks(pid_t root) {
  std::map<pid_t, pid_t> parent;
  std::map<pid_t, long> ticks;
  DIR* d = ::opendir("/proc");
  while (dirent* e = d ? ::readdir(d) : nullptr) {
    const pid_t pid = std::atoi(e->d_name);
    if (pid <= 0) continue;
    std::ifstream in(std::string("/proc/") + e->d_name + "/stat");
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
  if (d) ::closedir(d);
  std::map<pid_t, long> out;
  for (const auto& [pid, t] : ticks) {
    for (pid_t p = pid; p > 1; p = parent.count(p) ? parent[p] : 0) {
      if (p == root) {
        out[pid] = t;
        break;
      }
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (::geteuid() != 0) {
    std::fprintf(stderr, "up_bench needs root (loop devices, mounts)\n");
    return 2;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const int pairs = argc > 1 ? std::atoi(argv[1]) : 100;
  const int nodes = argc > 2 ? std::atoi(argv[2]) : 1;
  const std::string runtime = argc > 3 ? argv[3] : "none";
  const bool real = runtime == "containerd";
  char tmpl[] = "/tmp/berth-bench-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  const std::string data = dir + "/data";
  pid_t up = ::fork();
  if (up == 0) {
    const std::string log = dir + "/up.log";
    std::freopen(log.c_str(), "w", stdout);
    std::freopen(log.c_str(), "a", stderr);
    const std::string n = std::to_string(nodes);
    ::execl(BERTH_BINARY, BERTH_BINARY, "--data-dir", data.c_str(), "up", "--pool-size", "20Gi", "--api-address", "",
            "--csi-binary", BERTH_CSI_BINARY, "--node-name", "bench", "--nodes", n.c_str(), "--log-level", "warn",
            "--runtime", runtime.c_str(), "--pod-cidr", "10.215.0.0/16", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  auto client = berth::http::ApiClient::ForUnixSocket(data + "/api.sock");
  // Ready: the driver registered on every node.
  const absl::Time start_up = absl::Now();
  for (;;) {
    auto r = client->Call("GET", "/apis/storage.k8s.io/v1/csinodes");
    if (r.ok() && r->code == 200 && json::parse(r->body)["items"].size() == static_cast<size_t>(nodes)) break;
    if (absl::Now() - start_up > absl::Seconds(60)) {
      std::fprintf(stderr, "berth up did not come up; see %s/up.log\n", dir.c_str());
      ::kill(up, SIGKILL);
      return 1;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  std::printf("berth up ready (%d node(s), runtime %s) in %.2f s (cold start)\n", nodes, runtime.c_str(),
              absl::ToDoubleSeconds(absl::Now() - start_up));
  const absl::Time t0 = absl::Now();
  for (int i = 0; i < pairs; ++i) {
    const std::string name = "b" + std::to_string(i);
    json claim = {{"apiVersion", "v1"},
                  {"kind", "PersistentVolumeClaim"},
                  {"metadata", {{"name", name}}},
                  {"spec", {{"accessModes", {"ReadWriteOnce"}}, {"resources", {{"requests", {{"storage", "16Mi"}}}}}}}};
    json pod = {{"apiVersion", "v1"},
                {"kind", "Pod"},
                {"metadata", {{"name", name}}},
                {"spec",
                 {{"containers",
                   {{{"name", "c"},
                     {"image", "berth.local/toolbox:1"},
                     {"command", {"sleep", "1000000"}},
                     {"volumeMounts", {{{"name", "d"}, {"mountPath", "/data"}}}}}}},
                  {"terminationGracePeriodSeconds", 2},
                  {"volumes", {{{"name", "d"}, {"persistentVolumeClaim", {{"claimName", name}}}}}}}}};
    for (const auto& [path, body] : {std::pair{"/api/v1/namespaces/default/persistentvolumeclaims", claim.dump()},
                                     std::pair{"/api/v1/namespaces/default/pods", pod.dump()}}) {
      auto r = client->Call("POST", path, body);
      if (!r.ok() || r->code != 201) {
        std::fprintf(stderr, "POST %s: %s\n", path,
                     r.ok() ? r->body.c_str() : std::string(r.status().message()).c_str());
      }
    }
  }
  int running = 0;
  while (running < pairs && absl::Now() - t0 < absl::Minutes(10)) {
    absl::SleepFor(absl::Milliseconds(100));
    auto r = client->Call("GET", "/api/v1/namespaces/default/pods");
    if (!r.ok() || r->code != 200) {
      std::fprintf(stderr, "listing pods: %s\n",
                   r.ok() ? std::to_string(r->code).c_str() : std::string(r.status().message()).c_str());
      client = berth::http::ApiClient::ForUnixSocket(data + "/api.sock");
      continue;
    }
    running = 0;
    const json list = json::parse(r->body);
    for (const auto& p : list["items"]) running += p.value("status", json::object()).value("phase", "") == "Running";
  }
  const double secs = absl::ToDoubleSeconds(absl::Now() - t0);
  const long rss = TreeRssKiB(up);
  std::printf("%d/%d claim+pod pairs Running in %.2f s (%.1f pairs/s); RSS of the stack %.1f MiB\n", running, pairs,
              secs, running / secs, rss / 1024.0);
  {
    auto r = client->Call("GET", "/api/v1/persistentvolumes");
    const json list = r.ok() ? json::parse(r->body, nullptr, false) : json();
    std::printf("%zu volumes provisioned\n", list.is_object() ? list["items"].size() : size_t{0});
  }
  if (real) {
    long shims = 0;
    for (pid_t shim : PidsWith({"containerd-shim", data})) shims += TreeRssKiB(shim);
    std::printf("RSS of the shims and their pods %.1f MiB (%zu shims)\n", shims / 1024.0,
                PidsWith({"containerd-shim", data}).size());
    // Idle: everything runs, nothing changes.
    absl::SleepFor(absl::Seconds(10));
    const long hz = ::sysconf(_SC_CLK_TCK);
    // Only processes alive through the whole window count (one started
    // meanwhile would bring the CPU time of its whole life), by name.
    const std::map<pid_t, long> before = TreeCpuTicks(up);
    std::map<pid_t, long> shims_before;
    for (pid_t shim : PidsWith({"containerd-shim", data})) shims_before.merge(TreeCpuTicks(shim));
    const absl::Time idle0 = absl::Now();
    absl::SleepFor(absl::Seconds(30));
    const double secs_idle = absl::ToDoubleSeconds(absl::Now() - idle0);
    std::map<std::string, long> by_name;
    long total = 0;
    for (const auto& [pid, t] : TreeCpuTicks(up)) {
      if (!before.count(pid)) continue;
      total += t - before.at(pid);
      by_name[Comm(pid)] += t - before.at(pid);
    }
    long shim_ticks = 0;
    for (pid_t shim : PidsWith({"containerd-shim", data})) {
      for (const auto& [pid, t] : TreeCpuTicks(shim)) shim_ticks += shims_before.count(pid) ? t - shims_before[pid] : 0;
    }
    auto percent = [&](long ticks) { return static_cast<double>(ticks) / hz / secs_idle * 100; };
    std::printf("idle: berth up + containerd %.1f MiB RSS, %.2f %% of a core (", TreeRssKiB(up) / 1024.0,
                percent(total));
    for (const auto& [name, ticks] : by_name) std::printf("%s %.2f %%; ", name.c_str(), percent(ticks));
    std::printf("the shims %.2f %% of a core)\n", percent(shim_ticks));
    // Memory by process: berth up's own (API server, controllers) and its
    // node agents share the name "berth"; the command line tells them apart.
    std::map<std::string, Memory> by_process;
    Memory sum;
    for (const auto& [pid, t] : TreeCpuTicks(up)) {
      std::string name = Comm(pid);
      if (name == "berth") {
        std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline");
        std::string cmd((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        name = cmd.find("node-agent") != std::string::npos ? "node-agent" : "berth-up";
      }
      const Memory m = ProcessMemory(pid);
      by_process[name].rss += m.rss;
      by_process[name].pss += m.pss;
      by_process[name].anon += m.anon;
      sum.rss += m.rss;
      sum.pss += m.pss;
      sum.anon += m.anon;
    }
    std::printf("idle memory (MiB, RSS / PSS / anonymous):");
    for (const auto& [name, m] : by_process) {
      std::printf(" %s %.1f / %.1f / %.1f;", name.c_str(), m.rss / 1024.0, m.pss / 1024.0, m.anon / 1024.0);
    }
    std::printf(" total %.1f / %.1f / %.1f\n", sum.rss / 1024.0, sum.pss / 1024.0, sum.anon / 1024.0);
  }
  // Tear down: delete everything, wait for the volumes to go.
  for (int i = 0; i < pairs; ++i) {
    const std::string name = "b" + std::to_string(i);
    client->Call("DELETE", "/api/v1/namespaces/default/pods/" + name).IgnoreError();
    client->Call("DELETE", "/api/v1/namespaces/default/persistentvolumeclaims/" + name).IgnoreError();
  }
  const absl::Time t1 = absl::Now();
  for (;;) {
    auto r = client->Call("GET", "/api/v1/persistentvolumes");
    if (r.ok() && r->code == 200 && json::parse(r->body)["items"].empty()) break;
    if (absl::Now() - t1 > absl::Minutes(5)) break;
    absl::SleepFor(absl::Milliseconds(200));
  }
  std::printf("all deleted in %.2f s\n", absl::ToDoubleSeconds(absl::Now() - t1));
  ::kill(up, SIGTERM);
  int status = 0;
  ::waitpid(up, &status, 0);
  if (real) {
    // Whatever of the pods is left (none, normally): berth down.
    const std::string down = std::string(BERTH_BINARY) + " --data-dir " + data + " down >/dev/null";
    if (std::system(down.c_str()) != 0) std::fprintf(stderr, "berth down failed\n");
  }
  absl::SleepFor(absl::Seconds(1));
  berth::bench::Cleanup(dir);
  return running == pairs ? 0 : 1;
}
