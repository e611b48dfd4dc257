// Object store figures (the REST API adds its own cost on top; see issue 4):
//   - durable creates/s from 8 concurrent writers (group commit, fsync per batch)
//   - watch delivery latency p50/p99 (commit acknowledged -> event received)
//   - RSS after storing 100,000 objects
//
//   build/release/bench/store_bench [objects]
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>
#include <vector>

#include "bench_util.h"
#include "spdlog/spdlog.h"
#include "store/store.h"

namespace {

using Clock = std::chrono::steady_clock;

berth::store::Object Pvc(const std::string& name) {
  return {{"apiVersion", "v1"},
          {"kind", "PersistentVolumeClaim"},
          {"metadata", {{"name", name}, {"namespace", "default"}, {"labels", {{"app", "bench"}}}}},
          {"spec",
           {{"accessModes", {"ReadWriteOnce"}},
            {"storageClassName", "berth"},
            {"resources", {{"requests", {{"storage", "1Gi"}}}}}}}};
}

long RssKiB() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

using berth::bench::CurrentRssKiB;

}  // namespace

int main(int argc, char** argv) {
  const int total = argc > 1 ? std::atoi(argv[1]) : 100000;
  spdlog::set_level(spdlog::level::warn);
  char tmpl[] = "/tmp/berth-store-bench-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) return 1;
  const std::string dir = tmpl;
  {
    auto store = berth::store::Store::Open({.path = dir + "/state.db"});
    if (!store.ok()) {
      std::fprintf(stderr, "%s\n", store.status().ToString().c_str());
      return 1;
    }
    auto& s = **store;

    // Watch latency: a watcher timestamps each event; the writer records the
    // time its create returned.
    auto watcher = s.Watch("persistentvolumeclaims", "", s.ResourceVersion());
    std::vector<Clock::time_point> received(total);
    std::atomic<bool> stop{false};
    std::thread reader([&] {
      int seen = 0;
      while (seen < total && !stop) {
        auto e = (*watcher)->Next(absl::Milliseconds(100));
        if (!e) continue;
        const std::string name = (*e->object)["metadata"]["name"].get<std::string>();
        received[std::stoi(name.substr(4))] = Clock::now();
        ++seen;
      }
    });

    constexpr int kWriters = 8;
    std::vector<Clock::time_point> acked(total);
    std::atomic<int> next{0}, failed{0};
    const auto t0 = Clock::now();
    std::vector<std::thread> writers;
    for (int w = 0; w < kWriters; ++w) {
      writers.emplace_back([&] {
        for (int i = next++; i < total; i = next++) {
          if (!s.Create("persistentvolumeclaims", Pvc("pvc-" + std::to_string(i))).ok()) ++failed;
          acked[i] = Clock::now();
        }
      });
    }
    for (auto& t : writers) t.join();
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    reader.join();
    stop = true;

    std::vector<double> lat;
    for (int i = 0; i < total; ++i) {
      lat.push_back(std::chrono::duration<double, std::micro>(received[i] - acked[i]).count());
    }
    std::sort(lat.begin(), lat.end());
    std::printf("durable creates, %d writers: %d objects in %.2f s = %.0f/s (%d failed)\n", kWriters, total, secs,
                total / secs, failed.load());
    std::printf("watch delivery after ack: p50 %.0f us, p99 %.0f us (negative: event before ack)\n",
                lat[lat.size() / 2], lat[lat.size() * 99 / 100]);
    std::printf("RSS with %d objects stored: %ld MiB\n", total, CurrentRssKiB() / 1024);
    auto list_t0 = Clock::now();
    auto list = s.List("persistentvolumeclaims", "");
    std::printf("list of %zu objects: %.0f ms\n", list->items.size(),
                std::chrono::duration<double, std::milli>(Clock::now() - list_t0).count());
    std::printf("max RSS with %d objects stored (and listed once): %ld MiB\n", total, RssKiB() / 1024);
  }
  std::filesystem::remove_all(dir);
  return 0;
}
