#include "csi/client.h"

#include <string>

#include "common/status.h"
#include "common/strings.h"
#include "csi/endpoint.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace berth::csi {
namespace {

const char* StateName(grpc_connectivity_state s) {
  switch (s) {
    case GRPC_CHANNEL_IDLE:
      return "IDLE";
    case GRPC_CHANNEL_CONNECTING:
      return "CONNECTING";
    case GRPC_CHANNEL_READY:
      return "READY";
    case GRPC_CHANNEL_TRANSIENT_FAILURE:
      return "TRANSIENT_FAILURE";
    case GRPC_CHANNEL_SHUTDOWN:
      return "SHUTDOWN";
  }
  return "?";
}

}  // namespace

std::shared_ptr<grpc::Channel> UnixChannel(const std::string& path, const Backoff::Options& backoff) {
  grpc::ChannelArguments args;
  const int initial_ms = static_cast<int>(absl::ToInt64Milliseconds(backoff.initial));
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, initial_ms);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, initial_ms);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, static_cast<int>(absl::ToInt64Milliseconds(backoff.max)));
  // A channel of its own: gRPC otherwise shares connections between channels
  // to the same address, and a new channel could inherit a connection to a
  // server process that has just died.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  // A unix socket is local: never try to resolve a DNS authority for it.
  args.SetString(GRPC_ARG_DEFAULT_AUTHORITY, "localhost");
  return grpc::CreateCustomChannel(GrpcUnixTarget(path), grpc::InsecureChannelCredentials(), args);
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> ConnectUnix(std::string_view endpoint, const ConnectOptions& options) {
  BERTH_ASSIGN_OR_RETURN(std::string path, ParseUnixEndpoint(endpoint));
  std::shared_ptr<grpc::Channel> channel = UnixChannel(path, options.backoff);

  const absl::Time deadline = absl::Now() + options.timeout;
  Backoff backoff(options.backoff);
  grpc_connectivity_state state = channel->GetState(/*try_to_connect=*/true);
  while (state != GRPC_CHANNEL_READY) {
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(StrCat("no CSI server answered on unix://", path, " within ",
                                                absl::FormatDuration(options.timeout), " (channel ", StateName(state),
                                                ")"));
    }
    // Wait for a state change, but wake up on our own schedule to kick a
    // channel that went idle or failed.
    const absl::Time wake = std::min(deadline, now + backoff.Next());
    channel->WaitForStateChange(state, absl::ToChronoTime(wake));
    state = channel->GetState(/*try_to_connect=*/true);
  }
  return channel;
}

}  // namespace berth::csi
