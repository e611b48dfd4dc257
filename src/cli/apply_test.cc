// berth apply against an in-process API server: the file's order in the
// output with objects applied at once, the create that falls back to an
// update, a partial failure, a namespace created before what is in it, and a
// stream longer than the read-ahead window with a malformed document at its
// end.
#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/str_split.h"
#include "apiserver/control_plane.h"
#include "cli/commands.h"
#include "common/strings.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace berth::cli {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string SecretYaml(const std::string& name, const std::string& value = "dg==", const std::string& ns = "") {
  return StrCat("---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: ", name, ns.empty() ? "" : "\n  namespace: ", ns,
                "\ndata: {k: ", value, "}\n");
}

class ApplyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    apiserver::ControlPlane::Options o;
    o.data_dir = dir_.path() + "/data";
    o.api_address = "";
    auto cp = apiserver::ControlPlane::Start(o);
    ASSERT_TRUE(cp.ok()) << cp.status();
    cp_ = std::move(*cp);
    client_ = http::ApiClient::ForUnixSocket(cp_->socket_path());
  }
  void TearDown() override {
    if (cp_) cp_->Shutdown();
  }
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = dir_.path() + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
  absl::Status Run(const std::string& file, std::string& out) {
    std::ostringstream o;
    absl::Status st = Apply(*client_, {file}, {}, o);
    out = o.str();
    return st;
  }
  json Get(const std::string& path) {
    auto r = client_->Call("GET", path);
    if (!r.ok() || r->code != 200) return json();
    return json::parse(r->body, nullptr, false);
  }

  testing::TempDir dir_;
  std::unique_ptr<apiserver::ControlPlane> cp_;
  std::unique_ptr<http::ApiClient> client_;
};

TEST_F(ApplyTest, PrintsInTheFilesOrderAndFallsBackToAnUpdateWhenTheObjectExists) {
  std::string text, expected_created, expected_again;
  for (int i = 0; i < 200; ++i) {
    text += SecretYaml(StrCat("s-", i));
    expected_created += StrCat("secret/s-", i, " created\n");
    expected_again += StrCat("secret/s-", i, i == 150 ? " configured\n" : " unchanged\n");
  }
  std::string out;
  ASSERT_TRUE(Run(Write("secrets.yaml", text), out).ok()) << out;
  EXPECT_EQ(out, expected_created);

  // Again with one changed: each create answered 409 AlreadyExists, then
  // kubectl's read-modify-write.
  const size_t at = text.find("name: s-150\n");
  ASSERT_NE(at, std::string::npos);
  text.replace(text.find("dg==", at), 4, "Zm9v");
  ASSERT_TRUE(Run(Write("secrets.yaml", text), out).ok()) << out;
  EXPECT_EQ(out, expected_again);
  EXPECT_EQ(Get("/api/v1/namespaces/default/secrets/s-150")["data"]["k"], "Zm9v");
  EXPECT_EQ(Get("/api/v1/namespaces/default/secrets/s-149")["data"]["k"], "dg==");
}

TEST_F(ApplyTest, AnExistingObjectNotAppliedBeforeIsConfigured) {
  json s = {{"apiVersion", "v1"}, {"kind", "Secret"}, {"metadata", {{"name", "made"}}}, {"data", {{"k", "YQ=="}}}};
  auto r = client_->Call("POST", "/api/v1/namespaces/default/secrets", s.dump());
  ASSERT_TRUE(r.ok() && r->code == 201);
  std::string out;
  ASSERT_TRUE(Run(Write("made.yaml", SecretYaml("made", "Yg==")), out).ok()) << out;
  EXPECT_EQ(out, "secret/made configured\n");
  const json got = Get("/api/v1/namespaces/default/secrets/made");
  EXPECT_EQ(got["data"]["k"], "Yg==");
  EXPECT_TRUE(got["metadata"]["annotations"].contains("kubectl.kubernetes.io/last-applied-configuration"));
}

TEST_F(ApplyTest, APartialFailureAppliesTheRestAndNamesEachFailedObjectAndItsLine) {
  // Documents start at lines 2 (first), 8 (bad), 13 (w), 17 (no name) and 21.
  const std::string text = SecretYaml("first") +
                           "---\napiVersion: v1\nkind: PersistentVolumeClaim\n"
                           "metadata: {name: bad}\nspec: {resources: {requests: {storage: 1Gi}}}\n" +
                           "---\napiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n" +
                           "---\napiVersion: v1\nkind: Secret\ndata: {k: dg==}\n" + SecretYaml("last");
  const std::string file = Write("mixed.yaml", text);
  std::string out;
  absl::Status st = Run(file, out);
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(out, "secret/first created\nsecret/last created\n");
  EXPECT_TRUE(Get("/api/v1/namespaces/default/secrets/last").is_object());
  std::vector<std::string> lines = absl::StrSplit(st.message(), '\n');
  ASSERT_EQ(lines.size(), 3u) << st;
  EXPECT_THAT(lines[0], ::testing::StartsWith("Error from server (Invalid): error when creating "
                                              "persistentvolumeclaim/bad (" +
                                              file + ":8): "));
  EXPECT_THAT(lines[0], HasSubstr("spec.accessModes: Required value"));
  EXPECT_EQ(lines[1], "error when applying \"w\" (" + file +
                          ":13): no matches for kind \"Widget\" in version \"example.com/v1\"");
  EXPECT_EQ(lines[2], "error when applying an object (" + file + ":17): apply needs metadata.name in every object");
  // kubectl's prefixes, one line each.
  const std::vector<std::string> formatted = absl::StrSplit(FormatError(st), '\n');
  EXPECT_THAT(formatted, ElementsAre(::testing::StartsWith("Error from server (Invalid): "),
                                     ::testing::StartsWith("error: error when applying \"w\""),
                                     ::testing::StartsWith("error: error when applying an object"), ""));
}

TEST_F(ApplyTest, ANamespaceIsCreatedBeforeWhatIsInIt) {
  std::string text = "---\napiVersion: v1\nkind: Namespace\nmetadata: {name: team}\n",
              expected = "namespace/team created\n";
  for (int i = 0; i < 40; ++i) {
    text += SecretYaml(StrCat("t-", i), "dg==", "team");
    expected += StrCat("secret/t-", i, " created\n");
  }
  std::string out;
  absl::Status st = Run(Write("team.yaml", text), out);
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ(out, expected);
}

TEST_F(ApplyTest, AStreamPastTheWindowAppliesWhatPrecedesAMalformedDocument) {
  std::string text;
  constexpr int kCount = 1100;  // more than the 1,000 objects read ahead
  for (int i = 0; i < kCount; ++i) text += SecretYaml(StrCat("m-", i));
  text += "---\napiVersion: v1\nkind: Secret\nmetadata: {name: [unclosed\n";
  std::string out;
  absl::Status st = Run(Write("long.yaml", text), out);
  EXPECT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("long.yaml"));
  EXPECT_THAT(st.message(), HasSubstr("invalid YAML at line "));
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), kCount);
  EXPECT_TRUE(Get(StrCat("/api/v1/namespaces/default/secrets/m-", kCount - 1)).is_object());

  // A malformed input shorter than the window applies nothing, as before.
  st = Run(Write("short.yaml", SecretYaml("never") + "---\nkind: [\n"), out);
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(out, "");
  EXPECT_FALSE(Get("/api/v1/namespaces/default/secrets/never").is_object());
}

}  // namespace
}  // namespace berth::cli
