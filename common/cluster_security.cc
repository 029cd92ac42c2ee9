#include "common/cluster_security.h"

#include <CLI/CLI.hpp>

#include "spdlog/spdlog.h"

namespace mlaserve::common {

void AddClusterSecurityFlags(CLI::App& app, ClusterSecurityOptions* o) {
  AddTlsFlags(app, &o->tls);
  app.add_option("--cluster-token-file", o->cluster_token_file,
                 "file with the cluster token(s), one per line: peers must present one, and "
                 "this process sends the first with every call to its peers");
}

absl::StatusOr<ClusterSecurity> MakeClusterSecurity(const ClusterSecurityOptions& o,
                                                    const std::string& who,
                                                    ClientCertPolicy listener_policy) {
  if (absl::Status s = ValidateTlsOptions(o.tls, TlsPeer::kServer); !s.ok()) return s;
  ClusterSecurity cs;
  cs.tls = o.tls;
  if (!o.cluster_token_file.empty()) {
    absl::StatusOr<TokenSet> tokens = TokenSet::FromFile(o.cluster_token_file, "--cluster-token-file");
    if (!tokens.ok()) return tokens.status();
    cs.cluster_tokens = *std::move(tokens);
  }
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> server =
      MakeServerCredentials(o.tls, listener_policy);
  if (!server.ok()) return server.status();
  cs.server_credentials = *std::move(server);
  absl::StatusOr<std::shared_ptr<const ClusterDialer>> dialer = ClusterDialer::Create(
      o.tls, cs.cluster_tokens.empty() ? std::string() : cs.cluster_tokens.first());
  if (!dialer.ok()) return dialer.status();
  cs.dialer = *std::move(dialer);
  CallAuthOptions auth;
  auth.cluster_tokens = cs.cluster_tokens;
  auth.cluster_by_client_cert = !o.tls.insecure;
  auth.open_cluster = o.tls.insecure && cs.cluster_tokens.empty();
  cs.authorizer = CallAuthorizer(std::move(auth));
  if (o.tls.insecure) {
    spdlog::warn("{}: --insecure: plaintext gRPC{}", who,
                 cs.authenticated() ? "" : "; no --cluster-token-file, so anyone who reaches "
                                           "this process's ports is treated as a cluster member");
  }
  return cs;
}

}  // namespace mlaserve::common
