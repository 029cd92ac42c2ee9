// The router's security flags and what main() builds from them (docs/security.md):
//   public listener  TLS with the public (or cluster) certificate, API keys if configured
//   admin listener   TLS asking for client certificates (mutual TLS); Admin RPCs need an admin
//                    token or an admin certificate, RegisterWorker / Heartbeat the cluster
//                    credential
//   worker channels  mutual TLS and the cluster token (RouterOptions::worker_dialer)
#pragma once

#include <memory>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "common/call_auth.h"
#include "router/router_context.h"

namespace CLI {
class App;
}

namespace mlaserve::router {

// --admin-listen, --insecure, --tls-*, --cluster-token-file, --admin-token-file,
// --admin-cert-name, --api-key-file, --public-tls-cert, --public-tls-key, --max-request-bytes,
// --max-queued-requests.
void AddSecurityFlags(CLI::App& app, RouterOptions* options);

struct RouterSecurity {
  std::shared_ptr<grpc::ServerCredentials> public_credentials;
  std::shared_ptr<grpc::ServerCredentials> admin_credentials;
  common::CallAuthorizer admin_authorizer;
};

// Validates the flags (INVALID_ARGUMENT naming the flag), reads the token and certificate
// files, and fills options->public_listener.tls, options->public_authorizer and
// options->worker_dialer. Refuses an unauthenticated Admin API on a non-loopback address.
absl::StatusOr<RouterSecurity> MakeRouterSecurity(RouterOptions* options);

// True for 127.0.0.0/8, ::1 and localhost.
bool IsLoopbackHost(const std::string& host);

}  // namespace mlaserve::router
