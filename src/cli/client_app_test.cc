// The CLI's flags as kubectl users type them: global flags after the
// command, several kinds, -A, selectors, output formats.
#include "cli/client_app.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/testing/temp_dir.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace berth::cli {
namespace {

class ClientAppTest : public ::testing::Test {
 protected:
  ClientAppTest() : commands_((AddGlobalFlags(app_, globals_), app_)) {
    // A command defined after the global flags, like main's `up`.
    up_ = app_.add_subcommand("up", "");
    up_->add_option("--nodes", nodes_);
  }
  void Parse(std::vector<std::string> args) {
    std::reverse(args.begin(), args.end());
    app_.parse(args);
  }

  CLI::App app_{"berth"};
  GlobalFlags globals_;
  ClientCommands commands_;
  CLI::App* up_;
  int nodes_ = 1;
};

TEST_F(ClientAppTest, GlobalFlagsAfterTheCommand) {
  Parse({"get", "pvc", "--data-dir", "/d", "-A", "--kubeconfig=/k"});
  EXPECT_EQ(globals_.data_dir, "/d");
  EXPECT_EQ(globals_.kubeconfig, "/k");
  EXPECT_TRUE(commands_.get_options().target.all_namespaces);
  EXPECT_EQ(commands_.get_options().args, std::vector<std::string>{"pvc"});
}

TEST_F(ClientAppTest, GlobalFlagsAfterACommandDefinedLater) {
  Parse({"up", "--data-dir", "/d", "--nodes", "3"});
  EXPECT_TRUE(up_->parsed());
  EXPECT_EQ(globals_.data_dir, "/d");
  EXPECT_EQ(nodes_, 3);
}

TEST_F(ClientAppTest, GlobalFlagsBeforeTheCommandStillWork) {
  Parse({"--data-dir=/old", "get", "pvc,pv", "a"});
  EXPECT_EQ(globals_.data_dir, "/old");
  EXPECT_EQ(commands_.get_options().args, (std::vector<std::string>{"pvc,pv", "a"}));
  EXPECT_TRUE(commands_.parsed());
}

TEST_F(ClientAppTest, GetFlagsInAnyOrder) {
  Parse({"get", "-l", "app=web", "pvc", "--field-selector", "status.phase=Bound", "-o",
         "custom-columns=NAME:.metadata.name", "--sort-by", ".metadata.name", "-w", "--watch-only", "-n", "ns1"});
  const GetOptions& g = commands_.get_options();
  EXPECT_EQ(g.label_selector, "app=web");
  EXPECT_EQ(g.field_selector, "status.phase=Bound");
  EXPECT_EQ(g.output, "custom-columns=NAME:.metadata.name");
  EXPECT_EQ(g.sort_by, ".metadata.name");
  EXPECT_TRUE(g.watch);
  EXPECT_TRUE(g.watch_only);
  EXPECT_EQ(g.target.namespace_, "ns1");
}

TEST_F(ClientAppTest, DeleteTakesKubectlsFlags) {
  Parse({"delete", "pvc", "--all", "--wait=false", "--grace-period", "0", "--force", "--data-dir", "/d"});
  EXPECT_TRUE(commands_.delete_options().all);
  EXPECT_FALSE(commands_.delete_options().wait);
  EXPECT_EQ(globals_.data_dir, "/d");
}

TEST_F(ClientAppTest, DeleteWaitsByDefault) {
  Parse({"delete", "pvc", "a"});
  EXPECT_TRUE(commands_.delete_options().wait);
}

TEST_F(ClientAppTest, AnUnknownFlagIsStillAnError) {
  EXPECT_THROW(Parse({"get", "pvc", "--no-such-flag"}), CLI::ParseError);
}

TEST_F(ClientAppTest, CommandsWithoutTheServerDoNotConnect) {
  Parse({"explain", "pvc.spec"});
  std::ostringstream out, err;
  bool connected = false;
  auto st = commands_.Run(
      [&]() -> absl::StatusOr<http::ApiClient*> {
        connected = true;
        return absl::UnavailableError("no server");
      },
      out, err, false);
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_FALSE(connected);
  EXPECT_THAT(out.str(), ::testing::HasSubstr("RESOURCE: spec <Object>"));
  EXPECT_THAT(out.str(), ::testing::HasSubstr("   accessModes\t<[]string>"));
}

TEST_F(ClientAppTest, ExplainOfAMissingFieldIsNotFound) {
  Parse({"explain", "pvc.spec.nosuch"});
  std::ostringstream out, err;
  auto st =
      commands_.Run([]() -> absl::StatusOr<http::ApiClient*> { return absl::UnavailableError("x"); }, out, err, false);
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(FormatError(st), "error: field \"nosuch\" does not exist\n");
}

TEST_F(ClientAppTest, CompletionScriptsNameTheCommandsAndKinds) {
  for (const char* shell : {"bash", "zsh"}) {
    auto script = CompletionScript(app_, shell);
    ASSERT_TRUE(script.ok());
    EXPECT_THAT(*script, ::testing::HasSubstr("complete -o default -F _berth berth"));
    EXPECT_THAT(*script, ::testing::HasSubstr("persistentvolumeclaims pvc"));
    EXPECT_THAT(*script, ::testing::HasSubstr("    get) echo '"));
    EXPECT_THAT(*script, ::testing::HasSubstr("--field-selector"));
  }
  EXPECT_EQ(CompletionScript(app_, "fish").status().code(), absl::StatusCode::kInvalidArgument);
  // bash accepts it (syntax only: -n).
  testing::TempDir dir;
  const std::string path = dir.path() + "/berth.bash";
  std::ofstream(path) << *CompletionScript(app_, "bash");
  EXPECT_EQ(std::system(("bash -n " + path).c_str()), 0);
}

TEST(FormatErrorTest, ServerErrorsKeepTheirFormAndOthersGetErrorPrefix) {
  EXPECT_EQ(FormatError(absl::NotFoundError("Error from server (NotFound): persistentvolumeclaims \"x\" not found")),
            "Error from server (NotFound): persistentvolumeclaims \"x\" not found\n");
  EXPECT_EQ(FormatError(absl::NotFoundError("the server doesn't have a resource type \"foo\"")),
            "error: the server doesn't have a resource type \"foo\"\n");
  EXPECT_EQ(FormatError(absl::NotFoundError("Error from server (NotFound): a\nb")),
            "Error from server (NotFound): a\nerror: b\n");
}

}  // namespace
}  // namespace berth::cli
