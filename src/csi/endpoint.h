// CSI endpoints: unix socket addresses and their socket files.
//
// A CSI endpoint is written `unix:///abs/path/csi.sock` (as kubelet and the
// sidecars write it) or as a bare absolute path. berth serves and dials CSI
// only on unix sockets.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace berth::csi {

// The socket path named by `endpoint`, lexically normalized ("//" and "/./"
// collapsed). INVALID_ARGUMENT for any other scheme, a relative path, a path
// with "..", or a path longer than a sockaddr_un can hold.
absl::StatusOr<std::string> ParseUnixEndpoint(std::string_view endpoint);

// The gRPC target string for a socket path ("unix:/abs/path").
std::string GrpcUnixTarget(std::string_view socket_path);

// Makes `socket_path` ready for a new listener:
//  - creates the parent directory (mode 0750 less the umask) if it is missing;
//  - nothing there: OK;
//  - a socket nobody listens on (left by a crashed run): removed;
//  - a socket that accepts connections: FAILED_PRECONDITION (another server
//    owns it; taking it over would cut that server off);
//  - anything else (regular file, directory, symlink, ...): FAILED_PRECONDITION,
//    and it is left untouched.
absl::Status PrepareSocketPath(const std::string& socket_path);

// Removes the socket file at `socket_path` if (and only if) it is a socket.
void RemoveSocketFile(const std::string& socket_path);

}  // namespace berth::csi
