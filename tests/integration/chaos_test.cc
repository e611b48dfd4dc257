// Chaos (issue 19's acceptance): `berth up` on one node (--runtime none: the
// storage side; pods get their volumes staged and published, no
// containers), rounds of claims created and deleted while the whole of
// berth up, its berth-csi or (when it is a process of its own) its node
// agent is killed with SIGKILL at random points, or the agent is stopped
// (SIGSTOP) until its node is tainted unreachable, then resumed. After the
// last restart:
//   - nothing lost: every claim not deleted is Bound to a PV whose volume is
//     in the pool, and what was written into a pod's volume is still there;
//   - nothing leaked: the pool's volume images are exactly the PVs' volumes;
//   - every deleted claim (and its PV) is gone within 60 s;
//   - deleting the rest leaves no volume mount and no volume loop device.
// Size: BERTH_CHAOS_ROUNDS x BERTH_CHAOS_CLAIMS (default 4 x 20; the
// acceptance figure is 12 x 80); the plan comes from BERTH_CHAOS_SEED
// (default: the clock), printed so a run can be replayed.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "absl/strings/match.h"
#include "fmt/format.h"
#include "up_fixture.h"

namespace berth::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr char kImmediateClass[] = "chaos-immediate";
constexpr char kWaitClass[] = "berth-local";  // the default, WaitForFirstConsumer

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && std::atoi(v) > 0 ? std::atoi(v) : fallback;
}

// One claim, with a pod using it for about one claim in four.
struct Item {
  std::string claim;
  std::string pod;  // empty: no pod (Immediate class)
  bool deleted = false;
  std::string file;  // written into the pod's volume ("" not yet)
  std::string content;
};

enum class Victim { kUp, kDriver, kAgent, kHang };

// The node monitor grace period berth up runs with here: a hung agent
// (SIGSTOP) is noticed within seconds.
constexpr char kGrace[] = "4s";

class ChaosTest : public BerthUpFixture {
 protected:
  void TearDown() override {
    // Children of berth up that outlive it (berth-csi and node agents get
    // SIGTERM when it dies): gathered while it runs, so a pid reused since
    // is never signalled.
    std::vector<pid_t> children;
    for (const char* f : {"berth-csi.pid", "agent.pid"}) {
      if (pid_t pid = ChildPid(f); pid > 0) children.push_back(pid);
    }
    BerthUpFixture::TearDown();
    for (pid_t pid : children) {
      if (!Eventually([&] { return ::kill(pid, 0) != 0; }, absl::Seconds(15))) ::kill(pid, SIGKILL);
    }
  }

  std::string NodeDir() const { return data_ + "/nodes/testnode"; }
  // The pid in <node dir>/<file> if it is a live child of the berth up this
  // test runs, else -1.
  pid_t ChildPid(const std::string& file) {
    if (!up_) return -1;
    std::ifstream in(NodeDir() + "/" + file);
    pid_t pid = -1;
    if (!(in >> pid) || pid <= 1) return -1;
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    std::getline(stat, line);
    // pid (comm) state ppid ...: comm may hold spaces; parse after ')'.
    const size_t close = line.rfind(')');
    if (close == std::string::npos) return -1;
    std::istringstream rest(line.substr(close + 1));
    std::string state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    return ppid == up_->pid() && state != "Z" ? pid : -1;
  }

  bool Post(const std::string& path, const json& body) {
    auto r = client_->Call("POST", path, body.dump());
    EXPECT_TRUE(r.ok() && (r->code == 201 || r->code == 200))
        << path << ": " << (r.ok() ? r->body : r.status().ToString());
    return r.ok() && (r->code == 201 || r->code == 200);
  }
  void Delete(const std::string& path) {
    auto r = client_->Call("DELETE", path);
    EXPECT_TRUE(r.ok() && (r->code == 200 || r->code == 202 || r->code == 404))
        << path << ": " << (r.ok() ? r->body : r.status().ToString());
  }
  json Items(const std::string& path) {
    json list = Get(path);
    return list.is_object() && list.contains("items") ? list["items"] : json::array();
  }

  void CreateItem(Item& item) {
    json claim = {{"apiVersion", "v1"},
                  {"kind", "PersistentVolumeClaim"},
                  {"metadata", {{"name", item.claim}}},
                  {"spec",
                   {{"accessModes", {"ReadWriteOnce"}},
                    {"storageClassName", item.pod.empty() ? kImmediateClass : kWaitClass},
                    {"resources", {{"requests", {{"storage", "16Mi"}}}}}}}};
    Post("/api/v1/namespaces/default/persistentvolumeclaims", claim);
    if (item.pod.empty()) return;
    Post("/api/v1/namespaces/default/pods",
         {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", item.pod}}},
          {"spec",
           {{"containers", {{{"name", "c"}, {"image", "berth.local/toolbox:1"}}}},
            {"volumes", {{{"name", "d"}, {"persistentVolumeClaim", {{"claimName", item.claim}}}}}}}}});
  }
  void DeleteItem(Item& item) {
    if (!item.pod.empty()) Delete("/api/v1/namespaces/default/pods/" + item.pod);
    Delete("/api/v1/namespaces/default/persistentvolumeclaims/" + item.claim);
    item.deleted = true;
  }

  // kill -9 of `v`; returns when it is back (berth up: serving again; a
  // child: berth up started a new one).
  void Kill(Victim v, const std::string& when) {
    const absl::Time killed = absl::Now();
    if (v == Victim::kUp) {
      const pid_t pid = up_->pid();
      EXPECT_EQ(StopUp(SIGKILL), 128 + SIGKILL);
      StartUp({"--runtime", "none", "--node-monitor-grace-period", kGrace});
      last_restart_ = absl::Now();
      std::cout << fmt::format("[ CHAOS    ] {}: kill -9 berth up ({}); serving again after {}\n", when, pid,
                               absl::FormatDuration(last_restart_ - killed))
                << std::flush;
      ++kills_["berth up"];
      return;
    }
    if (v == Victim::kHang) {
      Hang(when);
      return;
    }
    const std::string file = v == Victim::kDriver ? "berth-csi.pid" : "agent.pid";
    const pid_t pid = ChildPid(file);
    if (pid <= 0) {
      // (Between a crash and its restart there is no live child to kill.)
      std::cout << fmt::format("[ CHAOS    ] {}: no live child in {}; nothing killed\n", when, file) << std::flush;
      return;
    }
    ASSERT_EQ(::kill(pid, SIGKILL), 0);
    EXPECT_TRUE(Eventually([&] { return ChildPid(file) > 0 && ChildPid(file) != pid; }, absl::Seconds(90)))
        << file << " not restarted";
    last_restart_ = absl::Now();
    std::cout << fmt::format("[ CHAOS    ] {}: kill -9 {} ({}); restarted after {}\n", when,
                             v == Victim::kDriver ? "berth-csi" : "node agent", pid,
                             absl::FormatDuration(last_restart_ - killed))
              << std::flush;
    ++kills_[v == Victim::kDriver ? "berth-csi" : "node agent"];
  }
  // SIGSTOP of the node agent past the grace period: the node goes Unknown
  // and tainted; SIGCONT: Ready and untainted again.
  void Hang(const std::string& when) {
    const pid_t pid = ChildPid("agent.pid");
    if (pid <= 0) {
      std::cout << fmt::format("[ CHAOS    ] {}: no live node agent; nothing stopped\n", when) << std::flush;
      return;
    }
    struct Resume {
      pid_t pid;
      ~Resume() { ::kill(pid, SIGCONT); }
    } resume{pid};
    const absl::Time stopped = absl::Now();
    ASSERT_EQ(::kill(pid, SIGSTOP), 0);
    auto unreachable = [&] {
      const json node = Get("/api/v1/nodes/testnode");
      if (!node.is_object()) return false;
      for (const auto& t : node.value("spec", json::object()).value("taints", json::array())) {
        if (t.value("key", "") == "node.kubernetes.io/unreachable") return true;
      }
      return false;
    };
    // Bounded loosely here (CI is loaded); BerthUpTest holds the grace + 10 s figure.
    EXPECT_TRUE(Eventually(unreachable, absl::Seconds(4 + 30))) << "the hung node was not tainted";
    const absl::Duration tainted_after = absl::Now() - stopped;
    ::kill(pid, SIGCONT);
    EXPECT_TRUE(Eventually([&] { return !unreachable(); }, absl::Seconds(30))) << "the node stayed tainted";
    last_restart_ = absl::Now();
    std::cout << fmt::format(
                     "[ CHAOS    ] {}: SIGSTOP node agent ({}); tainted after {}, SIGCONT, untainted after {}\n", when,
                     pid, absl::FormatDuration(tainted_after),
                     absl::FormatDuration(last_restart_ - stopped - tainted_after))
              << std::flush;
    ++kills_["node agent SIGSTOP"];
  }

  Victim PickVictim(std::mt19937_64& rng) {
    // A node agent of its own (agent.pid) is a third victim when there is
    // one, and a hung one (SIGSTOP past the grace period) a fourth.
    const bool agent = fs::exists(NodeDir() + "/agent.pid");
    switch (std::uniform_int_distribution<int>(0, agent ? 3 : 1)(rng)) {
      case 0:
        return Victim::kUp;
      case 1:
        return Victim::kDriver;
      case 2:
        return Victim::kAgent;
      default:
        return Victim::kHang;
    }
  }

  // Volume image IDs in the pool.
  std::set<std::string> PoolImages() {
    std::set<std::string> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(NodeDir() + "/pool/volumes", ec)) {
      if (e.path().extension() == ".img") out.insert(e.path().stem());
    }
    return out;
  }
  size_t VolumeLoops() {
    size_t n = 0;
    for (const auto& dev : sandbox_.Loops()) {
      std::ifstream f("/sys/block/" + fs::path(dev).filename().string() + "/loop/backing_file");
      std::string backing;
      std::getline(f, backing);
      if (!absl::EndsWith(backing, "/pool.img")) ++n;
    }
    return n;
  }

  // Writes a file into the volume of every live pod that has it published
  // and has none yet.
  void WriteIntoRunningPods() {
    for (Item& item : items_) {
      if (item.deleted || item.pod.empty() || !item.file.empty() || !Running(item.pod)) continue;
      const json claim = Claim(item.claim);
      if (Str(claim, "spec", "volumeName").empty()) continue;
      const std::string target = TargetOf(item.pod, item.claim);
      if (!Mounted(target)) continue;
      item.content = "written by chaos_test into " + item.claim + "\n";
      std::ofstream(target + "/chaos") << item.content;
      item.file = target + "/chaos";
    }
    ::sync();
  }
  static std::string Str(const json& o, const char* a, const char* b) {
    if (!o.is_object() || !o.contains(a) || !o[a].is_object()) return "";
    const json& v = o[a].value(b, json());
    return v.is_string() ? v.get<std::string>() : "";
  }

  // What differs from the converged state (empty: converged). Deleted
  // claims, pods and their PVs gone; live claims Bound to PVs whose volumes
  // are in the pool, and no other image; live pods Running.
  std::vector<std::string> Differences(bool deleted_only) {
    std::vector<std::string> out;
    std::map<std::string, const Item*> by_claim, by_pod;
    for (const Item& i : items_) {
      by_claim[i.claim] = &i;
      if (!i.pod.empty()) by_pod[i.pod] = &i;
    }
    std::set<std::string> live_claims;
    for (const json& c : Items("/api/v1/namespaces/default/persistentvolumeclaims")) {
      const std::string name = c["metadata"].value("name", "");
      auto it = by_claim.find(name);
      if (it == by_claim.end()) continue;
      if (it->second->deleted) {
        out.push_back(fmt::format("deleted claim {} still there: {}", name, c["metadata"].dump()));
      } else {
        live_claims.insert(name);
        if (!deleted_only && Str(c, "status", "phase") != "Bound") {
          out.push_back(fmt::format("claim {} is {}", name, Str(c, "status", "phase")));
        }
      }
    }
    for (const json& p : Items("/api/v1/namespaces/default/pods")) {
      const std::string name = p["metadata"].value("name", "");
      auto it = by_pod.find(name);
      if (it == by_pod.end()) continue;
      if (it->second->deleted) {
        out.push_back(fmt::format("deleted pod {} still there", name));
      } else if (!deleted_only && Str(p, "status", "phase") != "Running") {
        out.push_back(fmt::format("pod {} is {}", name, Str(p, "status", "phase")));
      }
    }
    std::set<std::string> handles;
    size_t bound_pvs = 0;
    for (const json& pv : Items("/api/v1/persistentvolumes")) {
      const std::string claim = pv["spec"].value("claimRef", json::object()).value("name", "");
      auto it = by_claim.find(claim);
      const bool deleted = it == by_claim.end() || it->second->deleted;
      if (deleted) {
        out.push_back(fmt::format("PV {} of deleted claim {} still there (phase {})", pv["metadata"].value("name", ""),
                                  claim, Str(pv, "status", "phase")));
      } else {
        ++bound_pvs;
      }
      handles.insert(pv["spec"].value("csi", json::object()).value("volumeHandle", ""));
    }
    if (deleted_only) return out;
    for (const Item& i : items_) {
      if (!i.deleted && live_claims.count(i.claim) == 0) out.push_back("claim " + i.claim + " lost");
    }
    if (bound_pvs != live_claims.size()) {
      out.push_back(fmt::format("{} PVs for {} live claims", bound_pvs, live_claims.size()));
    }
    const std::set<std::string> images = PoolImages();
    for (const auto& h : handles) {
      if (images.count(h) == 0) out.push_back("volume " + h + " of a PV is not in the pool (lost)");
    }
    for (const auto& img : images) {
      if (handles.count(img) == 0) out.push_back("pool image " + img + " belongs to no PV (leaked)");
    }
    return out;
  }
  static std::string Head(const std::vector<std::string>& lines) {
    std::string out;
    for (size_t i = 0; i < lines.size() && i < 30; ++i) out += lines[i] + "\n";
    if (lines.size() > 30) out += fmt::format("... and {} more\n", lines.size() - 30);
    return out;
  }

  std::vector<Item> items_;
  std::map<std::string, int> kills_;
  absl::Time last_restart_ = absl::InfinitePast();
};

TEST_F(ChaosTest, KillNineOfStackDriverAndAgentLosesAndLeaksNothing) {
  const int rounds = EnvInt("BERTH_CHAOS_ROUNDS", 4), per_round = EnvInt("BERTH_CHAOS_CLAIMS", 20);
  const uint64_t seed = std::getenv("BERTH_CHAOS_SEED") != nullptr
                            ? std::strtoull(std::getenv("BERTH_CHAOS_SEED"), nullptr, 10)
                            : static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()));
  std::cout << fmt::format("[ CHAOS    ] {} rounds x {} claims, seed {} (BERTH_CHAOS_SEED={} replays the plan)\n",
                           rounds, per_round, seed, seed)
            << std::flush;
  std::mt19937_64 rng(seed);
  auto chance = [&](double p) { return std::bernoulli_distribution(p)(rng); };
  auto pause = [&](int max_ms) {
    absl::SleepFor(absl::Milliseconds(std::uniform_int_distribution<int>(0, max_ms)(rng)));
  };

  pool_size_ = "24Gi";  // sparse by request; room for every claim ever created
  StartUp({"--runtime", "none", "--node-monitor-grace-period", kGrace, "--pool-sparse"});
  if (HasFatalFailure()) return;
  WaitForDriverRegistered("local.csi.berth.io");
  if (HasFatalFailure()) return;
  ASSERT_TRUE(Post("/apis/storage.k8s.io/v1/storageclasses", {{"apiVersion", "storage.k8s.io/v1"},
                                                              {"kind", "StorageClass"},
                                                              {"metadata", {{"name", kImmediateClass}}},
                                                              {"provisioner", "local.csi.berth.io"},
                                                              {"volumeBindingMode", "Immediate"},
                                                              {"reclaimPolicy", "Delete"}}));

  items_.reserve(static_cast<size_t>(rounds * per_round));
  size_t deleted = 0;
  for (int r = 0; r < rounds; ++r) {
    // One kill while this round's claims are created, one while claims
    // are deleted.
    const int kill_at = std::uniform_int_distribution<int>(0, per_round - 1)(rng);
    for (int i = 0; i < per_round; ++i) {
      if (i == kill_at) {
        Kill(PickVictim(rng), fmt::format("round {} creating (claim {} of {})", r + 1, i, per_round));
        if (HasFatalFailure()) return;
      }
      Item item;
      item.claim = fmt::format("c-{}-{}", r, i);
      if (chance(0.25)) item.pod = fmt::format("p-{}-{}", r, i);
      items_.push_back(item);
      CreateItem(items_.back());
      pause(15);
    }
    pause(1500);
    WriteIntoRunningPods();
    // Any live claim may go, this round's too (most of those are still
    // being provisioned).
    std::vector<Item*> victims;
    for (Item& item : items_) {
      if (!item.deleted && chance(0.4)) victims.push_back(&item);
    }
    std::shuffle(victims.begin(), victims.end(), rng);
    const size_t kill_del = std::uniform_int_distribution<size_t>(0, victims.size())(rng);
    for (size_t i = 0; i <= victims.size(); ++i) {
      if (i == kill_del) {
        Kill(PickVictim(rng), fmt::format("round {} deleting (claim {} of {})", r + 1, i, victims.size()));
        if (HasFatalFailure()) return;
      }
      if (i == victims.size()) break;
      DeleteItem(*victims[i]);
      ++deleted;
      pause(15);
    }
    std::cout << fmt::format("[ CHAOS    ] round {} done: {} claims created, {} deleted so far\n", r + 1, items_.size(),
                             deleted)
              << std::flush;
  }

  // Convergence after the last restart (polled every 250 ms: the lists
  // are long).
  std::vector<std::string> diff;
  auto poll = [&](bool deleted_only) {
    const absl::Time deadline = absl::Now() + absl::Seconds(180);
    while (!(diff = Differences(deleted_only)).empty() && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(250));
    }
    return diff.empty();
  };
  const bool deleted_gone = poll(true);
  const absl::Duration deleted_after = absl::Now() - last_restart_;
  EXPECT_TRUE(deleted_gone) << Head(diff);
  EXPECT_LE(deleted_after, absl::Seconds(60)) << "deleted claims were gone only after " << deleted_after;
  const bool converged = poll(false);
  const absl::Duration converged_after = absl::Now() - last_restart_;
  EXPECT_TRUE(converged) << Head(diff);
  WriteIntoRunningPods();  // pods that ran only now

  size_t files = 0, pods = 0;
  for (const Item& item : items_) {
    if (item.deleted || item.pod.empty()) continue;
    ++pods;
    if (item.file.empty()) {
      ADD_FAILURE() << "pod " << item.pod << " never had its volume mounted";
      continue;
    }
    EXPECT_EQ(ReadWholeFile(item.file), item.content) << item.file;
    ++files;
  }
  std::string kill_counts;
  for (const auto& [what, n] : kills_) kill_counts += fmt::format(" {} x{}", what, n);
  std::cout << fmt::format(
                   "[ FIGURES  ] chaos {} rounds x {} claims (seed {}): kills:{}; {} claims created, {} deleted, {} "
                   "kept ({} with "
                   "pods, {} files written and read back); {} PVs, {} pool images; every deleted claim gone {} after "
                   "the last "
                   "restart; all converged (Bound, Running, images == PVs) {} after it\n",
                   rounds, per_round, seed, kill_counts, items_.size(), deleted, items_.size() - deleted, pods, files,
                   Items("/api/v1/persistentvolumes").size(), PoolImages().size(), absl::FormatDuration(deleted_after),
                   absl::FormatDuration(converged_after))
            << std::flush;

  // Teardown: everything goes, and so do its mounts and loop devices.
  for (Item& item : items_) {
    if (!item.deleted) DeleteItem(item);
  }
  EXPECT_TRUE(Eventually(
      [&] {
        return Items("/api/v1/namespaces/default/persistentvolumeclaims").empty() &&
               Items("/api/v1/persistentvolumes").empty() && PoolImages().empty();
      },
      absl::Seconds(300)))
      << Head(Differences(false));
  EXPECT_TRUE(Eventually([&] { return VolumeMounts().empty() && VolumeLoops() == 0; }, absl::Seconds(60)))
      << VolumeMounts().size() << " volume mounts, " << VolumeLoops() << " volume loop devices left";
  EXPECT_EQ(StopUp(SIGTERM), 0);
}

}  // namespace
}  // namespace berth::testing
