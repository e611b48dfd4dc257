// Dialing CSI drivers on unix sockets.
//
// ConnectUnix returns a channel once the driver's socket accepts a
// connection, retrying with jittered exponential backoff while the socket is
// missing or refusing (a driver that is still starting). A driver that restarts
// under a connected channel is the caller's to retry (csi::DriverClient
// classifies UNAVAILABLE as "driver unavailable"; the controllers' and the
// volume manager's work queues retry it on their clock).
//
//   auto channel = ConnectUnix("unix:///var/lib/kubelet/plugins/x/csi.sock", {});
//   if (!channel.ok()) return channel.status();
//   auto identity = csi::v1::Identity::NewStub(*channel);
//
// Thread-safety: the functions are thread-safe; a channel may be shared.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/backoff.h"
#include "grpcpp/channel.h"

namespace berth::csi {

struct ConnectOptions {
  // How long to keep trying before DEADLINE_EXCEEDED.
  absl::Duration timeout = absl::Seconds(30);
  Backoff::Options backoff = {.initial = absl::Milliseconds(20), .max = absl::Seconds(1)};
};

// A channel to the unix socket at `path` (not yet connected), with gRPC's
// reconnect backoff narrowed to `backoff` (its own, 1 s growing to 120 s, is
// far too slow for a local socket that appears a moment later), a subchannel
// pool of its own and no DNS authority.
std::shared_ptr<grpc::Channel> UnixChannel(const std::string& path, const Backoff::Options& backoff);

// A connected channel to the unix socket named by `endpoint`
// (unix:///abs/path or /abs/path). INVALID_ARGUMENT for a bad endpoint,
// DEADLINE_EXCEEDED when nothing answered within `options.timeout`.
absl::StatusOr<std::shared_ptr<grpc::Channel>> ConnectUnix(std::string_view endpoint, const ConnectOptions& options);

}  // namespace berth::csi
