// The names of core/v1's volume sources, in one place for the schema (which
// types the sources berth serves and keeps the others' bodies as they are)
// and the validation (a volume names exactly one source).
#pragma once

#include <array>
#include <string_view>

namespace berth::api {

// The in-tree plugins both a PersistentVolume and a pod's volume may name.
// berth serves none of them; their bodies are kept as written.
inline constexpr std::array<std::string_view, 18> kInTreeVolumeSources = {"gcePersistentDisk",
                                                                          "awsElasticBlockStore",
                                                                          "glusterfs",
                                                                          "rbd",
                                                                          "iscsi",
                                                                          "cinder",
                                                                          "cephfs",
                                                                          "fc",
                                                                          "flocker",
                                                                          "flexVolume",
                                                                          "azureFile",
                                                                          "vsphereVolume",
                                                                          "quobyte",
                                                                          "azureDisk",
                                                                          "photonPersistentDisk",
                                                                          "portworxVolume",
                                                                          "scaleIO",
                                                                          "storageos"};

// The sources a PersistentVolume may have that berth's schema types.
inline constexpr std::array<std::string_view, 4> kTypedPvSources = {"csi", "hostPath", "local", "nfs"};

// The sources only a pod's volume has, kept as written.
inline constexpr std::array<std::string_view, 6> kPodOnlyVolumeSources = {"configMap",   "secret", "projected",
                                                                          "downwardAPI", "image",  "gitRepo"};

// The sources of a pod's volume that berth's schema types.
inline constexpr std::array<std::string_view, 6> kTypedPodVolumeSources = {
    "persistentVolumeClaim", "csi", "ephemeral", "emptyDir", "hostPath", "nfs"};

// Calls `fn(name)` for every source a PersistentVolume may name.
template <typename Fn>
void ForEachPvSource(Fn&& fn) {
  for (auto k : kTypedPvSources) fn(k);
  for (auto k : kInTreeVolumeSources) fn(k);
}

// Calls `fn(name)` for every source a pod's volume may name.
template <typename Fn>
void ForEachPodVolumeSource(Fn&& fn) {
  for (auto k : kTypedPodVolumeSources) fn(k);
  for (auto k : kPodOnlyVolumeSources) fn(k);
  for (auto k : kInTreeVolumeSources) fn(k);
}

}  // namespace berth::api
