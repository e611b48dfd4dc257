// The API's TLS identity on loopback TCP.
//
// kubectl (client-go) sends a bearer token only over TLS, so the TCP
// listener speaks HTTPS with a self-signed certificate made at first start:
// ECDSA P-256, SANs IP:127.0.0.1, IP:::1 and DNS:localhost, valid 10 years,
// usable as its own CA. The kubeconfig carries it as
// certificate-authority-data, so clients verify the server.
//
// Files: <dir>/api.crt (PEM, 0644) and <dir>/api.key (PEM, 0600), written
// durably (temp + fsync + rename); a pair that does not load is replaced.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace berth::apiserver {

struct TlsIdentity {
  std::string cert_file;
  std::string key_file;
  std::string cert_pem;
};

absl::StatusOr<TlsIdentity> EnsureServingCertificate(const std::string& dir);

}  // namespace berth::apiserver
