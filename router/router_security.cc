#include "router/router_security.h"

#include <CLI/CLI.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/cluster_security.h"
#include "common/server.h"
#include "spdlog/spdlog.h"

namespace mlaserve::router {

void AddSecurityFlags(CLI::App& app, RouterOptions* o) {
  app.add_option("--admin-listen", o->admin_listen,
                 "HOST:PORT of the Admin API, where operators and workers (--router) connect")
      ->capture_default_str();
  common::AddClusterSecurityFlags(app, &o->cluster);
  app.add_option("--admin-token-file", o->admin_token_file,
                 "file with the admin token(s), one per line, for the Admin API");
  app.add_option("--admin-cert-name", o->admin_cert_names,
                 "common name of a client certificate (signed by --tls-ca) that may use the "
                 "Admin API (repeatable)");
  app.add_option("--api-key-file", o->public_listener.api_key_file,
                 "file with the API keys, one per line; Generation calls must send one as "
                 "\"authorization: Bearer KEY\" (default: no key needed)");
  app.add_option("--public-tls-cert", o->public_listener.tls.cert_file,
                 "certificate presented to API clients (default: --tls-cert)");
  app.add_option("--public-tls-key", o->public_listener.tls.key_file,
                 "key of --public-tls-cert (default: --tls-key)");
  app.add_option("--max-request-bytes", o->public_listener.max_request_bytes,
                 "largest Generation request message (gRPC: RESOURCE_EXHAUSTED) or OpenAI HTTP "
                 "body (413)")
      ->capture_default_str()
      ->check(CLI::Range(64 << 10, 64 << 20));
  app.add_option("--max-tokenizing-bytes", o->max_tokenizing_bytes,
                 "prompt text tokenized at once at most (texts under 64 KiB not counted); more "
                 "gets RESOURCE_EXHAUSTED")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1} << 20, int64_t{1} << 34));
  app.add_option_function<int64_t>(
         "--public-memory-quota-mb",
         [o](int64_t mb) { o->public_listener.memory_quota_bytes = mb << 20; },
         "memory gRPC may use for the public listener's connections, in MiB (default 128)")
      ->check(CLI::Range(int64_t{16}, int64_t{1} << 20));
  app.add_option("--max-queued-requests", o->max_queued_requests,
                 "requests waiting for KV room at most; more get RESOURCE_EXHAUSTED")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
}

bool IsLoopbackHost(const std::string& host) {
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

absl::StatusOr<RouterSecurity> MakeRouterSecurity(RouterOptions* o) {
  absl::StatusOr<common::ClusterSecurity> cluster =
      common::MakeClusterSecurity(o->cluster, "mlaserve-router",
                                  common::ClientCertPolicy::kRequestAndVerify);
  if (!cluster.ok()) return cluster.status();
  const bool insecure = o->cluster.tls.insecure;
  RouterSecurity rs;

  // The public listener: the cluster's TLS setting, its own certificate if given.
  common::TlsOptions& pub = o->public_listener.tls;
  if (insecure && (!pub.cert_file.empty() || !pub.key_file.empty())) {
    return absl::InvalidArgumentError(
        "--public-tls-cert/--public-tls-key were given with --insecure; choose one");
  }
  if (pub.cert_file.empty() != pub.key_file.empty()) {
    return absl::InvalidArgumentError("--public-tls-cert and --public-tls-key go together");
  }
  pub.insecure = insecure;
  if (!insecure && pub.cert_file.empty()) {
    pub.cert_file = o->cluster.tls.cert_file;
    pub.key_file = o->cluster.tls.key_file;
  }
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> public_credentials =
      common::MakeServerCredentials(pub, common::ClientCertPolicy::kNone);
  if (!public_credentials.ok()) return public_credentials.status();
  rs.public_credentials = *std::move(public_credentials);
  common::CallAuthOptions public_auth;
  if (!o->public_listener.api_key_file.empty()) {
    absl::StatusOr<common::TokenSet> keys =
        common::TokenSet::FromFile(o->public_listener.api_key_file, "--api-key-file");
    if (!keys.ok()) return keys.status();
    public_auth.api_keys = *std::move(keys);
  }
  o->public_authorizer = common::CallAuthorizer(std::move(public_auth));

  // The admin listener: mutual TLS like every cluster listener.
  rs.admin_credentials = cluster->server_credentials;
  common::CallAuthOptions admin_auth;
  if (!o->admin_token_file.empty()) {
    absl::StatusOr<common::TokenSet> tokens =
        common::TokenSet::FromFile(o->admin_token_file, "--admin-token-file");
    if (!tokens.ok()) return tokens.status();
    admin_auth.admin_tokens = *std::move(tokens);
  }
  if (insecure && !o->admin_cert_names.empty()) {
    return absl::InvalidArgumentError("--admin-cert-name needs TLS, not --insecure");
  }
  admin_auth.cluster_tokens = cluster->cluster_tokens;
  admin_auth.cluster_by_client_cert = !insecure;
  admin_auth.admin_cert_names = o->admin_cert_names;
  admin_auth.open_cluster = !cluster->authenticated();
  admin_auth.open_admin = insecure && admin_auth.admin_tokens.empty();
  absl::StatusOr<common::HostPort> admin_host = common::ParseHostPort(o->admin_listen);
  if (!admin_host.ok()) return admin_host.status();
  if (admin_auth.open_admin && !IsLoopbackHost(admin_host->host)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--admin-listen ", o->admin_listen,
        " is not a loopback address, and with --insecure and no --admin-token-file anyone who "
        "reaches it could run the Admin API; give --admin-token-file"));
  }
  if (admin_auth.open_admin) {
    spdlog::warn("the Admin API on {} needs no credential (--insecure, no --admin-token-file); "
                 "anyone on this host can use it", o->admin_listen);
  } else if (admin_auth.admin_tokens.empty() && admin_auth.admin_cert_names.empty()) {
    spdlog::warn("no --admin-token-file or --admin-cert-name: every Admin RPC but worker "
                 "registration will be refused");
  }
  rs.admin_authorizer = common::CallAuthorizer(std::move(admin_auth));
  o->worker_dialer = cluster->dialer;
  return rs;
}

}  // namespace mlaserve::router
