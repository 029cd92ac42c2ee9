// ClusterSecurity: what a cluster member (router or worker) needs to serve and dial its peers,
// built once in main() from --insecure / --tls-* and --cluster-token-file.
//
// With TLS, listeners verify client certificates against the cluster CA (workers require one
// at the handshake, so a party without one cannot even send a message; the router's admin
// listener only asks, since operators may come with a token alone); a verified certificate
// is the cluster credential. The cluster token (when given)
// is a second credential, sent on every call this process makes to its peers. Plaintext
// without a cluster token leaves worker RPCs open to anyone who reaches the port: allowed
// only with --insecure, and logged.
#pragma once

#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "common/call_auth.h"
#include "common/transport_security.h"

namespace CLI {
class App;
}

namespace mlaserve::common {

struct ClusterSecurityOptions {
  TlsOptions tls;
  std::string cluster_token_file;
};

// --insecure, --tls-*, --cluster-token-file.
void AddClusterSecurityFlags(CLI::App& app, ClusterSecurityOptions* options);

struct ClusterSecurity {
  TlsOptions tls;
  TokenSet cluster_tokens;  // empty when no --cluster-token-file
  std::shared_ptr<grpc::ServerCredentials> server_credentials;
  std::shared_ptr<const ClusterDialer> dialer;
  CallAuthorizer authorizer;  // kCluster for worker RPCs

  // Peers must have the cluster credential (false only for --insecure without a token).
  bool authenticated() const { return !authorizer.options().open_cluster; }
};

// INVALID_ARGUMENT naming the flag for missing or unreadable files. `who` names the process
// in the warning about open worker RPCs.
// `listener_policy`: how this process's listener treats client certificates under TLS.
absl::StatusOr<ClusterSecurity> MakeClusterSecurity(const ClusterSecurityOptions& options,
                                                    const std::string& who,
                                                    ClientCertPolicy listener_policy);

}  // namespace mlaserve::common
