// The control plane's core on one data dir: the store (<data-dir>/state.db),
// the registry, and the API server on <data-dir>/api.sock (root only) and on
// loopback TCP (HTTPS, self-signed, tls/api.crt) with a bearer token; <data-dir>/kubeconfig (0600) points
// kubectl at the TCP listener.
//
//   auto cp = ControlPlane::Start({.data_dir = "/var/lib/berth"});
//   (*cp)->registry().Create(...);   // in-process callers
//
// Everything in the data directory is owner-only: the directory is 0700
// (narrowed with a warning if an existing one was wider) and the files are
// created 0600. The token is generated once (<data-dir>/api-token, 0600) and kept across
// restarts; the kubeconfig is rewritten at every start (the port may change).
//
// Thread-safety: thread-safe.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "apiserver/handler.h"
#include "apiserver/registry.h"
#include "http/server.h"
#include "store/store.h"

namespace berth::apiserver {

class ControlPlane {
 public:
  struct Options {
    std::string data_dir = "/var/lib/berth";
    std::string api_address = "127.0.0.1:7443";  // "" = unix socket only
    ApiHandler::Options handler;                 // its clock is the HTTP server's too
    // Threads, connection and in-flight limits, deadlines of both listeners.
    http::HttpServer::Limits limits;
  };
  static absl::StatusOr<std::unique_ptr<ControlPlane>> Start(const Options& options);
  ~ControlPlane();

  Registry& registry() { return *registry_; }
  ApiHandler& handler() { return *handler_; }
  store::Store& store() { return *store_; }
  int tcp_port() const { return http_->tcp_port(); }
  http::HttpServer::Stats serving_stats() const { return http_->stats(); }
  const std::string& kubeconfig_path() const { return kubeconfig_; }
  const std::string& socket_path() const { return socket_; }
  const std::string& token() const { return token_; }

  // Stops the API server (ends watches), then closes the store.
  void Shutdown();

 private:
  ControlPlane() = default;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<Registry> registry_;
  std::unique_ptr<ApiHandler> handler_;
  std::unique_ptr<http::HttpServer> http_;
  std::string kubeconfig_;
  std::string socket_;
  std::string token_;
  std::string ca_pem_;
};

// Creates the data directory 0700, or narrows an existing one (and the
// state, token, key and kubeconfig files in it) that others could read, with
// a warning naming each file and its old mode.
absl::Status MakeDataDirPrivate(const std::string& data_dir);

// The kubeconfig text for a server URL and token.
std::string KubeconfigYaml(const std::string& server, const std::string& ca_pem, const std::string& token);

}  // namespace berth::apiserver
