#include "driver/http_endpoint.h"

#include <utility>

#include "common/strings.h"
#include "metrics/prometheus.h"

namespace berth::driver {

http::HttpHandler NewHttpHandler(Driver& driver, DriverMetrics& metrics, std::function<bool()> serving) {
  return [&driver, &metrics, serving = std::move(serving)](const http::HttpRequest& req, http::ResponseWriter& out) {
    if (req.path != "/healthz" && req.path != "/metrics") {
      out.Send(404, "text/plain; charset=utf-8", "not found: try /healthz or /metrics\n");
      return;
    }
    if (req.method != "GET") {
      out.Send(405, "text/plain; charset=utf-8", "only GET is served\n");
      return;
    }
    if (req.path == "/metrics") {
      out.Send(200, metrics::kTextContentType, metrics.Render());
      return;
    }
    absl::StatusOr<bool> ready = driver.Ready();
    if (!ready.ok() || !*ready) {
      out.Send(503, "text/plain; charset=utf-8",
               StrCat("pool ", driver.options().pool, " is not usable (not mounted or not writable)",
                      ready.ok() ? "" : StrCat(": ", ready.status().message()), "\n"));
      return;
    }
    if (!serving()) {
      out.Send(503, "text/plain; charset=utf-8",
               StrCat("the CSI server is not serving on ", driver.options().endpoint, "\n"));
      return;
    }
    out.Send(200, "text/plain; charset=utf-8", "ok\n");
  };
}

absl::StatusOr<std::unique_ptr<http::HttpServer>> StartHttpEndpoint(const std::string& address, Driver& driver,
                                                                    DriverMetrics& metrics,
                                                                    std::function<bool()> serving) {
  http::HttpServer::Options o;
  o.tcp_address = address;
  o.tcp_mode = http::HttpServer::TcpMode::kPlainHttp;
  // The operator names the address (a pod IP for the kubelet's probes and
  // Prometheus); nothing served here is secret or mutating.
  o.loopback_only = false;
  o.limits.io_threads = 1;
  o.limits.handler_threads = 2;
  o.limits.max_connections = 64;
  o.limits.max_requests_inflight = 16;
  o.limits.max_mutating_requests_inflight = 4;
  o.limits.header_timeout = absl::Seconds(10);
  o.limits.idle_timeout = absl::Seconds(60);
  o.limits.io_timeout = absl::Seconds(10);
  o.limits.max_header_bytes = 64 << 10;
  o.max_body_bytes = 64 << 10;
  return http::HttpServer::Start(std::move(o), NewHttpHandler(driver, metrics, std::move(serving)));
}

}  // namespace berth::driver
