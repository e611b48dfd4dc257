// berth-csi's optional HTTP endpoint (--http-endpoint): plain HTTP, read-only,
// no secrets.
//
//   GET /healthz   200 "ok" while the pool is usable (mounted if it is an
//                  image, writable) and the CSI server is serving on its
//                  socket; 503 with the reason otherwise.
//   GET /metrics   Prometheus text format 0.0.4 (driver/metrics.h).
//
// Anything else is 404, other methods 405.
//
//   auto endpoint = StartHttpEndpoint("127.0.0.1:9809", *driver, metrics,
//                                     [&] { return server->Serving(); });
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "driver/driver.h"
#include "driver/metrics.h"
#include "http/server.h"

namespace berth::driver {

// The request handler (exposed for tests). `driver` and `metrics` are not
// owned and must outlive the handler; `serving` tells whether the CSI server
// is serving.
http::HttpHandler NewHttpHandler(Driver& driver, DriverMetrics& metrics, std::function<bool()> serving);

// Serves the handler on `address` (http::ParseTcpAddress syntax; any
// address the operator names, loopback or not). INVALID_ARGUMENT for a bad
// address, the errno status when it cannot be bound.
absl::StatusOr<std::unique_ptr<http::HttpServer>> StartHttpEndpoint(const std::string& address, Driver& driver,
                                                                    DriverMetrics& metrics,
                                                                    std::function<bool()> serving);

}  // namespace berth::driver
