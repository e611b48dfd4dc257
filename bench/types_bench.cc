// What reading objects costs (issue 16, typed objects): per PersistentVolume
// and per Pod, the JSON path reads the scheduler's scores made before
// against decoding the typed view (api/types/) and reading its members —
// the scores decode every volume (or pod) in the cache once per scheduling
// attempt. Also what writing one as text costs: nlohmann's dump() against
// api::DumpJson (the store's and the API server's), for volumes, pods and
// claims as `berth apply` leaves them (with kubectl's last-applied
// annotation).
//
//   build/release/bench/types_bench [objects=10000] [rounds=5]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "api/json_text.h"
#include "api/types/core.h"
#include "api/types/core_pod.h"
#include "client/object.h"
#include "nlohmann/json.hpp"

namespace {

using nlohmann::json;
namespace types = berth::api::types;
using Clock = std::chrono::steady_clock;

// A bound, node-local CSI volume as the provisioner writes it.
json Volume(int i) {
  const std::string name = "pvc-" + std::to_string(100000 + i) + "-5d1c-4f7e-9a1b-0c6f3e2d8a47";
  return json::parse(
      R"({"apiVersion":"v1","kind":"PersistentVolume","metadata":{"name":")" + name +
      R"(","uid":"0b7c7f9e-3f7d-4a7e-9d5e-)" + std::to_string(100000000000 + i) +
      R"(","resourceVersion":"12345","creationTimestamp":"2026-11-26T10:00:00Z",
      "annotations":{"pv.kubernetes.io/provisioned-by":"berth.csi.io","volume.kubernetes.io/provisioner-deletion-secret-name":""},
      "finalizers":["kubernetes.io/pv-protection","external-provisioner.volume.kubernetes.io/finalizer"]},
    "spec":{"capacity":{"storage":"10Gi"},"accessModes":["ReadWriteOnce"],"persistentVolumeReclaimPolicy":"Delete",
      "storageClassName":"local","volumeMode":"Filesystem",
      "claimRef":{"kind":"PersistentVolumeClaim","namespace":"default","name":"data-)" +
      std::to_string(i) + R"(","uid":"c-)" + std::to_string(i) + R"(","apiVersion":"v1","resourceVersion":"999"},
      "csi":{"driver":"berth.csi.io","volumeHandle":")" +
      name +
      R"(","fsType":"ext4","volumeAttributes":{"storage.kubernetes.io/csiProvisionerIdentity":"1700000000000-berth"}},
      "nodeAffinity":{"required":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"kubernetes.io/hostname","operator":"In","values":["node-)" +
      std::to_string(i % 3) + R"("]}]}]}}},
    "status":{"phase":"Bound","lastPhaseTransitionTime":"2026-11-26T10:00:01Z"}})");
}

json Pod(int i) {
  return json::parse(
      R"({"apiVersion":"v1","kind":"Pod","metadata":{"name":"app-)" + std::to_string(i) +
      R"(","namespace":"default","uid":"p-)" + std::to_string(i) +
      R"(","resourceVersion":"4242","labels":{"app":"web"}},
    "spec":{"nodeName":"node-)" +
      std::to_string(i % 3) +
      R"(","restartPolicy":"Always","serviceAccountName":"default",
      "containers":[{"name":"app","image":"nginx:1.27","ports":[{"containerPort":80}],
        "resources":{"requests":{"cpu":"100m","memory":"64Mi"}},
        "volumeMounts":[{"name":"data","mountPath":"/data"},{"name":"kube-api-access","mountPath":"/var/run/secrets/kubernetes.io/serviceaccount","readOnly":true}]}],
      "volumes":[{"name":"data","persistentVolumeClaim":{"claimName":"data-)" +
      std::to_string(i) +
      R"("}},{"name":"kube-api-access","projected":{"sources":[{"serviceAccountToken":{"path":"token"}}]}}],
      "tolerations":[{"key":"node.kubernetes.io/not-ready","operator":"Exists","effect":"NoExecute","tolerationSeconds":300}]},
    "status":{"phase":"Running","podIP":"10.0.0.1","startTime":"2026-11-26T10:00:00Z",
      "conditions":[{"type":"Ready","status":"True","lastProbeTime":null,"lastTransitionTime":"2026-11-26T10:00:02Z"}],
      "containerStatuses":[{"name":"app","ready":true,"restartCount":0,"image":"nginx:1.27","imageID":"sha256:abc",
        "state":{"running":{"startedAt":"2026-11-26T10:00:01Z"}}}]}})");
}

// A bound claim applied by `berth apply` (kubectl's last-applied annotation).
json Claim(int i) {
  const std::string name = "claim-" + std::to_string(i);
  json applied = {{"apiVersion", "v1"},
                  {"kind", "PersistentVolumeClaim"},
                  {"metadata", {{"annotations", json::object()}, {"name", name}, {"namespace", "default"}}},
                  {"spec",
                   {{"accessModes", {"ReadWriteOnce"}},
                    {"resources", {{"requests", {{"storage", "1Gi"}}}}},
                    {"storageClassName", "instant"}}}};
  json claim = applied;
  claim["metadata"]["annotations"] = {{"kubectl.kubernetes.io/last-applied-configuration", applied.dump() + "\n"},
                                      {"pv.kubernetes.io/bind-completed", "yes"},
                                      {"pv.kubernetes.io/bound-by-controller", "yes"},
                                      {"volume.kubernetes.io/storage-provisioner", "fake.csi.berth.io"}};
  claim["metadata"]["uid"] = "c0a8e1f2-3b4c-4d5e-8f60-" + std::to_string(100000000000 + i);
  claim["metadata"]["resourceVersion"] = std::to_string(40000 + i);
  claim["metadata"]["creationTimestamp"] = "2026-12-03T10:00:00Z";
  claim["metadata"]["finalizers"] = {"kubernetes.io/pvc-protection"};
  claim["spec"]["volumeName"] = "pvc-" + claim["metadata"]["uid"].get<std::string>();
  claim["spec"]["volumeMode"] = "Filesystem";
  claim["status"] = {{"phase", "Bound"}, {"accessModes", {"ReadWriteOnce"}}, {"capacity", {{"storage", "1Gi"}}}};
  return claim;
}

template <typename F>
double MicrosPerObject(const std::vector<json>& objects, int rounds, F&& read) {
  double best = 1e18;
  for (int r = 0; r < rounds; ++r) {
    const auto start = Clock::now();
    for (const auto& o : objects) read(o);
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
    best = std::min(best, us / static_cast<double>(objects.size()));
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  using berth::client::Field;
  using berth::client::Str;
  const int n = argc > 1 ? std::atoi(argv[1]) : 10000;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 5;
  std::vector<json> pvs, pods, claims;
  for (int i = 0; i < n; ++i) {
    pvs.push_back(Volume(i));
    pods.push_back(Pod(i));
    claims.push_back(Claim(i));
  }
  volatile size_t sink = 0;
  // What the scores read of a volume: driver, deletion, claimRef uid,
  // capacity, the hostname of its affinity.
  const double pv_json = MicrosPerObject(pvs, rounds, [&](const json& pv) {
    sink = sink + Str(pv, {"spec", "csi", "driver"}).size() + Str(pv, {"spec", "claimRef", "uid"}).size() +
           Str(pv, {"spec", "capacity", "storage"}).size() +
           Field(Field(pv, "metadata"), "deletionTimestamp").is_null() +
           Field(Field(Field(pv, "spec"), "nodeAffinity"), "required").size();
  });
  const double pv_typed = MicrosPerObject(pvs, rounds, [&](const json& pv) {
    auto typed = types::Decode<types::PersistentVolume>(pv);
    if (!typed.ok()) std::abort();
    sink = sink + typed->spec.csi->driver.size() + typed->spec.claim_ref->uid.size() +
           typed->spec.capacity.at("storage").Value() + typed->metadata.Deleting();
  });
  const double pod_json = MicrosPerObject(pods, rounds, [&](const json& pod) {
    sink = sink + Str(pod, {"spec", "nodeName"}).size() + Str(pod, {"status", "phase"}).size();
  });
  const double pod_typed = MicrosPerObject(pods, rounds, [&](const json& pod) {
    auto typed = types::Decode<types::Pod>(pod);
    if (!typed.ok()) std::abort();
    sink = sink + typed->spec.node_name.size() + typed->status.phase.size();
  });
  struct DumpFigures {
    const char* kind = "";
    double nlohmann = 0, ours = 0, nlohmann_msgpack = 0, ours_msgpack = 0;
  };
  std::vector<DumpFigures> dumps;
  for (const auto& [kind, objects] : {std::pair<const char*, const std::vector<json>*>{"PersistentVolume", &pvs},
                                      {"Pod", &pods},
                                      {"PersistentVolumeClaim", &claims}}) {
    for (const auto& o : *objects) {
      if (berth::api::DumpJson(o) != o.dump()) std::abort();  // the same text, or the figures mean nothing
    }
    DumpFigures& d = dumps.emplace_back();
    d.kind = kind;
    d.nlohmann = MicrosPerObject(*objects, rounds, [&](const json& o) { sink = sink + o.dump().size(); });
    d.ours = MicrosPerObject(*objects, rounds, [&](const json& o) { sink = sink + berth::api::DumpJson(o).size(); });
    d.nlohmann_msgpack = MicrosPerObject(*objects, rounds, [&](const json& o) {
      std::string packed;
      json::to_msgpack(o, packed);
      sink = sink + packed.size();
    });
    d.ours_msgpack = MicrosPerObject(*objects, rounds, [&](const json& o) {
      std::string packed;
      berth::api::AppendMsgpack(packed, o);
      sink = sink + packed.size();
    });
  }
  std::printf("objects=%d rounds=%d (best round)\n", n, rounds);
  std::printf(
      "PersistentVolume: JSON path reads %.2f us, Decode + reads %.2f us (x%.1f); %d volumes: %.1f ms per pass\n",
      pv_json, pv_typed, pv_typed / pv_json, n, pv_typed * n / 1000);
  std::printf("Pod:              JSON path reads %.2f us, Decode + reads %.2f us (x%.1f); %d pods: %.1f ms per pass\n",
              pod_json, pod_typed, pod_typed / pod_json, n, pod_typed * n / 1000);
  for (const auto& d : dumps) {
    std::printf("%s as text: dump() %.2f us, DumpJson %.2f us (x%.1f faster)\n", d.kind, d.nlohmann, d.ours,
                d.nlohmann / d.ours);
    std::printf("%s as MessagePack: to_msgpack %.2f us, AppendMsgpack %.2f us (x%.1f faster)\n", d.kind,
                d.nlohmann_msgpack, d.ours_msgpack, d.nlohmann_msgpack / d.ours_msgpack);
  }
  return sink == 42 ? 1 : 0;
}
