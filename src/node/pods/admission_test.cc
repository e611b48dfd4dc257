#include "node/pods/admission.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace berth::node::pods {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(AdmissionTest, WhatBerthRunsPasses) {
  json pod = json::parse(R"({"spec": {
    "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "c"}}, {"name": "e", "emptyDir": {}}],
    "containers": [{"name": "a", "image": "x:1", "env": [{"name": "P", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                    "ports": [{"containerPort": 80}]}]}})");
  EXPECT_THAT(UnsupportedPodFields(pod), IsEmpty());
}

TEST(AdmissionTest, NamesEveryUnsupportedField) {
  json pod = json::parse(R"({"spec": {
    "volumes": [{"name": "cfg", "configMap": {"name": "c"}}],
    "containers": [{"name": "a", "image": "x:1", "livenessProbe": {"exec": {"command": ["true"]}},
                    "env": [{"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
                    "ports": [{"containerPort": 80, "hostPort": 8080}]}]}})");
  EXPECT_THAT(UnsupportedPodFields(pod),
              ElementsAre("spec.volumes[0].configMap (volume type; supported: persistentVolumeClaim, ephemeral, "
                          "emptyDir, hostPath)",
                          "spec.containers[0].livenessProbe (probes)",
                          "spec.containers[0].env[0].valueFrom.secretKeyRef (only fieldRef)",
                          "spec.containers[0].ports[0].hostPort"));
}

}  // namespace
}  // namespace berth::node::pods
