// pods/exec and pods/attach: what kube-apiserver and kubelet do together
// for `kubectl exec` and `kubectl attach`, done in one hop by the API server.
//
//   client ── upgrade request ──▶ API server ── CRI Exec/Attach ──▶ runtime: a URL
//                                      └─ same request ──▶ runtime's streaming server
//   client ◀════ 101, then the bytes, unchanged, both ways ════▶ streaming server
//
// The API server checks the request and the pod as kube-apiserver does
// (PodExecOptions, the container, the node), finds the running container
// on the pod's node through that node's CRI runtime as kubelet does, asks
// the runtime for a streaming URL (CRI Exec or Attach), sends the client's
// upgrade request there (its method, the URL's path, and only the upgrade's
// headers: never the client's Authorization) and, when the runtime answers
// 101, hands the client's connection and the runtime's over to the HTTP
// server's tunnel (http::ResponseWriter::Tunnel): the framing (SPDY/3.1 or
// WebSocket, channel.k8s.io v1–v4) is between the client and the runtime,
// so stdin, stdout, stderr, the exit code (the error stream) and terminal
// resizes pass as they are. A refusal of the runtime (a protocol it does not
// speak, as containerd 1.6 refuses WebSocket v5.channel.k8s.io with 403) goes
// back to the client as it is; kubectl 1.30+ then falls back to SPDY, as it
// does with kube-apiserver before 1.30.
//
// Errors are answered as kube-apiserver words them (a Kubernetes Status:
// pod not found 404, `container X is not valid for pod Y` 400, no node
// 400, options 400), and those of the node as kubelet does (plain text,
// which kubectl prints after "unable to upgrade connection: ":
// `container not found ("X")` 404 when it is not running).
//
// The handler thread is held for the handshake only (the CRI call, the
// connection to the streaming server and its answer: `handshake_timeout`
// at most); the session itself holds no thread.
//
// Thread-safety: ServePodStream is reentrant.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "apiserver/api.h"
#include "cri/runtime.h"
#include "http/server.h"

namespace berth::node::pods {

// PodExecOptions / PodAttachOptions from the query (`command` repeated).
struct StreamRequest {
  bool attach = false;
  std::string container{};
  std::vector<std::string> command{};
  bool stdin = false;
  bool stdout = false;
  bool stderr = false;
  bool tty = false;
};
// INVALID_ARGUMENT (BadRequest) as kube-apiserver words it: no command for
// exec, none of stdin/stdout/stderr, a command for attach.
absl::StatusOr<StreamRequest> ParseStreamRequest(std::string_view subresource, std::string_view raw_query);

// A streaming URL of the runtime: http://HOST:PORT/PATH (https is refused:
// berth's runtimes serve plain HTTP on loopback).
struct StreamUrl {
  std::string host{};  // without brackets
  int port = 0;
  bool ipv6 = false;
  std::string target{};  // path and query
};
absl::StatusOr<StreamUrl> ParseStreamUrl(std::string_view url);

// The upgrade request sent to the streaming server for `client`: its
// method, `url`'s target, Host, and the upgrade's own headers (Connection,
// Upgrade, X-Stream-Protocol-Version one line per value, Sec-WebSocket-*);
// nothing else, so the bearer token stays with the API server.
std::string UpstreamRequest(const http::HttpRequest& client, const StreamUrl& url);

// A response head: "HTTP/1.1 101 Switching Protocols\r\n...\r\n\r\n".
struct UpstreamHead {
  int code = 0;
  std::map<std::string, std::string> headers{};  // lower-case names
  size_t size = 0;                               // bytes of the head, the blank line included
};
// nullopt-like NOT_FOUND while `bytes` does not hold a whole head yet;
// INVALID_ARGUMENT for what is not an HTTP/1.x response.
absl::StatusOr<UpstreamHead> ParseUpstreamHead(std::string_view bytes);

// The CRI runtime of a node (the API server keeps one per node of berth
// up); NOT_FOUND / FAILED_PRECONDITION when the node has none.
using RuntimeForNode = std::function<absl::StatusOr<cri::Runtime*>(const std::string& node)>;

struct StreamOptions {
  // The whole handshake: CRI call, connection, the streaming server's answer.
  absl::Duration handshake_timeout = absl::Seconds(30);
};

// Serves GET or POST .../pods/NAME/exec (or attach) for the API server.
// Returns an error (sent as a Status) only before anything is written.
absl::Status ServePodStream(apiserver::Api& registry, const RuntimeForNode& runtimes, std::string_view subresource,
                            const std::string& ns, const std::string& name, const http::HttpRequest& request,
                            http::ResponseWriter& out, const StreamOptions& options = {});

}  // namespace berth::node::pods
