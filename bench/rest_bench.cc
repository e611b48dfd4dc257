// REST API figures (issue 4), the control plane in-process, clients over
// its real sockets:
//   - durable creates/s through POST from 8 concurrent clients (unix socket,
//     keep-alive), and the same over HTTPS with the bearer token
//   - watch delivery latency p50/p99 (POST answered -> watch event read)
//   - RSS of the server process with N objects stored
//
//   build/release/bench/rest_bench [objects=100000]
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "apiserver/control_plane.h"
#include "apiserver/kubeconfig.h"
#include "bench_util.h"
#include "http/api_client.h"
#include "spdlog/spdlog.h"

namespace {

using Clock = std::chrono::steady_clock;
using berth::http::ApiClient;

std::string Pvc(const std::string& name) {
  return nlohmann::json({{"apiVersion", "v1"},
                         {"kind", "PersistentVolumeClaim"},
                         {"metadata", {{"name", name}, {"labels", {{"app", "bench"}}}}},
                         {"spec",
                          {{"accessModes", {"ReadWriteOnce"}},
                           {"storageClassName", "berth"},
                           {"resources", {{"requests", {{"storage", "1Gi"}}}}}}}})
      .dump();
}

using berth::bench::CurrentRssKiB;

// Creates `count` claims named <prefix>-<i> from `clients` threads.
double CreateRate(const std::function<std::unique_ptr<ApiClient>()>& connect, const std::string& prefix, int count,
                  int clients) {
  std::atomic<int> next{0}, failed{0};
  auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < clients; ++t) {
    threads.emplace_back([&] {
      auto client = connect();
      int i;
      while ((i = next.fetch_add(1)) < count) {
        auto r = client->Call("POST", "/api/v1/namespaces/default/persistentvolumeclaims",
                              Pvc(prefix + "-" + std::to_string(i)));
        if (!r.ok() || r->code != 201) failed.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  double secs = std::chrono::duration<double>(Clock::now() - start).count();
  if (failed > 0) std::printf("  (%d creates failed)\n", failed.load());
  return count / secs;
}

}  // namespace

int main(int argc, char** argv) {
  const int total = argc > 1 ? std::atoi(argv[1]) : 100000;
  spdlog::set_level(spdlog::level::warn);
  char tmpl[] = "/tmp/berth-rest-bench-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) return 1;
  const std::string dir = tmpl;
  {
    berth::apiserver::ControlPlane::Options o;
    o.data_dir = dir + "/data";
    o.api_address = "127.0.0.1:0";
    auto cp = berth::apiserver::ControlPlane::Start(o);
    if (!cp.ok()) {
      std::fprintf(stderr, "%s\n", cp.status().ToString().c_str());
      return 1;
    }
    const std::string sock = (*cp)->socket_path();
    const std::string kubeconfig = (*cp)->kubeconfig_path();
    long rss_empty = CurrentRssKiB();

    // Watch latency: one watcher; a writer creates claims one by one. The
    // event usually arrives before the POST's own answer, so latency is
    // measured from the moment the POST was sent (an upper bound on
    // commit -> delivery), next to the POST round trip itself.
    {
      std::mutex mu;
      std::map<std::string, Clock::time_point> sent;
      std::vector<double> lat_us, post_us;
      const int n = 2000;
      std::atomic<bool> ready{false};
      std::thread watcher([&] {
        auto w = ApiClient::ForUnixSocket(sock);
        auto list = w->Call("GET", "/api/v1/namespaces/default/persistentvolumeclaims?limit=1");
        std::string rv = nlohmann::json::parse(list->body)["metadata"]["resourceVersion"];
        ready = true;
        int seen = 0;
        (void)w->Stream("/api/v1/namespaces/default/persistentvolumeclaims?watch=1&resourceVersion=" + rv,
                        "application/json", [&](const std::string& line) {
                          auto now = Clock::now();
                          std::string name = nlohmann::json::parse(line)["object"]["metadata"]["name"];
                          std::lock_guard<std::mutex> lock(mu);
                          auto it = sent.find(name);
                          if (it != sent.end()) {
                            lat_us.push_back(std::chrono::duration<double, std::micro>(now - it->second).count());
                          }
                          return ++seen < n;
                        });
      });
      while (!ready) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      auto c = ApiClient::ForUnixSocket(sock);
      for (int i = 0; i < n; ++i) {
        std::string name = "watch-" + std::to_string(i);
        auto t0 = Clock::now();
        {
          std::lock_guard<std::mutex> lock(mu);
          sent[name] = t0;
        }
        auto r = c->Call("POST", "/api/v1/namespaces/default/persistentvolumeclaims", Pvc(name));
        post_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
        (void)r;
      }
      watcher.join();
      std::sort(lat_us.begin(), lat_us.end());
      std::sort(post_us.begin(), post_us.end());
      std::printf(
          "watch event received after POST sent (%zu events): p50 %.0f us, p99 %.0f us"
          " (the POST round trip alone: p50 %.0f us, p99 %.0f us)\n",
          lat_us.size(), lat_us[lat_us.size() / 2], lat_us[lat_us.size() * 99 / 100], post_us[post_us.size() / 2],
          post_us[post_us.size() * 99 / 100]);
    }

    // Creates over HTTPS + token (kubectl's path), 8 clients.
    {
      const int n = std::min(total / 10, 10000);
      double rate =
          CreateRate([&] { return std::move(*berth::apiserver::ApiClientForKubeconfig(kubeconfig)); }, "tls", n, 8);
      std::printf("durable creates via HTTPS (8 clients, %d objects): %.0f/s\n", n, rate);
    }
    // Creates over the unix socket, 8 clients, up to `total` objects.
    {
      double rate = CreateRate([&] { return ApiClient::ForUnixSocket(sock); }, "bench", total, 8);
      std::printf("durable creates via unix socket (8 clients, %d objects): %.0f/s\n", total, rate);
    }
    auto list = ApiClient::ForUnixSocket(sock)->Call("GET", "/api/v1/persistentvolumeclaims?limit=1");
    std::printf("RSS: %ld MiB empty, %ld MiB with %d+ objects stored\n", rss_empty / 1024, CurrentRssKiB() / 1024,
                total);
    auto start = Clock::now();
    int pages = 0;
    std::string cont;
    auto c = ApiClient::ForUnixSocket(sock);
    do {
      auto r = c->Call("GET", "/api/v1/persistentvolumeclaims?limit=500" + (cont.empty() ? "" : "&continue=" + cont));
      cont = nlohmann::json::parse(r->body)["metadata"].value("continue", "");
      ++pages;
    } while (!cont.empty());
    std::printf("paged list of everything (%d pages of 500): %.0f ms, RSS after %ld MiB\n", pages,
                std::chrono::duration<double, std::milli>(Clock::now() - start).count(), CurrentRssKiB() / 1024);
  }
  std::filesystem::remove_all(dir);
  return 0;
}
