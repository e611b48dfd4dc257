#include "apiserver/control_plane.h"

#include <sys/resource.h>
#include <sys/stat.h>

#include "absl/strings/escaping.h"
#include "api/codec.h"
#include "apiserver/tls.h"
#include "common/fs.h"
#include "common/logging.h"
#include "common/status.h"
#include "common/strings.h"
#include "metrics/prometheus.h"
#include "openssl/rand.h"
#include "spdlog/spdlog.h"

namespace berth::apiserver {
namespace {

absl::StatusOr<std::string> LoadOrCreateToken(const std::string& path) {
  auto existing = ReadFile(path);
  if (existing.ok()) {
    std::string token = *existing;
    while (!token.empty() && (token.back() == '\n' || token.back() == ' ')) token.pop_back();
    if (token.size() >= 32) return token;
  } else if (existing.status().code() != absl::StatusCode::kNotFound) {
    return existing.status();
  }
  unsigned char raw[32];
  if (RAND_bytes(raw, sizeof(raw)) != 1) return absl::InternalError("no randomness for the API token");
  std::string token = absl::BytesToHexString(absl::string_view(reinterpret_cast<char*>(raw), sizeof(raw)));
  BERTH_RETURN_IF_ERROR(WriteFileAtomic(path, token + "\n", 0600));
  return token;
}

// Families of one sample each, without labels.
struct UnlabelledFamily {
  const char* name;
  metrics::MetricType type;
  const char* help;
  int64_t value;
};
void WriteUnlabelled(std::string* out, std::initializer_list<UnlabelledFamily> families) {
  for (const UnlabelledFamily& f : families) {
    metrics::WriteFamily(out, f.name, f.type, f.help);
    metrics::WriteSample(out, f.name, {}, static_cast<double>(f.value));
  }
}

// kube-apiserver's in-flight gauge, and berth's view of its connections.
void WriteServingMetrics(const http::HttpServer::Stats& s, std::string* out) {
  using metrics::MetricType;
  metrics::WriteFamily(out, "apiserver_current_inflight_requests", MetricType::kGauge,
                       "Requests being served (running or queued for a handler thread), by kind.");
  metrics::WriteSample(out, "apiserver_current_inflight_requests", {{"request_kind", "readOnly"}},
                       static_cast<double>(s.inflight_reads));
  metrics::WriteSample(out, "apiserver_current_inflight_requests", {{"request_kind", "mutating"}},
                       static_cast<double>(s.inflight_mutating));
  WriteUnlabelled(
      out,
      {
          {"berth_apiserver_open_connections", MetricType::kGauge, "Connections open to the API server.",
           s.open_connections},
          {"berth_apiserver_long_running_requests", MetricType::kGauge, "Watches being streamed.", s.long_running},
          {"berth_apiserver_connections_total", MetricType::kCounter, "Connections accepted.", s.accepted},
          {"berth_apiserver_refused_connections_total", MetricType::kCounter,
           "Connections closed at once because --api-max-connections were open.", s.refused_connections},
          {"berth_apiserver_timed_out_connections_total", MetricType::kCounter,
           "Connections closed by a deadline (TLS handshake, request headers, idle keep-alive, I/O).", s.timed_out},
          {"berth_apiserver_throttled_requests_total", MetricType::kCounter,
           "Requests answered 429 Too Many Requests (over an in-flight limit).", s.throttled},
      });
}

// The store's object cache: how well its budget serves the reads; its
// group commits: how many writes share one, and what they cost.
void WriteStoreMetrics(const store::Store& store, std::string* out) {
  using metrics::MetricType;
  const store::Store::CacheStats c = store.cache_stats();
  const store::Store::CommitStats commits = store.commit_stats();
  WriteUnlabelled(out,
                  {
                      {"berth_store_commits_total", MetricType::kCounter,
                       "Transactions the store committed (one fsync each), each a group of writes.", commits.commits},
                      {"berth_store_committed_writes_total", MetricType::kCounter,
                       "Writes in the committed transactions: per commit, how many shared it.", commits.mutations},
                      {"berth_store_failed_commits_total", MetricType::kCounter,
                       "Transactions that could not be committed; every write in them failed.", commits.failed_commits},
                  });
  metrics::WriteFamily(out, "berth_store_commit_seconds_total", MetricType::kCounter,
                       "Time spent committing (BEGIN to COMMIT, the fsync included), summed over the commits.");
  metrics::WriteSample(out, "berth_store_commit_seconds_total", {}, commits.seconds);
  WriteUnlabelled(out, {
                           {"berth_store_cache_hits_total", MetricType::kCounter,
                            "Reads the store's object cache answered.", c.hits},
                           {"berth_store_cache_misses_total", MetricType::kCounter,
                            "Reads the store's object cache sent to SQLite.", c.misses},
                           {"berth_store_cache_objects", MetricType::kGauge,
                            "Objects the cache counts against its budget.", static_cast<int64_t>(c.objects)},
                           {"berth_store_cache_bytes", MetricType::kGauge,
                            "Serialized bytes the cache counts against its budget.", static_cast<int64_t>(c.bytes)},
                           {"berth_store_cache_shared_objects", MetricType::kGauge,
                            "Objects kept past the budget, uncounted, because something else holds them too.",
                            static_cast<int64_t>(c.shared_objects)},
                           {"berth_store_cache_parsed_objects", MetricType::kGauge,
                            "Cached objects held parsed; the others, let go of while the writes stopped, hold "
                            "only their JSON text.",
                            static_cast<int64_t>(c.parsed_objects)},
                           {"berth_store_cache_reparses_total", MetricType::kCounter,
                            "Hits on an object the cache had let go of, whose text was parsed again.", c.reparses},
                       });
}

// The process as a whole (every thread, ended ones too): its CPU time, as
// Prometheus' process collectors name it, and how often its threads gave
// up the CPU to wait (a wake-up each) or were preempted: the hand-offs
// between the store's writer, the informers, the workers and the API
// server's connections cost about a quarter of berth up's CPU under a burst
// of claims (docs/performance.md).
void WriteProcessMetrics(std::string* out) {
  using metrics::MetricType;
  rusage usage{};
  if (::getrusage(RUSAGE_SELF, &usage) != 0) return;
  const auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6;
  };
  metrics::WriteFamily(out, "process_cpu_seconds_total", MetricType::kCounter,
                       "Total user and system CPU time spent in seconds.");
  metrics::WriteSample(out, "process_cpu_seconds_total", {}, seconds(usage.ru_utime) + seconds(usage.ru_stime));
  metrics::WriteFamily(out, "berth_process_context_switches_total", MetricType::kCounter,
                       "Context switches of the process's threads: voluntary (a wait) and involuntary (preempted).");
  metrics::WriteSample(out, "berth_process_context_switches_total", {{"kind", "voluntary"}},
                       static_cast<double>(usage.ru_nvcsw));
  metrics::WriteSample(out, "berth_process_context_switches_total", {{"kind", "involuntary"}},
                       static_cast<double>(usage.ru_nivcsw));
}

}  // namespace

absl::Status MakeDataDirPrivate(const std::string& data_dir) {
  BERTH_RETURN_IF_ERROR(MakeDirs(data_dir, 0700));
  // An older berth (or an operator's mkdir) may have left these readable by
  // others. New files are private from creation (the umask of `berth up` and
  // `berth serve`, explicit modes); existing ones are narrowed once, loudly.
  for (const char* name : {"", "/state.db", "/state.db-wal", "/state.db-shm", "/api-token", "/kubeconfig", "/tls",
                           "/tls/api.key", "/tls/api.crt"}) {
    const std::string path = StrCat(data_dir, name);
    BERTH_ASSIGN_OR_RETURN(std::optional<mode_t> old_mode, NarrowToOwner(path));
    if (old_mode) {
      spdlog::warn("{} was readable by others (mode {:04o}); narrowed to owner-only", path, *old_mode);
    }
  }
  return absl::OkStatus();
}

std::string KubeconfigYaml(const std::string& server, const std::string& ca_pem, const std::string& token) {
  nlohmann::json cfg = {
      {"apiVersion", "v1"},
      {"kind", "Config"},
      {"clusters",
       {{{"name", "berth"},
         {"cluster", {{"server", server}, {"certificate-authority-data", absl::Base64Escape(ca_pem)}}}}}},
      {"contexts",
       {{{"name", "berth"}, {"context", {{"cluster", "berth"}, {"user", "berth-admin"}, {"namespace", "default"}}}}}},
      {"current-context", "berth"},
      {"users", {{{"name", "berth-admin"}, {"user", {{"token", token}}}}}},
      {"preferences", nlohmann::json::object()},
  };
  return api::EncodeYaml(cfg);
}

absl::StatusOr<std::unique_ptr<ControlPlane>> ControlPlane::Start(const Options& options) {
  std::unique_ptr<ControlPlane> cp(new ControlPlane());
  BERTH_RETURN_IF_ERROR(MakeDataDirPrivate(options.data_dir));
  BERTH_ASSIGN_OR_RETURN(cp->store_, store::Store::Open({.path = StrCat(options.data_dir, "/state.db")}));
  cp->registry_ = std::make_unique<Registry>(*cp->store_);
  BERTH_RETURN_IF_ERROR(cp->registry_->Bootstrap());
  cp->handler_ = std::make_unique<ApiHandler>(*cp->registry_, options.handler);
  http::HttpServer::Options http;
  cp->socket_ = StrCat(options.data_dir, "/api.sock");
  http.unix_socket = cp->socket_;
  http.tcp_address = options.api_address;
  if (!options.api_address.empty()) {
    BERTH_ASSIGN_OR_RETURN(cp->token_, LoadOrCreateToken(StrCat(options.data_dir, "/api-token")));
    http.bearer_token = cp->token_;
    BERTH_ASSIGN_OR_RETURN(TlsIdentity tls, EnsureServingCertificate(StrCat(options.data_dir, "/tls")));
    http.tls_cert_file = tls.cert_file;
    http.tls_key_file = tls.key_file;
    cp->ca_pem_ = tls.cert_pem;
  }
  http.limits = options.limits;
  http.clock = options.handler.clock;
  http.long_running = &ApiHandler::IsLongRunning;
  ApiHandler* handler = cp->handler_.get();
  BERTH_ASSIGN_OR_RETURN(
      cp->http_, http::HttpServer::Start(
                     std::move(http), [handler](const HttpRequest& r, ResponseWriter& w) { handler->Handle(r, w); }));
  cp->handler_->AddMetricsCollector(
      [server = cp->http_.get()](std::string* out) { WriteServingMetrics(server->stats(), out); });
  cp->handler_->AddMetricsCollector([store = cp->store_.get()](std::string* out) { WriteStoreMetrics(*store, out); });
  cp->handler_->AddMetricsCollector(WriteProcessMetrics);
  cp->handler_->AddMetricsCollector([handler, backlog = options.handler.backlog](std::string* out) {
    const ApiHandler::HoldBackStats held = handler->held_back();
    WriteUnlabelled(
        out, {
                 {"berth_controller_backlog", metrics::MetricType::kGauge,
                  "Keys the controllers' work queues hold, not yet taken up by a worker.", backlog ? backlog() : 0},
                 {"berth_apiserver_held_back_requests_total", metrics::MetricType::kCounter,
                  "Clients' creates that waited while the controllers' backlog was over its limit.", held.requests},
             });
    metrics::WriteFamily(out, "berth_apiserver_held_back_seconds_total", metrics::MetricType::kCounter,
                         "Time clients' creates waited for the controllers' backlog.");
    metrics::WriteSample(out, "berth_apiserver_held_back_seconds_total", {}, absl::ToDoubleSeconds(held.waited));
  });
  if (!options.api_address.empty()) {
    std::string host = options.api_address.substr(0, options.api_address.rfind(':'));
    cp->kubeconfig_ = StrCat(options.data_dir, "/kubeconfig");
    BERTH_RETURN_IF_ERROR(WriteFileAtomic(
        cp->kubeconfig_, KubeconfigYaml(StrCat("https://", host, ":", cp->http_->tcp_port()), cp->ca_pem_, cp->token_),
        0600));
  }
  return cp;
}

void ControlPlane::Shutdown() {
  if (http_) http_->Shutdown();
  http_.reset();
  handler_.reset();
  registry_.reset();
  store_.reset();
}

ControlPlane::~ControlPlane() { Shutdown(); }

}  // namespace berth::apiserver
