// Issue 30's first acceptance, for real (root; containerd, runc, CNI plugins
// and berth's images): on `berth up --nodes 2 --backup-location DIR`, a pod on
// node 1 writes 256 MiB of random data with a recorded checksum and runs an
// SQLite writer in WAL mode whose pre hook checkpoints it; its namespace is
// backed up; node 1 is lost — its node agent and berth-csi stopped (SIGSTOP:
// the supervisor sees no exit, so it restarts nothing) and its pool image
// deleted, the node Unknown and tainted — and the backup restored onto node 2
// into a mapped namespace: the restored pod runs there, the file's checksum
// is the recorded one, the database passes `PRAGMA integrity_check` and holds
// every row committed when the pre hook ran. Nothing of node 1 can serve the
// restore: the volume is rebuilt from the repository on node 2's pool.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/testing/eventually.h"
#include "cri/containerd.h"
#include "cri/testing/containerd.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "up_fixture.h"

namespace berth::testing {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;
namespace fs = std::filesystem;

constexpr int64_t kMiB = 1 << 20;
constexpr char kNodeBase[] = "lossnode";
constexpr char kNode1[] = "lossnode-1";  // loses its agent, its driver and its pool
constexpr char kNode2[] = "lossnode-2";  // where the workload comes back
constexpr char kSqliteImage[] = "berth.local/sqlite-toolbox:1";
// Short, so node 1 is marked Unknown within the test; leases are renewed
// every grace/4 (3 s), which a busy 2-core machine still keeps up with.
constexpr char kGrace[] = "12s";

class BackupRestoreUpTest : public BerthUpFixture {
 protected:
  void SetUp() override {
    BerthUpFixture::SetUp();
    if (IsSkipped()) return;
    if (std::string why = cri::testing::TestContainerd::Unavailable(); !why.empty()) GTEST_SKIP() << why;
    archive_ = std::string(BERTH_IMAGES_DIR) + "/sqlite-toolbox.tar";
    if (!fs::exists(archive_)) GTEST_SKIP() << archive_ << " missing (scripts/install-deps installs sqlite3)";
    node_ = kNodeBase;
    // A 512 MiB volume, its snapshot kept by the backup and the data
    // mover's clone of it are each accounted at the volume's size; on node
    // 2 the filled volume and the claim's clone of it.
    pool_size_ = "3Gi";
    repo_ = sandbox_.Join("repo");
    with_runtime_ = true;
  }
  void TearDown() override {
    // What the test stopped runs again, so that berth up's supervisor can
    // stop it (SIGTERM) and `berth down` find nothing in use.
    for (pid_t pid : stopped_) ::kill(pid, SIGCONT);
    stopped_.clear();
    // The controllers' side of a failure: berth up's log (the fixture shows
    // the agents').
    if (HasFailure() && up_) {
      std::string log = up_->Output();
      if (log.size() > 12000) log = log.substr(log.size() - 12000);
      std::cout << "---- berth up's log (tail)\n" << log << "----\n";
    }
    if (with_runtime_) {
      StopUp(SIGTERM);
      auto [rc, out] = RunBerth({"down"});
      EXPECT_EQ(rc, 0) << out;
      EXPECT_TRUE(sandbox_.Mounts().empty()) << "mounts left: " << sandbox_.Mounts().front();
      // A loop device is detached when its last mount goes (autoclear),
      // shortly after the unmount returns.
      EXPECT_TRUE(Eventually([&] { return sandbox_.Loops().empty(); }, absl::Seconds(10)))
          << "loop devices left: " << sandbox_.Loops().front();
      const std::vector<pid_t> shims = Shims();
      EXPECT_TRUE(shims.empty()) << "shims left";
      for (pid_t pid : shims) ::kill(pid, SIGKILL);
    }
    BerthUpFixture::TearDown();
  }

  // containerd shims of this test's containerds, one per node (berth down
  // stops them; network namespaces are mounts below containerd's state).
  std::vector<pid_t> Shims() {
    std::vector<std::string> sockets;
    for (const char* node : {kNode1, kNode2}) {
      sockets.push_back(cri::ContainerdSetup{.dir = data_ + "/containerd/" + node, .pod_cidr = ""}.Socket());
    }
    std::vector<pid_t> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("/proc", ec)) {
      const pid_t pid = static_cast<pid_t>(std::atoi(e.path().filename().c_str()));
      if (pid <= 0) continue;
      std::string cmd = ReadWholeFile(e.path() / "cmdline");
      std::replace(cmd.begin(), cmd.end(), '\0', ' ');
      if (!absl::StrContains(cmd, "containerd-shim")) continue;
      for (const auto& socket : sockets) {
        if (absl::StrContains(cmd, socket)) out.push_back(pid);
      }
    }
    return out;
  }
  void Apply(const std::string& yaml) {
    Berth({"apply", "-f", WriteFile("manifest-" + std::to_string(++manifests_) + ".yaml", yaml)});
  }
  json NsPod(const std::string& ns, const std::string& name) {
    return Get("/api/v1/namespaces/" + ns + "/pods/" + name);
  }
  json NsClaim(const std::string& ns, const std::string& name) {
    return Get("/api/v1/namespaces/" + ns + "/persistentvolumeclaims/" + name);
  }
  // The pod is Running with every container running.
  bool AllRunning(const std::string& ns, const std::string& name) {
    const json pod = NsPod(ns, name);
    if (!pod.is_object() || pod.value("status", json::object()).value("phase", "") != "Running") return false;
    for (const auto& cs : pod["status"].value("containerStatuses", json::array())) {
      if (!cs["state"].contains("running")) return false;
    }
    return true;
  }
  // `berth exec -n NS POD -- CMD...`: its exit code and output.
  std::pair<int, std::string> Exec(const std::string& ns, const std::string& pod, const std::vector<std::string>& cmd) {
    std::vector<std::string> args = {"exec", "-n", ns, pod, "-c", "main", "--"};
    args.insert(args.end(), cmd.begin(), cmd.end());
    return RunBerth(args);
  }
  std::string ExecOk(const std::string& ns, const std::string& pod, const std::vector<std::string>& cmd) {
    auto [rc, out] = Exec(ns, pod, cmd);
    EXPECT_EQ(rc, 0) << out;
    return out;
  }
  int64_t Rows(const std::string& ns, const std::string& pod) {
    auto [rc, out] = Exec(ns, pod, {"sqlite3", "-cmd", ".timeout 10000", "/data/db", "select count(*) from t"});
    int64_t n = -1;
    if (rc != 0 || !absl::SimpleAtoi(absl::StripAsciiWhitespace(out), &n)) return -1;
    return n;
  }
  std::string ReadyOf(const std::string& node) {
    const json n = Get("/api/v1/nodes/" + node);
    if (!n.is_object()) return "";
    for (const auto& c : n.value("status", json::object()).value("conditions", json::array())) {
      if (c.value("type", "") == "Ready") return c.value("status", "");
    }
    return "";
  }
  bool Tainted(const std::string& node, const std::string& effect) {
    const json n = Get("/api/v1/nodes/" + node);
    if (!n.is_object()) return false;
    for (const auto& t : n.value("spec", json::object()).value("taints", json::array())) {
      if (t.value("key", "") == "node.kubernetes.io/unreachable" && t.value("effect", "") == effect) return true;
    }
    return false;
  }
  // The PID in <data>/nodes/<node>/<file>, if it is a live process whose
  // command line has `want`.
  pid_t ChildPid(const std::string& node, const std::string& file, const std::string& want) {
    pid_t pid = -1;
    if (std::ifstream in(data_ + "/nodes/" + node + "/" + file); in) in >> pid;
    if (pid <= 1) return -1;
    std::string cmd = ReadWholeFile("/proc/" + std::to_string(pid) + "/cmdline");
    std::replace(cmd.begin(), cmd.end(), '\0', ' ');
    return absl::StrContains(cmd, want) ? pid : -1;
  }
  // The process is stopped (state T in /proc/PID/stat).
  static bool IsStopped(pid_t pid) {
    const std::string stat = ReadWholeFile("/proc/" + std::to_string(pid) + "/stat");
    const size_t paren = stat.rfind(')');
    return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'T';
  }
  void Stop(pid_t pid) {
    ASSERT_EQ(::kill(pid, SIGSTOP), 0) << pid;
    stopped_.push_back(pid);
    ASSERT_TRUE(Eventually([&] { return IsStopped(pid); }, absl::Seconds(5))) << pid;
  }

  std::string archive_;
  std::string repo_;
  bool with_runtime_ = false;
  int manifests_ = 0;
  std::vector<pid_t> stopped_;  // SIGSTOPped by the test; resumed at teardown
};

// The pod's script: the data once (a restored volume has it already), then an
// SQLite writer in WAL mode that keeps its connection open — so its log is
// never empty without a checkpoint — inserting a row every 50 ms.
constexpr char kWriterScript[] =
    "set -e\n"
    "if [ ! -f /data/blob.sha256 ]; then\n"
    "  dd if=/dev/urandom of=/data/blob bs=1M count=256 2>/dev/null\n"
    "  sha256sum /data/blob > /data/blob.sha256\n"
    "fi\n"
    "(echo '.timeout 10000'; echo 'PRAGMA journal_mode=WAL;';"
    " echo 'create table if not exists t(id integer primary key, at text, pad blob);';"
    " while true; do echo \"insert into t(at, pad) values (datetime('now'), randomblob(512));\"; sleep 0.05; done)"
    " | sqlite3 /data/db\n";

std::string ShopManifest() {
  // The pre hook checkpoints the database (TRUNCATE: the log's pages moved
  // into the database file and the log emptied), waiting up to 10 s for the
  // writer's lock, and keeps SQLite's answer (busy|log pages|checkpointed)
  // and the rows committed by then in the volume: the restore shows it ran
  // before the snapshot, and which rows it must hold. The post hook's mark
  // is written after the snapshot, so the restore lacks it.
  const json pre = {"/bin/sh", "-c",
                    "sqlite3 -cmd '.timeout 10000' /data/db 'PRAGMA wal_checkpoint(TRUNCATE)' > /data/pre-hook && "
                    "sqlite3 -cmd '.timeout 10000' /data/db 'select count(*) from t' >> /data/pre-hook"};
  const json post = {"/bin/sh", "-c", "date > /data/post-hook"};
  return std::string(
             "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: shop\n---\n"
             "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: data\n  namespace: shop\n"
             "  labels:\n    app: db\nspec:\n  accessModes: [ReadWriteOnce]\n  resources:\n    requests:\n"
             "      storage: 512Mi\n---\n"
             "apiVersion: v1\nkind: Pod\nmetadata:\n  name: db\n  namespace: shop\n  labels:\n    app: db\n"
             "  annotations:\n    pre.hook.backup.berth.io/command: ") +
         json(pre.dump()).dump() +
         "\n    pre.hook.backup.berth.io/timeout: 1m\n    post.hook.backup.berth.io/command: " +
         json(post.dump()).dump() + "\nspec:\n  nodeSelector:\n    kubernetes.io/hostname: " + kNode1 +
         "\n  terminationGracePeriodSeconds: 1\n  containers:\n    - name: main\n      image: " + kSqliteImage +
         "\n      command: [\"/bin/sh\", \"-c\", " + json(std::string(kWriterScript)).dump() +
         "]\n      volumeMounts:\n        - name: data\n          mountPath: /data\n"
         "  volumes:\n    - name: data\n      persistentVolumeClaim:\n        claimName: data\n";
}

TEST_F(BackupRestoreUpTest, AWorkloadOfALostNodeComesBackOnAnotherFromItsBackup) {
  const absl::Time start = absl::Now();
  StartUp({"--nodes", "2", "--pod-cidr", "10.213.11.0/24", "--node-monitor-grace-period", kGrace, "--backup-location",
           repo_});
  ASSERT_FALSE(HasFatalFailure());
  auto [import_rc, import_out] = RunBerth({"image", "import", archive_});
  ASSERT_EQ(import_rc, 0) << import_out;
  ASSERT_TRUE(Eventually(
      [&] {
        const json l = Get("/apis/backup.berth.io/v1/backupstoragelocations/default");
        return l.is_object() && l.value("status", json::object()).value("phase", "") == "Available";
      },
      absl::Seconds(60)))
      << Get("/apis/backup.berth.io/v1/backupstoragelocations/default").dump();

  // 1. The workload on node 1: its data written, its writer writing.
  Apply(ShopManifest());
  ASSERT_TRUE(Eventually([&] { return AllRunning("shop", "db"); }, absl::Seconds(180))) << NsPod("shop", "db").dump();
  EXPECT_EQ(NsPod("shop", "db")["spec"]["nodeName"], kNode1);
  std::string sha;
  ASSERT_TRUE(Eventually(
      [&] {
        auto [rc, out] = Exec("shop", "db", {"cat", "/data/blob.sha256"});
        if (rc != 0 || !absl::StrContains(out, "/data/blob")) return false;
        sha = out;
        return Rows("shop", "db") > 0;
      },
      absl::Seconds(120)))
      << sha;
  const std::string checksum = std::string(absl::StripAsciiWhitespace(sha)).substr(0, 64);
  ASSERT_EQ(checksum.size(), 64u) << sha;
  // The live writer's rows sit in its log until a checkpoint.
  EXPECT_NE(ExecOk("shop", "db", {"stat", "-c", "%s", "/data/db-wal"}), "0\n");
  std::cout << "data written on " << kNode1 << " (sha256 " << checksum << ") "
            << absl::FormatDuration(absl::Now() - start) << " after start\n";

  // 2. The backup, with the writer writing.
  const absl::Time backup_start = absl::Now();
  {
    auto [rc, out] =
        RunBerth({"backup", "create", "shop-1", "--include-namespaces", "shop", "--wait"}, absl::Seconds(300));
    ASSERT_EQ(rc, 0) << out;
  }
  const absl::Duration backup_took = absl::Now() - backup_start;
  const json backup = Get("/apis/backup.berth.io/v1/backups/shop-1");
  ASSERT_EQ(backup["status"]["phase"], "Completed") << backup.dump(2);
  ASSERT_EQ(backup["status"]["volumes"].size(), 1u) << backup.dump(2);
  const json volume = backup["status"]["volumes"][0];
  EXPECT_EQ(volume["namespace"], "shop");
  EXPECT_EQ(volume["persistentVolumeClaim"], "data");
  EXPECT_EQ(volume["node"], kNode1);
  EXPECT_EQ(volume["phase"], "Completed");
  // Random data does not compress or deduplicate: every byte is new.
  EXPECT_GE(volume["bytesAdded"].get<int64_t>(), 256 * kMiB) << volume.dump();
  EXPECT_GE(volume["bytesRead"].get<int64_t>(), volume["bytesAdded"].get<int64_t>()) << volume.dump();
  std::cout << "backup shop-1 Completed in " << absl::FormatDuration(backup_took) << ": read "
            << volume["bytesRead"].get<int64_t>() << " bytes, added " << volume["bytesAdded"].get<int64_t>() << "\n";
  {
    auto [rc, out] = RunBerth({"backup", "verify", "shop-1"});
    EXPECT_EQ(rc, 0) << out;
    EXPECT_THAT(out, HasSubstr("OK"));
  }
  // Both hooks ran: the pre hook's checkpoint was not held off by the
  // writer, and the post hook ran after the snapshot.
  const std::string pre_answer = ExecOk("shop", "db", {"cat", "/data/pre-hook"});
  const std::vector<std::string> pre_lines = absl::StrSplit(absl::StripAsciiWhitespace(pre_answer), '\n');
  ASSERT_EQ(pre_lines.size(), 2u) << pre_answer;
  // Not busy: the checkpoint got the writer's lock and ran.
  EXPECT_TRUE(absl::StartsWith(pre_lines[0], "0|")) << pre_answer;
  int64_t rows_at_pre_hook = -1;
  ASSERT_TRUE(absl::SimpleAtoi(pre_lines[1], &rows_at_pre_hook)) << pre_answer;
  EXPECT_GT(rows_at_pre_hook, 0);
  EXPECT_THAT(ExecOk("shop", "db", {"cat", "/data/post-hook"}), Not(::testing::IsEmpty()));
  const int64_t rows_after_backup = Rows("shop", "db");
  EXPECT_GT(rows_after_backup, 0);

  // 3. Node 1 is lost: its agent and its berth-csi stopped, its pool image
  // gone. The pool's filesystem stays mounted (the stopped driver holds it
  // and node 1's pod still writes to its volume), reachable only through
  // node 1, which nothing may use any more.
  const pid_t agent = ChildPid(kNode1, "agent.pid", std::string("--node=") + kNode1);
  const pid_t driver = ChildPid(kNode1, "berth-csi.pid", std::string("--node-id=") + kNode1);
  ASSERT_GT(agent, 0);
  ASSERT_GT(driver, 0);
  const absl::Time lost = absl::Now();
  Stop(agent);
  ASSERT_FALSE(HasFatalFailure());
  Stop(driver);
  ASSERT_FALSE(HasFatalFailure());
  const std::string pool_image = data_ + "/nodes/" + kNode1 + "/pool.img";
  ASSERT_TRUE(fs::exists(pool_image));
  ASSERT_TRUE(fs::remove(pool_image));
  ASSERT_TRUE(
      Eventually([&] { return ReadyOf(kNode1) == "Unknown" && Tainted(kNode1, "NoExecute"); }, absl::Seconds(12 + 20)))
      << Get(std::string("/api/v1/nodes/") + kNode1).dump();
  std::cout << "node " << kNode1 << " Unknown and tainted " << absl::FormatDuration(absl::Now() - lost)
            << " after its agent stopped\n";
  EXPECT_EQ(ReadyOf(kNode2), "True");

  // 4. The restore onto node 2, into namespace shop2.
  const absl::Time restore_start = absl::Now();
  {
    auto [rc, out] = RunBerth({"restore", "create", "shop-back", "--from-backup", "shop-1", "--namespace-mappings",
                               "shop:shop2", "--target-node", kNode2, "--wait"},
                              absl::Seconds(300));
    ASSERT_EQ(rc, 0) << out << "\n" << RunBerth({"restore", "describe", "shop-back"}).second;
  }
  const json restore = Get("/apis/backup.berth.io/v1/restores/shop-back");
  ASSERT_EQ(restore["status"]["phase"], "Completed") << restore.dump(2);
  EXPECT_EQ(restore["status"].value("errors", int64_t{0}), 0) << restore.dump(2);
  EXPECT_EQ(restore["status"]["progress"]["bytesDone"], restore["status"]["progress"]["totalBytes"]) << restore.dump(2);
  EXPECT_EQ(restore["status"]["progress"]["itemsRestored"], restore["status"]["progress"]["totalItems"])
      << restore.dump(2);
  ASSERT_TRUE(Eventually([&] { return AllRunning("shop2", "db"); }, absl::Seconds(180))) << NsPod("shop2", "db").dump();
  const absl::Duration restore_took = absl::Now() - restore_start;
  EXPECT_EQ(NsPod("shop2", "db")["spec"]["nodeName"], kNode2);
  // The claim's volume is on node 2's pool.
  const json claim = NsClaim("shop2", "data");
  ASSERT_EQ(claim["status"]["phase"], "Bound") << claim.dump();
  const json pv = Get("/api/v1/persistentvolumes/" + claim["spec"]["volumeName"].get<std::string>());
  EXPECT_THAT(pv["spec"]["nodeAffinity"].dump(), HasSubstr(kNode2)) << pv.dump();
  EXPECT_THAT(pv["spec"]["nodeAffinity"].dump(), Not(HasSubstr(kNode1))) << pv.dump();
  std::cout << "restored onto " << kNode2 << ", pod Running " << absl::FormatDuration(restore_took)
            << " after the restore was created\n";

  // 5. The data as the backup took it.
  EXPECT_EQ(ExecOk("shop2", "db", {"sha256sum", "/data/blob"}), sha);
  EXPECT_EQ(ExecOk("shop2", "db", {"sqlite3", "-cmd", ".timeout 10000", "/data/db", "PRAGMA integrity_check"}), "ok\n");
  // The pre hook ran before the snapshot (its answer is in the volume), the
  // post hook after it (its mark is not); every row checkpointed by the pre
  // hook is there, and the restored writer goes on inserting.
  EXPECT_EQ(ExecOk("shop2", "db", {"cat", "/data/pre-hook"}), pre_answer);
  EXPECT_NE(Exec("shop2", "db", {"test", "-e", "/data/post-hook"}).first, 0);
  const int64_t restored_rows = Rows("shop2", "db");
  EXPECT_GT(restored_rows, 0);
  // Row ids count up from 1 on node 1 and the restored writer appends past
  // the largest: rows 1..N of the pre hook's count are node 1's, all there.
  EXPECT_EQ(ExecOk("shop2", "db",
                   {"sqlite3", "-cmd", ".timeout 10000", "/data/db",
                    "select count(*) from t where id <= " + std::to_string(rows_at_pre_hook)}),
            std::to_string(rows_at_pre_hook) + "\n");
  std::cout << restored_rows << " rows in the restored database (" << rows_at_pre_hook << " at the pre hook, "
            << rows_after_backup << " on node 1 after the backup); total " << absl::FormatDuration(absl::Now() - start)
            << "\n";
}

}  // namespace
}  // namespace berth::testing
