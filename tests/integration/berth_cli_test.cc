// The berth CLI's kubectl shapes against a running `berth up` (root; the
// storage side only, --runtime none): global flags anywhere, get of several
// kinds with selectors and every output format, watch, describe with
// events, patch, edit, wait, delete --all, api-resources, version, kubectl's
// error text and exit codes, apply's progress on a terminal, and berth up's
// own progress. JSON output is parsed and compared as JSON.
#include <fstream>
#include <set>

#include "absl/strings/str_split.h"
#include "api/codec.h"
#include "commands.h"
#include "common/fs.h"
#include "common/strings.h"
#include "gmock/gmock.h"
#include "up_fixture.h"

namespace berth::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

using CliResult = CommandResult;

class BerthCliTest : public BerthUpFixture {
 protected:
  // `berth ARGS...` with stdout and stderr apart; `env` added ("K=V").
  CliResult Cli(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
    std::vector<std::string> argv = {BERTH_BINARY};
    argv.insert(argv.end(), args.begin(), args.end());
    return Exec(argv, env);
  }
  CliResult Exec(const std::vector<std::string>& argv, const std::vector<std::string>& env = {}) {
    return RunCommand(sandbox_.path(), argv, env);
  }
  // A command expected to succeed; its stdout.
  std::string Ok(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
    CliResult r = Cli(args, env);
    EXPECT_EQ(r.exit_code, 0) << r;
    return r.out;
  }
  json OkJson(const std::vector<std::string>& args) {
    const std::string out = Ok(args);
    json j = json::parse(out, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << out;
    return j;
  }
  static std::set<std::string> Names(const json& list) {
    std::set<std::string> out;
    for (const auto& i : list["items"])
      out.insert(i["kind"].get<std::string>() + "/" + i["metadata"]["name"].get<std::string>());
    return out;
  }
};

constexpr char kClaims[] = R"(apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: a, labels: {app: web}}
spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 2Gi}}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: b}
spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}
)";

TEST_F(BerthCliTest, UpReportsProgressAndGlobalFlagsGoAnywhere) {
  api_address_ = "127.0.0.1:0";
  ASSERT_NO_FATAL_FAILURE(StartUp({"--runtime", "none"}));
  const std::string up = up_->Output();
  EXPECT_THAT(up, HasSubstr("berth up: first start in " + data_));
  EXPECT_THAT(
      up,
      HasSubstr("node testnode: starting its node agent and berth-csi, which makes its 1Gi allocated XFS pool image"));
  EXPECT_THAT(up, HasSubstr("berth up: node testnode: berth-csi registered, its pool is ready"));
  EXPECT_THAT(up, HasSubstr("export KUBECONFIG=" + data_ + "/kubeconfig"));
  // Registration is reported before "berth is up".
  EXPECT_LT(up.find("berth-csi registered"), up.find("berth is up"));

  // `up` and `get` with --data-dir after the command.
  CliResult second = Cli({"up", "--data-dir", data_, "--runtime", "none", "--csi-binary", BERTH_CSI_BINARY});
  EXPECT_EQ(second.exit_code, 1) << second;
  EXPECT_EQ(second.err, "error: another berth up is running on " + data_ + "\n");
  EXPECT_EQ(Ok({"get", "sc", "--data-dir", data_, "-o", "name"}), "storageclass.storage.k8s.io/berth-local\n");
  EXPECT_EQ(Ok({"--data-dir", data_, "get", "sc", "-o", "name"}), "storageclass.storage.k8s.io/berth-local\n");
  EXPECT_EQ(Ok({"get", "sc", "-o", "name", "--kubeconfig", data_ + "/kubeconfig"}),
            "storageclass.storage.k8s.io/berth-local\n");
  EXPECT_THAT(Ok({"version", "--data-dir", data_}), HasSubstr("Server Version: v1.30.0+berth-"));
  json version = OkJson({"version", "-o", "json", "--data-dir", data_});
  EXPECT_EQ(version["serverVersion"]["major"], "1");
  EXPECT_TRUE(version["clientVersion"].contains("gitVersion"));
}

TEST_F(BerthCliTest, GetListsKindsWithSelectorsInEveryOutputFormat) {
  ASSERT_NO_FATAL_FAILURE(StartUp({"--runtime", "none"}));
  const std::string D = data_;
  // An empty list is kubectl's List, compared structurally.
  EXPECT_EQ(OkJson({"get", "pvc", "-o", "json", "--data-dir", D}),
            json::parse(R"({"apiVersion":"v1","kind":"List","items":[],"metadata":{"resourceVersion":""}})"));
  CliResult none = Cli({"get", "pvc", "--data-dir", D});
  EXPECT_EQ(none.out, "");
  EXPECT_EQ(none.err, "No resources found in default namespace.\n");

  EXPECT_EQ(Ok({"apply", "-f", WriteFile("claims.yaml", kClaims), "--data-dir", D}),
            "persistentvolumeclaim/a created\npersistentvolumeclaim/b created\n");
  // Several kinds in one get, across namespaces.
  EXPECT_EQ(Names(OkJson({"get", "pvc,sc", "-A", "-o", "json", "--data-dir", D})),
            (std::set<std::string>{"PersistentVolumeClaim/a", "PersistentVolumeClaim/b", "StorageClass/berth-local"}));
  const std::string tables = Ok({"get", "pvc,sc", "--data-dir", D});
  EXPECT_THAT(tables, HasSubstr("\npersistentvolumeclaim/a "));
  EXPECT_THAT(tables, HasSubstr("\n\nNAME"));
  EXPECT_THAT(tables, HasSubstr("\nstorageclass.storage.k8s.io/berth-local "));
  EXPECT_THAT(Ok({"get", "pvc", "-A", "--data-dir", D}), ::testing::StartsWith("NAMESPACE   NAME "));
  EXPECT_THAT(Ok({"get", "pvc", "-o", "wide", "--data-dir", D}), HasSubstr("VOLUMEMODE"));
  // By name: the object itself, not a List.
  json one = OkJson({"get", "pvc", "a", "-o", "json", "--data-dir", D});
  EXPECT_EQ(one["kind"], "PersistentVolumeClaim");
  EXPECT_EQ(one, Claim("a"));
  EXPECT_EQ(Names(OkJson({"get", "pvc/a", "sc/berth-local", "-o", "json", "--data-dir", D})),
            (std::set<std::string>{"PersistentVolumeClaim/a", "StorageClass/berth-local"}));
  // Selectors, evaluated by the server.
  EXPECT_EQ(Ok({"get", "pvc", "-l", "app=web", "-o", "name", "--data-dir", D}), "persistentvolumeclaim/a\n");
  EXPECT_EQ(Ok({"get", "pvc", "-l", "app!=web", "-o", "name", "--data-dir", D}), "persistentvolumeclaim/b\n");
  EXPECT_EQ(Ok({"get", "pvc", "--field-selector", "metadata.name=b", "-o", "jsonpath={.items[*].metadata.name}",
                "--data-dir", D}),
            "b");
  EXPECT_EQ(OkJson({"get", "pvc", "-l", "nosuch=x", "-o", "json", "--data-dir", D})["items"], json::array());
  EXPECT_EQ(Ok({"get", "pvc", "-o", "jsonpath={range .items[*]}{.metadata.name}={.status.phase}{\"\\n\"}{end}",
                "--data-dir", D}),
            "a=Pending\nb=Pending\n");
  // custom-columns, sorted by size.
  EXPECT_EQ(Ok({"get", "pvc", "--sort-by", ".spec.resources.requests.storage", "-o",
                "custom-columns=NAME:.metadata.name,SIZE:.spec.resources.requests.storage", "--data-dir", D}),
            "NAME   SIZE\nb      1Gi\na      2Gi\n");
  // yaml reads back as the same objects.
  auto yaml = api::DecodeManifests(Ok({"get", "pvc", "-o", "yaml", "--data-dir", D}));
  ASSERT_TRUE(yaml.ok());
  ASSERT_EQ(yaml->size(), 2u);
  EXPECT_EQ(yaml->at(0), Claim("a"));

  // kubectl's errors and exit code 1.
  CliResult missing = Cli({"get", "pvc", "x", "--data-dir", D});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_EQ(missing.err, "Error from server (NotFound): persistentvolumeclaims \"x\" not found\n");
  EXPECT_EQ(Ok({"get", "pvc", "a", "x", "--ignore-not-found", "-o", "name", "--data-dir", D}),
            "persistentvolumeclaim/a\n");
  EXPECT_EQ(Ok({"get", "pvc", "--no-headers", "-o", "custom-columns=N:.metadata.name", "--data-dir", D}), "a\nb\n");
  CliResult partly = Cli({"get", "pvc", "a", "x", "-o", "name", "--data-dir", D});
  EXPECT_EQ(partly.exit_code, 1);
  EXPECT_EQ(partly.out, "persistentvolumeclaim/a\n");
  CliResult unknown = Cli({"get", "foo", "--data-dir", D});
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_EQ(unknown.err, "error: the server doesn't have a resource type \"foo\"\n");
  CliResult bad_flag = Cli({"get", "pvc", "--no-such-flag", "--data-dir", D});
  EXPECT_EQ(bad_flag.exit_code, 1);
  EXPECT_THAT(bad_flag.err, ::testing::StartsWith("error: "));
  EXPECT_EQ(Cli({"get", "--help"}).exit_code, 0);
  CliResult bad_output = Cli({"get", "pvc", "-o", "xml", "--data-dir", D});
  EXPECT_EQ(bad_output.exit_code, 1);
  EXPECT_THAT(bad_output.err, HasSubstr("error: unable to match a printer suitable for the output format \"xml\""));

  // A list longer than a page (500) is printed page by page as it arrives:
  // one header, every object once, in order.
  {
    std::string many = "apiVersion: v1\nkind: Namespace\nmetadata: {name: many}\n";
    for (int i = 0; i < 1234; ++i) {
      many += StrCat("---\napiVersion: v1\nkind: Secret\nmetadata: {name: s-", 10000 + i,
                     ", namespace: many}\nstringData: {k: v}\n");
    }
    const std::string file = sandbox_.Join("many.yaml");
    ASSERT_TRUE(WriteFileAtomic(file, many).ok());
    ASSERT_EQ(Cli({"apply", "-f", file, "--data-dir", D}).exit_code, 0);
  }
  const std::vector<std::string> rows =
      absl::StrSplit(Ok({"get", "secrets", "-n", "many", "--data-dir", D}), '\n', absl::SkipEmpty());
  ASSERT_EQ(rows.size(), 1u + 1234u);
  EXPECT_THAT(rows[0], ::testing::StartsWith("NAME "));
  for (int i = 0; i < 1234; ++i) {
    EXPECT_THAT(rows[1 + i], ::testing::StartsWith(StrCat("s-", 10000 + i, " "))) << i;
  }
  const std::vector<std::string> names =
      absl::StrSplit(Ok({"get", "secrets", "-n", "many", "-o", "name", "--data-dir", D}), '\n', absl::SkipEmpty());
  ASSERT_EQ(names.size(), 1234u);
  EXPECT_EQ(names.back(), "secret/s-11233");
}

TEST_F(BerthCliTest, DescribePatchEditWatchWaitAndDeleteAll) {
  ASSERT_NO_FATAL_FAILURE(StartUp({"--runtime", "none"}));
  const std::string D = data_;
  Ok({"apply", "-f", WriteFile("claims.yaml", kClaims), "--data-dir", D});

  // describe: the object and its events (the binder's WaitForFirstConsumer).
  ASSERT_TRUE(Eventually(
      [&] {
        return Cli({"describe", "pvc", "a", "--data-dir", D}).out.find("WaitForFirstConsumer") != std::string::npos;
      },
      absl::Seconds(30)))
      << Cli({"describe", "pvc", "a", "--data-dir", D});
  const std::string described = Ok({"describe", "pvc/a", "--data-dir", D});
  EXPECT_THAT(described, HasSubstr("Name:          a\n"));
  EXPECT_THAT(described, HasSubstr("Events:\n"));
  EXPECT_THAT(described,
              ::testing::ContainsRegex("\n  Type +Reason +Age +From +Message\n  ---- +------ +---- +---- +-------\n"
                                       "  Normal +WaitForFirstConsumer +[0-9]+s.* +waiting for first consumer"));

  // A watch sees a claim created after it started.
  Subprocess watch({BERTH_BINARY, "get", "pvc", "--watch-only", "-o", "name", "--data-dir", D},
                   sandbox_.Join("watch.log"));
  Ok({"apply", "-f", WriteFile("c.yaml", R"({"apiVersion":"v1","kind":"PersistentVolumeClaim","metadata":{"name":"c"},
      "spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"1Gi"}}}})"),
      "--data-dir", D});
  EXPECT_TRUE(Eventually(
      [&] {
        Ok({"patch", "pvc", "c", "--type", "merge", "-p",
            R"({"metadata":{"labels":{"n":")" + std::to_string(absl::ToUnixMicros(absl::Now())) + "\"}}}", "--data-dir",
            D});
        return watch.Output().find("persistentvolumeclaim/c") != std::string::npos;
      },
      absl::Seconds(20)))
      << watch.Output();
  EXPECT_THAT(watch.Output(), Not(HasSubstr("persistentvolumeclaim/a")));  // --watch-only: no initial list
  CliResult two_kinds = Cli({"get", "pvc,pv", "-w", "--data-dir", D});
  EXPECT_EQ(two_kinds.exit_code, 1);

  // patch: merge, JSON patch, strategic (the default); "(no change)".
  EXPECT_EQ(
      Ok({"patch", "pvc", "a", "--type", "merge", "-p", R"({"metadata":{"labels":{"tier":"gold"}}})", "--data-dir", D}),
      "persistentvolumeclaim/a patched\n");
  EXPECT_EQ(Ok({"patch", "pvc/a", "-p", R"({"metadata":{"labels":{"tier":"gold"}}})", "--data-dir", D}),
            "persistentvolumeclaim/a patched (no change)\n");
  EXPECT_EQ(Ok({"patch", "pvc", "a", "--type", "json", "-p",
                R"([{"op":"add","path":"/metadata/labels/zone","value":"z1"}])", "--data-dir", D}),
            "persistentvolumeclaim/a patched\n");
  EXPECT_EQ(Claim("a")["metadata"]["labels"], json::parse(R"({"app":"web","tier":"gold","zone":"z1"})"));

  // edit with $EDITOR; a rejected edit keeps a copy and exits 1.
  const std::string tmp = sandbox_.Join("edit-tmp");
  std::filesystem::create_directories(tmp);
  EXPECT_EQ(
      Ok({"edit", "pvc", "a", "--data-dir", D}, {"EDITOR=sed -i s/tier:\\ gold/tier:\\ silver/", "TMPDIR=" + tmp}),
      "persistentvolumeclaim/a edited\n");
  EXPECT_EQ(Claim("a")["metadata"]["labels"]["tier"], "silver");
  EXPECT_TRUE(std::filesystem::is_empty(tmp));
  CliResult renamed =
      Cli({"edit", "pvc", "a", "--data-dir", D}, {"EDITOR=sed -i s/name:\\ a$/name:\\ zz/", "TMPDIR=" + tmp});
  EXPECT_EQ(renamed.exit_code, 1) << renamed;
  EXPECT_THAT(renamed.err, HasSubstr("At least one of apiVersion, kind and name was changed"));
  EXPECT_THAT(renamed.err, HasSubstr("A copy of your changes has been stored to \"" + tmp + "/berth-edit-"));
  EXPECT_FALSE(std::filesystem::is_empty(tmp));
  EXPECT_EQ(Claim("a")["metadata"]["name"], "a");
  CliResult cancelled = Cli({"edit", "pvc", "a", "--data-dir", D}, {"EDITOR=true", "TMPDIR=" + tmp});
  EXPECT_EQ(cancelled.out, "Edit cancelled, no changes made.\n");

  // wait: a jsonpath met at once; a delete that does not come times out (exit 1).
  EXPECT_EQ(Ok({"wait", "pvc/a", "--for=jsonpath={.metadata.labels.tier}=silver", "--timeout", "10s", "--data-dir", D}),
            "persistentvolumeclaim/a condition met\n");
  CliResult timed_out = Cli({"wait", "pvc", "a", "--for=delete", "--timeout", "1s", "--data-dir", D});
  EXPECT_EQ(timed_out.exit_code, 1);
  EXPECT_THAT(timed_out.err, HasSubstr("error: timed out waiting for the condition on persistentvolumeclaims/a"));

  // api-resources, explain.
  const std::string resources = Ok({"api-resources", "-o", "name", "--data-dir", D});
  EXPECT_THAT(resources, HasSubstr("persistentvolumeclaims\n"));
  EXPECT_THAT(resources, HasSubstr("storageclasses.storage.k8s.io\n"));
  EXPECT_THAT(Ok({"api-resources", "--namespaced=false", "--data-dir", D}), Not(HasSubstr("persistentvolumeclaims")));
  EXPECT_THAT(Ok({"explain", "pvc.spec.storageClassName"}), HasSubstr("FIELD:    storageClassName <string>"));

  // delete --all, then nothing is left.
  CliResult deleted = Cli({"delete", "pvc", "--all", "--data-dir", D});
  EXPECT_EQ(deleted.exit_code, 0) << deleted;
  EXPECT_THAT(deleted.out, HasSubstr("persistentvolumeclaim \"a\" deleted\n"));
  EXPECT_THAT(deleted.out, HasSubstr("persistentvolumeclaim \"c\" deleted\n"));
  EXPECT_EQ(OkJson({"get", "pvc", "-o", "json", "--data-dir", D})["items"], json::array());
  CliResult again = Cli({"delete", "pvc", "a", "--data-dir", D});
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_EQ(again.err, "Error from server (NotFound): persistentvolumeclaims \"a\" not found\n");
  EXPECT_EQ(Cli({"delete", "pvc", "a", "--ignore-not-found", "--data-dir", D}).exit_code, 0);
}

TEST_F(BerthCliTest, ApplyShowsProgressOnATerminalOnly) {
  ASSERT_NO_FATAL_FAILURE(StartUp({"--runtime", "none"}));
  std::string manifests;
  for (int i = 0; i < 30; ++i) {
    manifests += "---\napiVersion: v1\nkind: Secret\nmetadata: {name: s-" + std::to_string(i) + "}\ndata: {k: dg==}\n";
  }
  const std::string file = WriteFile("many.yaml", manifests);
  // Not a terminal: kubectl's lines only.
  const std::string plain = Ok({"apply", "-f", file, "--data-dir", data_});
  EXPECT_EQ(CountOf(plain, " created\n"), 30u);
  EXPECT_THAT(plain, Not(HasSubstr("\r")));
  // A terminal (script(1) gives the command a pty): the status line, erased
  // before each result and gone at the end.
  const std::string cmd = std::string(BERTH_BINARY) + " apply -f " + file + " --data-dir " + data_;
  CliResult tty = Exec({"/usr/bin/script", "-qefc", cmd, "/dev/null"});
  EXPECT_EQ(tty.exit_code, 0) << tty;
  EXPECT_THAT(tty.out, HasSubstr("[1/30] applying"));
  EXPECT_THAT(tty.out, HasSubstr("[29/30] applying"));
  EXPECT_THAT(tty.out, HasSubstr("\r\033[Ksecret/s-29 unchanged"));
  EXPECT_EQ(CountOf(tty.out, " unchanged"), 30u);
}

// berth up --backup-location, the Schedule controller in berth up, and the
// backup commands end to end (a backup of nothing: no volumes to move).
TEST_F(BerthCliTest, BackupLocationSchedulesAndBackupCommands) {
  const std::string repo = sandbox_.Join("backups");
  ASSERT_NO_FATAL_FAILURE(StartUp({"--runtime", "none", "--backup-location", repo}));
  EXPECT_THAT(up_->Output(), HasSubstr("berth up: created a backup repository in " + repo +
                                       " (BackupStorageLocation default, the default location)"));
  json bsl = OkJson({"--data-dir", data_, "get", "bsl", "default", "-o", "json"});
  EXPECT_EQ(
      bsl["spec"],
      json({{"provider", "filesystem"}, {"config", {{"path", repo}}}, {"default", true}, {"accessMode", "ReadWrite"}}));

  // A schedule is Enabled by the controller berth up runs.
  const std::string schedule = sandbox_.Join("schedule.yaml");
  std::ofstream(schedule) << "apiVersion: backup.berth.io/v1\nkind: Schedule\nmetadata: {name: nightly}\n"
                             "spec: {schedule: '0 2 * * *', template: {includedNamespaces: [shop], ttl: 24h}}\n";
  Ok({"--data-dir", data_, "apply", "-f", schedule});
  EXPECT_TRUE(Eventually([&] {
    return Cli({"--data-dir", data_, "get", "schedules", "nightly", "-o", "jsonpath={.status.phase}"}).out == "Enabled";
  }));
  EXPECT_THAT(Ok({"--data-dir", data_, "get", "schedules"}), HasSubstr("nightly   Enabled   0 2 * * *"));

  // A backup of a namespace without pods: nothing to copy, Completed.
  CliResult created =
      Cli({"--data-dir", data_, "backup", "create", "empty", "--include-namespaces", "shop", "--ttl", "1h", "--wait"});
  EXPECT_EQ(created.exit_code, 0) << created;
  EXPECT_THAT(created.out, HasSubstr("backup.backup.berth.io/empty created\n"));
  EXPECT_THAT(created.out, HasSubstr("Completed"));
  EXPECT_THAT(Ok({"--data-dir", data_, "backup", "get"}), HasSubstr("\nempty   Completed   0        0"));
  EXPECT_THAT(Ok({"--data-dir", data_, "backup", "describe", "empty"}), HasSubstr("  TTL:                  1h0m0s\n"));
  EXPECT_EQ(Ok({"--data-dir", data_, "backup", "verify"}),
            "Verified 1 backup in default (" + repo + "): 0 chunks, 0\nOK\n");
  CliResult missing = Cli({"--data-dir", data_, "backup", "describe", "nope"});
  EXPECT_EQ(missing.exit_code, 1) << missing;
  EXPECT_THAT(missing.err, HasSubstr("Error from server (NotFound): backups.backup.berth.io \"nope\" not found"));

  Ok({"--data-dir", data_, "backup", "delete", "empty"});
  EXPECT_TRUE(Eventually([&] { return Cli({"--data-dir", data_, "backup", "get", "empty"}).exit_code == 1; }));
  EXPECT_EQ(Ok({"--data-dir", data_, "backup", "verify"}),
            "Verified 0 backups in default (" + repo + "): 0 chunks, 0\nOK\n");

  // The next start finds both and changes neither.
  ASSERT_EQ(StopUp(SIGTERM), 0);
  ASSERT_NO_FATAL_FAILURE(StartUp({"--runtime", "none", "--backup-location", repo}));
  EXPECT_THAT(up_->Output(), HasSubstr("berth up: backup repository in " + repo + " (BackupStorageLocation default)"));
}

}  // namespace
}  // namespace berth::testing
