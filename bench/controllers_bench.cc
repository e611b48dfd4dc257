// Controller figures (issue 5): claims provisioned + bound per second with
// an instant fake CSI driver over a real unix socket, the PV binder and the
// provisioner running in process on a durable store; RSS at the end.
//
// With `scheduled` (issue 32) the class is WaitForFirstConsumer and every
// claim has a pod: the scheduler places each pod on one of three nodes
// (SpaceWeighted over CSIStorageCapacity objects that do not change), the
// provisioner creates the volume there, and the figure is pods bound per
// second, with how many landed on each node.
//
// With `parsed` the informers hold claims and volumes parsed, as before
// they were held packed (issue 31), for a comparison within one run.
//
//   build/release/bench/controllers_bench [claims=10000] [scheduled] [parsed] [cache=KiB] [history=N]
// cache= and history= set the store's object cache budget and watch history
// (Store::Options) to measure what each costs and saves.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.h"
#include "controllers/scheduling/scheduler.h"
#include "controllers/testing/fake_csi.h"
#include "controllers/volume/provisioner.h"
#include "controllers/volume/pv_binder.h"
#include "spdlog/spdlog.h"

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;
namespace bc = berth::controllers;

const berth::api::KindInfo& K(std::string_view resource, std::string_view group = "") {
  return *berth::api::FindResource(group, resource);
}

using berth::bench::CurrentRssKiB;

int Total(const std::map<std::string, int>& placed) {
  int n = 0;
  for (const auto& [node, count] : placed) n += count;
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  const int total = argc > 1 ? std::atoi(argv[1]) : 10000;
  bool scheduled = false, packed = true;
  berth::store::Store::Options store_options;
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    scheduled = scheduled || arg == "scheduled";
    packed = packed && arg != "parsed";
    if (arg.starts_with("cache=")) store_options.cache_bytes = std::stoul(arg.substr(6)) << 10;  // KiB
    if (arg.starts_with("history=")) store_options.history = std::stoul(arg.substr(8));
  }
  spdlog::set_level(std::getenv("BENCH_VERBOSE") ? spdlog::level::info : spdlog::level::warn);
  char tmpl[] = "/tmp/berth-controllers-bench-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) return 1;
  const std::string dir = tmpl;
  {
    store_options.path = dir + "/state.db";
    auto store = std::move(*berth::store::Store::Open(store_options));
    berth::apiserver::Registry registry(*store);
    registry.EnableStorageProtectionAdmission(true);
    (void)registry.Bootstrap();
    bc::testing::FakeCsiDriver driver("fake.csi.berth.io");
    if (!driver.Serve(dir + "/csi.sock").ok()) return 1;
    bc::DriverDirectory directory;
    directory.Add("fake.csi.berth.io", "", "unix://" + dir + "/csi.sock");
    json fast = {{"metadata", {{"name", "fast"}}}, {"provisioner", "fake.csi.berth.io"}};
    if (scheduled) {
      fast["volumeBindingMode"] = "WaitForFirstConsumer";
      for (const std::string node : {"node-1", "node-2", "node-3"}) {
        (void)registry.Create(K("nodes"), "",
                              {{"metadata", {{"name", node}, {"labels", {{"kubernetes.io/hostname", node}}}}},
                               {"status", {{"conditions", {{{"type", "Ready"}, {"status", "True"}}}}}}});
        (void)registry.Create(
            K("csinodes", "storage.k8s.io"), "",
            {{"metadata", {{"name", node}}},
             {"spec",
              {{"drivers",
                {{{"name", "fake.csi.berth.io"}, {"nodeID", node}, {"topologyKeys", {"kubernetes.io/hostname"}}}}}}}});
        (void)registry.Create(K("csistoragecapacities", "storage.k8s.io"), "default",
                              {{"metadata", {{"name", "csisc-" + node}}},
                               {"storageClassName", "fast"},
                               {"nodeTopology", {{"matchLabels", {{"kubernetes.io/hostname", node}}}}},
                               {"capacity", "100Ti"}});
      }
    }
    (void)registry.Create(K("storageclasses", "storage.k8s.io"), "", fast);
    // Claims and volumes held packed, as the controller manager holds them.
    bc::Informer claims(registry, K("persistentvolumeclaims"), absl::Minutes(5), packed),
        volumes(registry, K("persistentvolumes"), absl::Minutes(5), packed),
        classes(registry, K("storageclasses", "storage.k8s.io")), pods(registry, K("pods")),
        nodes(registry, K("nodes")), csinodes(registry, K("csinodes", "storage.k8s.io")),
        csidrivers(registry, K("csidrivers", "storage.k8s.io")),
        capacities(registry, K("csistoragecapacities", "storage.k8s.io"));
    bc::Scheduler scheduler(registry, {pods, nodes, claims, volumes, classes, csinodes, csidrivers, capacities}, {});
    bc::PvBinder binder(registry, {claims, volumes, classes, pods, nodes}, {.workers = 16});
    bc::Provisioner provisioner(registry, directory, {claims, volumes, classes, nodes, csinodes},
                                {.driver = "fake.csi.berth.io", .workers = 16});
    binder.RegisterHandlers();
    provisioner.RegisterHandlers();
    if (scheduled) scheduler.RegisterHandlers();
    std::atomic<int> bound{0};
    std::mutex placed_mu;
    std::map<std::string, int> placed;  // node → pods bound there
    if (scheduled) {
      pods.AddHandlers({.on_add = nullptr,
                        .on_update =
                            [&](const json& before, const json& after) {
                              auto node = [](const json& o) {
                                return o.value("spec", json::object()).value("nodeName", "");
                              };
                              if (node(before).empty() && !node(after).empty()) {
                                std::lock_guard<std::mutex> lock(placed_mu);
                                ++placed[node(after)];
                              }
                            },
                        .on_delete = nullptr});
    }
    claims.AddHandlers({.on_add = nullptr,
                        .on_update =
                            [&](const json& before, const json& after) {
                              auto phase = [](const json& o) {
                                return o.value("status", json::object()).value("phase", "");
                              };
                              if (phase(after) == "Bound" && phase(before) != "Bound") bound.fetch_add(1);
                            },
                        .on_delete = nullptr});
    for (auto* i : {&classes, &nodes, &csinodes, &csidrivers, &capacities, &pods, &volumes, &claims}) {
      i->Start();
      i->WaitForSync(absl::Seconds(10));
    }
    binder.Start();
    provisioner.Start();
    if (scheduled) scheduler.Start();
    long rss_before = CurrentRssKiB();
    auto start = Clock::now();
    std::vector<std::thread> creators;
    std::atomic<int> next{0};
    for (int t = 0; t < 8; ++t) {
      creators.emplace_back([&] {
        int i;
        while ((i = next.fetch_add(1)) < total) {
          json c = {{"apiVersion", "v1"},
                    {"kind", "PersistentVolumeClaim"},
                    {"metadata", {{"name", "c-" + std::to_string(i)}}},
                    {"spec",
                     {{"accessModes", {"ReadWriteOnce"}},
                      {"storageClassName", "fast"},
                      {"resources", {{"requests", {{"storage", "1Gi"}}}}}}}};
          (void)registry.Create(K("persistentvolumeclaims"), "default", c);
          if (scheduled) {
            json pod = {
                {"apiVersion", "v1"},
                {"kind", "Pod"},
                {"metadata", {{"name", "p-" + std::to_string(i)}}},
                {"spec",
                 {{"containers", {{{"name", "app"}, {"image", "busybox:1.36"}}}},
                  {"volumes",
                   {{{"name", "data"}, {"persistentVolumeClaim", {{"claimName", "c-" + std::to_string(i)}}}}}}}}};
            (void)registry.Create(K("pods"), "default", pod);
          }
        }
      });
    }
    for (auto& t : creators) t.join();
    double created_s = std::chrono::duration<double>(Clock::now() - start).count();
    auto placed_total = [&] {
      std::lock_guard<std::mutex> lock(placed_mu);
      return Total(placed);
    };
    while (bound.load() < total || (scheduled && placed_total() < total)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      if (std::chrono::duration<double>(Clock::now() - start).count() > 600) break;
    }
    double secs = std::chrono::duration<double>(Clock::now() - start).count();
    std::printf("%d claims created in %.2f s; all provisioned + bound after %.2f s: %.0f claims/s\n", total, created_s,
                secs, bound.load() / secs);
    if (scheduled) {
      std::lock_guard<std::mutex> lock(placed_mu);
      std::printf("scheduled: %d pods bound after %.2f s: %.1f pods/s;", Total(placed), secs, Total(placed) / secs);
      for (const auto& [node, count] : placed) std::printf(" %s=%d", node.c_str(), count);
      std::printf("\n");
    }
    std::printf("CreateVolume calls %d; RSS %ld MiB before, %ld MiB after\n", driver.create_calls(), rss_before / 1024,
                CurrentRssKiB() / 1024);
    const auto cache = store->cache_stats();
    std::printf(
        "store: %.1f writes per claim; object cache %.0f%% hits (%lld hits, %lld misses, %lld fills "
        "skipped), %zu objects, %zu KiB serialized (and %zu objects, %zu KiB kept past the budget); informers "
        "hold claims and volumes in %zu KiB packed\n",
        static_cast<double>(store->ResourceVersion()) / total,
        100.0 * static_cast<double>(cache.hits) / static_cast<double>(std::max<int64_t>(1, cache.hits + cache.misses)),
        static_cast<long long>(cache.hits), static_cast<long long>(cache.misses),
        static_cast<long long>(cache.fills_skipped), cache.objects, cache.bytes / 1024, cache.shared_objects,
        cache.shared_bytes / 1024, (claims.PackedBytes() + volumes.PackedBytes()) / 1024);
    scheduler.Stop();
    provisioner.Stop();
    binder.Stop();
    for (auto* i : {&claims, &volumes, &classes, &pods, &nodes, &csinodes, &csidrivers, &capacities}) i->Stop();
  }
  std::filesystem::remove_all(dir);
  return 0;
}
