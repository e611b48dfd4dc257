// berth up and a full disk (issue 28), as a user meets it: a pool the data
// directory cannot hold is refused before anything starts, with the sizes;
// each node's pool reports its pressure as the Node's condition
// BerthPoolPressure (kubectl describe node); a volume whose filesystem
// fails shows as a Warning VolumeConditionAbnormal on its pod within a
// stats period. Root only.
#include <filesystem>
#include <fstream>

#include "common/testing/eventually.h"
#include "common/testing/subprocess.h"
#include "driver/testing/sandbox.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "up_fixture.h"

namespace berth::testing {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

class BerthUpHealthTest : public BerthUpFixture {
 protected:
  json NodeCondition(const std::string& type) {
    json node = Get("/api/v1/nodes/" + node_);
    // A Node just registered may have no status yet.
    if (!node.is_object() || !node.contains("status") || !node["status"].is_object()) return nullptr;
    for (const auto& c : node["status"].value("conditions", json::array())) {
      if (c.value("type", "") == type) return c;
    }
    return nullptr;
  }
  // Messages of the Warning events with `reason` on pod `pod`.
  std::vector<std::string> PodWarnings(const std::string& pod, const std::string& reason) {
    std::vector<std::string> out;
    json list = Get("/api/v1/namespaces/default/events");
    if (list.is_null()) return out;
    for (const auto& e : list["items"]) {
      if (e["involvedObject"].value("kind", "") == "Pod" && e["involvedObject"].value("name", "") == pod &&
          e.value("reason", "") == reason && e.value("type", "") == "Warning") {
        out.push_back(e.value("message", ""));
      }
    }
    return out;
  }
};

TEST_F(BerthUpHealthTest, APoolTheDataDirectoryCannotHoldIsRefusedBeforeAnythingStarts) {
  BERTH_REQUIRE_ROOT();
  auto [rc, out] = RunBerth({"up", "--pool-size", "1000Ti", "--runtime", "none", "--csi-binary", BERTH_CSI_BINARY},
                            absl::Seconds(60));
  EXPECT_NE(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr("1 new pool image of 1000Ti need 1000Ti but " + data_ + " has only"));
  EXPECT_THAT(out, HasSubstr("--pool-sparse"));
  EXPECT_FALSE(fs::exists(data_ + "/nodes/" + node_ + "/pool.img"));
}

TEST_F(BerthUpHealthTest, ThePoolIsANodeConditionAndAnAbnormalVolumeAWarningOnItsPod) {
  StartUp({"--runtime", "none"});
  ASSERT_FALSE(HasFatalFailure());
  // berth-csi reports its pool on its Node, beside kubelet's Ready.
  ASSERT_TRUE(Eventually(
      [&] {
        json c = NodeCondition("BerthPoolPressure");
        return c.is_object() && c.value("reason", "") == "PoolHasRoom";
      },
      absl::Seconds(60)))
      << Get("/api/v1/nodes/" + node_).dump();
  EXPECT_EQ(NodeCondition("BerthPoolPressure")["status"], "False");
  EXPECT_EQ(NodeCondition("Ready")["status"], "True");
  struct stat img {};
  ASSERT_EQ(::stat((data_ + "/nodes/" + node_ + "/pool.img").c_str(), &img), 0);
  EXPECT_GE(img.st_blocks * 512, img.st_size) << "the pool image is allocated in full";

  Berth({"apply", "-f", std::string(BERTH_SOURCE_DIR) + "/examples/claim-and-pod.yaml"});
  ASSERT_TRUE(Eventually([&] { return Running("app"); }, absl::Seconds(90))) << Pod("app").dump();
  const json pod = Pod("app");
  const std::string volume = Claim("data")["spec"]["volumeName"];
  const std::string mount = data_ + "/nodes/" + node_ + "/kubelet/pods/" + pod["metadata"]["uid"].get<std::string>() +
                            "/volumes/kubernetes.io~csi/" + volume + "/mount";
  EXPECT_TRUE(PodWarnings("app", "VolumeConditionAbnormal").empty());

  // The volume's filesystem records an error (ext4's own test trigger).
  std::string source, fs_type;
  {
    std::ifstream mounts("/proc/self/mounts");
    std::string dev, target, type, rest;
    while (mounts >> dev >> target >> type && std::getline(mounts, rest)) {
      if (target == mount) source = dev, fs_type = type;
    }
  }
  ASSERT_EQ(fs_type, "ext4") << mount;
  const std::string trigger = "/sys/fs/ext4/" + fs::path(source).filename().string() + "/trigger_fs_error";
  ASSERT_TRUE(fs::exists(trigger)) << trigger;
  std::ofstream(trigger) << "test-error";

  // Volume stats every second here: the Warning comes within seconds.
  ASSERT_TRUE(Eventually([&] { return !PodWarnings("app", "VolumeConditionAbnormal").empty(); }, absl::Seconds(30)));
  // Seen first in the kernel log (the ext4 error names the volume's device),
  // or in ext4's own error count.
  EXPECT_THAT(PodWarnings("app", "VolumeConditionAbnormal")[0],
              ::testing::AnyOf(HasSubstr("Volume data: its ext4 filesystem"),
                               HasSubstr("Volume data: the kernel logged 1 error(s) on its device, the first: EXT4-fs "
                                         "error")));
  Berth({"delete", "-f", std::string(BERTH_SOURCE_DIR) + "/examples/claim-and-pod.yaml"});
  EXPECT_EQ(StopUp(SIGTERM), 0);
}

}  // namespace
}  // namespace berth::testing
