// `berth up` running pods for real (root; containerd, runc, CNI plugins and
// berth's images): berth's containerd per node, pods through the CLI with
// claims, logs and exec, pod-to-pod traffic by pod IP, exit codes, graceful
// deletion with a SIGTERM trap writing to the volume, kill -9 and restart,
// SIGTERM leaving pods running, the examples of examples/ for real, images
// imported several to an archive, an existing runtime through
// --container-runtime-endpoint, and `berth down` leaving no container, shim,
// network namespace, veth, bridge or mount behind.
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_replace.h"
#include "common/testing/eventually.h"
#include "common/testing/subprocess.h"
#include "cri/containerd.h"
#include "cri/runtime.h"
#include "cri/testing/containerd.h"
#include "driver/testing/sandbox.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "http/api_client.h"
#include "nlohmann/json.hpp"
#include "up_fixture.h"

namespace berth::testing {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;
namespace fs = std::filesystem;

constexpr char kNode[] = "podnode";

class BerthUpPodsTest : public BerthUpFixture {
 protected:
  void SetUp() override {
    BerthUpFixture::SetUp();
    if (IsSkipped()) return;
    if (std::string why = cri::testing::TestContainerd::Unavailable(); !why.empty()) GTEST_SKIP() << why;
    node_ = kNode;
    veths_before_ = Veths();
    with_runtime_ = true;
  }
  void TearDown() override {
    if (with_runtime_) {
      StopUp(SIGTERM);
      // The documented way to stop everything berth started.
      auto [rc, out] = RunBerth({"down"});
      EXPECT_EQ(rc, 0) << out;
      cri::ContainerdSetup setup{.dir = data_ + "/containerd/" + kNode, .pod_cidr = ""};
      EXPECT_TRUE(Shims().empty()) << "shims left";
      EXPECT_FALSE(fs::exists("/sys/class/net/" + setup.Bridge())) << "bridge left";
      EXPECT_TRUE(sandbox_.Mounts().empty()) << "mounts left: " << sandbox_.Mounts().front();
      // Network namespaces are bind mounts under containerd's state directory
      // (so the check above covers them); a veth of this test's pods would
      // outlive its bridge without a master. Those of other tests running at
      // the same time are attached to their own bridges.
      std::vector<std::string> orphans;
      EXPECT_TRUE(Eventually(
          [&] {
            orphans.clear();
            for (const auto& veth : Veths()) {
              if (veths_before_.count(veth) == 0 && !fs::exists("/sys/class/net/" + veth + "/master"))
                orphans.push_back(veth);
            }
            return orphans.empty();
          },
          absl::Seconds(5)))
          << "veth left: " << orphans.front();
      for (pid_t pid : Shims()) ::kill(pid, SIGKILL);
    }
    BerthUpFixture::TearDown();
  }

  // berth up with its own containerd (this pod range unless `extra` says).
  void StartUp(const std::vector<std::string>& extra = {"--pod-cidr", "10.213.2.0/24"}) {
    BerthUpFixture::StartUp(extra);
  }
  void Apply(const std::string& yaml) {
    const std::string file = WriteFile("manifest-" + std::to_string(++manifests_) + ".yaml", yaml);
    Berth({"apply", "-f", file});
  }
  std::string Phase(const std::string& name) { return Pod(name).value("status", json::object()).value("phase", ""); }
  bool WaitPhase(const std::string& name, const std::string& phase, absl::Duration timeout = absl::Seconds(120)) {
    return Eventually([&] { return Phase(name) == phase; }, timeout);
  }
  std::string Logs(const std::string& pod) {
    auto [rc, out] = RunBerth({"logs", pod});
    EXPECT_EQ(rc, 0) << out;
    return out;
  }
  std::vector<pid_t> Shims() {
    cri::ContainerdSetup setup{.dir = data_ + "/containerd/" + kNode, .pod_cidr = ""};
    std::vector<pid_t> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("/proc", ec)) {
      const pid_t pid = static_cast<pid_t>(std::atoi(e.path().filename().c_str()));
      if (pid <= 0) continue;
      std::string cmd = ReadWholeFile(e.path() / "cmdline");  // "" for a process gone meanwhile
      std::replace(cmd.begin(), cmd.end(), '\0', ' ');
      if (absl::StrContains(cmd, "containerd-shim") && absl::StrContains(cmd, setup.Socket())) out.push_back(pid);
    }
    return out;
  }
  static std::set<std::string> Veths() {
    std::set<std::string> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("/sys/class/net", ec)) {
      if (absl::StartsWith(e.path().filename().string(), "veth")) out.insert(e.path().filename().string());
    }
    return out;
  }
  // The node's sandboxes straight from its containerd (or from `endpoint`):
  // pod uid → ids.
  std::map<std::string, std::vector<std::string>> Sandboxes(std::string endpoint = "") {
    std::map<std::string, std::vector<std::string>> out;
    if (endpoint.empty()) endpoint = "unix://" + data_ + "/containerd/" + kNode + "/containerd.sock";
    auto rt = cri::GrpcRuntime::Connect(endpoint, {});
    if (!rt.ok()) return out;
    auto list = (*rt)->ListPodSandbox({});
    if (!list.ok()) return out;
    for (const auto& sb : *list) {
      if (sb.state() == cri::v1::SANDBOX_READY) out[sb.labels().at("io.kubernetes.pod.uid")].push_back(sb.id());
    }
    return out;
  }

  static std::string PodYaml(const std::string& name, const std::string& policy, const std::string& script,
                             const std::string& claim = "") {
    std::string y = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name + "\nspec:\n  restartPolicy: " + policy +
                    "\n  terminationGracePeriodSeconds: 10\n  containers:\n    - name: main\n      image: " +
                    std::string(cri::kToolboxImage) + "\n      command: [\"/bin/sh\", \"-c\", " + json(script).dump() +
                    "]\n";
    if (!claim.empty()) {
      y += "      volumeMounts:\n        - name: data\n          mountPath: /data\n  volumes:\n    - name: data\n"
           "      persistentVolumeClaim:\n        claimName: " +
           claim + "\n";
    }
    return y;
  }
  static std::string ClaimYaml(const std::string& name) {
    return "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: " + name +
           "\nspec:\n  accessModes: [ReadWriteOnce]\n  resources:\n    requests:\n      storage: 64Mi\n";
  }

  // An archive of two images: copies of berth's pause and toolbox images
  // under the names berth.test/pause-copy:1 and berth.test/toolbox-copy:1
  // (an OCI layout with Docker's manifest.json, as berth's own archives).
  std::string TwoImageArchive() {
    const std::string d = sandbox_.Join("two-images"), out = sandbox_.Join("two-images.tar");
    const std::string images = BERTH_IMAGES_DIR;
    const std::string script =
        "set -e; d='" + d + "'; mkdir -p $d/a $d/b $d/out/blobs/sha256; tar xf '" + images +
        "/pause.tar' -C $d/a; "
        "tar xf '" +
        images +
        "/toolbox.tar' -C $d/b; cp $d/a/blobs/sha256/* $d/b/blobs/sha256/* $d/out/blobs/sha256/; "
        "cp $d/a/oci-layout $d/out/; "
        "jq -c -s '{schemaVersion: 2, mediaType: .[0].mediaType, manifests: ["
        "(.[0].manifests[0] | .annotations[\"io.containerd.image.name\"] = \"berth.test/pause-copy:1\"), "
        "(.[1].manifests[0] | .annotations[\"io.containerd.image.name\"] = \"berth.test/toolbox-copy:1\")]}' "
        "$d/a/index.json $d/b/index.json > $d/out/index.json; "
        "jq -c -s '[(.[0][0] | .RepoTags = [\"berth.test/pause-copy:1\"]), "
        "(.[1][0] | .RepoTags = [\"berth.test/toolbox-copy:1\"])]' $d/a/manifest.json $d/b/manifest.json "
        "> $d/out/manifest.json; tar cf '" +
        out + "' -C $d/out oci-layout index.json manifest.json blobs";
    Subprocess sh({"/bin/bash", "-c", script}, sandbox_.Join("two-images.log"));
    auto rc = sh.Wait(absl::Seconds(60));
    EXPECT_EQ(rc.value_or(-1), 0) << sh.Output();
    return out;
  }

  std::set<std::string> veths_before_;
  int manifests_ = 0;
  bool with_runtime_ = false;  // set once SetUp found a runtime to test
};

TEST_F(BerthUpPodsTest, PodsRunWithTheirClaimsTalkToEachOtherAndAnswerLogsAndExec) {
  StartUp();
  // A pod writes through its claim; a later pod reads it.
  Apply(ClaimYaml("data") + "---\n" + PodYaml("writer", "Never", "echo persisted > /data/file; echo wrote", "data"));
  ASSERT_TRUE(WaitPhase("writer", "Succeeded")) << Pod("writer").dump();
  EXPECT_EQ(Logs("writer"), "wrote\n");
  Apply(PodYaml("reader", "Never", "cat /data/file", "data"));
  ASSERT_TRUE(WaitPhase("reader", "Succeeded")) << Pod("reader").dump();
  EXPECT_EQ(Logs("reader"), "persisted\n");

  // exit 3 with restartPolicy Never: Failed, exit code 3.
  Apply(PodYaml("three", "Never", "exit 3"));
  ASSERT_TRUE(WaitPhase("three", "Failed")) << Pod("three").dump();
  EXPECT_EQ(Pod("three")["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"], 3);

  // A server, reached from another pod by its pod IP.
  Apply(PodYaml("web", "Always",
                "trap 'exit 0' TERM; mkdir -p /www; echo hello from $(hostname) > /www/index.html; echo serving; "
                "httpd -f -p 8080 -h /www & wait"));
  ASSERT_TRUE(WaitPhase("web", "Running")) << Pod("web").dump();
  const std::string ip = Pod("web")["status"].value("podIP", "");
  ASSERT_TRUE(absl::StartsWith(ip, "10.213.2.")) << Pod("web").dump();
  EXPECT_EQ(Pod("web")["status"]["podIPs"][0]["ip"], ip);
  Apply(PodYaml("client", "OnFailure", "wget -qO- http://" + ip + ":8080/"));
  ASSERT_TRUE(WaitPhase("client", "Succeeded")) << Pod("client").dump();
  EXPECT_EQ(Logs("client"), "hello from web\n");
  EXPECT_EQ(Logs("web"), "serving\n");

  // exec: output and exit code come back.
  auto [rc, out] = RunBerth({"exec", "web", "--", "cat", "/www/index.html"});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "hello from web\n");
  EXPECT_EQ(RunBerth({"exec", "web", "--", "/bin/sh", "-c", "exit 4"}).first, 4);
  // logs of an unknown pod: the API's NotFound.
  auto [logs_rc, logs_out] = RunBerth({"logs", "nope"});
  EXPECT_NE(logs_rc, 0);
  EXPECT_THAT(logs_out, HasSubstr("NotFound"));

  // Images: berth's are there; an unknown image cannot be pulled offline.
  auto [ls_rc, ls_out] = RunBerth({"image", "ls"});
  EXPECT_EQ(ls_rc, 0) << ls_out;
  EXPECT_THAT(ls_out, HasSubstr(cri::kToolboxImage));
  EXPECT_THAT(ls_out, HasSubstr(cri::kPauseImage));
  Apply(
      "apiVersion: v1\nkind: Pod\nmetadata:\n  name: nothere\nspec:\n  containers:\n    - name: main\n"
      "      image: registry.invalid/none:1\n");
  ASSERT_TRUE(Eventually(
      [&] {
        const json c = Pod("nothere").value("status", json::object()).value("containerStatuses", json::array());
        if (c.empty() || !c[0]["state"].contains("waiting")) return false;
        const std::string reason = c[0]["state"]["waiting"].value("reason", "");
        return reason == "ErrImagePull" || reason == "ImagePullBackOff";
      },
      absl::Seconds(120)))
      << Pod("nothere").dump();
}

TEST_F(BerthUpPodsTest, ASigtermTrapWritesItsLastLineToTheVolumeBeforeItGoes) {
  StartUp();
  Apply(ClaimYaml("journal") + "---\n" +
        PodYaml("graceful", "Always",
                "trap 'echo last line >> /data/log; exit 0' TERM; echo first line >> /data/log; "
                "while true; do sleep 1; done",
                "journal"));
  ASSERT_TRUE(WaitPhase("graceful", "Running")) << Pod("graceful").dump();
  // berth delete waits until the pod is gone: containers stopped, volume
  // unpublished, then the object removed.
  auto [rc, out] = RunBerth({"delete", "pod", "graceful"});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_TRUE(Pod("graceful").is_null());
  Apply(PodYaml("check", "Never", "cat /data/log", "journal"));
  ASSERT_TRUE(WaitPhase("check", "Succeeded")) << Pod("check").dump();
  EXPECT_EQ(Logs("check"), "first line\nlast line\n");
}

TEST_F(BerthUpPodsTest, KillNineAndRestartKeepOneSandboxPerPod) {
  StartUp();
  Apply(ClaimYaml("data") + "---\n" +
        PodYaml("one", "Always", "trap 'exit 0' TERM; while true; do sleep 1; done", "data") + "---\n" +
        PodYaml("two", "Always", "trap 'exit 0' TERM; while true; do sleep 1; done"));
  ASSERT_TRUE(WaitPhase("one", "Running") && WaitPhase("two", "Running")) << Pod("one").dump() << Pod("two").dump();
  const auto before = Sandboxes();
  ASSERT_EQ(before.size(), 2u);
  StopUp(SIGKILL);
  // The containers outlive berth up (in their shims).
  EXPECT_EQ(Shims().size(), 2u);
  StartUp();
  ASSERT_TRUE(WaitPhase("one", "Running") && WaitPhase("two", "Running"));
  // Force-delete one (kubectl delete --grace-period=0 --force).
  auto r = client_->Call("DELETE", "/api/v1/namespaces/default/pods/two", R"({"gracePeriodSeconds":0})");
  ASSERT_TRUE(r.ok() && r->code == 200) << (r.ok() ? r->body : r.status().ToString());
  const std::string one = Pod("one")["metadata"]["uid"];
  ASSERT_TRUE(Eventually([&] { return Sandboxes().size() == 1; }, absl::Seconds(60)));
  const auto after = Sandboxes();
  ASSERT_EQ(after.count(one), 1u);
  EXPECT_EQ(after.at(one), before.at(one));  // adopted, not made again
  EXPECT_EQ(Pod("one")["status"]["containerStatuses"][0]["restartCount"], 0);
}

TEST_F(BerthUpPodsTest, SigtermLeavesRunningPodsAloneAndWithoutPodsNoShim) {
  StartUp();
  Apply(PodYaml("stays", "Always", "trap 'exit 0' TERM; echo started >> /tmp/starts; while true; do sleep 1; done"));
  ASSERT_TRUE(WaitPhase("stays", "Running")) << Pod("stays").dump();
  const auto before = Sandboxes();
  ASSERT_EQ(before.size(), 1u);
  StopUp(SIGTERM);
  // berth up and its containerd are gone; the pod's shim and container run on.
  EXPECT_EQ(Shims().size(), 1u);
  StartUp();
  ASSERT_TRUE(WaitPhase("stays", "Running"));
  EXPECT_EQ(Sandboxes(), before);
  EXPECT_EQ(Pod("stays")["status"]["containerStatuses"][0]["restartCount"], 0);
  auto [rc, out] = RunBerth({"exec", "stays", "--", "cat", "/tmp/starts"});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "started\n");  // the same container, never started again
  // Without pods, stopping berth up leaves no shim of its data directory.
  ASSERT_EQ(RunBerth({"delete", "pod", "stays"}).first, 0);
  ASSERT_TRUE(Eventually([&] { return Sandboxes().empty(); }, absl::Seconds(60)));
  StopUp(SIGTERM);
  EXPECT_TRUE(Shims().empty());
}

// README command 1: `berth up`, then the examples of examples/ run for real.
TEST_F(BerthUpPodsTest, TheExamplesRunForReal) {
  StartUp();
  const std::string examples = std::string(BERTH_SOURCE_DIR) + "/examples/";
  ASSERT_EQ(RunBerth({"apply", "-f", examples + "claim-and-pod.yaml"}).first, 0);
  ASSERT_TRUE(WaitPhase("app", "Running")) << Pod("app").dump();
  auto [rc, out] = RunBerth({"exec", "app", "--", "cat", "/data/log"});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "started app\n");
  ASSERT_EQ(RunBerth({"apply", "-f", examples + "snapshot-and-restore.yaml"}).first, 0);
  ASSERT_EQ(RunBerth({"apply", "-f", examples + "ephemeral.yaml"}).first, 0);
  ASSERT_TRUE(WaitPhase("restored-app", "Running")) << Pod("restored-app").dump();
  ASSERT_TRUE(WaitPhase("scratch-app", "Running")) << Pod("scratch-app").dump();
  auto [rc2, restored] = RunBerth({"exec", "restored-app", "--", "cat", "/data/log"});
  EXPECT_EQ(rc2, 0) << restored;
  EXPECT_THAT(restored, HasSubstr("started restored-app\n"));
  auto [rc3, scratch] = RunBerth({"exec", "scratch-app", "--", "cat", "/scratch/log"});
  EXPECT_EQ(rc3, 0) << scratch;
  EXPECT_EQ(scratch, "started scratch-app\n");
  ASSERT_EQ(RunBerth({"apply", "-f", examples + "expand.yaml"}).first, 0);
  // Every pod has its own address on the node's network.
  std::set<std::string> ips;
  for (const char* pod : {"app", "restored-app", "scratch-app"}) ips.insert(Pod(pod)["status"].value("podIP", ""));
  EXPECT_EQ(ips.size(), 3u);
  EXPECT_EQ(ips.count(""), 0u);
  // The README's clean-up; the SIGTERM traps make it quick.
  ASSERT_EQ(RunBerth({"delete", "-f", examples + "ephemeral.yaml"}).first, 0);
  ASSERT_EQ(RunBerth({"delete", "-f", examples + "snapshot-and-restore.yaml"}).first, 0);
  ASSERT_EQ(RunBerth({"delete", "-f", examples + "claim-and-pod.yaml"}).first, 0);
  EXPECT_TRUE(Eventually([&] { return Sandboxes().empty(); }, absl::Seconds(60)));
  auto pvs = client_->Call("GET", "/api/v1/persistentvolumes");
  EXPECT_TRUE(Eventually(
      [&] {
        pvs = client_->Call("GET", "/api/v1/persistentvolumes");
        return pvs.ok() && pvs->code == 200 && json::parse(pvs->body)["items"].empty();
      },
      absl::Seconds(90)))
      << (pvs.ok() ? pvs->body : "");
}

TEST_F(BerthUpPodsTest, ImagesImportSeveralToAnArchiveAndGo) {
  StartUp();
  auto [rc, out] = RunBerth({"image", "import", TwoImageArchive()});
  ASSERT_EQ(rc, 0) << out;
  auto [ls_rc, ls] = RunBerth({"image", "ls"});
  EXPECT_EQ(ls_rc, 0) << ls;
  EXPECT_THAT(ls, HasSubstr("berth.test/pause-copy:1"));
  EXPECT_THAT(ls, HasSubstr("berth.test/toolbox-copy:1"));
  // A pod runs the imported image (IfNotPresent: a tag other than latest).
  Apply(absl::StrReplaceAll(PodYaml("copy", "Never", "echo from the copy"),
                            {{cri::kToolboxImage, "berth.test/toolbox-copy:1"}}));
  ASSERT_TRUE(WaitPhase("copy", "Succeeded")) << Pod("copy").dump();
  EXPECT_EQ(Logs("copy"), "from the copy\n");
  auto [rm_rc, rm] = RunBerth({"image", "rm", "berth.test/pause-copy:1", "berth.test/toolbox-copy:1"});
  EXPECT_EQ(rm_rc, 0) << rm;
  // The copies share their images with berth's: only the names go (CRI's
  // RemoveImage would take every name of the image, berth's pause too).
  EXPECT_THAT(rm, HasSubstr("untagged berth.test/toolbox-copy:1"));
  ls = RunBerth({"image", "ls"}).second;
  EXPECT_THAT(ls, Not(HasSubstr("berth.test/")));
  EXPECT_THAT(ls, HasSubstr(cri::kToolboxImage));
  EXPECT_THAT(ls, HasSubstr(cri::kPauseImage));
  // imagePullPolicy Never and the image gone: ErrImageNeverPull.
  Apply(
      "apiVersion: v1\nkind: Pod\nmetadata:\n  name: never\nspec:\n  containers:\n    - name: main\n"
      "      image: berth.test/toolbox-copy:1\n      imagePullPolicy: Never\n");
  EXPECT_TRUE(Eventually(
      [&] {
        const json c = Pod("never").value("status", json::object()).value("containerStatuses", json::array());
        return !c.empty() && c[0]["state"].contains("waiting") &&
               c[0]["state"]["waiting"].value("reason", "") == "ErrImageNeverPull";
      },
      absl::Seconds(60)))
      << Pod("never").dump();
}

// --container-runtime-endpoint: a CRI runtime berth did not start (here a
// containerd of the test's own) runs the pods; berth starts none.
TEST_F(BerthUpPodsTest, AnExistingRuntimeThroughContainerRuntimeEndpoint) {
  cri::testing::TestContainerd existing("10.213.3.0/24");
  ASSERT_TRUE(existing.Start().ok()) << existing.Log();
  StartUp({"--container-runtime-endpoint", existing.setup().Endpoint()});
  EXPECT_FALSE(fs::exists(data_ + "/containerd/" + kNode));
  Apply(ClaimYaml("data") + "---\n" +
        PodYaml("outside", "Always",
                "trap 'exit 0' TERM; echo hi > /data/f; echo up; "
                "while true; do sleep 1; done",
                "data"));
  ASSERT_TRUE(WaitPhase("outside", "Running")) << Pod("outside").dump();
  EXPECT_TRUE(absl::StartsWith(Pod("outside")["status"].value("podIP", ""), "10.213.3.")) << Pod("outside").dump();
  EXPECT_TRUE(Eventually([&] { return Logs("outside") == "up\n"; }, absl::Seconds(10)));
  auto [rc, out] = RunBerth({"exec", "outside", "--", "cat", "/data/f"});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "hi\n");
  // berth's sandboxes carry its node label; deleting the pod removes them.
  cri::v1::PodSandboxFilter ours;
  (*ours.mutable_label_selector())["berth.io/node"] = kNode;
  auto listed = existing.runtime().ListPodSandbox(ours);
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(listed->size(), 1u);
  ASSERT_EQ(RunBerth({"delete", "pod", "outside"}).first, 0);
  EXPECT_TRUE(Eventually([&] { return Sandboxes(existing.setup().Endpoint()).empty(); }, absl::Seconds(60)));
  StopUp(SIGTERM);
}

}  // namespace
}  // namespace berth::testing
