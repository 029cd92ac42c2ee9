// Transport security of every mlaserve listener and channel: TLS from PEM files, or plaintext
// only when asked for with --insecure.
//
// One cluster CA signs the certificate of every router and worker. Servers present their
// certificate and check client certificates against the CA (mutual TLS); clients check the
// server's certificate against the CA and present their own. docs/security.md says which
// listener asks for what.
//
//   TlsOptions tls;                      // flags: --insecure | --tls-cert --tls-key --tls-ca
//   AddTlsFlags(app, &tls);
//   RETURN_IF_ERROR(ValidateTlsOptions(tls, TlsPeer::kServer));
//   ASSIGN_OR_RETURN(auto creds, MakeServerCredentials(tls, ClientCertPolicy::kRequestAndVerify));
//   ASSIGN_OR_RETURN(auto dialer, ClusterDialer::Create(tls, cluster_token));
//   auto channel = dialer->Dial("decode-0:8200", args);
#pragma once

#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace CLI {
class App;
}

namespace mlaserve::common {

struct TlsOptions {
  bool insecure = false;  // plaintext, chosen explicitly
  std::string cert_file;  // PEM certificate chain of this process
  std::string key_file;   // PEM private key of cert_file
  std::string ca_file;    // PEM CA bundle that peers' certificates must chain to
  // The name peers' server certificates are checked against instead of the host dialed (one
  // certificate for a whole cluster; worker addresses are often bare pod IPs). Empty: the host.
  std::string server_name;
};

// What a party must hold: a server (and a cluster member dialing others) needs its own
// certificate and key; a client such as mlaservectl needs only the CA (a certificate is
// optional, for mutual TLS).
enum class TlsPeer { kServer, kClient };

// Registers --insecure, --tls-cert, --tls-key, --tls-ca and --tls-server-name.
void AddTlsFlags(CLI::App& app, TlsOptions* options);

// INVALID_ARGUMENT naming the flag when neither --insecure nor the TLS files are given, when
// both are, when a file is missing or unreadable, or when a certificate comes without its key.
absl::Status ValidateTlsOptions(const TlsOptions& options, TlsPeer peer);

// How a TLS server treats client certificates. Verification is always against ca_file.
enum class ClientCertPolicy {
  kNone,              // not asked for (a public listener)
  kRequestAndVerify,  // asked for, checked when sent; a call may authenticate another way
  kRequireAndVerify,  // the handshake fails without one
};

// Plaintext credentials when options.insecure.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsOptions& options, ClientCertPolicy policy);

// Adds the bearer token (when not empty) as "authorization: Bearer <token>" to every call on
// channels it dials; with TLS the channel checks the server against ca_file and presents
// cert_file when one is set. Thread-safe; cheap to share.
class ClusterDialer {
 public:
  static absl::StatusOr<std::shared_ptr<const ClusterDialer>> Create(const TlsOptions& options,
                                                                     std::string bearer_token);
  // Plaintext, no token: in-process tests.
  static std::shared_ptr<const ClusterDialer> Insecure();

  std::shared_ptr<grpc::Channel> Dial(const std::string& address,
                                      grpc::ChannelArguments args) const;
  bool insecure() const { return insecure_; }

 private:
  ClusterDialer() = default;
  bool insecure_ = true;
  std::shared_ptr<grpc::ChannelCredentials> credentials_;
  std::string server_name_;
  std::string bearer_token_;
};

// The contents of `path`, INVALID_ARGUMENT naming `flag` when it cannot be read.
absl::StatusOr<std::string> ReadPemFile(const std::string& path, const std::string& flag);

}  // namespace mlaserve::common
