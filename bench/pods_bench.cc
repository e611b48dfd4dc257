// Pods with volumes, berth up against a running Kubernetes (issue 31): N
// claim + pod pairs with berth-csi volumes (StorageClass berth-local,
// WaitForFirstConsumer, ext4), on containerd + CNI, driven the same way on
// both sides by the same kubectl and the same manifest:
//
//   1. berth up --runtime containerd (its own containerd, berth-csi on loop
//      devices; release build), reached through the kubeconfig it writes;
//   2. with --kubeconfig FILE (or $KUBECONFIG) naming a cluster that answers
//      and has berth-csi deployed (CSIDriver local.csi.berth.io): the same
//      there; otherwise a "skipped: no Kubernetes" line.
//
// Each side: `kubectl apply -f` of N claims and N pods in a namespace of
// their own (image berth.local/toolbox:1, berth's static busybox, which the
// cluster must have imported: `ctr -n k8s.io images import
// build/release/images/toolbox.tar`), the seconds until every pod is
// Running, then `kubectl delete -f` and the seconds until every pod and
// every PV of the namespace's claims is gone, both seen on two `kubectl get
// -w` streams (pods, PVs) started before the apply.
// Over that window (apply to all deleted) it sums the CPU seconds
// (utime + stime + those of the children they reaped: mkfs, mount, ...) of
//   berth:       berth up, its node agent and berth-csi (berth's own), and
//                apart its containerd, the shims and pods;
//   Kubernetes:  etcd, kube-apiserver, kube-controller-manager,
//                kube-scheduler, kubelet, kube-proxy and the sidecars of the
//                berth-csi pod (csi-provisioner, csi-snapshotter,
//                csi-resizer, csi-node-driver-registrar, livenessprobe), and
//                apart berth-csi itself, the snapshot-controller, containerd,
//                the shims and pods;
// by process from /proc (name, and for shims and containers the containerd
// they belong to), and prints both sides and the ratios Kubernetes / berth.
// The pods' command traps SIGTERM, so deletion does not wait for a grace
// period on either side.
//
//   build/release/bench/pods_bench [--kubeconfig FILE] [N ...]   (default: 20 100; root)
//
// kubectl: $BERTH_KUBECTL, the Debian kubernetes-client berth installs, or
// /usr/bin/kubectl. berth up, its children and its temp directory are
// removed at the end; on the cluster the bench's namespace is deleted.
// The shims and pods end before the second reading, so "shims+pods" holds
// only the CPU of those still alive then (the berth-csi pod's shim).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench_util.h"

namespace {

namespace fs = std::filesystem;

constexpr char kNamespace[] = "pods-bench";
constexpr char kDriver[] = "local.csi.berth.io";

// One process in /proc.
struct Proc {
  pid_t ppid = 0;
  std::string comm, cmdline;
  long long start = 0;  // starttime: tells a reused pid apart
  long ticks = 0;       // utime + stime + cutime + cstime
};

std::map<pid_t, Proc> Processes() {
  std::map<pid_t, Proc> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const pid_t pid = std::atoi(e.path().filename().c_str());
    if (pid <= 0) continue;
    std::ifstream in(e.path() / "stat");
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t open = stat.find('('), close = stat.rfind(')');
    if (open == std::string::npos || close == std::string::npos) continue;
    Proc p;
    p.comm = stat.substr(open + 1, close - open - 1);
    std::istringstream fields(stat.substr(close + 2));
    std::string state;
    long ppid = 0, skip = 0, utime = 0, stime = 0, cutime = 0, cstime = 0, priority = 0, nice = 0, threads = 0,
         itreal = 0;
    fields >> state >> ppid;
    for (int i = 0; i < 9; ++i) fields >> skip;
    fields >> utime >> stime >> cutime >> cstime >> priority >> nice >> threads >> itreal >> p.start;
    p.ppid = static_cast<pid_t>(ppid);
    p.ticks = utime + stime + cutime + cstime;
    // read(2), not a stream: libstdc++'s filebuf throws when the process
    // exits between open and read (ESRCH).
    p.cmdline = berth::bench::ReadWhole(e.path() / "cmdline");
    for (char& c : p.cmdline) c = c == '\0' ? ' ' : c;
    out[pid] = std::move(p);
  }
  return out;
}

// Whether `pid` is `root` or below it.
bool Below(const std::map<pid_t, Proc>& ps, pid_t pid, pid_t root) {
  for (int depth = 0; pid > 1 && depth < 64; ++depth) {
    if (pid == root) return true;
    auto it = ps.find(pid);
    if (it == ps.end()) return false;
    pid = it->second.ppid;
  }
  return false;
}

// A process's group for the CPU sums ("" = not counted).
using Classifier = std::function<std::string(const std::map<pid_t, Proc>&, pid_t)>;

// The shim (containerd-shim*, its command line containing `marker`) `pid`
// runs below, or 0.
pid_t ShimOf(const std::map<pid_t, Proc>& ps, pid_t pid, const std::string& marker) {
  for (int depth = 0; pid > 1 && depth < 64; ++depth) {
    auto it = ps.find(pid);
    if (it == ps.end()) return 0;
    if (it->second.comm.starts_with("containerd-shim") && it->second.cmdline.find(marker) != std::string::npos) {
      return pid;
    }
    pid = it->second.ppid;
  }
  return 0;
}

// CPU seconds by group between two snapshots: every process alive at the
// end, less what it had at the start (a process born meanwhile counts in
// full; one that ended meanwhile is lost, only shims and pods do).
std::map<std::string, double> CpuByGroup(const std::map<pid_t, Proc>& before, const std::map<pid_t, Proc>& after,
                                         const Classifier& classify) {
  const double hz = static_cast<double>(::sysconf(_SC_CLK_TCK));
  std::map<std::string, double> out;
  for (const auto& [pid, p] : after) {
    const std::string group = classify(after, pid);
    if (group.empty()) continue;
    auto b = before.find(pid);
    const long base = b != before.end() && b->second.start == p.start ? b->second.ticks : 0;
    out[group] += static_cast<double>(p.ticks - base) / hz;
  }
  return out;
}

// argv and an environment with KUBECONFIG=`kubeconfig`, as execve takes
// them, made before fork (other threads run meanwhile; the child only execs).
struct ExecArgs {
  ExecArgs(const std::vector<std::string>& args, const std::string& kubeconfig) : env("KUBECONFIG=" + kubeconfig) {
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    for (char** e = environ; *e != nullptr; ++e) {
      if (!std::string_view(*e).starts_with("KUBECONFIG=")) envp.push_back(*e);
    }
    envp.push_back(const_cast<char*>(env.c_str()));
    envp.push_back(nullptr);
  }
  std::string env;
  std::vector<char*> argv, envp;
};

// Runs `argv` with KUBECONFIG=`kubeconfig`: whether it exited 0. With
// `out`, its stdout goes there (its stderr nowhere); without, both are
// printed when it fails.
bool Run(const std::vector<std::string>& argv, const std::string& kubeconfig, std::string* out = nullptr) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return false;
  const ExecArgs exec(argv, kubeconfig);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], 1);
    if (out == nullptr) {
      ::dup2(fds[1], 2);
    } else if (const int null = ::open("/dev/null", O_WRONLY); null >= 0) {
      ::dup2(null, 2);  // a NotFound asked on purpose is not news
    }
    ::execve(exec.argv[0], exec.argv.data(), exec.envp.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  std::string text;
  char buf[1 << 16];
  for (ssize_t r; (r = ::read(fds[0], buf, sizeof(buf))) > 0;) text.append(buf, static_cast<size_t>(r));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (out != nullptr) *out = text;
  if (!ok && out == nullptr) std::fprintf(stderr, "%s: %s", argv.size() > 1 ? argv[1].c_str() : "", text.c_str());
  return ok;
}

int CountWord(const std::string& text, const std::string& word) {
  std::istringstream in(text);
  int n = 0;
  for (std::string w; in >> w;) n += w == word;
  return n;
}

// N claims and N pods in kNamespace.
std::string Manifest(int n) {
  std::string m;
  for (int i = 0; i < n; ++i) {
    const std::string name = "p" + std::to_string(i);
    m += "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: " + name + ", namespace: " + kNamespace +
         "}\nspec:\n  accessModes: [ReadWriteOnce]\n  storageClassName: berth-local\n"
         "  resources: {requests: {storage: 16Mi}}\n---\n";
    m += "apiVersion: v1\nkind: Pod\nmetadata: {name: " + name + ", namespace: " + kNamespace +
         "}\nspec:\n  containers:\n  - name: c\n    image: berth.local/toolbox:1\n"
         "    imagePullPolicy: IfNotPresent\n"
         "    command: [sh, -c, \"trap 'exit 0' TERM; sleep 1000000 & wait\"]\n"
         "    volumeMounts: [{name: d, mountPath: /data}]\n"
         "  volumes: [{name: d, persistentVolumeClaim: {claimName: " +
         name + "}}]\n---\n";
  }
  return m;
}

// `kubectl get KIND -w --output-watch-events` with a jsonpath printing
// "TYPE NAME FIELD" per event: the FIELD of every object there is, as the
// events arrive (one stream for the whole run instead of a list every
// tenth of a second, which would cost the API server of the slower side
// more). Pipes are close-on-exec: a write end inherited by another
// kubectl would keep a finished watch's reader waiting for ever.
// kubectl is started again if the server ends the watch; its re-list
// then rebuilds the map, which can only be short meanwhile, so a count
// reached is right, and "nothing left" is confirmed by a list.
class Watch {
 public:
  Watch(const std::string& kubectl, const std::string& kubeconfig, std::vector<std::string> args,
        const std::string& field)
      : thread_([this, kubectl, kubeconfig, args, field] {
          std::vector<std::string> argv = {kubectl, "get"};
          argv.insert(argv.end(), args.begin(), args.end());
          argv.insert(argv.end(), {"-w", "--output-watch-events", "-o",
                                   "jsonpath={.type} {.object.metadata.name} " + field + "{\"\\n\"}"});
          while (!stop_) {
            int fds[2];
            if (::pipe2(fds, O_CLOEXEC) != 0) return;
            const ExecArgs exec(argv, kubeconfig);
            const pid_t pid = ::fork();
            if (pid == 0) {
              ::dup2(fds[1], 1);
              if (const int null = ::open("/dev/null", O_WRONLY); null >= 0) ::dup2(null, 2);
              ::execve(exec.argv[0], exec.argv.data(), exec.envp.data());
              ::_exit(127);
            }
            ::close(fds[1]);
            {
              std::lock_guard<std::mutex> l(mu_);
              pid_ = pid;
              state_.clear();
            }
            std::string line;
            char buf[1 << 14];
            for (ssize_t r; (r = ::read(fds[0], buf, sizeof(buf))) > 0;) {
              for (ssize_t i = 0; i < r; ++i) {
                if (buf[i] != '\n') {
                  line += buf[i];
                  continue;
                }
                std::istringstream words(line);
                std::string type, name, value;
                words >> type >> name >> value;
                line.clear();
                std::lock_guard<std::mutex> l(mu_);
                if (type == "DELETED") {
                  state_.erase(name);
                } else if (!name.empty()) {
                  state_[name] = value;
                }
              }
            }
            ::close(fds[0]);
            ::waitpid(pid, nullptr, 0);
            if (!stop_) absl::SleepFor(absl::Milliseconds(100));
          }
        }) {}
  ~Watch() {
    stop_ = true;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (pid_ > 0) ::kill(pid_, SIGTERM);
    }
    thread_.join();
  }
  // How many objects have FIELD `value` ("" counts them all).
  int Count(const std::string& value) {
    std::lock_guard<std::mutex> l(mu_);
    int n = 0;
    for (const auto& [name, v] : state_) n += value.empty() || v == value;
    return n;
  }

 private:
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  pid_t pid_ = 0;
  std::map<std::string, std::string> state_;
  std::thread thread_;  // last: started once the members above exist
};

struct Side {
  bool ok = false;
  double running_s = 0, deleted_s = 0;
  std::map<std::string, double> cpu;
};

// One side: apply, all Running, delete, all gone; CPU over it all.
Side Drive(const std::string& kubectl, const std::string& kubeconfig, const std::string& dir, int n,
           const Classifier& classify) {
  Side s;
  const std::string file = dir + "/pods-" + std::to_string(n) + ".yaml";
  std::ofstream(file) << Manifest(n);
  std::string out;
  if (!Run({kubectl, "get", "namespace", kNamespace}, kubeconfig, &out) &&
      !Run({kubectl, "create", "namespace", kNamespace}, kubeconfig)) {
    return s;
  }
  Watch pods(kubectl, kubeconfig, {"-n", kNamespace, "pods"}, "{.object.status.phase}");
  Watch volumes(kubectl, kubeconfig, {"pv"}, "{.object.spec.claimRef.namespace}");
  absl::SleepFor(absl::Seconds(2));  // both watches established
  const auto before = Processes();
  const absl::Time t0 = absl::Now();
  if (!Run({kubectl, "apply", "-f", file}, kubeconfig)) {
    std::fprintf(stderr, "kubectl apply failed\n");
    return s;
  }
  while (pods.Count("Running") < n && absl::Now() - t0 < absl::Minutes(15)) absl::SleepFor(absl::Milliseconds(10));
  s.running_s = absl::ToDoubleSeconds(absl::Now() - t0);
  const int running = pods.Count("Running");
  if (running < n) std::fprintf(stderr, "only %d/%d pods Running after %.0f s\n", running, n, s.running_s);
  const absl::Time t1 = absl::Now();
  Run({kubectl, "delete", "--wait=false", "-f", file}, kubeconfig, &out);
  bool gone = false;
  while (!gone && absl::Now() - t1 < absl::Minutes(15)) {
    absl::SleepFor(absl::Milliseconds(10));
    if (pods.Count("") > 0 || volumes.Count(kNamespace) > 0) continue;
    s.deleted_s = absl::ToDoubleSeconds(absl::Now() - t1);
    std::string left, pvs;
    gone = Run({kubectl, "-n", kNamespace, "get", "pods,pvc", "-o", "name"}, kubeconfig, &left) && left.empty() &&
           Run({kubectl, "get", "pv", "-o", "jsonpath={.items[*].spec.claimRef.namespace}"}, kubeconfig, &pvs) &&
           CountWord(pvs, kNamespace) == 0;
    if (!gone) absl::SleepFor(absl::Milliseconds(200));
  }
  if (!gone) {
    s.deleted_s = absl::ToDoubleSeconds(absl::Now() - t1);
    std::fprintf(stderr, "pods or volumes left after %.0f s\n", s.deleted_s);
  }
  s.cpu = CpuByGroup(before, Processes(), classify);
  s.ok = running == n && gone;
  return s;
}

double Sum(const std::map<std::string, double>& cpu, const std::vector<std::string>& groups) {
  double total = 0;
  for (const auto& g : groups) total += cpu.count(g) ? cpu.at(g) : 0;
  return total;
}

void PrintCpu(const char* side, const std::map<std::string, double>& cpu) {
  std::printf("  %s CPU s:", side);
  for (const auto& [group, secs] : cpu) std::printf(" %s %.2f;", group.c_str(), secs);
  std::printf("\n");
}

// berth up with containerd in `dir`, N pairs, stopped again.
Side BerthSide(const std::string& kubectl, const std::string& dir, int n) {
  Side s;
  const std::string data = dir + "/data";
  const pid_t up = ::fork();
  if (up == 0) {
    const std::string log = dir + "/up.log";
    if (!std::freopen(log.c_str(), "w", stdout) || !std::freopen(log.c_str(), "a", stderr)) ::_exit(126);
    const std::string api = "127.0.0.1:" + std::to_string(berth::bench::FreePort(17543));
    ::execl(BERTH_BINARY, BERTH_BINARY, "--data-dir", data.c_str(), "up", "--pool-size", "4Gi", "--api-address",
            api.c_str(), "--csi-binary", BERTH_CSI_BINARY, "--node-name", "bench", "--log-level", "warn", "--runtime",
            "containerd", "--pod-cidr", "10.215.0.0/16", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  const std::string kubeconfig = data + "/kubeconfig";
  const absl::Time start = absl::Now();
  std::string out;
  bool ready = false;
  while (!ready && absl::Now() - start < absl::Seconds(90)) {
    absl::SleepFor(absl::Milliseconds(200));
    ready = ::access(kubeconfig.c_str(), R_OK) == 0 &&
            Run({kubectl, "get", "csinodes", "-o", "jsonpath={.items[*].spec.drivers[*].name}"}, kubeconfig, &out) &&
            out.find(kDriver) != std::string::npos;
  }
  if (!ready) {
    std::fprintf(stderr, "berth up did not come up; see %s/up.log\n", dir.c_str());
  } else {
    // berth's own: berth up, its node agent, berth-csi (below berth up);
    // apart: its containerd and the shims (reparented away from it) with
    // their pods.
    s = Drive(kubectl, kubeconfig, dir, n, [&](const std::map<pid_t, Proc>& ps, pid_t pid) -> std::string {
      const Proc& p = ps.at(pid);
      if (ShimOf(ps, pid, data) != 0) return "shims+pods";
      if (!Below(ps, pid, up)) return "";
      if (p.comm == "berth") return p.cmdline.find("node-agent") != std::string::npos ? "node-agent" : "berth-up";
      if (p.comm == "berth-csi") return "berth-csi";
      if (p.comm == "containerd") return "containerd";
      return "other";
    });
  }
  ::kill(up, SIGTERM);
  int status = 0;
  ::waitpid(up, &status, 0);
  const std::string down = std::string(BERTH_BINARY) + " --data-dir " + data + " down >/dev/null 2>&1";
  if (std::system(down.c_str()) != 0) std::fprintf(stderr, "berth down failed\n");
  return s;
}

const std::vector<std::string> kBerthOwn = {"berth-up", "node-agent", "berth-csi"};
const std::vector<std::string> kKubernetes = {
    "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy", "sidecars"};

std::string KubernetesGroup(const std::map<pid_t, Proc>& ps, pid_t pid) {
  const Proc& p = ps.at(pid);
  // Containers and shims of the cluster's containerd (k8s.io namespace).
  if (ShimOf(ps, pid, "/run/containerd/containerd.sock") != 0) {
    for (const char* sidecar :
         {"csi-provisioner", "csi-snapshotter", "csi-resizer", "csi-node-driver", "livenessprobe"}) {
      if (p.comm == sidecar) return "sidecars";
    }
    if (p.comm == "berth-csi") return "berth-csi";
    if (p.comm.starts_with("snapshot-contro")) return "snapshot-controller";
    return "shims+pods";
  }
  for (const char* name : {"etcd", "kube-apiserver", "kube-scheduler", "kubelet", "kube-proxy"}) {
    if (p.comm == name) return name;
  }
  if (p.comm == "kube-controller") return "kube-controller-manager";  // comm is cut at 15 characters
  if (p.comm == "containerd" && p.cmdline.find("/tmp/berth") == std::string::npos) return "containerd";
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  if (::geteuid() != 0) {
    std::fprintf(stderr, "pods_bench needs root (loop devices, mounts, containerd)\n");
    return 2;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::string kubeconfig = std::getenv("KUBECONFIG") != nullptr ? std::getenv("KUBECONFIG") : "";
  std::vector<int> sizes;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--kubeconfig" && i + 1 < argc) {
      kubeconfig = argv[++i];
    } else {
      sizes.push_back(std::atoi(argv[i]));
    }
  }
  if (sizes.empty()) sizes = {20, 100};
  const std::string kubectl = berth::bench::FindKubectl();
  if (kubectl.empty()) {
    std::fprintf(stderr, "no kubectl ($BERTH_KUBECTL, berth's kubernetes-client, /usr/bin/kubectl)\n");
    return 2;
  }
  // The cluster: answers, and has berth-csi.
  std::string why;
  std::string out;
  if (kubeconfig.empty()) {
    why = "no --kubeconfig and no $KUBECONFIG";
  } else if (!Run({kubectl, "get", "--raw", "/readyz"}, kubeconfig, &out)) {
    why = "the cluster of " + kubeconfig + " does not answer";
  } else if (!Run({kubectl, "get", "csidriver", kDriver}, kubeconfig, &out)) {
    why = std::string("the cluster of ") + kubeconfig + " has no CSIDriver " + kDriver + " (berth-csi not deployed)";
  }
  if (!why.empty()) std::printf("Kubernetes: skipped: no Kubernetes (%s)\n", why.c_str());

  bool ok = true;
  for (int n : sizes) {
    char tmpl[] = "/tmp/berth-pods-bench-XXXXXX";
    const std::string dir = ::mkdtemp(tmpl);
    std::printf("N = %d claim+pod pairs\n", n);
    const Side b = BerthSide(kubectl, dir, n);
    ::sleep(2);
    berth::bench::Cleanup(dir);
    const double berth_cpu = Sum(b.cpu, kBerthOwn);
    std::printf("  berth up:   all Running %.2f s, all deleted %.2f s, berth's own CPU %.2f s (%.3f s per pod)%s\n",
                b.running_s, b.deleted_s, berth_cpu, berth_cpu / n, b.ok ? "" : "  FAILED");
    PrintCpu("berth up", b.cpu);
    ok = ok && b.ok;
    if (!why.empty()) continue;
    char kdir_tmpl[] = "/tmp/berth-pods-bench-k8s-XXXXXX";
    const std::string kdir = ::mkdtemp(kdir_tmpl);
    const Side k = Drive(kubectl, kubeconfig, kdir, n, KubernetesGroup);
    Run({kubectl, "delete", "namespace", kNamespace, "--wait=true", "--timeout=120s"}, kubeconfig, &out);
    fs::remove_all(kdir);
    const double k8s_cpu = Sum(k.cpu, kKubernetes);
    std::printf(
        "  Kubernetes: all Running %.2f s, all deleted %.2f s, control plane + kubelet + kube-proxy + "
        "sidecars CPU %.2f s (%.3f s per pod)%s\n",
        k.running_s, k.deleted_s, k8s_cpu, k8s_cpu / n, k.ok ? "" : "  FAILED");
    PrintCpu("Kubernetes", k.cpu);
    auto ratio = [](double num, double den) { return den > 0 ? num / den : 0.0; };
    const double driver_b = b.cpu.count("berth-csi") ? b.cpu.at("berth-csi") : 0;
    const double driver_k = k.cpu.count("berth-csi") ? k.cpu.at("berth-csi") : 0;
    std::printf(
        "  Kubernetes / berth: to all Running %.2fx, to all deleted %.2fx, CPU %.2fx (berth-csi counted on "
        "both sides: %.2fx; on neither: %.2fx)\n",
        ratio(k.running_s, b.running_s), ratio(k.deleted_s, b.deleted_s), ratio(k8s_cpu, berth_cpu),
        ratio(k8s_cpu + driver_k, berth_cpu), ratio(k8s_cpu, berth_cpu - driver_b));
    ok = ok && k.ok;
  }
  return ok ? 0 : 1;
}
