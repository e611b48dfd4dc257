#include "node/pods/pod_config.h"

#include <filesystem>

#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "node/pods/runtime_pod.h"

namespace berth::node::pods {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

json Pod() {
  return json::parse(R"json({
    "metadata": {"name": "web", "namespace": "shop", "uid": "u-1", "labels": {"app": "web"}},
    "spec": {
      "containers": [{
        "name": "app", "image": "berth.local/toolbox:1",
        "command": ["/bin/sh", "-c"], "args": ["echo $(GREETING) $$(not) $(MISSING)"],
        "workingDir": "/work",
        "env": [{"name": "GREETING", "value": "hello"},
                {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}}],
        "volumeMounts": [{"name": "data", "mountPath": "/data"},
                         {"name": "data", "mountPath": "/sub", "subPath": "a/b", "readOnly": true}],
        "volumeDevices": [{"name": "raw", "devicePath": "/dev/xvda"}],
        "resources": {"limits": {"cpu": "500m", "memory": "64Mi"}},
        "securityContext": {"runAsUser": 1000, "readOnlyRootFilesystem": true,
                            "capabilities": {"add": ["NET_ADMIN"], "drop": ["ALL"]},
                            "allowPrivilegeEscalation": false}
      }],
      "securityContext": {"runAsGroup": 2000, "fsGroup": 3000},
      "terminationGracePeriodSeconds": 5
    }
  })json");
}

TEST(PodConfigTest, SandboxCarriesThePodsIdentity) {
  const auto c = SandboxConfig(Pod(), 2, "node-1", "/var/lib/berth/pods");
  EXPECT_EQ(c.metadata().name(), "web");
  EXPECT_EQ(c.metadata().namespace_(), "shop");
  EXPECT_EQ(c.metadata().uid(), "u-1");
  EXPECT_EQ(c.metadata().attempt(), 2u);
  EXPECT_EQ(c.hostname(), "web");
  EXPECT_EQ(c.log_directory(), "/var/lib/berth/pods/shop_web_u-1");
  EXPECT_EQ(c.labels().at("app"), "web");
  EXPECT_EQ(c.labels().at(kPodUidLabel), "u-1");
  EXPECT_EQ(c.labels().at(kNodeLabel), "node-1");
  EXPECT_EQ(c.linux().security_context().namespace_options().network(), cri::v1::POD);
  EXPECT_EQ(c.linux().security_context().namespace_options().pid(), cri::v1::CONTAINER);
  EXPECT_EQ(c.linux().security_context().run_as_group().value(), 2000);
  EXPECT_THAT(c.linux().security_context().supplemental_groups(), ::testing::ElementsAre(3000));
}

TEST(PodConfigTest, ContainerAsKubeletBuildsIt) {
  berth::testing::TempDir dir;
  std::filesystem::create_directories(dir.Join("vol"));
  const json pod = Pod();
  ContainerInputs in{.pod = &pod,
                     .container = &pod["spec"]["containers"][0],
                     .restart_count = 3,
                     .node = "node-1",
                     .image_ref = "sha256:abcd",
                     .volumes = {{"data", {.path = dir.Join("vol")}}, {"raw", {.path = "/dev/loop7", .block = true}}},
                     .pod_ip = "10.88.0.9",
                     .node_memory_bytes = int64_t{1} << 30};
  auto c = ContainerConfig(in);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->metadata().name(), "app");
  EXPECT_EQ(c->metadata().attempt(), 3u);
  EXPECT_EQ(c->image().image(), "sha256:abcd");
  EXPECT_EQ(c->log_path(), "app/3.log");
  EXPECT_EQ(c->args(0), "echo hello $(not) $(MISSING)");
  EXPECT_EQ(c->working_dir(), "/work");
  std::map<std::string, std::string> env;
  for (const auto& kv : c->envs()) env[kv.key()] = kv.value();
  EXPECT_EQ(env["POD"], "web");
  EXPECT_EQ(env["IP"], "10.88.0.9");
  EXPECT_EQ(env["APP"], "web");
  ASSERT_EQ(c->mounts_size(), 2);
  EXPECT_EQ(c->mounts(0).host_path(), dir.Join("vol"));
  EXPECT_FALSE(c->mounts(0).readonly());
  EXPECT_EQ(c->mounts(1).container_path(), "/sub");
  EXPECT_EQ(c->mounts(1).host_path(), std::filesystem::canonical(dir.Join("vol/a/b")).string());
  EXPECT_TRUE(c->mounts(1).readonly());
  ASSERT_EQ(c->devices_size(), 1);
  EXPECT_EQ(c->devices(0).container_path(), "/dev/xvda");
  EXPECT_EQ(c->devices(0).host_path(), "/dev/loop7");
  const auto& r = c->linux().resources();
  EXPECT_EQ(r.cpu_period(), 100000);
  EXPECT_EQ(r.cpu_quota(), 50000);
  EXPECT_EQ(r.cpu_shares(), 512);
  EXPECT_EQ(r.memory_limit_in_bytes(), 64 << 20);
  EXPECT_EQ(r.oom_score_adj(), -997);  // Guaranteed
  const auto& s = c->linux().security_context();
  EXPECT_EQ(s.run_as_user().value(), 1000);
  EXPECT_EQ(s.run_as_group().value(), 2000);
  EXPECT_TRUE(s.readonly_rootfs());
  EXPECT_TRUE(s.no_new_privs());
  EXPECT_THAT(s.capabilities().add_capabilities(), ::testing::ElementsAre("NET_ADMIN"));
  EXPECT_EQ(c->labels().at(kContainerNameLabel), "app");
  EXPECT_EQ(c->annotations().at(kRestartCountAnnotation), "3");
  EXPECT_EQ(c->annotations().at(kGracePeriodAnnotation), "5");
}

TEST(PodConfigTest, RefusesWhatCannotBeRunSafely) {
  berth::testing::TempDir dir;
  std::filesystem::create_directories(dir.Join("vol"));
  std::filesystem::create_directory_symlink("/etc", dir.Join("vol/escape"));
  json pod = Pod();
  json& c = pod["spec"]["containers"][0];
  c.erase("volumeDevices");
  ContainerInputs in{.pod = &pod, .container = &c, .volumes = {{"data", {.path = dir.Join("vol")}}}};
  c["volumeMounts"][1]["subPath"] = "escape";
  EXPECT_THAT(std::string(ContainerConfig(in).status().message()), HasSubstr("leads outside the volume"));
  c["volumeMounts"][1]["subPath"] = "../x";
  EXPECT_EQ(ContainerConfig(in).status().code(), absl::StatusCode::kInvalidArgument);
  c["volumeMounts"] = json::array({{{"name", "nope"}, {"mountPath", "/x"}}});
  EXPECT_THAT(std::string(ContainerConfig(in).status().message()), HasSubstr("cannot find volume \"nope\""));
  c.erase("volumeMounts");
  c["securityContext"] = {{"runAsNonRoot", true}};
  in.image_uid = 0;
  EXPECT_THAT(std::string(ContainerConfig(in).status().message()), HasSubstr("image will run as root"));
  in.image_uid = 1000;
  EXPECT_TRUE(ContainerConfig(in).ok());
  c["env"] = json::array({{{"name", "S"}, {"valueFrom", {{"secretKeyRef", {{"name", "s"}, {"key", "k"}}}}}}});
  EXPECT_EQ(ContainerConfig(in).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(PodConfigTest, ExpandsVariablesAsKubernetes) {
  EXPECT_EQ(ExpandVars("$(A)-$(B)", {{"A", "1"}}), "1-$(B)");
  EXPECT_EQ(ExpandVars("$$(A) $ $", {{"A", "1"}}), "$(A) $ $");
  EXPECT_EQ(ExpandVars("$(A", {{"A", "1"}}), "$(A");
}

}  // namespace
}  // namespace berth::node::pods
